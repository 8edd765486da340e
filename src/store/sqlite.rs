//! The embedded SQLite backend (the default): one file in WAL mode. Every
//! write transaction starts with `BEGIN IMMEDIATE`, taking the database's
//! write lock up front, so concurrent debits serialise instead of failing on
//! a lock upgrade; they wait up to the busy timeout.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::StoreError;
use super::common::common_store;

/// How long a writer waits for the write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(120);

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    debits: std::sync::Arc<super::batches::DebitQueue>,
    finished: std::sync::Arc<super::batches::FinishQueue>,
}

impl SqliteStore {
    /// The write lock is the whole database's, taken by `begin_write`.
    const LOCK: &'static str = "";

    /// Opens (creating if missing) the database at `url` and migrates it.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
        let store = SqliteStore {
            pool,
            debits: Default::default(),
            finished: Default::default(),
        };
        upgrade_row_storage(&store).await?;
        Ok(store)
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Keys sit in a file beside the database instead.
    async fn stored_signing_key(&self, _fresh: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    /// `BEGIN IMMEDIATE` already keeps every other writer out.
    const UPGRADE_LOCK: &'static str = "SELECT 1";
    const HAS_LEGACY_ROWS: &'static str =
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rows')";
}

common_store!(SqliteStore, Sqlite);
