//! Parsing uploads: CSV or NDJSON rows, validated against the schema,
//! features scaled into [0, 1], encoded compactly for storage.
//!
//! The parser is synchronous and runs on a blocking thread, reading the
//! request body through a channel, and hands batches of rows to the store as
//! it goes, so an upload of any size streams through in bounded memory. A
//! bad line stops nothing at once: the first [`MAX_REPORTED_ERRORS`] are
//! collected so the caller can fix them in one go, and then the upload is
//! abandoned with nothing stored.
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

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read};

use bytes::{Buf, Bytes};
use dpgate_api_types::LineError;
use serde::de::{self, DeserializeSeed, Deserializer as _, MapAccess, Visitor};
use serde_json::Value;

use crate::dataset::{ROW_ID, Schema, WalrStats};

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

/// Where each column's cell sits in [`RowBuilder::build`]'s order: `row_id`,
/// the label, then features, measures and dimensions in schema order.
const ROW_ID_AT: usize = 0;
const LABEL_AT: usize = 1;
const FIRST_FEATURE_AT: usize = 2;

/// The two upload formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/csv`, with a header naming every column.
    Csv,
    /// `application/x-ndjson`, one JSON object per line.
    Ndjson,
}

/// One validated row, encoded for storage: scaled features as little-endian
/// f32, clamped measures as little-endian f64, dimension value indices as
/// little-endian u32.
#[derive(Debug, Clone, PartialEq)]
pub struct RowRecord {
    /// Where it was in the upload, to name it if the store rejects it.
    pub line: u64,
    pub row_id: String,
    pub label: u8,
    pub features: Vec<u8>,
    pub measures: Vec<u8>,
    pub dimensions: Vec<u8>,
}

/// What a whole upload parsed to.
#[derive(Debug, Default)]
pub struct Summary {
    pub rows: u64,
    pub stats: Option<WalrStats>,
    pub errors: Vec<LineError>,
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

/// The reason given for a line longer than `limit`.
fn too_long(line: u64, limit: usize) -> String {
    format!("line {line} is longer than {limit} bytes, more than a row of this schema can need")
}

/// Validates and encodes one row's values, given by column in schema order.
struct RowBuilder<'a> {
    schema: &'a Schema,
    /// Every column's name, in [`RowBuilder::build`]'s order.
    names: Vec<&'a str>,
    /// The position of each name in `names`.
    columns: HashMap<&'a str, usize>,
    seen: HashSet<String>,
    stats: WalrStats,
    scaled: Vec<f32>,
}

/// A raw cell: CSV text or a JSON value.
#[derive(Clone, Copy)]
enum Cell<'a> {
    Text(&'a str),
    Json(&'a Value),
}

impl<'a> Cell<'a> {
    /// A finite number: CSV text that parses as one, or a JSON number.
    fn number(self, name: &str) -> Result<f64, String> {
        let value = match self {
            Cell::Text(text) => text
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("{name} = {text:?} is not a number"))?,
            Cell::Json(Value::Number(number)) => number
                .as_f64()
                .ok_or_else(|| format!("{name} = {number} is not a number"))?,
            Cell::Json(value) => {
                return Err(format!("{name} = {value} is not a number (a JSON number)"));
            }
        };
        if value.is_finite() {
            Ok(value)
        } else {
            Err(format!("{name} = {value} is not finite"))
        }
    }

    /// Text: a CSV field, or a JSON string.
    fn text(self, name: &str) -> Result<&'a str, String> {
        match self {
            Cell::Text(text) => Ok(text),
            Cell::Json(Value::String(text)) => Ok(text),
            Cell::Json(value) => Err(format!("{name} = {value} is not a JSON string")),
        }
    }

    /// A 0/1 label: CSV text `0` or `1`, or the JSON number `0` or `1`
    /// written as an integer.
    fn label(self, name: &str) -> Result<u8, String> {
        match self {
            Cell::Text(text) => match text.trim() {
                "0" => Ok(0),
                "1" => Ok(1),
                other => Err(format!("label {name} = {other:?} is not 0 or 1")),
            },
            Cell::Json(value) => match value.as_u64() {
                Some(0) => Ok(0),
                Some(1) => Ok(1),
                _ => Err(format!(
                    "label {name} = {value} is not the JSON number 0 or 1"
                )),
            },
        }
    }
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

