//! `POST /v1/datasets/{id}/rows`: streamed uploads, one transaction each
//! (`crate::uploads`).

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{
    ARROW_STREAM, CSV, IngestReport, NDJSON, PARQUET, Problem, RegisterRows, Registration,
};
use futures_util::{StreamExt, TryStreamExt};
use tracing::Instrument;

use super::body::media_type;
use super::datasets::load_visible;
use super::error::ApiError;
use super::extract::Admin;
use super::registrations;
use crate::api::AppState;
use crate::ingest::Format;
use crate::uploads::{self, Rows, UploadError};

const JSON: &str = "application/json";

/// The rows a request brings: its body in the format its media type
/// names, or (`application/json`) the Parquet files of the source it
/// names, located under the operator's roots.
async fn rows_of(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Rows, ApiError> {
    let media = media_type(
        headers,
        &[
            CSV,
            NDJSON,
            "application/ndjson",
            "application/jsonl",
            ARROW_STREAM,
            PARQUET,
            JSON,
        ],
        &format!(
            "upload rows as {CSV}, {NDJSON}, {ARROW_STREAM} or {PARQUET}, or name a source as \
             {JSON}"
        ),
    )?;
    let format = match media.essence_str() {
        CSV => Format::Csv,
        ARROW_STREAM => Format::ArrowStream,
        PARQUET => Format::Parquet,
        JSON => {
            let limit = state.limits.body_bytes;
            let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
                ApiError::PayloadTooLarge(format!("JSON bodies are limited to {limit} bytes"))
            })?;
            let request: RegisterRows = super::body::parse(&bytes)?;
            return Ok(Rows::Source(
                uploads::locate(&state.snapshots, &request.source).await?,
            ));
        }
        _ => Format::Ndjson,
    };
    let limit = state.limits.ingest_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(UploadError::TooLarge(limit).into());
    }
    let body = body
        .into_data_stream()
        .map_err(|error| format!("reading the body: {error}"))
        .boxed();
    Ok(Rows::Body {
        format,
        body,
        limit,
    })
}

/// Appends rows (CSV with a header, NDJSON, an Arrow IPC stream or a
/// Parquet file) to a dataset, or registers Parquet files in place as its
/// next version (a JSON body naming their `source`; with `Prefer:
/// respond-async`, in the background). The whole upload is one
/// transaction: any bad row stores nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/rows",
    operation_id = "uploadRows",
    tag = "datasets",
    request_body(
        description = "CSV with a header naming `row_id`, the label, every feature, measure and dimension; NDJSON objects with the same keys; or an Arrow IPC stream or a Parquet file with columns of those names (numbers: any float or integer type; `row_id` and dimensions: strings; the label: an integer 0 or 1, or a boolean). In Arrow and Parquet a bad row's `line` is its row number, from 1. Or, as JSON, a `source` of Parquet files to register in place (a bad row names its `file`).",
        content((String = "text/csv"), (String = "application/x-ndjson"), (String = "application/vnd.apache.arrow.stream"), (String = "application/vnd.apache.parquet"), (RegisterRows = "application/json")),
    ),
    params(("id" = Uuid, Path, description = "Dataset id"), ("Prefer" = Option<String>, Header, description = "`respond-async` (RFC 7240): with a `source`, register it in the background and answer `202 Accepted` at once; with a body of rows, the preference is ignored")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Stored", body = IngestReport),
        (status = 202, description = "Registering in the background (`Prefer: respond-async`): the registration, at its `Location`", body = Registration, headers(("Location" = String, description = "`/v1/registrations/{id}`"), ("Preference-Applied" = String, description = "`respond-async`"))),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin, or a source outside the operator's `DPGATE_DATA_ROOTS`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "The body could not be read", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over the upload limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not CSV or NDJSON in UTF-8, an Arrow IPC stream or a Parquet file; or a Content-Encoding", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad rows, by line number (a line longer than a row of the schema can need ends the upload) and, of a source, file; a source that is not a readable Parquet file or directory; nothing stored", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`timeout`: the upload took too long and was rolled back", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn upload(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let rows = rows_of(&state, &headers, body).await?;
    let span = tracing::info_span!("ingest", dataset = %dataset.id);
    if matches!(rows, Rows::Source(_)) && registrations::respond_async(&headers) {
        let id = dataset.id;
        let work = {
            let state = state.clone();
            async move {
                Ok(uploads::ingest(state.store.as_ref(), &state.snapshots, dataset, rows).await?)
            }
        };
        return registrations::start(&state, id, &caller.sub, work.instrument(span)).await;
    }
    let report = uploads::ingest(state.store.as_ref(), &state.snapshots, dataset, rows)
        .instrument(span)
        .await?;
    Ok(Json(report).into_response())
}
