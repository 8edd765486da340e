//! The embedded SQLite backend (the default): one file in WAL mode. Every
//! write transaction starts with `BEGIN IMMEDIATE`, taking the database's
//! write lock up front, so concurrent debits serialise instead of failing on
//! a lock upgrade; they wait up to the busy timeout.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Row, Sqlite, SqlitePool, Transaction};
use uuid::Uuid;

use super::records::{
    DATASET_COLUMNS, DatasetRow, LEDGER_COLUMNS, LedgerRow, RELEASE_COLUMNS, ReleaseRow,
    accountant_name, event_name, floats, opening_entry, signed, to_json, unit_name,
};
use super::{
    Debit, DebitOutcome, Decide, IngestSession, NewDataset, Store, StoreError, StoredRelease,
};
use crate::dataset::{DatasetRecord, WalrStats};
use crate::ingest::RowRecord;
use crate::ledger::{LedgerRecord, NewEntry};

/// How long a writer waits for the write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(120);
/// Rows per INSERT statement (6 parameters each; SQLite allows 32766).
const INSERT_ROWS: usize = 200;

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database) if database.is_unique_violation())
}

async fn begin(pool: &SqlitePool) -> Result<Transaction<'static, Sqlite>, StoreError> {
    Ok(pool.begin_with("BEGIN IMMEDIATE").await?)
}

