//! The parser on several threads against the parser as one thread ran it
//! (kept here, as the reference): random bodies cut into many small chunks
//! must give the same rows, batches, lines, errors and sums to the bit.

use std::collections::HashMap;
use std::io::Read;

use bytes::Bytes;
use dpgate_api_types::LineError;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use super::pipeline::{ChunkSize, Pipeline};
use super::row::{Cell, RowBuilder};
use super::tests::schema;
use super::{
    BATCH_ROWS, ChannelReader, Format, MAX_REPORTED_ERRORS, READ_BUFFER, RowRecord, Summary,
    max_line_len, ndjson_format, parse_in, too_long,
};
use crate::domain::dataset::{Schema, WalrStats};

/// The sums, to the bit.
type StatsBits = (u64, Vec<u128>, u64);

fn bits(stats: &WalrStats) -> StatsBits {
    (
        stats.label_count,
        stats.label_feature_units.clone(),
        stats.max_norm_squared.to_bits(),
    )
}

/// Everything a parse hands out.
#[derive(Debug, PartialEq)]
struct Outcome {
    batches: Vec<Vec<RowRecord>>,
    rows: u64,
    stats: Option<StatsBits>,
    errors: Vec<LineError>,
}

/// Parses `body` cut by `pipeline`, into a sink that takes `accepted`
/// batches and refuses the next.
fn parallel(pipeline: Pipeline, format: Format, body: impl Read, accepted: usize) -> Outcome {
    let mut batches = Vec::new();
    let summary = parse_in(pipeline, format, body, &schema(), |batch| {
        batches.push(batch);
        batches.len() <= accepted
    })
    .unwrap();
    outcome(summary, batches)
}

fn outcome(summary: Summary, batches: Vec<Vec<RowRecord>>) -> Outcome {
    Outcome {
        batches,
        rows: summary.rows,
        stats: summary.stats.as_ref().map(bits),
        errors: summary.errors,
    }
}

/// The parser as it ran before its pipeline: one thread, one line after the
/// other, each row checked and summed as it comes.
struct Sequential<'a> {
    rows: RowBuilder<'a>,
    /// Each id's first line.
    seen: HashMap<String, u64>,
    /// Rows whose id an earlier line had: reported at the end.
    repeats: Vec<LineError>,
    stats: WalrStats,
    batch: Vec<RowRecord>,
    outcome: Outcome,
    accepted: usize,
    stopped: bool,
}

impl<'a> Sequential<'a> {
    fn new(schema: &'a Schema, accepted: usize) -> Self {
        Sequential {
            rows: RowBuilder::new(schema),
            seen: HashMap::new(),
            repeats: Vec::new(),
            stats: WalrStats::empty(schema.k()),
            batch: Vec::new(),
            outcome: Outcome {
                batches: Vec::new(),
                rows: 0,
                stats: None,
                errors: Vec::new(),
            },
            accepted,
            stopped: false,
        }
    }

    fn more(&self) -> bool {
        self.outcome.errors.len() < MAX_REPORTED_ERRORS && !self.stopped
    }

    fn error(&mut self, line: u64, reason: String) {
        self.outcome.errors.push(LineError::new(line, reason));
    }

