use super::*;
use crate::dp::reference::{self, assert_close};
use crate::dp::statistics::FALSE_FAILURE_RATE;
use crate::dp::{Delta, Epsilon, classic_sigma, gaussian_epsilon};
use crate::releases::kinds::test_rows::{
    Tightness, columns_of, distance, neighbours, normal, random_row,
};
use crate::releases::kinds::test_rows::{
    exactly_within, gradient_total, people_columns, people_rows, units_apart_squared,
};
use crate::snapshots::Columns;
use ndarray::Array2;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// Gaussian noise of T steps on `dims` coordinates of normalised sums of
/// Δ `sensitivity` over `n` rows on `grid`, as [`plan`] prices it.
fn mechanism(
    (e, d): (f64, f64),
    sensitivity: f64,
    (grid, n): (&Grid, u64),
    dims: usize,
    steps: u32,
) -> Mechanism {
    Mechanism::gaussian_steps(
        Epsilon::new(e).unwrap(),
        Delta::new(d).unwrap(),
        sensitivity,
        dims,
        steps,
        grid.range(n),
    )
    .unwrap()
}

/// A descent of one step at `clip`: its grid is the one [`plan`] prices.
fn descent(clip: f64, fit_intercept: bool) -> Descent {
    Descent {
        steps: 1,
        learning_rate: 1.0,
        clip,
        lambda: 0.0,
        radius: None,
        output: Iterate::Last,
        fit_intercept,
        start: Vec::new(),
        people: None,
    }
}

#[test]
fn sigma_matches_the_independent_reference_and_the_slides_sigma_is_loose() {
    for point in reference::learners().dp_gd {
        let what = format!(
            "ε = {}, δ = {}, N = {}, C = {}, k = {}, T = {}",
            point.epsilon, point.delta, point.n, point.clip, point.k, point.steps
        );
        // The reference's Δ is 2·min(C, √d)/N on the mean; the normalised
        // sum's is 2·min(C, √d)/C′, worth C′/N each in the mean.
        let grid = descent(point.clip, true).grid(point.k).unwrap();
        let unit = grid.clip() / point.n as f64;
        let delta_f = sensitivity(PrivacyUnit::Row, &grid, point.k, 0.0, true);
        let reach = 2.0 * point.clip.min(((point.k + 1) as f64).sqrt());
        assert!(
            delta_f >= reach / grid.clip() && delta_f <= reach / grid.clip() + 1e-9,
            "{what}: Δ = {delta_f}"
        );
        assert_close(delta_f * unit, point.sensitivity, 1e-9, &what);
        let gd = mechanism(
            (point.epsilon, point.delta),
            delta_f,
            (&grid, point.n),
            point.k + 1,
            point.steps,
        );
        // Never below the reference; above it only by each step's lattice
        // rounding (γ√d on Δ: σ grows in proportion), σ's rounding up to
        // whole lattice units (2^−23 of σ), and Δ's on the grid (10⁻⁹).
        let sigma = gd.noise_scale() * unit;
        let rounding = gd.grid() * ((point.k + 1) as f64).sqrt() / delta_f;
        assert!(rounding < 2e-4, "{what}: the lattice adds {rounding} of Δ");
        assert!(sigma >= point.sigma * (1.0 - 1e-12), "{what}: σ = {sigma}");
        assert!(
            sigma <= point.sigma * (1.0 + rounding) * (1.0 + 1e-6),
            "{what}: σ = {sigma}"
        );
        // The slides' σ is √T times the textbook σ, and it delivers the
        // reference's ε, not the ε it claims (10.39 for 10, 610 for 150).
        let slides = f64::from(point.steps).sqrt()
            * classic_sigma(
                point.epsilon,
                point.delta,
                2.0 * point.clip / point.n as f64,
            )
            .unwrap();
        assert_close(slides, point.sigma_slides, 1e-12, &what);
        let mu = f64::from(point.steps).sqrt() * point.sensitivity / slides;
        assert_close(
            gaussian_epsilon(mu, point.delta),
            point.epsilon_of_slides_sigma,
            1e-9,
            &what,
        );
    }
}

