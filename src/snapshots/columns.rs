//! A run of a dataset's rows held as columns, in stored order.
//!
//! Features are one row-major f32 matrix: every learner walks a row at a
//! time (xᵢ·w), so a row's values sit together; a column-major layout
//! would make each row touch k cache lines. Measures and dimension codes
//! are a column each: a pass reads one measure or one dimension at a time
//! (an aggregate's cells, a learner's outcome), and a file's columns
//! become a run's without a copy. Rows stay in the order they were stored (upload by upload, each
//! in arrival order): that is the order every pass sums in, fixed by the
//! committed uploads alone, and a snapshot is built by appending stored
//! blocks without sorting. The supplied-vector join finds ids through an
//! index (ids sorted by their bytes), built the first time it is asked.

use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_buffer::ScalarBuffer;
use ndarray::ArrayView2;
use rayon::prelude::*;

use super::stored::Stored;
use crate::dataset::Schema;

mod batch;
pub use batch::batch_schema;

/// Rows per chunk of a parallel pass. Chunks start at fixed multiples of
/// this in the snapshot's row order, whatever the number of threads or
/// how the rows arrived in blocks, and their partial results are folded
/// in row order, so a pass gives bitwise the same result however the work
/// is split.
pub const CHUNK_ROWS: usize = 16_384;

/// What each row holds: the schema's columns, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub features: usize,
    pub measures: usize,
    pub dimensions: usize,
    /// Whether rows carry their ids: a pass that reads none is handed rows
    /// whose ids are all empty.
    pub ids: bool,
    /// Whether rows read with their outcomes carry their labels: a pass
    /// that reads none (an aggregate of counts and measures) is handed
    /// rows without.
    pub labels: bool,
}

impl Shape {
    pub fn of(schema: &Schema) -> Shape {
        Shape {
            features: schema.k(),
            measures: schema.measures.len(),
            dimensions: schema.dimensions.len(),
            ids: true,
            labels: true,
        }
    }

    /// Bytes a row takes in memory, besides its id's text: its id's end,
    /// its place in the id index, its values.
    pub fn row_bytes(&self, outcomes: bool) -> usize {
        let inputs = size_of::<u64>() + size_of::<u32>() + 4 * self.features + 4 * self.dimensions;
        if outcomes {
            inputs + 1 + 8 * self.measures
        } else {
            inputs
        }
    }
}

/// One row, outcomes included (its measures and dimension codes
/// gathered from their columns: for tests and single rows, not passes).
#[derive(Debug, Clone, PartialEq)]
pub struct Row<'c> {
    pub id: &'c str,
    pub label: u8,
    /// Scaled into [0, 1], schema order.
    pub features: &'c [f32],
    /// Clamped to their bounds, schema order.
    pub measures: Vec<f64>,
    /// Indices into each dimension's declared values, schema order.
    pub dimensions: Vec<u32>,
}

/// Rows as columns, in stored order. Built with or without the outcomes
/// (labels and measures): a block read for public columns only never holds
/// them. The values are Arrow buffers, so a block becomes a record batch
/// of the engine's plans and back without a copy (an aggregate function
/// is handed batches), and a batch decoded from a file becomes a block.
#[derive(Debug, Clone)]
pub struct Columns {
    shape: Shape,
    outcomes: bool,
    rows: usize,
    /// Every row id's text, one after the other.
    ids: String,
    /// Where each row id ends in `ids` (none in a run without ids).
    id_ends: Vec<u64>,
    labels: ScalarBuffer<u8>,
    /// Row-major.
    features: ScalarBuffer<f32>,
    /// A column per measure (none without the outcomes).
    measures: Vec<ScalarBuffer<f64>>,
    /// A column per dimension.
    dimensions: Vec<ScalarBuffer<u32>>,
    /// Rows in byte order of their ids, once [`Columns::position`] needs it.
    index: OnceLock<Vec<u32>>,
    /// Which columns were read since [`Columns::take_touched`] last looked.
    touched: Touched,
}

