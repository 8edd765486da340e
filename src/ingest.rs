//! Parsing uploads: CSV or NDJSON rows, or Arrow IPC stream and Parquet
//! bodies, validated against the schema, features scaled into [0, 1],
//! encoded compactly for storage.
//!
//! The parser is synchronous and runs on a blocking thread, reading the
//! request body through a channel, and hands batches of rows to the store as
//! it goes, so an upload of any size streams through in bounded memory. A
//! bad line stops nothing at once: the first [`MAX_REPORTED_ERRORS`] are
//! collected so the caller can fix them in one go, and then the upload is
//! abandoned with nothing stored.
//!
//! Parsing numbers is most of the work, so it is spread over the cores
//! (`pipeline`): the calling thread reads the body and cuts it into chunks
//! of whole records (`csv_format`, `ndjson_format`), worker threads turn
//! each chunk into rows (`row`), and the calling thread takes the rows back
//! in line order (`collector`): the row id check across the upload, the
//! sums, the batches and the errors see the rows exactly as one thread
//! reading line by line would, whatever the chunks and however the body's
//! bytes arrive.
//!
//! One line (a CSV record, which a quoted field may spread over several
//! lines) is read only up to the most bytes a row of the schema can need
//! (see `max_line_len`): a longer one is reported as a bad line and ends
//! the upload there, so memory stays bounded by the schema, not the upload.
//!
//! Both formats are read strictly and alike: the label is exactly `0` or `1`
//! (CSV text `0`/`1`, surrounding spaces allowed; in NDJSON the JSON number
//! `0` or `1` written as an integer, so neither `true`, `"1"` nor `1.0`);
//! features and measures are numbers (NDJSON: JSON numbers, not strings);
//! `row_id` and dimension values are text (NDJSON: JSON strings, not
//! numbers). Text that is not UTF-8 is a bad line in either format; an
//! NDJSON object naming a column twice is a bad line.

mod arrow_format;
mod collector;
mod csv_format;
mod files;
mod ndjson_format;
mod pipeline;
mod row;
mod row_ids;

use std::io::Read;

use bytes::{Buf, Bytes};
use dpgate_api_types::LineError;

use crate::domain::dataset::{ROW_ID, Schema, WalrStats};
use crate::domain::row::RowRecord;
pub use arrow_format::{stored_columns, user_fingerprints};
pub use files::{FileRows, SourceFile, parse_files};
use pipeline::Pipeline;
use row::RowBuilder;
pub use row_ids::{RowIds, fingerprint};

/// Most bad lines reported for one upload.
pub const MAX_REPORTED_ERRORS: usize = 20;
/// Rows handed to the store at a time.
pub const BATCH_ROWS: usize = 2000;
/// Longest row id.
const MAX_ROW_ID_LEN: usize = 256;
/// Bytes read from the body at a time: the NDJSON line reader's buffer and
/// the CSV reader's.
const READ_BUFFER: usize = 1 << 16;
/// Most bytes a number's text can usefully take: an f64 round-trips in 17
/// significant digits, a sign, a point and an exponent (about 25 bytes),
/// but written out in plain decimal (Rust's `{}`, C's `%f`) it can take up
/// to about 330 (`-0.` and 307 zeros before 17 digits; 309 digits before
/// the point). The rest is slack for padding zeros and spaces.
const MAX_NUMBER_TEXT: usize = 350;
/// Most bytes one byte of text can take in any JSON spelling of it (`\u00XX`
/// for one byte; at most 12 for a 4-byte character). CSV quoting at most
/// doubles text, so this bounds both formats.
const MAX_ESCAPED: usize = 6;
/// Per column: the quotes, `:` and `,` around a key and its value, and a
/// little whitespace.
const COLUMN_SLACK: usize = 16;
/// Fixed part of a line: braces, a line end.
const LINE_SLACK: usize = 4;

/// The upload formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/csv`, with a header naming every column.
    Csv,
    /// `application/x-ndjson`, one JSON object per line.
    Ndjson,
    /// `application/vnd.apache.arrow.stream`: an Arrow IPC stream whose
    /// columns are named as the schema's.
    ArrowStream,
    /// `application/vnd.apache.parquet`: a Parquet file, likewise.
    Parquet,
}

/// What a whole upload parsed to.
#[derive(Debug, Default)]
pub struct Summary {
    pub rows: u64,
    pub stats: Option<WalrStats>,
    pub errors: Vec<LineError>,
    /// The rows' ids, to check against those already stored.
    pub ids: RowIds,
}

