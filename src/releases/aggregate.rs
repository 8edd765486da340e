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
//! | `label` | either  | `sum:m`     | 0 (public)          | 0 (public)       |
//! | `label` | either  | `sum:label` | 1                   | 1                |
//! | `row`   | no      | `count`     | 0 (N is public)     | 0                |
//! | `row`   | no      | `sum:c`     | hi − lo             | hi − lo          |
//! | `row`   | yes     | `count`     | √2                  | 2                |
//! | `row`   | yes     | `sum:c`     | max(hi − lo, √2·M)  | max(hi − lo, 2M) |
//!
//! Under `label` a neighbour flips one label: dimensions and measures stay,
//! so only the label sum of that row's cell moves, by 1. Under `row` one row
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
//! public: mean = noisy sum / count, std = std(sum) / count, `null` for an
//! empty group. Under `row` with `group_by` the count is private and is
//! released with the sum (the budget is split between them by the
//! normalisation above): mean = noisy sum / max(noisy count, 1), and the
//! std is the delta-method √(std(sum)² + mean²·std(count)²) / max(count, 1).
//! Noisy means are clamped to [lo, hi]; `std` describes the noise before
//! clamping.

use std::collections::BTreeMap;

use dpgate_api_types::{self as api, PrivacyUnit};

use crate::dataset::Schema;
use crate::store::StoredRow;

/// Most statistics one request may ask for.
pub const MAX_STATISTICS: usize = 16;

/// Default most groups (combinations of dimension values) one aggregate
/// may cover (`DPGATE_MAX_GROUPS`).
pub const DEFAULT_MAX_GROUPS: usize = 100_000;

/// A column a sum or mean is taken of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Label,
    Measure(usize),
}

/// What is summed per cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    Count,
    Sum(Column),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Count,
    Sum(Column),
    Mean(Column),
}

#[derive(Debug, Clone, PartialEq)]
struct Statistic {
    name: String,
    op: Op,
}

/// The norm a mechanism measures sensitivity in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    L1,
    L2,
}

/// An aggregate request checked against the schema.
#[derive(Debug, Clone, PartialEq)]
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

    /// Starts summing rows.
    pub fn tally(&self) -> Tally {
        Tally {
            sums: vec![0.0; self.cells * self.quantities.len()],
        }
    }

    fn cell(&self, row: &StoredRow) -> Result<usize, String> {
        self.group_by
            .iter()
            .try_fold(0usize, |cell, &(dimension, values)| {
                let value = row.dimensions.get(dimension).map(|&v| v as usize);
                match value {
                    Some(value) if value < values => Ok(cell * values + value),
                    _ => Err(format!("row {} has a malformed dimension", row.row_id)),
                }
            })
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

/// Per-cell sums of a query's quantities.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    /// Cell-major: `sums[cell * quantities + q]`.
    sums: Vec<f64>,
}

