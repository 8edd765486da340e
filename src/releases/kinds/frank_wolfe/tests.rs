use super::*;
use crate::domain::dataset::tests::record;
use crate::dp::fixed::{FRACTION_BITS, Fixed};
use crate::dp::reference;
use crate::releases::kinds::summed_in_parts;
use crate::releases::kinds::test_rows::{Tightness, normal};
use crate::snapshots::Columns;
use crate::snapshots::{CHUNK_ROWS, OwnedRow, Shape};
use rand::rngs::ChaCha8Rng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

fn knobs(epsilon: f64, delta: f64) -> Knobs {
    Knobs {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(delta).unwrap(),
        max_groups: 1,
    }
}

fn params(target: &str, radius: f64, steps: u32) -> FrankWolfeParams {
    FrankWolfeParams {
        target: target.to_owned(),
        radius,
        steps,
        fit_intercept: true,
        selection: Selection::Laplace,
        sources: Vec::new(),
        debias: None,
    }
}

fn dataset(unit: PrivacyUnit, n: u64) -> DatasetRecord {
    let mut dataset = record();
    dataset.privacy_unit = unit;
    dataset.n_rows = n;
    dataset.id = uuid::Uuid::new_v4();
    dataset
}

fn loss_of(planned: &dyn Planned) -> PrivacyLoss {
    planned.price().loss.clone().unwrap()
}

#[test]
fn per_step_epsilon_is_the_independent_references_for_both_selections() {
    let mut checked = 0;
    for point in reference::learners().per_step {
        let selection = match point.loss.as_str() {
            "pure" => Selection::Laplace,
            "bounded_range" => Selection::Exponential,
            _ => continue,
        };
        if point.steps > MAX_STEPS {
            continue;
        }
        let mut request = params("label", 1.0, point.steps);
        request.selection = selection;
        let planned = plan(
            &dataset(PrivacyUnit::Row, 500),
            &[],
            &request,
            &knobs(point.epsilon, point.delta),
        )
        .unwrap();
        let PrivacyLoss::Composition { count, each } = loss_of(planned.as_ref()) else {
            panic!("T > 1 steps compose");
        };
        assert_eq!(count, point.steps);
        let step = match *each {
            PrivacyLoss::PureEpsilon { epsilon } if selection == Selection::Laplace => epsilon,
            PrivacyLoss::BoundedRange { epsilon } if selection == Selection::Exponential => epsilon,
            other => panic!("{selection:?} recorded {other:?}"),
        };
        // The reference is exact; the ledger's value is on its 10⁻⁹ grid,
        // rounded down.
        assert!(
            step <= point.per_step && step > point.per_step - 2e-9,
            "{selection:?} T = {}: ε₀ = {step}, reference {}",
            point.steps,
            point.per_step
        );
        checked += 1;
    }
    assert!(checked >= 2, "the reference has both selections");
}

#[test]
fn score_sensitivity_is_lemma_value_under_each_unit_and_the_noise_follows_it() {
    // N = 500, r = 1, reach 2: Δ_s = 2·1·2/500 under `row`, 2/500 under
    // `label` plus the grid's rounding, 3 units of r·reach/N·2⁻⁴⁰ each.
    let knobs = knobs(1.0, 1e-6);
    let rounding = 3.0 * 2f64.powi(-FRACTION_BITS) * (1.0 * 2.0 / 500.0);
    for (unit, expected) in [
        (PrivacyUnit::Row, 0.008),
        (PrivacyUnit::Label, 0.004 + rounding),
    ] {
        let planned = plan(&dataset(unit, 500), &[], &params("label", 1.0, 50), &knobs).unwrap();
        let price = planned.price();
        assert!(
            // Within float ulps, well inside the rounding term (1.1·10⁻¹⁴).
            (price.sensitivity - expected).abs() < 1e-16,
            "{unit:?}: {} against {expected}",
            price.sensitivity
        );
        // Ledger-calibrated Laplace: b = 2Δ′/ε₀ with ε₀ = 0.032494 is about
        // 61.6·Δ_s (LEARNERS.md §3).
        let ratio = price.noise.scale / expected;
        assert!((61.5..61.7).contains(&ratio), "{unit:?}: b = {ratio}·Δ_s");
        assert_eq!(price.noise.mechanism, "report_noisy_min");
    }
    // A `row` source makes the bound `row` for everyone.
    let target = dataset(PrivacyUnit::Label, 500);
    let source = dataset(PrivacyUnit::Row, 500);
    let mut request = params("label", 1.0, 50);
    request.sources = vec![source.id];
    let planned = plan(&target, &[source], &request, &knobs).unwrap();
    assert!((planned.price().sensitivity - 4.0 / 1000.0).abs() < 1e-15);
    assert_eq!(planned.price().n, 1000);
}

