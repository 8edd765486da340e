//! A run of rows of the feature matrix encoded as CSV, NDJSON or an Arrow
//! record batch, the features back in the units they were uploaded in.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, RecordBatch, StringArray};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema as ArrowSchema, SchemaRef};
use dpgate_api_types::BoundedColumn;

use super::{Format, Text};
use crate::domain::dataset::{ROW_ID, Schema};
use crate::snapshots::Columns;

/// Rows per chunk of a text response.
const PIECE_ROWS: usize = 5000;

/// Most rows per Arrow record batch. A batch is built whole in memory and
/// encoded before it is sent: twice 4k + 4 bytes a row plus its id, 18 MB
/// at k = 32 with short ids. Readers take a batch as their unit of work.
const BATCH_ROWS: usize = 65_536;

/// A feature stored as the f32 share `scaled` of its declared range, back
/// in the units it was uploaded in.
fn unscaled(column: &BoundedColumn, scaled: f32) -> f64 {
    column.min + f64::from(scaled) * (column.max - column.min)
}

/// A feature back in the units it was uploaded in. It is stored as an f32
/// share of its declared range, so only its first digits are known: it is
/// rounded to the decimal place of that precision (0.1, not
/// 0.10000000149011612), which moves it by less than the storage did.
fn raw<'r>(schema: &'r Schema, features: &'r [f32]) -> impl Iterator<Item = f64> + 'r {
    schema
        .features
        .iter()
        .zip(features)
        .map(|(column, scaled)| {
            decimal_round(
                unscaled(column, *scaled),
                (column.max - column.min) * f64::from(f32::EPSILON),
            )
        })
}

/// `value` rounded to the largest power of ten not above `resolution`.
fn decimal_round(value: f64, resolution: f64) -> f64 {
    if !resolution.is_finite() || resolution <= 0.0 {
        return value;
    }
    let exponent = resolution.log10().floor() as i32;
    if exponent < 0 {
        // 10^-exponent is an exact integer, so the division rounds once.
        let scale = 10f64.powi(-exponent);
        (value * scale).round() / scale
    } else {
        let quantum = 10f64.powi(exponent);
        (value / quantum).round() * quantum
    }
}

/// Rows `rows` of `block`, encoded.
fn encode(format: Text, schema: &Schema, block: &Columns, rows: Range<usize>) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * (16 + 12 * schema.k()));
    match format {
        Text::Csv => {
            let mut writer = csv::Writer::from_writer(&mut out);
            for row in rows {
                let mut record = csv::StringRecord::new();
                record.push_field(block.id(row));
                for value in raw(schema, block.features(row)) {
                    record.push_field(&value.to_string());
                }
                writer
                    .write_record(&record)
                    .expect("BUG: writing CSV to memory cannot fail");
            }
            writer
                .flush()
                .expect("BUG: writing CSV to memory cannot fail");
        }
        Text::Ndjson => {
            for row in rows {
                let mut object = serde_json::Map::new();
                object.insert(ROW_ID.to_owned(), block.id(row).into());
                for (column, value) in schema.features.iter().zip(raw(schema, block.features(row)))
                {
                    object.insert(column.name.clone(), value.into());
                }
                out.extend_from_slice(serde_json::Value::Object(object).to_string().as_bytes());
                out.push(b'\n');
            }
        }
    }
    out
}

