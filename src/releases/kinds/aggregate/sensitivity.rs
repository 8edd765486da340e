//! Each quantity's sensitivity under the privacy unit, and the joint
//! calibration of the private ones (see the module above).

use crate::domain::dataset::{Schema, Unit};
use crate::dp::contribution::Reach;
use crate::dp::fixed::{FRACTION_BITS, Fixed, Grid, ceil_f64, ceil_sqrt};

use super::*;

/// How one quantity can move between neighbouring datasets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// Units `label` and `row`: one row changes.
    Row {
        /// When the changed row stays in its cell: at most this.
        within: f64,
        /// When it moves between two cells: at most this in each.
        across: f64,
    },
    /// Unit `user`: one person's kept rows are added or removed, each
    /// adding at most `largest` in magnitude to its cell, `reach` counting
    /// them per cell.
    Person { largest: f64, reach: Reach },
}

/// The bound of `quantity` under `unit`; `across` is 0 when rows cannot
/// move between cells (no `group_by`, or unit `label`).
pub fn bound(unit: Unit, grouped: bool, quantity: Quantity, schema: &Schema) -> Bound {
    let (lo, hi) = values(quantity, schema);
    let largest = lo.abs().max(hi.abs());
    match (unit, quantity) {
        (Unit::Label, Quantity::Count) => Bound::Row {
            within: 0.0,
            across: 0.0,
        },
        (Unit::Label, Quantity::Sum(_)) => Bound::Row {
            within: hi - lo,
            across: 0.0,
        },
        (Unit::Row, _) => Bound::Row {
            within: hi - lo,
            across: if grouped { largest } else { 0.0 },
        },
        (Unit::User(bounds), _) => Bound::Person {
            largest,
            reach: Reach::of(bounds, grouped),
        },
    }
}

/// A quantity's own sensitivity in `norm` (0: public).
pub fn own_sensitivity(bound: Bound, norm: Norm) -> f64 {
    match (bound, norm) {
        (Bound::Row { within, across }, Norm::L1) => within.max(2.0 * across),
        (Bound::Row { within, across }, Norm::L2) => within.max(std::f64::consts::SQRT_2 * across),
        (Bound::Person { largest, reach }, Norm::L1) => largest * reach.l1 as f64,
        (Bound::Person { largest, reach }, Norm::L2) => largest * reach.l2(),
    }
}

/// The values one row adds to `quantity`: 1 to a count, its column's
/// declared bounds to a sum.
pub(super) fn values(quantity: Quantity, schema: &Schema) -> (f64, f64) {
    match quantity {
        Quantity::Count => (1.0, 1.0),
        Quantity::Sum(col) => column_bounds(col, schema),
    }
}

/// How one row's contribution to a quantity can move, in the units of its
/// grid: [`Bound`] with the public bounds put on the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Moves {
    Row {
        within: u128,
        across: u128,
    },
    /// One person's rows, each adding at most the quantity's `largest`.
    Person(Reach),
}

/// How a quantity is summed.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) enum Tallied {
    /// A public count: one unit a row, released exactly.
    Rows,
    /// A private quantity on the grid of its own sensitivity w, so that its
    /// exact sum, read as units·2⁻⁴⁰, is the normalised quantity (sum / w)
    /// the mechanism adds noise to.
    Private {
        grid: Grid,
        moves: Moves,
        /// The most units one row adds, in magnitude.
        largest: u128,
        /// What one unit of the normalised sum is worth in the statistic's
        /// own units: w for a sum; for a count, 2⁴⁰ over the units of one
        /// row, so that a released count is unbiased.
        back: f64,
    },
}

impl Tallied {
    /// `value` (1 for a count) on this quantity's grid.
    pub(super) fn units(self, value: f64) -> i128 {
        match self {
            Tallied::Rows => 1,
            // `largest` is public (from the column's bounds), so the branch
            // is the same for every row.
            Tallied::Private { grid, largest, .. } if largest < 1 << 62 => {
                grid.units_within_i64(value)
            }
            Tallied::Private { grid, .. } => grid.units(value),
        }
    }

