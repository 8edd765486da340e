//! Storage: one trait, one implementation per backend (SQLite, Postgres),
//! each with its own SQL and migrations. Nothing outside this module writes
//! SQL.
//!
//! The one transaction that matters is [`Store::debit`]: it locks the
//! dataset's budget row (SQLite `BEGIN IMMEDIATE`, Postgres `SELECT … FOR
//! UPDATE`), reads what the decision needs, lets the domain decide
//! ([`crate::domain::debit`], with the caller's admission rule) whether the
//! release fits, and if so appends the hash-chained ledger entry, records
//! the release and stores the new composition, all or nothing. Debits of
//! one dataset that arrive together share one such transaction, each
//! decided in turn; finished
//! releases are stored in batches too (`batches`). A release that also
//! reads source datasets gets a transaction of its own that locks every
//! dataset it debits in id order (so two such releases cannot deadlock)
//! and debits all or none.
//! Noise is drawn by the caller only after this commits, never inside it.

mod batches;
pub mod blocks;
mod common;
mod error;
mod models;
mod postgres;
mod records;
mod sqlite;
mod traits;

pub use batches::Finished;
pub use error::StoreError;
pub use models::{BudgetOutcome, CallClaim, Files, NewDataset, StoredBlocks, StoredCall};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use traits::{IngestSession, Store};

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
