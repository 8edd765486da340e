//! `/v1/datasets/{id}/releases`: make, price, replay and fetch releases.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{
    GradientCall, GradientCallResult, IDEMPOTENCY_KEY, Problem, Release, ReleaseList,
    ReleaseRequest,
};
use serde::Deserialize;
use utoipa::IntoParams;

use super::body::ApiJson;
use super::datasets::load_visible;
use super::error::ApiError;
use super::extract::{ApiQuery, Caller, GrantedAnalyst, PageQuery, parse_id};
use crate::api::AppState;
use crate::domain::auth::Role;
use crate::releases::calls::{self, CallAsk};
use crate::releases::{self, Ask, Outcome};

/// Longest accepted idempotency key.
const MAX_KEY_LEN: usize = 255;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReleaseQuery {
    /// Price the release (sensitivity, σ, what it would spend) without
    /// spending anything or drawing noise.
    #[serde(default)]
    dry_run: bool,
}

fn json(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .filter(|key| {
            (1..=MAX_KEY_LEN).contains(&key.len())
                && key.bytes().all(|byte| byte.is_ascii_graphic())
        })
        .ok_or_else(|| {
            ApiError::Invalid(format!(
                "Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters"
            ))
        })?;
    Ok(Some(key.to_owned()))
}

/// Makes a release: checks and debits the budget in one transaction, then
/// draws the noise. With the same `Idempotency-Key` and body, a retry gets
/// the stored release (200) and spends nothing; with another body, 409.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/releases",
    operation_id = "createRelease",
    tag = "releases",
    params(
        ("id" = Uuid, Path, description = "Dataset id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe: the same key and body return the stored release", min_length = 1, max_length = 255, pattern = "^[!-~]+$"),
        ReleaseQuery,
    ),
    request_body = ReleaseRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "A new release", body = Release),
        (status = 200, description = "An idempotent replay; a dry run's price (no `result`); or a release of numbers that are all public under the privacy unit (nothing spent or stored; its id is nil)", body = Release),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an analyst granted this dataset (and every source a release reads)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Budget exhausted (`budget-exhausted`); or (`conflict`) the idempotency key was used for another request, its release is still being made after a minute, or rows kept arriving while the release was priced", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over the release body limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not application/json in UTF-8, or a Content-Encoding", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid parameters, or ones that public facts show cannot be released (a λ below the fit's floor, bounds too wide for the noise); nothing spent", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "`release-failed`: debited but not made (its ledger entry stays; a retry with the key gets this answer), or `internal`", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`timeout`: a debited release is still made; retry with the same Idempotency-Key", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    GrantedAnalyst { caller, dataset }: GrantedAnalyst,
    ApiQuery(query): ApiQuery<ReleaseQuery>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ReleaseRequest>,
) -> Result<Response, ApiError> {
    for source in request.params.sources() {
        caller.analyst_of(*source).map_err(|_| {
            ApiError::Forbidden(format!("your token does not grant source dataset {source}"))
        })?;
    }
    let ask = Ask {
        dataset,
        analyst: &caller.sub,
        idempotency_key: idempotency_key(&headers)?,
        dry_run: query.dry_run,
        max_groups: state.limits.max_groups,
    };
    let kind = request.params.kind();
    let outcome = releases::release(state.snapshots.clone(), &state.tasks, ask, request)
        .await
        .map_err(ApiError::from);
    metrics::counter!(
        "dpgate_release_requests_total",
        "kind" => kind,
        "outcome" => outcome_label(&outcome),
    )
    .increment(1);
    Ok(match outcome? {
        Outcome::Created(body) => json(StatusCode::CREATED, body),
        Outcome::Replayed(body) => json(StatusCode::OK, body),
        Outcome::Priced(release) => (StatusCode::OK, axum::Json(*release)).into_response(),
    })
}

/// How a release request ended, for `dpgate_release_requests_total`.
fn outcome_label(outcome: &Result<Outcome, ApiError>) -> &'static str {
    match outcome {
        Ok(Outcome::Created(_)) => "granted",
        Ok(Outcome::Replayed(_)) => "replayed",
        Ok(Outcome::Priced(_)) => "priced",
        Err(ApiError::BudgetExhausted { .. }) => "refused",
        Err(ApiError::ReleaseFailed { .. } | ApiError::Internal(_)) => "failed",
        Err(_) => "invalid",
    }
}