    /// Its grid, if `rows` rows' units sum within i64 whatever their
    /// values (from the public bound on one row's units).
    pub(super) fn grid_for(self, rows: usize) -> Option<Grid> {
        match self {
            Tallied::Private { grid, largest, .. }
                if largest.checked_mul(rows as u128)? < 1 << 62 =>
            {
                Some(grid)
            }
            _ => None,
        }
    }

    pub(super) fn back(self) -> f64 {
        match self {
            Tallied::Rows => 0.0,
            Tallied::Private { back, .. } => back,
        }
    }
}

/// A query calibrated for a dataset: which quantities are noised, how they
/// are summed exactly, and their joint sensitivity.
///
/// # The sensitivity of the exact sums
///
/// Each private quantity q with own sensitivity w_q > 0 is summed on the
/// grid x ↦ u_q(x) = round(x/w_q·2⁴⁰) ([`Grid`]). The map is monotone, so a
/// row adds u_q(x) ∈ [u_q(lo), u_q(hi)] to its cell's sum, for x within
/// the declared [lo, hi] (the label's [0, 1], a count's 1); the sums are
/// exact integers. When a neighbour changes one row and it stays in its
/// cell, each sum of that cell moves by at most
/// within_q = u_q(hi) − u_q(lo) (0 for a count, whose row still adds the
/// same); when it moves between two cells (unit `row` with `group_by`),
/// each sum of each of the two cells moves by at most
/// across_q = max(|u_q(lo)|, |u_q(hi)|), and nothing else moves. So the
/// vector of normalised sums (units·2⁻⁴⁰) moves by at most
///
/// L1: max(Σ within_q, Σ 2·across_q)·2⁻⁴⁰,
/// L2: √max(Σ within_q², Σ 2·across_q²)·2⁻⁴⁰,
///
/// computed in integers and rounded up once. Since |u_q(x) − x/w_q·2⁴⁰| ≤ ½
/// (plus the one rounding of x/w_q), within_q·2⁻⁴⁰ ≤ (hi − lo)/w_q + 2⁻⁴⁰
/// and across_q·2⁻⁴⁰ ≤ M/w_q + 2⁻⁴¹, so this is the real-valued joint
/// sensitivity of the module docs plus a public rounding term below 2⁻³⁹
/// per quantity. The mechanism then snaps the exact sums to its lattice in
/// integer arithmetic ([`Mechanism::release_fixed`]): no float ever holds
/// a sum over private rows.
///
/// Under unit `user` a neighbour adds or removes one person's kept rows:
/// cⱼ of them in cell j, where the count vector c is bounded by the
/// dataset's contribution bounds ([`Reach::of_rows`] without `group_by`,
/// [`Reach::of_groups`] with it, each with its proof). Each row adds at
/// most largest_q = max(|u_q(lo)|, |u_q(hi)|) units in magnitude to
/// quantity q of its cell, so quantity q of cell j moves by at most
/// cⱼ·largest_q, and the vector by
///
/// L1 ≤ Σ_q Σⱼ cⱼ·largest_q ≤ ‖c‖₁·Σ_q largest_q,
/// L2² ≤ Σ_q Σⱼ cⱼ²·largest_q² ≤ ‖c‖₂²·Σ_q largest_q²,
///
/// in integers (saturating: never below the bound), rounded up once. The
/// count is private too (a person moves it), as is N. With the weight
/// w_q = M_q·‖c‖ (the quantity's own sensitivity, [`own_sensitivity`]),
/// largest_q·2⁻⁴⁰ ≤ 1/‖c‖ + 2⁻⁴¹, so the joint sensitivity is Q (L1) or
/// √Q (L2) for Q private quantities, up to the same rounding term.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// Per quantity.
    pub(super) tallied: Vec<Tallied>,
    /// The joint sensitivity of the normalised private quantities.
    pub sensitivity: f64,
}

