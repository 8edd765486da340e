//! The `row_blocks` table's layout: how uploads were stored before the
//! `version_files` migration, in blocks of up to [`BLOCK_ROWS`] rows of one
//! upload, in the order they arrived, each column packed into one byte
//! string (a BLOB in SQLite, a `bytea` in Postgres). The start-up upgrade
//! packs rows stored one per database row into such blocks; the engine
//! checks and decodes them (`crate::snapshots::Stored`) to write them out
//! as files.
//!
//! A block's columns:
//! - `ids`: the row ids' UTF-8 text, one after the other;
//! - `id_ends`: where each id ends in `ids`, little-endian u32;
//! - `labels`: one byte a row, 0 or 1;
//! - `features`: the scaled features, row-major little-endian f32;
//! - `measures`: the clamped measures, row-major little-endian f64;
//! - `dimensions`: the dimension value indices, row-major little-endian u32.

use crate::domain::row::RowRecord;

/// Most rows a stored block holds (the data plane's chunk when blocks were
/// written).
pub const BLOCK_ROWS: usize = 16_384;

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