#[test]
fn every_source_is_charged_the_first_stage_and_the_target_both() {
    let knobs = knobs(1.0, 1e-6);
    let target = dataset(PrivacyUnit::Row, 500);
    let sources = [
        dataset(PrivacyUnit::Row, 300),
        dataset(PrivacyUnit::Row, 200),
    ];
    let mut request = params("measure:value", 1.0, 50);
    request.sources = sources.iter().map(|source| source.id).collect();
    let planned = plan(&target, &sources, &request, &knobs).unwrap();
    let charge = planned.source_charge().unwrap();
    assert_eq!(charge.loss, loss_of(planned.as_ref()));
    assert_eq!((charge.epsilon, charge.delta), (knobs.epsilon, knobs.delta));
    // With a debias stage: the target pays for two stages, split 70/30;
    // the sources for the first at its share.
    request.debias = Some(DebiasParams {
        radius: 0.2,
        steps: 20,
        epsilon_share: 0.3,
    });
    let planned = plan(&target, &sources, &request, &knobs).unwrap();
    let charge = planned.source_charge().unwrap();
    assert_eq!(charge.epsilon.value(), 0.7);
    assert!((charge.delta.value() - 7e-7).abs() < 1e-18);
    let PrivacyLoss::Sequence { parts } = loss_of(planned.as_ref()) else {
        panic!("two stages make a sequence");
    };
    assert_eq!(parts[0], charge.loss);
    let PrivacyLoss::Composition { count: 20, each } = &parts[1] else {
        panic!("the second stage composes its 20 steps");
    };
    let PrivacyLoss::PureEpsilon { epsilon } = **each else {
        panic!("Laplace steps are pure");
    };
    assert!(epsilon > 0.3 / 20.0, "RDP beats ε/T at δ > 0: {epsilon}");
    // Without sources nothing is charged elsewhere.
    request.sources.clear();
    assert!(
        plan(&target, &[], &request, &knobs)
            .unwrap()
            .source_charge()
            .is_none()
    );
}

