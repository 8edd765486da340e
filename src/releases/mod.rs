//! Releases: a request becomes a sensitivity, a calibrated mechanism and a
//! ledger charge; the charge is debited; only then is anything private read.
//!
//! The order is the privacy argument:
//! 1. **price** from public facts alone (the schema, N, the request, and
//!    under unit `label` the features): the mechanism and what the ledger
//!    will record ([`kinds`]);
//! 2. **pre-admit** the charge against the current composition and the
//!    analyst's cap: a release that does not fit is refused here, having
//!    read no label, measure or private row;
//! 3. **vet** the request against what the unit leaves public in the rows
//!    (supplied row ids exist), and the snapshot's files against the
//!    manifest from their metadata alone (a file changed since it was
//!    recorded is refused here, nothing spent); a dry run answers here;
//! 4. **debit** in one transaction that re-checks the budget under a lock
//!    and that the priced snapshot is still current;
//! 5. **compute** on that snapshot (rows read, models fitted: work whose
//!    time and success may depend on private data) and draw the noise from
//!    the OS CSPRNG, once, outside any transaction that could be retried;
//! 6. **store** the response, then send it.
//!
//! Steps 5 and 6 run on a task of their own ([`complete`]), so a client
//! that disconnects, or a request timeout, cannot lose a paid release: the
//! retry with the same idempotency key gets it. If they fail, the release
//! record says so and the ledger entry stays (the safe side), and a retry
//! gets the same failure, never fresh noise.

pub mod calls;
mod complete;
pub mod kinds;
pub mod pacing;
mod plan;

use std::sync::Arc;

use dpgate_api_types as api;
use sha2::{Digest, Sha256};
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::domain::budget::{self, Refusal};
use crate::domain::dataset::{DatasetRecord, spent_view};
use crate::domain::debit::{Debit, DebitOutcome, Decide, SourceDebit};
use crate::dp::{self, Charge, Delta, Epsilon};
use crate::snapshots::Snapshots;
use crate::store::StoreError;
use kinds::Kind;
pub use plan::{Knobs, Planned, Price, Snapshot};

/// How often a release is priced again when rows arrive between its
/// pricing and its debit (pricing reads no rows, so a retry is cheap).
const STALE_RETRIES: usize = 8;

