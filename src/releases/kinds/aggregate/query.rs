//! An aggregate request read against the schema: its statistics, the
//! quantities they need, and the groups they cover.

use std::collections::BTreeMap;

use crate::domain::dataset::Schema;
use crate::snapshots::Columns;

use super::*;

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
pub(super) enum Op {
    Count,
    Sum(Column),
    Mean(Column),
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct Statistic {
    pub(super) name: String,
    pub(super) op: Op,
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
    pub(super) statistics: Vec<Statistic>,
    /// Indices of the `group_by` dimensions, with their numbers of values.
    pub(super) group_by: Vec<(usize, usize)>,
    pub(super) cells: usize,
    pub(super) quantities: Vec<Quantity>,
}

pub(super) fn column(schema: &Schema, name: &str) -> Result<Column, String> {
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

pub(super) fn statistic(schema: &Schema, name: &str) -> Result<Statistic, String> {
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
    pub(super) fn cell(&self, dimensions: &[u32]) -> Result<usize, String> {
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

    /// The cells of the rows `rows` of `block`, as `Query::cell` finds
    /// them, a dimension's column at a time.
    pub(super) fn cells_of(
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
    pub(super) fn keys(&self, schema: &Schema) -> Vec<BTreeMap<String, String>> {
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
