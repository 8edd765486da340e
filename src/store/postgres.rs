//! The PostgreSQL backend, for several dpgate replicas sharing one database.
//! Writers lock the dataset's row (`SELECT … FOR UPDATE`) for the length of
//! their transaction: debits of one dataset serialise across every process,
//! while other datasets proceed in parallel. Uploads stream in with binary
//! `COPY`.

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Postgres, Row, Transaction};
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

/// The Postgres store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database) if database.is_unique_violation())
}

/// The dataset by public id, its row locked if `lock`.
async fn dataset_in(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    lock: bool,
) -> Result<Option<(i64, DatasetRecord)>, StoreError> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    let sql = format!("SELECT pk, {DATASET_COLUMNS} FROM datasets WHERE id = $1{lock}");
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
    conn: &mut sqlx::PgConnection,
    pk: i64,
    entry: &LedgerRecord,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO ledger (dataset_pk, {LEDGER_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
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

/// Rows in PostgreSQL's binary COPY format (header, tuples, trailer).
fn copy_binary(pk: i64, rows: &[RowRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + rows.len() * 200);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&[0; 8]); // flags and header-extension length
    let field = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    for row in rows {
        out.extend_from_slice(&6i16.to_be_bytes());
        field(&mut out, &pk.to_be_bytes());
        field(&mut out, row.row_id.as_bytes());
        field(&mut out, &i16::from(row.label).to_be_bytes());
        field(&mut out, &row.features);
        field(&mut out, &row.measures);
        field(&mut out, &row.dimensions);
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}

impl PostgresStore {
    /// Connects to `url` and migrates the database.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect(url)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(PostgresStore { pool })
    }

    /// The pool, for tests that tamper with the database directly.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

struct PostgresIngest {
    tx: Transaction<'static, Postgres>,
    pk: i64,
    id: Uuid,
}

#[async_trait]
impl IngestSession for PostgresIngest {
    async fn existing(&mut self, row_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar(
                "SELECT row_id FROM rows WHERE dataset_pk = $1 AND row_id = ANY($2)",
            )
            .bind(self.pk)
            .bind(row_ids)
            .fetch_all(&mut *self.tx)
            .await?,
        )
    }

    async fn insert(&mut self, rows: &[RowRecord]) -> Result<(), StoreError> {
        let mut copy = self
            .tx
            .copy_in_raw(
                "COPY rows (dataset_pk, row_id, label, features, measures, dimensions) \
                 FROM STDIN (FORMAT binary)",
            )
            .await?;
        copy.send(copy_binary(self.pk, rows)).await?;
        copy.finish().await.map_err(|error| {
            if is_unique_violation(&error) {
                StoreError::Conflict("a row id of this upload is already stored".to_owned())
            } else {
                error.into()
            }
        })?;
        Ok(())
    }

    async fn commit(
        mut self: Box<Self>,
        rows: u64,
        stats: &WalrStats,
    ) -> Result<DatasetRecord, StoreError> {
        let (_, mut record) = dataset_in(&mut self.tx, self.id, false)
            .await?
            .ok_or_else(|| StoreError::Conflict("the dataset vanished".to_owned()))?;
        record.n_rows += rows;
        record.stats.merge(stats);
        sqlx::query("UPDATE datasets SET n_rows = $1, stats = $2 WHERE pk = $3")
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
impl Store for PostgresStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn signing_key(&self, fresh: &str) -> Result<Option<String>, StoreError> {
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

    async fn create_dataset(&self, dataset: &NewDataset) -> Result<(), StoreError> {
        let record = &dataset.record;
        let mut tx = self.pool.begin().await?;
        let sql = format!(
            "INSERT INTO datasets ({DATASET_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING pk"
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
        Ok(dataset_in(&mut conn, id, false)
            .await?
            .map(|(_, record)| record))
    }

    async fn begin_ingest(&self, id: Uuid) -> Result<Box<dyn IngestSession>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let pk: Option<i64> =
            sqlx::query_scalar("SELECT pk FROM datasets WHERE id = $1 FOR UPDATE")
                .bind(id.to_string())
                .fetch_optional(&mut *tx)
                .await?;
        let pk = pk.ok_or_else(|| StoreError::Conflict("the dataset vanished".to_owned()))?;
        Ok(Box::new(PostgresIngest { tx, pk, id }))
    }

    async fn walr_rows(&self, id: Uuid) -> Result<Vec<(u8, Vec<f32>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.label, r.features FROM rows r JOIN datasets d ON d.pk = r.dataset_pk \
             WHERE d.id = $1 ORDER BY r.row_id",
        )
        .bind(id.to_string())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let label: i16 = row.try_get("label")?;
                let features: Vec<u8> = row.try_get("features")?;
                Ok((u8::from(label == 1), floats(&features)))
            })
            .collect()
    }

    async fn debit(&self, debit: &Debit, decide: Decide) -> Result<DebitOutcome, StoreError> {
        let mut tx = self.pool.begin().await?;
        let Some((pk, record)) = dataset_in(&mut tx, debit.dataset, true).await? else {
            return Ok(DebitOutcome::NoDataset);
        };
        if let Some(key) = &debit.idempotency_key {
            let sql = format!(
                "SELECT {RELEASE_COLUMNS} FROM releases r JOIN datasets d ON d.pk = r.dataset_pk \
                 WHERE r.dataset_pk = $1 AND r.analyst = $2 AND r.idempotency_key = $3"
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
            "SELECT seq, hash FROM ledger WHERE dataset_pk = $1 ORDER BY seq DESC LIMIT 1",
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
             request_hash, request, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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
        sqlx::query("UPDATE datasets SET composition = $1 WHERE pk = $2")
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
        sqlx::query("UPDATE releases SET response = $1 WHERE id = $2 AND response IS NULL")
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
             WHERE d.id = $1 AND r.id = $2"
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
             WHERE d.id = $1 AND r.analyst = $2 AND r.idempotency_key = $3"
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
             WHERE d.id = $1 AND l.seq > $2 ORDER BY l.seq LIMIT $3"
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
            "INSERT INTO revoked_tokens (jti, revoked_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(jti)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn is_revoked(&self, jti: &str) -> Result<bool, StoreError> {
        let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM revoked_tokens WHERE jti = $1")
            .bind(jti)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }
}
