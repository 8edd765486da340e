//! CSV uploads. The header is checked first; then the `csv` crate cuts the
//! body into records on the reading thread, exactly as it would for one
//! thread (quoted fields may span lines, a quote inside an unquoted field
//! is text, blank lines are skipped), with the same positions and lines,
//! and the workers check each record's UTF-8 and fields as its
//! `StringRecord` would have.

use std::collections::HashSet;
use std::io::{self, Read};

use dpgate_api_types::LineError;

use super::pipeline::{Chunk, ChunkSize, End, ParseChunk, Record, Split};
use super::row::{Cell, RowBuilder};
use super::{READ_BUFFER, RowRecord, too_long};

/// The complaint about an error reading CSV, or the error if it was in
/// reading the body.
fn csv_error(error: csv::Error) -> Result<String, io::Error> {
    match error.into_kind() {
        csv::ErrorKind::Io(error) => Err(error),
        csv::ErrorKind::Utf8 { err, .. } => Ok(format!("not valid UTF-8: {err}")),
        other => Ok(format!("unreadable CSV: {other:?}")),
    }
}

/// Reads and checks the header: the records after it, cut for the workers,
/// and how the workers read them; or the header's line error.
pub(super) fn open<R: Read>(
    reader: R,
    limit: usize,
    rows: &RowBuilder,
) -> io::Result<Result<(Records<R>, Fields), LineError>> {
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
    let refused = |reason| Ok(Err(LineError::new(1, reason)));
    let header = match csv.headers().cloned() {
        Ok(header) => header,
        Err(_) if csv.get_ref().tripped => return Ok(Err(too_long(1, limit))),
        Err(error) => return refused(csv_error(error)?),
    };
    if csv.position().byte() > limit as u64 {
        return Ok(Err(too_long(1, limit)));
    }
    if let Some(problem) = header_problem(&header, rows) {
        return refused(problem);
    }
    // Where each column is in a record, by its position in `names`.
    // (The header names every column once, and nothing else.)
    let mut positions = vec![0; rows.names.len()];
    for (field, name) in header.iter().enumerate() {
        if let Some(&at) = rows.columns.get(name) {
            positions[at] = field;
        }
    }
    let records = Records {
        csv,
        record: csv::ByteRecord::new(),
        limit,
    };
    let fields = Fields {
        positions,
        width: header.len(),
    };
    Ok(Ok((records, fields)))
}

/// The reading half: records as the `csv` crate reads them, as bytes.
pub(super) struct Records<R> {
    csv: csv::Reader<Bounded<R>>,
    /// The record being read (kept for its allocation).
    record: csv::ByteRecord,
    limit: usize,
}

impl<R: Read> Split for Records<R> {
    fn fill(&mut self, chunk: &mut Chunk, size: ChunkSize) -> End {
        chunk.clear();
        let mut read = 0;
        while chunk.records.len() < size.records && read < size.bytes {
            self.csv.get_mut().reset();
            let start = self.csv.position().clone();
            let line = start.line().max(1);
            let more = self.csv.read_byte_record(&mut self.record);
            let length = self.csv.position().byte() - start.byte();
            if self.csv.get_ref().tripped || length > self.limit as u64 {
                return End::TooLong(too_long(line, self.limit));
            }
            match more {
                Ok(true) => {}
                Ok(false) => return End::Body,
                // Reading bytes into flexible records fails on I/O alone
                // (UTF-8 is the workers' check); anything else would end
                // the upload the same way.
                Err(error) => {
                    return End::Failed(csv_error(error).map_or_else(|e| e, io::Error::other));
                }
            }
            // Within the record's limit, as checked.
            read += length as usize;
            // The record's fields lie end to end in one slice: one copy.
            let base = chunk.bytes.len();
            chunk.bytes.extend_from_slice(self.record.as_slice());
            let ends = (0..self.record.len()).filter_map(|field| self.record.range(field));
            chunk.field_ends.extend(ends.map(|range| base + range.end));
            chunk.records.push(Record {
                line,
                end: chunk.field_ends.len(),
            });
        }
        End::More
    }
}

/// The workers' half: each record's fields into a row.
pub(super) struct Fields {
    /// Where each column is in a record, by its position in `names`.
    positions: Vec<usize>,
    /// How many fields the header has, as every record must.
    width: usize,
}

impl ParseChunk for Fields {
    fn parse(
        &self,
        chunk: &Chunk,
        rows: &RowBuilder,
        each: &mut dyn FnMut(u64, Result<RowRecord, String>),
    ) {
        let mut texts = Vec::with_capacity(self.width);
        let (mut first_field, mut start) = (0, 0);
        for record in &chunk.records {
            let ends = &chunk.field_ends[first_field..record.end];
            let end = ends.last().copied().unwrap_or(start);
            // Each field's range within the record.
            let ranges = ends.iter().scan(0, |from, &to| {
                let range = (*from, to - start);
                *from = to - start;
                Some(range)
            });
            let row = self.row(
                rows,
                record.line,
                &chunk.bytes[start..end],
                ranges,
                &mut texts,
            );
            each(record.line, row);
            first_field = record.end;
            start = end;
        }
    }
}

impl Fields {
    /// The row of one record (its bytes and its fields' ranges in them);
    /// `texts` is room for the fields as text.
    fn row<'c>(
        &self,
        rows: &RowBuilder,
        line: u64,
        bytes: &'c [u8],
        ranges: impl Iterator<Item = (usize, usize)> + Clone,
        texts: &mut Vec<&'c str>,
    ) -> Result<RowRecord, String> {
        texts.clear();
        // One check of the whole record; a field cut inside a character
        // (which the whole may hide) is found by the range that fails.
        let whole = std::str::from_utf8(bytes).ok();
        for (from, to) in ranges.clone() {
            match whole.and_then(|text| text.get(from..to)) {
                Some(text) => texts.push(text),
                None => {
                    let fields = ranges.map(|(from, to)| &bytes[from..to]);
                    return Err(utf8_problem(fields));
                }
            }
        }
        if texts.len() != self.width {
            return Err(format!("{} fields, expected {}", texts.len(), self.width));
        }
        rows.build(line, |at| {
            texts.get(self.positions[at]).copied().map(Cell::Text)
        })
    }
}

/// What the `csv` crate says of a record whose fields are not all UTF-8,
/// as reading it as a `StringRecord` reported it (it checks the fields one
/// by one).
fn utf8_problem<'c>(fields: impl Iterator<Item = &'c [u8]>) -> String {
    match csv::StringRecord::from_byte_record(fields.collect()) {
        Err(error) => format!("not valid UTF-8: {}", error.utf8_error()),
        Ok(_) => "not valid UTF-8".to_owned(),
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
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let room = self.allowance - self.read;
        if room == 0 && !buffer.is_empty() {
            self.tripped = true;
            return Err(io::Error::other("a CSV record is too long"));
        }
        let end = buffer.len().min(room);
        let count = self.inner.read(&mut buffer[..end])?;
        self.read += count;
        Ok(count)
    }
}

/// The header's complaint, if it does not name every column exactly once.
fn header_problem(header: &csv::StringRecord, rows: &RowBuilder) -> Option<String> {
    let mut seen = HashSet::new();
    let mut unknown = Vec::new();
    let mut twice = Vec::new();
    for name in header {
        let first = seen.insert(name);
        if !rows.columns.contains_key(name) {
            if first {
                unknown.push(name);
            }
        } else if !first && !twice.contains(&name) {
            twice.push(name);
        }
    }
    let missing: Vec<&str> = rows
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
