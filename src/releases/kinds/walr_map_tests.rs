use dpgate_api_types::{FeatureMap, PrivacyUnit, WalrMap};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use super::*;
use crate::domain::dataset::Unit;
use crate::domain::dataset::WalrStats;
use crate::dp::fixed::Fixed;
use crate::releases::kinds::summed_in_parts;
use crate::releases::kinds::test_rows::{Tightness, columns_of, random_row};
use crate::releases::kinds::walr;
use crate::snapshots::Columns;

const MAPS: [WalrMap; 3] = [WalrMap::None, WalrMap::Centre, WalrMap::Auto];
const UNITS: [PrivacyUnit; 2] = [PrivacyUnit::Label, PrivacyUnit::Row];

/// The running statistics of rows, as ingest keeps them (f32 features).
fn stats_of(rows: &[(Vec<f64>, u8)], k: usize) -> WalrStats {
    let mut stats = WalrStats::empty(k);
    for (x, y) in rows {
        let stored: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        stats.add(*y, &stored);
    }
    stats
}

fn moments_of(stats: &WalrStats, n: usize, k: usize) -> Moments {
    Moments::of_sums(&stats.feature_sums, &stats.feature_square_sums, n as f64, k).unwrap()
}

/// The exact sums as `compute` makes them: from the running sums on the
/// identity, from a pass over the rows on any other map.
fn release(rows: &[(Vec<f64>, u8)], k: usize, map: &FeatureMap, intercept: bool) -> Fixed {
    let grid = WalrGrid::new(map, intercept).unwrap();
    if map.name == WalrMap::None {
        return walr::exact(&stats_of(rows, k), k, rows.len() as u64, &grid).unwrap();
    }
    pass(rows, k, map, &grid)
}

fn pass(rows: &[(Vec<f64>, u8)], k: usize, map: &FeatureMap, grid: &WalrGrid) -> Fixed {
    let mut pass = MappedSums::new(map.clone(), grid.clone());
    pass.visit(&columns_of(rows, k)).unwrap();
    pass.exact()
}

/// ‖a − b‖ of exact sums, in their normalised units.
fn gap(a: &Fixed, b: &Fixed) -> f64 {
    let squared: u128 = a
        .units
        .iter()
        .zip(&b.units)
        .map(|(&a, &b)| a.abs_diff(b).pow(2))
        .sum();
    (squared as f64).sqrt() * 2f64.powi(-40)
}

/// The sensitivity of the exact sums as `plan` declares it.
fn declared(map: &FeatureMap, unit: PrivacyUnit, stats: &WalrStats, intercept: bool) -> f64 {
    let grid = WalrGrid::new(map, intercept).unwrap();
    let reach = match (unit, map.name) {
        (PrivacyUnit::Label, WalrMap::None) => grid.norm_bound_squared(stats.max_norm_squared),
        _ => grid.reach_squared(),
    };
    let unit = match unit {
        PrivacyUnit::Label => Unit::Label,
        _ => Unit::Row,
    };
    grid.sensitivity(unit, reach)
}

#[test]
fn neighbouring_datasets_differ_by_at_most_the_declared_sensitivity_on_every_map() {
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    // One class per (map, unit).
    let mut tight = Tightness::new(MAPS.len() * UNITS.len());
    for (m, &asked) in MAPS.iter().enumerate() {
        for (u, &unit) in UNITS.iter().enumerate() {
            for pair in 0..10_000 {
                let intercept = pair % 2 == 0;
                let k = rng.random_range(1..8);
                let n = rng.random_range(1..30);
                let rows: Vec<(Vec<f64>, u8)> = (0..n)
                    .map(|_| {
                        let (x, y) = random_row(&mut rng, k);
                        (x, y)
                    })
                    .collect();
                let mut neighbour = rows.clone();
                let changed = rng.random_range(0..n);
                match unit {
                    PrivacyUnit::Label => neighbour[changed].1 ^= 1,
                    PrivacyUnit::Row => neighbour[changed] = random_row(&mut rng, k),
                    PrivacyUnit::User => unreachable!("UNITS holds label and row"),
                }
                let stats = stats_of(&rows, k);
                let map = fit(asked, unit, k, Some(&moments_of(&stats, n, k))).unwrap();
                let declared = declared(&map, unit, &stats, intercept);
                let gap = gap(
                    &release(&rows, k, &map, intercept),
                    &release(&neighbour, k, &map, intercept),
                );
                tight.record(m * UNITS.len() + u, gap, declared, || {
                    format!("pair {pair} ({asked:?}, {unit:?}, k = {k}, N = {n})")
                });
            }
        }
    }
    // The identity's bounds are attained; the fitted maps' bounds hold for
    // the whole box, which random rows approach.
    tight.attained(0, 0.999, "none, label");
    tight.attained(1, 0.9, "none, row");
    for class in 2..6 {
        tight.attained(class, 0.5, "centre and auto");
    }
}

