//! The aggregate release: counts, sums and means of the label or of a
//! declared measure, over every combination of the declared values of the
//! `group_by` dimensions (present in the data or not, so that the set of
//! groups reveals nothing).
//!
//! A request becomes per-cell *quantities*: `count` and `sum:c` for each
//! column c a statistic needs (`mean:c` = sum / count). Every quantity that
//! the privacy unit leaves public is released exactly; the private ones are
//! released together, with one noise draw calibrated to their joint
//! sensitivity.
//!
//! Sensitivity of one quantity over all cells, for a column with declared
//! bounds [lo, hi] (the label has [0, 1]) and M = max(|lo|, |hi|):
//!
//! | unit    | grouped | quantity    | L2                  | L1               |
//! |---------|---------|-------------|---------------------|------------------|
//! | `label` | either  | `count`     | 0 (public)          | 0 (public)       |
//! | `label` | either  | `sum:c`     | hi − lo             | hi − lo          |
//! | `row`   | no      | `count`     | 0 (N is public)     | 0                |
//! | `row`   | no      | `sum:c`     | hi − lo             | hi − lo          |
//! | `row`   | yes     | `count`     | √2                  | 2                |
//! | `row`   | yes     | `sum:c`     | max(hi − lo, √2·M)  | max(hi − lo, 2M) |
//!
//! Under `label` a neighbour changes one row's outcomes: its label and its
//! measures (a measure is typically an outcome, a conversion value beside
//! `converted`, so it is as private as the label). Dimensions are public,
//! so the row stays in its cell, the counts stay, and each sum of that cell
//! moves by at most its column's hi − lo. Under `row` one row
//! is replaced: either it stays in its cell (each sum moves by at most
//! hi − lo, the count not at all) or it moves between two cells (each
//! quantity loses up to M in one and gains up to M in the other, the count
//! 1 in each). A quantity whose bound is 0 (a constant) is public.
//!
//! Joint calibration. Each private quantity q is divided by its own
//! sensitivity w_q above before the noise is added (and multiplied back
//! after), so that every statistic gets the same share of the privacy loss
//! and the noise on q has standard deviation σ·w_q. The normalised vector's
//! sensitivity is the worse of the two cases, with r_q = hi − lo (0 for the
//! count):
//! L2² = max(Σ (r_q/w_q)², Σ 2(M_q/w_q)²), L1 = max(Σ r_q/w_q, Σ 2M_q/w_q),
//! the second term only under `row` with `group_by`.
//!
//! Means. Under `label`, and under `row` without `group_by`, the count is
//! public: mean = noisy sum / max(count, 1), std = std(sum) / max(count, 1)
//! (an empty group's mean is its noise alone, clamped). Under `row` with
//! `group_by` the count is private and is released with the sum (the budget
//! is split between them by the normalisation above): mean = noisy sum /
//! max(noisy count, 1), and the std is the delta-method
//! √(std(sum)² + mean²·std(count)²) / max(count, 1). Noisy means are
//! clamped to [lo, hi]; `std` describes the noise before clamping.
//!
//! The noise lattice must hold every value a query can take (see
//! [`crate::dp::Mechanism`]): a count is at most N, a sum at most N·M, each
//! divided by its own sensitivity. A declared range so wide that no lattice
//! holds it and still resolves the noise is refused before the debit.
//!
//! A release of counts alone under `label` is public and free: it reads the
//! rows' dimensions, never a label or a measure. Under `row` without
//! `group_by` the count is N itself.

use std::collections::BTreeMap;

use async_trait::async_trait;
use dpgate_api_types::{self as api, PrivacyUnit};

use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::fixed::{FRACTION_BITS, Fixed, Grid, ceil_f64, ceil_sqrt};
use crate::dp::{Delta, Epsilon, Mechanism};
use crate::engine::{Needed, Summed};
use crate::releases::plan::{noise_fixed, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};
use crate::snapshots::Columns;
use crate::snapshots::Pass;
#[cfg(test)]
use crate::snapshots::Row;

