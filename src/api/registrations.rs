//! Registrations of Parquet in place in the background (`Prefer:
//! respond-async`), and `GET /v1/registrations/{id}`: where one stands.

use std::future::Future;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{IngestReport, Problem, RESPOND_ASYNC, Registration};
use uuid::Uuid;

use super::error::ApiError;
use super::extract::Admin;
use crate::api::AppState;
use crate::uploads::background;

/// Whether the request prefers to be answered before its work is done
/// (RFC 7240: `Prefer: respond-async`, among any other preferences).
pub(super) fn respond_async(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::HeaderName::from_static("prefer"))
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|preference| preference.split([';', '=']).next())
        .any(|token| token.trim().eq_ignore_ascii_case(RESPOND_ASYNC))
}

/// Runs `work`, a registration into `dataset_id` that `actor` asked for, in
/// the background: answers `202 Accepted` with its record, its address in
/// `Location`. The work runs to its end even if the caller goes away (the
/// server's shutdown waits for it); how it ended is recorded for any
/// replica to answer.
pub(super) async fn start(
    state: &AppState,
    dataset_id: Uuid,
    actor: &str,
    work: impl Future<Output = Result<IngestReport, ApiError>> + Send + 'static,
) -> Result<Response, ApiError> {
    let work = async move { work.await.map_err(|error| error.problem().1) };
    let record = background::start(&state.store, &state.tasks, dataset_id, actor, work).await?;
    let location = format!("/v1/registrations/{}", record.id);
    let mut response = (
        StatusCode::ACCEPTED,
        Json(record.view(crate::domain::clock::now())),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::LOCATION,
        HeaderValue::from_str(&location).expect("a path of a UUID is a header value"),
    );
    headers.insert(
        header::HeaderName::from_static("preference-applied"),
        HeaderValue::from_static(RESPOND_ASYNC),
    );
    Ok(response)
}

/// Where a registration of Parquet in place stands: `running`, `done` with
/// the rows it added, or `failed` with the problem the synchronous call
/// would have answered (a registration whose replica stopped is failed
/// once a minute has passed without its beat).
#[utoipa::path(
    get,
    path = "/v1/registrations/{id}",
    operation_id = "getRegistration",
    tag = "datasets",
    params(("id" = Uuid, Path, description = "Registration id (the `Location` of a `202 Accepted`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The registration", body = Registration),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such registration", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Admin(_caller): Admin,
    Path(id): Path<String>,
) -> Result<Json<Registration>, ApiError> {
    let not_found = || ApiError::NotFound("no such registration".to_owned());
    let id = Uuid::parse_str(&id).map_err(|_| not_found())?;
    let record = state.store.registration(id).await?.ok_or_else(not_found)?;
    Ok(Json(record.view(crate::domain::clock::now())))
}