impl Calibration {
    pub fn new(query: &Query, unit: Unit, schema: &Schema, norm: Norm) -> Self {
        let tallied: Vec<Tallied> = query
            .quantities
            .iter()
            .map(|&quantity| {
                let bound = bound(unit, query.grouped(), quantity, schema);
                // A sum's weight is at least hi − lo > 0 (the schema refuses
                // min ≥ max): only a count can be public.
                let Ok(grid) = Grid::new(own_sensitivity(bound, norm)) else {
                    return Tallied::Rows;
                };
                let (lo, hi) = values(quantity, schema);
                let (lo, hi) = (grid.units(lo), grid.units(hi));
                let largest = lo.unsigned_abs().max(hi.unsigned_abs());
                let moves = match bound {
                    Bound::Row { within, across } => Moves::Row {
                        within: if within > 0.0 { hi.abs_diff(lo) } else { 0 },
                        across: if across > 0.0 { largest } else { 0 },
                    },
                    Bound::Person { reach, .. } => Moves::Person(reach),
                };
                let back = match quantity {
                    Quantity::Count => 2f64.powi(FRACTION_BITS) / hi as f64,
                    Quantity::Sum(_) => grid.scale(),
                };
                Tallied::Private {
                    grid,
                    moves,
                    largest,
                    back,
                }
            })
            .collect();
        let sensitivity = joint_sensitivity(&tallied, norm);
        Calibration {
            tallied,
            sensitivity,
        }
    }

    /// Starts summing rows.
    pub fn tally(&self, query: &Query) -> Tally {
        Tally {
            sums: vec![0; query.cells * self.tallied.len()],
        }
    }

    /// Per quantity: its own sensitivity, 0 if it is public.
    pub fn weights(&self) -> Vec<f64> {
        self.tallied
            .iter()
            .map(|tallied| match tallied {
                Tallied::Rows => 0.0,
                Tallied::Private { grid, .. } => grid.scale(),
            })
            .collect()
    }

    /// Quantities that get noise, per cell.
    pub fn private_quantities(&self) -> usize {
        self.tallied
            .iter()
            .filter(|&&tallied| tallied != Tallied::Rows)
            .count()
    }

    /// Whether nothing needs noise.
    pub fn public(&self) -> bool {
        self.private_quantities() == 0
    }

    /// The most units one row adds to any private quantity.
    pub(super) fn largest(&self) -> u128 {
        self.tallied
            .iter()
            .map(|tallied| match tallied {
                Tallied::Rows => 0,
                Tallied::Private { largest, .. } => *largest,
            })
            .max()
            .unwrap_or(0)
    }

    /// Whether the exact sums over `n` rows stay within i128: a check of
    /// public facts, made before anything is read.
    pub fn holds(&self, n: u64) -> bool {
        Grid::holds(n, self.largest())
    }

    /// The largest magnitude a normalised private quantity can take over
    /// `n` rows (never below the exact bound).
    pub fn range(&self, n: u64) -> f64 {
        ceil_f64(u128::from(n).saturating_mul(self.largest())) * 2f64.powi(-FRACTION_BITS)
    }

