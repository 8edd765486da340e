//! The embedded SQLite backend (the default): one file in WAL mode. Every
//! write transaction starts with `BEGIN IMMEDIATE`, taking the database's
//! write lock up front, so concurrent debits serialise instead of failing on
//! a lock upgrade; they wait up to the busy timeout.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use super::common::common_store;
use super::records::signed;
use super::{IngestSession, StoreError};
use crate::dataset::{DatasetRecord, WalrStats};
use crate::ingest::RowRecord;

/// How long a writer waits for the write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(120);
/// Rows per INSERT statement (7 parameters each; SQLite allows 32766).
const INSERT_ROWS: usize = 200;

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
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
        Ok(SqliteStore { pool })
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Keys sit in a file beside the database instead.
    async fn stored_signing_key(&self, _fresh: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    async fn open_ingest(&self, id: Uuid) -> Result<Box<dyn IngestSession>, StoreError> {
        let mut tx = self.begin_write().await?;
        let (pk, record) = dataset_in(&mut tx, id, false)
            .await?
            .ok_or_else(|| StoreError::Conflict("the dataset vanished".to_owned()))?;
        let version = signed("row count", record.n_rows)?;
        Ok(Box::new(SqliteIngest {
            tx,
            pk,
            id,
            version,
        }))
    }
}

common_store!(SqliteStore, Sqlite);

/// An upload: multi-row INSERTs inside one `BEGIN IMMEDIATE` transaction.
struct SqliteIngest {
    tx: Transaction<'static, Sqlite>,
    pk: i64,
    id: Uuid,
    /// The dataset version its rows are stored under.
    version: i64,
}

#[async_trait]
impl IngestSession for SqliteIngest {
    async fn existing(&mut self, row_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        for chunk in row_ids.chunks(INSERT_ROWS * 7) {
            let marks: Vec<String> = (2..chunk.len() + 2).map(|at| format!("${at}")).collect();
            let sql = format!(
                "SELECT row_id FROM rows WHERE dataset_pk = $1 AND row_id IN ({})",
                marks.join(", ")
            );
            let mut query = sqlx::query_scalar(AssertSqlSafe(sql)).bind(self.pk);
            for row_id in chunk {
                query = query.bind(*row_id);
            }
            found.extend(query.fetch_all(&mut *self.tx).await?);
        }
        Ok(found)
    }

    async fn insert(&mut self, rows: &[RowRecord]) -> Result<(), StoreError> {
        for chunk in rows.chunks(INSERT_ROWS) {
            let values = vec!["(?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            let sql = format!(
                "INSERT INTO rows (dataset_pk, row_id, version, label, features, measures, dimensions) VALUES {values}"
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for row in chunk {
                query = query
                    .bind(self.pk)
                    .bind(&row.row_id)
                    .bind(self.version)
                    .bind(i64::from(row.label))
                    .bind(&row.features)
                    .bind(&row.measures)
                    .bind(&row.dimensions);
            }
            query.execute(&mut *self.tx).await.map_err(|error| {
                map_unique(error, || {
                    "a row id of this upload is already stored".to_owned()
                })
            })?;
        }
        Ok(())
    }

    async fn commit(
        mut self: Box<Self>,
        rows: u64,
        stats: &WalrStats,
    ) -> Result<DatasetRecord, StoreError> {
        let record = add_upload(&mut self.tx, self.id, rows, stats).await?;
        self.tx.commit().await?;
        Ok(record)
    }
}