/// Why a release was not made.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// Bad parameters for this kind or dataset (nothing spent).
    #[error("{0}")]
    Invalid(String),
    #[error("no such dataset")]
    NoDataset,
    /// No such thing for this caller (a gradient session, say).
    #[error("{0}")]
    NotFound(String),
    /// The release does not fit (nothing spent).
    #[error("{detail}")]
    BudgetExhausted {
        detail: String,
        remaining: api::Remaining,
    },
    /// The idempotency key was used for another request, or its release is
    /// still being made.
    #[error("{0}")]
    Conflict(String),
    /// The release was debited but could not be made: its ledger entry
    /// stays, its record says it failed.
    #[error("{detail}")]
    Failed { release: Uuid, detail: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A fault before the debit (nothing spent).
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// Why a debited release could not be made (the cause goes to the log).
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the stored rows do not match their snapshot: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Fit(#[from] kinds::model::ModelError),
    #[error(transparent)]
    Noise(#[from] dp::DpError),
    #[error("a released value is not finite")]
    NonFinite,
    #[error("the snapshot could not be held in memory")]
    Unheld,
    #[error("a computation task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("cannot encode the release: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Clock(#[from] crate::domain::clock::ClockError),
}

impl Failure {
    /// The `cause` label of `dpgate_release_failures_total`. Those whose
    /// occurrence can depend on the private data (`not_converged`,
    /// `noise`, `non_finite`) are un-noised bits an operator must see;
    /// docs/models.md bounds how often the first can happen.
    pub fn cause(&self) -> &'static str {
        match self {
            Failure::Store(_) => "store",
            Failure::Corrupt(_) => "corrupt",
            Failure::Fit(kinds::model::ModelError::Fit(dpgate_learn::FitError::NotConverged {
                ..
            })) => "not_converged",
            Failure::Fit(kinds::model::ModelError::Fit(_)) => "fit_input",
            Failure::Fit(kinds::model::ModelError::Dp(_)) | Failure::Noise(_) => "noise",
            Failure::NonFinite => "non_finite",
            Failure::Unheld => "unheld",
            Failure::Task(_) => "task",
            Failure::Encode(_) => "encode",
            Failure::Clock(_) => "clock",
        }
    }
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

/// What a release asks for, beyond its body.
pub struct Ask<'a> {
    pub dataset: Uuid,
    pub analyst: &'a str,
    pub idempotency_key: Option<String>,
    pub dry_run: bool,
    /// Most groups an aggregate may cover.
    pub max_groups: usize,
}

/// What every response of one request repeats.
#[derive(Debug, Clone)]
struct Summary {
    kind: &'static str,
    /// As requested (the ledger records them in its units).
    epsilon: f64,
    delta: f64,
    analyst: String,
}

/// The response for a release; `id` is `None` when nothing is recorded,
/// `result` on a dry run.
fn response(
    id: Option<Uuid>,
    summary: &Summary,
    price: &Price,
    after: &DatasetRecord,
    created_at: String,
    result: Option<api::ReleaseResult>,
) -> api::Release {
    let spent = after.spent();
    let (epsilon, delta) = match price.loss {
        Some(_) => (summary.epsilon, summary.delta),
        None => (0.0, 0.0),
    };
    let mut noise = price.noise.clone();
    if noise.mechanism == "gaussian" {
        // T steps at √T times one release's σ compose to that release.
        let steps = match &price.loss {
            Some(dp::PrivacyLoss::Composition { count, .. }) => f64::from(*count),
            _ => 1.0,
        };
        noise.sigma_classic = dp::classic_sigma(epsilon, delta, price.sensitivity)
            .ok()
            .map(|sigma| steps.sqrt() * sigma);
    }
    api::Release {
        id,
        kind: summary.kind.to_owned(),
        epsilon: Epsilon::new(epsilon).map_or(epsilon, Epsilon::value),
        delta: Delta::new(delta).map_or(delta, Delta::value),
        sensitivity: price.sensitivity,
        sigma: price.sigma,
        n: price.n,
        noise,
        result,
        spent: spent_view(&spent),
        remaining: after.remaining(&spent),
        analyst: summary.analyst.clone(),
        created_at,
        dry_run: false,
    }
}

/// The refusal of a release that `dataset` (its own, or with `source`
/// set, one of its sources) cannot pay for.
fn exhausted(dataset: &DatasetRecord, refusal: Refusal, source: bool) -> ReleaseError {
    let spent = dataset.spent();
    let which = if source {
        format!(
            "source dataset {:?} ({}) cannot pay its share, so nothing was spent anywhere: ",
            dataset.name, dataset.id
        )
    } else {
        String::new()
    };
    let detail = which
        + &match refusal {
            Refusal::Budget(after) => {
                let left = dataset.remaining(&spent);
                format!(
                    "this release would bring the dataset's spending to ε = {}, δ = {} (budget \
                     ε = {}, δ = {}); it has ε = {}, δ = {} left",
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

/// Feeds serialised JSON straight into a hash, so that a large request is
/// never held as text.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The request's identity for idempotent replays (SHA-256 of its canonical
/// JSON, supplied vectors included) and the JSON kept with it for audit
/// (supplied vectors replaced by their number).
fn fingerprint(request: &api::ReleaseRequest) -> Result<(String, String), serde_json::Error> {
    let mut hasher = HashWriter(Sha256::new());
    serde_json::to_writer(&mut hasher, request)?;
    let hash = hex::encode(hasher.0.finalize());
    let audit = match &request.params {
        api::ReleaseParams::Walr(
            walr @ api::WalrParams {
                features: Some(rows),
                ..
            },
        ) => {
            let mut audit = serde_json::to_value(api::ReleaseRequest {
                params: api::ReleaseParams::Walr(api::WalrParams {
                    features: None,
                    ..walr.clone()
                }),
                ..*request
            })?;
            audit["supplied_rows"] = rows.len().into();
            audit.to_string()
        }
        _ => serde_json::to_string(request)?,
    };
    Ok((hash, audit))
}

/// Makes (or prices, or replays) one release.
///
/// A retry whose key names a stored release gets that release: the debit
/// finds the key under the dataset's lock, and a retry that could not be
/// made now (its budget spent, say) looks for it then. The common case, a
/// new key, costs no lookup of its own.
pub async fn release(
    data: Arc<Snapshots>,
    tasks: &TaskTracker,
    ask: Ask<'_>,
    request: api::ReleaseRequest,
) -> Result<Outcome, ReleaseError> {
    let store = data.store().clone();
    let invalid = |error: dp::DpError| ReleaseError::Invalid(error.to_string());
    let epsilon = match (request.epsilon, request.params.target()) {
        (Some(epsilon), None) => Epsilon::new(epsilon).map_err(invalid)?,
        // The kind chooses ε from the target; zero fails any mechanism
        // that would use it instead.
        (None, Some(_)) => Epsilon::ZERO,
        (Some(_), Some(_)) => {
            return Err(ReleaseError::Invalid(format!(
                "give either epsilon or {}, not both",
                request.params.target_name()
            )));
        }
        (None, None) => {
            return Err(ReleaseError::Invalid(
                "epsilon is required (a walr release may name target_sigma and an aggregate \
                 target_std instead)"
                    .to_owned(),
            ));
        }
    };
    let knobs = Knobs {
        epsilon,
        delta: Delta::new(request.delta()).map_err(invalid)?,
        max_groups: ask.max_groups,
    };
    let (request_hash, audit) = fingerprint(&request).map_err(anyhow::Error::from)?;
    let made = make(data, tasks, &ask, request, &knobs, &request_hash, &audit).await;
    if made.is_err()
        && let (Some(key), false) = (&ask.idempotency_key, ask.dry_run)
        && let Some(stored) = store.release_by_key(ask.dataset, ask.analyst, key).await?
    {
        return complete::replay(store.as_ref(), stored, &request_hash).await;
    }
    made
}

/// Prices, admits, debits and makes a release (or prices it, on a dry
/// run), pricing again when rows arrive before the debit.
async fn make(
    data: Arc<Snapshots>,
    tasks: &TaskTracker,
    ask: &Ask<'_>,
    request: api::ReleaseRequest,
    knobs: &Knobs,
    request_hash: &str,
    audit: &str,
) -> Result<Outcome, ReleaseError> {
    let store = data.store().clone();
    let kind_name = request.kind();
    let kind = Kind::parse(request.params)?;
    let source_ids = kind.sources(ask.dataset)?;
    for _ in 0..STALE_RETRIES {
        let (dataset, analyst) = store
            .dataset_with_analyst(ask.dataset, ask.analyst)
            .await?
            .ok_or(ReleaseError::NoDataset)?;
        let mut sources = Vec::with_capacity(source_ids.len());
        for &id in source_ids {
            sources.push(
                store
                    .dataset_with_analyst(id, ask.analyst)
                    .await?
                    .ok_or_else(|| ReleaseError::Invalid(format!("no source dataset {id}")))?,
            );
        }
        let source_records: Vec<DatasetRecord> =
            sources.iter().map(|(source, _)| source.clone()).collect();
        let mut planned = kind.plan(&dataset, &source_records, knobs)?;
        let epsilon = match (planned.price().epsilon, knobs.epsilon) {
            (Some(chosen), _) => chosen,
            (None, Epsilon::ZERO) => {
                return Err(ReleaseError::Internal(anyhow::anyhow!(
                    "BUG: a {kind_name} release chose no epsilon for its target"
                )));
            }
            (None, asked) => asked,
        };
        let summary = Summary {
            kind: kind_name,
            epsilon: epsilon.value(),
            delta: knobs.delta.value(),
            analyst: ask.analyst.to_owned(),
        };
        let snapshot = Snapshot::new(data.clone(), dataset.clone());
        let Some(loss) = planned.price().loss.clone() else {
            return complete::free(planned, snapshot, &summary, ask.dry_run).await;
        };
        let charge = Charge {
            epsilon,
            delta: knobs.delta,
            loss,
        };
        let (composition, _) = budget::admit(&dataset, &analyst, &charge)
            .map_err(|refusal| exhausted(&dataset, refusal, false))?;
        let source_charge = planned.source_charge();
        let mut source_debits = Vec::with_capacity(sources.len());
        if let Some(source_charge) = &source_charge {
            for (source, analyst) in &sources {
                budget::admit(source, analyst, source_charge)
                    .map_err(|refusal| exhausted(source, refusal, true))?;
                source_debits.push(SourceDebit {
                    dataset: source.id,
                    expected_rows: source.n_rows,
                    charge: source_charge.clone(),
                });
            }
        }
        planned.vet(&snapshot).await?;
        snapshot.unchanged().await?;
        for source in &source_records {
            snapshot.sibling(source.clone()).unchanged().await?;
        }
        if ask.dry_run {
            let after = DatasetRecord {
                composition,
                ..dataset
            };
            let created_at = crate::domain::clock::timestamp().map_err(anyhow::Error::from)?;
            let mut priced = response(None, &summary, planned.price(), &after, created_at, None);
            priced.dry_run = true;
            return Ok(Outcome::Priced(Box::new(priced)));
        }
        let debit = Debit {
            dataset: ask.dataset,
            expected_rows: dataset.n_rows,
            release_id: Uuid::new_v4(),
            analyst: ask.analyst.to_owned(),
            kind: summary.kind.to_owned(),
            idempotency_key: ask.idempotency_key.clone(),
            request_hash: request_hash.to_owned(),
            request: audit.to_owned(),
            charge: charge.clone(),
            created_at: crate::domain::clock::timestamp().map_err(anyhow::Error::from)?,
            sources: source_debits,
        };
        let decide: Decide =
            Box::new(|locked, analyst, charge| budget::admit(locked, analyst, charge).ok());
        let made = complete::debit_and_make(
            data.clone(),
            tasks,
            debit.clone(),
            decide,
            summary.clone(),
            planned,
        )
        .await?;
        match made {
            complete::Debited::Made(outcome) => return outcome,
            complete::Debited::Not(DebitOutcome::Refused(refused)) => {
                let (locked, analyst) = *refused;
                let source = locked.id != debit.dataset;
                let charge = match &source_charge {
                    Some(source_charge) if source => source_charge,
                    _ => &debit.charge,
                };
                let refusal = budget::admit(&locked, &analyst, charge)
                    .err()
                    .unwrap_or(Refusal::Budget(locked.spent()));
                return Err(exhausted(&locked, refusal, source));
            }
            complete::Debited::Not(DebitOutcome::Replay(stored)) => {
                return complete::replay(store.as_ref(), stored, request_hash).await;
            }
            complete::Debited::Not(DebitOutcome::Stale) => continue,
            complete::Debited::Not(DebitOutcome::NoDataset | DebitOutcome::Debited(_)) => {
                return Err(ReleaseError::NoDataset);
            }
        }
    }
    Err(ReleaseError::Conflict(
        "rows kept arriving while the release was priced; retry".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_cause_and_a_fit_that_did_not_converge_is_told_apart() {
        let not_converged = Failure::Fit(kinds::model::ModelError::Fit(
            dpgate_learn::FitError::NotConverged {
                gradient_norm: 1e-9,
                iterations: 600,
            },
        ));
        assert_eq!(not_converged.cause(), "not_converged");
        let bad_input = Failure::Fit(kinds::model::ModelError::Fit(
            dpgate_learn::FitError::NonFinite { what: "x" },
        ));
        assert_eq!(bad_input.cause(), "fit_input");
        assert_eq!(Failure::NonFinite.cause(), "non_finite");
        assert_eq!(Failure::Corrupt("a block".to_owned()).cause(), "corrupt");
        assert_eq!(Failure::Unheld.cause(), "unheld");
        assert_eq!(Failure::Noise(dp::DpError::NoSteps).cause(), "noise");
    }
}