/// Most statistics one request may ask for.
pub const MAX_STATISTICS: usize = 16;

/// Default most groups (combinations of dimension values) one aggregate
/// may cover (`DPGATE_MAX_GROUPS`).
pub const DEFAULT_MAX_GROUPS: usize = 100_000;

/// A column a sum or mean is taken of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Column {
    Label,
    Measure(usize),
}

/// What is summed per cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Quantity {
    Count,
    Sum(Column),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Op {
    Count,
    Sum(Column),
    Mean(Column),
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Statistic {
    name: String,
    op: Op,
}

/// The norm a mechanism measures sensitivity in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Norm {
    L1,
    L2,
}

/// An aggregate request checked against the schema.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Query {
    statistics: Vec<Statistic>,
    /// Indices of the `group_by` dimensions, with their numbers of values.
    group_by: Vec<(usize, usize)>,
    cells: usize,
    quantities: Vec<Quantity>,
}

fn column(schema: &Schema, name: &str) -> Result<Column, String> {
    if name == schema.label {
        return Ok(Column::Label);
    }
    schema
        .measures
        .iter()
        .position(|measure| measure.name == name)
        .map(Column::Measure)
        .ok_or_else(|| {
            let declared: Vec<&str> = std::iter::once(schema.label.as_str())
                .chain(schema.measures.iter().map(|m| m.name.as_str()))
                .collect();
            format!(
                "unknown column `{name}`: sums and means are of the label or a declared measure \
                 ({})",
                declared.join(", ")
            )
        })
}

fn statistic(schema: &Schema, name: &str) -> Result<Statistic, String> {
    let op = match name.split_once(':') {
        None if name == "count" => Op::Count,
        Some(("sum", col)) => Op::Sum(column(schema, col)?),
        Some(("mean", col)) => Op::Mean(column(schema, col)?),
        _ => {
            return Err(format!(
                "unknown statistic `{name}`: use `count`, `sum:COLUMN` or `mean:COLUMN`"
            ));
        }
    };
    Ok(Statistic {
        name: name.to_owned(),
        op,
    })
}

impl Query {
    /// Checks the request's statistics and dimensions; `max_groups` bounds
    /// the number of combinations of dimension values.
    pub fn parse(
        schema: &Schema,
        statistics: &[String],
        group_by: &[String],
        max_groups: usize,
    ) -> Result<Self, String> {
        if statistics.is_empty() || statistics.len() > MAX_STATISTICS {
            return Err(format!(
                "ask for between 1 and {MAX_STATISTICS} statistics (got {})",
                statistics.len()
            ));
        }
        let mut parsed: Vec<Statistic> = Vec::with_capacity(statistics.len());
        for name in statistics {
            if parsed.iter().any(|seen| &seen.name == name) {
                return Err(format!("statistic `{name}` is asked for twice"));
            }
            parsed.push(statistic(schema, name)?);
        }
        let mut dimensions: Vec<(usize, usize)> = Vec::with_capacity(group_by.len());
        for name in group_by {
            let index = schema
                .dimensions
                .iter()
                .position(|dimension| &dimension.name == name)
                .ok_or_else(|| format!("unknown dimension `{name}` in group_by"))?;
            if dimensions.iter().any(|&(seen, _)| seen == index) {
                return Err(format!("dimension `{name}` is in group_by twice"));
            }
            dimensions.push((index, schema.dimensions[index].values.len()));
        }
        let cells = dimensions
            .iter()
            .try_fold(1usize, |cells, &(_, values)| cells.checked_mul(values))
            .filter(|&cells| cells <= max_groups)
            .ok_or_else(|| {
                format!(
                    "group_by over {} covers more than {max_groups} groups (every combination \
                     of declared values), the configured limit",
                    group_by.join(", ")
                )
            })?;
        let mut quantities = Vec::new();
        for stat in &parsed {
            let needs = match stat.op {
                Op::Count => [Some(Quantity::Count), None],
                Op::Sum(col) => [Some(Quantity::Sum(col)), None],
                Op::Mean(col) => [Some(Quantity::Sum(col)), Some(Quantity::Count)],
            };
            for quantity in needs.into_iter().flatten() {
                if !quantities.contains(&quantity) {
                    quantities.push(quantity);
                }
            }
        }
        Ok(Query {
            statistics: parsed,
            group_by: dimensions,
            cells,
            quantities,
        })
    }