    fn push(&mut self, line: u64, row: Result<RowRecord, String>) {
        let row = match row {
            Ok(row) => row,
            Err(reason) => return self.error(line, reason),
        };
        if let Some(first) = self.seen.get(&row.row_id) {
            let reason = format!("row_id repeats the row_id of line {first}");
            self.repeats.push(LineError::new(line, reason));
        } else {
            self.seen.insert(row.row_id.clone(), line);
        }
        let features: Vec<f32> = row
            .features
            .chunks(4)
            .map(|bytes| f32::from_le_bytes(bytes.try_into().unwrap()))
            .collect();
        self.stats.add(row.label, &features);
        self.outcome.rows += 1;
        if self.outcome.errors.is_empty() {
            self.batch.push(row);
            if self.batch.len() == BATCH_ROWS {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        if !self.batch.is_empty() && self.outcome.errors.is_empty() {
            self.outcome.batches.push(std::mem::take(&mut self.batch));
            self.stopped = self.outcome.batches.len() > self.accepted;
        }
    }

    fn finish(mut self) -> Outcome {
        self.flush();
        self.outcome.errors.append(&mut self.repeats);
        self.outcome.errors.sort_by_key(|error| error.line);
        self.outcome.errors.truncate(MAX_REPORTED_ERRORS);
        if self.outcome.errors.is_empty() {
            self.outcome.stats = Some(bits(&self.stats));
        }
        self.outcome
    }
}

/// CSV as the `csv` crate's `StringRecord`s read it, record by record.
fn sequential_csv(body: &[u8], accepted: usize) -> Outcome {
    let schema = schema();
    let limit = max_line_len(&schema);
    let mut reference = Sequential::new(&schema, accepted);
    let mut csv = csv::ReaderBuilder::new().flexible(true).from_reader(body);
    let header = csv.headers().unwrap().clone();
    let positions: Vec<usize> = reference
        .rows
        .names
        .iter()
        .map(|name| header.iter().position(|field| field == *name).unwrap())
        .collect();
    let mut record = csv::StringRecord::new();
    while reference.more() {
        let start = csv.position().clone();
        let line = start.line();
        let read = csv.read_record(&mut record);
        if csv.position().byte() - start.byte() > limit as u64 {
            reference.outcome.errors.push(too_long(line, limit));
            break;
        }
        match read {
            Ok(false) => break,
            Ok(true) if record.len() != header.len() => {
                let reason = format!("{} fields, expected {}", record.len(), header.len());
                reference.error(line, reason);
            }
            Ok(true) => {
                let row = reference
                    .rows
                    .build(line, |at| record.get(positions[at]).map(Cell::Text));
                reference.push(line, row);
            }
            Err(error) => match error.into_kind() {
                csv::ErrorKind::Utf8 { err, .. } => {
                    reference.error(line, format!("not valid UTF-8: {err}"));
                }
                other => panic!("{other:?}"),
            },
        }
    }
    reference.finish()
}

/// NDJSON line by line.
fn sequential_ndjson(body: &[u8], accepted: usize) -> Outcome {
    let schema = schema();
    let limit = max_line_len(&schema);
    let mut reference = Sequential::new(&schema, accepted);
    let mut slots = vec![None; reference.rows.names.len()];
    let lines = body.split_inclusive(|&byte| byte == b'\n');
    for (line, bytes) in (1..).zip(lines) {
        if !reference.more() {
            break;
        }
        if bytes.len() > limit {
            reference.outcome.errors.push(too_long(line, limit));
            break;
        }
        if let Some(row) = ndjson_format::object_row(&reference.rows, line, bytes, &mut slots) {
            reference.push(line, row);
        }
    }
    reference.finish()
}

/// A field as CSV writes it: quoted when it must be, or when `quote`; a
/// quote inside is left as it is unless the field is quoted.
fn csv_field(text: &[u8], quote: bool) -> Vec<u8> {
    let special =
        text.first() == Some(&b'"') || text.iter().any(|byte| matches!(byte, b',' | b'\n' | b'\r'));
    if !(quote || special) {
        return text.to_vec();
    }
    let mut field = vec![b'"'];
    for &byte in text {
        if byte == b'"' {
            field.push(b'"');
        }
        field.push(byte);
    }
    field.push(b'"');
    field
}

/// The cells of a random row of the example schema, in schema order
/// (`row_id`, label, f0, f1, value, campaign), a few of them bad (with
/// chance `bad` each) and now and then a row id seen before.
fn random_cells(rng: &mut ChaCha8Rng, index: usize, bad: f64) -> Vec<Vec<u8>> {
    let mut pick = |good: String, bad_ones: &[&str]| -> Vec<u8> {
        if rng.random_bool(bad) {
            bad_ones[rng.random_range(0..bad_ones.len())]
                .as_bytes()
                .to_vec()
        } else {
            good.into_bytes()
        }
    };
    let id = match index % 7 {
        1 => format!("r{index},\nline two, \"quoted\""),
        2 => format!("r{index}\"mid\"quote"),
        3 => format!("r{index}\u{e9}"),
        _ => format!("r{index}"),
    };
    // Bad ones: an id seen before, far back (in an earlier chunk) or not.
    let mut id = pick(id, &["", "r0", "r4", &format!("r{}", index / 2)]);
    let label = pick(
        ["0", "1", " 1 "][index % 3].to_owned(),
        &["2", "true", "1.0"],
    );
    let f0 = pick(
        format!("{:.6}", index as f64 / 977.0 % 1.0),
        &["1.5", "x", "NaN", "-0.1"],
    );
    let f1 = pick(
        format!("{}", index as f64 / 97.0 % 10.0 - 5.0),
        &["inf", "6", ""],
    );
    let value = format!("{:.2}", index as f64 / 7.0 % 140.0 - 20.0);
    let campaign = pick(["a", "b"][index % 2].to_owned(), &["c", "A", " a"]);
    if rng.random_bool(bad / 4.0) {
        id.push(0xff);
    }
    vec![id, label, f0, f1, value.into_bytes(), campaign]
}

/// A random CSV body of `records` records, columns in a random order:
/// quoted fields with commas and line breaks, blank lines, CRLF and LF,
/// bad lines with chance about `bad` each, row ids repeated across the
/// body, and now and then a line too long.
fn random_csv(rng: &mut ChaCha8Rng, records: usize, bad: f64) -> Vec<u8> {
    let names = ["row_id", "converted", "f0", "f1", "value", "campaign"];
    let mut order: Vec<usize> = (0..names.len()).collect();
    if rng.random_bool(0.5) {
        order.reverse();
        order.swap(0, 2);
    }
    let header: Vec<&str> = order.iter().map(|&at| names[at]).collect();
    let mut body = format!("{}\n", header.join(",")).into_bytes();
    let too_long = rng
        .random_bool(0.15)
        .then(|| rng.random_range(0..records.max(1)));
    for index in 0..records {
        while rng.random_bool(0.08) {
            body.extend_from_slice(if rng.random_bool(0.5) { b"\n" } else { b"\r\n" });
        }
        // A line of spaces is a record of one field.
        if rng.random_bool(bad / 4.0) {
            body.extend_from_slice(b"  \n");
        }
        let mut cells = random_cells(rng, index, bad);
        if too_long == Some(index) {
            cells[2].extend(std::iter::repeat_n(b' ', max_line_len(&schema())));
        }
        let mut fields: Vec<Vec<u8>> = order
            .iter()
            .map(|&at| csv_field(&cells[at], rng.random_bool(0.1)))
            .collect();
        if rng.random_bool(bad / 4.0) {
            fields.pop();
        } else if rng.random_bool(bad / 4.0) {
            fields.push(b"extra".to_vec());
        }
        body.extend(fields.join(&b","[..]));
        let last = index + 1 == records;
        if !(last && rng.random_bool(0.5)) {
            body.extend_from_slice(if rng.random_bool(0.3) { b"\r\n" } else { b"\n" });
        }
    }
    body
}

/// A random NDJSON body of `records` lines, some blank, some bad (with
/// chance about `bad` each), row ids repeated, now and then one too long.
fn random_ndjson(rng: &mut ChaCha8Rng, records: usize, bad: f64) -> Vec<u8> {
    let names = ["row_id", "converted", "f0", "f1", "value", "campaign"];
    let mut body = Vec::new();
    let too_long = rng
        .random_bool(0.15)
        .then(|| rng.random_range(0..records.max(1)));
    for index in 0..records {
        while rng.random_bool(0.08) {
            body.extend_from_slice([&b"\n"[..], b" \t\n", b"\r\n"][rng.random_range(0..3)]);
        }
        let cells = random_cells(rng, index, bad);
        let mut line = b"{".to_vec();
        for (at, (name, cell)) in names.iter().zip(&cells).enumerate() {
            if at > 0 {
                line.push(b',');
            }
            line.extend(format!("\"{name}\": ").into_bytes());
            // Text columns as JSON strings, numbers as numbers when they
            // are numbers (a bad cell may become a string, a bad line).
            let text = String::from_utf8_lossy(cell);
            let number = text.trim().parse::<f64>().is_ok_and(f64::is_finite);
            if matches!(*name, "row_id" | "campaign") || !number {
                line.extend(serde_json::to_string(&text).unwrap().into_bytes());
            } else {
                line.extend(text.trim().as_bytes());
            }
        }
        if rng.random_bool(bad / 4.0) {
            line.extend_from_slice(br#", "f0": 0.5"#);
        }
        if too_long == Some(index) {
            line.extend(std::iter::repeat_n(b' ', max_line_len(&schema())));
        }
        line.push(b'}');
        if rng.random_bool(bad / 4.0) {
            line.truncate(line.len() / 2);
        }
        if rng.random_bool(bad / 4.0) {
            line.insert(line.len() / 2, 0xff);
        }
        body.extend(line);
        body.push(b'\n');
    }
    body
}

/// Small chunks (many of them), one to three workers.
fn random_pipeline(rng: &mut ChaCha8Rng) -> Pipeline {
    Pipeline {
        chunk: ChunkSize {
            records: rng.random_range(1..=7),
            bytes: [1, 40, 300, 1 << 20][rng.random_range(0..4)],
        },
        workers: rng.random_range(1..=3),
    }
}

#[test]
fn random_csv_bodies_parse_in_parallel_as_they_did_on_one_thread() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for case in 0..300 {
        let records = rng.random_range(0..200);
        let bad = [0.0, 0.01, 0.05, 0.2][rng.random_range(0..4)];
        let body = random_csv(&mut rng, records, bad);
        let pipeline = random_pipeline(&mut rng);
        let expected = sequential_csv(&body, usize::MAX);
        let got = parallel(pipeline, Format::Csv, body.as_slice(), usize::MAX);
        assert_eq!(got, expected, "case {case}, {pipeline:?}");
    }
}

#[test]
fn random_ndjson_bodies_parse_in_parallel_as_they_did_on_one_thread() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    for case in 0..300 {
        let records = rng.random_range(0..200);
        let bad = [0.0, 0.01, 0.05, 0.2][rng.random_range(0..4)];
        let body = random_ndjson(&mut rng, records, bad);
        let pipeline = random_pipeline(&mut rng);
        let expected = sequential_ndjson(&body, usize::MAX);
        let got = parallel(pipeline, Format::Ndjson, body.as_slice(), usize::MAX);
        assert_eq!(got, expected, "case {case}, {pipeline:?}");
    }
}

#[test]
fn several_batches_and_a_sink_that_stops_are_handled_as_on_one_thread() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for case in 0..8 {
        let records = rng.random_range(2 * BATCH_ROWS..4 * BATCH_ROWS);
        // Few bad lines, mostly none: the batches go on.
        let bad = [0.0, 0.0, 0.0001][rng.random_range(0..3)];
        let accepted = rng.random_range(0..5);
        let pipeline = random_pipeline(&mut rng);
        let (format, body, expected) = if case % 2 == 0 {
            let body = random_csv(&mut rng, records, bad);
            let expected = sequential_csv(&body, accepted);
            (Format::Csv, body, expected)
        } else {
            let body = random_ndjson(&mut rng, records, bad);
            let expected = sequential_ndjson(&body, accepted);
            (Format::Ndjson, body, expected)
        };
        let got = parallel(pipeline, format, body.as_slice(), accepted);
        assert_eq!(got, expected, "case {case}, {pipeline:?}");
    }
}