    /// The largest std any released statistic can have, per unit of the
    /// mechanism's noise std on a normalised quantity: what `sigma` reports
    /// and `target_std` bounds. A count's or a sum's std is the noise std
    /// times its weight. A mean's is its sum's over max(count, 1): over the
    /// public N without `group_by`; with it, at most its sum's (a group
    /// may hold one row or none) while the count is public, and while it is
    /// noised (unit `row`) at most √(std(sum)² + M²·std(count)²), the
    /// delta-method std of [`groups`] at a count of 1 and a mean clamped
    /// to [lo, hi].
    pub fn spread(&self, query: &Query, schema: &Schema, n: u64) -> f64 {
        let back = |quantity| {
            query
                .quantities
                .iter()
                .position(|&q| q == quantity)
                .map_or(0.0, |index| self.tallied[index].back())
        };
        query
            .statistics
            .iter()
            .map(|statistic| match statistic.op {
                Op::Count => back(Quantity::Count),
                Op::Sum(col) => back(Quantity::Sum(col)),
                Op::Mean(col) => {
                    let (sum, count) = (back(Quantity::Sum(col)), back(Quantity::Count));
                    let (lo, hi) = column_bounds(col, schema);
                    if count > 0.0 {
                        sum.hypot(lo.abs().max(hi.abs()) * count)
                    } else if query.grouped() {
                        sum
                    } else {
                        sum / n.max(1) as f64
                    }
                }
            })
            .fold(0.0, f64::max)
    }

    /// The exact normalised private quantities, cell by cell: what the
    /// mechanism adds noise to.
    pub fn private_values(&self, tally: &Tally) -> Fixed {
        Fixed::normalised(
            tally
                .sums
                .chunks(self.tallied.len())
                .flat_map(|cell| {
                    cell.iter()
                        .zip(&self.tallied)
                        .filter(|&(_, &tallied)| tallied != Tallied::Rows)
                        .map(|(&sum, _)| sum)
                })
                .collect(),
        )
    }

    /// Every quantity of every cell with its noise std: the exact counts
    /// where public, `noisy` (the mechanism's output) scaled back where
    /// private.
    pub(super) fn estimates(
        &self,
        tally: &Tally,
        noisy: &[f64],
        noise_std: f64,
    ) -> Vec<(f64, f64)> {
        let mut noisy = noisy.iter();
        tally
            .sums
            .chunks(self.tallied.len())
            .flat_map(|cell| cell.iter().zip(&self.tallied))
            .map(|(&sum, &tallied)| match tallied {
                Tallied::Rows => (sum as f64, 0.0),
                Tallied::Private { back, .. } => {
                    let value = noisy.next().copied().unwrap_or(f64::NAN);
                    (value * back, noise_std * back)
                }
            })
            .collect()
    }
}

/// The sensitivity, in `norm`, of the normalised private quantities (see
/// [`Calibration`]), from how each moves in grid units.
pub(super) fn joint_sensitivity(tallied: &[Tallied], norm: Norm) -> f64 {
    let (mut within, mut across, mut person) = (0u128, 0u128, None);
    let mut largest_total = 0u128;
    for tallied in tallied {
        let Tallied::Private { moves, largest, .. } = *tallied else {
            continue;
        };
        match (moves, norm) {
            (
                Moves::Row {
                    within: w,
                    across: a,
                },
                Norm::L1,
            ) => {
                within += w;
                across += 2 * a;
            }
            (
                Moves::Row {
                    within: w,
                    across: a,
                },
                Norm::L2,
            ) => {
                within += w * w;
                across += 2 * a * a;
            }
            (Moves::Person(reach), Norm::L1) => {
                person = Some(u128::from(reach.l1));
                largest_total = largest_total.saturating_add(largest);
            }
            (Moves::Person(reach), Norm::L2) => {
                person = Some(reach.l2_squared);
                largest_total = largest_total.saturating_add(largest.saturating_mul(largest));
            }
        }
    }
    let worst = match person {
        None => within.max(across),
        Some(rows) => largest_total.saturating_mul(rows),
    };
    let units = match norm {
        Norm::L1 => ceil_f64(worst),
        Norm::L2 => ceil_sqrt(worst),
    };
    units * 2f64.powi(-FRACTION_BITS)
}

pub(super) fn column_bounds(col: Column, schema: &Schema) -> (f64, f64) {
    match col {
        Column::Label => (0.0, 1.0),
        Column::Measure(index) => (schema.measures[index].min, schema.measures[index].max),
    }
}
