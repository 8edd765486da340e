//! `GET /v1/datasets/{id}/features`: the label-free feature matrix with row
//! ids, for label-blind training. Under the `label` privacy unit N, row ids
//! and features are public (only labels are protected), so they may leave
//! the server as they are; under `row` they are private and never do.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{ARROW_STREAM, NDJSON, PrivacyUnit, Problem};

use super::datasets::load_visible;
use super::error::ApiError;
use super::extract::Caller;
use crate::api::AppState;
use crate::export::{self, Format, Text};

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
    // Only unit `label` makes features public; under `row` and `user` they
    // are as private as the rest of a row.
    if dataset.privacy_unit != PrivacyUnit::Label {
        return Err(ApiError::FeaturesNotPublic(format!(
            "this dataset's privacy unit is `{}`: its features are private and are only \
             released through differentially private releases",
            dataset.privacy_unit.name()
        )));
    }
    let format = format(&headers);
    let media = match format {
        Format::Text(Text::Csv) => "text/csv; charset=utf-8",
        Format::Text(Text::Ndjson) => NDJSON,
        Format::Arrow => ARROW_STREAM,
    };
    let pieces = export::features(&state.snapshots, dataset, format).await?;
    let mut response = Body::from_stream(pieces).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    Ok(response)
}