/// A [`Read`] over body chunks arriving on a channel from the async side.
pub struct ChannelReader {
    chunks: tokio::sync::mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    pub fn new(chunks: tokio::sync::mpsc::Receiver<Bytes>) -> Self {
        ChannelReader {
            chunks,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let count = buffer.len().min(self.current.len());
        buffer[..count].copy_from_slice(&self.current[..count]);
        self.current.advance(count);
        Ok(count)
    }
}

/// The most bytes one line of an upload (a CSV record, quoted line breaks
/// and its line end included; an NDJSON line with its `\n`) may take: twice
/// what the longest legitimate row of `schema` can need, plus 4 KiB.
///
/// The row is counted as NDJSON spells it, which is longer than CSV: for
/// every column its name (NDJSON repeats names on every line) and its
/// longest value, text escaped at the worst JSON rate ([`MAX_ESCAPED`]
/// bytes a byte, which also covers CSV quoting and the CSV header): `row_id`
/// up to 256 bytes, numbers (label, features, measures) up to
/// [`MAX_NUMBER_TEXT`] bytes, a dimension's longest declared value; plus
/// quotes, separators and whitespace ([`COLUMN_SLACK`] a column,
/// [`LINE_SLACK`] a line).
fn max_line_len(schema: &Schema) -> usize {
    let quoted = |text: usize| MAX_ESCAPED * text + 2;
    let column = |name: &str, value: usize| quoted(name.len()) + value + COLUMN_SLACK;
    let numbers = schema
        .features
        .iter()
        .chain(&schema.measures)
        .map(|bounded| column(&bounded.name, MAX_NUMBER_TEXT))
        .sum::<usize>();
    let dimensions = schema
        .dimensions
        .iter()
        .map(|dimension| {
            let longest = dimension.values.iter().map(String::len).max();
            column(&dimension.name, quoted(longest.unwrap_or(0)))
        })
        .sum::<usize>();
    let row = LINE_SLACK
        + column(ROW_ID, quoted(MAX_ROW_ID_LEN))
        + column(&schema.label, MAX_NUMBER_TEXT)
        + numbers
        + dimensions;
    2 * row + 4096
}

/// The error for a line longer than `limit`.
fn too_long(line: u64, limit: usize) -> LineError {
    LineError::new(
        line,
        format!(
            "line {line} is longer than {limit} bytes, more than a row of this schema can need"
        ),
    )
}

/// `value`, within `[min, max]`, scaled into [0, 1] as stored: always
/// finite and within [0, 1] (clamped, should rounding leave it), computed on
/// halves when `max - min` overflows. None only if no finite bounds with
/// `min < max` and finite `value` were given.
fn scale(value: f64, min: f64, max: f64) -> Option<f32> {
    let span = max - min;
    let ratio = if span.is_finite() {
        (value - min) / span
    } else {
        (value / 2.0 - min / 2.0) / (max / 2.0 - min / 2.0)
    };
    if ratio.is_nan() {
        return None;
    }
    Some((ratio as f32).clamp(0.0, 1.0))
}

/// Every value of `values` scaled as [`scale`] scales it, if every one is
/// within `[min, max]` and `max - min` is finite and positive (a loop the
/// compiler vectorises); `None` otherwise, for the value-by-value path to
/// name the first that is not.
fn scale_all(values: &[f64], min: f64, max: f64) -> Option<Vec<f32>> {
    let span = max - min;
    let within = values
        .iter()
        .fold(true, |all, &value| all & (value >= min) & (value <= max));
    (within && span.is_finite() && span > 0.0).then(|| {
        values
            .iter()
            .map(|&value| (((value - min) / span) as f32).clamp(0.0, 1.0))
            .collect()
    })
}

/// Parses a whole upload, handing batches of valid rows to `sink` (which
/// returns false to stop). A read error ends the upload as an error. A line
/// longer than a row of the schema can need ends it as a bad line, read no
/// further than that.
pub fn parse(
    format: Format,
    reader: impl Read,
    schema: &Schema,
    sink: impl FnMut(Vec<RowRecord>) -> bool,
) -> std::io::Result<Summary> {
    parse_in(Pipeline::for_this_machine(), format, reader, schema, sink)
}

/// [`parse`], with the chunks and threads of `pipeline`.
fn parse_in(
    pipeline: Pipeline,
    format: Format,
    reader: impl Read,
    schema: &Schema,
    sink: impl FnMut(Vec<RowRecord>) -> bool,
) -> std::io::Result<Summary> {
    let rows = RowBuilder::new(schema);
    let limit = max_line_len(schema);
    match format {
        Format::Csv => match csv_format::open(reader, limit, &rows)? {
            Ok((records, fields)) => pipeline.run(records, &fields, &rows, sink),
            Err(header) => Ok(Summary {
                errors: vec![header],
                ..Summary::default()
            }),
        },
        Format::Ndjson => {
            let lines = ndjson_format::Lines::new(reader, limit);
            pipeline.run(lines, &ndjson_format::Objects, &rows, sink)
        }
        Format::ArrowStream => arrow_format::run(
            arrow_format::stream_batches(reader),
            "the body is not an Arrow IPC stream",
            &rows,
            0,
            &|line| format!("row {line}"),
            sink,
        ),
        Format::Parquet => arrow_format::run(
            arrow_format::parquet_batches(reader)?,
            "the body is not a Parquet file",
            &rows,
            0,
            &|line| format!("row {line}"),
            sink,
        ),
    }
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;

#[cfg(test)]
mod parallel_tests;