impl<'a> RowBuilder<'a> {
    fn new(schema: &'a Schema) -> Self {
        let names: Vec<&str> = [ROW_ID, schema.label.as_str()]
            .into_iter()
            .chain(
                schema
                    .features
                    .iter()
                    .chain(&schema.measures)
                    .map(|column| column.name.as_str()),
            )
            .chain(schema.dimensions.iter().map(|d| d.name.as_str()))
            .collect();
        let columns = names
            .iter()
            .enumerate()
            .map(|(at, &name)| (name, at))
            .collect();
        RowBuilder {
            schema,
            names,
            columns,
            seen: HashSet::new(),
            stats: WalrStats::empty(schema.k()),
            scaled: Vec::with_capacity(schema.k()),
        }
    }

    /// Builds a row from `cell(at)` for every column, `at` its position in
    /// `names`.
    fn build<'c>(
        &mut self,
        line: u64,
        cell: impl Fn(usize) -> Option<Cell<'c>>,
    ) -> Result<RowRecord, String> {
        let schema = self.schema;
        let names = &self.names;
        let get = |at: usize| cell(at).ok_or_else(|| format!("column {:?} is missing", names[at]));
        let row_id = get(ROW_ID_AT)?.text(ROW_ID)?;
        if row_id.is_empty() || row_id.len() > MAX_ROW_ID_LEN {
            return Err(format!("row_id must be 1 to {MAX_ROW_ID_LEN} bytes"));
        }
        let label = get(LABEL_AT)?.label(&schema.label)?;
        let mut at = FIRST_FEATURE_AT;
        self.scaled.clear();
        let mut features = Vec::with_capacity(4 * schema.k());
        for column in &schema.features {
            let value = get(at)?.number(&column.name)?;
            at += 1;
            if value < column.min || value > column.max {
                return Err(format!(
                    "{} = {value} is outside its declared bounds [{}, {}]",
                    column.name, column.min, column.max
                ));
            }
            let scaled = scale(value, column.min, column.max).ok_or_else(|| {
                format!(
                    "{} = {value} cannot be scaled by its bounds [{}, {}]",
                    column.name, column.min, column.max
                )
            })?;
            self.scaled.push(scaled);
            features.extend_from_slice(&scaled.to_le_bytes());
        }
        let mut measures = Vec::with_capacity(8 * schema.measures.len());
        for column in &schema.measures {
            let value = get(at)?.number(&column.name)?.clamp(column.min, column.max);
            at += 1;
            measures.extend_from_slice(&value.to_le_bytes());
        }
        let mut dimensions = Vec::with_capacity(4 * schema.dimensions.len());
        for dimension in &schema.dimensions {
            let value = get(at)?.text(&dimension.name)?;
            at += 1;
            let index = dimension
                .values
                .iter()
                .position(|known| known == value)
                .ok_or_else(|| format!("{} = {value:?} is not a declared value", dimension.name))?;
            dimensions.extend_from_slice(&(index as u32).to_le_bytes());
        }
        if !self.seen.insert(row_id.to_owned()) {
            return Err(format!("row_id {row_id:?} appears twice in this upload"));
        }
        self.stats.add(label, &self.scaled);
        Ok(RowRecord {
            line,
            row_id: row_id.to_owned(),
            label,
            features,
            measures,
            dimensions,
        })
    }
}

/// Collects rows into batches for `sink`, and bad lines into errors.
struct Collector<F> {
    batch: Vec<RowRecord>,
    errors: Vec<LineError>,
    rows: u64,
    sink: F,
    /// The sink said stop (the store failed or the client went away).
    stopped: bool,
}

impl<F: FnMut(Vec<RowRecord>) -> bool> Collector<F> {
    fn new(sink: F) -> Self {
        Collector {
            batch: Vec::with_capacity(BATCH_ROWS),
            errors: Vec::new(),
            rows: 0,
            sink,
            stopped: false,
        }
    }

    /// Whether parsing should go on.
    fn more(&self) -> bool {
        self.errors.len() < MAX_REPORTED_ERRORS && !self.stopped
    }

    fn error(&mut self, line: u64, reason: String) {
        self.errors.push(LineError { line, reason });
    }

