//! A decorator over the real store that counts how often rows are read
//! (how often the manifest of a snapshot is asked for): with their
//! outcomes (labels and measures, private) and without (row ids, features
//! and dimensions), and can make the private reads slow or fail.
//! Everything else passes straight through.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dpgate::domain::budget::{AnalystRecord, Change};
use dpgate::domain::dataset::{DatasetRecord, VersionFile};
use dpgate::domain::debit::{Debit, DebitOutcome, Decide, StoredRelease};
use dpgate::domain::ledger::LedgerRecord;
use dpgate::domain::registration::{Ended, RegistrationRecord};
use dpgate::store::{
    BudgetOutcome, CallClaim, Finished, IngestSession, NewDataset, Store, StoreError, StoredBlocks,
    StoredCall,
};
use dpgate_api_types::ReleaseSummary;
use uuid::Uuid;

/// The real store, with read counters.
pub struct Counting {
    inner: Arc<dyn Store>,
    /// Reads of rows with their outcomes.
    outcome_reads: AtomicU64,
    /// Reads of rows without them.
    input_reads: AtomicU64,
    /// How long each read of private rows takes to start.
    delay: Duration,
    /// Whether every read of private rows fails, as a database that went
    /// away after the debit would.
    broken: bool,
}

impl Counting {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Self::slowed(inner, Duration::ZERO)
    }

    /// A store whose every read of private rows takes `delay` longer: a
    /// release that reads rows stays in its after-debit work for a while.
    pub fn slowed(inner: Arc<dyn Store>, delay: Duration) -> Arc<Self> {
        Arc::new(Counting {
            inner,
            outcome_reads: AtomicU64::new(0),
            input_reads: AtomicU64::new(0),
            delay,
            broken: false,
        })
    }

    /// A store whose every read of private rows fails: a release that
    /// reads rows fails after its debit.
    pub fn broken(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Counting {
            inner,
            outcome_reads: AtomicU64::new(0),
            input_reads: AtomicU64::new(0),
            delay: Duration::ZERO,
            broken: true,
        })
    }

    /// (outcome reads, input reads) since the last call; resets both.
    pub fn take(&self) -> (u64, u64) {
        (
            self.outcome_reads.swap(0, Ordering::SeqCst),
            self.input_reads.swap(0, Ordering::SeqCst),
        )
    }
}

#[async_trait]
impl Store for Counting {
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    async fn signing_key(&self, fresh: &str) -> Result<Option<String>, StoreError> {
        self.inner.signing_key(fresh).await
    }

    async fn create_dataset(&self, dataset: &NewDataset) -> Result<(), StoreError> {
        self.inner.create_dataset(dataset).await
    }

    async fn datasets(&self) -> Result<Vec<DatasetRecord>, StoreError> {
        self.inner.datasets().await
    }

    async fn dataset(&self, id: Uuid) -> Result<Option<DatasetRecord>, StoreError> {
        self.inner.dataset(id).await
    }

    async fn begin_ingest(&self, id: Uuid) -> Result<Box<dyn IngestSession>, StoreError> {
        self.inner.begin_ingest(id).await
    }

    async fn version_files(
        &self,
        id: Uuid,
        version: u64,
        outcomes: bool,
    ) -> Result<Vec<VersionFile>, StoreError> {
        if outcomes {
            self.outcome_reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            if self.broken {
                return Err(StoreError::Corrupt {
                    what: "row",
                    detail: "the test store fails every read of private rows".to_owned(),
                });
            }
        } else {
            self.input_reads.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.version_files(id, version, outcomes).await
    }

    async fn registered_files(
        &self,
        id: Uuid,
        version: u64,
    ) -> Result<Vec<VersionFile>, StoreError> {
        self.inner.registered_files(id, version).await
    }

    async fn block_uploads(&self) -> Result<Vec<(Uuid, u64)>, StoreError> {
        self.inner.block_uploads().await
    }

    async fn upload_blocks(&self, id: Uuid, version: u64) -> Result<StoredBlocks, StoreError> {
        self.inner.upload_blocks(id, version).await
    }

    async fn blocks_to_files(
        &self,
        id: Uuid,
        version: u64,
        files: &[VersionFile],
    ) -> Result<bool, StoreError> {
        self.inner.blocks_to_files(id, version, files).await
    }

    async fn debit(&self, debit: &Debit, decide: Decide) -> Result<DebitOutcome, StoreError> {
        self.inner.debit(debit, decide).await
    }

    async fn analysts(&self, id: Uuid) -> Result<Vec<AnalystRecord>, StoreError> {
        self.inner.analysts(id).await
    }

    async fn dataset_with_analyst(
        &self,
        id: Uuid,
        analyst: &str,
    ) -> Result<Option<(DatasetRecord, AnalystRecord)>, StoreError> {
        self.inner.dataset_with_analyst(id, analyst).await
    }

    async fn change_budget(&self, id: Uuid, change: &Change) -> Result<BudgetOutcome, StoreError> {
        self.inner.change_budget(id, change).await
    }

    async fn releases(
        &self,
        id: Uuid,
        analyst: Option<&str>,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<ReleaseSummary>, StoreError> {
        self.inner.releases(id, analyst, after, limit).await
    }

    async fn finish_release(&self, release: Uuid, finished: Finished) -> Result<(), StoreError> {
        self.inner.finish_release(release, finished).await
    }

    async fn release(
        &self,
        dataset: Uuid,
        release: Uuid,
    ) -> Result<Option<StoredRelease>, StoreError> {
        self.inner.release(dataset, release).await
    }

    async fn release_by_key(
        &self,
        dataset: Uuid,
        analyst: &str,
        key: &str,
    ) -> Result<Option<StoredRelease>, StoreError> {
        self.inner.release_by_key(dataset, analyst, key).await
    }

    async fn claim_call(
        &self,
        release: Uuid,
        call: u32,
        theta_hash: &str,
    ) -> Result<CallClaim, StoreError> {
        self.inner.claim_call(release, call, theta_hash).await
    }

    async fn finish_call(
        &self,
        release: Uuid,
        call: u32,
        finished: Finished,
    ) -> Result<(), StoreError> {
        self.inner.finish_call(release, call, finished).await
    }

    async fn call(&self, release: Uuid, call: u32) -> Result<Option<StoredCall>, StoreError> {
        self.inner.call(release, call).await
    }

    async fn ledger(
        &self,
        dataset: Uuid,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<LedgerRecord>, StoreError> {
        self.inner.ledger(dataset, after, limit).await
    }

    async fn revoke(&self, jti: &str, at: &str) -> Result<(), StoreError> {
        self.inner.revoke(jti, at).await
    }

    async fn is_revoked(&self, jti: &str) -> Result<bool, StoreError> {
        self.inner.is_revoked(jti).await
    }

    async fn start_registration(
        &self,
        registration: &RegistrationRecord,
    ) -> Result<(), StoreError> {
        self.inner.start_registration(registration).await
    }

    async fn beat_registration(&self, id: Uuid, at: &str) -> Result<(), StoreError> {
        self.inner.beat_registration(id, at).await
    }

    async fn finish_registration(&self, id: Uuid, ended: &Ended) -> Result<(), StoreError> {
        self.inner.finish_registration(id, ended).await
    }

    async fn registration(&self, id: Uuid) -> Result<Option<RegistrationRecord>, StoreError> {
        self.inner.registration(id).await
    }
}
