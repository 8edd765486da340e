use super::*;
use crate::dp::statistics::{FALSE_FAILURE_RATE, kolmogorov_smirnov_p_value};
use crate::dp::{Delta, Epsilon, Mechanism};
use crate::snapshots::{CHUNK_ROWS, Columns, OwnedRow, STREAM_ROWS, Shape};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use statrs::distribution::{ContinuousCDF, Laplace, Normal};

const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// Label `y`; measures `value` in [0, 100] and `delta` in [−50, 50];
/// dimensions `campaign` (a, b, c) and `device` (web, app).
fn schema() -> Schema {
    let bounded = |name: &str, min: f64, max: f64| api::BoundedColumn {
        name: name.to_owned(),
        min,
        max,
    };
    let dimension = |name: &str, values: &[&str]| api::Dimension {
        name: name.to_owned(),
        values: values.iter().map(|&v| v.to_owned()).collect(),
    };
    Schema {
        features: vec![bounded("f0", 0.0, 1.0)],
        label: "y".to_owned(),
        measures: vec![bounded("value", 0.0, 100.0), bounded("delta", -50.0, 50.0)],
        dimensions: vec![
            dimension("campaign", &["a", "b", "c"]),
            dimension("device", &["web", "app"]),
        ],
    }
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|&name| name.to_owned()).collect()
}

fn query(statistics: &[&str], group_by: &[&str]) -> Query {
    Query::parse(&schema(), &strings(statistics), &strings(group_by), 1000).unwrap()
}

fn row(label: u8, value: f64, delta: f64, campaign: u32, device: u32) -> OwnedRow {
    OwnedRow {
        id: format!("r{label}{value}{campaign}{device}"),
        label,
        features: vec![0.5],
        measures: vec![value, delta],
        dimensions: vec![campaign, device],
    }
}

fn tally(query: &Query, rows: &[OwnedRow]) -> Tally {
    let mut tally = query.tally();
    for row in rows {
        tally.add(query, row.view()).unwrap();
    }
    tally
}

#[test]
fn requests_are_checked_against_the_schema() {
    let schema = schema();
    let parse = |statistics: &[&str], group_by: &[&str], limit: usize| {
        Query::parse(&schema, &strings(statistics), &strings(group_by), limit)
    };
    let q = parse(
        &["count", "mean:y", "sum:value", "mean:value"],
        &["device"],
        10,
    )
    .unwrap();
    assert_eq!(q.cells(), 2);
    assert_eq!(
        q.quantities,
        vec![
            Quantity::Count,
            Quantity::Sum(Column::Label),
            Quantity::Sum(Column::Measure(0))
        ]
    );
    assert_eq!(
        parse(&["count"], &["campaign", "device"], 6)
            .unwrap()
            .cells(),
        6
    );
    let error = |statistics: &[&str], group_by: &[&str], limit: usize| {
        parse(statistics, group_by, limit).unwrap_err()
    };
    assert!(error(&[], &[], 10).contains("between 1 and 16"));
    assert!(error(&["count"; 17], &[], 10).contains("between 1 and 16"));
    assert!(error(&["median:y"], &[], 10).contains("unknown statistic `median:y`"));
    assert!(error(&["count:y"], &[], 10).contains("unknown statistic"));
    assert!(error(&["sum"], &[], 10).contains("unknown statistic"));
    assert!(error(&["sum:f0"], &[], 10).contains("unknown column `f0`"));
    assert!(error(&["mean:nope"], &[], 10).contains("(y, value, delta)"));
    assert!(error(&["count", "count"], &[], 10).contains("twice"));
    assert!(error(&["count"], &["region"], 10).contains("unknown dimension `region`"));
    assert!(error(&["count"], &["device", "device"], 10).contains("twice"));
    assert!(error(&["count"], &["campaign", "device"], 5).contains("more than 5 groups"));
}

#[test]
fn a_dimension_with_a_million_values_is_refused_beyond_the_limit() {
    let mut schema = schema();
    schema.dimensions.push(api::Dimension {
        name: "user".to_owned(),
        values: (0..1_000_000).map(|i| format!("u{i}")).collect(),
    });
    let parse = |group_by: &[&str]| {
        Query::parse(
            &schema,
            &strings(&["count"]),
            &strings(group_by),
            DEFAULT_MAX_GROUPS,
        )
    };
    assert!(
        parse(&["user"])
            .unwrap_err()
            .contains("more than 100000 groups")
    );
    assert!(parse(&["campaign", "device"]).is_ok());
}

