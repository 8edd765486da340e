//! `/v1/datasets`: create, list, and view datasets.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{CreateDataset, Dataset, DatasetList, IngestReport, Problem, Registration};
use tracing::Instrument;
use uuid::Uuid;

use super::body::ApiJson;
use super::error::ApiError;
use super::extract::{Admin, Caller};
use super::registrations;
use crate::api::AppState;
use crate::domain::auth::Role;
use crate::domain::dataset::DatasetRecord;
use crate::engine::Located;
use crate::uploads;

/// Creates a dataset with its schema, privacy unit, budget and accountant,
/// and with a `source`, registers Parquet files in place as its first
/// version: at once, or with `Prefer: respond-async` in the background
/// (`202 Accepted`; the dataset exists once the registration is done).
#[utoipa::path(
    post,
    path = "/v1/datasets",
    operation_id = "createDataset",
    tag = "datasets",
    request_body = CreateDataset,
    params(("Prefer" = Option<String>, Header, description = "`respond-async` (RFC 7240): with a `source`, register it in the background and answer `202 Accepted` at once (a registration of 10⁸ rows takes minutes, more than a request may); without one, the preference is ignored")),
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Created", body = Dataset),
        (status = 202, description = "Registering in the background (`Prefer: respond-async`): the registration, at its `Location`", body = Registration, headers(("Location" = String, description = "`/v1/registrations/{id}`"), ("Preference-Applied" = String, description = "`respond-async`"))),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin, or a `source` outside the operator's `DPGATE_DATA_ROOTS`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The name is taken", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over the JSON body limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not application/json in UTF-8, or a Content-Encoding", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An invalid schema or budget; a `source` that is not a readable Parquet file or directory, or has bad rows (listed by `file` and `line`, its row number); nothing created", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Admin(caller): Admin,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CreateDataset>,
) -> Result<Response, ApiError> {
    let record = DatasetRecord::new(&request, crate::domain::clock::timestamp()?)
        .map_err(ApiError::Invalid)?;
    let Some(source) = &request.source else {
        uploads::create(state.store.as_ref(), &record, caller.sub).await?;
        return Ok((StatusCode::CREATED, Json(record.view(&[], Role::Admin))).into_response());
    };
    let located = uploads::locate(&state.snapshots, source).await?;
    // Found now rather than after reading every row.
    if state
        .store
        .datasets()
        .await?
        .iter()
        .any(|dataset| dataset.name == record.name)
    {
        return Err(ApiError::Conflict(format!(
            "a dataset named {:?} exists",
            record.name
        )));
    }
    if registrations::respond_async(&headers) {
        let (id, sub) = (record.id, caller.sub.clone());
        let work = register(state.clone(), record, caller.sub, located);
        let work = async move {
            let registered = work.await?;
            Ok(IngestReport {
                rows_added: registered.n_rows,
                n_rows: registered.n_rows,
            })
        };
        return registrations::start(&state, id, &sub, work).await;
    }
    let registered = register(state, record, caller.sub, located).await?;
    Ok((StatusCode::CREATED, Json(registered.view(&[], Role::Admin))).into_response())
}

/// Creates `record` with the files of `located` as its first version
/// ([`uploads::register`]), in its `ingest` span.
async fn register(
    state: AppState,
    record: DatasetRecord,
    actor: String,
    located: Vec<Located>,
) -> Result<DatasetRecord, ApiError> {
    let span = tracing::info_span!("ingest", dataset = %record.id);
    Ok(uploads::register(
        state.store.as_ref(),
        &state.snapshots,
        record,
        actor,
        located,
    )
    .instrument(span)
    .await?)
}

/// Lists the datasets the caller may see: all for admins, the granted ones
/// for analysts (without per-analyst spending: see the single view).
#[utoipa::path(
    get,
    path = "/v1/datasets",
    operation_id = "listDatasets",
    tag = "datasets",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The datasets", body = DatasetList),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<DatasetList>, ApiError> {
    let datasets = state
        .store
        .datasets()
        .await?
        .iter()
        .filter(|record| caller.role == Role::Admin || caller.datasets.contains(&record.id))
        .map(|record| record.view(&[], caller.role))
        .collect();
    Ok(Json(DatasetList { datasets }))
}

/// One dataset: metadata, schema, N, the budget spent and remaining under
/// both accountants, and per-analyst spending and caps (every analyst for
/// admins, the caller's own for an analyst).
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}",
    operation_id = "getDataset",
    tag = "datasets",
    params(("id" = Uuid, Path, description = "Dataset id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The dataset", body = Dataset),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "An analyst without a grant for it", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Dataset>, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let analysts = state.store.analysts(dataset.id).await?;
    let visible: Vec<_> = analysts
        .into_iter()
        .filter(|analyst| caller.role == Role::Admin || analyst.analyst == caller.sub)
        .collect();
    Ok(Json(dataset.view(&visible, caller.role)))
}

/// The dataset at `id` if the caller may see it: the grant is checked
/// before existence, so an analyst learns nothing about datasets it was not
/// granted (403, never 404).
pub async fn load_visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<DatasetRecord, ApiError> {
    let not_found = || ApiError::NotFound("no such dataset".to_owned());
    match Uuid::parse_str(id) {
        Ok(id) => {
            caller.may_see(id)?;
            state.store.dataset(id).await?.ok_or_else(not_found)
        }
        Err(_) => {
            caller.may_see(Uuid::nil())?;
            Err(not_found())
        }
    }
}
