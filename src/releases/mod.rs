//! Releases: a request becomes a sensitivity, a calibrated mechanism and a
//! ledger charge; the charge is debited; only then is noise drawn.
//!
//! The order is the privacy argument:
//! 1. the exact answer is computed from a snapshot of the dataset (nothing
//!    leaves the server);
//! 2. the debit commits in one transaction that re-checks the budget under
//!    a lock (and that the snapshot is still current);
//! 3. the noise is drawn from the OS CSPRNG, once, outside any transaction
//!    that could be retried;
//! 4. the response is stored, then sent. A response lost after step 2 leaves
//!    the budget spent, and a retry with the same idempotency key is refused
//!    rather than answered with fresh noise.

pub mod aggregate;
pub mod model;
mod plan;
mod scan;
pub mod supplied;
pub mod walr;

use dpgate_api_types as api;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::budget::{self, AnalystRecord, Refusal};
use crate::dataset::{DatasetRecord, spent_view};
use crate::dp::{self, Charge, Delta, Epsilon, OsNoise};
use plan::{Knobs, Plan, Price};

use crate::store::{Debit, DebitOutcome, Decide, Store, StoreError, StoredRelease};

/// How often a release is recomputed when rows keep arriving under it.
const STALE_RETRIES: usize = 5;

/// Why a release was not made.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// Bad parameters for this kind or dataset (nothing spent).
    #[error("{0}")]
    Invalid(String),
    #[error("no such dataset")]
    NoDataset,
    /// The release does not fit (nothing spent).
    #[error("{detail}")]
    BudgetExhausted {
        detail: String,
        remaining: api::Remaining,
    },
    /// The idempotency key was used for another request, or its release is
    /// still being made (or was lost after its debit).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A fault after the debit: the budget stays spent.
    #[error("{0}")]
    Internal(String),
}

/// A successful answer.
#[derive(Debug)]
pub enum Outcome {
    /// A new release: the response body as stored.
    Created(String),
    /// The stored response of an earlier request with the same key.
    Replayed(String),
    /// A dry run's price, or a release of public numbers only: nothing
    /// spent, nothing stored.
    Priced(Box<api::Release>),
}

/// The response for a release; `result` is `None` on a dry run.
fn response(
    id: Uuid,
    request: &api::ReleaseRequest,
    price: &Price,
    after: &DatasetRecord,
    analyst: &str,
    created_at: String,
    result: Option<api::ReleaseResult>,
) -> api::Release {
    let spent = after.spent();
    let (epsilon, delta) = match price.loss {
        Some(_) => (request.epsilon(), request.delta()),
        None => (0.0, 0.0),
    };
    let mut noise = price.noise.clone();
    if noise.mechanism == "gaussian" {
        noise.sigma_classic = dp::classic_sigma(epsilon, delta, price.sensitivity).ok();
    }
    api::Release {
        id,
        kind: request.kind().to_owned(),
        epsilon: Epsilon::new(epsilon).map_or(epsilon, Epsilon::value),
        delta: Delta::new(delta).map_or(delta, Delta::value),
        sensitivity: price.sensitivity,
        sigma: price.sigma,
        n: price.n,
        noise,
        result,
        spent: spent_view(&spent),
        remaining: after.remaining(&spent),
        analyst: analyst.to_owned(),
        created_at,
        dry_run: false,
    }
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn replay(stored: StoredRelease, request_hash: &str) -> Result<Outcome, ReleaseError> {
    if stored.request_hash != request_hash {
        return Err(ReleaseError::Conflict(
            "this Idempotency-Key was already used for a different request".to_owned(),
        ));
    }
    stored.response.map(Outcome::Replayed).ok_or_else(|| {
        ReleaseError::Conflict(
            "the release with this Idempotency-Key is still being made, or its result was \
             lost after its debit (the budget stays spent); retry later"
                .to_owned(),
        )
    })
}

fn exhausted(dataset: &DatasetRecord, refusal: Refusal) -> ReleaseError {
    let spent = dataset.spent();
    let detail = match refusal {
        Refusal::Budget(after) => {
            let left = dataset.remaining(&spent);
            format!(
                "this release would bring the dataset's spending to ε = {}, δ = {} (budget ε = \
                 {}, δ = {}); it has ε = {}, δ = {} left",
                after.epsilon.value(),
                after.delta.value(),
                dataset.budget.epsilon.value(),
                dataset.budget.delta.value(),
                left.epsilon,
                left.delta,
            )
        }
        Refusal::Cap(cap, after) => format!(
            "this release would bring your own spending on this dataset to ε = {}, δ = {}, \
             beyond your cap of ε = {}, δ = {}",
            after.epsilon.value(),
            after.delta.value(),
            cap.epsilon.value(),
            cap.delta.value(),
        ),
    };
    ReleaseError::BudgetExhausted {
        detail,
        remaining: dataset.remaining(&spent),
    }
}

/// What a release asks for, beyond its body.
pub struct Ask<'a> {
    pub dataset: Uuid,
    pub analyst: &'a str,
    pub idempotency_key: Option<String>,
    pub dry_run: bool,
    /// Most groups an aggregate may cover.
    pub max_groups: usize,
}

