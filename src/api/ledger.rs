//! The hash-chained ledger, for admins: `GET /v1/datasets/{id}/ledger` (a
//! page, or the whole ledger streamed as an audit export) and `POST
//! /v1/datasets/{id}/ledger/verify`.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{LedgerBreak, LedgerPage, LedgerVerification, Problem};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::datasets::load_visible;
use super::error::ApiError;
use super::extract::{ApiQuery, Caller, PageQuery};
use crate::api::AppState;
use crate::domain::ledger::export::Format;
use crate::ledger;

/// A page of the ledger, or the whole of it in an export format.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LedgerQuery {
    /// Entries after this sequence number (the previous page's
    /// `next_after`).
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_u64)]
    after: Option<u64>,
    /// Entries per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `json` (a page, the default), or the whole ledger streamed for an
    /// audit: `ndjson` (one entry a line, with the exact values its hash
    /// covers; `dpgate ledger verify --file` checks it) or `csv`. The
    /// exports take no `after` or `limit`.
    #[param(inline)]
    format: Option<LedgerFormat>,
}

/// How `GET …/ledger` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LedgerFormat {
    Json,
    Ndjson,
    Csv,
}

/// A page of the dataset's ledger, oldest first, each entry with what the
/// ledger had spent and allowed after it; or the whole ledger as an audit
/// export. Nothing is ever deleted from it.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/ledger",
    operation_id = "getLedger",
    tag = "ledger",
    params(("id" = Uuid, Path, description = "Dataset id"), LedgerQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of entries; with `format`, the whole ledger", content(
            (LedgerPage = "application/json"),
            (String = "application/x-ndjson"),
            (String = "text/csv"),
        )),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad page parameter or format", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn page(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<LedgerQuery>,
) -> Result<Response, ApiError> {
    caller.admin()?;
    let dataset = load_visible(&state, &caller, &id).await?;
    let format = match query.format {
        None | Some(LedgerFormat::Json) => None,
        Some(LedgerFormat::Ndjson) => Some(Format::Ndjson),
        Some(LedgerFormat::Csv) => Some(Format::Csv),
    };
    let page = PageQuery {
        after: query.after,
        limit: query.limit,
    };
    if let Some(format) = format {
        if page.after.is_some() || page.limit.is_some() {
            return Err(ApiError::Invalid(
                "an export is the whole ledger: it takes no after or limit".to_owned(),
            ));
        }
        let chunks = ledger::export(state.store.clone(), dataset.id, format);
        return Ok((
            [(header::CONTENT_TYPE, format.content_type())],
            Body::from_stream(chunks),
        )
            .into_response());
    }
    let limit = page.limit()?;
    let entries = ledger::page(state.store.as_ref(), dataset.id, page.after()?, limit).await?;
    Ok(Json(LedgerPage {
        next_after: PageQuery::next_after(limit, &entries, |entry| entry.seq),
        entries,
    })
    .into_response())
}

/// Walks the whole chain: every link and hash recomputed, and the dataset's
/// running composition (which prices every release) compared with what its
/// entries add up to.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/ledger/verify",
    operation_id = "verifyLedger",
    tag = "ledger",
    params(("id" = Uuid, Path, description = "Dataset id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The verdict (a broken chain is a 200 with `intact: false`)", body = LedgerVerification),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn verify(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<LedgerVerification>, ApiError> {
    caller.admin()?;
    let dataset = load_visible(&state, &caller, &id).await?;
    let verdict = ledger::verify(state.store.as_ref(), &dataset).await?;
    if let Some(broken) = &verdict.broken {
        tracing::error!(dataset = %dataset.id, seq = broken.seq, reason = %broken.reason, "the ledger does not verify");
    }
    Ok(Json(LedgerVerification {
        intact: verdict.broken.is_none(),
        entries: verdict.entries,
        broken: verdict.broken.map(|broken| LedgerBreak {
            seq: broken.seq,
            reason: broken.reason,
        }),
    }))
}
