use dpgate_learn::synthetic::logistic_data;
use dpgate_learn::{Objective, auc, log1p_exp, sigmoid};
use ndarray::{Array1, Array2, s};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use super::*;

/// The augmented rows x̃ = (x, 1) when fitting an intercept.
fn augmented(x: ndarray::ArrayView2<'_, f64>, intercept: bool) -> Array2<f64> {
    if !intercept {
        return x.to_owned();
    }
    let (rows, k) = x.dim();
    let mut out = Array2::<f64>::ones((rows, k + 1));
    out.slice_mut(s![.., ..k]).assign(&x);
    out
}

/// The exact (noiseless) release over the rows: (1/N)·Σ yᵢ·xᵢ, (1/N)·Σ yᵢ.
fn exact_dot(x: &Array2<f64>, y: &[u8]) -> NoisyDot {
    let n = y.len() as f64;
    let labels: Array1<f64> = y.iter().map(|&label| f64::from(label)).collect();
    NoisyDot {
        dot: (x.t().dot(&labels) / n).to_vec(),
        intercept: Some(labels.sum() / n),
    }
}

/// The reference optimum: Newton's method on the same objective.
fn reference(x: &Array2<f64>, y: &[u8], l2: f64) -> Vec<f64> {
    let augmented = augmented(x.view(), true);
    let signs: Array1<f64> = y
        .iter()
        .map(|&label| if label == 1 { 1.0 } else { -1.0 })
        .collect();
    let objective = Objective {
        x: augmented.view(),
        y: signs.view(),
        lambda: l2,
        linear: None,
        normaliser: None,
    };
    objective.minimise(1e-12).unwrap().weights.to_vec()
}

fn theta(trained: &Trained) -> Vec<f64> {
    trained
        .weights
        .iter()
        .copied()
        .chain(trained.intercept)
        .collect()
}