    fn push(&mut self, row: Result<RowRecord, String>, line: u64) {
        match row {
            Ok(row) => {
                self.rows += 1;
                // After the first error nothing more is stored; keep checking.
                if self.errors.is_empty() {
                    self.batch.push(row);
                    if self.batch.len() == BATCH_ROWS {
                        self.flush();
                    }
                }
            }
            Err(reason) => self.error(line, reason),
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() && self.errors.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_ROWS));
            self.stopped = !(self.sink)(batch);
        }
    }

    fn finish(mut self, stats: WalrStats) -> Summary {
        self.flush();
        let stats = self.errors.is_empty().then_some(stats);
        Summary {
            rows: self.rows,
            stats,
            errors: self.errors,
        }
    }
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
    let mut builder = RowBuilder::new(schema);
    let mut collector = Collector::new(sink);
    let limit = max_line_len(schema);
    match format {
        Format::Csv => parse_csv(reader, limit, &mut builder, &mut collector)?,
        Format::Ndjson => parse_ndjson(reader, limit, &mut builder, &mut collector)?,
    }
    Ok(collector.finish(builder.stats))
}

fn csv_error(error: csv::Error) -> Result<String, std::io::Error> {
    match error.into_kind() {
        csv::ErrorKind::Io(error) => Err(error),
        csv::ErrorKind::Utf8 { err, .. } => Ok(format!("not valid UTF-8: {err}")),
        other => Ok(format!("unreadable CSV: {other:?}")),
    }
}

/// A reader that refuses to read more than `allowance` bytes between
/// [`Bounded::reset`]s, so that one CSV record cannot grow without bound in
/// the CSV reader's buffers.
struct Bounded<R> {
    inner: R,
    allowance: usize,
    read: usize,
    /// A read was refused.
    tripped: bool,
}

impl<R> Bounded<R> {
    fn reset(&mut self) {
        self.read = 0;
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let room = self.allowance - self.read;
        if room == 0 && !buffer.is_empty() {
            self.tripped = true;
            return Err(std::io::Error::other("a CSV record is too long"));
        }
        let end = buffer.len().min(room);
        let count = self.inner.read(&mut buffer[..end])?;
        self.read += count;
        Ok(count)
    }
}

/// The header's complaint, if it does not name every column exactly once.
fn header_problem(header: &csv::StringRecord, builder: &RowBuilder) -> Option<String> {
    let mut seen = HashSet::new();
    let mut unknown = Vec::new();
    let mut twice = Vec::new();
    for name in header {
        let first = seen.insert(name);
        if !builder.columns.contains_key(name) {
            if first {
                unknown.push(name);
            }
        } else if !first && !twice.contains(&name) {
            twice.push(name);
        }
    }
    let missing: Vec<&str> = builder
        .names
        .iter()
        .copied()
        .filter(|name| !seen.contains(name))
        .collect();
    let problems: Vec<String> = [
        ("unknown columns", unknown),
        ("missing columns", missing),
        ("columns named more than once", twice),
    ]
    .into_iter()
    .filter(|(_, names)| !names.is_empty())
    .map(|(what, names)| format!("{what} {names:?}"))
    .collect();
    (!problems.is_empty()).then(|| format!("header: {}", problems.join("; ")))
}

fn parse_csv<F: FnMut(Vec<RowRecord>) -> bool>(
    reader: impl Read,
    limit: usize,
    builder: &mut RowBuilder,
    collector: &mut Collector<F>,
) -> std::io::Result<()> {
    // Between resets (one a record) the CSV reader may read one record and
    // up to a buffer more: a record of `limit` bytes never trips it, and a
    // longer one cannot grow past about `limit` plus two buffers.
    let bounded = Bounded {
        inner: reader,
        allowance: limit + READ_BUFFER,
        read: 0,
        tripped: false,
    };
    let mut csv = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .buffer_capacity(READ_BUFFER)
        .from_reader(bounded);
    let header = match csv.headers().cloned() {
        Ok(header) => header,
        Err(_) if csv.get_ref().tripped => {
            collector.error(1, too_long(1, limit));
            return Ok(());
        }
        Err(error) => {
            collector.error(1, csv_error(error)?);
            return Ok(());
        }
    };
    if csv.position().byte() > limit as u64 {
        collector.error(1, too_long(1, limit));
        return Ok(());
    }
    if let Some(problem) = header_problem(&header, builder) {
        collector.error(1, problem);
        return Ok(());
    }
    // Where each column is in a record, by its position in `names`.
    // (The header names every column once, and nothing else.)
    let mut positions = vec![0; builder.names.len()];
    for (field, name) in header.iter().enumerate() {
        if let Some(&at) = builder.columns.get(name) {
            positions[at] = field;
        }
    }
    let mut record = csv::StringRecord::new();
    while collector.more() {
        csv.get_mut().reset();
        let start = csv.position().clone();
        let line = start.line().max(1);
        let read = csv.read_record(&mut record);
        if csv.get_ref().tripped || csv.position().byte() - start.byte() > limit as u64 {
            collector.error(line, too_long(line, limit));
            return Ok(());
        }
        match read {
            Ok(false) => break,
            Ok(true) => {
                if record.len() != header.len() {
                    collector.error(
                        line,
                        format!("{} fields, expected {}", record.len(), header.len()),
                    );
                    continue;
                }
                let row = builder.build(line, |at| record.get(positions[at]).map(Cell::Text));
                collector.push(row, line);
            }
            Err(error) => {
                let line = error.position().map_or(line, csv::Position::line);
                collector.error(line, csv_error(error)?);
            }
        }
    }
    Ok(())
}

