//! How rows are stored: in blocks of up to [`BLOCK_ROWS`] rows of one
//! upload, in the order they arrived, each column packed into one byte
//! string (a BLOB in SQLite, a `bytea` in Postgres). An upload writes, and
//! a snapshot reads, one database row per block, and decoding a block is a
//! copy of its bytes, not a parse of each row.
//!
//! A block's columns:
//! - `ids`: the row ids' UTF-8 text, one after the other;
//! - `id_ends`: where each id ends in `ids`, little-endian u32;
//! - `labels`: one byte a row, 0 or 1;
//! - `features`: the scaled features, row-major little-endian f32;
//! - `measures`: the clamped measures, row-major little-endian f64;
//! - `dimensions`: the dimension value indices, row-major little-endian u32.

use super::columns::{CHUNK_ROWS, Shape};
use crate::ingest::RowRecord;

/// Most rows a stored block holds.
pub const BLOCK_ROWS: usize = CHUNK_ROWS;

/// A block as the store returns it: its row count and columns, without
/// `labels` and `measures` (empty) when the outcomes were not read.
#[derive(Debug, Clone, Copy)]
pub struct RawBlock<'a> {
    pub rows: i64,
    pub ids: &'a [u8],
    pub id_ends: &'a [u8],
    pub labels: &'a [u8],
    pub features: &'a [u8],
    pub measures: &'a [u8],
    pub dimensions: &'a [u8],
}

/// A block checked against its shape: every column holds `rows` rows,
/// every id is non-empty UTF-8, every label 0 or 1.
#[derive(Debug)]
pub struct Stored<'a> {
    pub rows: usize,
    pub ids: &'a str,
    id_ends: &'a [u8],
    pub labels: &'a [u8],
    pub features: &'a [u8],
    pub measures: &'a [u8],
    pub dimensions: &'a [u8],
}

impl<'a> Stored<'a> {
    /// Checks `raw` holds rows of `shape`, with the outcomes if `outcomes`.
    pub fn check(raw: RawBlock<'a>, shape: Shape, outcomes: bool) -> Result<Stored<'a>, String> {
        let rows = usize::try_from(raw.rows)
            .ok()
            .filter(|&rows| rows <= BLOCK_ROWS)
            .ok_or_else(|| format!("a block of {} rows", raw.rows))?;
        let sized = |what: &str, bytes: &[u8], width: usize| {
            if bytes.len() == rows * width {
                Ok(())
            } else {
                Err(format!(
                    "a block of {rows} rows has {} bytes of {what}, not {}",
                    bytes.len(),
                    rows * width
                ))
            }
        };
        sized("id ends", raw.id_ends, 4)?;
        sized("features", raw.features, 4 * shape.features)?;
        sized("dimensions", raw.dimensions, 4 * shape.dimensions)?;
        if outcomes {
            sized("labels", raw.labels, 1)?;
            sized("measures", raw.measures, 8 * shape.measures)?;
            if raw.labels.iter().any(|&label| label > 1) {
                return Err("a stored label is neither 0 nor 1".to_owned());
            }
        }
        let ids = std::str::from_utf8(raw.ids).map_err(|error| format!("stored ids: {error}"))?;
        let stored = Stored {
            rows,
            ids,
            id_ends: raw.id_ends,
            labels: if outcomes { raw.labels } else { &[] },
            features: raw.features,
            measures: if outcomes { raw.measures } else { &[] },
            dimensions: raw.dimensions,
        };
        let mut start = 0;
        for row in 0..rows {
            let end = stored.id_end(row);
            if end <= start || end > ids.len() || !ids.is_char_boundary(end) {
                return Err(format!("stored id {row} of a block ends at {end}"));
            }
            start = end;
        }
        if start != ids.len() {
            return Err("a block's ids run past their last end".to_owned());
        }
        Ok(stored)
    }

    /// Where row `row`'s id ends in `ids`.
    pub fn id_end(&self, row: usize) -> usize {
        let word = &self.id_ends[4 * row..4 * row + 4];
        u32::from_le_bytes([word[0], word[1], word[2], word[3]]) as usize
    }
}

/// Rows packed into a block for storage.
#[derive(Debug, Default)]
pub struct Packed {
    pub rows: usize,
    pub ids: Vec<u8>,
    pub id_ends: Vec<u8>,
    pub labels: Vec<u8>,
    pub features: Vec<u8>,
    pub measures: Vec<u8>,
    pub dimensions: Vec<u8>,
}

impl Packed {
    /// Adds a row (encoded by the parser as it is stored).
    pub fn push(&mut self, row: &RowRecord) {
        self.rows += 1;
        self.ids.extend_from_slice(row.row_id.as_bytes());
        // A block's ids take at most BLOCK_ROWS × 256 bytes: 4 MiB.
        let end = u32::try_from(self.ids.len()).expect("BUG: a block's ids fit in 4 GiB");
        self.id_ends.extend_from_slice(&end.to_le_bytes());
        self.labels.push(row.label);
        self.features.extend_from_slice(&row.features);
        self.measures.extend_from_slice(&row.measures);
        self.dimensions.extend_from_slice(&row.dimensions);
    }

    pub fn is_full(&self) -> bool {
        self.rows >= BLOCK_ROWS
    }

    /// The block as the store would return it.
    pub fn raw(&self) -> RawBlock<'_> {
        RawBlock {
            rows: self.rows as i64,
            ids: &self.ids,
            id_ends: &self.id_ends,
            labels: &self.labels,
            features: &self.features,
            measures: &self.measures,
            dimensions: &self.dimensions,
        }
    }
}
