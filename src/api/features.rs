//! `GET /v1/datasets/{id}/features`: the label-free feature matrix with row
//! ids, for label-blind training. Under the `label` privacy unit N, row ids
//! and features are public (only labels are protected), so they may leave
//! the server as they are; under `row` they are private and never do.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, RecordBatch, StringArray};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema as ArrowSchema, SchemaRef};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use dpgate_api_types::{ARROW_STREAM, BoundedColumn, NDJSON, PrivacyUnit, Problem};
use futures_util::StreamExt;
use futures_util::future::{Either, ready};

use super::datasets::load_visible;
use super::extract::Caller;
use crate::app::AppState;
use crate::dataset::{DatasetRecord, ROW_ID, Schema};
use crate::error::ApiError;
use crate::snapshots::{Columns, Snapshots};

/// Rows per chunk of a text response.
const PIECE_ROWS: usize = 5000;

/// Most rows per Arrow record batch. A batch is built whole in memory and
/// encoded before it is sent: twice 4k + 4 bytes a row plus its id, 18 MB
/// at k = 32 with short ids. Readers take a batch as their unit of work.
const BATCH_ROWS: usize = 65_536;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Text {
    Csv,
    Ndjson,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    Text(Text),
    Arrow,
}

/// The format the `Accept` header asks for: Arrow if it names the Arrow
/// stream, else NDJSON if it names NDJSON, else CSV.
fn format(headers: &HeaderMap) -> Format {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let media: Vec<&str> = accept
        .split(',')
        .map(|part| part.split(';').next().unwrap_or("").trim())
        .collect();
    if media.contains(&ARROW_STREAM) {
        Format::Arrow
    } else if media.iter().any(|&media| {
        media == NDJSON || media == "application/ndjson" || media == "application/jsonl"
    }) {
        Format::Text(Text::Ndjson)
    } else {
        Format::Text(Text::Csv)
    }
}

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
    #[allow(clippy::cast_possible_truncation)]
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
            #[allow(clippy::cast_possible_truncation)]
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
enum Encoder {
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
    fn new(format: Format, schema: Arc<Schema>) -> Result<(Encoder, Vec<u8>), ArrowError> {
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
    fn run_rows(&self) -> usize {
        match self {
            Encoder::Text { .. } => PIECE_ROWS,
            Encoder::Arrow { .. } => BATCH_ROWS,
        }
    }

    fn run(&mut self, block: &Columns, rows: Range<usize>) -> Result<Vec<u8>, ArrowError> {
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

    fn tail(&mut self) -> Result<Vec<u8>, ArrowError> {
        match self {
            Encoder::Text { .. } => Ok(Vec::new()),
            Encoder::Arrow { writer, .. } => {
                writer.finish()?;
                Ok(std::mem::take(writer.get_mut()))
            }
        }
    }
}

/// The snapshot of `dataset` in stored order, one response chunk per
/// run of rows (see [`Encoder::run_rows`]): from the snapshot in memory if
/// it is held, else streamed from its inputs files (never
/// loaded: loading reads labels). Runs are encoded as the body is polled,
/// so the response holds one run at a time however large the block.
async fn stream(
    snapshots: &Snapshots,
    dataset: DatasetRecord,
    format: Format,
) -> Result<Body, ApiError> {
    let blocks = match snapshots.held(dataset.id, dataset.n_rows) {
        Some(columns) => futures_util::stream::once(async move { Ok(columns) }).boxed(),
        None => snapshots
            .blocks(&dataset, false)
            .await?
            .map(|block| block.map(Arc::new))
            .boxed(),
    };
    let id = dataset.id;
    let (encoder, head) = Encoder::new(format, Arc::new(dataset.schema))
        .map_err(|error| ApiError::Internal(error.into()))?;
    let step = encoder.run_rows();
    let runs = blocks.flat_map(move |block| match block {
        Err(error) => Either::Left(futures_util::stream::once(ready(Err(error)))),
        Ok(block) => Either::Right(futures_util::stream::iter(
            (0..block.len())
                .step_by(step)
                .map(move |start| Ok((block.clone(), start..(start + step).min(block.len())))),
        )),
    });
    // `None` marks the end, for the tail.
    let pieces = runs
        .map(Some)
        .chain(futures_util::stream::once(ready(None)))
        .scan(encoder, move |encoder, run| {
            let piece = match run {
                Some(Ok((block, rows))) => encoder.run(&block, rows).map_err(anyhow::Error::from),
                Some(Err(error)) => Err(error.into()),
                None => encoder.tail().map_err(anyhow::Error::from),
            };
            ready(Some(piece.map(Bytes::from).map_err(|error| {
                tracing::error!(dataset = %id, error = %error, "feature export failed");
                std::io::Error::other(error.to_string())
            })))
        });
    let head = futures_util::stream::once(ready(Ok::<_, std::io::Error>(Bytes::from(head))));
    Ok(Body::from_stream(head.chain(pieces)))
}

/// The feature matrix (no labels), in stored order and in the units the
/// features were uploaded in: CSV `row_id,<features…>` by default,
/// NDJSON when the `Accept` header asks for `application/x-ndjson`, an
/// Arrow IPC stream (`row_id` Utf8, each feature Float32; a record batch
/// per at most 65,536 rows) when it names
/// `application/vnd.apache.arrow.stream`, which wins over the others.
/// Only for datasets whose privacy unit is `label`.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/features",
    operation_id = "exportFeatures",
    tag = "datasets",
    params(("id" = Uuid, Path, description = "Dataset id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The features, streamed", content(
            (String = "text/csv"),
            (String = "application/x-ndjson"),
            (String = "application/vnd.apache.arrow.stream"),
        )),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "No grant for the dataset (`forbidden`), or its privacy unit is `row` (`features-not-public`)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn export(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    if dataset.privacy_unit == PrivacyUnit::Row {
        return Err(ApiError::FeaturesNotPublic(
            "this dataset's privacy unit is `row`: its features are private and are only \
             released through differentially private releases"
                .to_owned(),
        ));
    }
    let format = format(&headers);
    let media = match format {
        Format::Text(Text::Csv) => "text/csv; charset=utf-8",
        Format::Text(Text::Ndjson) => NDJSON,
        Format::Arrow => ARROW_STREAM,
    };
    let body = stream(&state.snapshots, dataset, format).await?;
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    Ok(response)
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