/// Reads one JSON object into `slots`, by column position, refusing keys
/// that are not columns or that come twice. `problem` says why, when the
/// object was refused for its keys rather than its syntax.
struct ObjectVisitor<'v, 'a> {
    builder: &'v RowBuilder<'a>,
    slots: &'v mut [Option<Value>],
    problem: &'v mut Option<String>,
}

/// A key of the object: a column's position, or a name that is none.
enum Key {
    Column(usize),
    Unknown(String),
}

struct KeySeed<'v, 'a>(&'v RowBuilder<'a>);

impl<'de> DeserializeSeed<'de> for KeySeed<'_, '_> {
    type Value = Key;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_, '_> {
    type Value = Key;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a column name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Key, E> {
        Ok(match self.0.columns.get(name) {
            Some(&at) => Key::Column(at),
            None => Key::Unknown(name.to_owned()),
        })
    }
}

impl<'de> Visitor<'de> for ObjectVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed(self.builder))? {
            let at = match key {
                Key::Column(at) => at,
                Key::Unknown(name) => {
                    *self.problem = Some(format!("unknown column {name:?}"));
                    return Err(de::Error::custom("unknown column"));
                }
            };
            let slot = &mut self.slots[at];
            if slot.is_some() {
                let name = self.builder.names[at];
                *self.problem = Some(format!("column {name:?} appears twice in the object"));
                return Err(de::Error::custom("a key appears twice"));
            }
            *slot = Some(map.next_value()?);
        }
        Ok(())
    }
}

fn parse_ndjson<F: FnMut(Vec<RowRecord>) -> bool>(
    reader: impl Read,
    limit: usize,
    builder: &mut RowBuilder,
    collector: &mut Collector<F>,
) -> std::io::Result<()> {
    let mut lines = std::io::BufReader::with_capacity(READ_BUFFER, reader);
    let mut bytes = Vec::new();
    let mut slots: Vec<Option<Value>> = vec![None; builder.names.len()];
    let mut line = 0;
    while collector.more() {
        bytes.clear();
        // At most one byte past the limit: enough to know the line is too long.
        let read = (&mut lines)
            .take(limit as u64 + 1)
            .read_until(b'\n', &mut bytes)?;
        if read == 0 {
            break;
        }
        line += 1;
        if read > limit {
            collector.error(line, too_long(line, limit));
            return Ok(());
        }
        let text = match std::str::from_utf8(&bytes) {
            Ok(text) => text,
            Err(error) => {
                collector.error(line, format!("not valid UTF-8: {error}"));
                continue;
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        slots.fill(None);
        let mut problem = None;
        let mut json = serde_json::Deserializer::from_str(text);
        let object = (&mut json)
            .deserialize_map(ObjectVisitor {
                builder,
                slots: &mut slots,
                problem: &mut problem,
            })
            .and_then(|()| json.end());
        if let Err(error) = object {
            let reason = problem.unwrap_or_else(|| format!("not a JSON object: {error}"));
            collector.error(line, reason);
            continue;
        }
        let row = builder.build(line, |at| slots[at].as_ref().map(Cell::Json));
        collector.push(row, line);
    }
    Ok(())
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;
