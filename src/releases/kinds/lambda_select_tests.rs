use super::*;
use crate::domain::dataset::tests::record;
use crate::dp::statistics::{FALSE_FAILURE_RATE, chi_square_p_value};
use crate::dp::{Accountant, Budget, Charge, Composition, gaussian_epsilon};
use ndarray::Array1;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

fn knobs(epsilon: f64, delta: f64) -> Knobs {
    Knobs {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(delta).unwrap(),
        max_groups: 1,
    }
}

fn dataset(n: u64) -> DatasetRecord {
    let mut dataset = record();
    dataset.n_rows = n;
    dataset
}

fn planned(
    learner: Learner,
    candidates: &[f64],
    n: u64,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    plan(learner, &dataset(n), candidates, true, knobs)
}

fn refusal(learner: Learner, candidates: &[f64], n: u64, knobs: &Knobs) -> String {
    match planned(learner, candidates, n, knobs) {
        Err(ReleaseError::Invalid(detail)) => detail,
        Err(other) => panic!("{candidates:?}: {other:?}"),
        Ok(_) => panic!("{candidates:?} at N = {n} was priced"),
    }
}

/// What a ledger of one release spends, under each accountant.
fn spent(loss: PrivacyLoss, epsilon: f64, delta: f64) -> [(f64, f64); 2] {
    let charge = Charge {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(delta).unwrap(),
        loss,
    };
    let budget = Budget {
        epsilon: Epsilon::new(100.0).unwrap(),
        delta: Delta::new(1e-5).unwrap(),
    };
    [Accountant::Rdp, Accountant::Basic].map(|accountant| {
        let spent = Composition::of([&charge]).spent(accountant, &budget);
        (spent.epsilon.value(), spent.delta.value())
    })
}

#[test]
fn every_tenth_row_by_index_is_held_out() {
    let held: Vec<usize> = (0..35).filter(|&i| held_out(i)).collect();
    assert_eq!(held, [9, 19, 29]);
    let design = Design {
        x: Array2::from_shape_fn((35, 2), |(i, j)| (i * 2 + j) as f64),
        y: Array1::from_shape_fn(35, |i| if i % 2 == 0 { 1.0 } else { -1.0 }),
        fit_intercept: false,
    };
    let (training, holdout) = split(&design);
    assert_eq!((training.y.len(), holdout.y.len()), (32, 3));
    assert_eq!(holdout.x.column(0).to_vec(), [18.0, 38.0, 58.0]);
    assert_eq!(training.x.row(9).to_vec(), [20.0, 21.0]);
    assert_eq!(holdout.y.to_vec(), [-1.0, -1.0, -1.0]);
}

#[test]
fn errors_count_held_out_rows_on_the_wrong_side_and_margins_of_zero() {
    let x = Array2::from_shape_vec((4, 2), vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0, -1.0, 0.0]).unwrap();
    let y = Array1::from(vec![1.0, 1.0, -1.0, -1.0]);
    // Margins: 2, 0 (wrong), 1 (wrong: label −1), −2 (right).
    assert_eq!(errors(&[2.0, 0.0], &x, &y), 2);
    assert_eq!(errors(&[0.0, 0.0], &x, &y), 4);
}