/// A row of a person: (person, id, (features, label)).
type Owned = (u32, String, (Vec<f64>, u8));

/// Under unit `user`, adding or removing one person's rows (up to three
/// times the bound, each a random row or the box's far corner with label
/// one) moves the counted exact sums over the rows read (at most m a
/// person) by at most the declared sensitivity, which is attained.
#[test]
fn a_persons_rows_move_the_counted_sums_by_at_most_the_declared_sensitivity() {
    use crate::dp::contribution::{BoundingKey, Candidate, ContributionBounds, keep};
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    let key = BoundingKey::new([3; 32]);
    let mut tight = Tightness::new(MAPS.len());
    for (class, &asked) in MAPS.iter().enumerate() {
        for pair in 0..2_000 {
            let (k, m) = (rng.random_range(1..6), rng.random_range(1..5u32));
            let bounds = ContributionBounds::new(m, None, None).unwrap();
            let intercept = pair % 2 == 0;
            let corner = pair % 3 == 0;
            let mut rows: Vec<Owned> = (0..rng.random_range(0..20))
                .map(|at| (at % 3, format!("{pair}-{at}"), random_row(&mut rng, k)))
                .collect();
            let without = rows.clone();
            for at in 0..rng.random_range(1..=3 * m) {
                let row = if corner {
                    (vec![1.0; k], 1)
                } else {
                    random_row(&mut rng, k)
                };
                rows.push((99, format!("{pair}-theirs-{at}"), row));
            }
            let map = fit(asked, PrivacyUnit::User, k, None).unwrap();
            let grid = WalrGrid::new(&map, intercept).unwrap().counted();
            let read = |rows: &[Owned]| {
                let candidates: Vec<Candidate<u32, (), &str>> = rows
                    .iter()
                    .map(|(person, id, _)| Candidate {
                        user: *person,
                        group: (),
                        row_rank: key.row_rank(id.as_bytes()),
                        id: id.as_str(),
                    })
                    .collect();
                let kept: Vec<(Vec<f64>, u8)> = rows
                    .iter()
                    .zip(keep(&candidates, m))
                    .filter(|(_, kept)| *kept)
                    .map(|((_, _, row), _)| row.clone())
                    .collect();
                pass(&kept, k, &map, &grid)
            };
            let declared = grid.sensitivity(Unit::User(bounds), grid.reach_squared());
            tight.record(class, gap(&read(&rows), &read(&without)), declared, || {
                format!("pair {pair} ({asked:?}, k = {k}, m = {m})")
            });
        }
    }
    // The far corner with label 1 reaches the identity's bound.
    tight.attained(0, 0.99, "none, user");
    tight.attained(1, 0.5, "centre, user");
    tight.attained(2, 0.5, "auto, user");
}

#[test]
fn auto_depends_on_the_features_under_label_and_on_the_schema_alone_under_row() {
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let k = 5;
    let rows: Vec<(Vec<f64>, u8)> = (0..200).map(|_| random_row(&mut rng, k)).collect();
    let mut relabelled = rows.clone();
    for row in &mut relabelled {
        row.1 = u8::from(rng.random_bool(0.9));
    }
    let other: Vec<(Vec<f64>, u8)> = (0..300).map(|_| random_row(&mut rng, k)).collect();
    let map_of = |rows: &[(Vec<f64>, u8)], unit| {
        let stats = stats_of(rows, k);
        fit(
            WalrMap::Auto,
            unit,
            k,
            Some(&moments_of(&stats, rows.len(), k)),
        )
        .unwrap()
    };
    // Only labels changed: the map is bit-identical (its serialisation too).
    let (before, after) = (
        map_of(&rows, PrivacyUnit::Label),
        map_of(&relabelled, PrivacyUnit::Label),
    );
    assert_eq!(before, after);
    assert_eq!(
        serde_json::to_string(&before).unwrap(),
        serde_json::to_string(&after).unwrap()
    );
    // Other rows under `label`: another map; under `row`: the same one,
    // and the same without any moments at all.
    assert_ne!(
        map_of(&rows, PrivacyUnit::Label),
        map_of(&other, PrivacyUnit::Label)
    );
    let row_map = map_of(&rows, PrivacyUnit::Row);
    assert_eq!(row_map, map_of(&other, PrivacyUnit::Row));
    assert_eq!(
        row_map,
        fit(WalrMap::Auto, PrivacyUnit::Row, k, None).unwrap()
    );
}

