//! Debits of one dataset are committed in batches: a debit that arrives
//! while its dataset's batch is being written waits for the next one, and
//! each batch is one transaction under the dataset's lock. The lock is
//! then held once, and the commit's flush to disk paid once, for every
//! debit that queued meanwhile, instead of once each: with Postgres
//! flushing a commit in milliseconds, that flush is what limits how many
//! releases one dataset can make per second.
//!
//! Nothing about a debit changes: each is decided in turn, in arrival
//! order, against the composition the ones before it left, and its caller
//! hears the outcome only after the batch commits (or that it failed, and
//! then none of the batch was written).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{Debit, DebitOutcome, Decide, StoreError};

/// Most debits in one transaction: a bound on how long one holds the lock.
pub const MAX_BATCH: usize = 64;

/// A queued debit and where its outcome goes.
pub struct Pending {
    pub debit: Debit,
    pub decide: Decide,
    pub reply: oneshot::Sender<Result<DebitOutcome, StoreError>>,
}

/// The debits waiting, by dataset. A dataset has an entry exactly while a
/// task is writing its batches.
#[derive(Default)]
pub struct DebitQueue {
    waiting: Mutex<HashMap<Uuid, Vec<Pending>>>,
}

impl std::fmt::Debug for DebitQueue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("DebitQueue").finish_non_exhaustive()
    }
}

impl DebitQueue {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Vec<Pending>>> {
        // Nothing panics while holding the lock.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `debit` and waits for its batch. The first debit of a
    /// dataset with none in progress spawns the task that writes batches
    /// with `write` (which answers every debit it is given) until none are
    /// left: a task, so that a caller that goes away cannot leave a batch
    /// half answered or its dataset's queue without a writer.
    pub async fn submit<W, F>(
        self: &Arc<Self>,
        debit: Debit,
        decide: Decide,
        write: W,
    ) -> Result<DebitOutcome, StoreError>
    where
        W: Fn(Uuid, Vec<Pending>) -> F + Send + 'static,
        F: Future<Output = ()> + Send,
    {
        let dataset = debit.dataset;
        let (reply, outcome) = oneshot::channel();
        let pending = Pending {
            debit,
            decide,
            reply,
        };
        let start = match self.waiting().entry(dataset) {
            Entry::Occupied(mut queued) => {
                queued.get_mut().push(pending);
                false
            }
            Entry::Vacant(none) => {
                none.insert(vec![pending]);
                true
            }
        };
        if start {
            let queue = self.clone();
            tokio::spawn(async move {
                while let Some(batch) = queue.next_batch(dataset) {
                    // A panic drops the batch's answers (its callers hear
                    // so), not the dataset's later debits.
                    let written = AssertUnwindSafe(write(dataset, batch)).catch_unwind();
                    if written.await.is_err() {
                        tracing::error!(%dataset, "writing a batch of debits panicked");
                    }
                }
            });
        }
        outcome
            .await
            .unwrap_or_else(|_| Err(StoreError::Batch("it ended without an answer".to_owned())))
    }

    /// Up to [`MAX_BATCH`] of the dataset's waiting debits, oldest first;
    /// `None` (and the dataset's entry removed) when none wait.
    fn next_batch(&self, dataset: Uuid) -> Option<Vec<Pending>> {
        let mut waiting = self.waiting();
        let queued = waiting.get_mut(&dataset)?;
        if queued.is_empty() {
            waiting.remove(&dataset);
            return None;
        }
        let take = queued.len().min(MAX_BATCH);
        Some(queued.drain(..take).collect())
    }
}