#[test]
fn bad_settings_and_mismatched_sources_are_refused_before_anything_is_read() {
    let knobs = knobs(1.0, 1e-6);
    let target = dataset(PrivacyUnit::Label, 500);
    let refused = |request: &FrankWolfeParams, sources: &[DatasetRecord], needle: &str| {
        let Err(ReleaseError::Invalid(message)) = plan(&target, sources, request, &knobs) else {
            panic!("{needle}: accepted");
        };
        assert!(message.contains(needle), "{needle}: {message}");
    };
    refused(&params("label", 0.0, 50), &[], "radius must be in (0, 100]");
    refused(
        &params("label", 100.5, 50),
        &[],
        "radius must be in (0, 100]",
    );
    refused(
        &params("label", 1.0, 0),
        &[],
        "steps must be from 1 to 1000",
    );
    refused(
        &params("label", 1.0, 1001),
        &[],
        "steps must be from 1 to 1000",
    );
    refused(&params("value", 1.0, 50), &[], "`label` or `measure:NAME`");
    refused(
        &params("measure:spend", 1.0, 50),
        &[],
        "no measure \"spend\"",
    );
    let mut debias = params("label", 1.0, 50);
    for share in [0.0, 1.0, f64::NAN] {
        debias.debias = Some(DebiasParams {
            radius: 0.2,
            steps: 20,
            epsilon_share: share,
        });
        refused(&debias, &[], "debias.epsilon_share must be in (0, 1)");
    }
    // Sources: other features, other bounds, another measure's bounds, no
    // rows.
    let mut other = dataset(PrivacyUnit::Label, 100);
    other.schema.features[1].max = 6.0;
    refused(
        &params("label", 1.0, 50),
        &[other],
        "other features or feature bounds",
    );
    let mut renamed = dataset(PrivacyUnit::Label, 100);
    renamed.schema.features[0].name = "g0".to_owned();
    refused(&params("label", 1.0, 50), &[renamed], "other features");
    let mut bounds = dataset(PrivacyUnit::Label, 100);
    bounds.schema.measures[0].max = 50.0;
    refused(
        &params("measure:value", 1.0, 50),
        &[bounds.clone()],
        "other bounds for the target",
    );
    // The label has no bounds to differ.
    assert!(plan(&target, &[bounds], &params("label", 1.0, 50), &knobs).is_ok());
    refused(
        &params("label", 1.0, 50),
        &[dataset(PrivacyUnit::Row, 0)],
        "has no rows yet",
    );
    // The list itself.
    let id = target.id;
    let listed = |sources: Vec<uuid::Uuid>| check_sources(&sources, id);
    assert!(listed(vec![uuid::Uuid::new_v4(); 2]).is_err());
    assert!(listed(vec![id]).is_err());
    assert!(listed((0..33).map(|_| uuid::Uuid::new_v4()).collect()).is_err());
    assert!(listed((0..32).map(|_| uuid::Uuid::new_v4()).collect()).is_ok());
}

/// `n` rows of a measure target y = a·x₀ + b·x₁ + c + noise on the test
/// schema (f0 ∈ [0, 1], f1 ∈ [−5, 5], value ∈ [0, 100]), features drawn by
/// `feature`.
fn regression_rows(
    rng: &mut ChaCha8Rng,
    n: usize,
    noise: f64,
    mut feature: impl FnMut(&mut ChaCha8Rng) -> [f64; 2],
) -> Vec<OwnedRow> {
    (0..n)
        .map(|index| {
            let [x0, x1] = feature(rng);
            let y = 30.0 * x0 + 4.0 * x1 + 40.0 + noise * normal(rng);
            OwnedRow {
                id: format!("r{index}"),
                label: u8::from(rng.random_bool(0.5)),
                // Stored scaled into [0, 1].
                features: vec![x0 as f32, ((x1 + 5.0) / 10.0) as f32],
                measures: vec![y.clamp(0.0, 100.0)],
                dimensions: vec![0],
            }
        })
        .collect()
}

fn participant(rows: &[OwnedRow], outcome: Outcome) -> Participant<Columns> {
    let shape = Shape::of(&record().schema);
    Participant {
        rows: Columns::of_rows(shape, rows),
        outcome,
    }
}

fn uniform_features(rng: &mut ChaCha8Rng) -> [f64; 2] {
    [rng.random::<f64>(), rng.random_range(-5.0..5.0)]
}

fn measure_fit() -> Fit {
    Fit {
        target: Target {
            name: "measure:value".to_owned(),
            centre: 50.0,
            scale: 50.0,
        },
        intercept: true,
    }
}

