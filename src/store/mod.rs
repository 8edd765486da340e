//! Storage: one trait, one implementation per backend (SQLite, Postgres),
//! each with its own SQL and migrations. Nothing outside this module writes
//! SQL.
//!
//! The one transaction that matters is [`Store::debit`]: it locks the
//! dataset's budget row (SQLite `BEGIN IMMEDIATE`, Postgres `SELECT … FOR
//! UPDATE`), asks the caller's [`Decide`] whether the release fits, and if so
//! appends the hash-chained ledger entry, records the release and stores the
//! new composition, all or nothing. Debits of one dataset that arrive
//! together share one such transaction, each decided in turn; finished
//! releases are stored in batches too ([`batches`]). A release that also
//! reads source datasets gets a transaction of its own that locks every
//! dataset it debits in id order (so two such releases cannot deadlock)
//! and debits all or none.
//! Noise is drawn by the caller only after this commits, never inside it.

mod batches;
mod common;
mod postgres;
mod records;
mod sqlite;

use async_trait::async_trait;
use uuid::Uuid;

pub use batches::Finished;

use crate::budget::{AnalystRecord, Change};
use crate::dataset::{DatasetRecord, VersionFile, WalrStats};
use crate::dp::{Charge, Composition};
use crate::ledger::LedgerRecord;
use crate::registration::{Ended, RegistrationRecord};
use crate::snapshots::{Columns, Shape};

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique constraint: a taken dataset name, a reused key.
    #[error("{0}")]
    Conflict(String),
    /// A stored value does not parse (corruption or a foreign writer).
    #[error("corrupt stored {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// A value to store does not encode as JSON.
    #[error("cannot encode a stored value: {0}")]
    Encode(#[from] serde_json::Error),
    /// A number to store does not fit its column.
    #[error("{what} {value} does not fit the database's 64-bit integers")]
    OutOfRange { what: &'static str, value: u64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A dataset file could not be written or read.
    #[error("{0}")]
    Files(String),
    /// A dataset file no longer matches what the manifest recorded of it
    /// (removed, resized, modified, or of another SHA-256).
    #[error("a file of this dataset changed since it was recorded: {0}")]
    Changed(String),
    /// The batch of debits this one was in could not be written (nothing
    /// of it was; the cause is logged once for the batch).
    #[error("a batch of debits failed: {0}")]
    Batch(String),
}

/// Which of a snapshot's manifest records to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Files {
    Inputs,
    /// Inputs and outcomes.
    All,
    /// The inputs of files registered in place.
    RegisteredInputs,
}

/// A new dataset and who creates it.
#[derive(Debug, Clone)]
pub struct NewDataset {
    pub record: DatasetRecord,
    pub actor: String,
}

/// A release to debit: the ledger's charge and the release's bookkeeping.
#[derive(Debug, Clone)]
pub struct Debit {
    pub dataset: Uuid,
    /// N the release was priced for (the snapshot it will read); if rows
    /// arrived since, the debit reports [`DebitOutcome::Stale`] and the
    /// caller prices it again.
    pub expected_rows: u64,
    pub release_id: Uuid,
    pub analyst: String,
    pub kind: String,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
    /// The request as JSON, kept with the release for audit (supplied
    /// feature vectors replaced by their digest).
    pub request: String,
    pub charge: Charge,
    pub created_at: String,
    /// Other datasets whose rows the release also reads: each is debited
    /// in the same transaction, or none is.
    pub sources: Vec<SourceDebit>,
}

/// A source dataset of a release, and what it is debited.
#[derive(Debug, Clone)]
pub struct SourceDebit {
    pub dataset: Uuid,
    /// As [`Debit::expected_rows`].
    pub expected_rows: u64,
    pub charge: Charge,
}

/// Decides, under the budget lock, whether `charge` fits a dataset's
/// budget and the analyst's cap on it: both compositions after it, or
/// `None` to refuse.
pub type Decide = Box<
    dyn Fn(&DatasetRecord, &AnalystRecord, &Charge) -> Option<(Composition, Composition)> + Send,
>;

/// How a debit ended.
#[derive(Debug)]
pub enum DebitOutcome {
    /// Committed; the dataset as it now stands.
    Debited(Box<DatasetRecord>),
    /// Did not fit the dataset here (the release's or one of its sources);
    /// nothing was written anywhere.
    Refused(Box<(DatasetRecord, AnalystRecord)>),
    /// The idempotency key was used before (by this analyst, on this dataset).
    Replay(StoredRelease),
    /// Rows were added since the release was priced (to it or a source).
    Stale,
    /// No such dataset (or source).
    NoDataset,
}

/// How a budget change ended.
#[derive(Debug)]
pub enum BudgetOutcome {
    /// Committed: the dataset and its analysts as they now stand.
    Changed(Box<DatasetRecord>, Vec<AnalystRecord>),
    /// The new total is below what is spent; nothing was written.
    Refused(String),
    NoDataset,
}

/// A recorded release.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRelease {
    pub id: Uuid,
    pub dataset: Uuid,
    pub analyst: String,
    pub request_hash: String,
    /// The exact response body sent, once the noise was drawn and stored.
    pub response: Option<String>,
    /// The problem document of a release that failed after its debit.
    pub failure: Option<String>,
}

/// A claimed call of a gradient session.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCall {
    /// SHA-256 of the θ it was claimed for.
    pub theta_hash: String,
    /// The exact response body sent, once made.
    pub response: Option<String>,
    /// The problem answered when it could not be made (it stays spent).
    pub failure: Option<String>,
}

/// How a claim on a session's call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CallClaim {
    /// This request claimed it; `claimed` calls of the session are taken
    /// now, this one included.
    Claimed { claimed: u64 },
    /// An earlier request did.
    Taken(StoredCall),
}

/// Rows in blocks, as the engine or the legacy block reader streams them.
pub type BlockStream = tokio_stream::wrappers::ReceiverStream<Result<Columns, StoreError>>;

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
    async fn upload_blocks(
        &self,
        id: Uuid,
        version: u64,
        shape: Shape,
    ) -> Result<BlockStream, StoreError>;

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

/// Connects to `url` (`sqlite://…` or `postgres://…`) and applies the
/// migrations.
pub async fn connect(url: &str) -> anyhow::Result<std::sync::Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(std::sync::Arc::new(PostgresStore::connect(url).await?))
    } else if url.starts_with("sqlite:") {
        Ok(std::sync::Arc::new(SqliteStore::connect(url).await?))
    } else {
        anyhow::bail!("DATABASE_URL must start with sqlite: or postgres:// (got {url:?})")
    }
}