/// The p-value of a two-sided χ² test that `values` are N(0, σ²).
fn variance_p_value(values: &[f64], sigma: f64) -> f64 {
    let statistic: f64 = values.iter().map(|v| (v / sigma).powi(2)).sum();
    let law = ChiSquared::new(values.len() as f64).unwrap();
    2.0 * law.cdf(statistic).min(law.sf(statistic))
}

#[test]
fn the_step_noise_has_the_calibrated_sigma_and_not_a_forgotten_root_t_or_the_textbook_one() {
    // Seed 000's setting: N = 400, C = 1, k = 2, T = 50, ε = 1, δ = 1e-5.
    // 30,000 steps' noise on 3 coordinates: the sample variance is within
    // 1.1% of σ² at one standard deviation, so a correct sampler passes
    // with probability 1 − 10⁻⁶ and σ off by 3% or more fails.
    let (e, d, n, steps) = (1.0, 1e-5, 400, 50);
    let grid = descent(1.0, true).grid(2).unwrap();
    let sensitivity = sensitivity(PrivacyUnit::Row, &grid, 2, 0.0, true);
    let gd = mechanism((e, d), sensitivity, (&grid, n), 3, steps);
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let zero = Fixed::normalised(vec![0; 3]);
    let values: Vec<f64> = (0..30_000)
        .flat_map(|_| gd.release_fixed(&zero, &mut rng).unwrap())
        .collect();
    let sigma = gd.noise_scale();
    let p = variance_p_value(&values, sigma);
    assert!(
        p >= FALSE_FAILURE_RATE,
        "the calibrated σ is rejected: p = {p}"
    );
    let root = f64::from(steps).sqrt();
    let forgot_root_t = sigma / root;
    let textbook = root * classic_sigma(e, d, gd.accounted_sensitivity()).unwrap();
    for (wrong, what) in [(forgot_root_t, "σ/√T"), (textbook, "√T·textbook σ")] {
        let p = variance_p_value(&values, wrong);
        assert!(p < FALSE_FAILURE_RATE, "{what} = {wrong} passes: p = {p}");
    }
}

#[test]
fn neighbouring_datasets_move_each_clipped_gradient_by_at_most_the_sensitivity() {
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let mut tight = Tightness::new(2);
    for pair in 0..6_000 {
        let unit = [PrivacyUnit::Label, PrivacyUnit::Row][pair as usize % 2];
        let intercept = pair % 4 < 2;
        let k = rng.random_range(1..7);
        let n = rng.random_range(1..25);
        let clip = [0.05, 0.5, 1.0, 3.0, 100.0][rng.random_range(0..5)];
        let (original, moved, max_norm_squared) = neighbours(&mut rng, unit, n, k);
        // Any θ, adversarial ones included: sensitivity may not depend on it.
        let scale = [0.1, 3.0, 300.0][rng.random_range(0..3)];
        let theta: Vec<f64> = (0..k + usize::from(intercept))
            .map(|_| scale * normal(&mut rng))
            .collect();
        let grid = descent(clip, intercept).grid(k).unwrap();
        let declared = sensitivity(unit, &grid, k, max_norm_squared, intercept);
        let total = |columns: &Columns| gradient_total(&grid, Logistic, columns, &theta, intercept);
        // On the exact sums' integers, with no rounding allowed.
        let apart = units_apart_squared(&total(&original), &total(&moved));
        let what = || format!("pair {pair} ({unit:?}, k = {k}, N = {n}, C = {clip})");
        assert!(
            exactly_within(apart, declared),
            "{}: moved {apart} units², declared {declared}",
            what()
        );
        let gap = (apart as f64).sqrt() * 2f64.powi(-40);
        tight.record(usize::from(unit == PrivacyUnit::Row), gap, declared, what);
    }
    // The bounds are nearly attained: they are not loose.
    tight.attained(0, 0.95, "label unit");
    tight.attained(1, 0.9, "row unit");
}

