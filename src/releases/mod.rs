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
//! Steps 5 and 6 run on a task of their own (`complete`), so a client
//! that disconnects, or a request timeout, cannot lose a paid release: the
//! retry with the same idempotency key gets it. If they fail, the release
//! record says so and the ledger entry stays (the safe side), and a retry
//! gets the same failure, never fresh noise.

pub mod calls;
mod complete;
mod error;
mod fingerprint;
pub mod kinds;
pub mod pacing;
mod plan;
mod response;

use std::sync::Arc;

use dpgate_api_types as api;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::domain::budget::AnalystRecord;
use crate::domain::budget::{self, Refusal};
use crate::domain::dataset::DatasetRecord;
use crate::domain::debit::{Debit, DebitOutcome, Decide, SourceDebit};
use crate::dp::{self, Charge, Delta, Epsilon};
use crate::snapshots::Snapshots;
use crate::store::Store;
use error::exhausted;
pub use error::{Failure, ModelError, ReleaseError};
use fingerprint::fingerprint;
use kinds::Kind;
pub use plan::{Knobs, Planned, Price, Snapshot};
pub use response::{Ask, Outcome};
use response::{Summary, response};

/// How often a release is priced again when rows arrive between its
/// pricing and its debit (pricing reads no rows, so a retry is cheap).
const STALE_RETRIES: usize = 8;

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
    let made = make(data, tasks, &ask, request, &knobs, (&request_hash, &audit)).await;
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
    fingerprint: (&str, &str),
) -> Result<Outcome, ReleaseError> {
    let kind_name = request.kind();
    let kind = Kind::parse(request.params)?;
    let source_ids = kind.sources(ask.dataset)?;
    for _ in 0..STALE_RETRIES {
        let attempt = Attempt {
            data: &data,
            tasks,
            ask,
            kind: &kind,
            source_ids,
            kind_name,
            knobs,
            fingerprint,
        };
        if let Some(outcome) = attempt.run().await? {
            return Ok(outcome);
        }
    }
    Err(ReleaseError::Conflict(
        "rows kept arriving while the release was priced; retry".to_owned(),
    ))
}

/// One try at a release, against the datasets as they stand.
struct Attempt<'a> {
    data: &'a Arc<Snapshots>,
    tasks: &'a TaskTracker,
    ask: &'a Ask<'a>,
    kind: &'a Kind,
    /// The other datasets the release reads, checked before any lookup.
    source_ids: &'a [Uuid],
    kind_name: &'static str,
    knobs: &'a Knobs,
    /// The request's hash and its audit JSON.
    fingerprint: (&'a str, &'a str),
}

