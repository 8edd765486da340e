//! Contribution bounding for privacy unit `user`: one person owns many
//! rows, and neighbouring datasets differ in **all** rows of one person.
//!
//! # The neighbouring relation
//!
//! Add/remove: D and D′ are neighbours when D′ is D with every row of one
//! user added or removed (unbounded DP at the level of a person). Replacing
//! one user's rows by another set of rows is two such steps, so every bound
//! below doubles for it (triangle inequality; [`Reach::replaced`]). Public:
//! the schema, the bounds of [`ContributionBounds`] and the declared
//! dimension values. Private: everything in a row (ids, features, labels,
//! measures, dimension values, which user owns it), the number of rows N
//! and the number of users (both move with one person's rows), and how many
//! rows the bounding dropped.
//!
//! # Bounding on read
//!
//! A release reads at most `m` rows of each user
//! ([`ContributionBounds::rows`]): those of smallest [`Rank`], a keyed hash
//! of the row under a per-dataset secret [`BoundingKey`]. The choice is
//! a function of the user's own rows and the key alone, so
//!
//! - it is the same for every release of a version, on every thread count,
//!   partitioning and machine (a rank is a pure function of the row);
//! - a user's kept rows do not change when other users' rows change, which
//!   is what makes the bounded dataset's neighbours differ in at most `m`
//!   kept rows of one user (the stability the sensitivities rest on);
//! - nobody without the key can choose which rows are kept (a caller cannot
//!   steer the bounding towards the rows they want to learn about).
//!
//! A grouped release instead keeps the rows of at most `g` groups per user
//! ([`ContributionBounds::groups`]: the groups of the user's first rows in
//! rank order), at most `r` rows per group
//! ([`ContributionBounds::rows_per_group`]) and, of those, at most `m`, so
//! that a person's effect on the breakdown is bounded per cell and across
//! cells ([`Reach::of_groups`]).

use rayon::slice::ParallelSliceMut;
use serde::{Deserialize, Serialize};

use super::DpError;

/// The most rows per user a dataset may declare: a person's contribution
/// to a sum is this many rows' worth, and beyond it no release would be
/// useful.
pub const MAX_ROWS_PER_USER: u32 = 1_000_000;

/// The most rows a dataset of unit `user` may hold (2³⁶, about 6.9·10¹⁰):
/// N is private under the unit, so wherever a release needs a bound on the
/// data's size (the range its noise lattice must hold, the check that
/// exact sums fit in i128) it uses this public one; uploads beyond it are
/// refused.
pub const MAX_ROWS: u64 = 1 << 36;

/// The per-dataset secret the bounding's hash order is keyed with (32
/// bytes from the OS CSPRNG at creation; never released).
#[derive(Clone, PartialEq, Eq)]
pub struct BoundingKey([u8; 32]);

impl std::fmt::Debug for BoundingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoundingKey(…)")
    }
}

/// Where a row or a group stands in its user's keyed hash order: the
/// smaller, the sooner it is kept. 64 bits: ties (between two rows of one
/// user, with probability below n²/2⁶⁵ for a user of n rows) are broken
/// by the row's id, so the order is total and fixed either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank(pub u64);

/// The key as 64 hex digits, so that it can live in the dataset's stored
/// schema (which is never released).
impl Serialize for BoundingKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&hex::encode(self.0))
    }
}

impl<'de> Deserialize<'de> for BoundingKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(&text, &mut bytes).map_err(serde::de::Error::custom)?;
        Ok(BoundingKey(bytes))
    }
}

impl BoundingKey {
    pub fn new(bytes: [u8; 32]) -> Self {
        BoundingKey(bytes)
    }

    /// A fresh key from the OS CSPRNG.
    pub fn fresh() -> Self {
        let mut bytes = [0u8; 32];
        rand::Rng::fill_bytes(&mut super::OsNoise::new(), &mut bytes);
        BoundingKey(bytes)
    }

    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A row's rank among its user's rows: keyed BLAKE3 (a PRF) of the
    /// row's id.
    pub fn row_rank(&self, row_id: &[u8]) -> Rank {
        Rank(u64::from_le_bytes(
            self.hash(b'r', row_id)[..8].try_into().unwrap_or_default(),
        ))
    }

