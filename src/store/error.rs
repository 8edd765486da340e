//! How a storage operation fails.

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
