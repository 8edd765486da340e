use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn bounds(rows: u32, groups: u32, rows_per_group: u32) -> ContributionBounds {
    ContributionBounds::new(rows, Some(groups), Some(rows_per_group)).unwrap()
}

fn key(byte: u8) -> BoundingKey {
    BoundingKey::new([byte; 32])
}

#[test]
fn grouped_reach_has_the_known_values() {
    // m = 10, g = 3, r = 4: two full cells and one of 2 rows.
    let reach = Reach::of_groups(bounds(10, 3, 4));
    assert_eq!((reach.l1, reach.l2_squared, reach.linf), (10, 36, 4));
    // Rounded up: one step above the exact root, never below it.
    assert_eq!(reach.l2(), 6f64.next_up());
    // m = 10, g = 2, r = 4: the groups bind before the rows do.
    let reach = Reach::of_groups(bounds(10, 2, 4));
    assert_eq!((reach.l1, reach.l2_squared, reach.linf), (8, 32, 4));
    // m = 100 rows of at most one per group: L2 = 10, not 100.
    let reach = Reach::of_groups(bounds(100, 100, 1));
    assert_eq!(
        (reach.l1, reach.l2(), reach.linf),
        (100, 10f64.next_up(), 1)
    );
    // Per-group bounds left at m are the ungrouped bound.
    let loose = ContributionBounds::new(7, None, None).unwrap();
    assert_eq!(Reach::of_groups(loose), Reach::of_rows(loose));
    assert_eq!(
        Reach::of_rows(loose),
        Reach {
            l1: 7,
            l2_squared: 49,
            linf: 7
        }
    );
    let replaced = Reach::of_rows(loose).replaced();
    assert_eq!(
        (replaced.l1, replaced.l2_squared, replaced.linf),
        (14, 196, 14)
    );
}

/// Every count vector of at most `cells` cells with entries ≤ r, sum ≤ m
/// and at most g non-zero entries.
fn feasible(cells: usize, b: ContributionBounds) -> Vec<Vec<u64>> {
    let mut all = vec![vec![]];
    for _ in 0..cells {
        all = all
            .into_iter()
            .flat_map(|prefix: Vec<u64>| {
                (0..=u64::from(b.rows_per_group)).map(move |c| {
                    let mut next = prefix.clone();
                    next.push(c);
                    next
                })
            })
            .filter(|c| {
                c.iter().sum::<u64>() <= u64::from(b.rows)
                    && c.iter().filter(|&&x| x > 0).count() <= b.groups as usize
            })
            .collect();
    }
    all
}

#[test]
fn grouped_reach_is_the_largest_norm_of_every_feasible_count_vector() {
    // Exhaustive over small bounds, with as many cells as could be used.
    for m in 1..=7u32 {
        for g in 1..=m {
            for r in 1..=m {
                let b = bounds(m, g, r);
                let vectors = feasible(g.min(m) as usize + 1, b);
                let l1 = vectors.iter().map(|c| c.iter().sum::<u64>()).max();
                let l2 = vectors
                    .iter()
                    .map(|c| c.iter().map(|&x| u128::from(x * x)).sum::<u128>())
                    .max();
                let linf = vectors.iter().filter_map(|c| c.iter().copied().max()).max();
                let reach = Reach::of_groups(b);
                assert_eq!(
                    (Some(reach.l1), Some(reach.l2_squared), Some(reach.linf)),
                    (l1, l2, linf),
                    "m = {m}, g = {g}, r = {r}"
                );
            }
        }
    }
}

#[test]
fn bounds_outside_their_ranges_are_refused() {
    assert!(ContributionBounds::new(0, None, None).is_err());
    assert!(ContributionBounds::new(MAX_ROWS_PER_USER + 1, None, None).is_err());
    assert!(ContributionBounds::new(MAX_ROWS_PER_USER, None, None).is_ok());
    assert!(ContributionBounds::new(5, Some(6), None).is_err());
    assert!(ContributionBounds::new(5, None, Some(6)).is_err());
    assert!(ContributionBounds::new(5, Some(0), None).is_err());
    assert!(ContributionBounds::new(5, None, Some(0)).is_err());
    let error = ContributionBounds::new(5, Some(6), Some(2)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "contribution bounds need 1 <= max_rows_per_user <= 1000000, and max_groups_per_user \
         and max_rows_per_group_per_user between 1 and max_rows_per_user (got 5, 6, 2)"
    );
    assert_eq!(
        ContributionBounds::new(5, None, Some(2)).unwrap(),
        ContributionBounds {
            rows: 5,
            groups: 5,
            rows_per_group: 2
        }
    );
}