async fn dataset_in(
    conn: &mut sqlx::SqliteConnection,
    id: Uuid,
) -> Result<Option<(i64, DatasetRecord)>, StoreError> {
    let sql = format!("SELECT pk, {DATASET_COLUMNS} FROM datasets WHERE id = ?");
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(id.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    match row {
        None => Ok(None),
        Some(row) => {
            let pk: i64 = row.try_get("pk")?;
            let record = <DatasetRow as sqlx::FromRow<_>>::from_row(&row)?.into_record()?;
            Ok(Some((pk, record)))
        }
    }
}

async fn append_ledger(
    conn: &mut sqlx::SqliteConnection,
    pk: i64,
    entry: &LedgerRecord,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO ledger (dataset_pk, {LEDGER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    );
    sqlx::query(AssertSqlSafe(sql))
        .bind(pk)
        .bind(signed(entry.seq))
        .bind(event_name(entry.event))
        .bind(&entry.actor)
        .bind(entry.release_id.map(|id| id.to_string()))
        .bind(signed(entry.epsilon.units()))
        .bind(entry.delta.units().to_string())
        .bind(&entry.loss)
        .bind(&entry.details)
        .bind(&entry.created_at)
        .bind(&entry.prev_hash)
        .bind(&entry.hash)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

impl SqliteStore {
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

    /// The pool, for tests that tamper with the database directly.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

struct SqliteIngest {
    tx: Transaction<'static, Sqlite>,
    pk: i64,
    id: Uuid,
}

#[async_trait]
impl IngestSession for SqliteIngest {
    async fn existing(&mut self, row_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut found = Vec::new();
        for chunk in row_ids.chunks(INSERT_ROWS * 6) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql =
                format!("SELECT row_id FROM rows WHERE dataset_pk = ? AND row_id IN ({marks})");
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
            let values = vec!["(?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            let sql = format!(
                "INSERT INTO rows (dataset_pk, row_id, label, features, measures, dimensions) VALUES {values}"
            );
            let mut query = sqlx::query(AssertSqlSafe(sql));
            for row in chunk {
                query = query
                    .bind(self.pk)
                    .bind(&row.row_id)
                    .bind(i64::from(row.label))
                    .bind(&row.features)
                    .bind(&row.measures)
                    .bind(&row.dimensions);
            }
            query.execute(&mut *self.tx).await.map_err(|error| {
                if is_unique_violation(&error) {
                    StoreError::Conflict("a row id of this upload is already stored".to_owned())
                } else {
                    error.into()
                }
            })?;
        }
        Ok(())
    }

    async fn commit(
        mut self: Box<Self>,
        rows: u64,
        stats: &WalrStats,
    ) -> Result<DatasetRecord, StoreError> {
        let (_, mut record) = dataset_in(&mut self.tx, self.id)
            .await?
            .ok_or_else(|| StoreError::Conflict("the dataset vanished".to_owned()))?;
        record.n_rows += rows;
        record.stats.merge(stats);
        sqlx::query("UPDATE datasets SET n_rows = ?, stats = ? WHERE pk = ?")
            .bind(signed(record.n_rows))
            .bind(to_json(&record.stats))
            .bind(self.pk)
            .execute(&mut *self.tx)
            .await?;
        self.tx.commit().await?;
        Ok(record)
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn signing_key(&self, _fresh: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    async fn create_dataset(&self, dataset: &NewDataset) -> Result<(), StoreError> {
        let record = &dataset.record;
        let mut tx = begin(&self.pool).await?;
        let sql = format!(
            "INSERT INTO datasets ({DATASET_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING pk"
        );
        let pk: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(record.id.to_string())
            .bind(&record.name)
            .bind(unit_name(record.privacy_unit))
            .bind(accountant_name(record.accountant))
            .bind(to_json(&record.schema))
            .bind(signed(record.budget.epsilon.units()))
            .bind(record.budget.delta.units().to_string())
            .bind(to_json(&record.composition))
            .bind(signed(record.n_rows))
            .bind(to_json(&record.stats))
            .bind(&record.created_at)
            .fetch_one(&mut *tx)
            .await
            .map_err(|error| {
                if is_unique_violation(&error) {
                    StoreError::Conflict(format!("a dataset named {:?} exists", record.name))
                } else {
                    error.into()
                }
            })?;
        append_ledger(&mut tx, pk, &opening_entry(dataset)).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn datasets(&self) -> Result<Vec<DatasetRecord>, StoreError> {
        let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets ORDER BY pk");
        let rows: Vec<DatasetRow> = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(DatasetRow::into_record).collect()
    }

    async fn dataset(&self, id: Uuid) -> Result<Option<DatasetRecord>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        Ok(dataset_in(&mut conn, id).await?.map(|(_, record)| record))
    }

    async fn begin_ingest(&self, id: Uuid) -> Result<Box<dyn IngestSession>, StoreError> {
        let mut tx = begin(&self.pool).await?;
        let pk: Option<i64> = sqlx::query_scalar("SELECT pk FROM datasets WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
        let pk = pk.ok_or_else(|| StoreError::Conflict("the dataset vanished".to_owned()))?;
        Ok(Box::new(SqliteIngest { tx, pk, id }))
    }

    async fn walr_rows(&self, id: Uuid) -> Result<Vec<(u8, Vec<f32>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.label, r.features FROM rows r JOIN datasets d ON d.pk = r.dataset_pk \
             WHERE d.id = ? ORDER BY r.row_id",
        )
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let label: i64 = row.try_get("label")?;
                let features: Vec<u8> = row.try_get("features")?;
                Ok((u8::from(label == 1), floats(&features)))
            })
            .collect()
    }

    async fn debit(&self, debit: &Debit, decide: Decide) -> Result<DebitOutcome, StoreError> {
        let mut tx = begin(&self.pool).await?;
        let Some((pk, record)) = dataset_in(&mut tx, debit.dataset).await? else {
            return Ok(DebitOutcome::NoDataset);
        };
        if let Some(key) = &debit.idempotency_key {
            let sql = format!(
                "SELECT {RELEASE_COLUMNS} FROM releases r JOIN datasets d ON d.pk = r.dataset_pk \
                 WHERE r.dataset_pk = ? AND r.analyst = ? AND r.idempotency_key = ?"
            );
            let existing: Option<ReleaseRow> = sqlx::query_as(AssertSqlSafe(sql))
                .bind(pk)
                .bind(&debit.analyst)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some(existing) = existing {
                return Ok(DebitOutcome::Replay(existing.into_release()?));
            }
        }
        if record.n_rows != debit.expected_rows {
            return Ok(DebitOutcome::Stale);
        }
        let Some(composition) = decide(&record) else {
            return Ok(DebitOutcome::Refused(record));
        };
        let head: Option<(i64, String)> = sqlx::query_as(
            "SELECT seq, hash FROM ledger WHERE dataset_pk = ? ORDER BY seq DESC LIMIT 1",
        )
        .bind(pk)
        .fetch_optional(&mut *tx)
        .await?;
        let previous = head
            .as_ref()
            .map(|(seq, hash)| (*seq as u64, hash.as_str()));
        let entry = NewEntry::release(
            debit.release_id,
            &debit.analyst,
            &debit.charge,
            &debit.created_at,
        )
        .chain(&debit.dataset, previous);
        append_ledger(&mut tx, pk, &entry).await?;
        sqlx::query(
            "INSERT INTO releases (id, dataset_pk, ledger_seq, analyst, kind, idempotency_key, \
             request_hash, request, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(debit.release_id.to_string())
        .bind(pk)
        .bind(signed(entry.seq))
        .bind(&debit.analyst)
        .bind(&debit.kind)
        .bind(&debit.idempotency_key)
        .bind(&debit.request_hash)
        .bind(&debit.request)
        .bind(&debit.created_at)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE datasets SET composition = ? WHERE pk = ?")
            .bind(to_json(&composition))
            .bind(pk)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(DebitOutcome::Debited(DatasetRecord {
            composition,
            ..record
        }))
    }

    async fn complete_release(&self, release: Uuid, response: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE releases SET response = ? WHERE id = ? AND response IS NULL")
            .bind(response)
            .bind(release.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn release(
        &self,
        dataset: Uuid,
        release: Uuid,
    ) -> Result<Option<StoredRelease>, StoreError> {
        let sql = format!(
            "SELECT {RELEASE_COLUMNS} FROM releases r JOIN datasets d ON d.pk = r.dataset_pk \
             WHERE d.id = ? AND r.id = ?"
        );
        let row: Option<ReleaseRow> = sqlx::query_as(AssertSqlSafe(sql))
            .bind(dataset.to_string())
            .bind(release.to_string())
            .fetch_optional(&self.pool)
            .await?;
        row.map(ReleaseRow::into_release).transpose()
    }

    async fn release_by_key(
        &self,
        dataset: Uuid,
        analyst: &str,
        key: &str,
    ) -> Result<Option<StoredRelease>, StoreError> {
        let sql = format!(
            "SELECT {RELEASE_COLUMNS} FROM releases r JOIN datasets d ON d.pk = r.dataset_pk \
             WHERE d.id = ? AND r.analyst = ? AND r.idempotency_key = ?"
        );
        let row: Option<ReleaseRow> = sqlx::query_as(AssertSqlSafe(sql))
            .bind(dataset.to_string())
            .bind(analyst)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        row.map(ReleaseRow::into_release).transpose()
    }

    async fn ledger(
        &self,
        dataset: Uuid,
        after: Option<u64>,
        limit: u32,
    ) -> Result<Vec<LedgerRecord>, StoreError> {
        let columns = LEDGER_COLUMNS.replace(", ", ", l.");
        let sql = format!(
            "SELECT l.{columns} FROM ledger l JOIN datasets d ON d.pk = l.dataset_pk \
             WHERE d.id = ? AND l.seq > ? ORDER BY l.seq LIMIT ?"
        );
        let rows: Vec<LedgerRow> = sqlx::query_as(AssertSqlSafe(sql))
            .bind(dataset.to_string())
            .bind(after.map_or(-1, signed))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter().map(LedgerRow::into_record).collect()
    }

    async fn revoke(&self, jti: &str, at: &str) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO revoked_tokens (jti, revoked_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(jti)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn is_revoked(&self, jti: &str) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar("SELECT 1 FROM revoked_tokens WHERE jti = ?")
            .bind(jti)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }
}