#[test]
fn every_entry_of_the_sensitivity_table() {
    let schema = schema();
    let label = Quantity::Sum(Column::Label);
    let value = Quantity::Sum(Column::Measure(0));
    let delta = Quantity::Sum(Column::Measure(1));
    // (unit, grouped, quantity, L2, L1)
    let table = [
        (PrivacyUnit::Label, false, Quantity::Count, 0.0, 0.0),
        (PrivacyUnit::Label, true, Quantity::Count, 0.0, 0.0),
        // Measures are outcomes: as private as the label under `label`.
        (PrivacyUnit::Label, false, value, 100.0, 100.0),
        (PrivacyUnit::Label, true, value, 100.0, 100.0),
        (PrivacyUnit::Label, true, delta, 100.0, 100.0),
        (PrivacyUnit::Label, false, label, 1.0, 1.0),
        (PrivacyUnit::Label, true, label, 1.0, 1.0),
        (PrivacyUnit::Row, false, Quantity::Count, 0.0, 0.0),
        (PrivacyUnit::Row, false, label, 1.0, 1.0),
        (PrivacyUnit::Row, false, value, 100.0, 100.0),
        (PrivacyUnit::Row, false, delta, 100.0, 100.0),
        (PrivacyUnit::Row, true, Quantity::Count, SQRT_2, 2.0),
        (PrivacyUnit::Row, true, label, SQRT_2, 2.0),
        // max(hi − lo, √2·M) and max(hi − lo, 2M): M = 100 and 50.
        (PrivacyUnit::Row, true, value, 100.0 * SQRT_2, 200.0),
        (PrivacyUnit::Row, true, delta, 100.0, 100.0),
    ];
    for (unit, grouped, quantity, l2, l1) in table {
        let bound = bound(unit, grouped, quantity, &schema);
        assert_eq!(
            own_sensitivity(bound, Norm::L2),
            l2,
            "{unit:?} {grouped} {quantity:?}"
        );
        assert_eq!(
            own_sensitivity(bound, Norm::L1),
            l1,
            "{unit:?} {grouped} {quantity:?}"
        );
    }
}

#[test]
fn joint_sensitivity_is_the_worse_of_staying_and_moving() {
    let within = |within| Bound {
        within,
        across: 0.0,
    };
    // Ungrouped: normalised quantities each move by 1 at once.
    assert_eq!(joint_sensitivity(&[within(1.0)], Norm::L2), 1.0);
    let two = joint_sensitivity(&[within(100.0), within(1.0)], Norm::L2);
    assert!((two - SQRT_2).abs() < 1e-15);
    assert_eq!(
        joint_sensitivity(&[within(100.0), within(1.0)], Norm::L1),
        2.0
    );
    // Grouped under row: count (0, 1) and sum of [0, 100] (100, 100).
    let count = Bound {
        within: 0.0,
        across: 1.0,
    };
    let value = Bound {
        within: 100.0,
        across: 100.0,
    };
    // Moving: each normalised quantity moves 1/√2 in two cells: L2² = 2.
    let l2 = joint_sensitivity(&[count, value], Norm::L2);
    assert!((l2 - SQRT_2).abs() < 1e-15, "{l2}");
    // L1: moving gives 2·(1/2) per quantity.
    assert_eq!(joint_sensitivity(&[count, value], Norm::L1), 2.0);
    // Public quantities do not count.
    assert_eq!(
        joint_sensitivity(&[within(0.0), within(3.0)], Norm::L1),
        1.0
    );
    assert_eq!(joint_sensitivity(&[], Norm::L2), 0.0);
}

fn random_row(rng: &mut ChaCha8Rng) -> OwnedRow {
    // Values at the bounds half the time, where the sensitivity is tight.
    let mut measure = |lo: f64, hi: f64| match rng.random_range(0..4) {
        0 => lo,
        1 => hi,
        _ => lo + rng.random::<f64>() * (hi - lo),
    };
    let (value, delta) = (measure(0.0, 100.0), measure(-50.0, 50.0));
    row(
        u8::from(rng.random_bool(0.5)),
        value,
        delta,
        rng.random_range(0..3),
        rng.random_range(0..2),
    )
}

fn distance(a: &[f64], b: &[f64], norm: Norm) -> f64 {
    let gaps = a.iter().zip(b).map(|(x, y)| (x - y).abs());
    match norm {
        Norm::L1 => gaps.sum(),
        Norm::L2 => gaps.map(|gap| gap * gap).sum::<f64>().sqrt(),
    }
}