/// `body` through a [`ChannelReader`], in pieces of 1 to 7 bytes.
fn in_pieces(rng: &mut ChaCha8Rng, body: &[u8]) -> ChannelReader {
    let mut pieces = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (piece, after) = rest.split_at(rng.random_range(1..=7).min(rest.len()));
        pieces.push(Bytes::copy_from_slice(piece));
        rest = after;
    }
    let (sender, receiver) = tokio::sync::mpsc::channel(pieces.len().max(1));
    for piece in pieces {
        sender.try_send(piece).unwrap();
    }
    ChannelReader::new(receiver)
}

#[test]
fn a_body_in_pieces_of_a_few_bytes_parses_as_a_whole() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    for case in 0..40 {
        let format = [Format::Csv, Format::Ndjson][case % 2];
        let records = rng.random_range(0..300);
        let bad = [0.0, 0.02][rng.random_range(0..2)];
        let body = match format {
            Format::Csv => random_csv(&mut rng, records, bad),
            _ => random_ndjson(&mut rng, records, bad),
        };
        let pipeline = random_pipeline(&mut rng);
        let whole = parallel(pipeline, format, body.as_slice(), usize::MAX);
        let reader = in_pieces(&mut rng, &body);
        let got = parallel(pipeline, format, reader, usize::MAX);
        assert_eq!(got, whole, "case {case}, {format:?}, {pipeline:?}");
    }
}

