//! A run of a dataset's rows held as columns, in row id order.
//!
//! Features are one row-major f32 matrix: every learner and every
//! aggregate walks a row at a time (xᵢ·w, a row's cell), so a row's values
//! sit together; a column-major layout would make each row touch k cache
//! lines. Row ids are kept sorted (by their bytes), which is both the
//! canonical order every pass sums in and the index of the supplied-vector
//! join (a binary search).

use std::ops::Range;

use ndarray::ArrayView2;
use rayon::prelude::*;

use crate::dataset::Schema;

/// Rows per chunk of a parallel pass. Chunks start at fixed multiples of
/// this in the snapshot's row order, whatever the number of threads or
/// how the rows arrived in blocks, and their partial results are folded
/// in row order, so a pass gives bitwise the same result however the work
/// is split.
pub const CHUNK_ROWS: usize = 16_384;

/// What each row holds: the schema's columns, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub features: usize,
    pub measures: usize,
    pub dimensions: usize,
}

impl Shape {
    pub fn of(schema: &Schema) -> Shape {
        Shape {
            features: schema.k(),
            measures: schema.measures.len(),
            dimensions: schema.dimensions.len(),
        }
    }

    /// Bytes a row takes in memory, besides its id's text.
    pub fn row_bytes(&self, outcomes: bool) -> usize {
        let inputs = size_of::<u64>() + 4 * self.features + 4 * self.dimensions;
        if outcomes {
            inputs + 1 + 8 * self.measures
        } else {
            inputs
        }
    }
}

/// One row, outcomes included.
#[derive(Debug, Clone, Copy)]
pub struct Row<'c> {
    pub id: &'c str,
    pub label: u8,
    /// Scaled into [0, 1], schema order.
    pub features: &'c [f32],
    /// Clamped to their bounds, schema order.
    pub measures: &'c [f64],
    /// Indices into each dimension's declared values, schema order.
    pub dimensions: &'c [u32],
}

/// Rows as columns, sorted by row id. Built with or without the outcomes
/// (labels and measures): a block read for public columns only never holds
/// them.
#[derive(Debug, Clone, PartialEq)]
pub struct Columns {
    shape: Shape,
    outcomes: bool,
    /// Every row id's text, one after the other.
    ids: String,
    /// Where each row id ends in `ids`.
    id_ends: Vec<u64>,
    labels: Vec<u8>,
    features: Vec<f32>,
    measures: Vec<f64>,
    dimensions: Vec<u32>,
}

impl Columns {
    /// An empty run, to be filled row by row.
    pub fn builder(shape: Shape, outcomes: bool, capacity: usize) -> Builder {
        Builder {
            columns: Columns {
                shape,
                outcomes,
                ids: String::new(),
                id_ends: Vec::with_capacity(capacity),
                labels: Vec::with_capacity(if outcomes { capacity } else { 0 }),
                features: Vec::with_capacity(capacity * shape.features),
                measures: Vec::with_capacity(if outcomes {
                    capacity * shape.measures
                } else {
                    0
                }),
                dimensions: Vec::with_capacity(capacity * shape.dimensions),
            },
            sorted: true,
        }
    }

    /// No rows.
    pub fn empty(shape: Shape, outcomes: bool) -> Columns {
        Columns::builder(shape, outcomes, 0).columns
    }

    pub fn len(&self) -> usize {
        self.id_ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.id_ends.is_empty()
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Whether the labels and measures were read.
    pub fn has_outcomes(&self) -> bool {
        self.outcomes
    }

    /// Memory held.
    pub fn bytes(&self) -> usize {
        self.ids.capacity()
            + 8 * self.id_ends.capacity()
            + self.labels.capacity()
            + 4 * self.features.capacity()
            + 8 * self.measures.capacity()
            + 4 * self.dimensions.capacity()
    }

    pub fn id(&self, row: usize) -> &str {
        let start = if row == 0 {
            0
        } else {
            self.id_ends[row - 1] as usize
        };
        &self.ids[start..self.id_ends[row] as usize]
    }

    /// Row `row`'s scaled features.
    pub fn features(&self, row: usize) -> &[f32] {
        let k = self.shape.features;
        &self.features[row * k..(row + 1) * k]
    }

    /// Every row's label; only on a run read with the outcomes.
    pub fn labels(&self) -> &[u8] {
        debug_assert!(self.outcomes, "the outcomes were not read");
        &self.labels
    }

    /// The whole feature matrix, row-major.
    pub fn feature_matrix(&self) -> &[f32] {
        &self.features
    }

    pub fn dimensions(&self, row: usize) -> &[u32] {
        let p = self.shape.dimensions;
        &self.dimensions[row * p..(row + 1) * p]
    }

    /// Row `row` with its outcomes; only on a run read with them.
    pub fn row(&self, row: usize) -> Row<'_> {
        debug_assert!(self.outcomes, "the outcomes were not read");
        let m = self.shape.measures;
        Row {
            id: self.id(row),
            label: self.labels[row],
            features: self.features(row),
            measures: &self.measures[row * m..(row + 1) * m],
            dimensions: self.dimensions(row),
        }
    }