/// Whether a run's private columns (labels, measures) and its other
/// columns (ids, features, dimensions) were read: what the API tests check
/// a release's work before its debit against, on a snapshot held in
/// memory. A flag is written once, on the first read after a look, so a
/// pass pays one relaxed load per access, never a contended write.
#[derive(Debug, Default)]
struct Touched {
    outcomes: AtomicBool,
    inputs: AtomicBool,
}

impl Touched {
    #[inline]
    fn mark(flag: &AtomicBool) {
        if !flag.load(Ordering::Relaxed) {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

/// A copy is a run nobody has read yet.
impl Clone for Touched {
    fn clone(&self) -> Self {
        Touched::default()
    }
}

/// Runs are equal when their rows are (the index is derived from them).
impl PartialEq for Columns {
    fn eq(&self, other: &Columns) -> bool {
        (
            self.shape,
            self.outcomes,
            self.rows,
            &self.ids,
            &self.id_ends,
            &self.labels[..],
            &self.features[..],
        ) == (
            other.shape,
            other.outcomes,
            other.rows,
            &other.ids,
            &other.id_ends,
            &other.labels[..],
            &other.features[..],
        ) && self
            .measures
            .iter()
            .map(|m| &m[..])
            .eq(other.measures.iter().map(|m| &m[..]))
            && self
                .dimensions
                .iter()
                .map(|d| &d[..])
                .eq(other.dimensions.iter().map(|d| &d[..]))
    }
}

impl Columns {
    /// An empty run, to be filled row by row.
    pub fn builder(shape: Shape, outcomes: bool, capacity: usize) -> Builder {
        Builder {
            shape,
            outcomes,
            rows: 0,
            ids: String::new(),
            id_ends: Vec::with_capacity(if shape.ids { capacity } else { 0 }),
            labels: Vec::with_capacity(if outcomes && shape.labels {
                capacity
            } else {
                0
            }),
            features: Vec::with_capacity(capacity * shape.features),
            measures: match outcomes {
                true => vec![Vec::with_capacity(capacity); shape.measures],
                false => Vec::new(),
            },
            dimensions: vec![Vec::with_capacity(capacity); shape.dimensions],
        }
    }

    /// No rows.
    pub fn empty(shape: Shape, outcomes: bool) -> Columns {
        Columns::builder(shape, outcomes, 0).finish()
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Whether the labels and measures were read.
    pub fn has_outcomes(&self) -> bool {
        self.outcomes
    }

    /// Whether the labels were read.
    fn keeps_labels(&self) -> bool {
        self.outcomes && self.shape.labels
    }

    /// Memory held, the id index counted whether built or not.
    pub fn bytes(&self) -> usize {
        self.ids.capacity()
            + 4 * self.id_ends.capacity()
            + 8 * self.id_ends.capacity()
            + self.labels.inner().capacity()
            + self.features.inner().capacity()
            + self
                .measures
                .iter()
                .map(|m| m.inner().capacity())
                .sum::<usize>()
            + self
                .dimensions
                .iter()
                .map(|d| d.inner().capacity())
                .sum::<usize>()
    }

    /// (labels or measures, ids, features or dimensions): whether each was
    /// read since the last call, which resets both.
    pub fn take_touched(&self) -> (bool, bool) {
        (
            self.touched.outcomes.swap(false, Ordering::Relaxed),
            self.touched.inputs.swap(false, Ordering::Relaxed),
        )
    }

    /// Row `row`'s id (empty in a run without ids).
    pub fn id(&self, row: usize) -> &str {
        Touched::mark(&self.touched.inputs);
        if !self.shape.ids {
            debug_assert!(row < self.rows, "row {row} of {}", self.rows);
            return "";
        }
        let start = if row == 0 {
            0
        } else {
            self.id_ends[row - 1] as usize
        };
        &self.ids[start..self.id_ends[row] as usize]
    }

    /// Row `row`'s scaled features.
    pub fn features(&self, row: usize) -> &[f32] {
        Touched::mark(&self.touched.inputs);
        let k = self.shape.features;
        &self.features[row * k..(row + 1) * k]
    }

    /// Every row's label; only on a run read with the outcomes and labels.
    pub fn labels(&self) -> &[u8] {
        debug_assert!(self.keeps_labels(), "the labels were not read");
        Touched::mark(&self.touched.outcomes);
        &self.labels
    }

    /// Measure `j`'s value in every row; only on a run read with the
    /// outcomes.
    pub fn measure(&self, j: usize) -> &[f64] {
        debug_assert!(self.outcomes, "the outcomes were not read");
        Touched::mark(&self.touched.outcomes);
        &self.measures[j]
    }

    /// The whole feature matrix, row-major.
    pub fn feature_matrix(&self) -> &[f32] {
        Touched::mark(&self.touched.inputs);
        &self.features
    }

    /// Dimension `j`'s code in every row.
    pub fn dimension(&self, j: usize) -> &[u32] {
        Touched::mark(&self.touched.inputs);
        &self.dimensions[j]
    }

    /// Row `row` with its outcomes; only on a run read with them.
    pub fn row(&self, row: usize) -> Row<'_> {
        debug_assert!(self.outcomes, "the outcomes were not read");
        Touched::mark(&self.touched.outcomes);
        Row {
            id: self.id(row),
            label: self.labels()[row],
            features: self.features(row),
            measures: self.measures.iter().map(|column| column[row]).collect(),
            dimensions: (0..self.shape.dimensions)
                .map(|j| self.dimension(j)[row])
                .collect(),
        }
    }

    /// Where the row with id `id` is: a binary search of the id index,
    /// which the first call builds (on all cores).
    pub fn position(&self, id: &str) -> Option<usize> {
        let index = self.index.get_or_init(|| {
            let mut order: Vec<u32> = (0..self.len())
                .map(|row| u32::try_from(row).expect("BUG: a run holds at most 2^32 rows"))
                .collect();
            order.par_sort_unstable_by(|&a, &b| {
                self.id(a as usize)
                    .as_bytes()
                    .cmp(self.id(b as usize).as_bytes())
            });
            order
        });
        index
            .binary_search_by(|&row| self.id(row as usize).as_bytes().cmp(id.as_bytes()))
            .ok()
            .map(|at| index[at] as usize)
    }

    /// `part` of every chunk of [`CHUNK_ROWS`] rows, computed on all
    /// cores, in row order.
    pub fn chunks<P: Send>(&self, part: impl Fn(Range<usize>) -> P + Sync + Send) -> Vec<P> {
        chunked(self.len(), part)
    }

    /// This run followed by `later`'s rows: the next version of a dataset
    /// whose upload stored `later`.
    pub fn joined(&self, later: &Columns) -> Result<Columns, String> {
        if self.shape != later.shape || self.outcomes != later.outcomes {
            return Err("cannot join runs of different shapes".to_owned());
        }
        let mut joined = Columns::builder(self.shape, self.outcomes, self.len() + later.len());
        joined.extend(self, 0..self.len());
        joined.extend(later, 0..later.len());
        Ok(joined.finish())
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
            ids: true,
            labels: true,
        };
        let mut columns = Columns::builder(shape, true, rows);
        for (index, (row, &label)) in x.rows().into_iter().zip(y).enumerate() {
            columns.ids.push_str(&format!("{index:010}"));
            columns.id_ends.push(columns.ids.len() as u64);
            columns.rows += 1;
            columns.labels.push(label);
            #[allow(clippy::cast_possible_truncation)]
            columns
                .features
                .extend(row.iter().map(|&value| value as f32));
        }
        columns.finish()
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
    shape: Shape,
    outcomes: bool,
    rows: usize,
    ids: String,
    id_ends: Vec<u64>,
    labels: Vec<u8>,
    features: Vec<f32>,
    measures: Vec<Vec<f64>>,
    dimensions: Vec<Vec<u32>>,
}

/// Little-endian 4-byte words.
fn words(bytes: &[u8]) -> impl Iterator<Item = [u8; 4]> + '_ {
    bytes
        .chunks_exact(4)
        .map(|word| [word[0], word[1], word[2], word[3]])
}

/// Little-endian 8-byte floats.
fn doubles(bytes: &[u8]) -> impl Iterator<Item = f64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

/// Whether `columns` are `width` columns of `rows` values each.
fn sized<T>(what: &str, columns: &[&[T]], width: usize, rows: usize) -> Result<(), String> {
    if columns.len() == width && columns.iter().all(|column| column.len() == rows) {
        Ok(())
    } else {
        let lengths: Vec<usize> = columns.iter().map(|column| column.len()).collect();
        Err(format!(
            "{rows} rows with {what} of {lengths:?} values, not {width} of {rows}"
        ))
    }
}

/// Appends `rows` rows of `columns` (each `rows` long) to `into`, a row's
/// values together, written a row at a time into room made for them all
/// (pushing row by row cost twice as much a value).
fn row_major<T: Copy + Default>(into: &mut Vec<T>, columns: &[&[T]], rows: usize) {
    let (start, width) = (into.len(), columns.len());
    if width == 0 {
        return;
    }
    into.resize(start + rows * width, T::default());
    for (row, values) in into[start..].chunks_exact_mut(width).enumerate() {
        for (value, column) in values.iter_mut().zip(columns) {
            *value = column[row];
        }
    }
}

/// Why a row's id is refused: every stored row has one, and a run of a
/// shape without ids holds none.
fn empty_or_not(shape: Shape) -> String {
    match shape.ids {
        true => "a stored row id is empty".to_owned(),
        false => "a row id in a run without ids".to_owned(),
    }
}

impl Builder {
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
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
        let shape = self.shape;
        let outcomes = self.outcomes;
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
        self.append_ids(&[id])?;
        let c = &mut *self;
        c.features.extend(words(features).map(f32::from_le_bytes));
        for (column, word) in c.dimensions.iter_mut().zip(words(dimensions)) {
            column.push(u32::from_le_bytes(word));
        }
        if outcomes {
            if shape.labels {
                c.labels.push(label);
            }
            for (column, value) in c.measures.iter_mut().zip(doubles(measures)) {
                column.push(value);
            }
        }
        Ok(())
    }

    /// Appends `rows` rows' empty ids (a run without ids keeps none).
    fn append_empty_ids(&mut self, rows: usize) {
        self.rows += rows;
    }

    /// Appends rows' ids (empty in a run without ids), and nothing else:
    /// the caller adds their values.
    fn append_ids(&mut self, ids: &[&str]) -> Result<(), String> {
        if !self.shape.ids {
            if ids.iter().any(|id| !id.is_empty()) {
                return Err(empty_or_not(self.shape));
            }
            self.append_empty_ids(ids.len());
            return Ok(());
        }
        self.ids.reserve_exact(ids.iter().map(|id| id.len()).sum());
        self.id_ends.reserve_exact(ids.len());
        for id in ids {
            if id.is_empty() == self.shape.ids {
                return Err(empty_or_not(self.shape));
            }
            self.ids.push_str(id);
            self.id_ends.push(self.ids.len() as u64);
            self.rows += 1;
        }
        Ok(())
    }

    /// Appends rows given column by column, as read back from files:
    /// their ids, and each feature's, dimension's and (with the outcomes)
    /// measure's values and the labels, one value a row, laid out
    /// row-major as they are appended.
    pub fn append_columns(
        &mut self,
        ids: &[&str],
        features: &[&[f32]],
        dimensions: &[&[u32]],
        labels: &[u8],
        measures: &[&[f64]],
    ) -> Result<(), String> {
        let rows = ids.len();
        let shape = self.shape;
        sized("features", features, shape.features, rows)?;
        sized("dimension codes", dimensions, shape.dimensions, rows)?;
        if self.outcomes && shape.labels {
            sized("labels", &[labels], 1, rows)?;
            if labels.iter().any(|&label| label > 1) {
                return Err("a stored label is neither 0 nor 1".to_owned());
            }
        }
        if self.outcomes {
            sized("measures", measures, shape.measures, rows)?;
        }
        self.append_ids(ids)?;
        let c = &mut *self;
        row_major(&mut c.features, features, rows);
        for (column, values) in c.dimensions.iter_mut().zip(dimensions) {
            column.extend_from_slice(values);
        }
        if c.outcomes {
            if shape.labels {
                c.labels.extend_from_slice(labels);
            }
            for (column, values) in c.measures.iter_mut().zip(measures) {
                column.extend_from_slice(values);
            }
        }
        Ok(())
    }

    /// Appends rows `rows` of a stored block (of this run's shape, with
    /// the outcomes if this run keeps them).
    pub fn append_stored(&mut self, block: &Stored<'_>, rows: Range<usize>) {
        let shape = self.shape;
        let (k, m, p) = (shape.features, shape.measures, shape.dimensions);
        let c = &mut *self;
        c.rows += rows.len();
        if shape.ids {
            let first = if rows.start == 0 {
                0
            } else {
                block.id_end(rows.start - 1)
            };
            let last = if rows.is_empty() {
                first
            } else {
                block.id_end(rows.end - 1)
            };
            let base = c.ids.len() as u64;
            c.ids.push_str(&block.ids[first..last]);
            c.id_ends.extend(
                rows.clone()
                    .map(|row| base + (block.id_end(row) - first) as u64),
            );
        }
        c.features.extend(
            words(&block.features[4 * k * rows.start..4 * k * rows.end]).map(f32::from_le_bytes),
        );
        let codes = &block.dimensions[4 * p * rows.start..4 * p * rows.end];
        for (j, column) in c.dimensions.iter_mut().enumerate() {
            column.extend(words(codes).skip(j).step_by(p).map(u32::from_le_bytes));
        }
        if c.outcomes {
            if shape.labels {
                c.labels
                    .extend_from_slice(&block.labels[rows.start..rows.end]);
            }
            let values = &block.measures[8 * m * rows.start..8 * m * rows.end];
            for (j, column) in c.measures.iter_mut().enumerate() {
                column.extend(doubles(values).skip(j).step_by(m));
            }
        }
    }

    /// Appends rows `rows` of `from` (with their outcomes if this run
    /// keeps them, which `from` then holds).
    fn extend(&mut self, from: &Columns, rows: Range<usize>) {
        let k = from.shape.features;
        let c = &mut *self;
        c.rows += rows.len();
        if c.shape.ids {
            let first = if rows.start == 0 {
                0
            } else {
                from.id_ends[rows.start - 1]
            };
            let last = if rows.is_empty() {
                first
            } else {
                from.id_ends[rows.end - 1]
            };
            let base = c.ids.len() as u64;
            c.ids.push_str(&from.ids[first as usize..last as usize]);
            c.id_ends.extend(
                from.id_ends[rows.clone()]
                    .iter()
                    .map(|end| base + (end - first)),
            );
        }
        c.features
            .extend_from_slice(&from.features[k * rows.start..k * rows.end]);
        for (column, values) in c.dimensions.iter_mut().zip(&from.dimensions) {
            column.extend_from_slice(&values[rows.clone()]);
        }
        if c.outcomes {
            if c.shape.labels {
                c.labels.extend_from_slice(&from.labels[rows.clone()]);
            }
            for (column, values) in c.measures.iter_mut().zip(&from.measures) {
                column.extend_from_slice(&values[rows.clone()]);
            }
        }
    }

    pub fn finish(self) -> Columns {
        Columns {
            shape: self.shape,
            outcomes: self.outcomes,
            rows: self.rows,
            ids: self.ids,
            id_ends: self.id_ends,
            labels: self.labels.into(),
            features: self.features.into(),
            measures: self.measures.into_iter().map(Into::into).collect(),
            dimensions: self.dimensions.into_iter().map(Into::into).collect(),
            index: OnceLock::new(),
            touched: Touched::default(),
        }
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
            measures: self.measures.clone(),
            dimensions: self.dimensions.clone(),
        }
    }
}

#[cfg(test)]
impl Columns {
    /// Its rows without their outcomes, as a read of the public columns
    /// gives them.
    pub fn inputs(&self) -> Columns {
        let mut inputs = Columns::builder(self.shape, false, self.len());
        inputs.extend(self, 0..self.len());
        inputs.finish()
    }

    /// A run of `rows` in their order (with unique ids), outcomes included.
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
        builder.finish()
    }
}

#[cfg(test)]
#[path = "columns_tests.rs"]
mod tests;