/// Makes (or prices, or replays) one release.
pub async fn release(
    store: &dyn Store,
    ask: Ask<'_>,
    request: &api::ReleaseRequest,
) -> Result<Outcome, ReleaseError> {
    let invalid = |error: dp::DpError| ReleaseError::Invalid(error.to_string());
    let knobs = Knobs {
        epsilon: Epsilon::new(request.epsilon()).map_err(invalid)?,
        delta: Delta::new(request.delta()).map_err(invalid)?,
        max_groups: ask.max_groups,
        price_only: ask.dry_run,
    };
    // The request's canonical JSON identifies it for idempotent replays.
    let request_json = serde_json::to_string(request).unwrap_or_default();
    let request_hash = hex::encode(Sha256::digest(request_json.as_bytes()));
    if let (Some(key), false) = (&ask.idempotency_key, ask.dry_run)
        && let Some(stored) = store.release_by_key(ask.dataset, ask.analyst, key).await?
    {
        return replay(stored, &request_hash);
    }
    for _ in 0..STALE_RETRIES {
        let dataset = store
            .dataset(ask.dataset)
            .await?
            .ok_or(ReleaseError::NoDataset)?;
        let Some(plan) = plan::plan(store, &dataset, request, &knobs).await? else {
            continue;
        };
        let Some(loss) = plan.price.loss.clone() else {
            return public(plan, request, &dataset, &ask);
        };
        let charge = Charge {
            epsilon: knobs.epsilon,
            delta: knobs.delta,
            loss,
        };
        if ask.dry_run {
            let analyst = store
                .analysts(ask.dataset)
                .await?
                .into_iter()
                .find(|analyst| analyst.analyst == ask.analyst)
                .unwrap_or_else(|| AnalystRecord::new(ask.analyst));
            let (composition, _) = budget::admit(&dataset, &analyst, &charge)
                .map_err(|refusal| exhausted(&dataset, refusal))?;
            let after = DatasetRecord {
                composition,
                ..dataset
            };
            let mut priced = response(
                Uuid::nil(),
                request,
                &plan.price,
                &after,
                ask.analyst,
                now(),
                None,
            );
            priced.dry_run = true;
            return Ok(Outcome::Priced(Box::new(priced)));
        }
        let debit = Debit {
            dataset: ask.dataset,
            expected_rows: dataset.n_rows,
            release_id: Uuid::new_v4(),
            analyst: ask.analyst.to_owned(),
            kind: request.kind().to_owned(),
            idempotency_key: ask.idempotency_key.clone(),
            request_hash: request_hash.clone(),
            request: request_json.clone(),
            charge: charge.clone(),
            created_at: now(),
        };
        let decide: Decide =
            Box::new(move |locked, analyst| budget::admit(locked, analyst, &charge).ok());
        match store.debit(&debit, decide).await? {
            DebitOutcome::Debited(after) => {
                return finish(store, debit, request, plan, &after).await;
            }
            DebitOutcome::Refused(refused) => {
                let (locked, analyst) = *refused;
                let refusal = budget::admit(&locked, &analyst, &debit.charge)
                    .err()
                    .unwrap_or(Refusal::Budget(locked.spent()));
                return Err(exhausted(&locked, refusal));
            }
            DebitOutcome::Replay(stored) => return replay(stored, &request_hash),
            DebitOutcome::Stale => continue,
            DebitOutcome::NoDataset => return Err(ReleaseError::NoDataset),
        }
    }
    Err(ReleaseError::Conflict(
        "rows kept arriving while the release was computed; retry".to_owned(),
    ))
}

/// A release of numbers that are all public under the privacy unit: they
/// cost nothing, so they are answered exactly without a debit or a record.
fn public(
    plan: Plan,
    request: &api::ReleaseRequest,
    dataset: &DatasetRecord,
    ask: &Ask<'_>,
) -> Result<Outcome, ReleaseError> {
    let Plan { price, draw } = plan;
    let result = if ask.dry_run {
        None
    } else {
        Some(draw(&mut OsNoise::new()).map_err(ReleaseError::Internal)?)
    };
    let mut body = response(
        Uuid::nil(),
        request,
        &price,
        dataset,
        ask.analyst,
        now(),
        result,
    );
    body.dry_run = ask.dry_run;
    Ok(Outcome::Priced(Box::new(body)))
}

/// After the debit: draws the noise, stores the response, returns it.
async fn finish(
    store: &dyn Store,
    debit: Debit,
    request: &api::ReleaseRequest,
    plan: Plan,
    after: &DatasetRecord,
) -> Result<Outcome, ReleaseError> {
    let Plan { price, draw } = plan;
    let span = tracing::Span::current();
    let result = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        draw(&mut OsNoise::new())
    })
    .await
    .map_err(|error| ReleaseError::Internal(format!("the noise task failed: {error}")))?
    .map_err(|error| ReleaseError::Internal(format!("the release failed: {error}")))?;
    let body = response(
        debit.release_id,
        request,
        &price,
        after,
        &debit.analyst,
        debit.created_at.clone(),
        Some(result),
    );
    let text = serde_json::to_string(&body)
        .map_err(|error| ReleaseError::Internal(format!("cannot encode the release: {error}")))?;
    store.complete_release(debit.release_id, &text).await?;
    tracing::info!(
        dataset = %debit.dataset,
        release = %debit.release_id,
        epsilon = debit.charge.epsilon.value(),
        delta = debit.charge.delta.value(),
        "release made"
    );
    metrics::counter!("dpgate_releases_total", "kind" => request.kind()).increment(1);
    Ok(Outcome::Created(text))
}
