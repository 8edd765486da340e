use super::*;
use crate::domain::dataset::tests::record;
use crate::dp::fixed::Fixed;
use crate::dp::reference::{self, assert_close};
use crate::dp::{Accountant, Budget, Charge, Composition, Delta, Epsilon};
use crate::releases::kinds::gradients::{Gradients, Identity};
use crate::releases::kinds::summed_in_parts;
use crate::releases::kinds::test_rows::{Tightness, columns_of, neighbours, normal, random_row};
use crate::releases::kinds::test_rows::{exactly_within, gradient_total, units_apart_squared};
use api::PrivacyUnit;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// A schema of `k` features, as a [`Fit`]'s grid reads it.
fn schema(k: usize) -> Schema {
    let mut schema = record().schema;
    let feature = schema.features[0].clone();
    schema.features = vec![feature; k];
    schema
}

fn params(loss: GradientLoss, calls: Option<u32>) -> GradientParams {
    GradientParams {
        loss,
        target: "label".to_owned(),
        label_values: None,
        clip: 1.0,
        fit_intercept: true,
        mechanism: GradientMechanism::Gaussian,
        theta: calls.is_none().then(|| vec![0.0; 3]),
        calls,
    }
}

fn knobs(epsilon: f64, delta: f64) -> Knobs {
    Knobs {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(delta).unwrap(),
        max_groups: 1,
    }
}

fn dataset(unit: PrivacyUnit, n: u64) -> DatasetRecord {
    let mut dataset = record();
    dataset.privacy_unit = unit;
    dataset.n_rows = n;
    dataset
}

fn label_fit(loss: GradientLoss, values: [f64; 2], clip: f64, fit_intercept: bool) -> Fit {
    Fit {
        loss,
        target: Target::Label { values },
        clip,
        fit_intercept,
    }
}

#[test]
fn a_sessions_call_epsilon_is_the_reference_per_step_epsilon() {
    let points: Vec<_> = reference::learners()
        .per_step
        .into_iter()
        .filter(|point| point.loss == "gaussian" && point.epsilon == 1.0 && point.delta == 1e-6)
        .collect();
    let steps: Vec<u32> = points.iter().map(|point| point.steps).collect();
    assert_eq!(steps, [10, 100, 1000]);
    for point in points {
        let dataset = dataset(PrivacyUnit::Row, 10_000);
        let params = params(GradientLoss::Logistic, Some(point.steps));
        let terms = terms(&dataset, &params, &knobs(1.0, 1e-6), point.steps).unwrap();
        // Only the lattice's rounding separates them.
        let what = format!("ε of one call of {}", point.steps);
        assert_close(terms.call_epsilon, point.per_step, 1e-4, &what);
        let result = terms.result(None, Some(point.steps));
        assert_eq!(result.call_epsilon, terms.call_epsilon);
        assert_eq!(
            result.session,
            Some(api::GradientSession { calls: point.steps })
        );
    }
}

#[test]
fn a_session_is_debited_its_composition_once() {
    let dataset = dataset(PrivacyUnit::Row, 1000);
    let gaussian = knobs(1.0, 1e-6);
    let planned = plan(
        &dataset,
        &params(GradientLoss::Logistic, Some(100)),
        &gaussian,
    )
    .unwrap();
    let loss = planned.price().loss.clone().unwrap();
    let PrivacyLoss::Composition { count: 100, each } = &loss else {
        panic!("100 composed calls: {loss:?}");
    };
    assert!(matches!(**each, PrivacyLoss::Gaussian { .. }), "{each:?}");
    let charge = Charge {
        epsilon: gaussian.epsilon,
        delta: gaussian.delta,
        loss,
    };
    let budget = Budget {
        epsilon: Epsilon::new(10.0).unwrap(),
        delta: Delta::new(1e-6).unwrap(),
    };
    let spent = Composition::of([&charge]).spent(Accountant::Rdp, &budget);
    assert!((0.99..=1.0).contains(&spent.epsilon.value()), "{spent:?}");
    assert_eq!(spent.epsilon_basic.value(), 1.0);
    // Pure ε: ⌊ε/T⌋ a call, T composed.
    assert_eq!(
        norm_gamma_loss(&dataset, GradientLoss::Logistic, 100),
        hundredths()
    );
}

/// What the ledger records for a norm-Gamma request of `calls` calls at
/// ε = 1.
fn norm_gamma_loss(dataset: &DatasetRecord, loss: GradientLoss, calls: u32) -> PrivacyLoss {
    let mut pure = params(loss, Some(calls));
    pure.mechanism = GradientMechanism::NormGamma;
    let planned = plan(dataset, &pure, &knobs(1.0, 0.0)).unwrap();
    planned.price().loss.clone().unwrap()
}