/// A stored release: admins see every release, analysts their own.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/releases/{release_id}",
    operation_id = "getRelease",
    tag = "releases",
    params(
        ("id" = Uuid, Path, description = "Dataset id"),
        ("release_id" = Uuid, Path, description = "Release id"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The release", body = Release),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "An analyst without a grant for the dataset", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such release (for this caller), or one still being made", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "`release-failed`: the release was debited but not made", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, release)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let release = parse_id("release", &release)?;
    let stored = state
        .store
        .release(dataset.id, release)
        .await?
        .filter(|stored| caller.role == Role::Admin || stored.analyst == caller.sub)
        .ok_or_else(|| ApiError::NotFound("no such release".to_owned()))?;
    if let Some(detail) = stored.failure {
        return Err(ApiError::ReleaseFailed {
            release: stored.id,
            detail,
        });
    }
    let body = stored.response.ok_or_else(|| {
        ApiError::NotFound(
            "this release was debited and is still being made, or its server stopped before \
             storing it (the budget stays spent)"
                .to_owned(),
        )
    })?;
    Ok(json(StatusCode::OK, body))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Admins only: just this analyst's releases.
    analyst: Option<String>,
}

/// The dataset's releases, oldest first: every release for admins, the
/// caller's own for an analyst.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/releases",
    operation_id = "listReleases",
    tag = "releases",
    params(("id" = Uuid, Path, description = "Dataset id"), PageQuery, ListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of releases", body = ReleaseList),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "An analyst without a grant for the dataset", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad page parameter", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(page): ApiQuery<PageQuery>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<axum::Json<ReleaseList>, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let limit = page.limit()?;
    let analyst = match caller.role {
        Role::Admin => query.analyst.as_deref(),
        Role::Analyst => Some(caller.sub.as_str()),
    };
    let releases = state
        .store
        .releases(dataset.id, analyst, page.after()?, limit)
        .await?;
    Ok(axum::Json(ReleaseList {
        next_after: PageQuery::next_after(limit, &releases, |release| release.seq),
        releases,
    }))
}

/// Makes call `call` of a pre-paid gradient session (a `gradient` release
/// with `calls`): the gradient at `theta`, freshly noised. Nothing is
/// debited; each call index is spent once. A retry of a call with the
/// same `theta` gets the stored answer, byte for byte; with another, 409.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/releases/{release_id}/calls",
    operation_id = "callGradientSession",
    tag = "releases",
    params(
        ("id" = Uuid, Path, description = "Dataset id"),
        ("release_id" = Uuid, Path, description = "The session's release id"),
    ),
    request_body = GradientCall,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The call's gradient (made now, or the stored answer to a retry)", body = GradientCallResult),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an analyst granted this dataset", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset, or no release of the caller's with this id", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`conflict`: this call was made at another theta, or is still being made", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over the body limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not application/json in UTF-8, or a Content-Encoding", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The release is not a gradient session, a call index beyond the session, or a bad theta (nothing spent)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "`release-failed`: the call was claimed but not made (it stays spent; a retry gets this answer), or `internal`", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn call(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, release)): Path<(String, String)>,
    ApiJson(call): ApiJson<GradientCall>,
) -> Result<Response, ApiError> {
    // As for a release: the grant first, so that a non-UUID id tells an
    // analyst without one nothing more.
    let dataset = uuid::Uuid::parse_str(&id).ok();
    caller.analyst_of(dataset.unwrap_or_else(uuid::Uuid::nil))?;
    let ask = CallAsk {
        dataset: dataset.ok_or_else(|| ApiError::NotFound("no such dataset".to_owned()))?,
        release: parse_id("gradient session", &release)?,
        analyst: &caller.sub,
        call,
    };
    let body = calls::call(state.snapshots.clone(), &state.tasks, ask).await?;
    Ok(json(StatusCode::OK, body))
}
