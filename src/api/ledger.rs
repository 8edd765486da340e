//! `GET /v1/datasets/{id}/ledger`: the hash-chained ledger, for admins.

use axum::Json;
use axum::extract::{Path, State};
use dpgate_api_types::{LedgerPage, Problem};
use serde::Deserialize;
use utoipa::IntoParams;

use super::datasets::load_visible;
use super::extract::{ApiQuery, Caller};
use crate::app::AppState;
use crate::error::ApiError;

/// Largest page.
const MAX_PAGE: u32 = 1000;
const DEFAULT_PAGE: u32 = 100;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LedgerQuery {
    /// Return entries with a larger sequence number (the previous page's
    /// `next_after`).
    after: Option<u64>,
    /// Entries per page, 1 to 1000 (default 100).
    limit: Option<u32>,
}

/// A page of the dataset's ledger, oldest first. Nothing is ever deleted
/// from it.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/ledger",
    tag = "ledger",
    params(("id" = Uuid, Path, description = "Dataset id"), LedgerQuery),
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
    ApiQuery(query): ApiQuery<LedgerQuery>,
) -> Result<Json<LedgerPage>, ApiError> {
    caller.admin()?;
    let dataset = load_visible(&state, &caller, &id).await?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::Invalid(format!("limit must be 1 to {MAX_PAGE}")));
    }
    let entries = state.store.ledger(dataset.id, query.after, limit).await?;
    let next_after = (entries.len() == limit as usize)
        .then(|| entries.last().map(|entry| entry.seq))
        .flatten();
    Ok(Json(LedgerPage {
        entries: entries.iter().map(|entry| entry.view()).collect(),
        next_after,
    }))
}
