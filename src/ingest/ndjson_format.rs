//! NDJSON uploads: the reading thread cuts the body into lines, the
//! workers read each line's JSON object into a row.

use std::io::{self, BufRead, Read};

use serde::de::{self, DeserializeSeed, Deserializer as _, MapAccess, Visitor};
use serde_json::Value;

use super::pipeline::{Chunk, ChunkSize, End, ParseChunk, Record, Split};
use super::row::{Cell, RowBuilder};
use super::{READ_BUFFER, RowRecord, too_long};

/// The reading half: the body's lines.
pub(super) struct Lines<R> {
    lines: io::BufReader<R>,
    limit: usize,
    /// The last line's number.
    line: u64,
}

impl<R: Read> Lines<R> {
    pub(super) fn new(reader: R, limit: usize) -> Self {
        Lines {
            lines: io::BufReader::with_capacity(READ_BUFFER, reader),
            limit,
            line: 0,
        }
    }
}

impl<R: Read> Split for Lines<R> {
    fn fill(&mut self, chunk: &mut Chunk, size: ChunkSize) -> End {
        chunk.clear();
        while chunk.records.len() < size.records && chunk.bytes.len() < size.bytes {
            let start = chunk.bytes.len();
            // At most one byte past the limit: enough to know the line is
            // too long.
            let read = (&mut self.lines)
                .take(self.limit as u64 + 1)
                .read_until(b'\n', &mut chunk.bytes);
            let read = match read {
                Ok(0) => return End::Body,
                Ok(read) => read,
                Err(error) => return End::Failed(error),
            };
            self.line += 1;
            if read > self.limit {
                chunk.bytes.truncate(start);
                return End::TooLong(too_long(self.line, self.limit));
            }
            chunk.records.push(Record {
                line: self.line,
                end: chunk.bytes.len(),
            });
        }
        End::More
    }
}

/// The workers' half: each line's object into a row.
pub(super) struct Objects;

impl ParseChunk for Objects {
    fn parse(
        &self,
        chunk: &Chunk,
        rows: &RowBuilder,
        each: &mut dyn FnMut(u64, Result<RowRecord, String>),
    ) {
        let mut slots: Vec<Option<Value>> = vec![None; rows.names.len()];
        let mut start = 0;
        for record in &chunk.records {
            let bytes = &chunk.bytes[start..record.end];
            start = record.end;
            if let Some(row) = object_row(rows, record.line, bytes, &mut slots) {
                each(record.line, row);
            }
        }
    }
}

/// The row of one line, `slots` room for its values; None for a blank line.
pub(super) fn object_row(
    rows: &RowBuilder,
    line: u64,
    bytes: &[u8],
    slots: &mut [Option<Value>],
) -> Option<Result<RowRecord, String>> {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => return Some(Err(format!("not valid UTF-8: {error}"))),
    };
    if text.trim().is_empty() {
        return None;
    }
    slots.fill(None);
    let mut problem = None;
    let mut json = serde_json::Deserializer::from_str(text);
    let object = (&mut json)
        .deserialize_map(ObjectVisitor {
            rows,
            slots,
            problem: &mut problem,
        })
        .and_then(|()| json.end());
    if let Err(error) = object {
        return Some(Err(
            problem.unwrap_or_else(|| format!("not a JSON object: {error}"))
        ));
    }
    Some(rows.build(line, |at| slots[at].as_ref().map(Cell::Json)))
}

/// Reads one JSON object into `slots`, by column position, refusing keys
/// that are not columns or that come twice. `problem` says why, when the
/// object was refused for its keys rather than its syntax.
struct ObjectVisitor<'v, 'a> {
    rows: &'v RowBuilder<'a>,
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
        while let Some(key) = map.next_key_seed(KeySeed(self.rows))? {
            let at = match key {
                Key::Column(at) => at,
                Key::Unknown(name) => {
                    *self.problem = Some(format!("unknown column {name:?}"));
                    return Err(de::Error::custom("unknown column"));
                }
            };
            let slot = &mut self.slots[at];
            if slot.is_some() {
                let name = self.rows.names[at];
                *self.problem = Some(format!("column {name:?} appears twice in the object"));
                return Err(de::Error::custom("a key appears twice"));
            }
            *slot = Some(map.next_value()?);
        }
        Ok(())
    }
}