impl Attempt<'_> {
    /// The release path, in its order (see the module documentation):
    /// price, pre-admit, vet, then debit, compute and store; `None` when
    /// rows arrived since the pricing, which must then be done again.
    async fn run(&self) -> Result<Option<Outcome>, ReleaseError> {
        let store = self.data.store().clone();
        let (dataset, analyst) = store
            .dataset_with_analyst(self.ask.dataset, self.ask.analyst)
            .await?
            .ok_or(ReleaseError::NoDataset)?;
        let sources = self.sources(store.as_ref()).await?;
        let source_records: Vec<DatasetRecord> =
            sources.iter().map(|(source, _)| source.clone()).collect();
        // 1. Price, from public facts alone.
        let mut planned = self.kind.plan(&dataset, &source_records, self.knobs)?;
        let (summary, epsilon) = self.summary(planned.as_ref())?;
        let snapshot = Snapshot::new(self.data.clone(), dataset.clone());
        let Some(loss) = planned.price().loss.clone() else {
            return complete::free(planned, snapshot, &summary, self.ask.dry_run)
                .await
                .map(Some);
        };
        let charge = Charge {
            epsilon,
            delta: self.knobs.delta,
            loss,
        };
        // 2. Pre-admit against the composition and the analyst's cap.
        let (composition, _) = budget::admit(&dataset, &analyst, &charge)
            .map_err(|refusal| exhausted(&dataset, refusal, false))?;
        let source_charge = planned.source_charge();
        let source_debits = pre_admit_sources(&sources, source_charge.as_ref())?;
        // 3. Vet the request and the files' metadata; a dry run ends here.
        planned.vet(&snapshot).await?;
        snapshot.unchanged().await?;
        for source in source_records {
            snapshot.sibling(source).unchanged().await?;
        }
        if self.ask.dry_run {
            let after = DatasetRecord {
                composition,
                ..dataset
            };
            return priced(&summary, planned.price(), &after).map(Some);
        }
        // 4–6. Debit, then compute and store on a task of its own.
        let debit = self.debit(&dataset, &summary, charge, source_debits)?;
        let decide: Decide =
            Box::new(|locked, analyst, charge| budget::admit(locked, analyst, charge).ok());
        let made = complete::debit_and_make(
            self.data.clone(),
            self.tasks,
            debit.clone(),
            decide,
            summary,
            planned,
        )
        .await?;
        match made {
            complete::Debited::Made(outcome) => outcome.map(Some),
            complete::Debited::Not(outcome) => {
                settle(
                    store.as_ref(),
                    outcome,
                    &debit,
                    source_charge.as_ref(),
                    self.fingerprint.0,
                )
                .await
            }
        }
    }

    /// The release's source datasets, each with the analyst's record there.
    async fn sources(
        &self,
        store: &dyn Store,
    ) -> Result<Vec<(DatasetRecord, AnalystRecord)>, ReleaseError> {
        let mut sources = Vec::new();
        for &id in self.source_ids {
            sources.push(
                store
                    .dataset_with_analyst(id, self.ask.analyst)
                    .await?
                    .ok_or_else(|| ReleaseError::Invalid(format!("no source dataset {id}")))?,
            );
        }
        Ok(sources)
    }

    /// What every response repeats, and the ε spent: the kind's choice for
    /// its target where the request named one.
    fn summary(&self, planned: &dyn Planned) -> Result<(Summary, Epsilon), ReleaseError> {
        let epsilon = match (planned.price().epsilon, self.knobs.epsilon) {
            (Some(chosen), _) => chosen,
            (None, Epsilon::ZERO) => {
                return Err(ReleaseError::Internal(anyhow::anyhow!(
                    "BUG: a {} release chose no epsilon for its target",
                    self.kind_name
                )));
            }
            (None, asked) => asked,
        };
        let summary = Summary {
            kind: self.kind_name,
            epsilon: epsilon.value(),
            delta: self.knobs.delta.value(),
            analyst: self.ask.analyst.to_owned(),
        };
        Ok((summary, epsilon))
    }

    /// The debit of `charge` on `dataset` (priced at its row count) and of
    /// the sources' shares.
    fn debit(
        &self,
        dataset: &DatasetRecord,
        summary: &Summary,
        charge: Charge,
        sources: Vec<SourceDebit>,
    ) -> Result<Debit, ReleaseError> {
        Ok(Debit {
            dataset: self.ask.dataset,
            expected_rows: dataset.n_rows,
            release_id: Uuid::new_v4(),
            analyst: self.ask.analyst.to_owned(),
            kind: summary.kind.to_owned(),
            idempotency_key: self.ask.idempotency_key.clone(),
            request_hash: self.fingerprint.0.to_owned(),
            request: self.fingerprint.1.to_owned(),
            charge,
            created_at: crate::domain::clock::timestamp().map_err(anyhow::Error::from)?,
            sources,
        })
    }
}

/// Pre-admits each source's share of the release: their debits, or the
/// refusal of the first that cannot pay.
fn pre_admit_sources(
    sources: &[(DatasetRecord, AnalystRecord)],
    charge: Option<&Charge>,
) -> Result<Vec<SourceDebit>, ReleaseError> {
    let Some(charge) = charge else {
        return Ok(Vec::new());
    };
    sources
        .iter()
        .map(|(source, analyst)| {
            budget::admit(source, analyst, charge)
                .map_err(|refusal| exhausted(source, refusal, true))?;
            Ok(SourceDebit {
                dataset: source.id,
                expected_rows: source.n_rows,
                charge: charge.clone(),
            })
        })
        .collect()
}

/// A dry run's answer: the price, and the dataset as the release would
/// leave it.
fn priced(
    summary: &Summary,
    price: &Price,
    after: &DatasetRecord,
) -> Result<Outcome, ReleaseError> {
    let created_at = crate::domain::clock::timestamp().map_err(anyhow::Error::from)?;
    let mut priced = response(None, summary, price, after, created_at, None);
    priced.dry_run = true;
    Ok(Outcome::Priced(Box::new(priced)))
}

/// The answer to a debit that was not made: a refusal (told against the
/// dataset that refused), a replay, or `None` to price again.
async fn settle(
    store: &dyn Store,
    outcome: DebitOutcome,
    debit: &Debit,
    source_charge: Option<&Charge>,
    request_hash: &str,
) -> Result<Option<Outcome>, ReleaseError> {
    match outcome {
        DebitOutcome::Refused(refused) => {
            let (locked, analyst) = *refused;
            let source = locked.id != debit.dataset;
            let charge = match source_charge {
                Some(source_charge) if source => source_charge,
                _ => &debit.charge,
            };
            let refusal = budget::admit(&locked, &analyst, charge)
                .err()
                .unwrap_or(Refusal::Budget(locked.spent()));
            Err(exhausted(&locked, refusal, source))
        }
        DebitOutcome::Replay(stored) => complete::replay(store, stored, request_hash)
            .await
            .map(Some),
        DebitOutcome::Stale => Ok(None),
        DebitOutcome::NoDataset | DebitOutcome::Debited(_) => Err(ReleaseError::NoDataset),
    }
}
