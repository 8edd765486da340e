//! The PostgreSQL backend, for several dpgate replicas sharing one database.
//! Writers lock the dataset's row (`SELECT … FOR UPDATE`) for the length of
//! their transaction: debits of one dataset serialise across every process,
//! while other datasets proceed in parallel. Uploads stream in with binary
//! `COPY`.

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::common::common_store;
use super::records::signed;
use super::{IngestSession, StoreError};
use crate::dataset::{DatasetRecord, WalrStats};
use crate::ingest::RowRecord;

/// The Postgres store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

/// The header of PostgreSQL's binary COPY format: signature, flags, and
/// header-extension length.
const COPY_HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The trailer: a tuple with field count −1.
const COPY_TRAILER: [u8; 2] = (-1i16).to_be_bytes();

/// Rows as binary COPY tuples, stored under dataset version `version`.
fn copy_tuples(pk: i64, version: i64, rows: &[RowRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows.len() * 200);
    let field = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    for row in rows {
        out.extend_from_slice(&7i16.to_be_bytes());
        field(&mut out, &pk.to_be_bytes());
        field(&mut out, row.row_id.as_bytes());
        field(&mut out, &version.to_be_bytes());
        field(&mut out, &i16::from(row.label).to_be_bytes());
        field(&mut out, &row.features);
        field(&mut out, &row.measures);
        field(&mut out, &row.dimensions);
    }
    out
}

/// Uploads of at least this many rows are followed by a vacuum.
const VACUUM_AFTER_ROWS: u64 = 50_000;

/// Vacuums and analyses `rows` in the background. Rows fresh from COPY
/// carry no hint bits: the first query to read them would check each one's
/// transaction and rewrite every page (21 s for 1M × 32 on this project's
/// test machine), so the first release after an upload would pay for it.
/// The vacuum pays instead, off any request; it skips pages already
/// all-visible, so it costs about the new rows.
async fn vacuum(pool: PgPool) {
    let started = std::time::Instant::now();
    match sqlx::query("VACUUM (ANALYZE) rows").execute(&pool).await {
        Ok(_) => tracing::info!(seconds = started.elapsed().as_secs_f64(), "rows vacuumed"),
        Err(error) => tracing::warn!(%error, "vacuuming rows after an upload failed"),
    }
}

impl PostgresStore {
    /// Locks the dataset's row until the transaction ends.
    const LOCK: &'static str = " FOR UPDATE";

    /// Connects to `url` and migrates the database.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect(url)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(PostgresStore { pool })
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// Kept in the database, so every replica signs with the same key.
    async fn stored_signing_key(&self, fresh: &str) -> Result<Option<String>, StoreError> {
        sqlx::query(
            "INSERT INTO settings (name, value) VALUES ('jwt_signing_key', $1) ON CONFLICT DO NOTHING",
        )
        .bind(fresh)
        .execute(&self.pool)
        .await?;
        Ok(Some(
            sqlx::query_scalar("SELECT value FROM settings WHERE name = 'jwt_signing_key'")
                .fetch_one(&self.pool)
                .await?,
        ))
    }

    async fn open_ingest(&self, id: Uuid) -> Result<Box<dyn IngestSession>, StoreError> {
        let mut tx = self.begin_write().await?;
        let (pk, record) = dataset_in(&mut tx, id, true)
            .await?
            .ok_or_else(|| StoreError::Conflict("the dataset vanished".to_owned()))?;
        let version = signed("row count", record.n_rows)?;
        let (messages, receiver) = tokio::sync::mpsc::channel(4);
        Ok(Box::new(PostgresIngest {
            pool: self.pool.clone(),
            pk,
            version,
            messages,
            task: tokio::spawn(upload_task(tx, id, receiver)),
        }))
    }
}

common_store!(PostgresStore, Postgres);

/// What an upload's session tells the task that owns its transaction.
enum Upload {
    /// Binary COPY tuples to stream in.
    Tuples(Vec<u8>),
    /// End the COPY, add the counts and sums, commit.
    Commit { rows: u64, stats: WalrStats },
}

/// Owns an upload's transaction: one COPY stays open for the whole upload,
/// so Postgres stores rows while the parser reads the next ones. If the
/// session is dropped before `Commit`, the COPY is abandoned and the
/// transaction rolled back.
async fn upload_task(
    mut tx: Transaction<'static, Postgres>,
    id: Uuid,
    mut messages: tokio::sync::mpsc::Receiver<Upload>,
) -> Result<DatasetRecord, StoreError> {
    let mut copy = tx
        .copy_in_raw(
            "COPY rows (dataset_pk, row_id, version, label, features, measures, dimensions) \
             FROM STDIN (FORMAT binary)",
        )
        .await?;
    copy.send(COPY_HEADER).await?;
    let (rows, stats) = loop {
        match messages.recv().await {
            Some(Upload::Tuples(tuples)) => {
                copy.send(tuples).await?;
            }
            Some(Upload::Commit { rows, stats }) => break (rows, stats),
            None => {
                copy.abort("the upload was abandoned").await?;
                return Err(StoreError::Conflict("the upload was abandoned".to_owned()));
            }
        }
    };
    copy.send(&COPY_TRAILER[..]).await?;
    copy.finish().await.map_err(|error| {
        map_unique(error, || {
            "a row id of this upload is already stored".to_owned()
        })
    })?;
    let record = add_upload(&mut tx, id, rows, &stats).await?;
    tx.commit().await?;
    Ok(record)
}

struct PostgresIngest {
    pool: PgPool,
    pk: i64,
    /// The dataset version its rows are stored under.
    version: i64,
    messages: tokio::sync::mpsc::Sender<Upload>,
    task: tokio::task::JoinHandle<Result<DatasetRecord, StoreError>>,
}

impl PostgresIngest {
    /// The task's own error, once it has stopped listening.
    async fn failure(&mut self) -> StoreError {
        match (&mut self.task).await {
            Ok(Err(error)) => error,
            Ok(Ok(_)) => StoreError::Conflict("the upload already ended".to_owned()),
            Err(error) => StoreError::Conflict(format!("the upload task failed: {error}")),
        }
    }
}

#[async_trait]
impl IngestSession for PostgresIngest {
    /// Read on a connection of its own: the COPY occupies the upload's. The
    /// upload holds the dataset's row lock, so no other writer can add rows
    /// to it meanwhile.
    async fn existing(&mut self, row_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar(
                "SELECT row_id FROM rows WHERE dataset_pk = $1 AND row_id = ANY($2)",
            )
            .bind(self.pk)
            .bind(row_ids)
            .fetch_all(&self.pool)
            .await?,
        )
    }

    async fn insert(&mut self, rows: &[RowRecord]) -> Result<(), StoreError> {
        let tuples = Upload::Tuples(copy_tuples(self.pk, self.version, rows));
        if self.messages.send(tuples).await.is_err() {
            return Err(self.failure().await);
        }
        Ok(())
    }

    async fn commit(
        mut self: Box<Self>,
        rows: u64,
        stats: &WalrStats,
    ) -> Result<DatasetRecord, StoreError> {
        let commit = Upload::Commit {
            rows,
            stats: stats.clone(),
        };
        if self.messages.send(commit).await.is_err() {
            return Err(self.failure().await);
        }
        let record = match (&mut self.task).await {
            Ok(result) => result?,
            Err(error) => {
                return Err(StoreError::Conflict(format!(
                    "the upload task failed: {error}"
                )));
            }
        };
        if rows >= VACUUM_AFTER_ROWS {
            tokio::spawn(vacuum(self.pool.clone()));
        }
        Ok(record)
    }
}