fn distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn with_the_exact_dot_product_it_reaches_the_non_private_optimum() {
    let data = logistic_data(5_000, 4, 11);
    let l2 = 1e-3;
    let optimum = reference(&data.x, &data.y, l2);
    let config = TrainerConfig {
        epochs: Some(20_000),
        batch_size: usize::MAX,
        decay: 0.0,
        l2,
        tolerance: 1e-12,
        ..TrainerConfig::default()
    };
    let trained = train(data.x.view(), &exact_dot(&data.x, &data.y), &config, |_| {}).unwrap();
    assert!(trained.converged, "{} epochs", trained.epochs.len());
    let got = theta(&trained);
    for (got, want) in got.iter().zip(&optimum) {
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
    // The label-blind loss estimate is the true mean log loss at the end.
    let z = augmented(data.x.view(), true).dot(&Array1::from(got.clone()));
    let loss = z
        .iter()
        .zip(&data.y)
        .map(|(&z, &y)| log1p_exp(z) - f64::from(y) * z)
        .sum::<f64>()
        / 5_000.0;
    let last = trained.epochs.last().unwrap();
    assert!((last.loss - loss).abs() < 1e-9, "{} vs {loss}", last.loss);
    assert!(
        trained
            .epochs
            .windows(2)
            .all(|w| w[1].loss <= w[0].loss + 1e-12)
    );
}

#[test]
fn the_default_epochs_add_up_to_ten_thousand_steps() {
    let defaults = TrainerConfig::default();
    assert_eq!(defaults.planned_epochs(1_000_000), 11);
    assert_eq!(defaults.planned_epochs(10_000), 1_000);
    assert_eq!(defaults.planned_epochs(10_240), 1_000);
    assert_eq!(defaults.planned_epochs(10_241), 910);
    assert_eq!(defaults.planned_epochs(20_000_000), 1);
    // A full batch is one step per epoch.
    assert_eq!(defaults.planned_epochs(252), DEFAULT_STEPS);
    let fixed = TrainerConfig {
        epochs: Some(7),
        ..defaults
    };
    assert_eq!(fixed.planned_epochs(1_000_000), 7);
    // Training runs the planned epochs when it does not converge first.
    let data = logistic_data(50_000, 4, 21);
    let trained = train(
        data.x.view(),
        &exact_dot(&data.x, &data.y),
        &TrainerConfig {
            tolerance: f64::MIN_POSITIVE,
            ..TrainerConfig::default()
        },
        |_| {},
    )
    .unwrap();
    assert_eq!(trained.epochs.len(), 205);
}

#[test]
fn minibatches_land_near_the_optimum_and_stop_early() {
    let data = logistic_data(20_000, 8, 12);
    let optimum = reference(&data.x, &data.y, 1e-4);
    let config = TrainerConfig {
        epochs: Some(200),
        l2: 1e-4,
        tolerance: 1e-3,
        ..TrainerConfig::default()
    };
    let mut seen = 0;
    let trained = train(
        data.x.view(),
        &exact_dot(&data.x, &data.y),
        &config,
        |report| {
            seen += 1;
            assert_eq!(report.epoch, seen);
        },
    )
    .unwrap();
    assert!(trained.converged && seen < 200, "{seen} epochs");
    let error = distance(&theta(&trained), &optimum);
    let scale = optimum.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(error < 0.1 * scale, "‖θ − θ*‖ = {error}, ‖θ*‖ = {scale}");
    // The same seed gives the same model.
    let again = train(data.x.view(), &exact_dot(&data.x, &data.y), &config, |_| {}).unwrap();
    assert_eq!(again, trained);
}

#[test]
fn with_noise_the_model_degrades_smoothly() {
    let data = logistic_data(50_000, 8, 13);
    let test = logistic_data(50_000, 8, 14);
    let exact = exact_dot(&data.x, &data.y);
    let config = TrainerConfig {
        epochs: Some(30),
        ..TrainerConfig::default()
    };
    let score = |trained: &Trained| {
        let z = test.x.dot(&Array1::from(trained.weights.clone())) + trained.intercept.unwrap();
        auc(&z.to_vec(), &test.y).unwrap()
    };
    let clean = train(data.x.view(), &exact, &config, |_| {}).unwrap();
    let clean_theta = theta(&clean);
    let clean_auc = score(&clean);
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let mut previous_error = 0.0;
    for sigma in [1e-4, 1e-3, 1e-2, 1e-1] {
        let (mut error, mut auc_loss) = (0.0, 0.0);
        for _ in 0..5 {
            let mut noisy = exact.clone();
            for value in noisy.dot.iter_mut().chain(noisy.intercept.iter_mut()) {
                // Box–Muller: a standard normal from two uniforms.
                let (u, v): (f64, f64) = (rng.random(), rng.random());
                *value +=
                    sigma * (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            }
            let trained = train(data.x.view(), &noisy, &config, |_| {}).unwrap();
            error += distance(&theta(&trained), &clean_theta) / 5.0;
            auc_loss += (clean_auc - score(&trained)) / 5.0;
        }
        // The error grows with σ, and noise of the size ε = 1 adds at
        // N = 100,000 (σ ≈ 2·10⁻⁴) costs little AUC.
        assert!(
            error > previous_error,
            "σ = {sigma}: {error} ≤ {previous_error}"
        );
        previous_error = error;
        eprintln!("σ = {sigma}: ‖θ − θ_exact‖ = {error:.4}, AUC −{auc_loss:.4}");
        if sigma <= 1e-3 {
            assert!(auc_loss < 0.005, "σ = {sigma}: AUC −{auc_loss}");
        }
    }
}

#[test]
fn without_an_intercept_term_it_fits_none() {
    let data = logistic_data(2_000, 3, 16);
    let mut noisy = exact_dot(&data.x, &data.y);
    noisy.intercept = None;
    let trained = train(data.x.view(), &noisy, &TrainerConfig::default(), |_| {}).unwrap();
    assert_eq!((trained.weights.len(), trained.intercept), (3, None));
}

#[test]
fn bad_input_is_refused() {
    let data = logistic_data(100, 3, 17);
    let good = exact_dot(&data.x, &data.y);
    let run = |x: ndarray::ArrayView2<'_, f64>, noisy: &NoisyDot, config: &TrainerConfig| {
        train(x, noisy, config, |_| {}).unwrap_err()
    };
    let defaults = TrainerConfig::default();
    assert_eq!(
        run(data.x.slice(s![..0, ..]), &good, &defaults),
        TrainError::NoRows
    );
    assert_eq!(
        run(data.x.slice(s![.., ..2]), &good, &defaults),
        TrainError::Dimension {
            release: 3,
            rows: 2
        }
    );
    let mut outside = data.x.clone();
    outside[(7, 1)] = f64::NAN;
    assert_eq!(
        run(outside.view(), &good, &defaults),
        TrainError::Feature { row: 7, column: 1 }
    );
    for config in [
        TrainerConfig {
            epochs: Some(0),
            ..defaults.clone()
        },
        TrainerConfig {
            learning_rate: Some(-1.0),
            ..defaults.clone()
        },
        TrainerConfig {
            l2: f64::NAN,
            ..defaults.clone()
        },
        TrainerConfig {
            tolerance: 0.0,
            ..defaults.clone()
        },
    ] {
        assert!(matches!(
            run(data.x.view(), &good, &config),
            TrainError::Setting(_)
        ));
    }
    let huge = TrainerConfig {
        learning_rate: Some(1e300),
        ..defaults.clone()
    };
    assert!(matches!(
        run(data.x.view(), &good, &huge),
        TrainError::Diverged(_)
    ));
}

#[test]
fn the_model_is_bitwise_the_same_on_one_thread_and_on_two() {
    // 20,500 rows: minibatches of 1000 are three full chunks of work and a
    // short one, the last minibatch is short, and a full batch is 81 chunks.
    let data = logistic_data(20_500, 8, 18);
    let noisy = exact_dot(&data.x, &data.y);
    for batch_size in [1000, usize::MAX] {
        let config = TrainerConfig {
            epochs: Some(5),
            batch_size,
            ..TrainerConfig::default()
        };
        let on_threads = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let trained = pool
                .install(|| train(data.x.view(), &noisy, &config, |_| {}))
                .unwrap();
            let bits: Vec<u64> = theta(&trained).iter().map(|v| v.to_bits()).collect();
            (bits, trained)
        };
        let (one, trained) = on_threads(1);
        let (two, again) = on_threads(2);
        assert_eq!(one, two, "batch size {batch_size}");
        assert_eq!(trained, again);
    }
}

