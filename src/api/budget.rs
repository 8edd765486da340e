//! `PATCH /v1/datasets/{id}/budget`: admins move a dataset's total and cap
//! analysts; every change is a ledger event.

use axum::Json;
use axum::extract::{Path, State};
use dpgate_api_types::{BudgetChange, Dataset, Problem};

use super::body::ApiJson;
use super::datasets::load_visible;
use super::error::ApiError;
use super::extract::Admin;
use crate::api::AppState;
use crate::domain::budget::Change;
use crate::store::BudgetOutcome;

/// Sets the dataset's total budget (never below what is spent) and caps on
/// what single analysts may spend (`null` removes a cap). A cap may be set
/// below what the analyst has spent: it then refuses all its further
/// releases. The change is checked and written under the same lock as
/// debits, and recorded in the ledger with who and when.
#[utoipa::path(
    patch,
    path = "/v1/datasets/{id}/budget",
    operation_id = "changeBudget",
    tag = "datasets",
    params(("id" = Uuid, Path, description = "Dataset id")),
    request_body = BudgetChange,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The dataset with its new budget and caps (unchanged, and no ledger event, for an empty change)", body = Dataset),
        (status = 400, description = "The body is not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The new total is below what is spent", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over the JSON body limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not application/json in UTF-8, or a Content-Encoding", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "An invalid budget or cap", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn change(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<BudgetChange>,
) -> Result<Json<Dataset>, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let change = Change::parse(&request, &caller.sub, crate::domain::clock::timestamp()?)
        .map_err(ApiError::Invalid)?;
    match state.store.change_budget(dataset.id, &change).await? {
        BudgetOutcome::Changed(record, analysts) => {
            tracing::info!(dataset = %record.id, caps = change.caps.len(), "budget changed");
            crate::domain::dataset::record_budget_gauges(&record);
            Ok(Json(
                record.view(&analysts, crate::domain::auth::Role::Admin),
            ))
        }
        BudgetOutcome::Refused(reason) => Err(ApiError::Conflict(reason)),
        BudgetOutcome::NoDataset => Err(ApiError::NotFound("no such dataset".to_owned())),
    }
}
