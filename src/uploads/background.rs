//! Registrations that run in the background (`Prefer: respond-async`):
//! the record, a beat every [`BEAT`] while the work runs, and how it ended.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dpgate_api_types::{IngestReport, Problem};
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use crate::domain::clock::ClockError;
use crate::domain::registration::{BEAT, Ended, RegistrationRecord};
use crate::store::{Store, StoreError};

/// Why a registration could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Clock(#[from] ClockError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Records a registration of `dataset_id` by `actor` and runs `work` on
/// `tasks`, beating until it ends and then recording its outcome.
pub async fn start(
    store: &Arc<dyn Store>,
    tasks: &TaskTracker,
    dataset_id: Uuid,
    actor: &str,
    work: impl Future<Output = Result<IngestReport, Problem>> + Send + 'static,
) -> Result<RegistrationRecord, StartError> {
    let record = RegistrationRecord::start(dataset_id, actor)?;
    store.start_registration(&record).await?;
    let id = record.id;
    let store = store.clone();
    let span = tracing::info_span!("registration", registration = %id, dataset = %dataset_id);
    tasks.spawn(
        async move {
            let beats = tokio::spawn(beat(store.clone(), id));
            let outcome = work.await;
            beats.abort();
            record_end(store.as_ref(), id, outcome).await;
        }
        .instrument(span),
    );
    Ok(record)
}

async fn beat(store: Arc<dyn Store>, id: Uuid) {
    let mut beats = tokio::time::interval(BEAT);
    beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beats.tick().await;
    loop {
        beats.tick().await;
        let beaten = match crate::domain::clock::timestamp() {
            Ok(at) => store
                .beat_registration(id, &at)
                .await
                .map_err(anyhow::Error::from),
            Err(error) => Err(error.into()),
        };
        if let Err(error) = beaten {
            tracing::warn!(
                error = format!("{error:#}"),
                "a registration's beat was not recorded"
            );
        }
    }
}

/// Records how registration `id` ended, trying again for a while: until it
/// is recorded, readers see it running, then (its beats stopped) failed.
async fn record_end(store: &dyn Store, id: Uuid, outcome: Result<IngestReport, Problem>) {
    match &outcome {
        Ok(report) => tracing::info!(rows = report.rows_added, "registration done"),
        Err(problem) => {
            tracing::info!(status = problem.status, detail = %problem.detail, "registration failed")
        }
    }
    let mut error = None;
    for attempt in 0..5 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let recorded = match crate::domain::clock::timestamp() {
            Ok(at) => {
                let ended = Ended {
                    at,
                    outcome: outcome.clone(),
                };
                store
                    .finish_registration(id, &ended)
                    .await
                    .map_err(anyhow::Error::from)
            }
            Err(clock) => Err(clock.into()),
        };
        match recorded {
            Ok(()) => return,
            Err(failed) => error = Some(failed),
        }
    }
    if let Some(error) = error {
        tracing::error!(
            error = format!("{error:#}"),
            "how a registration ended was not recorded"
        );
    }
}
