//! `POST /v1/datasets/{id}/rows`: streamed uploads, one transaction each.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use dpgate_api_types::{ARROW_STREAM, CSV, IngestReport, LineError, NDJSON, PARQUET, Problem};
use futures_util::StreamExt;
use tracing::Instrument;

use super::body::media_type;
use super::datasets::load_visible;
use super::extract::Admin;
use crate::app::AppState;
use crate::dataset::DatasetRecord;
use crate::engine::Upload;
use crate::error::ApiError;
use crate::ingest::{self, ChannelReader, Format, MAX_REPORTED_ERRORS, RowRecord};
use crate::snapshots::{Builder, Columns, Shape, Snapshots};

fn format(headers: &HeaderMap) -> Result<Format, ApiError> {
    let media = media_type(
        headers,
        &[
            CSV,
            NDJSON,
            "application/ndjson",
            "application/jsonl",
            ARROW_STREAM,
            PARQUET,
        ],
        &format!("upload rows as {CSV}, {NDJSON}, {ARROW_STREAM} or {PARQUET}"),
    )?;
    Ok(match media.essence_str() {
        CSV => Format::Csv,
        ARROW_STREAM => Format::ArrowStream,
        PARQUET => Format::Parquet,
        _ => Format::Ndjson,
    })
}

fn too_large(limit: u64) -> ApiError {
    ApiError::PayloadTooLarge(format!("uploads are limited to {limit} bytes"))
}

/// Feeds the body to the parser, counting bytes against the limit.
async fn pump(
    body: Body,
    chunks: tokio::sync::mpsc::Sender<Bytes>,
    limit: u64,
) -> Result<(), ApiError> {
    let mut stream = body.into_data_stream();
    let mut total: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|error| ApiError::Malformed(format!("reading the body: {error}")))?;
        total += chunk.len() as u64;
        if total > limit {
            return Err(too_large(limit));
        }
        if chunks.send(chunk).await.is_err() {
            // The parser stopped early (bad lines); it reports why.
            break;
        }
    }
    Ok(())
}

/// Stores batches as they come, refusing row ids the dataset already has.
async fn store_batches(
    session: &mut Upload,
    batches: &mut tokio::sync::mpsc::Receiver<Vec<RowRecord>>,
    has_rows: bool,
) -> Result<Vec<LineError>, ApiError> {
    while let Some(batch) = batches.recv().await {
        if has_rows {
            let ids: Vec<&str> = batch.iter().map(|row| row.row_id.as_str()).collect();
            let existing = session.existing(&ids).await?;
            if !existing.is_empty() {
                let lines: HashMap<&str, u64> = batch
                    .iter()
                    .map(|row| (row.row_id.as_str(), row.line))
                    .collect();
                let mut errors: Vec<LineError> = existing
                    .iter()
                    .map(|id| LineError {
                        line: lines.get(id.as_str()).copied().unwrap_or_default(),
                        reason: format!("row_id {id:?} is already stored"),
                    })
                    .collect();
                errors.sort_by_key(|error| error.line);
                errors.truncate(MAX_REPORTED_ERRORS);
                return Ok(errors);
            }
        }
        session.insert(batch).await?;
    }
    Ok(Vec::new())
}

/// The snapshot an upload to `dataset` extends, if it is in memory (or
/// the dataset is empty): then the upload's rows are kept as they are
/// parsed, and the new version is held without reading it back.
fn warm_base(snapshots: &Snapshots, dataset: &DatasetRecord) -> Option<Arc<Columns>> {
    if dataset.n_rows == 0 {
        return Some(Arc::new(Columns::empty(Shape::of(&dataset.schema), true)));
    }
    snapshots.held(dataset.id, dataset.n_rows)
}

fn keep_rows(builder: &mut Builder, batch: &[RowRecord]) -> Result<(), String> {
    for row in batch {
        builder.push(
            &row.row_id,
            row.label,
            &row.features,
            &row.measures,
            &row.dimensions,
        )?;
    }
    Ok(())
}

/// Holds the version `record` just committed: `base` followed by the
/// upload's rows, as they are stored.
async fn keep_warm(
    snapshots: &Arc<Snapshots>,
    record: &DatasetRecord,
    base: Arc<Columns>,
    added: Builder,
) {
    let (snapshots, id, version) = (snapshots.clone(), record.id, record.n_rows);
    let kept = tokio::task::spawn_blocking(move || {
        let added = added.finish();
        let next = if base.is_empty() {
            added
        } else {
            base.joined(&added)?
        };
        snapshots.keep(id, version, next);
        Ok::<_, String>(())
    })
    .await;
    if let Ok(Err(error)) | Err(error) = kept.map_err(|error| error.to_string()) {
        tracing::warn!(dataset = %id, %error, "the new version was not kept in memory");
    }
}