/// A reader that counts what has been read from it.
struct Counted<'a> {
    bytes: &'a [u8],
    read: usize,
}

impl Read for Counted<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let count = (&self.bytes[self.read..]).read(buffer)?;
        self.read += count;
        Ok(count)
    }
}

#[test]
fn a_line_too_long_in_a_later_chunk_ends_the_upload_at_its_line() {
    let limit = max_line_len(&schema());
    let pipeline = Pipeline {
        chunk: ChunkSize {
            records: 8,
            bytes: 1 << 20,
        },
        workers: 2,
    };
    // Line 37 is the 4th record of the 5th chunk (after the header's line).
    let csv_line = |line: usize| match line {
        37 => format!("r{line},1,0.5{},0,1,a\n", " ".repeat(limit)),
        45 => format!("r{line},2,0.5,0,1,a\n"),
        _ => format!("r{line},1,0.5,0,1,a\n"),
    };
    let ndjson_line = |line: usize| match line {
        37 => format!(r#"{{"row_id": "r{line}"{}}}"#, " ".repeat(limit)) + "\n",
        _ => {
            format!(
                r#"{{"row_id": "r{line}", "converted": 1, "f0": 0.5, "f1": 0, "value": 1, "campaign": "a"}}"#
            ) + "\n"
        }
    };
    let csv: String = std::iter::once("row_id,converted,f0,f1,value,campaign\n".to_owned())
        .chain((2..=3000).map(csv_line))
        .collect();
    let ndjson: String = (1..=3000).map(ndjson_line).collect();
    for (format, body, rows_before) in [(Format::Csv, csv, 35), (Format::Ndjson, ndjson, 36)] {
        let long_line_at = body.match_indices('\n').nth(35).map_or(0, |(at, _)| at + 1);
        let mut reader = Counted {
            bytes: body.as_bytes(),
            read: 0,
        };
        let got = parallel(pipeline, format, &mut reader, usize::MAX);
        assert_eq!(
            got,
            Outcome {
                batches: Vec::new(),
                rows: rows_before,
                stats: None,
                errors: vec![too_long(37, limit)],
            },
            "{format:?}"
        );
        assert!(
            reader.read <= long_line_at + limit + 2 * READ_BUFFER,
            "{format:?}: read {} of {} bytes",
            reader.read,
            body.len()
        );
    }
}

/// Rows without end, each from `row(index)`.
struct Endless<F> {
    row: F,
    index: usize,
    pending: Vec<u8>,
    read: usize,
}

impl<F: FnMut(usize) -> String> Read for Endless<F> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        if self.pending.is_empty() {
            self.pending = (self.row)(self.index).into_bytes();
            self.index += 1;
        }
        let count = buffer.len().min(self.pending.len());
        buffer[..count].copy_from_slice(&self.pending[..count]);
        self.pending.drain(..count);
        self.read += count;
        Ok(count)
    }
}