#[test]
fn pure_selection_costs_the_requests_epsilon_exactly() {
    let candidates = [1e-1, 1e-3, 1e-4, 1e-5];
    for learner in [Learner::Output, Learner::Objective] {
        let price = planned(learner, &candidates, 100_000, &knobs(1.0, 0.0))
            .unwrap()
            .price()
            .clone();
        let loss = price.loss.clone().unwrap();
        assert_eq!(
            loss,
            PrivacyLoss::Parallel {
                parts: vec![
                    PrivacyLoss::Sequence {
                        parts: vec![PrivacyLoss::PureEpsilon { epsilon: 0.25 }; 4]
                    },
                    PrivacyLoss::PureEpsilon { epsilon: 1.0 },
                ]
            },
            "{learner:?}"
        );
        // The rdp accountant states every ledger at its budget's δ.
        assert_eq!(
            spent(loss, 1.0, 0.0),
            [(1.0, 1e-5), (1.0, 0.0)],
            "{learner:?}"
        );
        assert_eq!(price.noise.mechanism, "report_noisy_max");
        assert_eq!(price.noise.lambda, None);
        // Laplace noise of scale 2Δ/ε on counts of sensitivity 1.
        assert!(
            (price.noise.scale - 2.0).abs() < 1e-5,
            "{}",
            price.noise.scale
        );
    }
    // ε = 1 among 3: ⌊10⁹/3⌋ units each, a unit short of ε in all.
    let loss = planned(Learner::Output, &[1e-2, 1e-3, 1e-4], 1000, &knobs(1.0, 0.0))
        .unwrap()
        .price()
        .loss
        .clone()
        .unwrap();
    let PrivacyLoss::Parallel { parts } = &loss else {
        panic!("{loss:?}")
    };
    assert_eq!(
        parts[0],
        PrivacyLoss::Sequence {
            parts: vec![
                PrivacyLoss::PureEpsilon {
                    epsilon: 0.333_333_333
                };
                3
            ]
        }
    );
}

#[test]
fn gaussian_candidates_compose_to_the_requests_epsilon_and_delta() {
    let candidates = [1e-2, 1e-3, 1e-4];
    let price = planned(Learner::Output, &candidates, 50_000, &knobs(1.0, 1e-6))
        .unwrap()
        .price()
        .clone();
    let loss = price.loss.clone().unwrap();
    let PrivacyLoss::Parallel { parts } = &loss else {
        panic!("{loss:?}")
    };
    let PrivacyLoss::Sequence { parts: trained } = &parts[0] else {
        panic!("{parts:?}")
    };
    // Each candidate is one Gaussian (its own Δ = 2/(N_train·λ), its own
    // σ); together they are one Gaussian of μ with ε(μ, 10⁻⁶) = 1.
    let mu_squared: f64 = trained
        .iter()
        .map(|part| match part {
            PrivacyLoss::Gaussian { sensitivity, sigma } => (sensitivity / sigma).powi(2),
            other => panic!("{other:?}"),
        })
        .sum();
    let epsilon = gaussian_epsilon(mu_squared.sqrt(), 1e-6);
    // Up to the root finder's 10⁻¹² in ε(μ, δ).
    assert!((0.999..=1.0 + 1e-9).contains(&epsilon), "{epsilon}");
    let [(rdp, _), basic] = spent(loss, 1.0, 1e-6);
    assert_eq!(basic, (1.0, 1e-6));
    assert!(rdp <= 1.0 && rdp > 0.99, "{rdp}");
}

#[test]
fn selections_that_could_fail_or_cannot_be_paid_are_refused_before_any_read() {
    let pure = knobs(1.0, 0.0);
    for (learner, candidates, n, knobs, expected) in [
        (
            Learner::Output,
            &[1e-3][..],
            1000,
            pure,
            "2 to 8 candidates",
        ),
        (Learner::Output, &[1e-3; 9][..], 1000, pure, "2 to 8"),
        (Learner::Output, &[1e-3, 1e-3], 1000, pure, "must differ"),
        (Learner::Output, &[1e-3, 1e-4], 9, pure, "at least 10 rows"),
        (Learner::Output, &[1e-3, 1e-4], 0, pure, "no rows"),
        (Learner::Output, &[1e-3, 0.0], 1000, pure, "lambda must be"),
        (Learner::Output, &[1e-3, 1e7], 1000, pure, "lambda must be"),
        (Learner::Output, &[1e-3, 1e-12], 1000, pure, "raise lambda"),
        (
            Learner::Objective,
            &[1e-3, 1e-4],
            1000,
            knobs(1.0, 1e-6),
            "pure ε",
        ),
        (
            Learner::Objective,
            &[1e-3, 1e-4, 1e-5],
            1000,
            knobs(4e-9, 0.0),
            "too small to split",
        ),
    ] {
        let detail = refusal(learner, candidates, n, &knobs);
        assert!(detail.contains(expected), "{candidates:?}: {detail}");
    }
}