#[test]
fn ranks_are_keyed_and_separated_by_domain() {
    let k = key(1);
    assert_eq!(k.row_rank(b"r1"), key(1).row_rank(b"r1"));
    assert_ne!(k.row_rank(b"r1"), key(2).row_rank(b"r1"));
    assert_ne!(k.row_rank(b"r1"), k.row_rank(b"r2"));
    assert_ne!(i128::from(k.row_rank(b"u").0), k.user_fingerprint(b"u"));
    // The key never shows in logs.
    assert_eq!(format!("{k:?}"), "BoundingKey(…)");
    // A known value, so that the order cannot change under a version of
    // the hash or of this code (it would change every release's rows).
    let mut input = vec![b'r'];
    input.extend_from_slice(&2u64.to_le_bytes());
    input.extend_from_slice(b"r1");
    let digest = blake3::keyed_hash(&[1; 32], &input);
    let first: [u8; 8] = digest.as_bytes()[..8].try_into().unwrap();
    assert_eq!(k.row_rank(b"r1"), Rank(u64::from_le_bytes(first)));
    // The key survives the stored schema's JSON.
    let json = serde_json::to_string(&k).unwrap();
    assert_eq!(json, format!("\"{}\"", "01".repeat(32)));
    assert_eq!(serde_json::from_str::<BoundingKey>(&json).unwrap(), k);
    assert!(serde_json::from_str::<BoundingKey>("\"01\"").is_err());
    assert_ne!(BoundingKey::fresh(), BoundingKey::fresh());
}

/// A row of a test dataset: user, group, its value on an integer grid.
#[derive(Debug, Clone)]
struct Row {
    user: u16,
    group: u8,
    value: i64,
    id: String,
}

fn candidates(k: &BoundingKey, rows: &[Row]) -> Vec<Candidate<u16, u8, String>> {
    rows.iter()
        .map(|row| Candidate {
            user: row.user,
            group: row.group,
            row_rank: k.row_rank(row.id.as_bytes()),
            id: row.id.clone(),
        })
        .collect()
}

/// The ids a grouped release reads.
fn kept_ids(k: &BoundingKey, rows: &[Row], b: ContributionBounds) -> Vec<String> {
    let kept = keep_grouped(&candidates(k, rows), b);
    let mut ids: Vec<String> = rows
        .iter()
        .zip(kept)
        .filter(|(_, kept)| *kept)
        .map(|(row, _)| row.id.clone())
        .collect();
    ids.sort();
    ids
}

/// Per group, the exact count and sum of the rows a grouped release reads.
fn sums(k: &BoundingKey, rows: &[Row], b: ContributionBounds) -> BTreeMap<u8, (i64, i64)> {
    let kept = keep_grouped(&candidates(k, rows), b);
    let mut cells = BTreeMap::new();
    for (row, _) in rows.iter().zip(kept).filter(|(_, kept)| *kept) {
        let cell = cells.entry(row.group).or_insert((0, 0));
        cell.0 += 1;
        cell.1 += row.value;
    }
    cells
}

/// The difference of two breakdowns, per statistic: its L1, L2² and L∞.
fn moved(a: &BTreeMap<u8, (i64, i64)>, b: &BTreeMap<u8, (i64, i64)>) -> [(u64, u128, u64); 2] {
    let mut norms = [(0, 0, 0); 2];
    let groups: BTreeSet<u8> = a.keys().chain(b.keys()).copied().collect();
    for group in groups {
        let x = a.get(&group).copied().unwrap_or((0, 0));
        let y = b.get(&group).copied().unwrap_or((0, 0));
        for (norm, d) in norms.iter_mut().zip([x.0.abs_diff(y.0), x.1.abs_diff(y.1)]) {
            norm.0 += d;
            norm.1 += u128::from(d) * u128::from(d);
            norm.2 = norm.2.max(d);
        }
    }
    norms
}

/// The largest value a row may hold, in magnitude (rows hold −50 … 100).
const LARGEST: u64 = 100;

fn rows_strategy() -> impl Strategy<Value = Vec<Row>> {
    // Heavy users: up to 40 rows each over up to 6 groups.
    prop::collection::vec((0u16..12, 0u8..6, -50i64..=100), 0..160).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (user, group, value))| Row {
                user,
                group,
                value,
                id: format!("row-{i}"),
            })
            .collect()
    })
}

fn bounds_strategy() -> impl Strategy<Value = ContributionBounds> {
    (1u32..12)
        .prop_flat_map(|m| (Just(m), 1..=m, 1..=m))
        .prop_map(|(m, g, r)| bounds(m, g, r))
}