#[test]
fn the_maps_have_the_documented_parameters() {
    let moments = Moments {
        mean: vec![0.25, 0.5],
        variance: vec![0.09, 0.16],
    };
    let label = |asked| fit(asked, PrivacyUnit::Label, 2, Some(&moments)).unwrap();
    assert_eq!(label(WalrMap::None), FeatureMap::identity(2));
    let centre = label(WalrMap::Centre);
    assert_eq!(
        (
            centre.centre.as_slice(),
            centre.radius,
            centre.intercept_weight
        ),
        (&[0.25, 0.5][..], None, 1.0)
    );
    let auto = label(WalrMap::Auto);
    // R = RADIUS_OF_RMS·√(0.09 + 0.16), a = INTERCEPT_OF_RADIUS·R.
    let radius = RADIUS_OF_RMS * 0.5;
    assert_eq!(auto.radius, Some(radius));
    assert_eq!(auto.intercept_weight, INTERCEPT_OF_RADIUS * radius);
    let row = fit(WalrMap::Auto, PrivacyUnit::Row, 12, None).unwrap();
    assert_eq!(row.centre, vec![0.5; 12]);
    assert_eq!(row.radius, Some(RADIUS_OF_RMS));
    // Under `label` the moments are needed, and named when missing.
    let error = choose(Some(WalrMap::Centre), PrivacyUnit::Label, 2, None).unwrap_err();
    assert!(error.contains("moments"), "{error}");
    assert_eq!(
        fit(WalrMap::Centre, PrivacyUnit::Label, 2, None),
        Err(NeedsMoments)
    );
    assert!(fit(WalrMap::None, PrivacyUnit::Label, 2, None).is_ok());
}

/// What a request without a map gets from `choose`, and what one that
/// names its map gets.
#[test]
fn a_request_without_a_map_gets_auto_or_the_identity_with_a_reason() {
    let moments = Moments {
        mean: vec![0.25, 0.5],
        variance: vec![0.09, 0.16],
    };
    let chosen = |asked, unit, moments| choose(asked, unit, 2, moments).unwrap();
    let named = |asked, unit, moments| Chosen {
        map: fit(asked, unit, 2, moments).unwrap(),
        fallback: None,
    };
    assert_eq!(DEFAULT, WalrMap::Auto);
    // Absent: auto, under `label` with moments and under `row` (which
    // needs none).
    let label = chosen(None, PrivacyUnit::Label, Some(&moments));
    assert_eq!(
        label,
        named(WalrMap::Auto, PrivacyUnit::Label, Some(&moments))
    );
    assert_eq!(label.map.name, WalrMap::Auto);
    assert_eq!(label.map.radius, Some(RADIUS_OF_RMS * 0.5));
    for moments in [Some(&moments), None] {
        let row = chosen(None, PrivacyUnit::Row, moments);
        assert_eq!(row, named(WalrMap::Auto, PrivacyUnit::Row, None));
        assert_eq!(row.fallback, None);
    }
    // Absent under `label` without moments: the identity, and why.
    let fell = chosen(None, PrivacyUnit::Label, None);
    assert_eq!(fell.map, FeatureMap::identity(2));
    let reason = fell.fallback.expect("the reason");
    assert_eq!(reason, FALLBACK_WITHOUT_MOMENTS);
    for says in ["auto", "moments", "predate", "map none", "new dataset"] {
        assert!(reason.contains(says), "{says}: {reason}");
    }
    // Named: exactly that map, and never a reason.
    for unit in UNITS {
        for moments in [Some(&moments), None] {
            let none = chosen(Some(WalrMap::None), unit, moments);
            assert_eq!(none.map, FeatureMap::identity(2));
            assert_eq!(none.fallback, None);
        }
        for asked in MAPS {
            let got = chosen(Some(asked), unit, Some(&moments));
            assert_eq!(got, named(asked, unit, Some(&moments)));
        }
    }
    // Named auto or centre without moments under `label`: refused as
    // before, naming the map and the way out; no fallback.
    for asked in [WalrMap::Auto, WalrMap::Centre] {
        let error = choose(Some(asked), PrivacyUnit::Label, 2, None).unwrap_err();
        let name = format!("{asked:?}").to_lowercase();
        assert!(
            error.starts_with(&format!("map {name} needs the features' moments")),
            "{error}"
        );
        assert!(error.contains("use map \"none\""), "{error}");
    }
}