    /// Combinations of dimension values covered (1 without `group_by`).
    pub fn cells(&self) -> usize {
        self.cells
    }

    pub fn grouped(&self) -> bool {
        !self.group_by.is_empty()
    }

    /// The cell of a row of `dimensions`; a code outside its dimension's
    /// values (never stored: codes are checked on ingest and on read) is
    /// an error. What the tests' `Tally::add` finds a row's cell with.
    #[cfg(test)]
    fn cell(&self, dimensions: &[u32]) -> Result<usize, String> {
        self.group_by
            .iter()
            .try_fold(0usize, |cell, &(dimension, values)| {
                let value = dimensions.get(dimension).map(|&v| v as usize);
                match value {
                    Some(value) if value < values => Ok(cell * values + value),
                    _ => Err("a row has a malformed dimension".to_owned()),
                }
            })
    }

    /// The cells of the rows `rows` of `block`, as [`Query::cell`] finds
    /// them, a dimension's column at a time.
    fn cells_of(
        &self,
        block: &Columns,
        rows: std::ops::Range<usize>,
    ) -> Result<Vec<usize>, String> {
        if self
            .group_by
            .iter()
            .any(|&(dimension, _)| dimension >= block.shape().dimensions)
        {
            return Err("a row has a malformed dimension".to_owned());
        }
        let mut malformed = false;
        let mut code_of = |code: u32, values: usize| {
            malformed |= code as usize >= values;
            code as usize
        };
        let codes = |dimension: usize| &block.dimension(dimension)[rows.clone()];
        let mut cells: Vec<usize> = match self.group_by.first() {
            Some(&(dimension, values)) => codes(dimension)
                .iter()
                .map(|&code| code_of(code, values))
                .collect(),
            None => vec![0; rows.len()],
        };
        for &(dimension, values) in self.group_by.iter().skip(1) {
            for (cell, &code) in cells.iter_mut().zip(codes(dimension)) {
                *cell = *cell * values + code_of(code, values);
            }
        }
        match malformed {
            true => Err("a row has a malformed dimension".to_owned()),
            false => Ok(cells),
        }
    }

    /// The group keys in cell order: the first dimension varies slowest.
    fn keys(&self, schema: &Schema) -> Vec<BTreeMap<String, String>> {
        (0..self.cells)
            .map(|mut cell| {
                let mut key = BTreeMap::new();
                for &(dimension, values) in self.group_by.iter().rev() {
                    let declared = &schema.dimensions[dimension];
                    key.insert(
                        declared.name.clone(),
                        declared.values[cell % values].clone(),
                    );
                    cell /= values;
                }
                key
            })
            .collect()
    }
}

/// Per-cell exact sums of a query's quantities, each in its own units
/// ([`Tallied`]): integers, so the same whatever the order of the rows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    /// Cell-major: `sums[cell * quantities + q]`.
    sums: Vec<i128>,
}

impl Tally {
    /// The counts of a query without `group_by`: N, from the snapshot
    /// (public then under every unit, so counted in rows).
    pub fn count_all(&mut self, query: &Query, n: u64) {
        for (sum, quantity) in self.sums.iter_mut().zip(&query.quantities) {
            if *quantity == Quantity::Count {
                *sum = i128::from(n);
            }
        }
    }