#[test]
fn one_step_is_the_mean_of_the_clipped_gradients_by_hand() {
    // Row 1: x = 0.5, y = 1; row 2: x = 1, y = 0; θ = 0, so σ(θᵀu) = ½.
    let rows = vec![(vec![0.5], 1), (vec![1.0], 0)];
    let columns = columns_of(&rows, 1);
    let clip = 0.5;
    let first = -0.5 * (clip / (0.5 * 1.25f64.sqrt()));
    let second = 0.5 * (clip / (0.5 * 2f64.sqrt()));
    let expected = [(first + second) / 2.0, (first * 0.5 + second) / 2.0];
    // C′ = min(C, √2) = C. Each clipped gradient lands within 2⁻³⁰·C′
    // (the ball's margin) and two units of its value on the grid.
    let grid = descent(clip, true).grid(1).unwrap();
    assert_eq!(grid.clip(), clip);
    let mean: Vec<f64> = gradient_total(&grid, Logistic, &columns, &[0.0, 0.0], true)
        .to_f64()
        .into_iter()
        .map(|sum| sum * grid.clip() / 2.0)
        .collect();
    for (got, want) in mean.iter().zip(expected) {
        assert!(
            (got - want).abs() <= 2f64.powi(-29) * clip,
            "{mean:?} vs {expected:?}"
        );
    }
    // Unclipped at C = 1, exactly on the grid: −½(1, ½) + ½(1, 1) is
    // (0, ¼), 2³⁸ units of C′ = 1.
    let grid = descent(1.0, true).grid(1).unwrap();
    assert_eq!(grid.clip(), 1.0);
    assert_eq!(
        gradient_total(&grid, Logistic, &columns, &[0.0, 0.0], true),
        Fixed::normalised(vec![0, 1 << 38])
    );
    // θ₁ = θ₀ − α(s·C′/N + λθ₀), and the average of one step is that step.
    let descent = Descent {
        steps: 1,
        learning_rate: 2.0,
        clip: 1.0,
        lambda: 0.5,
        radius: None,
        output: Iterate::Average,
        fit_intercept: true,
        start: vec![1.0, -1.0],
        people: None,
    };
    let exact = gradient_total(&grid, Logistic, &columns, &[1.0, -1.0], true).to_f64();
    let theta = descent.run(&columns, |_, s| Ok(s.to_f64())).unwrap().theta;
    let unit = 1.0 / 2.0;
    assert_eq!(
        theta,
        vec![
            1.0 - 2.0 * (exact[0] * unit + 0.5),
            -1.0 - 2.0 * (exact[1] * unit - 0.5)
        ]
    );
}

#[test]
fn iterates_stay_in_the_ball_and_the_average_is_the_mean_iterate() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let rows: Vec<(Vec<f64>, u8)> = (0..50).map(|_| random_row(&mut rng, 3)).collect();
    let columns = columns_of(&rows, 3);
    let mut descent = Descent {
        steps: 20,
        learning_rate: 5.0,
        clip: 1.0,
        lambda: 0.0,
        radius: Some(0.3),
        output: Iterate::Last,
        fit_intercept: true,
        start: vec![4.0, 0.0, 0.0, 3.0],
        people: None,
    };
    let mut seen = Vec::new();
    let noisy = |_: usize, s: &Fixed| -> Result<Vec<f64>, DpError> {
        Ok(s.to_f64().iter().map(|v| v + 0.5).collect())
    };
    let last = descent
        .run(&columns, |step, g| {
            let released = noisy(step, g)?;
            seen.push(step);
            Ok(released)
        })
        .unwrap()
        .theta;
    assert_eq!(seen, (0..20).collect::<Vec<_>>());
    assert!(distance(&last, &[0.0; 4]) <= 0.3 * (1.0 + 1e-15));
    descent.output = Iterate::Average;
    let average = descent.run(&columns, noisy).unwrap().theta;
    let mut iterates = Vec::new();
    for steps in 1..=20 {
        descent.steps = steps;
        descent.output = Iterate::Last;
        iterates.push(descent.run(&columns, noisy).unwrap().theta);
    }
    for j in 0..4 {
        let mean = iterates.iter().map(|theta| theta[j]).sum::<f64>() / 20.0;
        assert!((average[j] - mean).abs() < 1e-12);
    }
}

