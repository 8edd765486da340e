//! The in-order end of the pipeline: rows come here one at a time in line
//! order, as one thread reading the upload would have built them. What
//! needs more than one row (a row id seen before, the sums, the count) is
//! decided here, and rows are batched for the sink, bad lines collected.

use dpgate_api_types::LineError;

use super::{BATCH_ROWS, MAX_REPORTED_ERRORS, RowRecord, Summary};
use crate::dataset::WalrStats;

/// A row as a worker built it, with the hash of its id (hashed on the
/// worker, so that this serial end does not).
pub(super) struct ParsedRow {
    pub(super) record: RowRecord,
    pub(super) id_hash: u64,
}

/// What one line came to: a row, or why not.
pub(super) type Parsed = Result<ParsedRow, LineError>;

/// Collects rows into batches for `sink`, and bad lines into errors.
pub(super) struct Collector<F> {
    batch: Vec<RowRecord>,
    errors: Vec<LineError>,
    rows: u64,
    sink: F,
    /// The sink said stop (the store failed or the client went away).
    stopped: bool,
    ids: RowIds,
    stats: WalrStats,
    /// The row being summed's features, decoded (kept for its allocation).
    features: Vec<f32>,
}

impl<F: FnMut(Vec<RowRecord>) -> bool> Collector<F> {
    /// For rows of `k` features.
    pub(super) fn new(sink: F, k: usize) -> Self {
        Collector {
            batch: Vec::with_capacity(BATCH_ROWS),
            errors: Vec::new(),
            rows: 0,
            sink,
            stopped: false,
            ids: RowIds::default(),
            stats: WalrStats::empty(k),
            features: Vec::with_capacity(k),
        }
    }

    /// Whether parsing should go on.
    pub(super) fn more(&self) -> bool {
        self.errors.len() < MAX_REPORTED_ERRORS && !self.stopped
    }

    pub(super) fn error(&mut self, error: LineError) {
        self.errors.push(error);
    }

    /// Takes the next line's row. Call only while [`Collector::more`].
    pub(super) fn push(&mut self, parsed: Parsed) {
        let ParsedRow { record, id_hash } = match parsed {
            Ok(row) => row,
            Err(error) => return self.error(error),
        };
        if !self.ids.insert(id_hash, &record.row_id) {
            let reason = format!("row_id {:?} appears twice in this upload", record.row_id);
            return self.error(LineError {
                line: record.line,
                reason,
                file: None,
            });
        }
        self.features.clear();
        let (features, _) = record.features.as_chunks();
        self.features
            .extend(features.iter().map(|&bytes| f32::from_le_bytes(bytes)));
        self.stats.add(record.label, &self.features);
        self.rows += 1;
        // After the first error nothing more is stored; keep checking.
        if self.errors.is_empty() {
            self.batch.push(record);
            if self.batch.len() == BATCH_ROWS {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() && self.errors.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_ROWS));
            self.stopped = !(self.sink)(batch);
        }
    }

    pub(super) fn finish(mut self) -> Summary {
        self.flush();
        let stats = self.errors.is_empty().then_some(self.stats);
        Summary {
            rows: self.rows,
            stats,
            errors: self.errors,
        }
    }
}

/// The row ids of an upload so far: their text one after another in one
/// buffer (no allocation a row), found by the hash their worker computed.
#[derive(Default)]
struct RowIds {
    text: Vec<u8>,
    /// Each id's hash and where its text is.
    table: hashbrown::HashTable<(u64, std::ops::Range<usize>)>,
}

impl RowIds {
    /// Adds `id`, whose hash is `hash`; false if it was there already.
    fn insert(&mut self, hash: u64, id: &str) -> bool {
        let text = &self.text;
        let same = |(other, at): &(u64, std::ops::Range<usize>)| {
            *other == hash && text[at.clone()] == *id.as_bytes()
        };
        match self.table.entry(hash, same, |(hash, _)| *hash) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(slot) => {
                let start = self.text.len();
                self.text.extend_from_slice(id.as_bytes());
                slot.insert((hash, start..self.text.len()));
                true
            }
        }
    }
}
