//! The queries both backends share. The SQL is written once, with `$N`
//! placeholders (which SQLite accepts as well as Postgres), and
//! [`common_store!`] expands it for one sqlx database type, generating the
//! `Store` implementation around four backend hooks every backend defines as
//! inherent items:
//!
//! - `LOCK`: the clause that locks a dataset row for the transaction;
//! - `begin_write()`: a transaction that may write;
//! - `stored_signing_key(fresh)`: see [`super::Store::signing_key`];
//! - `open_ingest(id)`: see [`super::Store::begin_ingest`].

/// Expands the shared `Store` implementation for `$store` over `$db`.
macro_rules! common_store {
    ($store:ty, $db:ty) => {
        type Connection = <$db as sqlx::Database>::Connection;

        /// A release by dataset id, analyst and idempotency key.
        const BY_KEY: &str = "d.id = $1 AND r.analyst = $2 AND r.idempotency_key = $3";

        /// The dataset by public id (row-locked with `LOCK` when `lock`).
        async fn dataset_in(
            conn: &mut Connection,
            id: uuid::Uuid,
            lock: bool,
        ) -> Result<Option<(i64, $crate::dataset::DatasetRecord)>, $crate::store::StoreError> {
            use sqlx::Row;
            let lock = if lock { <$store>::LOCK } else { "" };
            let sql = format!(
                "SELECT pk, {} FROM datasets WHERE id = $1{lock}",
                $crate::store::records::DATASET_COLUMNS
            );
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id.to_string())
                .fetch_optional(&mut *conn)
                .await?;
            match row {
                None => Ok(None),
                Some(row) => {
                    let pk: i64 = row.try_get("pk")?;
                    let record = <$crate::store::records::DatasetRow as sqlx::FromRow<_>>::from_row(&row)?
                        .into_record()?;
                    Ok(Some((pk, record)))
                }
            }
        }

        async fn append_ledger(
            conn: &mut Connection,
            pk: i64,
            entry: &$crate::ledger::LedgerRecord,
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::{LEDGER_COLUMNS, event_name, signed};
            let sql = format!(
                "INSERT INTO ledger (dataset_pk, {LEDGER_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
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

        /// The release matching `condition` (on `r` and `d`) and its binds.
        async fn find_release<'a>(
            executor: impl sqlx::Executor<'a, Database = $db>,
            condition: &str,
            binds: [&str; 3],
        ) -> Result<Option<$crate::store::StoredRelease>, $crate::store::StoreError> {
            let sql = format!(
                "SELECT {} FROM releases r JOIN datasets d ON d.pk = r.dataset_pk WHERE {condition}",
                $crate::store::records::RELEASE_COLUMNS
            );
            let mut query = sqlx::query_as::<_, $crate::store::records::ReleaseRow>(
                sqlx::AssertSqlSafe(sql),
            );
            for bind in binds.into_iter().filter(|bind| !bind.is_empty()) {
                query = query.bind(bind.to_owned());
            }
            query
                .fetch_optional(executor)
                .await?
                .map($crate::store::records::ReleaseRow::into_release)
                .transpose()
        }

        fn map_unique(
            error: sqlx::Error,
            conflict: impl FnOnce() -> String,
        ) -> $crate::store::StoreError {
            match &error {
                sqlx::Error::Database(database) if database.is_unique_violation() => {
                    $crate::store::StoreError::Conflict(conflict())
                }
                _ => error.into(),
            }
        }

        /// Adds an upload's rows and sums to the dataset (inside its
        /// transaction).
        async fn add_upload(
            conn: &mut Connection,
            id: uuid::Uuid,
            rows: u64,
            stats: &$crate::dataset::WalrStats,
        ) -> Result<$crate::dataset::DatasetRecord, $crate::store::StoreError> {
            use $crate::store::records::{signed, to_json};
            let (pk, mut record) = dataset_in(&mut *conn, id, false)
                .await?
                .ok_or_else(|| $crate::store::StoreError::Conflict("the dataset vanished".to_owned()))?;
            record.n_rows += rows;
            record.stats.merge(stats);
            sqlx::query("UPDATE datasets SET n_rows = $1, stats = $2 WHERE pk = $3")
                .bind(signed(record.n_rows))
                .bind(to_json(&record.stats))
                .bind(pk)
                .execute(&mut *conn)
                .await?;
            Ok(record)
        }

        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            async fn ping(&self) -> Result<(), $crate::store::StoreError> {
                sqlx::query("SELECT 1").execute(&self.pool).await?;
                Ok(())
            }

            async fn signing_key(&self, fresh: &str) -> Result<Option<String>, $crate::store::StoreError> {
                self.stored_signing_key(fresh).await
            }

            async fn create_dataset(
                &self,
                dataset: &$crate::store::NewDataset,
            ) -> Result<(), $crate::store::StoreError> {
                use $crate::store::records::{
                    DATASET_COLUMNS, accountant_name, opening_entry, signed, to_json, unit_name,
                };
                let record = &dataset.record;
                let mut tx = self.begin_write().await?;
                let sql = format!(
                    "INSERT INTO datasets ({DATASET_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING pk"
                );
                let pk: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
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
                    .map_err(|error| map_unique(error, || format!("a dataset named {:?} exists", record.name)))?;
                append_ledger(&mut tx, pk, &opening_entry(dataset)).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn datasets(&self) -> Result<Vec<$crate::dataset::DatasetRecord>, $crate::store::StoreError> {
                use $crate::store::records::{DATASET_COLUMNS, DatasetRow};
                let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets ORDER BY pk");
                let rows: Vec<DatasetRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .fetch_all(&self.pool)
                    .await?;
                rows.into_iter().map(DatasetRow::into_record).collect()
            }

            async fn dataset(
                &self,
                id: uuid::Uuid,
            ) -> Result<Option<$crate::dataset::DatasetRecord>, $crate::store::StoreError> {
                let mut conn = self.pool.acquire().await?;
                Ok(dataset_in(&mut conn, id, false).await?.map(|(_, record)| record))
            }

            async fn begin_ingest(
                &self,
                id: uuid::Uuid,
            ) -> Result<Box<dyn $crate::store::IngestSession>, $crate::store::StoreError> {
                self.open_ingest(id).await
            }

            async fn walr_rows(&self, id: uuid::Uuid) -> Result<Vec<(u8, Vec<f32>)>, $crate::store::StoreError> {
                let rows: Vec<(i32, Vec<u8>)> = sqlx::query_as(
                    "SELECT CAST(r.label AS INTEGER), r.features FROM rows r \
                     JOIN datasets d ON d.pk = r.dataset_pk WHERE d.id = $1 ORDER BY r.row_id",
                )
                .bind(id.to_string())
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .iter()
                    .map(|(label, features)| (u8::from(*label == 1), $crate::store::records::floats(features)))
                    .collect())
            }

            async fn debit(
                &self,
                debit: &$crate::store::Debit,
                decide: $crate::store::Decide,
            ) -> Result<$crate::store::DebitOutcome, $crate::store::StoreError> {
                use $crate::store::DebitOutcome;
                use $crate::store::records::{signed, to_json};
                let mut tx = self.begin_write().await?;
                let Some((pk, record)) = dataset_in(&mut tx, debit.dataset, true).await? else {
                    return Ok(DebitOutcome::NoDataset);
                };
                if let Some(key) = &debit.idempotency_key {
                    let dataset = debit.dataset.to_string();
                    let existing = find_release(&mut *tx, BY_KEY, [&dataset, &debit.analyst, key]).await?;
                    if let Some(existing) = existing {
                        return Ok(DebitOutcome::Replay(existing));
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
                let previous = head.as_ref().map(|(seq, hash)| (*seq as u64, hash.as_str()));
                let entry = $crate::ledger::NewEntry::release(
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
                Ok(DebitOutcome::Debited($crate::dataset::DatasetRecord { composition, ..record }))
            }

            async fn complete_release(&self, release: uuid::Uuid, response: &str) -> Result<(), $crate::store::StoreError> {
                sqlx::query("UPDATE releases SET response = $1 WHERE id = $2 AND response IS NULL")
                    .bind(response)
                    .bind(release.to_string())
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn release(
                &self,
                dataset: uuid::Uuid,
                release: uuid::Uuid,
            ) -> Result<Option<$crate::store::StoredRelease>, $crate::store::StoreError> {
                let (dataset, release) = (dataset.to_string(), release.to_string());
                find_release(&self.pool, "d.id = $1 AND r.id = $2", [&dataset, &release, ""]).await
            }

            async fn release_by_key(
                &self,
                dataset: uuid::Uuid,
                analyst: &str,
                key: &str,
            ) -> Result<Option<$crate::store::StoredRelease>, $crate::store::StoreError> {
                let dataset = dataset.to_string();
                find_release(&self.pool, BY_KEY, [&dataset, analyst, key]).await
            }

            async fn ledger(
                &self,
                dataset: uuid::Uuid,
                after: Option<u64>,
                limit: u32,
            ) -> Result<Vec<$crate::ledger::LedgerRecord>, $crate::store::StoreError> {
                use $crate::store::records::{LEDGER_COLUMNS, LedgerRow, signed};
                let columns = LEDGER_COLUMNS.replace(", ", ", l.");
                let sql = format!(
                    "SELECT l.{columns} FROM ledger l JOIN datasets d ON d.pk = l.dataset_pk \
                     WHERE d.id = $1 AND l.seq > $2 ORDER BY l.seq LIMIT $3"
                );
                let rows: Vec<LedgerRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(dataset.to_string())
                    .bind(after.map_or(-1, signed))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.into_iter().map(LedgerRow::into_record).collect()
            }

            async fn revoke(&self, jti: &str, at: &str) -> Result<(), $crate::store::StoreError> {
                sqlx::query("INSERT INTO revoked_tokens (jti, revoked_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                    .bind(jti)
                    .bind(at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn is_revoked(&self, jti: &str) -> Result<bool, $crate::store::StoreError> {
                let found: Option<i32> = sqlx::query_scalar("SELECT CAST(1 AS INTEGER) FROM revoked_tokens WHERE jti = $1")
                    .bind(jti)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(found.is_some())
            }
        }
    };
}

pub(super) use common_store;