/// ε = 1 as a hundred releases of ε = 0.01.
fn hundredths() -> PrivacyLoss {
    PrivacyLoss::Composition {
        count: 100,
        each: Box::new(PrivacyLoss::PureEpsilon { epsilon: 0.01 }),
    }
}

#[test]
fn neighbouring_datasets_move_the_clipped_gradient_by_at_most_the_sensitivity() {
    let mut rng = ChaCha8Rng::seed_from_u64(2027);
    let mut tight = Tightness::new(4);
    for pair in 0..8_000 {
        let unit = [PrivacyUnit::Label, PrivacyUnit::Row][pair % 2];
        let loss = [GradientLoss::Logistic, GradientLoss::Squared][(pair / 2) % 2];
        let intercept = pair % 8 < 4;
        let k = rng.random_range(1..7);
        let n = rng.random_range(1..25);
        let clip = [0.05, 0.5, 1.0, 3.0, 100.0][rng.random_range(0..5)];
        let values = match loss {
            GradientLoss::Logistic => [0.0, 1.0],
            GradientLoss::Squared => {
                [[0.0, 1.0], [-1.0, 1.0], [3.0, -40.0]][rng.random_range(0..3)]
            }
        };
        let (original, moved, max_norm_squared) = neighbours(&mut rng, unit, n, k);
        // Any θ, large adversarial ones included.
        let scale = [0.1, 3.0, 300.0, 1e6][rng.random_range(0..4)];
        let theta: Vec<f64> = (0..k + usize::from(intercept))
            .map(|_| scale * normal(&mut rng))
            .collect();
        let fit = label_fit(loss, values, clip, intercept);
        let grid = fit.grid(&schema(k)).unwrap();
        let rows = Rows {
            k,
            max_norm_squared,
            intercept,
        };
        let declared = dp_gd::clipped_sensitivity(unit, &grid, &rows, fit.reach());
        // On the exact sums' integers, with no rounding allowed.
        let apart = units_apart_squared(
            &gradient_total(&grid, fit.clone(), &original, &theta, intercept),
            &gradient_total(&grid, fit.clone(), &moved, &theta, intercept),
        );
        let what =
            || format!("pair {pair} ({unit:?}, {loss:?} {values:?}, k = {k}, N = {n}, C = {clip})");
        assert!(
            exactly_within(apart, declared),
            "{}: moved {apart} units², declared {declared}",
            what()
        );
        let gap = (apart as f64).sqrt() * 2f64.powi(-40);
        let class =
            usize::from(unit == PrivacyUnit::Row) + 2 * usize::from(loss == GradientLoss::Squared);
        tight.record(class, gap, declared, what);
    }
    tight.attained(0, 0.95, "logistic, label unit");
    tight.attained(1, 0.9, "logistic, row unit");
    tight.attained(2, 0.95, "squared, label unit");
    tight.attained(3, 0.9, "squared, row unit");
}