fn schema(min: &[f64], max: &[f64]) -> Schema {
    let features = min
        .iter()
        .zip(max)
        .enumerate()
        .map(|(j, (&min, &max))| api::BoundedColumn {
            name: format!("x{j}"),
            min,
            max,
        })
        .collect();
    Schema {
        features,
        label: "y".to_owned(),
        measures: Vec::new(),
        dimensions: Vec::new(),
        users: None,
    }
}

fn params(theta0: Option<api::WarmStart>, fit_intercept: bool) -> DpGdParams {
    DpGdParams {
        steps: 100,
        learning_rate: 1.0,
        clip: 1.0,
        lambda: 0.0,
        fit_intercept,
        theta0,
        radius: None,
        output: Iterate::Last,
    }
}

#[test]
fn a_warm_start_in_raw_units_gives_the_same_logits_in_the_stored_space() {
    let schema = schema(&[-2.0, 10.0], &[2.0, 30.0]);
    let warm = api::WarmStart {
        weights: vec![0.5, -0.1],
        intercept: 0.25,
    };
    let theta = start(&params(Some(warm.clone()), true), &schema);
    for raw in [[-2.0, 10.0], [0.0, 17.5], [2.0, 30.0]] {
        let scaled = [(raw[0] + 2.0) / 4.0, (raw[1] - 10.0) / 20.0];
        let logit = theta[0] + theta[1] * scaled[0] + theta[2] * scaled[1];
        let raw_logit = warm.intercept + warm.weights[0] * raw[0] + warm.weights[1] * raw[1];
        assert!((logit - raw_logit).abs() < 1e-12, "{logit} vs {raw_logit}");
    }
    // And the released weights map back to raw units.
    let (weights, intercept) = unfold(&theta, &schema, true);
    assert!((weights[0] - 0.5).abs() < 1e-12 && (weights[1] + 0.1).abs() < 1e-12);
    assert!((intercept - 0.25).abs() < 1e-12);
    // No warm start: zero; no intercept: one coordinate per feature.
    assert_eq!(start(&params(None, true), &schema), vec![0.0; 3]);
    assert_eq!(start(&params(Some(warm), false), &schema).len(), 2);
}

/// Seed 000's mirror: 2-D Gaussians, 30% positives, class means one apart
/// on each axis, clamped into the declared bounds [−4, 5]².
fn seed_000_rows(rng: &mut ChaCha8Rng, n: usize) -> (Array2<f64>, Vec<u8>) {
    let mut x = Array2::zeros((n, 2));
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let label = u8::from(rng.random_bool(0.3));
        for j in 0..2 {
            let raw = f64::from(label) + normal(rng);
            x[[i, j]] = (raw.clamp(-4.0, 5.0) + 4.0) / 9.0;
        }
        y.push(label);
    }
    (x, y)
}

fn accuracy(theta: &[f64], x: &Array2<f64>, y: &[u8]) -> f64 {
    let right = x
        .rows()
        .into_iter()
        .zip(y)
        .filter(|(row, label)| {
            let logit = theta[0] + theta[1] * row[0] + theta[2] * row[1];
            u8::from(logit > 0.0) == **label
        })
        .count();
    right as f64 / y.len() as f64
}

