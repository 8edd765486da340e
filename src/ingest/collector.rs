//! The in-order end of the pipeline: rows come here one at a time in line
//! order, as one thread reading the upload would have built them. What
//! needs more than one row (a row id seen before, the sums, the count) is
//! decided here, and rows are batched for the sink, bad lines collected.

use dpgate_api_types::LineError;

use super::row_ids::{self, RowIds};
use super::{BATCH_ROWS, MAX_REPORTED_ERRORS, RowRecord, Summary};
use crate::domain::dataset::WalrStats;

/// A row as a worker built it, with its id's fingerprint (taken on the
/// worker, so that this serial end does not).
pub(super) struct ParsedRow {
    pub(super) record: RowRecord,
    pub(super) id: u128,
}

impl ParsedRow {
    pub(super) fn of(record: RowRecord) -> Self {
        ParsedRow {
            id: row_ids::fingerprint(&record.row_id),
            record,
        }
    }
}

/// How an error names a row another refers to ("line 4", "row 8 of
/// a.parquet").
pub(super) type Naming<'a> = &'a dyn Fn(u64) -> String;

/// What one line came to: a row, or why not.
pub(super) type Parsed = Result<ParsedRow, LineError>;

/// Collects rows into batches for `sink`, and bad lines into errors.
pub(super) struct Collector<'a, F> {
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
    naming: Naming<'a>,
}

impl<'a, F: FnMut(Vec<RowRecord>) -> bool> Collector<'a, F> {
    /// For about `rows` rows of `k` features, whose lines `naming` names.
    pub(super) fn new(sink: F, k: usize, rows: usize, naming: Naming<'a>) -> Self {
        Collector {
            batch: Vec::with_capacity(BATCH_ROWS),
            errors: Vec::new(),
            rows: 0,
            sink,
            stopped: false,
            ids: RowIds::with_capacity(rows),
            stats: WalrStats::empty(k),
            features: Vec::with_capacity(k),
            naming,
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
        let ParsedRow { record, id } = match parsed {
            Ok(row) => row,
            Err(error) => return self.error(error),
        };
        self.ids.push(id, record.line);
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

    /// The rows' count, sums and ids, or why they are bad: the lines
    /// already found, and rows whose id an earlier row had.
    pub(super) fn finish(mut self) -> Summary {
        self.flush();
        let repeats = self.ids.repeated(MAX_REPORTED_ERRORS, self.naming);
        self.errors.extend(repeats);
        self.errors.sort_by_key(|error| error.line);
        self.errors.truncate(MAX_REPORTED_ERRORS);
        let stats = self.errors.is_empty().then_some(self.stats);
        Summary {
            rows: self.rows,
            stats,
            errors: self.errors,
            ids: self.ids,
        }
    }
}
