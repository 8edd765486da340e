//! Registrations of Parquet in place in the background (`Prefer:
//! respond-async`), and `GET /v1/registrations/{id}`: where one stands.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{IngestReport, Problem, RESPOND_ASYNC, Registration};
use tracing::Instrument;
use uuid::Uuid;

use super::extract::Admin;
use crate::app::AppState;
use crate::error::ApiError;
use crate::registration::{BEAT, Ended, RegistrationRecord};
use crate::store::Store;

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
    let record = RegistrationRecord::start(dataset_id, actor)?;
    state.store.start_registration(&record).await?;
    let id = record.id;
    let store = state.store.clone();
    let span = tracing::info_span!("registration", registration = %id, dataset = %dataset_id);
    state.tasks.spawn(
        async move {
            let beats = tokio::spawn(beat(store.clone(), id));
            let outcome = work.await.map_err(|error| error.problem().1);
            beats.abort();
            record_end(store.as_ref(), id, outcome).await;
        }
        .instrument(span),
    );
    let location = format!("/v1/registrations/{id}");
    let mut response =
        (StatusCode::ACCEPTED, Json(record.view(crate::clock::now()))).into_response();
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

/// Records, every [`BEAT`], that this replica still runs registration `id`
/// (until aborted).
async fn beat(store: Arc<dyn Store>, id: Uuid) {
    let mut beats = tokio::time::interval(BEAT);
    beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beats.tick().await;
    loop {
        beats.tick().await;
        let beaten = match crate::clock::timestamp() {
            Ok(at) => store
                .beat_registration(id, &at)
                .await
                .map_err(anyhow::Error::from),
            Err(error) => Err(error.into()),
        };
        if let Err(error) = beaten {
            tracing::warn!(
                error = format!("{error:#}"),
                "a registration's beat was not recorded"
            );
        }
    }
}

/// Records how registration `id` ended, trying again for a while: until it
/// is recorded, readers see it running, then (its beats stopped) failed.
async fn record_end(store: &dyn Store, id: Uuid, outcome: Result<IngestReport, Problem>) {
    match &outcome {
        Ok(report) => tracing::info!(rows = report.rows_added, "registration done"),
        Err(problem) => {
            tracing::info!(status = problem.status, detail = %problem.detail, "registration failed")
        }
    }
    let mut error = None;
    for attempt in 0..5 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let recorded = match crate::clock::timestamp() {
            Ok(at) => {
                let ended = Ended {
                    at,
                    outcome: outcome.clone(),
                };
                store
                    .finish_registration(id, &ended)
                    .await
                    .map_err(anyhow::Error::from)
            }
            Err(clock) => Err(clock.into()),
        };
        match recorded {
            Ok(()) => return,
            Err(failed) => error = Some(failed),
        }
    }
    if let Some(error) = error {
        tracing::error!(
            error = format!("{error:#}"),
            "how a registration ended was not recorded"
        );
    }
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
    Ok(Json(record.view(crate::clock::now())))
}