    /// A user's fingerprint: what dpgate stores instead of the id (keyed,
    /// so the stored column reveals nothing of the ids). 128 bits, so 10⁹
    /// users collide with probability below 2⁻⁶⁹ (a collision would merge
    /// two people under one bound: a failure event of that probability
    /// over the key, far inside any δ).
    pub fn user_fingerprint(&self, user: &[u8]) -> i128 {
        i128::from_le_bytes(self.hash(b'u', user))
    }

    /// The first 128 bits of keyed BLAKE3 of a domain tag and the
    /// length-prefixed input.
    fn hash(&self, domain: u8, input: &[u8]) -> [u8; 16] {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        hasher.update(&[domain]);
        hasher.update(&(input.len() as u64).to_le_bytes());
        hasher.update(input);
        let mut first = [0u8; 16];
        first.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
        first
    }
}

/// A dataset's public contribution bounds under unit `user`: at most
/// `rows` rows of a user are read; a grouped release reads at most
/// `groups` of a user's groups and `rows_per_group` of their rows in each.
/// `1 ≤ rows_per_group ≤ rows`, `1 ≤ groups ≤ rows`, `rows ≤`
/// [`MAX_ROWS_PER_USER`]: bounds beyond `rows` could never bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ContributionBounds {
    pub rows: u32,
    pub groups: u32,
    pub rows_per_group: u32,
}

impl ContributionBounds {
    /// Validates declared bounds; the two per-group bounds default to
    /// `rows` (no tighter than the rows per user).
    pub fn new(
        rows: u32,
        groups: Option<u32>,
        rows_per_group: Option<u32>,
    ) -> Result<Self, DpError> {
        let groups = groups.unwrap_or(rows);
        let rows_per_group = rows_per_group.unwrap_or(rows);
        if !(1..=MAX_ROWS_PER_USER).contains(&rows)
            || !(1..=rows).contains(&groups)
            || !(1..=rows).contains(&rows_per_group)
        {
            return Err(DpError::InvalidContributionBounds {
                rows,
                groups,
                rows_per_group,
                max: MAX_ROWS_PER_USER,
            });
        }
        Ok(ContributionBounds {
            rows,
            groups,
            rows_per_group,
        })
    }
}

/// The largest norms of one user's contribution, counted in rows: entry j
/// is how many of the user's kept rows fall in cell j. A statistic whose
/// rows each add at most `a` in magnitude to their cell moves by at most
/// `a` times these between neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reach {
    /// Σⱼ cⱼ.
    pub l1: u64,
    /// Σⱼ cⱼ², kept exact (its root is rounded up by [`Reach::l2`]).
    pub l2_squared: u128,
    /// maxⱼ cⱼ.
    pub linf: u64,
}

impl Reach {
    /// [`Reach::of_groups`] for a release whose rows fall in cells of a
    /// breakdown (`grouped`), else [`Reach::of_rows`].
    pub fn of(bounds: ContributionBounds, grouped: bool) -> Reach {
        if grouped {
            Reach::of_groups(bounds)
        } else {
            Reach::of_rows(bounds)
        }
    }

    /// An ungrouped release: all of a user's at most `m` kept rows fall in
    /// one cell, so every norm is `m`.
    pub fn of_rows(bounds: ContributionBounds) -> Reach {
        let m = u64::from(bounds.rows);
        Reach {
            l1: m,
            l2_squared: u128::from(m) * u128::from(m),
            linf: m,
        }
    }

    /// A grouped release, with m = rows, g = groups, r = rows_per_group:
    ///
    /// L1 = min(m, g·r), L∞ = r, L2² = q·r² + s², where q = min(g, ⌊m/r⌋)
    /// cells are full and, when q < g, one more holds s = m − q·r rows
    /// (s = 0 otherwise).
    ///
    /// Proof. A user's count vector c has 0 ≤ cⱼ ≤ r, Σcⱼ ≤ m and at most g
    /// non-zero entries. Sorted decreasing, its partial sums are
    /// Σ_{j≤t} c₍ⱼ₎ ≤ min(t·r, m), which are exactly the partial sums of
    /// the greedy vector c* = (r, …, r, s, 0, …) (q entries r) for every t,
    /// with c* itself feasible: c* majorizes every feasible c. Every norm is
    /// Schur-convex, so ‖c‖ₚ ≤ ‖c*‖ₚ, and c*'s norms are the ones above.
    /// They are attained (by a user of m rows spread as c*), so the bound
    /// is tight.
    pub fn of_groups(bounds: ContributionBounds) -> Reach {
        let (m, g, r) = (
            u64::from(bounds.rows),
            u64::from(bounds.groups),
            u64::from(bounds.rows_per_group),
        );
        let full = g.min(m / r);
        let rest = if full < g { m - full * r } else { 0 };
        Reach {
            l1: full * r + rest,
            l2_squared: u128::from(full) * u128::from(r) * u128::from(r)
                + u128::from(rest) * u128::from(rest),
            linf: r.min(m),
        }
    }