    /// Where the row with id `id` is.
    pub fn position(&self, id: &str) -> Option<usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            match self.id(middle).as_bytes().cmp(id.as_bytes()) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Some(middle),
            }
        }
        None
    }

    /// `part` of every chunk of [`CHUNK_ROWS`] rows, computed on all
    /// cores, in row order.
    pub fn chunks<P: Send>(&self, part: impl Fn(Range<usize>) -> P + Sync + Send) -> Vec<P> {
        chunked(self.len(), part)
    }

    /// This run and `later`'s rows in one run, in row id order; an error
    /// naming a row id both hold.
    pub fn merge(&self, later: &Columns) -> Result<Columns, String> {
        if self.shape != later.shape || self.outcomes != later.outcomes {
            return Err("cannot merge runs of different shapes".to_owned());
        }
        let mut merged = Columns::builder(self.shape, self.outcomes, self.len() + later.len());
        let (mut a, mut b) = (0, 0);
        while a < self.len() || b < later.len() {
            let take_first = match (a < self.len(), b < later.len()) {
                (true, true) => match self.id(a).as_bytes().cmp(later.id(b).as_bytes()) {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal => {
                        return Err(format!("row id {:?} is stored twice", self.id(a)));
                    }
                },
                (first, _) => first,
            };
            if take_first {
                merged.copy_from(self, a);
                a += 1;
            } else {
                merged.copy_from(later, b);
                b += 1;
            }
        }
        Ok(merged.columns)
    }
}

impl Columns {
    /// Rows of features `x` (one per row, each in [0, 1]) and labels `y`,
    /// with ids `0000000000`, `0000000001`, …: a synthetic dataset as a
    /// snapshot, for figures and benchmarks.
    pub fn of_labelled(x: ArrayView2<'_, f64>, y: &[u8]) -> Columns {
        let (rows, k) = x.dim();
        let shape = Shape {
            features: k,
            measures: 0,
            dimensions: 0,
        };
        let mut columns = Columns::builder(shape, true, rows).columns;
        for (index, (row, &label)) in x.rows().into_iter().zip(y).enumerate() {
            columns.ids.push_str(&format!("{index:010}"));
            columns.id_ends.push(columns.ids.len() as u64);
            columns.labels.push(label);
            #[allow(clippy::cast_possible_truncation)]
            columns
                .features
                .extend(row.iter().map(|&value| value as f32));
        }
        columns
    }
}

/// `part` of every chunk of [`CHUNK_ROWS`] of `len` rows, computed on all
/// cores, in row order.
pub fn chunked<P: Send>(len: usize, part: impl Fn(Range<usize>) -> P + Sync + Send) -> Vec<P> {
    (0..len.div_ceil(CHUNK_ROWS))
        .into_par_iter()
        .map(|chunk| part(chunk * CHUNK_ROWS..((chunk + 1) * CHUNK_ROWS).min(len)))
        .collect()
}

/// Fills a [`Columns`], decoding rows as stored.
#[derive(Debug)]
pub struct Builder {
    columns: Columns,
    sorted: bool,
}