/// `extra` as rows of `user`, with ids no other row has.
fn as_user(user: u16, extra: &[Row]) -> Vec<Row> {
    extra
        .iter()
        .enumerate()
        .map(|(i, row)| Row {
            user,
            id: format!("added-{i}"),
            ..row.clone()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Neighbours (one user's rows removed, added, or replaced, up to and
    /// beyond the bound): the exact per-group counts and sums move by at
    /// most the declared reach (times the largest value, for the sum), and
    /// by at most twice it for a replacement.
    #[test]
    fn neighbours_move_the_exact_sums_by_at_most_the_reach(
        rows in rows_strategy(),
        extra in rows_strategy(),
        b in bounds_strategy(),
        user in 0u16..14,
        seed in any::<u8>(),
    ) {
        let k = key(seed);
        let reach = Reach::of_groups(b);
        let removed: Vec<Row> = rows.iter().filter(|row| row.user != user).cloned().collect();
        let mut replaced = removed.clone();
        replaced.extend(as_user(user, &extra));
        let before = sums(&k, &rows, b);
        for (after, reach) in [
            (sums(&k, &removed, b), reach),
            (sums(&k, &replaced, b), reach.replaced()),
        ] {
            let [count, sum] = moved(&before, &after);
            let a = LARGEST;
            prop_assert!(count.0 <= reach.l1 && sum.0 <= a * reach.l1);
            prop_assert!(count.1 <= reach.l2_squared);
            prop_assert!(sum.1 <= u128::from(a * a) * reach.l2_squared);
            prop_assert!(count.2 <= reach.linf && sum.2 <= a * reach.linf);
        }
    }

    /// At most m rows of a user are read (g groups, r rows in each when
    /// grouped), and exactly min(m, rows) when ungrouped.
    #[test]
    fn the_bounding_keeps_at_most_the_bounds(
        rows in rows_strategy(),
        b in bounds_strategy(),
        seed in any::<u8>(),
    ) {
        let k = key(seed);
        let candidates = candidates(&k, &rows);
        let mut per_user: BTreeMap<u16, (u32, u32)> = BTreeMap::new();
        for (row, kept) in rows.iter().zip(keep(&candidates, b.rows)) {
            let entry = per_user.entry(row.user).or_default();
            entry.0 += 1;
            entry.1 += u32::from(kept);
        }
        for (all, kept) in per_user.values() {
            prop_assert_eq!(*kept, (*all).min(b.rows));
        }
        let mut cells: BTreeMap<(u16, u8), u32> = BTreeMap::new();
        for (row, kept) in rows.iter().zip(keep_grouped(&candidates, b)) {
            if kept {
                *cells.entry((row.user, row.group)).or_default() += 1;
            }
        }
        for user in per_user.keys() {
            let theirs: Vec<u32> =
                cells.iter().filter(|((u, _), _)| u == user).map(|(_, &c)| c).collect();
            prop_assert!(theirs.len() <= b.groups as usize);
            prop_assert!(theirs.iter().all(|&c| c <= b.rows_per_group));
            prop_assert!(theirs.iter().sum::<u32>() <= b.rows);
        }
    }

    /// The rows read do not depend on the rows' order (threads), on how
    /// they are split (ungrouped, partitions: each keeps its own best m of
    /// a user, then the best m of those), or on other users' rows.
    #[test]
    fn the_bounding_is_a_function_of_each_users_own_rows(
        rows in rows_strategy(),
        others in rows_strategy(),
        b in bounds_strategy(),
        seed in any::<u8>(),
        split in 1usize..5,
    ) {
        let k = key(seed);
        let kept = kept_ids(&k, &rows, b);
        let mut reversed = rows.clone();
        reversed.reverse();
        prop_assert_eq!(&kept_ids(&k, &reversed, b), &kept);

        // Ungrouped, a partition may keep its own best m of a user: the
        // best m of those are the global best m.
        let best = |rows: &[Row]| -> Vec<String> {
            let mut ids: Vec<String> = rows
                .iter()
                .zip(keep(&candidates(&k, rows), b.rows))
                .filter(|(_, kept)| *kept)
                .map(|(row, _)| row.id.clone())
                .collect();
            ids.sort();
            ids
        };
        let mut survivors = Vec::new();
        for part in rows.chunks(rows.len().div_ceil(split).max(1)) {
            let keep = keep(&candidates(&k, part), b.rows);
            survivors.extend(part.iter().zip(keep).filter(|(_, k)| *k).map(|(r, _)| r.clone()));
        }
        prop_assert_eq!(best(&survivors), best(&rows));

        // Change every other user: user 0's kept rows stay.
        let mine: Vec<Row> = rows.iter().filter(|row| row.user == 0).cloned().collect();
        let mut changed = mine.clone();
        changed.extend(
            others
                .iter()
                .filter(|row| row.user != 0)
                .enumerate()
                .map(|(i, row)| Row { id: format!("other-{i}"), ..row.clone() }),
        );
        let of_user_0 = |ids: Vec<String>| -> Vec<String> {
            ids.into_iter().filter(|id| mine.iter().any(|row| &row.id == id)).collect()
        };
        prop_assert_eq!(of_user_0(kept_ids(&k, &changed, b)), of_user_0(kept.clone()));
    }
}
