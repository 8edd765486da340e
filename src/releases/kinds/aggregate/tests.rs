use super::*;
use std::collections::BTreeMap;

use crate::domain::dataset::{Unit, Users};
use crate::dp::contribution::{BoundingKey, Candidate, ContributionBounds, keep, keep_grouped};
use crate::dp::fixed::FRACTION_BITS;
use crate::dp::statistics::{FALSE_FAILURE_RATE, kolmogorov_smirnov_p_value};
use crate::dp::{Delta, Epsilon, Mechanism};
use crate::releases::kinds::summed_in_parts;
use crate::snapshots::Pass;
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
        users: None,
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

fn tally(query: &Query, calibration: &Calibration, rows: &[OwnedRow]) -> Tally {
    let mut tally = calibration.tally(query);
    for row in rows {
        tally.add(query, calibration, row.view()).unwrap();
    }
    tally
}

/// The exact normalised quantities as floats, for comparing.
fn normalised(calibration: &Calibration, tally: &Tally) -> Vec<f64> {
    let exact = calibration.private_values(tally);
    let unit = 2f64.powi(exact.exponent);
    exact
        .units
        .iter()
        .map(|&units| units as f64 * unit)
        .collect()
}

fn close(got: &[f64], want: &[f64], tolerance: f64) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tolerance, "{got:?} vs {want:?}");
    }
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
        (Unit::Label, false, Quantity::Count, 0.0, 0.0),
        (Unit::Label, true, Quantity::Count, 0.0, 0.0),
        // Measures are outcomes: as private as the label under `label`.
        (Unit::Label, false, value, 100.0, 100.0),
        (Unit::Label, true, value, 100.0, 100.0),
        (Unit::Label, true, delta, 100.0, 100.0),
        (Unit::Label, false, label, 1.0, 1.0),
        (Unit::Label, true, label, 1.0, 1.0),
        (Unit::Row, false, Quantity::Count, 0.0, 0.0),
        (Unit::Row, false, label, 1.0, 1.0),
        (Unit::Row, false, value, 100.0, 100.0),
        (Unit::Row, false, delta, 100.0, 100.0),
        (Unit::Row, true, Quantity::Count, SQRT_2, 2.0),
        (Unit::Row, true, label, SQRT_2, 2.0),
        // max(hi − lo, √2·M) and max(hi − lo, 2M): M = 100 and 50.
        (Unit::Row, true, value, 100.0 * SQRT_2, 200.0),
        (Unit::Row, true, delta, 100.0, 100.0),
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
fn joint_sensitivity_is_the_worse_of_staying_and_moving_up_to_the_grid() {
    let schema = schema();
    let joint = |statistics: &[&str], group_by: &[&str], unit, norm| {
        Calibration::new(&query(statistics, group_by), unit, &schema, norm).sensitivity
    };
    // Each quantity rounds its bounds onto a grid of 2^−40 of its weight:
    // the joint sensitivity is the real one up to that, never below it.
    let near = |got: f64, want: f64| {
        assert!(
            got >= want && got <= want * (1.0 + 1e-11),
            "{got} vs {want}"
        );
    };
    // Ungrouped: normalised quantities each move by 1 at once.
    near(joint(&["sum:y"], &[], Unit::Label, Norm::L2), 1.0);
    near(
        joint(&["sum:value", "sum:y"], &[], Unit::Label, Norm::L2),
        SQRT_2,
    );
    near(
        joint(&["sum:value", "sum:y"], &[], Unit::Row, Norm::L1),
        2.0,
    );
    // Grouped under row: count (0, 1) and sum of [0, 100] (100, 100).
    // Moving: each normalised quantity moves 1/√2 in two cells: L2² = 2.
    near(
        joint(&["count", "sum:value"], &["device"], Unit::Row, Norm::L2),
        SQRT_2,
    );
    // L1: moving gives 2·(1/2) per quantity.
    near(
        joint(&["count", "sum:value"], &["device"], Unit::Row, Norm::L1),
        2.0,
    );
    // Public quantities do not count.
    near(
        joint(&["count", "sum:delta"], &["device"], Unit::Label, Norm::L1),
        1.0,
    );
    assert_eq!(joint(&["count"], &[], Unit::Label, Norm::L2), 0.0);
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
            Unit::Label
        } else {
            Unit::Row
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
            Unit::Label => {
                neighbour[changed].label = other.label;
                neighbour[changed].measures = other.measures;
            }
            Unit::Row | Unit::User(_) => neighbour[changed] = other,
        }
        let a = normalised(&calibration, &tally(&query, &calibration, &rows));
        let b = normalised(&calibration, &tally(&query, &calibration, &neighbour));
        let gap = distance(&a, &b, norm);
        assert!(
            gap <= calibration.sensitivity * (1.0 + 1e-14),
            "trial {trial}: {statistics:?} by {group_by:?} under {unit:?} in {norm:?} moved \
             {gap} > {}",
            calibration.sensitivity
        );
        if calibration.sensitivity > 0.0 {
            let slot = &mut tight[usize::from(unit == Unit::Row)][usize::from(norm == Norm::L1)];
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

/// The rows of `rows` (person, row) a release of `query` reads under
/// `users`' bounds, as `dp::contribution` keeps them.
fn kept(query: &Query, users: &Users, rows: &[(u32, OwnedRow)]) -> Vec<OwnedRow> {
    let candidates: Vec<Candidate<u32, Vec<u32>, String>> = rows
        .iter()
        .map(|(person, row)| Candidate {
            user: *person,
            group: query
                .group_by
                .iter()
                .map(|&(dimension, _)| row.dimensions[dimension])
                .collect(),
            row_rank: users.key.row_rank(row.id.as_bytes()),
            id: row.id.clone(),
        })
        .collect();
    let read = if query.grouped() {
        keep_grouped(&candidates, users.bounds)
    } else {
        keep(&candidates, users.bounds.rows)
    };
    rows.iter()
        .zip(read)
        .filter(|(_, read)| *read)
        .map(|((_, row), _)| row.clone())
        .collect()
}

#[test]
fn adding_a_persons_rows_moves_the_noised_vector_by_at_most_its_sensitivity() {
    let requests: [(&[&str], &[&str]); 5] = [
        (&["count"], &[]),
        (&["count", "sum:y"], &["campaign"]),
        (&["mean:value", "sum:delta"], &[]),
        (
            &["count", "mean:y", "sum:value", "mean:delta"],
            &["campaign", "device"],
        ),
        (&["sum:delta"], &["device"]),
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    let key = BoundingKey::new([9; 32]);
    let mut tightest = [0.0f64; 2];
    for trial in 0..3000 {
        let (statistics, group_by) = requests[rng.random_range(0..requests.len())];
        let query = query(statistics, group_by);
        let m = rng.random_range(1..6u32);
        let bounds = ContributionBounds::new(
            m,
            Some(rng.random_range(1..=m)),
            Some(rng.random_range(1..=m)),
        )
        .unwrap();
        let users = Users {
            column: "person".to_owned(),
            bounds,
            key: key.clone(),
        };
        let schema = Schema {
            users: Some(users.clone()),
            ..schema()
        };
        let norm = if trial % 2 == 0 { Norm::L2 } else { Norm::L1 };
        let calibration = Calibration::new(&query, Unit::User(bounds), &schema, norm);
        let others = rng.random_range(0..30);
        // Up to three times the bound, in one cell half the time, so that
        // the bounding binds and the reach is reached.
        let theirs = rng.random_range(1..=3 * m as usize);
        let one_cell = rng.random_bool(0.5);
        let mut row_of = |at: usize| {
            let mut row = random_row(&mut rng);
            row.id = format!("{trial}-{at}");
            row
        };
        let mut rows: Vec<(u32, OwnedRow)> = (0..others)
            .map(|at| ((at % 4) as u32, row_of(at)))
            .collect();
        let without = rows.clone();
        for at in 0..theirs {
            let mut row = row_of(others + at);
            if one_cell {
                row.dimensions = vec![0, 0];
            }
            rows.push((99, row));
        }
        let tallied = |rows: &[(u32, OwnedRow)]| {
            normalised(
                &calibration,
                &tally(&query, &calibration, &kept(&query, &users, rows)),
            )
        };
        let gap = distance(&tallied(&rows), &tallied(&without), norm);
        assert!(
            gap <= calibration.sensitivity * (1.0 + 1e-14),
            "trial {trial}: {statistics:?} by {group_by:?} under {bounds:?} in {norm:?} moved \
             {gap} > {}",
            calibration.sensitivity
        );
        let slot = &mut tightest[usize::from(norm == Norm::L1)];
        *slot = slot.max(gap / calibration.sensitivity);
    }
    // The bounds are attained (a person of m rows at the columns' bounds).
    assert!(tightest.iter().all(|&share| share > 0.999), "{tightest:?}");
}

#[test]
fn under_unit_user_the_count_is_private_and_the_reach_scales_each_weight() {
    let bounds = ContributionBounds::new(4, Some(2), Some(3)).unwrap();
    let schema = schema();
    let bound_of = |quantity, grouped| bound(Unit::User(bounds), grouped, quantity, &schema);
    // Ungrouped: a person's 4 rows in one cell.
    let four = crate::dp::fixed::ceil_sqrt(16);
    assert!((4.0..4.0 + 1e-12).contains(&four));
    assert_eq!(
        own_sensitivity(bound_of(Quantity::Count, false), Norm::L2),
        four
    );
    assert_eq!(
        own_sensitivity(bound_of(Quantity::Count, false), Norm::L1),
        4.0
    );
    let value = Quantity::Sum(Column::Measure(0));
    assert_eq!(own_sensitivity(bound_of(value, false), Norm::L1), 400.0);
    // Grouped: (3, 1) rows in two cells, L1 4, L2 √10; M = 50 for delta.
    let delta = Quantity::Sum(Column::Measure(1));
    assert_eq!(own_sensitivity(bound_of(delta, true), Norm::L1), 200.0);
    assert_eq!(
        own_sensitivity(bound_of(delta, true), Norm::L2),
        50.0 * crate::dp::fixed::ceil_sqrt(10)
    );
    // Each quantity normalised by its own: Q quantities give √Q (L2).
    let users = Users {
        column: "person".to_owned(),
        bounds,
        key: BoundingKey::new([1; 32]),
    };
    let calibration = Calibration::new(
        &query(&["count", "sum:value"], &["device"]),
        Unit::User(users.bounds),
        &Schema {
            users: Some(users),
            ..schema
        },
        Norm::L2,
    );
    assert!(!calibration.public());
    let sensitivity = calibration.sensitivity;
    // √2 up to the grid's rounding (each weight is ‖c‖ rounded up, so the
    // normalised rows may weigh a hair under 1/‖c‖ each).
    assert!(
        (sensitivity - SQRT_2).abs() < SQRT_2 * 1e-11,
        "{sensitivity}"
    );
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
    // Under label: the label sum and the value sum are private (weights 1
    // and 100, jointly √2 after normalisation); the count is public.
    let label = Calibration::new(&q, Unit::Label, &schema, Norm::L2);
    let t = tally(&q, &label, &rows);
    assert_eq!(label.weights(), vec![0.0, 1.0, 100.0]);
    assert!((label.sensitivity - SQRT_2).abs() < 1e-11);
    close(
        &normalised(&label, &t),
        &[2.0, 0.9, 1.0, 1.0, 0.0, 0.0],
        1e-12,
    );
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
    let row_unit = Calibration::new(&q, Unit::Row, &schema, Norm::L2);
    assert_eq!(row_unit.weights(), vec![SQRT_2, SQRT_2, 100.0 * SQRT_2]);
    let t = tally(&q, &row_unit, &rows);
    let private = normalised(&row_unit, &t);
    assert_eq!(private.len(), 9);
    let noisy: Vec<f64> = private.iter().map(|v| v + 1.0 / SQRT_2).collect();
    let out = groups(&q, &schema, &row_unit, &t, &noisy, 0.5);
    assert!((out[0].value - 4.0).abs() < 1e-12, "{:?}", out[0]);
    assert!((out[0].std - 0.5 * SQRT_2).abs() < 1e-12);
    assert!(!out[0].exact);
    // mean:y of a = (2 + 1)/(3 + 1); std by the delta method.
    let mean = out[2].value;
    assert!((mean - 0.75).abs() < 1e-12, "{mean}");
    let std = (2.0 * 0.25 + mean * mean * 2.0 * 0.25).sqrt() / 4.0;
    assert!((out[2].std - std).abs() < 1e-12);
    // Counts by a dimension under label: public, every value exact, and
    // countable from the dimensions alone.
    let counts = query(&["count"], &["device"]);
    let c = Calibration::new(&counts, Unit::Label, &schema, Norm::L1);
    assert!(c.public());
    let public = Columns::of_rows(Shape::of(&schema), &rows).inputs();
    let mut from_dimensions = c.tally(&counts);
    from_dimensions
        .add_rows(&counts, &c, &public, 0..public.len())
        .unwrap();
    assert_eq!(from_dimensions, tally(&counts, &c, &rows));
    assert_eq!(public.take_touched(), (false, true));
    let out = groups(&counts, &schema, &c, &from_dimensions, &[], 0.0);
    let values: Vec<f64> = out.iter().map(|g| g.value).collect();
    assert_eq!(values, vec![2.0, 2.0]);
    assert!(out.iter().all(|g| g.exact && g.std == 0.0));
    // A sum of a measure under label is private.
    let sums = query(&["sum:value"], &["device"]);
    assert!(!Calibration::new(&sums, Unit::Label, &schema, Norm::L1).public());
}

#[test]
fn ungrouped_means_under_row_divide_by_the_public_n() {
    let schema = schema();
    let rows = [row(1, 20.0, 0.0, 0, 0), row(0, 40.0, 0.0, 1, 1)];
    let q = query(&["mean:value", "count"], &[]);
    let c = Calibration::new(&q, Unit::Row, &schema, Norm::L2);
    assert_eq!(c.weights(), vec![100.0, 0.0]);
    let t = tally(&q, &c, &rows);
    close(&normalised(&c, &t), &[0.6], 1e-12);
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
    let c = Calibration::new(&q, Unit::Row, &schema, Norm::L2);
    // count: N/√2; value: 100N/(100√2); delta: 50N/100.
    let range = c.range(1000);
    assert!((range - 1000.0 / SQRT_2).abs() < 1e-9, "{range}");
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let rows: Vec<OwnedRow> = (0..1000).map(|_| random_row(&mut rng)).collect();
    let largest = normalised(&c, &tally(&q, &c, &rows))
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(largest <= range, "{largest} > {range}");
}

#[test]
fn a_malformed_stored_row_is_a_fault_not_a_wrong_answer() {
    let q = query(&["sum:value"], &["campaign"]);
    let c = Calibration::new(&q, Unit::Label, &schema(), Norm::L2);
    let mut t = c.tally(&q);
    assert!(t.add(&q, &c, row(1, 1.0, 1.0, 7, 0).view()).is_err());
    let mut short = row(1, 1.0, 1.0, 0, 0);
    short.measures.clear();
    assert!(t.add(&q, &c, short.view()).is_err());
}

/// Releases a fixed tally many times and returns each group's residuals
/// divided by its reported std.
fn standardised_residuals(mechanism: &Mechanism, norm: Norm, seed: u64) -> Vec<f64> {
    let schema = schema();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rows: Vec<OwnedRow> = (0..200).map(|_| random_row(&mut rng)).collect();
    let q = query(&["count", "sum:value", "sum:y"], &["campaign"]);
    let c = Calibration::new(&q, Unit::Row, &schema, norm);
    let t = tally(&q, &c, &rows);
    let exact = groups(&q, &schema, &c, &t, &normalised(&c, &t), 0.0);
    let mut residuals = Vec::new();
    for _ in 0..2000 {
        let noisy = mechanism
            .release_fixed(&c.private_values(&t), &mut rng)
            .unwrap();
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
        let c = Calibration::new(&q, Unit::Row, &schema, norm);
        let range = c.range(200);
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

/// The tally of a snapshot in memory on one thread, on two, streamed in
/// blocks, and row by row in either order: the same sums.
#[test]
fn tallies_do_not_depend_on_threads_or_blocks() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let rows: Vec<OwnedRow> = (0..2 * STREAM_ROWS + CHUNK_ROWS / 3)
        .map(|i| OwnedRow {
            id: format!("{i:08}"),
            ..random_row(&mut rng)
        })
        .collect();
    let shape = Shape::of(&schema());
    let whole = Columns::of_rows(shape, &rows);
    let q = query(
        &["mean:value", "sum:delta", "count", "sum:y"],
        &["campaign"],
    );
    let c = Calibration::new(&q, Unit::Row, &schema(), Norm::L2);
    let pass = || Tallying {
        query: q.clone(),
        calibration: c.clone(),
        tally: c.tally(&q),
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
    // As the engine sums them: a part per partition, added up.
    let parts: Vec<Columns> = rows
        .chunks(10_007)
        .map(|part| Columns::of_rows(shape, part))
        .collect();
    assert_eq!(summed_in_parts(&pass(), &parts).tally, one);
    // And they are the sums in any other order: exact integers.
    let mut reversed = rows.clone();
    reversed.reverse();
    assert_eq!(tally(&q, &c, &rows), one);
    assert_eq!(tally(&q, &c, &reversed), one);
}

/// A block's rows tallied at once (cells counted and multiplied out, i64
/// sums per cell) are the rows added one by one, for every grouping, and
/// for blocks with fewer rows than cells (tallied row by row).
#[test]
fn a_block_tallies_as_its_rows_one_by_one() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let shape = Shape::of(&schema());
    let statistics = ["mean:value", "sum:delta", "count", "sum:y", "mean:y"];
    for group_by in [&[][..], &["campaign"], &["device", "campaign"]] {
        let q = query(&statistics, group_by);
        for unit in [Unit::Row, Unit::Label] {
            let c = Calibration::new(&q, unit, &schema(), Norm::L2);
            for rows in [1, 2, 5, 6, 1_000] {
                let rows: Vec<OwnedRow> = (0..rows).map(|_| random_row(&mut rng)).collect();
                let block = Columns::of_rows(shape, &rows);
                let mut at_once = c.tally(&q);
                at_once.add_rows(&q, &c, &block, 0..rows.len()).unwrap();
                assert_eq!(at_once, tally(&q, &c, &rows), "{group_by:?} {unit:?}");
            }
        }
    }
}

/// One measure `m` whose span is 10⁻⁹ of its magnitude, the narrowest the
/// schema allows: m ∈ [10⁹, 10⁹ + 1.1].
fn narrow_schema() -> Schema {
    Schema {
        measures: vec![api::BoundedColumn {
            name: "m".to_owned(),
            min: 1e9,
            max: 1e9 + 1.1,
        }],
        dimensions: Vec::new(),
        ..schema()
    }
}

/// The most rows over which a Gaussian release of `calibration`'s one
/// quantity still fits a lattice at ε = 10⁻⁴, δ = 10⁻⁶.
fn largest_n(calibration: &Calibration) -> u64 {
    let fits = |n: u64| {
        Mechanism::gaussian(
            Epsilon::new(1e-4).unwrap(),
            Delta::new(1e-6).unwrap(),
            calibration.sensitivity,
            1,
            calibration.range(n),
        )
        .is_ok()
    };
    let (mut low, mut high) = (1u64, 1u64 << 50);
    assert!(fits(low) && !fits(high));
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits(middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    low
}

/// The review's finding: float sums of such a column over the most rows
/// the lattice admits (about 5·10⁶ at ε = 10⁻⁴) lie where a double's ulp
/// is 1, so those of two neighbours can differ by up to twice the span.
/// The exact sums move by the span, up to the grid.
#[test]
fn neighbouring_sums_of_a_narrow_measure_move_by_at_most_its_span_at_the_largest_n() {
    let schema = narrow_schema();
    let (lo, hi) = (schema.measures[0].min, schema.measures[0].max);
    let span = hi - lo;
    let q = Query::parse(&schema, &strings(&["sum:m"]), &[], 1).unwrap();
    for unit in [Unit::Label, Unit::Row] {
        let c = Calibration::new(&q, unit, &schema, Norm::L2);
        let n = largest_n(&c);
        assert!(n > 4_000_000, "{unit:?}: {n}");
        let with = |m: f64| OwnedRow {
            measures: vec![m],
            dimensions: Vec::new(),
            ..row(1, 0.0, 0.0, 0, 0)
        };
        // The N − 1 rows both neighbours share, spread over the span, one
        // of them halfway between two integers, where a double's ulp is 1
        // near N·10⁹ and ties round to even.
        let values: Vec<f64> = (0..7)
            .map(|i| lo + span * f64::from(i) / 6.0)
            .chain([lo + 0.5, lo])
            .collect();
        let mut shared = c.tally(&q);
        for i in 0..n - 1 {
            let m = values[(i % 9) as usize];
            shared.add(&q, &c, with(m).view()).unwrap();
        }
        // Plain float sums of the two neighbours, the changed row first:
        // they end up twice the span apart.
        let float_sum =
            |first: f64| (0..n - 1).fold(first, |sum, i| sum + values[(i % 9) as usize]);
        assert!(float_sum(hi) - float_sum(lo) > 1.8 * span);
        let pairs = [(lo, hi), (hi, lo), (lo + span / 3.0, hi), (lo, lo + 0.5)];
        for (a, b) in pairs {
            let sum_with = |m: f64| {
                let mut tally = shared.clone();
                tally.add(&q, &c, with(m).view()).unwrap();
                tally.sums[0]
            };
            let moved = sum_with(a).abs_diff(sum_with(b)) as f64
                * 2f64.powi(-FRACTION_BITS)
                * c.weights()[0];
            assert!(
                moved <= span * (1.0 + 2f64.powi(-20)),
                "{unit:?}: {a} → {b} moved the sum by {moved}"
            );
        }
    }
}

#[test]
fn sigma_is_the_largest_std_a_released_statistic_can_have() {
    let schema = schema();
    let spread = |statistics: &[&str], group_by: &[&str], unit, n| {
        let q = query(statistics, group_by);
        Calibration::new(&q, unit, &schema, Norm::L2).spread(&q, &schema, n)
    };
    let near = |got: f64, want: f64| assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
    // A sum's std is the noise's times its weight (100 for value).
    near(
        spread(&["count", "sum:value", "sum:y"], &[], Unit::Label, 10),
        100.0,
    );
    // An ungrouped mean divides by the public N.
    near(spread(&["mean:value"], &[], Unit::Label, 10), 10.0);
    near(spread(&["mean:value"], &[], Unit::Row, 10), 10.0);
    // Grouped, a group may hold one row or none.
    near(spread(&["mean:value"], &["device"], Unit::Label, 10), 100.0);
    // Under row the grouped count is noised (weight √2, the value sum's
    // 100√2): √(std(sum)² + M²·std(count)²) = √(2·100² + 100²·2).
    near(spread(&["mean:value"], &["device"], Unit::Row, 10), 200.0);
    near(spread(&["count"], &["device"], Unit::Row, 10), SQRT_2);
    assert_eq!(spread(&["count"], &["device"], Unit::Label, 10), 0.0);
}

/// Every std [`groups`] reports, whatever the noise drew, is at most the
/// spread times the noise std: what makes a target on the spread hold for
/// every released number.
#[test]
fn no_released_std_exceeds_the_spread() {
    let schema = schema();
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let requests: [(&[&str], &[&str]); 4] = [
        (
            &["count", "mean:value", "mean:delta", "sum:y"],
            &["campaign"],
        ),
        (&["mean:y", "sum:delta"], &[]),
        (&["mean:value"], &["campaign", "device"]),
        (&["count", "sum:value"], &["device"]),
    ];
    for (statistics, group_by) in requests {
        let q = query(statistics, group_by);
        for unit in [Unit::Label, Unit::Row] {
            let c = Calibration::new(&q, unit, &schema, Norm::L2);
            let rows: Vec<OwnedRow> = (0..rng.random_range(0..6))
                .map(|_| random_row(&mut rng))
                .collect();
            let t = tally(&q, &c, &rows);
            let spread = c.spread(&q, &schema, rows.len() as u64);
            for _ in 0..200 {
                let noisy: Vec<f64> = normalised(&c, &t)
                    .iter()
                    .map(|v| v + rng.random_range(-3.0..3.0))
                    .collect();
                for group in groups(&q, &schema, &c, &t, &noisy, 0.5) {
                    assert!(
                        group.std <= 0.5 * spread * (1.0 + 1e-12),
                        "{statistics:?} by {group_by:?} under {unit:?}: {group:?} above {}",
                        0.5 * spread
                    );
                }
            }
        }
    }
}