/// Noise-off: every exact score of neighbouring datasets (under each unit,
/// for the label and a measure target, at random points of the ball) moves
/// by at most the stage's declared Δ_s, in integer units, and some pair
/// comes close to it.
#[test]
fn neighbouring_datasets_move_each_vertex_score_by_at_most_the_declared_sensitivity() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let n = 12;
    let mut tightness = Tightness::new(2);
    for pair in 0..4000 {
        let unit = if pair % 2 == 0 {
            PrivacyUnit::Row
        } else {
            PrivacyUnit::Label
        };
        let measure = pair % 4 < 2;
        let (outcome, fit) = if measure {
            (Outcome::Measure(0), measure_fit())
        } else {
            let (target, outcome) = Target::parse("label", &record().schema).unwrap();
            (
                outcome,
                Fit {
                    target,
                    intercept: true,
                },
            )
        };
        // Features at the corners half the time, where the bound is met.
        let corner = |rng: &mut ChaCha8Rng| {
            if rng.random_bool(0.5) {
                [
                    f64::from(u8::from(rng.random_bool(0.5))),
                    if rng.random_bool(0.5) { 5.0 } else { -5.0 },
                ]
            } else {
                uniform_features(rng)
            }
        };
        let rows = regression_rows(&mut rng, n, 200.0, corner);
        let mut neighbour = rows.clone();
        let changed = rng.random_range(0..n);
        let replacement = regression_rows(&mut rng, 1, 200.0, corner).remove(0);
        match unit {
            PrivacyUnit::Row => {
                neighbour[changed] = OwnedRow {
                    id: rows[changed].id.clone(),
                    ..replacement
                };
            }
            PrivacyUnit::Label => {
                neighbour[changed].label ^= 1;
                neighbour[changed].measures = replacement.measures;
            }
            PrivacyUnit::User => unreachable!("the tests pair rows under label and row"),
        }
        // A random point of the ball ‖θ‖₁ ≤ r, often on its surface.
        let radius = [0.5, 1.0, 3.0][pair % 3];
        let mut theta: Vec<f64> = (0..3).map(|_| rng.random_range(-1.0..1.0)).collect();
        let l1: f64 = theta.iter().map(|v: &f64| v.abs()).sum();
        let scale = if rng.random_bool(0.5) {
            radius / l1
        } else {
            rng.random::<f64>() * radius / l1
        };
        theta.iter_mut().for_each(|v| *v *= scale);
        let row = unit == PrivacyUnit::Row;
        let stage = Stage::price(
            SelectionRule::Laplace,
            (Epsilon::new(1.0).unwrap(), Delta::new(1e-6).unwrap()),
            (1, radius, radius + 1.0),
            (n as u64, 3),
            &[if row { Unit::Row } else { Unit::Label }],
        )
        .unwrap();
        // The stage's Δ_s in units of a normalised score Sⱼ: an integer
        // under `row`, the grid's bound under `label`.
        let declared = if row {
            stage.region.side_units() as f64
        } else {
            stage.region.coordinate_units(2.0)
        };
        // The declared Δ_s in score units is that many units.
        let in_score_units = declared * 2f64.powi(-FRACTION_BITS) * stage.unit;
        assert!(
            (stage.sensitivity - in_score_units).abs() <= 1e-12 * in_score_units,
            "pair {pair}: Δ_s {} against {in_score_units}",
            stage.sensitivity
        );
        let sums = |rows: &[OwnedRow]| -> Vec<i128> {
            gradient(&[participant(rows, outcome)], &fit, &theta, &stage.region).unwrap()
        };
        let (a, b) = (sums(&rows), sums(&neighbour));
        let gap = a.iter().zip(&b).map(|(x, y)| x.abs_diff(*y)).max().unwrap();
        // Exactly, in integers (a gap below 2⁵³ is an exact float).
        assert!(gap < 1 << 53, "pair {pair}: gap {gap}");
        assert!(
            (gap as f64) <= declared,
            "pair {pair} ({unit:?}, r = {radius}): moved {gap} units, declared {declared}"
        );
        tightness.record(usize::from(row), gap as f64, declared, || {
            format!("pair {pair} ({unit:?}, r = {radius})")
        });
    }
    tightness.attained(0, 0.9, "label");
    tightness.attained(1, 0.9, "row");
}

