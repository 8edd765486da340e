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

use crate::domain::dataset::Schema;

mod batch;
mod bounded;
mod builder;
mod stored;

pub use batch::{USER, USER_TYPE, batch_schema, dimension};
pub use builder::Builder;
pub use stored::Stored;

/// Rows per chunk of a parallel pass. Chunks start at fixed multiples of
/// this in the snapshot's row order, whatever the number of threads or
/// how the rows arrived in blocks, and their partial results are folded
/// in row order, so a pass gives bitwise the same result however the work
/// is split.
pub const CHUNK_ROWS: usize = 16_384;

/// A pass over a snapshot's rows, block by block in stored order; what it
/// accumulates stays in it.
pub trait Pass: Send + 'static {
    fn visit(&mut self, block: &Columns) -> Result<(), String>;
}

/// Rows per block when a snapshot is streamed: a multiple of
/// [`CHUNK_ROWS`], so that a streamed pass sums in the same chunks as a
/// pass over the snapshot in memory.
pub const STREAM_ROWS: usize = 4 * CHUNK_ROWS;

/// What each row holds: the schema's columns, counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Whether rows read with their outcomes carry their person's keyed
    /// fingerprint (unit `user`): private, so read with the outcomes.
    #[serde(default)]
    pub users: bool,
}

impl Shape {
    pub fn of(schema: &Schema) -> Shape {
        Shape {
            features: schema.k(),
            measures: schema.measures.len(),
            dimensions: schema.dimensions.len(),
            ids: true,
            labels: true,
            users: schema.users.is_some(),
        }
    }

    /// Bytes a row takes in memory, besides its id's text: its id's end,
    /// its place in the id index, its values.
    pub fn row_bytes(&self, outcomes: bool) -> usize {
        let inputs = size_of::<u64>() + size_of::<u32>() + 4 * self.features + 4 * self.dimensions;
        if outcomes {
            inputs + 1 + 8 * self.measures + if self.users { 16 } else { 0 }
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
    /// Each row's person's fingerprint (unit `user`, with the outcomes).
    users: ScalarBuffer<i128>,
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
            &self.users[..],
        ) == (
            other.shape,
            other.outcomes,
            other.rows,
            &other.ids,
            &other.id_ends,
            &other.labels[..],
            &other.features[..],
            &other.users[..],
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
            users: Vec::with_capacity(if outcomes && shape.users { capacity } else { 0 }),
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

    /// Every row's person's fingerprint (unit `user`); only on a run read
    /// with the outcomes.
    pub fn users(&self) -> &[i128] {
        debug_assert!(self.outcomes, "the outcomes were not read");
        Touched::mark(&self.touched.outcomes);
        &self.users
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
            users: false,
        };
        let mut columns = Columns::builder(shape, true, rows);
        for (index, (row, &label)) in x.rows().into_iter().zip(y).enumerate() {
            columns.ids.push_str(&format!("{index:010}"));
            columns.id_ends.push(columns.ids.len() as u64);
            columns.rows += 1;
            columns.labels.push(label);
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
                    0,
                )
                .expect("rows of the shape");
        }
        builder.finish()
    }
}

#[cfg(test)]
#[path = "columns_tests.rs"]
mod tests;