fn header_line(format: Text, schema: &Schema) -> Vec<u8> {
    if format == Text::Ndjson {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut writer = csv::Writer::from_writer(&mut out);
    let names = std::iter::once(ROW_ID).chain(schema.features.iter().map(|c| c.name.as_str()));
    writer
        .write_record(names)
        .expect("BUG: writing CSV to memory cannot fail");
    writer
        .flush()
        .expect("BUG: writing CSV to memory cannot fail");
    drop(writer);
    out
}

/// The Arrow schema of the export: `row_id` (Utf8), then each feature
/// (Float32, raw units), none nullable.
fn arrow_schema(schema: &Schema) -> ArrowSchema {
    let features = schema
        .features
        .iter()
        .map(|column| Field::new(&column.name, DataType::Float32, false));
    ArrowSchema::new(
        std::iter::once(Field::new(ROW_ID, DataType::Utf8, false))
            .chain(features)
            .collect::<Vec<_>>(),
    )
}

/// Rows `rows` of `block` as a record batch of `arrow`. The features are
/// unscaled in f64 and rounded once, to f32: not to the decimal place the
/// text formats round to, which would only move them off the nearest f32.
fn batch(
    arrow: &SchemaRef,
    schema: &Schema,
    block: &Columns,
    rows: Range<usize>,
) -> Result<RecordBatch, ArrowError> {
    let k = schema.k();
    let ids = StringArray::from_iter_values(rows.clone().map(|row| block.id(row)));
    let mut columns: Vec<Vec<f32>> = (0..k).map(|_| Vec::with_capacity(rows.len())).collect();
    // One pass over the row-major matrix, each row's values dealt out to
    // the columns.
    let matrix = &block.feature_matrix()[rows.start * k..rows.end * k];
    for features in matrix.chunks_exact(k) {
        for ((values, column), scaled) in columns.iter_mut().zip(&schema.features).zip(features) {
            values.push(unscaled(column, *scaled) as f32);
        }
    }
    let arrays = std::iter::once(Arc::new(ids) as ArrayRef)
        .chain(
            columns
                .into_iter()
                .map(|values| Arc::new(Float32Array::from(values)) as ArrayRef),
        )
        .collect();
    RecordBatch::try_new(arrow.clone(), arrays)
}

/// Turns runs of rows into the response's chunks: a head before the first
/// run, one chunk per run, a tail after the last.
pub(super) enum Encoder {
    /// CSV (the header line is the head) or NDJSON.
    Text { format: Text, schema: Arc<Schema> },
    /// The Arrow IPC stream: the schema message is the head, a record
    /// batch per run, the end-of-stream marker the tail. The writer writes
    /// into a buffer that each chunk takes.
    Arrow {
        schema: Arc<Schema>,
        arrow: SchemaRef,
        writer: Box<StreamWriter<Vec<u8>>>,
    },
}

impl Encoder {
    /// The encoder and the head.
    pub(super) fn new(
        format: Format,
        schema: Arc<Schema>,
    ) -> Result<(Encoder, Vec<u8>), ArrowError> {
        Ok(match format {
            Format::Text(format) => {
                let head = header_line(format, &schema);
                (Encoder::Text { format, schema }, head)
            }
            Format::Arrow => {
                let arrow = Arc::new(arrow_schema(&schema));
                let mut writer = Box::new(StreamWriter::try_new(Vec::new(), &arrow)?);
                let head = std::mem::take(writer.get_mut());
                let encoder = Encoder::Arrow {
                    schema,
                    arrow,
                    writer,
                };
                (encoder, head)
            }
        })
    }

    /// Most rows per run.
    pub(super) fn run_rows(&self) -> usize {
        match self {
            Encoder::Text { .. } => PIECE_ROWS,
            Encoder::Arrow { .. } => BATCH_ROWS,
        }
    }

    pub(super) fn run(
        &mut self,
        block: &Columns,
        rows: Range<usize>,
    ) -> Result<Vec<u8>, ArrowError> {
        match self {
            Encoder::Text { format, schema } => Ok(encode(*format, schema, block, rows)),
            Encoder::Arrow {
                schema,
                arrow,
                writer,
            } => {
                let batch = batch(arrow, schema, block, rows)?;
                // The encoding is the arrays' bytes and a little metadata:
                // one allocation instead of a doubling series.
                writer
                    .get_mut()
                    .reserve(batch.get_array_memory_size() + 1024);
                writer.write(&batch)?;
                Ok(std::mem::take(writer.get_mut()))
            }
        }
    }

    pub(super) fn tail(&mut self) -> Result<Vec<u8>, ArrowError> {
        match self {
            Encoder::Text { .. } => Ok(Vec::new()),
            Encoder::Arrow { writer, .. } => {
                writer.finish()?;
                Ok(std::mem::take(writer.get_mut()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::decimal_round;

    #[test]
    fn features_come_back_at_their_stored_precision() {
        let eps = f64::from(f32::EPSILON);
        // Shares 0.1 and 0.3 of [0, 1] and [-5, 5] as f32 stores them.
        assert_eq!(decimal_round(f64::from(0.1f32), eps), 0.1);
        let f1 = -5.0 + f64::from(0.3f32) * 10.0;
        assert_ne!(f1, -2.0);
        assert_eq!(decimal_round(f1, 10.0 * eps), -2.0);
        assert_eq!(decimal_round(123_456_789.4, 1e9 * eps), 123_456_800.0);
        assert_eq!(decimal_round(0.123_456_789, 0.0), 0.123_456_789);
        // Never moves a value by more than the resolution.
        for value in [0.0, 1e-9, 0.333_333_333, -7.777_777_7, 1e6 / 3.0] {
            assert!((decimal_round(value, 1e-7) - value).abs() <= 1e-7);
        }
    }
}