/// Appends rows (CSV with a header, NDJSON, an Arrow IPC stream or a
/// Parquet file) to a dataset. The whole upload is one transaction: any
/// bad row stores nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/rows",
    operation_id = "uploadRows",
    tag = "datasets",
    params(("id" = Uuid, Path, description = "Dataset id")),
    request_body(
        description = "CSV with a header naming `row_id`, the label, every feature, measure and dimension; NDJSON objects with the same keys; or an Arrow IPC stream or a Parquet file with columns of those names (numbers: any float or integer type; `row_id` and dimensions: strings; the label: an integer 0 or 1, or a boolean). In Arrow and Parquet a bad row's `line` is its row number, from 1.",
        content((String = "text/csv"), (String = "application/x-ndjson"), (String = "application/vnd.apache.arrow.stream"), (String = "application/vnd.apache.parquet")),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Stored", body = IngestReport),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "The body could not be read", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over the upload limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not CSV or NDJSON in UTF-8, an Arrow IPC stream or a Parquet file; or a Content-Encoding", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad rows, by line number (a line longer than a row of the schema can need ends the upload); nothing stored", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`timeout`: the upload took too long and was rolled back", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn upload(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<IngestReport>, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let span = tracing::info_span!("ingest", dataset = %dataset.id);
    ingest_into(state, dataset, headers, body)
        .instrument(span)
        .await
}

/// The upload into `dataset`, in its `ingest` span (the parser's thread
/// included).
async fn ingest_into(
    state: AppState,
    dataset: DatasetRecord,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<IngestReport>, ApiError> {
    let format = format(&headers)?;
    let limit = state.limits.ingest_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large(limit));
    }

    let (chunk_sender, chunks) = tokio::sync::mpsc::channel::<Bytes>(16);
    let (batch_sender, mut batches) = tokio::sync::mpsc::channel::<Vec<RowRecord>>(2);
    let schema = dataset.schema.clone();
    let span = tracing::Span::current();
    let base = warm_base(&state.snapshots, &dataset);
    let shape = Shape::of(&schema);
    let mut added = base.is_some().then(|| Columns::builder(shape, true, 0));
    let (snapshots, version) = (state.snapshots.clone(), dataset.n_rows);
    let parser = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let summary = ingest::parse(format, ChannelReader::new(chunks), &schema, |batch| {
            if let Some(builder) = &mut added {
                let rows = version + (builder.len() + batch.len()) as u64;
                if !snapshots.fits(shape, rows) || keep_rows(builder, &batch).is_err() {
                    added = None;
                }
            }
            batch_sender.blocking_send(batch).is_ok()
        });
        (summary, added)
    });
    let mut session = Upload::begin(
        state.store.as_ref(),
        state.snapshots.data().clone(),
        &dataset,
    )
    .await?;
    let (pumped, stored) = tokio::join!(
        pump(body, chunk_sender, limit),
        store_batches(&mut session, &mut batches, dataset.n_rows > 0),
    );
    let (summary, added) = parser
        .await
        .map_err(|error| ApiError::Internal(anyhow::anyhow!("the parser failed: {error}")))?;
    let summary =
        summary.map_err(|error| ApiError::Malformed(format!("reading the body: {error}")))?;
    pumped?;
    let duplicates = stored?;
    let lines = if summary.errors.is_empty() {
        duplicates
    } else {
        summary.errors
    };
    if !lines.is_empty() {
        return Err(ApiError::BadLines {
            detail: format!(
                "the upload has bad rows (the first {} are listed); nothing was stored",
                lines.len()
            ),
            lines,
        });
    }
    // The parser returns sums exactly when it found no bad line.
    let stats = summary
        .stats
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("an upload without sums")))?;
    let record = session.commit(summary.rows, &stats).await?;
    // The version just committed is the base plus these rows only if no
    // other upload committed since the base was read.
    if let (Some(base), Some(added)) = (base, added)
        && record.n_rows == dataset.n_rows + summary.rows
    {
        keep_warm(&state.snapshots, &record, base, added).await;
    }
    metrics::counter!("dpgate_ingested_rows_total").increment(summary.rows);
    tracing::info!(dataset = %record.id, rows = summary.rows, "rows ingested");
    Ok(Json(IngestReport {
        rows_added: summary.rows,
        n_rows: record.n_rows,
    }))
}