#[test]
fn reading_stops_soon_after_the_sink_stops_or_the_errors_are_enough() {
    let pipeline = Pipeline {
        chunk: ChunkSize {
            records: 64,
            bytes: 1 << 20,
        },
        workers: 2,
    };
    let row = |index: usize| match index {
        0 => "row_id,converted,f0,f1,value,campaign\n".to_owned(),
        _ => format!("r{index},1,0.5,0,1,a\n"),
    };
    let mut body = Endless {
        row,
        index: 0,
        pending: Vec::new(),
        read: 0,
    };
    let got = parallel(pipeline, Format::Csv, &mut body, 0);
    assert_eq!((got.batches.len(), got.rows), (1, BATCH_ROWS as u64));
    // The rows of the batch, of the chunks in flight, and a buffer more.
    let most = (BATCH_ROWS + 4 * 3 * 64) * row(9999).len() + READ_BUFFER;
    assert!(body.read < most, "read {}", body.read);

    let bad_row = |index: usize| match index {
        0 => "row_id,converted,f0,f1,value,campaign\n".to_owned(),
        _ => format!("r{index},2,0.5,0,1,a\n"),
    };
    let mut body = Endless {
        row: bad_row,
        index: 0,
        pending: Vec::new(),
        read: 0,
    };
    let got = parallel(pipeline, Format::Csv, &mut body, usize::MAX);
    assert_eq!(got.errors.len(), MAX_REPORTED_ERRORS);
    assert_eq!(got.errors.last().map(|error| error.line), Some(21));
    let most = (MAX_REPORTED_ERRORS + 4 * 3 * 64) * bad_row(9999).len() + READ_BUFFER;
    assert!(body.read < most, "read {}", body.read);
}
