//! After the debit: the computation runs on a task of its own, its answer
//! (or its failure) is stored, and retries with the same key get that
//! answer.

use std::sync::Arc;
use std::time::Duration;

use dpgate_api_types as api;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use super::{Failure, Outcome, Planned, ReleaseError, Snapshot, Summary, response};
use crate::domain::debit::{Debit, DebitOutcome, Decide, StoredRelease};
use crate::snapshots::Snapshots;
use crate::store::{Finished, Store};

/// How long a retry waits for the release its key names to be finished by
/// another request (of this process or another replica).
const REPLAY_WAIT: Duration = Duration::from_secs(60);
/// How often it looks.
const REPLAY_POLL: Duration = Duration::from_millis(100);

/// Whether every number of a release is finite: JSON has no NaN or ∞, and
/// a response never carries `null` where a number is specified.
fn finite(release: &api::Release) -> bool {
    use api::ReleaseOutput;
    let top = [release.sensitivity, release.sigma, release.noise.scale];
    top.iter().all(|value| value.is_finite())
        && release.result.as_ref().is_none_or(ReleaseOutput::is_finite)
}

/// A release of public numbers only: computed at once (it reads nothing
/// private), never debited or stored.
pub(super) async fn free(
    planned: Box<dyn Planned>,
    snapshot: Snapshot,
    summary: &Summary,
    dry_run: bool,
) -> Result<Outcome, ReleaseError> {
    let price = planned.price().clone();
    let dataset = snapshot.dataset().clone();
    let result = if dry_run {
        None
    } else {
        Some(
            planned
                .compute(snapshot)
                .await
                .map_err(|failure| ReleaseError::Internal(failure.into()))?,
        )
    };
    let created_at = crate::domain::clock::timestamp().map_err(anyhow::Error::from)?;
    let mut body = response(None, summary, &price, &dataset, created_at, result);
    body.dry_run = dry_run;
    if !finite(&body) {
        return Err(ReleaseError::Internal(anyhow::anyhow!(
            "a public release computed a non-finite number"
        )));
    }
    Ok(Outcome::Priced(Box::new(body)))
}

/// The answer to a debited release that could not be made.
fn failed(release: Uuid) -> String {
    format!(
        "release {release} was debited but could not be made: its ledger entry stays, and a \
         retry with the same Idempotency-Key gets this same answer. The cause is in the \
         server's log."
    )
}

/// What became of a release sent to its debit.
pub(super) enum Debited {
    /// Debited, then made (or failed, and recorded so).
    Made(Result<Outcome, ReleaseError>),
    /// Not debited: refused, replayed, stale or gone.
    Not(DebitOutcome),
}

/// Debits a release and, if that commits, computes, stores and returns
/// it, all on a task the request does not own: if the client goes away
/// after the debit is sent, the release is still finished and stored for
/// the retry.
pub(super) async fn debit_and_make(
    data: Arc<Snapshots>,
    tasks: &TaskTracker,
    debit: Debit,
    decide: Decide,
    summary: Summary,
    planned: Box<dyn Planned>,
) -> Result<Debited, ReleaseError> {
    let store = data.store().clone();
    let span =
        tracing::info_span!("release", dataset = %debit.dataset, release = %debit.release_id);
    let task = tasks.spawn(
        async move {
            let started = std::time::Instant::now();
            let debited = store.debit(&debit, decide).await?;
            metrics::histogram!("dpgate_debit_seconds").record(started.elapsed());
            let after = match debited {
                DebitOutcome::Debited(after) => after,
                other => return Ok(Debited::Not(other)),
            };
            crate::domain::dataset::record_budget_gauges(&after);
            let snapshot = Snapshot::new(data, *after);
            let release = debit.release_id;
            Ok(Debited::Made(
                match make(debit, &summary, planned, snapshot).await {
                    Ok(text) => {
                        store
                            .finish_release(release, Finished::Response(text.clone()))
                            .await?;
                        tracing::info!("release made");
                        metrics::counter!("dpgate_releases_total", "kind" => summary.kind)
                            .increment(1);
                        Ok(Outcome::Created(text))
                    }
                    Err(failure) => {
                        let cause = failure.cause();
                        tracing::error!(error = %failure, cause, "a debited release failed");
                        metrics::counter!(
                            "dpgate_release_failures_total",
                            "kind" => summary.kind,
                            "cause" => cause
                        )
                        .increment(1);
                        let detail = failed(release);
                        store
                            .finish_release(release, Finished::Failure(detail.clone()))
                            .await?;
                        Err(ReleaseError::Failed { release, detail })
                    }
                },
            ))
        }
        .instrument(span),
    );
    task.await.map_err(|error| {
        ReleaseError::Internal(anyhow::anyhow!("the release task failed: {error}"))
    })?
}

/// The stored response of a debited release.
async fn make(
    debit: Debit,
    summary: &Summary,
    planned: Box<dyn Planned>,
    snapshot: Snapshot,
) -> Result<String, Failure> {
    let price = planned.price().clone();
    let after = snapshot.dataset().clone();
    let result = planned.compute(snapshot).await?;
    let body = response(
        Some(debit.release_id),
        summary,
        &price,
        &after,
        debit.created_at,
        Some(result),
    );
    if !finite(&body) {
        return Err(Failure::NonFinite);
    }
    Ok(serde_json::to_string(&body)?)
}

/// The answer to a retry of a stored release: its response, its failure,
/// or (while another request is still making it) what it becomes.
pub(super) async fn replay(
    store: &dyn Store,
    mut stored: StoredRelease,
    request_hash: &str,
) -> Result<Outcome, ReleaseError> {
    if stored.request_hash != request_hash {
        return Err(ReleaseError::Conflict(
            "this Idempotency-Key was already used for a different request".to_owned(),
        ));
    }
    let deadline = tokio::time::Instant::now() + REPLAY_WAIT;
    loop {
        if let Some(response) = stored.response {
            return Ok(Outcome::Replayed(response));
        }
        if let Some(detail) = stored.failure {
            return Err(ReleaseError::Failed {
                release: stored.id,
                detail,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ReleaseError::Conflict(format!(
                "release {} with this Idempotency-Key is still being made, or its server \
                 stopped after the debit (the budget stays spent); retry later",
                stored.id
            )));
        }
        tokio::time::sleep(REPLAY_POLL).await;
        stored = store
            .release(stored.dataset, stored.id)
            .await?
            .ok_or(ReleaseError::NoDataset)?;
    }
}