/// Unit `user`, noise-off: removing a person's k ≤ m rows (at the
/// corners, where the bound is met) moves every exact score by at most
/// m·2⁴⁰ units, half the box's side a row, and the stage reports no N.
#[test]
fn a_person_moves_every_score_by_at_most_m_rows_worth() {
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    let m = 4u32;
    let bounds = crate::dp::contribution::ContributionBounds::new(m, None, None).unwrap();
    let stage = Stage::price(
        SelectionRule::Laplace,
        (Epsilon::new(1.0).unwrap(), Delta::new(1e-6).unwrap()),
        (1, 1.0, 2.0),
        (crate::dp::contribution::MAX_ROWS, 3),
        &[Unit::User(bounds), Unit::Label],
    )
    .unwrap();
    let declared = stage.region.side_units() as f64 / 2.0 * f64::from(m);
    assert_eq!(declared, f64::from(m) * 2f64.powi(FRACTION_BITS));
    assert_eq!(stage.n, None);
    // Scores stay sums: Δ_s = m·r·reach.
    assert_eq!(stage.sensitivity, f64::from(m) * 2.0);
    let fit = measure_fit();
    let corner = |rng: &mut ChaCha8Rng| {
        [
            f64::from(u8::from(rng.random_bool(0.5))),
            if rng.random_bool(0.5) { 5.0 } else { -5.0 },
        ]
    };
    let mut most: f64 = 0.0;
    for pair in 0..500 {
        let rows = regression_rows(&mut rng, 60, 200.0, corner);
        let k = rng.random_range(1..=m as usize);
        let kept = &rows[k..];
        let mut theta: Vec<f64> = (0..3).map(|_| rng.random_range(-1.0..1.0)).collect();
        let l1: f64 = theta.iter().map(|v: &f64| v.abs()).sum();
        theta.iter_mut().for_each(|v| *v /= l1);
        let sums = |rows: &[OwnedRow]| {
            gradient(
                &[participant(rows, Outcome::Measure(0))],
                &fit,
                &theta,
                &stage.region,
            )
            .unwrap()
        };
        let (a, b) = (sums(&rows), sums(kept));
        let gap = a.iter().zip(&b).map(|(x, y)| x.abs_diff(*y)).max().unwrap();
        assert!((gap as f64) <= declared, "pair {pair}: {gap} > {declared}");
        most = most.max(gap as f64 / declared);
    }
    assert!(most >= 0.8, "the largest move was {most} of the bound");
}

/// The exact scores are a function of the multiset of rows: the same
/// integers, bit for bit, whatever order each participant's rows are in,
/// whichever order the participants come in and however the rows are
/// split between them (across chunk boundaries, summed on all cores),
/// where float sums of the same terms are not.
#[test]
fn exact_scores_are_the_same_integers_whatever_the_order_of_the_rows() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    // More than a chunk in the first participant, so its sum is split.
    let first = regression_rows(&mut rng, CHUNK_ROWS + 3_617, 30.0, uniform_features);
    let second = regression_rows(&mut rng, 2_999, 30.0, uniform_features);
    let permuted = |rows: &[OwnedRow], rng: &mut ChaCha8Rng| {
        let mut rows = rows.to_vec();
        rows.shuffle(rng);
        rows
    };
    let (first_shuffled, second_shuffled) =
        (permuted(&first, &mut rng), permuted(&second, &mut rng));
    assert_ne!(first_shuffled, first);
    assert_ne!(second_shuffled, second);
    let together = permuted(&[first.clone(), second.clone()].concat(), &mut rng);
    let outcome = Outcome::Measure(0);
    let data = [participant(&first, outcome), participant(&second, outcome)];
    let shuffled = [
        participant(&first_shuffled, outcome),
        participant(&second_shuffled, outcome),
    ];
    let swapped = [
        participant(&second_shuffled, outcome),
        participant(&first_shuffled, outcome),
    ];
    let merged = [participant(&together, outcome)];
    let fit = measure_fit();
    let stage = exact_stage(1.0, 1);
    // The same terms summed as floats, in the rows' order.
    let float_sums = |rows: &[OwnedRow], theta: &[f64]| -> Vec<f64> {
        let mut sum = vec![0.0; 3];
        for row in rows {
            let u = [
                1.0,
                2.0 * f64::from(row.features[0]) - 1.0,
                2.0 * f64::from(row.features[1]) - 1.0,
            ];
            let target = (row.measures[0] - 50.0) / 50.0;
            let residual = u.iter().zip(theta).map(|(a, b)| a * b).sum::<f64>() - target;
            for (slot, value) in sum.iter_mut().zip(u) {
                *slot += residual * value;
            }
        }
        sum
    };
    let mut float_differs = false;
    for theta in [
        [0.0, 0.0, 0.0],
        [0.1, 0.3, 0.4],
        [-0.5, 0.25, 0.25],
        [0.0, 0.0, -1.0],
        [0.3137, -0.2718, 0.1414],
    ] {
        let exact = gradient(&data, &fit, &theta, &stage.region).unwrap();
        assert!(
            exact.iter().all(|&sum| sum != 0),
            "θ = {theta:?}: {exact:?}"
        );
        assert_eq!(
            gradient(&shuffled, &fit, &theta, &stage.region).unwrap(),
            exact,
            "θ = {theta:?}: shuffled rows"
        );
        assert_eq!(
            gradient(&swapped, &fit, &theta, &stage.region).unwrap(),
            exact,
            "θ = {theta:?}: participants swapped"
        );
        assert_eq!(
            gradient(&merged, &fit, &theta, &stage.region).unwrap(),
            exact,
            "θ = {theta:?}: one participant"
        );
        // As the engine sums them: a pass per partition, added up.
        let shape = Shape::of(&record().schema);
        let parts: Vec<Columns> = together
            .chunks(1_001)
            .map(|part| Columns::of_rows(shape, part))
            .collect();
        let fresh = Terms {
            fit: fit.clone(),
            outcome,
            theta: theta.to_vec(),
            region: stage.region.clone(),
            sums: vec![0; 3],
        };
        assert_eq!(
            summed_in_parts(&fresh, &parts).sums,
            exact,
            "θ = {theta:?}: in parts"
        );
        let in_order = [first.clone(), second.clone()].concat();
        float_differs |= float_sums(&in_order, &theta) != float_sums(&together, &theta);
    }
    // The check has teeth: float sums of these rows do depend on order.
    assert!(float_differs, "float sums never depended on the order");
}