impl Tally {
    /// Adds one stored row (measures are clamped on ingest).
    pub fn add(&mut self, query: &Query, row: &StoredRow) -> Result<(), String> {
        let width = query.quantities.len();
        let cell = query.cell(row)?;
        let sums = &mut self.sums[cell * width..(cell + 1) * width];
        for (sum, quantity) in sums.iter_mut().zip(&query.quantities) {
            *sum += match quantity {
                Quantity::Count => 1.0,
                Quantity::Sum(Column::Label) => f64::from(row.label),
                Quantity::Sum(Column::Measure(index)) => row
                    .measures
                    .get(*index)
                    .copied()
                    .ok_or_else(|| format!("row {} has a malformed measure", row.row_id))?,
            };
        }
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
    let (lo, hi) = match quantity {
        Quantity::Count => (1.0, 1.0),
        Quantity::Sum(col) => column_bounds(col, schema),
    };
    match (unit, quantity) {
        (PrivacyUnit::Label, Quantity::Sum(Column::Label)) => Bound {
            within: 1.0,
            across: 0.0,
        },
        (PrivacyUnit::Label, _) => Bound {
            within: 0.0,
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

/// The sensitivity, in `norm`, of private quantities each divided by its own
/// sensitivity (see the module docs).
pub fn joint_sensitivity(bounds: &[Bound], norm: Norm) -> f64 {
    let mut within = 0.0;
    let mut across = 0.0;
    for &bound in bounds {
        let weight = own_sensitivity(bound, norm);
        if weight == 0.0 {
            continue;
        }
        let (w, a) = (bound.within / weight, bound.across / weight);
        match norm {
            Norm::L1 => {
                within += w;
                across += 2.0 * a;
            }
            Norm::L2 => {
                within += w * w;
                across += 2.0 * a * a;
            }
        }
    }
    let worst: f64 = f64::max(within, across);
    match norm {
        Norm::L1 => worst,
        Norm::L2 => worst.sqrt(),
    }
}

/// A query calibrated for a dataset: which quantities are noised, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Per quantity: its own sensitivity, 0 if it is public.
    pub weights: Vec<f64>,
    /// The joint sensitivity of the normalised private quantities.
    pub sensitivity: f64,
}

impl Calibration {
    pub fn new(query: &Query, unit: PrivacyUnit, schema: &Schema, norm: Norm) -> Self {
        let bounds: Vec<Bound> = query
            .quantities
            .iter()
            .map(|&quantity| bound(unit, query.grouped(), quantity, schema))
            .collect();
        Calibration {
            weights: bounds
                .iter()
                .map(|&bound| own_sensitivity(bound, norm))
                .collect(),
            sensitivity: joint_sensitivity(&bounds, norm),
        }
    }

    /// Quantities that get noise, per cell.
    pub fn private_quantities(&self) -> usize {
        self.weights.iter().filter(|&&weight| weight > 0.0).count()
    }

    /// Whether nothing needs noise.
    pub fn public(&self) -> bool {
        self.weights.iter().all(|&weight| weight == 0.0)
    }

    /// The normalised private quantities, cell by cell: what the mechanism
    /// adds noise to.
    pub fn private_values(&self, tally: &Tally) -> Vec<f64> {
        tally
            .sums
            .chunks(self.weights.len())
            .flat_map(|cell| {
                cell.iter()
                    .zip(&self.weights)
                    .filter(|&(_, &weight)| weight > 0.0)
                    .map(|(sum, weight)| sum / weight)
            })
            .collect()
    }

    /// Every quantity of every cell with its noise std: the exact sums where
    /// public, `noisy` (the mechanism's output) scaled back where private.
    fn estimates(&self, tally: &Tally, noisy: &[f64], noise_std: f64) -> Vec<(f64, f64)> {
        let mut noisy = noisy.iter();
        tally
            .sums
            .chunks(self.weights.len())
            .flat_map(|cell| cell.iter().zip(&self.weights))
            .map(|(&sum, &weight)| {
                if weight == 0.0 {
                    (sum, 0.0)
                } else {
                    let value = noisy.next().copied().unwrap_or(f64::NAN);
                    (value * weight, noise_std * weight)
                }
            })
            .collect()
    }
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
    let count_public = calibration.weights.get(count_index) == Some(&0.0);
    let mut groups = Vec::with_capacity(query.cells * query.statistics.len());
    for (key, cell) in query.keys(schema).into_iter().zip(estimates.chunks(width)) {
        for stat in &query.statistics {
            let (value, std, exact) = match stat.op {
                Op::Count => {
                    let (value, std) = cell[count_index];
                    (Some(value), std, std == 0.0)
                }
                Op::Sum(col) => {
                    let (value, std) = cell[position(Quantity::Sum(col))];
                    (Some(value), std, std == 0.0)
                }
                Op::Mean(col) => {
                    let (sum, sum_std) = cell[position(Quantity::Sum(col))];
                    let (count, count_std) = cell[count_index];
                    let (lo, hi) = column_bounds(col, schema);
                    if count_public && count == 0.0 {
                        (None, 0.0, sum_std == 0.0)
                    } else {
                        let count = count.max(1.0);
                        let mean = (sum / count).clamp(lo, hi);
                        let std = (sum_std.powi(2) + (mean * count_std).powi(2)).sqrt() / count;
                        (Some(mean), std, std == 0.0)
                    }
                }
            };
            groups.push(api::AggregateGroup {
                key: key.clone(),
                statistic: stat.name.clone(),
                value,
                std,
                exact,
            });
        }
    }
    groups
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