/// P(i wins) for report-noisy-min with continuous Laplace noise of scale b
/// on `scores`: ∫ f(z)·Π_{j≠i} P[s_j + Z_j > s_i + z] dz, by the trapezoid
/// rule on steps of b/4000 over ±60b. The selector's noise is discrete on
/// a lattice of spacing ≤ 2⁻²⁰ of the sensitivity, which moves these
/// probabilities by far less than 200,000 draws can see.
fn noisy_min_law(scores: &[f64], b: f64) -> Vec<f64> {
    let above = |x: f64| {
        if x >= 0.0 {
            0.5 * (-x / b).exp()
        } else {
            1.0 - 0.5 * (x / b).exp()
        }
    };
    let step = b / 4000.0;
    let reach = (60.0 * b / step) as i64;
    (0..scores.len())
        .map(|winner| {
            (-reach..=reach)
                .map(|i| {
                    let z = i as f64 * step;
                    let weight = if i.abs() == reach { 0.5 } else { 1.0 };
                    let rivals: f64 = scores
                        .iter()
                        .enumerate()
                        .filter(|&(rival, _)| rival != winner)
                        .map(|(_, &score)| above(scores[winner] + z - score))
                        .product();
                    weight * step * (-z.abs() / b).exp() / (2.0 * b) * rivals
                })
                .sum()
        })
        .collect()
}

#[test]
fn the_pick_follows_report_noisy_max_at_the_requests_epsilon() {
    // Held-out error counts of four candidates at ε = 1: Laplace noise of
    // scale 2 on each count. The negative control is the selector of
    // twice the ε (the bound that holds only for counts that all move the
    // same way), which must fail the same test.
    let errors = [40, 41, 43, 46];
    let scores: Vec<f64> = errors.iter().map(|&count| count as f64).collect();
    let candidates = [1e-1, 1e-2, 1e-3, 1e-4];
    let pick_counts = |epsilon: f64, seed: u64| {
        let selection = priced(
            Learner::Output,
            &dataset(1000),
            &candidates,
            true,
            &knobs(epsilon, 0.0),
        )
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut counts = vec![0u64; 4];
        for _ in 0..200_000 {
            counts[selection.pick(&errors, &mut rng).unwrap()] += 1;
        }
        counts
    };
    let law = noisy_min_law(&scores, 2.0);
    assert!((law.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{law:?}");
    let observed = pick_counts(1.0, 41);
    let p = chi_square_p_value(&observed, &law);
    assert!(
        p > FALSE_FAILURE_RATE,
        "p = {p:e}: {observed:?} against {law:?}"
    );
    let monotone = pick_counts(2.0, 42);
    let p = chi_square_p_value(&monotone, &law);
    assert!(p < FALSE_FAILURE_RATE, "ε = 2 passed: p = {p:e}");
}

#[test]
fn a_clear_winner_is_picked_at_a_large_epsilon() {
    // Labels set by the sign of the first feature: λ = 10⁻³ fits them,
    // λ = 100 shrinks every weight to about zero, where every margin is
    // about 0 and counts as an error.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let n = 4000;
    let x = Array2::from_shape_fn((n, 3), |(_, j)| {
        if j == 2 {
            0.5
        } else {
            rng.random::<f64>() - 0.5
        }
    });
    let y = Array1::from_shape_fn(n, |i| if x[(i, 0)] > 0.0 { 1.0 } else { -1.0 });
    let design = Design {
        x,
        y,
        fit_intercept: true,
    };
    let record = dataset(n as u64);
    let selection = priced(
        Learner::Output,
        &record,
        &[1e2, 1e-3],
        true,
        &knobs(40.0, 0.0),
    )
    .unwrap();
    assert_eq!(selection.rows, (3600, 400));
    assert_eq!(selection.candidate_epsilon, 20.0);
    let (chosen, weights) = selection.select(&design).unwrap();
    assert_eq!(chosen, 1);
    assert_eq!(weights.len(), 3);
    assert!(weights[0] > 1.0, "{weights:?}");
}