#[test]
fn the_model_maps_back_to_raw_units_exactly() {
    let schema = record().schema;
    let target = Target {
        name: "measure:value".to_owned(),
        centre: 50.0,
        scale: 50.0,
    };
    let theta = [0.1, 0.3, -0.2];
    let (weights, intercept) = unfold(&theta, &schema, true, &target);
    for x in [[0.0, -5.0], [1.0, 5.0], [0.25, 1.5]] {
        let v = [2.0 * x[0] - 1.0, 2.0 * (x[1] + 5.0) / 10.0 - 1.0];
        let model = 50.0 + 50.0 * (theta[0] + theta[1] * v[0] + theta[2] * v[1]);
        let raw = intercept + weights[0] * x[0] + weights[1] * x[1];
        assert!((model - raw).abs() < 1e-12, "{x:?}: {model} against {raw}");
    }
    let (weights, intercept) = unfold(&theta[1..], &schema, false, &target);
    let raw = intercept + weights[0] + weights[1] * 5.0;
    assert!((raw - (50.0 + 50.0 * (0.3 - 0.2))).abs() < 1e-12);
}

/// Exact selection (the argmin, no noise): Frank-Wolfe's iterates approach
/// the constrained least-squares fit.
#[test]
fn without_noise_frank_wolfe_finds_the_least_squares_fit_inside_the_ball() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let rows = regression_rows(&mut rng, 4000, 0.0, uniform_features);
    let data = [participant(&rows, Outcome::Measure(0))];
    let fit = measure_fit();
    // y′ = (30x₀ + 4x₁ + 40 − 50)/50 = 0.3v₀ + 0.4v₁ + 0.1 (v = 2x̃ − 1):
    // ‖θ*‖₁ = 0.8, inside r = 1.
    let stage = exact_stage(1.0, 500);
    let argmin = |scores: &Fixed| {
        Ok(scores
            .units
            .iter()
            .enumerate()
            .fold(
                (0, i128::MAX),
                |best, (index, &s)| {
                    if s < best.1 { (index, s) } else { best }
                },
            )
            .0)
    };
    let theta = stage.run(&data, &fit, &[0.0; 3], argmin).unwrap();
    for (got, want) in theta.iter().zip([0.1, 0.3, 0.4]) {
        assert!((got - want).abs() < 0.01, "θ = {theta:?}");
    }
    // On a smaller ball the fit sits on its surface.
    let theta = exact_stage(0.5, 500)
        .run(&data, &fit, &[0.0; 3], argmin)
        .unwrap();
    let l1: f64 = theta.iter().map(|v| v.abs()).sum();
    assert!((l1 - 0.5).abs() < 1e-3, "‖θ‖₁ = {l1}");
}