#[test]
fn sensitivities_follow_the_unit_and_the_map() {
    let sensitivity = |map: &FeatureMap, unit, max_norm_squared: f64, intercept| {
        let mut stats = WalrStats::empty(map.k());
        stats.max_norm_squared = max_norm_squared;
        declared(map, unit, &stats, intercept)
    };
    let identity = FeatureMap::identity(3);
    // √(k + 1), exactly on the grid, rounded up once.
    assert_eq!(
        sensitivity(&identity, PrivacyUnit::Row, 0.0, true),
        2f64.next_up()
    );
    // From the largest stored norm: √(1 + 3), plus the grid's rounding.
    let label = sensitivity(&identity, PrivacyUnit::Label, 3.0, true);
    assert!((2.0..2.0 + 1e-11).contains(&label), "{label}");
    // A stored norm beyond the box's corner is capped at it: √k.
    assert_eq!(
        sensitivity(&identity, PrivacyUnit::Label, 4.0, false),
        3f64.sqrt().next_up()
    );
    let label = sensitivity(&identity, PrivacyUnit::Label, 2.0, false);
    assert!(
        (2f64.sqrt()..2f64.sqrt() + 1e-11).contains(&label),
        "{label}"
    );
    // Centring on the middle leaves the row unit's diameter √k.
    let centred = FeatureMap {
        name: WalrMap::Centre,
        centre: vec![0.5; 4],
        ..FeatureMap::identity(4)
    };
    assert_eq!(
        sensitivity(&centred, PrivacyUnit::Row, 0.0, true),
        2f64.next_up()
    );
    // Under `label`: √(1 + k/4).
    assert_eq!(
        sensitivity(&centred, PrivacyUnit::Label, 9.0, true),
        2f64.sqrt().next_up()
    );
    // Shrunk to R = 0.5: 2R = 1 under `row`, √(a² + R²) under `label`.
    let shrunk = FeatureMap {
        radius: Some(0.5),
        intercept_weight: 0.125,
        ..centred
    };
    assert_eq!(
        sensitivity(&shrunk, PrivacyUnit::Row, 0.0, true),
        1f64.next_up()
    );
    let label = sensitivity(&shrunk, PrivacyUnit::Label, 0.0, true);
    let hypot = 0.125f64.hypot(0.5);
    assert!(label >= hypot && label <= hypot * (1.0 + 1e-15), "{label}");
    // A mean of N rows' coordinates reaches at most the box's side.
    let grid = WalrGrid::new(&shrunk, true).unwrap();
    assert_eq!(grid.range(3), 3f64.next_up());
    assert_eq!(grid.dims(), 5);
}

#[test]
fn the_running_sums_are_the_pass_s_sums_in_any_order() {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let k = 6;
    let rows: Vec<(Vec<f64>, u8)> = (0..5000).map(|_| random_row(&mut rng, k)).collect();
    let identity = FeatureMap::identity(k);
    let grid = WalrGrid::new(&identity, true).unwrap();
    let running = walr::exact(&stats_of(&rows, k), k, rows.len() as u64, &grid).unwrap();
    assert_eq!(pass(&rows, k, &identity, &grid), running);
    let reversed: Vec<(Vec<f64>, u8)> = rows.iter().rev().cloned().collect();
    assert_eq!(pass(&reversed, k, &identity, &grid), running);
    let stats = stats_of(&rows, k);
    let auto = fit(
        WalrMap::Auto,
        PrivacyUnit::Label,
        k,
        Some(&moments_of(&stats, 5000, k)),
    )
    .unwrap();
    let grid = WalrGrid::new(&auto, true).unwrap();
    let whole = pass(&rows, k, &auto, &grid);
    assert_eq!(whole, pass(&reversed, k, &auto, &grid));
    // As the engine sums them: a part per partition, added up.
    let parts: Vec<Columns> = rows.chunks(777).map(|part| columns_of(part, k)).collect();
    let fresh = MappedSums::new(auto.clone(), grid.clone());
    assert_eq!(summed_in_parts(&fresh, &parts).exact(), whole);
}

#[test]
fn auto_keeps_its_shrink_only_where_the_noise_is_material() {
    let moments = Moments {
        mean: vec![0.5; 4],
        variance: vec![0.25; 4],
    };
    let auto = fit(WalrMap::Auto, PrivacyUnit::Label, 4, Some(&moments)).unwrap();
    // R = 1, √k = 2: the boundary is σ = SHRINK_FROM / 2.
    assert_eq!(auto.radius, Some(1.0));
    let boundary = SHRINK_FROM / 2.0;
    assert_eq!(settle(auto.clone(), boundary), auto);
    let unshrunk = settle(auto.clone(), boundary * 0.999);
    assert_eq!((unshrunk.radius, unshrunk.intercept_weight), (None, 1.0));
    assert_eq!(unshrunk.centre, auto.centre);
    let centre = fit(WalrMap::Centre, PrivacyUnit::Label, 4, Some(&moments)).unwrap();
    assert_eq!(settle(centre.clone(), 0.0), centre);
}
