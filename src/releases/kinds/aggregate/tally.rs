//! The per-cell sums of an aggregate, as exact integers on the public
//! grid, and the pass that counts them.

use crate::engine::{Needed, Summed};
use crate::snapshots::Columns;
use crate::snapshots::Pass;
#[cfg(test)]
use crate::snapshots::Row;

use super::*;

/// Per-cell exact sums of a query's quantities, each in its own units
/// (`Tallied`): integers, so the same whatever the order of the rows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    /// Cell-major: `sums[cell * quantities + q]`.
    pub(super) sums: Vec<i128>,
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
pub(crate) struct Tallying {
    pub(super) query: Query,
    pub(super) calibration: Calibration,
    pub(super) tally: Tally,
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
            people: false,
        }
    }

    fn grouped_by(&self) -> Vec<usize> {
        self.query
            .group_by
            .iter()
            .map(|&(dimension, _)| dimension)
            .collect()
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