/// A stage for tests: its selector is unused when `run` is given one.
fn exact_stage(radius: f64, steps: u32) -> Stage {
    Stage::price(
        SelectionRule::Laplace,
        (Epsilon::new(1.0).unwrap(), Delta::new(1e-6).unwrap()),
        (steps, radius, radius + 1.0),
        (4000, 3),
        &[Unit::Row],
    )
    .unwrap()
}

/// Seed 001's claim, under calibrated noise (LEARNERS.md "Seed 001"): more
/// source rows lower the target's test error, because the noise on each
/// score falls as 1/N_total while the fit's own error falls too.
#[test]
fn test_error_falls_as_sources_are_added() {
    let knobs = knobs(1.0, 1e-6);
    let n = 500;
    let seeds = 12;
    let mut errors = Vec::new();
    for sources in [0usize, 5, 20] {
        let mut total = 0.0;
        for seed in 0..seeds {
            let mut rng = ChaCha8Rng::seed_from_u64(100 + seed);
            let target_rows = regression_rows(&mut rng, n, 10.0, uniform_features);
            let mut data = vec![participant(&target_rows, Outcome::Measure(0))];
            let mut records = Vec::new();
            for _ in 0..sources {
                let rows = regression_rows(&mut rng, n, 10.0, uniform_features);
                data.push(participant(&rows, Outcome::Measure(0)));
                records.push(dataset(PrivacyUnit::Row, n as u64));
            }
            let mut request = params("measure:value", 1.0, 50);
            request.sources = records.iter().map(|source| source.id).collect();
            let planned = plan(
                &dataset(PrivacyUnit::Row, n as u64),
                &records,
                &request,
                &knobs,
            )
            .unwrap();
            let stage = Stage::price(
                SelectionRule::Laplace,
                (knobs.epsilon, knobs.delta),
                (50, 1.0, 2.0),
                (planned.price().n, 3),
                &[Unit::Row],
            )
            .unwrap();
            // The stage run here is the one the release priced.
            assert_eq!(stage.sensitivity, planned.price().sensitivity);
            assert_eq!(
                stage.selector.scale() * stage.unit,
                planned.price().noise.scale
            );
            let fit = measure_fit();
            let theta = stage
                .run(&data, &fit, &[0.0; 3], |scores| {
                    stage
                        .selector
                        .select_fixed(scores, &mut rng)
                        .map(|(index, _)| index)
                })
                .unwrap();
            // Squared error of the fitted mean on a grid of test points, in
            // the target's raw units.
            let (weights, intercept) = unfold(&theta, &record().schema, true, &fit.target);
            for i in 0..10 {
                for j in 0..5 {
                    let x = [f64::from(i) / 9.0, -5.0 + 2.5 * f64::from(j)];
                    let truth = 30.0 * x[0] + 4.0 * x[1] + 40.0;
                    let fitted = intercept + weights[0] * x[0] + weights[1] * x[1];
                    total += (fitted - truth).powi(2);
                }
            }
        }
        errors.push(total / seeds as f64);
    }
    // Measured: 9,902, 2,837 and 1,117 over the 50 test points: each step
    // of sources cuts the error by 2.5 to 3.5 times. A fit that ignored
    // the sources, or noise that did not shrink with N, would not.
    assert!(
        errors[1] < 0.7 * errors[0] && errors[2] < 0.7 * errors[1],
        "SSE by 0, 5, 20 sources: {errors:?}"
    );
}
