//! The hash-chained ledger, for admins: `GET /v1/datasets/{id}/ledger` (a
//! page, or the whole ledger streamed as an audit export) and `POST
//! /v1/datasets/{id}/ledger/verify`.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use dpgate_api_types::{LedgerBreak, LedgerPage, LedgerVerification, Problem};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::datasets::load_visible;
use super::error::ApiError;
use super::extract::{ApiQuery, Caller, PageQuery};
use crate::api::AppState;
use crate::domain::ledger::Follow;
use crate::domain::ledger::export::{self, Format};
use crate::ledger;
use crate::store::Store;

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
        return Ok(exported(state.store.clone(), dataset.id, format));
    }
    let limit = page.limit()?;
    let after = page.after()?;
    let entries = state.store.ledger(dataset.id, after, limit).await?;
    let mut follow = match after {
        Some(after) => ledger::follow(state.store.as_ref(), dataset.id, Some(after)).await?,
        None => Follow::default(),
    };
    let views = entries
        .iter()
        .map(|entry| entry.view(dataset.id, follow.take(entry)))
        .collect();
    Ok(Json(LedgerPage {
        next_after: PageQuery::next_after(limit, &entries, |entry| entry.seq),
        entries: views,
    })
    .into_response())
}

/// The whole ledger in `format`, read and sent a page at a time.
fn exported(store: std::sync::Arc<dyn Store>, dataset: Uuid, format: Format) -> Response {
    struct Reading {
        store: std::sync::Arc<dyn Store>,
        after: Option<u64>,
        follow: Follow,
        started: bool,
        done: bool,
    }
    let reading = Reading {
        store,
        after: None,
        follow: Follow::default(),
        started: false,
        done: false,
    };
    let chunks = futures_util::stream::unfold(reading, move |mut reading| async move {
        if reading.done {
            return None;
        }
        let page = match reading
            .store
            .ledger(dataset, reading.after, ledger::PAGE)
            .await
        {
            Ok(page) => page,
            Err(error) => {
                tracing::error!(%error, %dataset, "the ledger export failed part way");
                return Some((Err(std::io::Error::other(error.to_string())), reading));
            }
        };
        reading.done = page.len() < ledger::PAGE as usize;
        reading.after = page.last().map(|entry| entry.seq);
        let mut text = String::new();
        if !reading.started {
            text.push_str(format.header());
            reading.started = true;
        }
        for entry in &page {
            let tally = reading.follow.take(entry);
            match export::line(format, entry, dataset, tally) {
                Ok(line) => text.push_str(&line),
                Err(error) => {
                    reading.done = true;
                    return Some((Err(std::io::Error::other(error.to_string())), reading));
                }
            }
        }
        Some((Ok(Bytes::from(text)), reading))
    });
    (
        [(header::CONTENT_TYPE, format.content_type())],
        Body::from_stream(chunks),
    )
        .into_response()
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