#[test]
fn the_first_bad_feature_in_row_order_is_reported() {
    let mut x = logistic_data(1_000, 3, 19).x;
    x[(900, 0)] = f64::NAN;
    x[(300, 2)] = -0.5;
    x[(300, 1)] = f64::INFINITY;
    let noisy = NoisyDot {
        dot: vec![0.1; 3],
        intercept: Some(0.2),
    };
    assert_eq!(
        train(x.view(), &noisy, &TrainerConfig::default(), |_| {}).unwrap_err(),
        TrainError::Feature {
            row: 300,
            column: 1
        }
    );
}

#[test]
fn with_no_features_the_intercept_fits_the_released_rate() {
    let x = Array2::<f64>::zeros((1_000, 0));
    let noisy = NoisyDot {
        dot: Vec::new(),
        intercept: Some(0.2),
    };
    let config = TrainerConfig {
        decay: 0.0,
        tolerance: 1e-12,
        ..TrainerConfig::default()
    };
    let trained = train(x.view(), &noisy, &config, |_| {}).unwrap();
    let intercept = trained.intercept.unwrap();
    assert!(trained.converged && trained.weights.is_empty());
    assert!(
        (sigmoid(intercept) - 0.2).abs() < 1e-9,
        "σ(b) = {}",
        sigmoid(intercept)
    );
}

#[test]
fn one_exponential_gives_bitwise_the_sigmoid_and_softplus_of_dpgate_learn() {
    let mut rng = ChaCha8Rng::seed_from_u64(20);
    let extremes = [
        0.0, -0.0, 1e-20, -1e-20, 36.0, -37.0, 709.0, -745.0, 800.0, -800.0,
    ];
    let random = (0..10_000).map(|_| (rng.random::<f64>() - 0.5) * 100.0);
    for z in extremes.into_iter().chain(random) {
        let (p, softplus) = sigmoid_softplus(z);
        assert_eq!(p.to_bits(), sigmoid(z).to_bits(), "σ({z})");
        assert_eq!(softplus.to_bits(), log1p_exp(z).to_bits(), "softplus({z})");
    }
}