    /// The L2 norm, rounded up.
    pub fn l2(self) -> f64 {
        super::fixed::ceil_sqrt(self.l2_squared)
    }

    /// The bound for neighbours that replace one user's rows by another's:
    /// a removal and an addition, so twice each norm (four times L2²).
    pub fn replaced(self) -> Reach {
        Reach {
            l1: 2 * self.l1,
            l2_squared: 4 * self.l2_squared,
            linf: 2 * self.linf,
        }
    }
}

/// A row as the bounding sees it: its user, its group (`()` for an
/// ungrouped release), its rank, and its id (which breaks rank ties).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<U, G, I> {
    pub user: U,
    pub group: G,
    pub row_rank: Rank,
    pub id: I,
}

/// Which rows a release reads: `true` for the at most `m` rows of smallest
/// rank of each user, ignoring groups. The reference the data planes are
/// tested against: a sort by (user, rank, id), then the first `m` of each
/// user's run.
pub fn keep<U: Ord + Sync, G: Sync, I: Ord + Sync>(
    rows: &[Candidate<U, G, I>],
    m: u32,
) -> Vec<bool> {
    let order = in_rank_order(rows, (0..rows.len()).collect());
    let mut kept = vec![false; rows.len()];
    let mut run = 0u32;
    for (position, &index) in order.iter().enumerate() {
        let same_user = position > 0 && rows[order[position - 1]].user == rows[index].user;
        run = if same_user { run + 1 } else { 0 };
        kept[index] = run < m;
    }
    kept
}

/// Which rows a grouped release reads: of each user's rows, those of the
/// user's first `g` groups, a group coming before another when its first
/// row (in (rank, id) order) does, and of each of those groups its `r`
/// first rows; then, of those, the `m` first. Groups are ordered by their
/// rows' ranks rather than by a hash of their own, so that an engine finds
/// them with windows over the rows alone (the first row of each (user,
/// group), then a dense rank of those per user); like the rows', the
/// choice depends on the user's own rows and the key alone.
pub fn keep_grouped<U: Ord + Sync, G: Eq + Sync, I: Ord + Sync>(
    rows: &[Candidate<U, G, I>],
    bounds: ContributionBounds,
) -> Vec<bool> {
    let order = in_rank_order(rows, (0..rows.len()).collect());
    let mut kept = vec![false; rows.len()];
    // The current user's groups in order of their first row, each with its
    // rows seen so far, and the user's rows kept so far.
    let mut groups: Vec<(&G, u32)> = Vec::new();
    let mut taken = 0u32;
    for (position, &index) in order.iter().enumerate() {
        let row = &rows[index];
        if position == 0 || rows[order[position - 1]].user != row.user {
            groups.clear();
            taken = 0;
        }
        let at = match groups.iter().position(|(group, _)| **group == row.group) {
            Some(at) => at,
            None => {
                groups.push((&row.group, 0));
                groups.len() - 1
            }
        };
        let in_group = &mut groups[at].1;
        kept[index] =
            at < bounds.groups as usize && *in_group < bounds.rows_per_group && taken < bounds.rows;
        *in_group += 1;
        taken += u32::from(kept[index]);
    }
    kept
}

/// `order` (indices into `rows`) sorted by (user, rank, id): each user's
/// rows together, in the order they are kept.
fn in_rank_order<U: Ord + Sync, G: Sync, I: Ord + Sync>(
    rows: &[Candidate<U, G, I>],
    mut order: Vec<usize>,
) -> Vec<usize> {
    let key = |i: usize| (&rows[i].user, rows[i].row_rank, &rows[i].id);
    order.par_sort_unstable_by(|&a, &b| key(a).cmp(&key(b)));
    order
}

#[cfg(test)]
#[path = "contribution_tests.rs"]
mod tests;