impl Builder {
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Adds a row from its stored encoding (little-endian f32 features, f64
    /// measures, u32 dimension codes); `label` and `measures` are ignored
    /// when the run is built without outcomes.
    pub fn push(
        &mut self,
        id: &str,
        label: u8,
        features: &[u8],
        measures: &[u8],
        dimensions: &[u8],
    ) -> Result<(), String> {
        let shape = self.columns.shape;
        let outcomes = self.columns.outcomes;
        let malformed = |what: &str| format!("row {id:?} has malformed {what}");
        if features.len() != 4 * shape.features {
            return Err(malformed("features"));
        }
        if dimensions.len() != 4 * shape.dimensions {
            return Err(malformed("dimensions"));
        }
        if outcomes && (measures.len() != 8 * shape.measures || label > 1) {
            return Err(malformed("outcomes"));
        }
        if id.is_empty() {
            return Err("a stored row id is empty".to_owned());
        }
        if let Some(last) = self.columns.len().checked_sub(1)
            && self.columns.id(last).as_bytes() >= id.as_bytes()
        {
            self.sorted = false;
        }
        self.columns.ids.push_str(id);
        self.columns.id_ends.push(self.columns.ids.len() as u64);
        let c = &mut self.columns;
        c.features.extend(
            features
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        c.dimensions.extend(
            dimensions
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        if outcomes {
            c.labels.push(label);
            c.measures.extend(
                measures
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
            );
        }
        Ok(())
    }

    fn copy_from(&mut self, from: &Columns, row: usize) {
        let c = &mut self.columns;
        c.ids.push_str(from.id(row));
        c.id_ends.push(c.ids.len() as u64);
        c.features.extend_from_slice(from.features(row));
        c.dimensions.extend_from_slice(from.dimensions(row));
        if from.outcomes {
            let m = from.shape.measures;
            c.labels.push(from.labels[row]);
            c.measures
                .extend_from_slice(&from.measures[row * m..(row + 1) * m]);
        }
    }

    /// The run, which must have arrived in strictly increasing row id
    /// order (as the stores read it).
    pub fn finish(self) -> Result<Columns, String> {
        if !self.sorted {
            return Err("stored rows arrived out of row id order".to_owned());
        }
        Ok(self.columns)
    }

    /// The run sorted by row id, whatever order the rows arrived in (an
    /// upload's); an error naming a row id that came twice.
    pub fn finish_sorted(self) -> Result<Columns, String> {
        if self.sorted {
            return Ok(self.columns);
        }
        let columns = self.columns;
        let mut order: Vec<usize> = (0..columns.len()).collect();
        order.par_sort_unstable_by(|&a, &b| columns.id(a).as_bytes().cmp(columns.id(b).as_bytes()));
        if let Some(pair) = order
            .windows(2)
            .find(|pair| columns.id(pair[0]) == columns.id(pair[1]))
        {
            return Err(format!("row id {:?} is stored twice", columns.id(pair[0])));
        }
        let mut sorted = Columns::builder(columns.shape, columns.outcomes, columns.len());
        for row in order {
            sorted.copy_from(&columns, row);
        }
        Ok(sorted.columns)
    }
}

/// A row owning its values, for tests to build runs and rows from.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedRow {
    pub id: String,
    pub label: u8,
    pub features: Vec<f32>,
    pub measures: Vec<f64>,
    pub dimensions: Vec<u32>,
}

#[cfg(test)]
impl OwnedRow {
    pub fn view(&self) -> Row<'_> {
        Row {
            id: &self.id,
            label: self.label,
            features: &self.features,
            measures: &self.measures,
            dimensions: &self.dimensions,
        }
    }
}

#[cfg(test)]
impl Columns {
    /// A run of `rows` (in any order, with unique ids), outcomes included.
    pub fn of_rows(shape: Shape, rows: &[OwnedRow]) -> Columns {
        let bytes = |values: &[f32]| {
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
        };
        let mut builder = Columns::builder(shape, true, rows.len());
        for row in rows {
            let measures: Vec<u8> = row.measures.iter().flat_map(|v| v.to_le_bytes()).collect();
            let dimensions: Vec<u8> = row
                .dimensions
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            builder
                .push(
                    &row.id,
                    row.label,
                    &bytes(&row.features),
                    &measures,
                    &dimensions,
                )
                .expect("rows of the shape");
        }
        builder.finish_sorted().expect("unique row ids")
    }
}

#[cfg(test)]
#[path = "columns_tests.rs"]
mod tests;