#[test]
fn a_public_warm_start_beats_starting_from_zero_at_epsilon_one() {
    // LEARNERS.md's config A: N = 400, T = 50, α = 1, C = 1, δ = 1e-5.
    // From zero, 50 noisy steps barely leave the constant classifier
    // (≈ 70%); from a model fitted on 2,000 public rows of the same
    // distribution, descent starts near the optimum (≈ 77%). Over 20
    // seeds the mean gap is ≈ 7 points with a standard error below 1, so
    // the bound of 4 points fails a warm start that is ignored, or mapped
    // into the stored space wrongly (which starts it far off), and passes
    // a correct one but with probability < 10⁻⁶.
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let (test_x, test_y) = seed_000_rows(&mut rng, 20_000);
    let (public_x, public_y) = seed_000_rows(&mut rng, 2_000);
    let public = Descent {
        steps: 2_000,
        learning_rate: 4.0,
        clip: 100.0,
        lambda: 0.0,
        radius: None,
        output: Iterate::Last,
        fit_intercept: true,
        start: vec![0.0; 3],
        people: None,
    }
    .run(&Columns::of_labelled(public_x.view(), &public_y), |_, s| {
        Ok(s.to_f64())
    })
    .unwrap()
    .theta;
    let schema = schema(&[-4.0, -4.0], &[5.0, 5.0]);
    let (weights, intercept) = unfold(&public, &schema, true);
    let warm = api::WarmStart { weights, intercept };
    let grid = descent(1.0, true).grid(2).unwrap();
    let sensitivity = sensitivity(PrivacyUnit::Row, &grid, 2, 0.0, true);
    let gd = mechanism((1.0, 1e-5), sensitivity, (&grid, 400), 3, 50);
    let (mut cold_total, mut warm_total) = (0.0, 0.0);
    for _ in 0..20 {
        let (x, y) = seed_000_rows(&mut rng, 400);
        let columns = Columns::of_labelled(x.view(), &y);
        let run = |start: Vec<f64>, rng: &mut ChaCha8Rng| {
            let descent = Descent {
                start,
                ..Descent {
                    steps: 50,
                    learning_rate: 1.0,
                    clip: 1.0,
                    lambda: 0.0,
                    radius: None,
                    output: Iterate::Last,
                    fit_intercept: true,
                    start: Vec::new(),
                    people: None,
                }
            };
            let theta = descent
                .run(&columns, |_, s| gd.release_fixed(s, &mut *rng))
                .unwrap()
                .theta;
            accuracy(&theta, &test_x, &test_y)
        };
        cold_total += run(vec![0.0; 3], &mut rng);
        warm_total += run(start(&params(Some(warm.clone()), true), &schema), &mut rng);
    }
    let (cold, warm) = (cold_total / 20.0, warm_total / 20.0);
    let public_accuracy = accuracy(&public, &test_x, &test_y);
    assert!(
        warm >= cold + 0.04,
        "warm start {warm}, from zero {cold} (public model alone {public_accuracy})"
    );
}

#[test]
fn under_unit_user_the_count_comes_first_and_every_step_sums_people() {
    // 30 people of 1 to 6 rows, as the bounding leaves them (m = 6).
    let mut rng = ChaCha8Rng::seed_from_u64(36);
    let rows = people_rows(&mut rng, 30, 6, 2);
    let columns = people_columns(&rows, 2);
    let descent = Descent {
        steps: 3,
        learning_rate: 1.0,
        clip: 0.5,
        lambda: 0.0,
        radius: None,
        output: Iterate::Last,
        fit_intercept: true,
        start: vec![0.0; 3],
        people: Some(6),
    };
    assert_eq!(descent.releases(), 4);
    let grid = descent.grid(2).unwrap();
    // One person moves a step's sum, or the count, by at most the reach.
    assert_eq!(
        sensitivity(PrivacyUnit::User, &grid, 2, 0.0, true),
        grid.added()
    );
    assert!(grid.added() <= 1.0 + 1e-9, "{}", grid.added());
    assert!(6 * grid.count_weight(6) <= (grid.added() * 2f64.powi(40)) as i128);
    // Without noise: release 0 is N, each row its weight in units; each
    // step then divides the people's clipped totals by it.
    let mut seen = Vec::new();
    let ran = descent
        .run(&columns, |step, s| {
            seen.push(step);
            Ok(s.to_f64())
        })
        .unwrap();
    assert_eq!(seen, vec![0, 1, 2, 3]);
    let n = rows.len() as f64;
    assert_eq!(ran.noisy_rows, Some(n));
    let mut theta = vec![0.0; 3];
    for _ in 0..3 {
        let sum = gradient_total(&grid, Logistic, &columns, &theta, true).to_f64();
        for (weight, sum) in theta.iter_mut().zip(sum) {
            *weight -= sum * (grid.clip() / n);
        }
    }
    assert_eq!(ran.theta, theta);
}
