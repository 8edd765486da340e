//! `GET /v1/datasets/{id}/features`: the label-free feature matrix with row
//! ids, for label-blind training. Under the `label` privacy unit N, row ids
//! and features are public (only labels are protected), so they may leave
//! the server as they are; under `row` they are private and never do.

use std::ops::Range;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use dpgate_api_types::{NDJSON, PrivacyUnit, Problem};
use futures_util::StreamExt;

use super::datasets::load_visible;
use super::extract::Caller;
use crate::app::AppState;
use crate::dataset::{DatasetRecord, ROW_ID, Schema};
use crate::error::ApiError;
use crate::snapshots::{Columns, Snapshots};
use crate::store::StoreError;

/// Rows per chunk of the response.
const PIECE_ROWS: usize = 5000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Format {
    Csv,
    Ndjson,
}

fn format(headers: &HeaderMap) -> Format {
    let ndjson = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| {
            accept.split(',').any(|part| {
                let media = part.split(';').next().unwrap_or("").trim();
                media == NDJSON || media == "application/ndjson" || media == "application/jsonl"
            })
        });
    if ndjson { Format::Ndjson } else { Format::Csv }
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
            let range = column.max - column.min;
            decimal_round(
                column.min + f64::from(*scaled) * range,
                range * f64::from(f32::EPSILON),
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
fn encode(format: Format, schema: &Schema, block: &Columns, rows: Range<usize>) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * (16 + 12 * schema.k()));
    match format {
        Format::Csv => {
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
        Format::Ndjson => {
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

fn header_line(format: Format, schema: &Schema) -> Vec<u8> {
    if format == Format::Ndjson {
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

/// The snapshot of `dataset` in stored order, one response chunk per
/// [`PIECE_ROWS`] rows: from the snapshot in memory if it is held, else
/// streamed from the store without the outcomes (never loaded: loading
/// reads labels).
async fn stream(
    snapshots: &Snapshots,
    dataset: DatasetRecord,
    format: Format,
) -> Result<Body, StoreError> {
    let blocks = match snapshots.held(dataset.id, dataset.n_rows) {
        Some(columns) => futures_util::stream::once(async move { Ok(columns) }).boxed(),
        None => snapshots
            .blocks(&dataset, false)
            .await?
            .map(|block| block.map(Arc::new))
            .boxed(),
    };
    let (id, schema) = (dataset.id, Arc::new(dataset.schema));
    let first = Bytes::from(header_line(format, &schema));
    let pieces = blocks.flat_map(move |block| {
        let schema = schema.clone();
        let pieces: Vec<Result<Bytes, std::io::Error>> = match block {
            Err(error) => {
                tracing::error!(dataset = %id, error = %error, "feature export failed");
                vec![Err(std::io::Error::other(error.to_string()))]
            }
            Ok(block) => (0..block.len())
                .step_by(PIECE_ROWS)
                .map(|start| {
                    let rows = start..(start + PIECE_ROWS).min(block.len());
                    Ok(Bytes::from(encode(format, &schema, &block, rows)))
                })
                .collect(),
        };
        futures_util::stream::iter(pieces)
    });
    let head = futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) });
    Ok(Body::from_stream(head.chain(pieces)))
}

/// The feature matrix (no labels), in stored order and in the units the
/// features were uploaded in: CSV `row_id,<features…>` by default,
/// NDJSON when the `Accept` header asks for `application/x-ndjson`.
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
        Format::Csv => "text/csv; charset=utf-8",
        Format::Ndjson => NDJSON,
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