#[test]
fn one_call_is_the_mean_of_the_clipped_gradients_by_hand() {
    // Row 1: x = 0.5, y = 1; row 2: x = 1, y = 0.
    let columns = columns_of(&[(vec![0.5], 1), (vec![1.0], 0)], 1);
    let theta = [0.5, -1.0];
    // Squared loss on y ∈ {−1, 1}, C = 1: residuals θᵀu − y.
    let squared = label_fit(GradientLoss::Squared, [-1.0, 1.0], 1.0, true);
    let (r1, r2) = (0.5 - 0.5 - 1.0, 0.5 - 1.0 + 1.0);
    let clip = |r: f64, norm: f64| r * (1.0 / (r.abs() * norm)).min(1.0);
    let (f1, f2) = (clip(r1, 1.25f64.sqrt()), clip(r2, 2f64.sqrt()));
    let expected = [(f1 + f2) / 2.0, (f1 * 0.5 + f2) / 2.0];
    // The mean is the normalised sum times C′/N; C′ = C = 1 (the squared
    // residual is unbounded). Each clipped gradient lands within 2⁻³⁰·C′
    // (the ball's margin) and two units of its value on the grid.
    let grid = squared.grid(&schema(1)).unwrap();
    assert_eq!(grid.clip(), 1.0);
    let mean = |fit: &Fit, grid: &Grid, theta: &[f64]| -> Vec<f64> {
        let unit = grid.clip() / 2.0;
        let exact = gradient_total(grid, fit.clone(), &columns, theta, fit.fit_intercept);
        exact.to_f64().into_iter().map(|sum| sum * unit).collect()
    };
    let got = mean(&squared, &grid, &theta);
    for (got, want) in got.iter().zip(expected) {
        assert!((got - want).abs() <= 2f64.powi(-29), "{got} vs {want}");
    }
    // Logistic without the intercept: (σ(θx) − y)·x, unclipped at C = 10,
    // on the grid of C′ = min(C, 1·√1) = 1.
    let logistic_fit = label_fit(GradientLoss::Logistic, [0.0, 1.0], 10.0, false);
    let grid = logistic_fit.grid(&schema(1)).unwrap();
    assert_eq!(grid.clip(), 1.0);
    let s = |z: f64| 1.0 / (1.0 + (-z).exp());
    let want = ((s(-0.5) - 1.0) * 0.5 + s(-1.0)) / 2.0;
    let got = mean(&logistic_fit, &grid, &[-1.0]);
    assert!((got[0] - want).abs() <= 2f64.powi(-29), "{got:?} vs {want}");
    // The sensitivity a call reports is in the mean's units: the
    // normalised one times C′/N.
    let planned = terms(
        &dataset(PrivacyUnit::Row, 1000),
        &params(GradientLoss::Logistic, None),
        &knobs(1.0, 1e-6),
        1,
    )
    .unwrap();
    let expected = 2.0 * planned.grid.clip() / 1000.0;
    assert_close(planned.sensitivity, expected, 1e-9, "the call's Δ");
    assert_close(
        planned.result(None, None).sigma,
        planned.mechanism.noise_scale() * planned.grid.clip() / 1000.0,
        1e-15,
        "the call's σ",
    );
}

#[test]
fn the_exact_sum_is_the_same_integers_in_any_order_and_chunking() {
    // More rows than a chunk, so the total is summed in parts on several
    // cores; at a large θ the squared loss clips every row, and the
    // logistic one saturates some of them.
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let k = 3;
    let rows: Vec<(Vec<f64>, u8)> = (0..40_000).map(|_| random_row(&mut rng, k)).collect();
    let columns = columns_of(&rows, k);
    for (loss, values, theta) in [
        (
            GradientLoss::Squared,
            [-1.0, 1.0],
            vec![0.3, -2.0, 0.7, 1.5],
        ),
        (
            GradientLoss::Squared,
            [3.0, -40.0],
            vec![50.0, -20.0, 7.0, 1.0],
        ),
        (
            GradientLoss::Logistic,
            [0.0, 1.0],
            vec![-0.5, 4.0, -3.0, 0.25],
        ),
    ] {
        let fit = label_fit(loss, values, 0.7, true);
        let grid = fit.grid(&schema(k)).unwrap();
        let exact = gradient_total(&grid, fit.clone(), &columns, &theta, true);
        assert_eq!(exact.exponent, -40);
        assert!(exact.units.iter().all(|&units| units != 0), "{exact:?}");
        let outcomes = Outcomes {
            fit: &fit,
            columns: &columns,
        };
        let map = Identity(k);
        let reversed = grid.sum(
            &columns,
            (0..rows.len()).rev(),
            &map,
            &outcomes,
            &theta,
            true,
        );
        assert_eq!(Fixed::normalised(reversed), exact, "{loss:?}: reversed");
        // Odd chunks, in a scrambled order, added up afterwards.
        let mut starts: Vec<usize> = (0..rows.len()).step_by(997).collect();
        starts.reverse();
        starts.swap(0, 7);
        let mut chunked = vec![0i128; theta.len()];
        for start in starts {
            let part = grid.sum(
                &columns,
                start..(start + 997).min(rows.len()),
                &map,
                &outcomes,
                &theta,
                true,
            );
            for (total, part) in chunked.iter_mut().zip(part) {
                *total += part;
            }
        }
        assert_eq!(Fixed::normalised(chunked), exact, "{loss:?}: chunked");
        // As the engine sums them: a pass per partition, added up.
        let parts: Vec<Columns> = rows.chunks(4_999).map(|part| columns_of(part, k)).collect();
        let fresh = Gradients::at(&grid, fit.clone(), &theta, true);
        assert_eq!(
            summed_in_parts(&fresh, &parts).total(),
            exact,
            "{loss:?}: in parts"
        );
    }
}

