use super::*;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// A holder without noise: the exact mean logistic gradient of its rows.
struct Exact {
    rows: Vec<(Vec<f64>, f64)>,
}

impl Holder for Exact {
    fn n(&self) -> u64 {
        self.rows.len() as u64
    }

    async fn gradient(&self, _call: u32, theta: &[f64]) -> anyhow::Result<Vec<f64>> {
        let mut mean = vec![0.0; theta.len()];
        for (x, y) in &self.rows {
            let u: Vec<f64> = std::iter::once(1.0).chain(x.iter().copied()).collect();
            let score: f64 = u.iter().zip(theta).map(|(a, b)| a * b).sum();
            let residual = 1.0 / (1.0 + (-score).exp()) - y;
            for (slot, value) in mean.iter_mut().zip(&u) {
                *slot += residual * value / self.rows.len() as f64;
            }
        }
        Ok(mean)
    }
}

/// Rows whose label depends on the first of three features only.
fn rows(n: usize, seed: u64) -> Vec<(Vec<f64>, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let x: Vec<f64> = (0..3).map(|_| rng.random()).collect();
            let p = 1.0 / (1.0 + (-(6.0 * x[0] - 3.0)).exp());
            (x, f64::from(u8::from(rng.random::<f64>() < p)))
        })
        .collect()
}

fn ista(lambda: f64) -> Ista {
    Ista {
        steps: 300,
        learning_rate: 2.0,
        lambda,
        fit_intercept: true,
    }
}

async fn fit(settings: Ista, holders: &[Exact]) -> Vec<f64> {
    settings.run(holders, 4, |_| {}).await.unwrap()
}

#[test]
fn the_soft_threshold_zeroes_what_is_within_tau_and_shrinks_the_rest() {
    assert_eq!(soft_threshold(0.3, 0.5), 0.0);
    assert_eq!(soft_threshold(-0.5, 0.5), 0.0);
    assert_eq!(soft_threshold(2.0, 0.5), 1.5);
    assert_eq!(soft_threshold(-2.0, 0.5), -1.5);
    assert_eq!(soft_threshold(1.0, 0.0), 1.0);
}

#[test]
fn the_combined_gradient_is_the_mean_weighted_by_rows() {
    let mean = weighted_mean(&[vec![1.0, 0.0], vec![4.0, 2.0]], &[300, 100]);
    assert_eq!(mean, vec![1.75, 0.5]);
}

#[tokio::test]
async fn without_noise_distributed_ista_is_pooled_ista() {
    let pooled = rows(3000, 7);
    let split = [
        Exact {
            rows: pooled[..500].to_vec(),
        },
        Exact {
            rows: pooled[500..1800].to_vec(),
        },
        Exact {
            rows: pooled[1800..].to_vec(),
        },
    ];
    let one = [Exact { rows: pooled }];
    let (distributed, central) = (fit(ista(1e-3), &split).await, fit(ista(1e-3), &one).await);
    for (a, b) in distributed.iter().zip(&central) {
        assert!((a - b).abs() < 1e-12, "{distributed:?} against {central:?}");
    }
    // The thesis's sum of the holders' means is pooled ISTA at three times
    // the rate: another model.
    let thesis = Ista {
        learning_rate: 6.0,
        ..ista(1e-3)
    };
    let summed = fit(thesis, &one).await;
    assert!(
        summed
            .iter()
            .zip(&central)
            .any(|(a, b)| (a - b).abs() > 1e-3),
        "{summed:?}"
    );
}

#[tokio::test]
async fn the_l1_penalty_zeroes_the_irrelevant_features_and_spares_the_intercept() {
    let holders = [Exact {
        rows: rows(4000, 3),
    }];
    let sparse = fit(ista(0.02), &holders).await;
    assert_eq!((sparse[2], sparse[3]), (0.0, 0.0), "{sparse:?}");
    assert!(sparse[1] > 1.0, "the relevant feature survives: {sparse:?}");
    // The intercept is fitted, not shrunk towards 0 (it is about −1.5 here).
    assert!(sparse[0] < -0.5, "{sparse:?}");
    let dense = fit(ista(0.0), &holders).await;
    assert!(dense[2] != 0.0 && dense[3] != 0.0, "{dense:?}");
}

#[tokio::test]
async fn a_holder_that_answers_the_wrong_length_stops_the_run() {
    struct Short;
    impl Holder for Short {
        fn n(&self) -> u64 {
            1
        }
        async fn gradient(&self, _call: u32, _theta: &[f64]) -> anyhow::Result<Vec<f64>> {
            Ok(vec![0.0])
        }
    }
    let error = ista(0.0).run(&[Short], 4, |_| {}).await.unwrap_err();
    assert!(
        error.to_string().contains("1 gradient values for 4"),
        "{error}"
    );
}
