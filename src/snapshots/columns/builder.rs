//! Filling a [`Columns`]: rows as a stored block or a Parquet batch holds
//! them, decoded and checked.

use std::ops::Range;
use std::sync::OnceLock;

use super::{Columns, Shape, Stored, Touched};

/// Fills a [`Columns`], decoding rows as stored.
#[derive(Debug)]
pub struct Builder {
    pub(super) shape: Shape,
    pub(super) outcomes: bool,
    pub(super) rows: usize,
    pub(super) ids: String,
    pub(super) id_ends: Vec<u64>,
    pub(super) labels: Vec<u8>,
    pub(super) features: Vec<f32>,
    pub(super) measures: Vec<Vec<f64>>,
    pub(super) dimensions: Vec<Vec<u32>>,
    pub(super) users: Vec<i128>,
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
    /// measures, u32 dimension codes, its person's fingerprint under unit
    /// `user`); `label`, `measures` and `user` are ignored when the run is
    /// built without outcomes.
    pub fn push(
        &mut self,
        id: &str,
        label: u8,
        features: &[u8],
        measures: &[u8],
        dimensions: &[u8],
        user: i128,
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
            if shape.users {
                c.users.push(user);
            }
        }
        Ok(())
    }

    /// Appends `rows` rows' empty ids (a run without ids keeps none).
    pub(super) fn append_empty_ids(&mut self, rows: usize) {
        self.rows += rows;
    }

    /// Appends rows' ids (empty in a run without ids), and nothing else:
    /// the caller adds their values.
    pub(super) fn append_ids(&mut self, ids: &[&str]) -> Result<(), String> {
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
    /// measure's values, the labels and the users' fingerprints, one value
    /// a row, laid out row-major as they are appended.
    pub fn append_columns(
        &mut self,
        ids: &[&str],
        features: &[&[f32]],
        dimensions: &[&[u32]],
        outcomes: (&[u8], &[&[f64]], &[i128]),
    ) -> Result<(), String> {
        let (labels, measures, users) = outcomes;
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
        if self.outcomes && shape.users {
            sized("users", &[users], 1, rows)?;
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
            if shape.users {
                c.users.extend_from_slice(users);
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
            // Blocks in the database predate unit `user`, whose datasets
            // are only ever stored in files: no block holds a person.
            if shape.users {
                c.users.resize(c.users.len() + rows.len(), 0);
            }
        }
    }

    /// Appends rows `rows` of `from` (with their outcomes if this run
    /// keeps them, which `from` then holds).
    pub(super) fn extend(&mut self, from: &Columns, rows: Range<usize>) {
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
            if c.shape.users {
                c.users.extend_from_slice(&from.users[rows.clone()]);
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
            users: self.users.into(),
            index: OnceLock::new(),
            touched: Touched::default(),
        }
    }
}
