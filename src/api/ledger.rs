//! `GET /v1/datasets/{id}/ledger`: the hash-chained ledger, for admins.

use axum::Json;
use axum::extract::{Path, State};
use dpgate_api_types::{LedgerPage, Problem};

use super::datasets::load_visible;
use super::extract::{ApiQuery, Caller, PageQuery};
use crate::app::AppState;
use crate::error::ApiError;

/// A page of the dataset's ledger, oldest first. Nothing is ever deleted
/// from it.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/ledger",
    operation_id = "getLedger",
    tag = "ledger",
    params(("id" = Uuid, Path, description = "Dataset id"), PageQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of entries", body = LedgerPage),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad page parameter", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn page(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<LedgerPage>, ApiError> {
    caller.admin()?;
    let dataset = load_visible(&state, &caller, &id).await?;
    let limit = query.limit()?;
    let entries = state
        .store
        .ledger(dataset.id, query.after()?, limit)
        .await?;
    Ok(Json(LedgerPage {
        next_after: PageQuery::next_after(limit, &entries, |entry| entry.seq),
        entries: entries.iter().map(|entry| entry.view()).collect(),
    }))
}