    /// Adds one stored row (measures are clamped to their bounds on
    /// ingest, so each value lies within the bounds its reach is proven
    /// for): the reference [`Tally::add_rows`] is tested against.
    #[cfg(test)]
    pub fn add(
        &mut self,
        query: &Query,
        calibration: &Calibration,
        row: Row<'_>,
    ) -> Result<(), String> {
        let width = query.quantities.len();
        let cell = query.cell(&row.dimensions)?;
        let sums = &mut self.sums[cell * width..(cell + 1) * width];
        for ((sum, quantity), tallied) in sums
            .iter_mut()
            .zip(&query.quantities)
            .zip(&calibration.tallied)
        {
            let value = match quantity {
                Quantity::Count => 1.0,
                Quantity::Sum(Column::Label) => f64::from(row.label),
                Quantity::Sum(Column::Measure(index)) => row
                    .measures
                    .get(*index)
                    .copied()
                    .ok_or("a row has a malformed measure")?,
            };
            *sum += tallied.units(value);
        }
        Ok(())
    }

    /// Adds the rows `rows` of `block` a quantity at a time: every row's
    /// cell first, then each quantity's units into their cells, with the
    /// quantity's kind and grid chosen once. Where a row's units depend on
    /// its cell alone (a count, a 0/1 label) the cells' rows are counted
    /// and multiplied out; a measure's units are added in i64 per cell
    /// where its public bound rules out overflow for this many rows. The
    /// same integers as adding the rows one by one (the tests'
    /// `Tally::add`), in another order, which exact sums do not see. A
    /// query of counts only reads the rows' dimensions alone, so `block`
    /// may be read without the outcomes.
    pub fn add_rows(
        &mut self,
        query: &Query,
        calibration: &Calibration,
        block: &Columns,
        rows: std::ops::Range<usize>,
    ) -> Result<(), String> {
        let width = query.quantities.len();
        let cells = query.cells_of(block, rows.clone())?;
        let every_cell = cells.len() >= query.cells;
        // Per cell, over these rows: how many, and how many labelled 1;
        // counted when a quantity first needs them.
        let mut counts = Vec::new();
        let count = |counts: &mut Vec<u64>| {
            if counts.is_empty() {
                counts.resize(query.cells, 0);
                cells.iter().for_each(|&cell| counts[cell] += 1);
            }
        };
        for (q, (quantity, &tallied)) in query
            .quantities
            .iter()
            .zip(&calibration.tallied)
            .enumerate()
        {
            let sums = &mut self.sums;
            let mut add = |cell: usize, units: i128| sums[cell * width + q] += units;
            match quantity {
                Quantity::Count if every_cell => {
                    count(&mut counts);
                    let one = tallied.units(1.0);
                    for (cell, &count) in counts.iter().enumerate() {
                        add(cell, i128::from(count) * one);
                    }
                }
                Quantity::Count => {
                    let one = tallied.units(1.0);
                    cells.iter().for_each(|&cell| add(cell, one));
                }
                Quantity::Sum(Column::Label) => {
                    let labels = &block.labels()[rows.clone()];
                    if labels.len() != cells.len() || labels.iter().any(|&label| label > 1) {
                        return Err("a row has a malformed label".to_owned());
                    }
                    count(&mut counts);
                    let mut ones = vec![0u64; query.cells];
                    for (&cell, &label) in cells.iter().zip(labels) {
                        ones[cell] += u64::from(label);
                    }
                    let (zero, one) = (tallied.units(0.0), tallied.units(1.0));
                    for (cell, (&count, &ones)) in counts.iter().zip(&ones).enumerate() {
                        add(
                            cell,
                            i128::from(ones) * one + i128::from(count - ones) * zero,
                        );
                    }
                }
                Quantity::Sum(Column::Measure(index)) => {
                    if cells.is_empty() {
                        continue;
                    }
                    if *index >= block.shape().measures {
                        return Err("a row has a malformed measure".to_owned());
                    }
                    let values = &block.measure(*index)[rows.clone()];
                    match tallied.grid_for(cells.len()) {
                        Some(grid) if every_cell => {
                            let mut units = vec![0i64; query.cells];
                            for (&cell, &value) in cells.iter().zip(values) {
                                units[cell] += grid.units_i64(value);
                            }
                            for (cell, &units) in units.iter().enumerate() {
                                add(cell, i128::from(units));
                            }
                        }
                        _ => {
                            for (&cell, &value) in cells.iter().zip(values) {
                                add(cell, tallied.units(value));
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds another tally of the same query, cell by cell.
    pub fn absorb(&mut self, other: &Tally) {
        for (sum, part) in self.sums.iter_mut().zip(&other.sums) {
            *sum += part;
        }
    }
}

/// A pass tallying a query over a snapshot, each chunk of rows on its own
/// core.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Tallying {
    query: Query,
    calibration: Calibration,
    tally: Tally,
}

impl Pass for Tallying {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let (query, calibration) = (&self.query, &self.calibration);
        let parts = block.chunks(|rows| {
            let mut part = calibration.tally(query);
            part.add_rows(query, calibration, block, rows)?;
            Ok::<_, String>(part)
        });
        for part in parts {
            self.tally.absorb(&part?);
        }
        Ok(())
    }
}

impl Summed for Tallying {
    const KIND: &'static str = "aggregate";

    /// The dimensions (even ungrouped: a read of the inputs needs a
    /// column), and the outcomes the quantities sum.
    fn needs(&self) -> Needed {
        let sums = |of: fn(&Column) -> bool| {
            self.query
                .quantities
                .iter()
                .any(|quantity| matches!(quantity, Quantity::Sum(column) if of(column)))
        };
        Needed {
            labels: sums(|column| *column == Column::Label),
            measures: sums(|column| matches!(column, Column::Measure(_))),
            features: false,
            ids: false,
            dimensions: true,
        }
    }

    fn sums(&self) -> Vec<i128> {
        self.tally.sums.clone()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        if sums.len() != self.tally.sums.len() {
            return Err(format!(
                "{} sums for a tally of {}",
                sums.len(),
                self.tally.sums.len()
            ));
        }
        self.tally.absorb(&Tally {
            sums: sums.to_vec(),
        });
        Ok(())
    }
}

/// How one quantity can move between neighbouring datasets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// When the changed row stays in its cell: at most this.
    pub within: f64,
    /// When it moves between two cells: at most this in each.
    pub across: f64,
}

/// The bound of `quantity` under `unit`; `across` is 0 when rows cannot
/// move between cells (no `group_by`, or unit `label`).
pub fn bound(unit: PrivacyUnit, grouped: bool, quantity: Quantity, schema: &Schema) -> Bound {
    let (lo, hi) = values(quantity, schema);
    match (unit, quantity) {
        (PrivacyUnit::Label, Quantity::Count) => Bound {
            within: 0.0,
            across: 0.0,
        },
        (PrivacyUnit::Label, Quantity::Sum(_)) => Bound {
            within: hi - lo,
            across: 0.0,
        },
        (PrivacyUnit::Row, _) => Bound {
            within: hi - lo,
            across: if grouped { lo.abs().max(hi.abs()) } else { 0.0 },
        },
    }
}

/// A quantity's own sensitivity in `norm` (0: public).
pub fn own_sensitivity(bound: Bound, norm: Norm) -> f64 {
    let across = match norm {
        Norm::L1 => 2.0 * bound.across,
        Norm::L2 => std::f64::consts::SQRT_2 * bound.across,
    };
    bound.within.max(across)
}

/// The values one row adds to `quantity`: 1 to a count, its column's
/// declared bounds to a sum.
fn values(quantity: Quantity, schema: &Schema) -> (f64, f64) {
    match quantity {
        Quantity::Count => (1.0, 1.0),
        Quantity::Sum(col) => column_bounds(col, schema),
    }
}

/// How one row's contribution to a quantity can move, in the units of its
/// grid: [`Bound`] with the public bounds put on the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Reach {
    within: u128,
    across: u128,
}

/// How a quantity is summed.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
enum Tallied {
    /// A public count: one unit a row, released exactly.
    Rows,
    /// A private quantity on the grid of its own sensitivity w, so that its
    /// exact sum, read as units·2⁻⁴⁰, is the normalised quantity (sum / w)
    /// the mechanism adds noise to.
    Private {
        grid: Grid,
        reach: Reach,
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
    fn units(self, value: f64) -> i128 {
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
    fn grid_for(self, rows: usize) -> Option<Grid> {
        match self {
            Tallied::Private { grid, largest, .. }
                if largest.checked_mul(rows as u128)? < 1 << 62 =>
            {
                Some(grid)
            }
            _ => None,
        }
    }

    fn back(self) -> f64 {
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// Per quantity.
    tallied: Vec<Tallied>,
    /// The joint sensitivity of the normalised private quantities.
    pub sensitivity: f64,
}

impl Calibration {
    pub fn new(query: &Query, unit: PrivacyUnit, schema: &Schema, norm: Norm) -> Self {
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
                let reach = Reach {
                    within: if bound.within > 0.0 {
                        hi.abs_diff(lo)
                    } else {
                        0
                    },
                    across: if bound.across > 0.0 { largest } else { 0 },
                };
                let back = match quantity {
                    Quantity::Count => 2f64.powi(FRACTION_BITS) / hi as f64,
                    Quantity::Sum(_) => grid.scale(),
                };
                Tallied::Private {
                    grid,
                    reach,
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
    fn largest(&self) -> u128 {
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
    fn estimates(&self, tally: &Tally, noisy: &[f64], noise_std: f64) -> Vec<(f64, f64)> {
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
/// [`Calibration`]), from their reaches in grid units.
fn joint_sensitivity(tallied: &[Tallied], norm: Norm) -> f64 {
    let reaches = tallied.iter().filter_map(|tallied| match tallied {
        Tallied::Rows => None,
        Tallied::Private { reach, .. } => Some(*reach),
    });
    let (mut within, mut across) = (0u128, 0u128);
    for Reach {
        within: w,
        across: a,
    } in reaches
    {
        match norm {
            Norm::L1 => {
                within += w;
                across += 2 * a;
            }
            Norm::L2 => {
                within += w * w;
                across += 2 * a * a;
            }
        }
    }
    let worst = within.max(across);
    let units = match norm {
        Norm::L1 => ceil_f64(worst),
        Norm::L2 => ceil_sqrt(worst),
    };
    units * 2f64.powi(-FRACTION_BITS)
}

fn column_bounds(col: Column, schema: &Schema) -> (f64, f64) {
    match col {
        Column::Label => (0.0, 1.0),
        Column::Measure(index) => (schema.measures[index].min, schema.measures[index].max),
    }
}

/// The released groups: `noisy` is the mechanism's output over
/// [`Calibration::private_values`], `noise_std` its per-coordinate std.
pub fn groups(
    query: &Query,
    schema: &Schema,
    calibration: &Calibration,
    tally: &Tally,
    noisy: &[f64],
    noise_std: f64,
) -> Vec<api::AggregateGroup> {
    let estimates = calibration.estimates(tally, noisy, noise_std);
    let width = query.quantities.len();
    let position = |quantity: Quantity| {
        query
            .quantities
            .iter()
            .position(|&q| q == quantity)
            .unwrap_or(0)
    };
    let count_index = position(Quantity::Count);
    let mut groups = Vec::with_capacity(query.cells * query.statistics.len());
    for (key, cell) in query.keys(schema).into_iter().zip(estimates.chunks(width)) {
        for stat in &query.statistics {
            let (value, std) = match stat.op {
                Op::Count => cell[count_index],
                Op::Sum(col) => cell[position(Quantity::Sum(col))],
                Op::Mean(col) => {
                    let (sum, sum_std) = cell[position(Quantity::Sum(col))];
                    let (count, count_std) = cell[count_index];
                    let (lo, hi) = column_bounds(col, schema);
                    let count = count.max(1.0);
                    let mean = (sum / count).clamp(lo, hi);
                    let std = (sum_std.powi(2) + (mean * count_std).powi(2)).sqrt() / count;
                    (mean, std)
                }
            };
            groups.push(api::AggregateGroup {
                key: key.clone(),
                statistic: stat.name.clone(),
                value,
                std,
                exact: std == 0.0,
            });
        }
    }
    groups
}

/// An aggregate release, priced.
struct Aggregate {
    price: Price,
    query: Query,
    calibration: Calibration,
    schema: Schema,
    /// `None` when every quantity is public.
    mechanism: Option<Mechanism>,
}

fn norm(kind: api::AggregateMechanism, knobs: &Knobs) -> Result<Norm, ReleaseError> {
    match (kind, knobs.delta == Delta::ZERO) {
        (api::AggregateMechanism::Gaussian, false) => Ok(Norm::L2),
        (api::AggregateMechanism::Laplace, true) => Ok(Norm::L1),
        (api::AggregateMechanism::Gaussian, true) => Err(ReleaseError::Invalid(
            "the gaussian mechanism needs a delta in (0, 1); use \"mechanism\": \"laplace\" for \
             pure ε"
                .to_owned(),
        )),
        (api::AggregateMechanism::Laplace, false) => Err(ReleaseError::Invalid(
            "the laplace mechanism is pure ε: omit delta or set it to 0".to_owned(),
        )),
    }
}

/// Prices an aggregate: everything it needs is the schema, N and the query.
pub fn plan(
    dataset: &DatasetRecord,
    params: &api::AggregateParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    let norm = norm(params.mechanism, knobs)?;
    require_rows(dataset)?;
    let schema = &dataset.schema;
    let query = Query::parse(
        schema,
        &params.statistics,
        &params.group_by,
        knobs.max_groups,
    )
    .map_err(ReleaseError::Invalid)?;
    let calibration = Calibration::new(&query, dataset.privacy_unit, schema, norm);
    let n = dataset.n_rows;
    if !calibration.holds(n) {
        return Err(ReleaseError::Invalid(format!(
            "the declared bounds are too wide for an exact sum over {n} rows; narrow them"
        )));
    }
    let (price, mechanism) = if calibration.public() {
        // Public numbers cost nothing, whatever the target.
        let mut price = Price::free(n);
        price.epsilon = params.target_std.map(|_| Epsilon::ZERO);
        (price, None)
    } else {
        let dims = query.cells() * calibration.private_quantities();
        let (sensitivity, range) = (calibration.sensitivity, calibration.range(n));
        let spread = calibration.spread(&query, schema, n);
        let calibrated = match norm {
            Norm::L2 => knobs.gaussian(params.target_std, spread, sensitivity, dims, range)?,
            Norm::L1 => knobs.calibrated(params.target_std, spread, |epsilon| {
                Mechanism::laplace(epsilon, sensitivity, dims, range)
            })?,
        };
        (calibrated.price(sensitivity, n), Some(calibrated.mechanism))
    };
    Ok(Box::new(Aggregate {
        price,
        query,
        calibration,
        schema: schema.clone(),
        mechanism,
    }))
}

#[async_trait]
impl Planned for Aggregate {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let Aggregate {
            query,
            calibration,
            schema,
            mechanism,
            ..
        } = *self;
        let mut tally = calibration.tally(&query);
        let pass = || Tallying {
            query: query.clone(),
            calibration: calibration.clone(),
            tally: calibration.tally(&query),
        };
        let (noisy, noise_std) = match mechanism {
            // Counts only, public under the unit: from N, or from the rows'
            // dimensions (never their outcomes).
            None if !query.grouped() => {
                tally.count_all(&query, snapshot.dataset().n_rows);
                (Vec::new(), 0.0)
            }
            None => {
                tally = snapshot
                    .scan_inputs(pass())
                    .await
                    .map_err(|error| Failure::Corrupt(error.to_string()))?
                    .tally;
                (Vec::new(), 0.0)
            }
            Some(mechanism) => {
                tally = snapshot.sum(pass()).await?.tally;
                let noise_std = mechanism.noise_std();
                let exact = calibration.private_values(&tally);
                (noise_fixed(mechanism, exact).await?, noise_std)
            }
        };
        Ok(api::ReleaseResult::Aggregate(api::AggregateResult {
            groups: groups(&query, &schema, &calibration, &tally, &noisy, noise_std),
        }))
    }
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
