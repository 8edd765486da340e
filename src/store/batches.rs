//! Writes committed in batches. A write that arrives while others of its
//! kind (and key) are being committed waits for the next transaction, which
//! takes every write that queued meanwhile: the lock is held once, and the
//! commit's flush to disk paid once, for all of them instead of once each.
//! With Postgres flushing a commit in milliseconds, that flush is what
//! limits how many releases one dataset can make per second.
//!
//! - Debits are batched by dataset, each batch one transaction under the
//!   dataset's lock. Nothing about a debit changes: each is decided in turn,
//!   in arrival order, against the composition the ones before it left.
//! - Finished releases (a response or a failure stored after the debit)
//!   are batched across datasets.
//!
//! Every caller hears its outcome only after its batch commits (or that it
//! failed, and then none of the batch was written).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::StoreError;
use crate::domain::debit::{Debit, DebitOutcome, Decide};

/// Most writes in one transaction: a bound on how long one holds its locks.
pub const MAX_BATCH: usize = 64;

/// A queued write and where its outcome goes.
pub struct Pending<T, R> {
    pub item: T,
    pub reply: oneshot::Sender<Result<R, StoreError>>,
}

/// Debits, batched by dataset.
pub type DebitQueue = Batches<Uuid, (Debit, Decide), DebitOutcome>;

/// How a debited release ended: its response, or why it failed.
#[derive(Debug, Clone)]
pub enum Finished {
    Response(String),
    Failure(String),
}

/// Finished releases, batched across datasets.
pub type FinishQueue = Batches<(), (Uuid, Finished), ()>;

/// The writes waiting, by key. A key has an entry exactly while a task is
/// writing its batches.
pub struct Batches<K, T, R> {
    waiting: Mutex<HashMap<K, Vec<Pending<T, R>>>>,
}

impl<K, T, R> Default for Batches<K, T, R> {
    fn default() -> Self {
        Batches {
            waiting: Mutex::new(HashMap::new()),
        }
    }
}

impl<K, T, R> std::fmt::Debug for Batches<K, T, R> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Batches").finish_non_exhaustive()
    }
}

/// Tells every write of a batch that failed so (none of it was written).
pub fn fail_all<R>(
    replies: impl IntoIterator<Item = oneshot::Sender<Result<R, StoreError>>>,
    error: &StoreError,
) {
    let detail = error.to_string();
    for reply in replies {
        let _ = reply.send(Err(StoreError::Batch(detail.clone())));
    }
}

impl<K, T, R> Batches<K, T, R>
where
    K: Hash + Eq + Clone + Debug + Send + Sync + 'static,
    T: Send + 'static,
    R: Send + 'static,
{
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<K, Vec<Pending<T, R>>>> {
        // Nothing panics while holding the lock.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `item` under `key` and waits for its batch. The first write
    /// of a key with none in progress spawns the task that writes batches
    /// with `write` (which answers every write it is given) until none are
    /// left: a task, so that a caller that goes away cannot leave a batch
    /// half answered or its key's queue without a writer.
    pub async fn submit<W, F>(self: &Arc<Self>, key: K, item: T, write: W) -> Result<R, StoreError>
    where
        W: Fn(K, Vec<Pending<T, R>>) -> F + Send + 'static,
        F: Future<Output = ()> + Send,
    {
        let (reply, outcome) = oneshot::channel();
        let pending = Pending { item, reply };
        let start = match self.waiting().entry(key.clone()) {
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
                while let Some(batch) = queue.next_batch(&key) {
                    // A panic drops the batch's answers (its callers hear
                    // so), not the key's later writes.
                    let written = AssertUnwindSafe(write(key.clone(), batch)).catch_unwind();
                    if written.await.is_err() {
                        tracing::error!(?key, "writing a batch panicked");
                    }
                }
            });
        }
        outcome
            .await
            .unwrap_or_else(|_| Err(StoreError::Batch("it ended without an answer".to_owned())))
    }

    /// Up to [`MAX_BATCH`] of the key's waiting writes, oldest first;
    /// `None` (and the key's entry removed) when none wait.
    fn next_batch(&self, key: &K) -> Option<Vec<Pending<T, R>>> {
        let mut waiting = self.waiting();
        let queued = waiting.get_mut(key)?;
        if queued.is_empty() {
            waiting.remove(key);
            return None;
        }
        let take = queued.len().min(MAX_BATCH);
        Some(queued.drain(..take).collect())
    }
}