#[test]
fn neighbouring_datasets_move_the_noised_vector_by_at_most_its_sensitivity() {
    let schema = schema();
    let requests: [(&[&str], &[&str]); 6] = [
        (&["count"], &[]),
        (&["count", "sum:y"], &["campaign"]),
        (&["mean:value", "sum:delta"], &[]),
        (
            &["count", "mean:y", "sum:value", "mean:delta"],
            &["campaign", "device"],
        ),
        (&["sum:value"], &["device"]),
        (&["mean:y"], &["device"]),
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    // Largest gap seen as a share of the bound, per (unit, norm).
    let mut tight = [[0.0f64; 2]; 2];
    for trial in 0..6000 {
        let (statistics, group_by) = requests[rng.random_range(0..requests.len())];
        let query = query(statistics, group_by);
        let unit = if trial % 2 == 0 {
            PrivacyUnit::Label
        } else {
            PrivacyUnit::Row
        };
        let norm = if trial % 4 < 2 { Norm::L2 } else { Norm::L1 };
        let calibration = Calibration::new(&query, unit, &schema, norm);
        let n = rng.random_range(1..20);
        let rows: Vec<OwnedRow> = (0..n).map(|_| random_row(&mut rng)).collect();
        let mut neighbour = rows.clone();
        let changed = rng.random_range(0..n);
        let other = random_row(&mut rng);
        match unit {
            // Another row's outcomes (label and measures) in the same place.
            PrivacyUnit::Label => {
                neighbour[changed].label = other.label;
                neighbour[changed].measures = other.measures;
            }
            PrivacyUnit::Row => neighbour[changed] = other,
        }
        let a = calibration.private_values(&tally(&query, &rows));
        let b = calibration.private_values(&tally(&query, &neighbour));
        let gap = distance(&a, &b, norm);
        assert!(
            gap <= calibration.sensitivity * (1.0 + 1e-12),
            "trial {trial}: {statistics:?} by {group_by:?} under {unit:?} in {norm:?} moved \
             {gap} > {}",
            calibration.sensitivity
        );
        if calibration.sensitivity > 0.0 {
            let slot =
                &mut tight[usize::from(unit == PrivacyUnit::Row)][usize::from(norm == Norm::L1)];
            *slot = slot.max(gap / calibration.sensitivity);
        }
    }
    // The bounds are attained: none is loose.
    for (unit, row) in tight.iter().enumerate() {
        for (norm, &share) in row.iter().enumerate() {
            assert!(share > 0.999, "unit {unit}, norm {norm}: at most {share}");
        }
    }
}

#[test]
fn public_statistics_are_exact_and_private_ones_come_from_the_noise() {
    let schema = schema();
    let rows = [
        row(1, 10.0, -5.0, 0, 0),
        row(0, 30.0, 5.0, 0, 1),
        row(1, 50.0, 0.0, 0, 1),
        row(1, 100.0, 50.0, 1, 0),
    ];
    let q = query(&["count", "sum:y", "mean:y", "mean:value"], &["campaign"]);
    let t = tally(&q, &rows);
    // Under label: the label sum and the value sum are private (weights 1
    // and 100, jointly √2 after normalisation); the count is public.
    let label = Calibration::new(&q, PrivacyUnit::Label, &schema, Norm::L2);
    assert_eq!(label.weights, vec![0.0, 1.0, 100.0]);
    assert!((label.sensitivity - SQRT_2).abs() < 1e-15);
    assert_eq!(label.private_values(&t), vec![2.0, 0.9, 1.0, 1.0, 0.0, 0.0]);
    // Pretend the noise added exactly +0.5 to each label sum and +0.1 to
    // each normalised value sum (+10 in value units).
    let noisy = [2.5, 1.0, 1.5, 1.1, 0.5, 0.1];
    let out = groups(&q, &schema, &label, &t, &noisy, 0.25);
    let view: Vec<(String, &str, f64, f64, bool)> = out
        .iter()
        .map(|g| {
            (
                g.key["campaign"].clone(),
                g.statistic.as_str(),
                g.value,
                g.std,
                g.exact,
            )
        })
        .collect();
    let expected = [
        ("a", "count", 3.0, 0.0, true),
        ("a", "sum:y", 2.5, 0.25, false),
        ("a", "mean:y", 2.5 / 3.0, 0.25 / 3.0, false),
        ("a", "mean:value", 100.0 / 3.0, 25.0 / 3.0, false),
        ("b", "count", 1.0, 0.0, true),
        ("b", "sum:y", 1.5, 0.25, false),
        // Clamped to the label's bounds.
        ("b", "mean:y", 1.0, 0.25, false),
        ("b", "mean:value", 100.0, 25.0, false),
        // An empty group: its count is public and 0, so its means are its
        // noise alone (divided by 1), clamped: a number, never null.
        ("c", "count", 0.0, 0.0, true),
        ("c", "sum:y", 0.5, 0.25, false),
        ("c", "mean:y", 0.5, 0.25, false),
        ("c", "mean:value", 10.0, 25.0, false),
    ];
    assert_eq!(view.len(), expected.len());
    for (got, want) in view.iter().zip(expected) {
        assert_eq!((got.0.as_str(), got.1, got.4), (want.0, want.1, want.4));
        assert!(
            (got.2 - want.2).abs() < 1e-12 && (got.3 - want.3).abs() < 1e-12,
            "{got:?} vs {want:?}"
        );
    }
    // Under row with group_by the count is private too: noisy count, and
    // the mean divides by it.
    let row_unit = Calibration::new(&q, PrivacyUnit::Row, &schema, Norm::L2);
    assert_eq!(row_unit.weights, vec![SQRT_2, SQRT_2, 100.0 * SQRT_2]);
    let private = row_unit.private_values(&t);
    assert_eq!(private.len(), 9);
    let noisy: Vec<f64> = private.iter().map(|v| v + 1.0 / SQRT_2).collect();
    let out = groups(&q, &schema, &row_unit, &t, &noisy, 0.5);
    assert!((out[0].value - 4.0).abs() < 1e-12, "{:?}", out[0]);
    assert!((out[0].std - 0.5 * SQRT_2).abs() < 1e-15);
    assert!(!out[0].exact);
    // mean:y of a = (2 + 1)/(3 + 1); std by the delta method.
    let mean = out[2].value;
    assert!((mean - 0.75).abs() < 1e-12, "{mean}");
    let std = (2.0 * 0.25 + mean * mean * 2.0 * 0.25).sqrt() / 4.0;
    assert!((out[2].std - std).abs() < 1e-12);
    // Counts by a dimension under label: public, every value exact, and
    // countable from the dimensions alone.
    let counts = query(&["count"], &["device"]);
    let c = Calibration::new(&counts, PrivacyUnit::Label, &schema, Norm::L1);
    assert!(c.public());
    let mut from_dimensions = counts.tally();
    for row in &rows {
        from_dimensions
            .count(&counts, &row.id, &row.dimensions)
            .unwrap();
    }
    assert_eq!(from_dimensions, tally(&counts, &rows));
    let out = groups(&counts, &schema, &c, &from_dimensions, &[], 0.0);
    let values: Vec<f64> = out.iter().map(|g| g.value).collect();
    assert_eq!(values, vec![2.0, 2.0]);
    assert!(out.iter().all(|g| g.exact && g.std == 0.0));
    // A sum of a measure under label is private.
    let sums = query(&["sum:value"], &["device"]);
    assert!(!Calibration::new(&sums, PrivacyUnit::Label, &schema, Norm::L1).public());
}

#[test]
fn ungrouped_means_under_row_divide_by_the_public_n() {
    let schema = schema();
    let rows = [row(1, 20.0, 0.0, 0, 0), row(0, 40.0, 0.0, 1, 1)];
    let q = query(&["mean:value", "count"], &[]);
    let c = Calibration::new(&q, PrivacyUnit::Row, &schema, Norm::L2);
    assert_eq!(c.weights, vec![100.0, 0.0]);
    let t = tally(&q, &rows);
    assert_eq!(c.private_values(&t), vec![0.6]);
    let out = groups(&q, &schema, &c, &t, &[0.7], 0.01);
    assert_eq!(out[0].key, BTreeMap::new());
    assert!((out[0].value - 35.0).abs() < 1e-12);
    assert!((out[0].std - 0.5).abs() < 1e-12);
    assert_eq!((out[1].value, out[1].std, out[1].exact), (2.0, 0.0, true));
}

#[test]
fn the_range_bounds_every_normalised_quantity_over_n_rows() {
    let schema = schema();
    let q = query(&["count", "sum:value", "sum:delta"], &["campaign"]);
    let c = Calibration::new(&q, PrivacyUnit::Row, &schema, Norm::L2);
    // count: N/√2; value: 100N/(100√2); delta: 50N/100.
    let range = c.range(&q, &schema, 1000);
    assert!((range - 1000.0 / SQRT_2).abs() < 1e-9, "{range}");
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let rows: Vec<OwnedRow> = (0..1000).map(|_| random_row(&mut rng)).collect();
    let largest = c
        .private_values(&tally(&q, &rows))
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(largest <= range, "{largest} > {range}");
}

#[test]
fn a_malformed_stored_row_is_a_fault_not_a_wrong_answer() {
    let q = query(&["sum:value"], &["campaign"]);
    let mut t = q.tally();
    assert!(t.add(&q, row(1, 1.0, 1.0, 7, 0).view()).is_err());
    let mut short = row(1, 1.0, 1.0, 0, 0);
    short.measures.clear();
    assert!(t.add(&q, short.view()).is_err());
}

/// Releases a fixed tally many times and returns each group's residuals
/// divided by its reported std.
fn standardised_residuals(mechanism: &Mechanism, norm: Norm, seed: u64) -> Vec<f64> {
    let schema = schema();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rows: Vec<OwnedRow> = (0..200).map(|_| random_row(&mut rng)).collect();
    let q = query(&["count", "sum:value", "sum:y"], &["campaign"]);
    let c = Calibration::new(&q, PrivacyUnit::Row, &schema, norm);
    let t = tally(&q, &rows);
    let exact = groups(&q, &schema, &c, &t, &c.private_values(&t), 0.0);
    let mut residuals = Vec::new();
    for _ in 0..2000 {
        let noisy = mechanism.release(&c.private_values(&t), &mut rng).unwrap();
        let out = groups(&q, &schema, &c, &t, &noisy, mechanism.noise_std());
        for (got, want) in out.iter().zip(&exact) {
            residuals.push((got.value - want.value) / got.std);
        }
    }
    residuals
}

#[test]
fn released_noise_has_the_reported_std() {
    // 2000 releases × 9 numbers; KS at the shared false-failure rate, and
    // stds off by ×0.9 or ×1.1 are rejected.
    let schema = schema();
    let q = query(&["count", "sum:value", "sum:y"], &["campaign"]);
    let epsilon = Epsilon::new(1.0).unwrap();
    for norm in [Norm::L2, Norm::L1] {
        let c = Calibration::new(&q, PrivacyUnit::Row, &schema, norm);
        let range = c.range(&q, &schema, 200);
        let mechanism = match norm {
            Norm::L2 => {
                Mechanism::gaussian(epsilon, Delta::new(1e-6).unwrap(), c.sensitivity, 9, range)
                    .unwrap()
            }
            Norm::L1 => Mechanism::laplace(epsilon, c.sensitivity, 9, range).unwrap(),
        };
        let mut residuals = standardised_residuals(&mechanism, norm, 77);
        for (factor, accept) in [(1.0, true), (0.9, false), (1.1, false)] {
            let p = match norm {
                Norm::L2 => {
                    let normal = Normal::new(0.0, factor).unwrap();
                    kolmogorov_smirnov_p_value(&mut residuals, |x| normal.cdf(x))
                }
                Norm::L1 => {
                    let laplace = Laplace::new(0.0, factor / SQRT_2).unwrap();
                    kolmogorov_smirnov_p_value(&mut residuals, |x| laplace.cdf(x))
                }
            };
            assert_eq!(
                p > FALSE_FAILURE_RATE,
                accept,
                "{norm:?} ×{factor}: p = {p:e}"
            );
        }
    }
}

/// The tally of a snapshot in memory on one thread, on two, and streamed
/// in blocks: bitwise the same sums (fixed chunks, folded in row order).
#[test]
fn tallies_do_not_depend_on_threads_or_blocks() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let rows: Vec<OwnedRow> = (0..2 * STREAM_ROWS + CHUNK_ROWS / 3)
        .map(|i| OwnedRow {
            id: format!("{i:08}"),
            ..random_row(&mut rng)
        })
        .collect();
    let shape = Shape {
        features: 1,
        measures: 2,
        dimensions: 2,
    };
    let whole = Columns::of_rows(shape, &rows);
    let q = query(&["mean:value", "sum:delta", "count"], &["campaign"]);
    let pass = || Tallying {
        query: q.clone(),
        tally: q.tally(),
        counts_only: false,
    };
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut pass = pass();
            pass.visit(&whole).unwrap();
            pass.tally
        })
    };
    let one = on(1);
    assert_eq!(one, on(2));
    let mut streamed = pass();
    for start in (0..rows.len()).step_by(STREAM_ROWS) {
        let block = Columns::of_rows(shape, &rows[start..(start + STREAM_ROWS).min(rows.len())]);
        streamed.visit(&block).unwrap();
    }
    assert_eq!(streamed.tally, one);
    // And they are the sums, up to rounding in another order.
    let sequential = tally(&q, &rows);
    for (chunked, plain) in one.sums.iter().zip(&sequential.sums) {
        assert!(
            (chunked - plain).abs() <= 1e-9 * plain.abs().max(1.0),
            "{chunked} {plain}"
        );
    }
}
