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
                .bind(signed("ledger sequence number", entry.seq)?)
                .bind(event_name(entry.event))
                .bind(&entry.actor)
                .bind(entry.release_id.map(|id| id.to_string()))
                .bind(signed("ledger epsilon", entry.epsilon.units())?)
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

        /// Chains `entries` after the dataset's last ledger entry and
        /// stores them.
        async fn append_entries(
            conn: &mut Connection,
            pk: i64,
            dataset: &uuid::Uuid,
            entries: Vec<$crate::ledger::NewEntry>,
        ) -> Result<Vec<$crate::ledger::LedgerRecord>, $crate::store::StoreError> {
            let head: Option<(i64, String)> = sqlx::query_as(
                "SELECT seq, hash FROM ledger WHERE dataset_pk = $1 ORDER BY seq DESC LIMIT 1",
            )
            .bind(pk)
            .fetch_optional(&mut *conn)
            .await?;
            let mut previous = head.map(|(seq, hash)| (seq as u64, hash));
            let mut chained = Vec::with_capacity(entries.len());
            for entry in entries {
                let record = entry.chain(
                    dataset,
                    previous.as_ref().map(|(seq, hash)| (*seq, hash.as_str())),
                )?;
                append_ledger(&mut *conn, pk, &record).await?;
                previous = Some((record.seq, record.hash.clone()));
                chained.push(record);
            }
            Ok(chained)
        }

        async fn analysts_in(
            conn: &mut Connection,
            pk: i64,
            only: Option<&str>,
        ) -> Result<Vec<$crate::budget::AnalystRecord>, $crate::store::StoreError> {
            use $crate::store::records::{ANALYST_COLUMNS, AnalystRow};
            let sql = format!(
                "SELECT {ANALYST_COLUMNS} FROM analysts WHERE dataset_pk = $1 \
                 AND ($2 IS NULL OR analyst = $2) ORDER BY analyst"
            );
            let rows: Vec<AnalystRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(pk)
                .bind(only)
                .fetch_all(&mut *conn)
                .await?;
            rows.into_iter().map(AnalystRow::into_record).collect()
        }

        /// Stores an analyst's cap and composition.
        async fn put_analyst(
            conn: &mut Connection,
            pk: i64,
            analyst: &$crate::budget::AnalystRecord,
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::{signed, to_json};
            let cap_epsilon = analyst
                .cap
                .map(|cap| signed("cap epsilon", cap.epsilon.units()))
                .transpose()?;
            sqlx::query(
                "INSERT INTO analysts (dataset_pk, analyst, cap_epsilon, cap_delta, composition) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (dataset_pk, analyst) DO UPDATE SET \
                 cap_epsilon = excluded.cap_epsilon, cap_delta = excluded.cap_delta, \
                 composition = excluded.composition",
            )
            .bind(pk)
            .bind(&analyst.analyst)
            .bind(cap_epsilon)
            .bind(analyst.cap.map(|cap| cap.delta.units().to_string()))
            .bind(to_json(&analyst.composition)?)
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

        /// Reads the snapshot at `version` into blocks on a task of its
        /// own, sending each as it fills (see `Store::row_blocks`). One
        /// query walks the primary key (dataset_pk, row_id), whose order is
        /// byte order on both databases (the `row_order` migration).
        async fn stream_blocks(
            pool: sqlx::Pool<$db>,
            id: uuid::Uuid,
            version: u64,
            shape: $crate::snapshots::Shape,
            outcomes: bool,
            block_rows: usize,
        ) -> Result<$crate::store::BlockStream, $crate::store::StoreError> {
            use futures_util::StreamExt;
            use sqlx::Row;
            use $crate::snapshots::Columns;
            let version = $crate::store::records::signed("snapshot version", version)?;
            let columns = if outcomes {
                "features, dimensions, CAST(label AS INTEGER) AS label, measures"
            } else {
                "features, dimensions"
            };
            let sql = format!(
                "SELECT row_id, {columns} FROM rows \
                 WHERE dataset_pk = (SELECT pk FROM datasets WHERE id = $1) AND version < $2 \
                 ORDER BY dataset_pk, row_id"
            );
            let (sender, receiver) = tokio::sync::mpsc::channel(1);
            tokio::spawn(async move {
                let mut rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(id.to_string())
                    .bind(version)
                    .fetch(&pool);
                let mut block = Columns::builder(shape, outcomes, block_rows);
                let mut sent = false;
                // The last row id of the blocks sent: order is checked across them too.
                let mut last = String::new();
                let corrupt = |detail: String| $crate::store::StoreError::Corrupt { what: "row", detail };
                while let Some(row) = rows.next().await {
                    let decoded = row.map_err($crate::store::StoreError::from).and_then(|row| {
                        let id: &str = row.try_get(0)?;
                        if block.is_empty() && id.as_bytes() <= last.as_bytes() {
                            return Err(corrupt("stored rows arrived out of row id order".to_owned()));
                        }
                        let (label, measures): (i32, &[u8]) = if outcomes {
                            (row.try_get(3)?, row.try_get(4)?)
                        } else {
                            (0, &[])
                        };
                        let label = u8::try_from(label).unwrap_or(u8::MAX);
                        block
                            .push(id, label, row.try_get(1)?, measures, row.try_get(2)?)
                            .map_err(corrupt)
                    });
                    if let Err(error) = decoded {
                        let _ = sender.send(Err(error)).await;
                        return;
                    }
                    if block.len() == block_rows {
                        let full = std::mem::replace(&mut block, Columns::builder(shape, outcomes, block_rows))
                            .finish()
                            .map_err(corrupt);
                        if let Ok(full) = &full {
                            last = full.id(full.len() - 1).to_owned();
                        }
                        if sender.send(full).await.is_err() {
                            return;
                        }
                        sent = true;
                    }
                }
                if !block.is_empty() || !sent {
                    let _ = sender.send(block.finish().map_err(corrupt)).await;
                }
            });
            Ok(tokio_stream::wrappers::ReceiverStream::new(receiver))
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
                .bind(signed("row count", record.n_rows)?)
                .bind(to_json(&record.stats)?)
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
                    .bind(to_json(&record.schema)?)
                    .bind(signed("budget epsilon", record.budget.epsilon.units())?)
                    .bind(record.budget.delta.units().to_string())
                    .bind(to_json(&record.composition)?)
                    .bind(signed("row count", record.n_rows)?)
                    .bind(to_json(&record.stats)?)
                    .bind(&record.created_at)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|error| map_unique(error, || format!("a dataset named {:?} exists", record.name)))?;
                append_ledger(&mut tx, pk, &opening_entry(dataset)?).await?;
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

            async fn row_blocks(
                &self,
                id: uuid::Uuid,
                version: u64,
                shape: $crate::snapshots::Shape,
                outcomes: bool,
                block_rows: usize,
            ) -> Result<$crate::store::BlockStream, $crate::store::StoreError> {
                stream_blocks(self.pool.clone(), id, version, shape, outcomes, block_rows).await
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
                let analyst = analysts_in(&mut tx, pk, Some(&debit.analyst))
                    .await?
                    .pop()
                    .unwrap_or_else(|| $crate::budget::AnalystRecord::new(&debit.analyst));
                let Some((composition, own)) = decide(&record, &analyst) else {
                    return Ok(DebitOutcome::Refused(Box::new((record, analyst))));
                };
                let entry = $crate::ledger::NewEntry::release(
                    debit.release_id,
                    &debit.analyst,
                    &debit.charge,
                    &debit.created_at,
                )?;
                let entry = append_entries(&mut tx, pk, &debit.dataset, vec![entry])
                    .await?
                    .remove(0);
                put_analyst(&mut tx, pk, &$crate::budget::AnalystRecord { composition: own, ..analyst }).await?;
                sqlx::query(
                    "INSERT INTO releases (id, dataset_pk, ledger_seq, analyst, kind, idempotency_key, \
                     request_hash, request, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(debit.release_id.to_string())
                .bind(pk)
                .bind(signed("ledger sequence number", entry.seq)?)
                .bind(&debit.analyst)
                .bind(&debit.kind)
                .bind(&debit.idempotency_key)
                .bind(&debit.request_hash)
                .bind(&debit.request)
                .bind(&debit.created_at)
                .execute(&mut *tx)
                .await?;
                sqlx::query("UPDATE datasets SET composition = $1 WHERE pk = $2")
                    .bind(to_json(&composition)?)
                    .bind(pk)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(DebitOutcome::Debited(Box::new($crate::dataset::DatasetRecord { composition, ..record })))
            }

            async fn analysts(
                &self,
                id: uuid::Uuid,
            ) -> Result<Vec<$crate::budget::AnalystRecord>, $crate::store::StoreError> {
                let mut conn = self.pool.acquire().await?;
                let Some((pk, _)) = dataset_in(&mut conn, id, false).await? else {
                    return Ok(Vec::new());
                };
                analysts_in(&mut conn, pk, None).await
            }

            async fn analyst(
                &self,
                id: uuid::Uuid,
                analyst: &str,
            ) -> Result<Option<$crate::budget::AnalystRecord>, $crate::store::StoreError> {
                let mut conn = self.pool.acquire().await?;
                let Some((pk, _)) = dataset_in(&mut conn, id, false).await? else {
                    return Ok(None);
                };
                Ok(analysts_in(&mut conn, pk, Some(analyst)).await?.pop())
            }

            async fn change_budget(
                &self,
                id: uuid::Uuid,
                change: &$crate::budget::Change,
            ) -> Result<$crate::store::BudgetOutcome, $crate::store::StoreError> {
                use $crate::store::BudgetOutcome;
                use $crate::store::records::signed;
                let mut tx = self.begin_write().await?;
                let Some((pk, mut record)) = dataset_in(&mut tx, id, true).await? else {
                    return Ok(BudgetOutcome::NoDataset);
                };
                if let Err(reason) = change.check(&record) {
                    return Ok(BudgetOutcome::Refused(reason));
                }
                append_entries(&mut tx, pk, &id, change.entries(&record)).await?;
                if let Some(budget) = change.budget {
                    sqlx::query("UPDATE datasets SET budget_epsilon = $1, budget_delta = $2 WHERE pk = $3")
                        .bind(signed("budget epsilon", budget.epsilon.units())?)
                        .bind(budget.delta.units().to_string())
                        .bind(pk)
                        .execute(&mut *tx)
                        .await?;
                    record.budget = budget;
                }
                for (name, cap) in &change.caps {
                    let analyst = analysts_in(&mut tx, pk, Some(name))
                        .await?
                        .pop()
                        .unwrap_or_else(|| $crate::budget::AnalystRecord::new(name));
                    put_analyst(&mut tx, pk, &$crate::budget::AnalystRecord { cap: *cap, ..analyst }).await?;
                }
                let analysts = analysts_in(&mut tx, pk, None).await?;
                tx.commit().await?;
                Ok(BudgetOutcome::Changed(Box::new(record), analysts))
            }

            async fn releases(
                &self,
                id: uuid::Uuid,
                analyst: Option<&str>,
                after: Option<u64>,
                limit: u32,
            ) -> Result<Vec<dpgate_api_types::ReleaseSummary>, $crate::store::StoreError> {
                use $crate::store::records::{ReleaseListingRow, signed};
                let rows: Vec<ReleaseListingRow> = sqlx::query_as(
                    "SELECT r.id, r.kind, r.analyst, l.epsilon, l.delta, l.seq, r.created_at \
                     FROM releases r JOIN datasets d ON d.pk = r.dataset_pk \
                     JOIN ledger l ON l.dataset_pk = r.dataset_pk AND l.seq = r.ledger_seq \
                     WHERE d.id = $1 AND ($2 IS NULL OR r.analyst = $2) AND r.ledger_seq > $3 \
                     ORDER BY r.ledger_seq LIMIT $4",
                )
                .bind(id.to_string())
                .bind(analyst)
                .bind(after.map(|after| signed("after", after)).transpose()?.unwrap_or(-1))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(ReleaseListingRow::into_summary).collect()
            }

            async fn complete_release(&self, release: uuid::Uuid, response: &str) -> Result<(), $crate::store::StoreError> {
                sqlx::query(
                    "UPDATE releases SET response = $1 \
                     WHERE id = $2 AND response IS NULL AND failure IS NULL",
                )
                .bind(response)
                .bind(release.to_string())
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn fail_release(&self, release: uuid::Uuid, problem: &str) -> Result<(), $crate::store::StoreError> {
                sqlx::query(
                    "UPDATE releases SET failure = $1 \
                     WHERE id = $2 AND response IS NULL AND failure IS NULL",
                )
                .bind(problem)
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
                    .bind(after.map(|after| signed("after", after)).transpose()?.unwrap_or(-1))
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