#[test]
fn settings_outside_their_bounds_are_refused() {
    let dataset = dataset(PrivacyUnit::Row, 100);
    let gaussian = knobs(1.0, 1e-6);
    let base = params(GradientLoss::Logistic, None);
    let cases: Vec<(&str, GradientParams, Knobs)> = vec![
        (
            "theta",
            GradientParams {
                theta: Some(vec![0.0; 2]),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "theta",
            GradientParams {
                theta: Some(vec![0.0, f64::NAN, 0.0]),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "theta",
            GradientParams {
                theta: Some(vec![0.0, 2e6, 0.0]),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "theta is required",
            GradientParams {
                theta: None,
                ..base.clone()
            },
            gaussian,
        ),
        (
            "not with `calls`",
            GradientParams {
                calls: Some(10),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "calls",
            GradientParams {
                theta: None,
                calls: Some(0),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "calls",
            GradientParams {
                theta: None,
                calls: Some(10_001),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "squared loss only",
            GradientParams {
                label_values: Some([-1.0, 1.0]),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "label target only",
            GradientParams {
                loss: GradientLoss::Squared,
                target: "measure:value".to_owned(),
                label_values: Some([-1.0, 1.0]),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "must differ",
            GradientParams {
                loss: GradientLoss::Squared,
                label_values: Some([1.0, 1.0]),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "no measure",
            GradientParams {
                target: "measure:nope".to_owned(),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "target must be",
            GradientParams {
                target: "value".to_owned(),
                ..base.clone()
            },
            gaussian,
        ),
        (
            "clip",
            GradientParams {
                clip: 0.0,
                ..base.clone()
            },
            gaussian,
        ),
        ("needs a delta", base.clone(), knobs(1.0, 0.0)),
        (
            "pure ε",
            GradientParams {
                mechanism: GradientMechanism::NormGamma,
                ..base.clone()
            },
            gaussian,
        ),
    ];
    for (says, params, knobs) in cases {
        match plan(&dataset, &params, &knobs) {
            Err(ReleaseError::Invalid(detail)) => {
                assert!(detail.contains(says), "{says:?} not in {detail:?}");
            }
            Err(other) => panic!("{says}: {other}"),
            Ok(_) => panic!("{says}: accepted"),
        }
    }
    // A measure target is scaled into [0, 1]: a residual moves by at most 1.
    let measure = GradientParams {
        target: "measure:value".to_owned(),
        ..base
    };
    assert!(plan(&dataset, &measure, &gaussian).is_ok());
}

/// A dataset of unit `user`, at most `m` rows a person.
fn people_dataset(m: u32) -> DatasetRecord {
    let mut dataset = dataset(PrivacyUnit::User, 1000);
    dataset.schema.users = Some(crate::domain::dataset::Users {
        column: "person".to_owned(),
        bounds: crate::dp::contribution::ContributionBounds::new(m, None, None).unwrap(),
        key: crate::dp::contribution::BoundingKey::new([3; 32]),
    });
    dataset
}

#[test]
fn under_unit_user_the_count_is_priced_as_one_more_call() {
    let dataset = people_dataset(4);
    for (calls, count) in [(None, 2), (Some(100), 101)] {
        let params = params(GradientLoss::Logistic, calls);
        let planned = plan(&dataset, &params, &knobs(1.0, 1e-6)).unwrap();
        let loss = planned.price().loss.clone().unwrap();
        let PrivacyLoss::Composition { count: priced, .. } = &loss else {
            panic!("composed releases: {loss:?}");
        };
        assert_eq!(*priced, count, "{calls:?}");
        // One person moves a call's summed gradient by at most C′ = 1
        // (the clip; m·√d is larger), whatever N; N is not said.
        let terms = terms(&dataset, &params, &knobs(1.0, 1e-6), calls.unwrap_or(1)).unwrap();
        assert_eq!(terms.grid.clip(), 1.0);
        assert_eq!(terms.sensitivity, terms.grid.added());
        assert!(terms.sensitivity <= 1.0 + 1e-9);
        let result = terms.result(None, calls);
        assert_eq!((result.n, result.noisy_rows), (None, None));
    }
    // Pure ε: the count takes one share of ε like a call.
    assert_eq!(
        norm_gamma_loss(&dataset, GradientLoss::Squared, 99),
        hundredths()
    );
    // The squared loss's residual is unbounded: each row is clipped to C
    // before a person's total is, and the total to C again.
    let fit = label_fit(GradientLoss::Squared, [0.0, 1.0], 0.5, true);
    let grid = fit.grid(&dataset.schema).unwrap();
    assert_eq!(grid.clip(), 0.5);
    assert_eq!(grid.of_rows().unwrap().clip(), 0.5);
}
