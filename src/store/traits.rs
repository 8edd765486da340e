//! The storage every backend provides, and an upload's transaction.

use async_trait::async_trait;
use uuid::Uuid;

use super::models::{BudgetOutcome, CallClaim, NewDataset, StoredBlocks, StoredCall};
use super::{Finished, StoreError};
use crate::domain::budget::{AnalystRecord, Change};
use crate::domain::dataset::{DatasetRecord, VersionFile, WalrStats};
use crate::domain::debit::{Debit, DebitOutcome, Decide, StoredRelease};
use crate::domain::ledger::LedgerRecord;
use crate::domain::registration::{Ended, RegistrationRecord};

/// An upload in progress: one transaction holding the dataset's write
/// lock, rolled back if dropped. The engine writes the new version's
/// files meanwhile; the manifest records them on commit.
#[async_trait]
pub trait IngestSession: Send {
    /// The dataset's row count as locked: the version the upload's files
    /// are recorded under.
    fn version(&self) -> u64;
    /// The manifest's inputs files of every earlier version.
    async fn files(&mut self) -> Result<Vec<VersionFile>, StoreError>;
    /// Records the upload's files, adds its row count and sums to the
    /// dataset, and commits.
    async fn commit(
        self: Box<Self>,
        rows: u64,
        stats: &WalrStats,
        files: &[VersionFile],
    ) -> Result<DatasetRecord, StoreError>;
}

/// The storage every backend provides.
#[async_trait]
pub trait Store: Send + Sync {
    /// Whether the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The signing key kept in the database, storing `fresh` if there is none
    /// yet; `None` where keys live in a file beside the database instead.
    async fn signing_key(&self, fresh: &str) -> Result<Option<String>, StoreError>;

    /// Creates a dataset and its ledger's opening entry.
    async fn create_dataset(&self, dataset: &NewDataset) -> Result<(), StoreError>;

    async fn datasets(&self) -> Result<Vec<DatasetRecord>, StoreError>;

    async fn dataset(&self, id: Uuid) -> Result<Option<DatasetRecord>, StoreError>;

    /// Opens an upload transaction, locking the dataset against other writers.
    async fn begin_ingest(&self, id: Uuid) -> Result<Box<dyn IngestSession>, StoreError>;

    /// The manifest of the snapshot at `version` rows: every file with a
    /// smaller version, in version order, inputs before outcomes; the
    /// outcomes files (private) only if `outcomes`.
    async fn version_files(
        &self,
        id: Uuid,
        version: u64,
        outcomes: bool,
    ) -> Result<Vec<VersionFile>, StoreError>;

    /// The inputs records of the files registered in place (see
    /// [`VersionFile::registered`]) of the snapshot at `version` rows:
    /// metadata of the operator's files, which a release checks before its
    /// debit. No row, and nothing computed from rows, is in it.
    async fn registered_files(
        &self,
        id: Uuid,
        version: u64,
    ) -> Result<Vec<VersionFile>, StoreError>;

    /// Uploads still stored as blocks (before the `version_files`
    /// migration), as (dataset, version), for the engine to write out.
    async fn block_uploads(&self) -> Result<Vec<(Uuid, u64)>, StoreError>;

    /// The stored blocks of one such upload, outcomes included.
    async fn upload_blocks(&self, id: Uuid, version: u64) -> Result<StoredBlocks, StoreError>;

    /// Records `files` for an upload stored as blocks and deletes its
    /// blocks, in one transaction; false (nothing written) if another
    /// process did so first.
    async fn blocks_to_files(
        &self,
        id: Uuid,
        version: u64,
        files: &[VersionFile],
    ) -> Result<bool, StoreError>;

    /// The check-and-debit transaction (see the module documentation).
    async fn debit(&self, debit: &Debit, decide: Decide) -> Result<DebitOutcome, StoreError>;

    /// Every analyst with a cap or a release on the dataset, by name.
    async fn analysts(&self, id: Uuid) -> Result<Vec<AnalystRecord>, StoreError>;

    /// The dataset and `analyst`'s record on it (a fresh one if the analyst
    /// has spent nothing yet), in one query: what a release is priced and
    /// pre-admitted against.
    async fn dataset_with_analyst(
        &self,
        id: Uuid,
        analyst: &str,
    ) -> Result<Option<(DatasetRecord, AnalystRecord)>, StoreError>;

    /// Moves the total and sets caps under the budget lock, after
    /// [`Change::check`], writing one ledger event per change.
    async fn change_budget(&self, id: Uuid, change: &Change) -> Result<BudgetOutcome, StoreError>;

    /// Up to `limit` releases with ledger `seq > after`, oldest first;
    /// only `analyst`'s when given.
    async fn releases(
        &self,
        id: Uuid,
        analyst: Option<&str>,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<dpgate_api_types::ReleaseSummary>, StoreError>;

    /// Stores how a debited release ended: its response, or the problem
    /// it answered when it failed (its ledger entry stays). Only the first
    /// ending counts.
    async fn finish_release(&self, release: Uuid, finished: Finished) -> Result<(), StoreError>;

    async fn release(
        &self,
        dataset: Uuid,
        release: Uuid,
    ) -> Result<Option<StoredRelease>, StoreError>;

    async fn release_by_key(
        &self,
        dataset: Uuid,
        analyst: &str,
        key: &str,
    ) -> Result<Option<StoredRelease>, StoreError>;

    /// Claims call `call` of gradient session `release` for the θ whose
    /// hash is `theta_hash`, unless an earlier request did: each call is
    /// made once.
    async fn claim_call(
        &self,
        release: Uuid,
        call: u32,
        theta_hash: &str,
    ) -> Result<CallClaim, StoreError>;

    /// Stores how a claimed call ended; only its first ending counts.
    async fn finish_call(
        &self,
        release: Uuid,
        call: u32,
        finished: Finished,
    ) -> Result<(), StoreError>;

    /// Call `call` of session `release`, if claimed.
    async fn call(&self, release: Uuid, call: u32) -> Result<Option<StoredCall>, StoreError>;

    /// Up to `limit` ledger entries with `seq > after`, oldest first.
    async fn ledger(
        &self,
        dataset: Uuid,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<LedgerRecord>, StoreError>;

    async fn revoke(&self, jti: &str, at: &str) -> Result<(), StoreError>;

    /// Records a registration that starts running in the background.
    async fn start_registration(&self, registration: &RegistrationRecord)
    -> Result<(), StoreError>;

    /// Records that registration `id`'s replica still runs it, at `at`.
    async fn beat_registration(&self, id: Uuid, at: &str) -> Result<(), StoreError>;

    /// Records how registration `id` ended.
    async fn finish_registration(&self, id: Uuid, ended: &Ended) -> Result<(), StoreError>;

    /// Registration `id`, if there is one.
    async fn registration(&self, id: Uuid) -> Result<Option<RegistrationRecord>, StoreError>;

    async fn is_revoked(&self, jti: &str) -> Result<bool, StoreError>;
}
