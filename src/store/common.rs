//! The queries both backends share. The SQL is written once, with `$N`
//! placeholders (which SQLite accepts as well as Postgres), and
//! [`common_store!`] expands it for one sqlx database type, generating the
//! `Store` implementation around the backend hooks every backend defines as
//! inherent items:
//!
//! - `LOCK`: the clause that locks a dataset row for the transaction;
//! - `begin_write()`: a transaction that may write;
//! - `stored_signing_key(fresh)`: see [`super::Store::signing_key`];
//! - `UPGRADE_LOCK`, `HAS_LEGACY_ROWS`: a statement that keeps other
//!   processes out of the start-up upgrade, and a query saying whether rows
//!   stored before the `row_blocks` migration are there to convert.

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

        /// Stores ledger entries, in one statement.
        async fn append_ledger(
            conn: &mut Connection,
            pk: i64,
            entries: &[$crate::ledger::LedgerRecord],
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::{LEDGER_COLUMNS, event_name, signed};
            let numbers = entries
                .iter()
                .map(|entry| {
                    Ok((
                        signed("ledger sequence number", entry.seq)?,
                        signed("ledger epsilon", entry.epsilon.units())?,
                    ))
                })
                .collect::<Result<Vec<_>, $crate::store::StoreError>>()?;
            let mut insert = sqlx::QueryBuilder::<$db>::new(format!(
                "INSERT INTO ledger (dataset_pk, {LEDGER_COLUMNS}) "
            ));
            insert.push_values(entries.iter().zip(numbers), |mut row, (entry, (seq, epsilon))| {
                row.push_bind(pk)
                    .push_bind(seq)
                    .push_bind(event_name(entry.event))
                    .push_bind(&entry.actor)
                    .push_bind(entry.release_id.map(|id| id.to_string()))
                    .push_bind(epsilon)
                    .push_bind(entry.delta.units().to_string())
                    .push_bind(&entry.loss)
                    .push_bind(&entry.details)
                    .push_bind(&entry.created_at)
                    .push_bind(&entry.prev_hash)
                    .push_bind(&entry.hash);
            });
            insert.build().execute(&mut *conn).await?;
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
                previous = Some((record.seq, record.hash.clone()));
                chained.push(record);
            }
            if !chained.is_empty() {
                append_ledger(&mut *conn, pk, &chained).await?;
            }
            Ok(chained)
        }

        /// The dataset's analysts with a record, by name; only those
        /// named in `only` when given.
        async fn analysts_in(
            conn: &mut Connection,
            pk: i64,
            only: Option<&[&str]>,
        ) -> Result<Vec<$crate::budget::AnalystRecord>, $crate::store::StoreError> {
            use $crate::store::records::{ANALYST_COLUMNS, AnalystRow};
            let mut select = sqlx::QueryBuilder::<$db>::new(format!(
                "SELECT {ANALYST_COLUMNS} FROM analysts WHERE dataset_pk = "
            ));
            select.push_bind(pk);
            if let Some(names) = only {
                if names.is_empty() {
                    return Ok(Vec::new());
                }
                select.push(" AND analyst IN (");
                let mut list = select.separated(", ");
                for name in names {
                    list.push_bind(*name);
                }
                list.push_unseparated(")");
            }
            select.push(" ORDER BY analyst");
            let rows: Vec<AnalystRow> = select.build_query_as().fetch_all(&mut *conn).await?;
            rows.into_iter().map(AnalystRow::into_record).collect()
        }

        /// Stores analysts' caps and compositions, in one statement.
        async fn put_analysts(
            conn: &mut Connection,
            pk: i64,
            analysts: &[&$crate::budget::AnalystRecord],
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::{signed, to_json};
            if analysts.is_empty() {
                return Ok(());
            }
            let rows = analysts
                .iter()
                .map(|analyst| {
                    let cap_epsilon = analyst
                        .cap
                        .map(|cap| signed("cap epsilon", cap.epsilon.units()))
                        .transpose()?;
                    let cap_delta = analyst.cap.map(|cap| cap.delta.units().to_string());
                    Ok((analyst, cap_epsilon, cap_delta, to_json(&analyst.composition)?))
                })
                .collect::<Result<Vec<_>, $crate::store::StoreError>>()?;
            let mut upsert = sqlx::QueryBuilder::<$db>::new(
                "INSERT INTO analysts (dataset_pk, analyst, cap_epsilon, cap_delta, composition) ",
            );
            upsert.push_values(rows, |mut row, (analyst, cap_epsilon, cap_delta, composition)| {
                row.push_bind(pk)
                    .push_bind(analyst.analyst.clone())
                    .push_bind(cap_epsilon)
                    .push_bind(cap_delta)
                    .push_bind(composition);
            });
            upsert.push(
                " ON CONFLICT (dataset_pk, analyst) DO UPDATE SET \
                 cap_epsilon = excluded.cap_epsilon, cap_delta = excluded.cap_delta, \
                 composition = excluded.composition",
            );
            upsert.build().execute(&mut *conn).await?;
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

        /// Call `call` of gradient session `release`, if it was claimed.
        async fn read_call<'a>(
            executor: impl sqlx::Executor<'a, Database = $db>,
            release: &str,
            call: u32,
        ) -> Result<Option<$crate::store::StoredCall>, $crate::store::StoreError> {
            let row: Option<(String, Option<String>, Option<String>)> = sqlx::query_as(
                "SELECT theta_hash, response, failure FROM gradient_calls \
                 WHERE release_id = $1 AND call = $2",
            )
            .bind(release)
            .bind(i64::from(call))
            .fetch_optional(executor)
            .await?;
            Ok(row.map(|(theta_hash, response, failure)| $crate::store::StoredCall {
                theta_hash,
                response,
                failure,
            }))
        }

        /// The dataset's releases made under any of `keys` (analyst,
        /// idempotency key), in one query.
        async fn keyed_releases(
            conn: &mut Connection,
            pk: i64,
            keys: &[(&str, &str)],
        ) -> Result<
            std::collections::HashMap<(String, String), $crate::store::StoredRelease>,
            $crate::store::StoreError,
        > {
            use sqlx::Row;
            use $crate::store::records::{RELEASE_COLUMNS, ReleaseRow};
            let mut found = std::collections::HashMap::new();
            if keys.is_empty() {
                return Ok(found);
            }
            let mut select = sqlx::QueryBuilder::<$db>::new(format!(
                "SELECT {RELEASE_COLUMNS}, r.idempotency_key FROM releases r \
                 JOIN datasets d ON d.pk = r.dataset_pk WHERE r.dataset_pk = "
            ));
            // (analyst, key) pairs, so that the unique index on
            // (dataset, analyst, key) finds each.
            select.push_bind(pk).push(" AND (r.analyst, r.idempotency_key) IN (");
            let mut list = select.separated(", ");
            for (analyst, key) in keys {
                list.push("(");
                list.push_bind_unseparated(*analyst);
                list.push_unseparated(", ");
                list.push_bind_unseparated(*key);
                list.push_unseparated(")");
            }
            list.push_unseparated(")");
            for row in select.build().fetch_all(&mut *conn).await? {
                let key: String = row.try_get("idempotency_key")?;
                let release = <ReleaseRow as sqlx::FromRow<_>>::from_row(&row)?.into_release()?;
                found.insert((release.analyst.clone(), key), release);
            }
            Ok(found)
        }

        /// Streams the blocks stored for the upload that made dataset
        /// `id`'s `version` (before the `version_files` migration), in the
        /// order they were stored, on a task of its own.
        async fn stream_blocks(
            pool: sqlx::Pool<$db>,
            id: uuid::Uuid,
            version: u64,
            shape: $crate::snapshots::Shape,
        ) -> Result<$crate::store::BlockStream, $crate::store::StoreError> {
            use futures_util::StreamExt;
            use sqlx::Row;
            use $crate::snapshots::{Columns, RawBlock, Stored};
            let version = $crate::store::records::signed("snapshot version", version)?;
            let (sender, receiver) = tokio::sync::mpsc::channel(1);
            tokio::spawn(async move {
                let mut stored = sqlx::query(
                    "SELECT row_count, ids, id_ends, features, dimensions, labels, measures \
                     FROM row_blocks WHERE dataset_pk = (SELECT pk FROM datasets WHERE id = $1) \
                     AND version = $2 ORDER BY seq",
                )
                .bind(id.to_string())
                .bind(version)
                .fetch(&pool);
                let corrupt = |detail: String| $crate::store::StoreError::Corrupt { what: "row block", detail };
                while let Some(row) = stored.next().await {
                    let decoded = row.map_err($crate::store::StoreError::from).and_then(|row| {
                        let raw = RawBlock {
                            rows: row.try_get(0)?,
                            ids: row.try_get(1)?,
                            id_ends: row.try_get(2)?,
                            features: row.try_get(3)?,
                            dimensions: row.try_get(4)?,
                            labels: row.try_get(5)?,
                            measures: row.try_get(6)?,
                        };
                        let stored = Stored::check(raw, shape, true).map_err(corrupt)?;
                        let mut block = Columns::builder(shape, true, stored.rows);
                        block.append_stored(&stored, 0..stored.rows);
                        Ok(block.finish())
                    });
                    let failed = decoded.is_err();
                    if sender.send(decoded).await.is_err() || failed {
                        return;
                    }
                }
            });
            Ok(tokio_stream::wrappers::ReceiverStream::new(receiver))
        }

        /// The manifest's files of dataset `pk` below `version`, in
        /// version order, inputs before outcomes, of `which`.
        async fn files_in(
            conn: &mut Connection,
            pk: i64,
            version: u64,
            which: $crate::store::Files,
        ) -> Result<Vec<$crate::dataset::VersionFile>, $crate::store::StoreError> {
            use $crate::store::Files;
            let version = i64::try_from(version).unwrap_or(i64::MAX);
            let filter = match which {
                Files::Inputs => "part = 'inputs'",
                Files::All => "part IN ('inputs', 'outcomes')",
                Files::RegisteredInputs => "part = 'inputs' AND modified_ns IS NOT NULL",
            };
            let sql = format!(
                "SELECT version, part, seq, path, row_count, byte_count, sha256, modified_ns, etag, \
                 footer_bytes, chunk_blake3 FROM version_files WHERE dataset_pk = $1 AND version < $2 AND {filter} \
                 ORDER BY version, seq, part"
            );
            // `filter` is one of three constants.
            let rows: Vec<$crate::store::records::FileRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(pk)
                .bind(version)
                .fetch_all(&mut *conn)
                .await?;
            rows.into_iter().map($crate::store::records::FileRow::into_file).collect()
        }

        /// [`files_in`] of the dataset `id`, on a connection of `pool`.
        async fn manifest(
            pool: &sqlx::Pool<$db>,
            id: uuid::Uuid,
            version: u64,
            which: $crate::store::Files,
        ) -> Result<Vec<$crate::dataset::VersionFile>, $crate::store::StoreError> {
            let mut conn = pool.acquire().await?;
            let pk: Option<i64> = sqlx::query_scalar("SELECT pk FROM datasets WHERE id = $1")
                .bind(id.to_string())
                .fetch_optional(&mut *conn)
                .await?;
            match pk {
                Some(pk) => files_in(&mut conn, pk, version, which).await,
                None => Ok(Vec::new()),
            }
        }

        /// Records an upload's files in dataset `pk`'s manifest.
        async fn insert_files(
            conn: &mut Connection,
            pk: i64,
            files: &[$crate::dataset::VersionFile],
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::signed;
            for file in files {
                sqlx::query(
                    "INSERT INTO version_files (dataset_pk, version, part, seq, path, row_count, \
                     byte_count, sha256, modified_ns, etag, footer_bytes, chunk_blake3) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                )
                .bind(pk)
                .bind(signed("file version", file.version)?)
                .bind(file.part.as_str())
                .bind(signed("file seq", file.seq)?)
                .bind(&file.path)
                .bind(signed("file rows", file.rows)?)
                .bind(signed("file bytes", file.bytes)?)
                .bind(&file.sha256)
                .bind(file.modified_ns)
                .bind(&file.etag)
                .bind(file.chunks.as_ref().map(|chunks| signed("footer bytes", chunks.footer_bytes)).transpose()?)
                .bind(file.chunks.as_ref().map(|chunks| chunks.blake3.to_vec()))
                .execute(&mut *conn)
                .await
                .map_err(|error| map_unique(error, || "a version file is already recorded".to_owned()))?;
            }
            Ok(())
        }

        /// An upload: one transaction holding the dataset's write lock
        /// while the engine writes the new version's files, which it then
        /// records with the new row count.
        struct ManifestIngest {
            tx: sqlx::Transaction<'static, $db>,
            pk: i64,
            id: uuid::Uuid,
            version: u64,
        }

        #[async_trait::async_trait]
        impl $crate::store::IngestSession for ManifestIngest {
            fn version(&self) -> u64 {
                self.version
            }

            async fn files(&mut self) -> Result<Vec<$crate::dataset::VersionFile>, $crate::store::StoreError> {
                files_in(&mut self.tx, self.pk, self.version, $crate::store::Files::Inputs).await
            }

            async fn commit(
                mut self: Box<Self>,
                rows: u64,
                stats: &$crate::dataset::WalrStats,
                files: &[$crate::dataset::VersionFile],
            ) -> Result<$crate::dataset::DatasetRecord, $crate::store::StoreError> {
                insert_files(&mut self.tx, self.pk, files).await?;
                let record = add_upload(&mut self.tx, self.id, rows, stats).await?;
                self.tx.commit().await?;
                Ok(record)
            }
        }

        /// Stores one block of an upload's rows: the `seq`th of the upload
        /// that made dataset `pk`'s `version`.
        async fn write_block(
            conn: &mut Connection,
            pk: i64,
            version: i64,
            seq: i64,
            block: $crate::snapshots::Packed,
        ) -> Result<(), $crate::store::StoreError> {
            sqlx::query(
                "INSERT INTO row_blocks (dataset_pk, version, seq, row_count, ids, id_ends, \
                 labels, features, measures, dimensions) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind(pk)
            .bind(version)
            .bind(seq)
            .bind(block.rows as i64)
            .bind(block.ids)
            .bind(block.id_ends)
            .bind(block.labels)
            .bind(block.features)
            .bind(block.measures)
            .bind(block.dimensions)
            .execute(&mut *conn)
            .await?;
            Ok(())
        }

        /// Converts rows stored one per database row (before the
        /// `row_blocks` migration) into blocks, each upload's rows in row
        /// id order (the order they were read in then), and drops their
        /// table: once, at start-up, under `UPGRADE_LOCK`.
        async fn upgrade_row_storage(store: &$store) -> Result<(), $crate::store::StoreError> {
            let mut tx = store.begin_write().await?;
            sqlx::query(<$store>::UPGRADE_LOCK).execute(&mut *tx).await?;
            let legacy: bool = sqlx::query_scalar(<$store>::HAS_LEGACY_ROWS)
                .fetch_one(&mut *tx)
                .await?;
            if !legacy {
                return Ok(());
            }
            let uploads: Vec<(i64, i64)> =
                sqlx::query_as("SELECT DISTINCT dataset_pk, version FROM rows ORDER BY 1, 2")
                    .fetch_all(&mut *tx)
                    .await?;
            for (pk, version) in uploads {
                let rows: Vec<(String, i64, Vec<u8>, Vec<u8>, Vec<u8>)> = sqlx::query_as(
                    "SELECT row_id, CAST(label AS BIGINT), features, measures, dimensions \
                     FROM rows WHERE dataset_pk = $1 AND version = $2 ORDER BY row_id",
                )
                .bind(pk)
                .bind(version)
                .fetch_all(&mut *tx)
                .await?;
                let mut block = $crate::snapshots::Packed::default();
                let mut seq = 0;
                for (row_id, label, features, measures, dimensions) in rows {
                    block.push(&$crate::ingest::RowRecord {
                        line: 0,
                        row_id,
                        label: u8::try_from(label).unwrap_or(u8::MAX),
                        features,
                        measures,
                        dimensions,
                    });
                    if block.is_full() {
                        write_block(&mut tx, pk, version, seq, std::mem::take(&mut block)).await?;
                        seq += 1;
                    }
                }
                if block.rows > 0 {
                    write_block(&mut tx, pk, version, seq, block).await?;
                }
            }
            sqlx::query("DROP TABLE rows").execute(&mut *tx).await?;
            tx.commit().await?;
            tracing::info!("rows converted to blocks");
            Ok(())
        }

        /// Makes a batch of debits of dataset `id` in one transaction and
        /// answers each (see `super::batches`).
        async fn write_debits(
            store: &$store,
            id: uuid::Uuid,
            batch: Vec<$crate::store::batches::Pending<($crate::store::Debit, $crate::store::Decide), $crate::store::DebitOutcome>>,
        ) {
            let (debits, replies): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|pending| (pending.item, pending.reply))
                .unzip();
            match debit_all(store, id, debits).await {
                Ok(outcomes) => {
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
                Err(error) => {
                    tracing::error!(dataset = %id, %error, "a batch of debits failed");
                    $crate::store::batches::fail_all(replies, &error);
                }
            }
        }

        /// Stores a batch of finished releases in one transaction and
        /// answers each (see `super::batches`).
        async fn write_finished(
            store: &$store,
            batch: Vec<$crate::store::batches::Pending<(uuid::Uuid, $crate::store::Finished), ()>>,
        ) {
            match finish_all(store, batch.iter().map(|pending| &pending.item)).await {
                Ok(()) => {
                    for pending in batch {
                        let _ = pending.reply.send(Ok(()));
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "a batch of finished releases failed");
                    $crate::store::batches::fail_all(batch.into_iter().map(|pending| pending.reply), &error);
                }
            }
        }

        async fn finish_all(
            store: &$store,
            finished: impl Iterator<Item = &(uuid::Uuid, $crate::store::Finished)>,
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::Finished;
            // Only a release's first ending counts, in a batch as across batches.
            let mut seen = std::collections::HashSet::new();
            let (mut responses, mut failures) = (Vec::new(), Vec::new());
            for (release, ending) in finished {
                if seen.insert(*release) {
                    match ending {
                        Finished::Response(text) => responses.push((release.to_string(), text)),
                        Finished::Failure(text) => failures.push((release.to_string(), text)),
                    }
                }
            }
            let mut tx = store.begin_write().await?;
            for (column, endings) in [("response", responses), ("failure", failures)] {
                if endings.is_empty() {
                    continue;
                }
                let mut update = sqlx::QueryBuilder::<$db>::new(format!(
                    "UPDATE releases SET {column} = v.column2 FROM ("
                ));
                update.push_values(endings, |mut row, (release, text)| {
                    row.push_bind(release).push_bind(text);
                });
                update.push(
                    ") AS v WHERE releases.id = v.column1 \
                     AND releases.response IS NULL AND releases.failure IS NULL",
                );
                update.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(())
        }

        /// The check-and-debit transaction for `debits` of dataset `id`, in
        /// order: each decided under the lock against what the ones before
        /// it left, all written and committed together.
        async fn debit_all(
            store: &$store,
            id: uuid::Uuid,
            debits: Vec<($crate::store::Debit, $crate::store::Decide)>,
        ) -> Result<Vec<$crate::store::DebitOutcome>, $crate::store::StoreError> {
            use std::collections::HashMap;
            use $crate::budget::AnalystRecord;
            use $crate::store::{DebitOutcome, StoredRelease};
            let mut tx = store.begin_write().await?;
            let Some((pk, mut record)) = dataset_in(&mut tx, id, true).await? else {
                return Ok(debits.iter().map(|_| DebitOutcome::NoDataset).collect());
            };
            let names: Vec<&str> = debits.iter().map(|(debit, _)| debit.analyst.as_str()).collect();
            let stored = analysts_in(&mut tx, pk, Some(&names)).await?;
            let mut analysts: HashMap<String, AnalystRecord> = stored
                .into_iter()
                .map(|analyst| (analyst.analyst.clone(), analyst))
                .collect();
            // Releases by analyst and key: those stored, then this batch's.
            let keys: Vec<(&str, &str)> = debits
                .iter()
                .filter_map(|(debit, _)| Some((debit.analyst.as_str(), debit.idempotency_key.as_deref()?)))
                .collect();
            let mut keyed = keyed_releases(&mut tx, pk, &keys).await?;
            // Analysts whose spending this batch changes.
            let mut changed = std::collections::BTreeSet::new();
            let mut entries = Vec::new();
            let mut made = Vec::new();
            let mut outcomes = Vec::with_capacity(debits.len());
            for (debit, decide) in debits {
                if let Some(key) = &debit.idempotency_key
                    && let Some(earlier) = keyed.get(&(debit.analyst.clone(), key.clone()))
                {
                    outcomes.push(DebitOutcome::Replay(earlier.clone()));
                    continue;
                }
                if record.n_rows != debit.expected_rows {
                    outcomes.push(DebitOutcome::Stale);
                    continue;
                }
                let analyst = analysts
                    .get(&debit.analyst)
                    .cloned()
                    .unwrap_or_else(|| AnalystRecord::new(&debit.analyst));
                let Some((composition, own)) = decide(&record, &analyst, &debit.charge) else {
                    outcomes.push(DebitOutcome::Refused(Box::new((record.clone(), analyst))));
                    continue;
                };
                record.composition = composition;
                analysts.insert(debit.analyst.clone(), AnalystRecord { composition: own, ..analyst });
                changed.insert(debit.analyst.clone());
                entries.push($crate::ledger::NewEntry::release(
                    debit.release_id,
                    &debit.analyst,
                    &debit.charge,
                    &debit.created_at,
                )?);
                if let Some(key) = &debit.idempotency_key {
                    keyed.insert(
                        (debit.analyst.clone(), key.clone()),
                        StoredRelease {
                            id: debit.release_id,
                            dataset: id,
                            analyst: debit.analyst.clone(),
                            request_hash: debit.request_hash.clone(),
                            response: None,
                            failure: None,
                        },
                    );
                }
                outcomes.push(DebitOutcome::Debited(Box::new(record.clone())));
                made.push(debit);
            }
            if made.is_empty() {
                return Ok(outcomes);
            }
            let changed: Vec<&AnalystRecord> =
                changed.iter().filter_map(|name| analysts.get(name)).collect();
            let chained = write_spending(&mut tx, pk, &record, entries, &changed).await?;
            insert_releases(&mut tx, pk, &made, &chained).await?;
            tx.commit().await?;
            Ok(outcomes)
        }

        /// Writes what a transaction's debits of one dataset leave: their
        /// ledger entries, chained, the analysts whose spending changed and
        /// the dataset's composition. The entries as chained.
        async fn write_spending(
            conn: &mut Connection,
            pk: i64,
            record: &$crate::dataset::DatasetRecord,
            entries: Vec<$crate::ledger::NewEntry>,
            changed: &[&$crate::budget::AnalystRecord],
        ) -> Result<Vec<$crate::ledger::LedgerRecord>, $crate::store::StoreError> {
            let chained = append_entries(&mut *conn, pk, &record.id, entries).await?;
            put_analysts(&mut *conn, pk, changed).await?;
            sqlx::query("UPDATE datasets SET composition = $1 WHERE pk = $2")
                .bind($crate::store::records::to_json(&record.composition)?)
                .bind(pk)
                .execute(&mut *conn)
                .await?;
            Ok(chained)
        }

        /// Records debited releases of dataset `pk`, each with the ledger
        /// entry that debited it.
        async fn insert_releases(
            conn: &mut Connection,
            pk: i64,
            made: &[$crate::store::Debit],
            chained: &[$crate::ledger::LedgerRecord],
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::signed;
            let seqs = chained
                .iter()
                .map(|entry| signed("ledger sequence number", entry.seq))
                .collect::<Result<Vec<_>, _>>()?;
            let mut insert = sqlx::QueryBuilder::<$db>::new(
                "INSERT INTO releases (id, dataset_pk, ledger_seq, analyst, kind, idempotency_key, \
                 request_hash, request, created_at) ",
            );
            insert.push_values(made.iter().zip(seqs), |mut row, (debit, seq)| {
                row.push_bind(debit.release_id.to_string())
                    .push_bind(pk)
                    .push_bind(seq)
                    .push_bind(&debit.analyst)
                    .push_bind(&debit.kind)
                    .push_bind(&debit.idempotency_key)
                    .push_bind(&debit.request_hash)
                    .push_bind(&debit.request)
                    .push_bind(&debit.created_at);
            });
            insert.build().execute(&mut *conn).await?;
            Ok(())
        }

        /// The check-and-debit transaction of a release with sources: every
        /// dataset locked in id order (so that two such transactions cannot
        /// wait on each other), each decided against its own charge, and
        /// all debited or none. The release is recorded on its own
        /// dataset; each source's ledger entry names it.
        async fn debit_joint(
            store: &$store,
            debit: &$crate::store::Debit,
            decide: $crate::store::Decide,
        ) -> Result<$crate::store::DebitOutcome, $crate::store::StoreError> {
            use $crate::budget::AnalystRecord;
            use $crate::ledger::NewEntry;
            use $crate::store::DebitOutcome;
            let parts: Vec<(uuid::Uuid, u64, &$crate::dp::Charge)> =
                std::iter::once((debit.dataset, debit.expected_rows, &debit.charge))
                    .chain(debit.sources.iter().map(|source| {
                        (source.dataset, source.expected_rows, &source.charge)
                    }))
                    .collect();
            let mut order: Vec<usize> = (0..parts.len()).collect();
            order.sort_by_key(|&index| parts[index].0);
            let mut tx = store.begin_write().await?;
            let mut locked = vec![None; parts.len()];
            for index in order {
                match dataset_in(&mut tx, parts[index].0, true).await? {
                    Some(found) => locked[index] = Some(found),
                    None => return Ok(DebitOutcome::NoDataset),
                }
            }
            let locked: Vec<(i64, $crate::dataset::DatasetRecord)> =
                locked.into_iter().flatten().collect();
            if let Some(key) = &debit.idempotency_key {
                let keys = [(debit.analyst.as_str(), key.as_str())];
                if let Some(earlier) = keyed_releases(&mut tx, locked[0].0, &keys).await?.into_values().next() {
                    return Ok(DebitOutcome::Replay(earlier));
                }
            }
            if locked.iter().zip(&parts).any(|((_, record), (_, rows, _))| record.n_rows != *rows) {
                return Ok(DebitOutcome::Stale);
            }
            let mut decided = Vec::with_capacity(locked.len());
            for ((pk, mut record), (_, _, charge)) in locked.into_iter().zip(&parts) {
                let analyst = analysts_in(&mut tx, pk, Some(&[debit.analyst.as_str()]))
                    .await?
                    .pop()
                    .unwrap_or_else(|| AnalystRecord::new(&debit.analyst));
                let Some((composition, own)) = decide(&record, &analyst, charge) else {
                    return Ok(DebitOutcome::Refused(Box::new((record, analyst))));
                };
                record.composition = composition;
                decided.push((pk, record, AnalystRecord { composition: own, ..analyst }, *charge));
            }
            for (index, (pk, record, analyst, charge)) in decided.iter().enumerate() {
                let entry = if index == 0 {
                    NewEntry::release(debit.release_id, &debit.analyst, charge, &debit.created_at)?
                } else {
                    NewEntry::source(debit.release_id, debit.dataset, &debit.analyst, charge, &debit.created_at)?
                };
                let chained = write_spending(&mut tx, *pk, record, vec![entry], &[analyst]).await?;
                if index == 0 {
                    insert_releases(&mut tx, *pk, std::slice::from_ref(debit), &chained).await?;
                }
            }
            tx.commit().await?;
            let (_, target, _, _) = decided.swap_remove(0);
            Ok(DebitOutcome::Debited(Box::new(target)))
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
                append_ledger(&mut tx, pk, &[opening_entry(dataset)?]).await?;
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

            async fn dataset_with_analyst(
                &self,
                id: uuid::Uuid,
                analyst: &str,
            ) -> Result<
                Option<($crate::dataset::DatasetRecord, $crate::budget::AnalystRecord)>,
                $crate::store::StoreError,
            > {
                use sqlx::Row;
                use $crate::store::records::{AnalystRow, DATASET_COLUMNS, DatasetRow};
                // Every release reads through here: the statement is built once.
                static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    let columns: Vec<String> =
                        DATASET_COLUMNS.split(", ").map(|column| format!("d.{column}")).collect();
                    format!(
                        "SELECT {}, a.cap_epsilon AS a_cap_epsilon, a.cap_delta AS a_cap_delta, \
                         a.composition AS a_composition FROM datasets d LEFT JOIN analysts a \
                         ON a.dataset_pk = d.pk AND a.analyst = $2 WHERE d.id = $1",
                        columns.join(", ")
                    )
                });
                let Some(row) = sqlx::query(sqlx::AssertSqlSafe(SQL.as_str()))
                    .bind(id.to_string())
                    .bind(analyst)
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                let dataset = <DatasetRow as sqlx::FromRow<_>>::from_row(&row)?.into_record()?;
                let record = match row.try_get::<Option<String>, _>("a_composition")? {
                    None => $crate::budget::AnalystRecord::new(analyst),
                    Some(composition) => AnalystRow::new(
                        analyst.to_owned(),
                        row.try_get("a_cap_epsilon")?,
                        row.try_get("a_cap_delta")?,
                        composition,
                    )
                    .into_record()?,
                };
                Ok(Some((dataset, record)))
            }

            async fn begin_ingest(
                &self,
                id: uuid::Uuid,
            ) -> Result<Box<dyn $crate::store::IngestSession>, $crate::store::StoreError> {
                let mut tx = self.begin_write().await?;
                let (pk, record) = dataset_in(&mut tx, id, true)
                    .await?
                    .ok_or_else(|| $crate::store::StoreError::Conflict("the dataset vanished".to_owned()))?;
                Ok(Box::new(ManifestIngest {
                    tx,
                    pk,
                    id,
                    version: record.n_rows,
                }))
            }

            async fn version_files(
                &self,
                id: uuid::Uuid,
                version: u64,
                outcomes: bool,
            ) -> Result<Vec<$crate::dataset::VersionFile>, $crate::store::StoreError> {
                use $crate::store::Files;
                let which = if outcomes { Files::All } else { Files::Inputs };
                manifest(&self.pool, id, version, which).await
            }

            async fn registered_files(
                &self,
                id: uuid::Uuid,
                version: u64,
            ) -> Result<Vec<$crate::dataset::VersionFile>, $crate::store::StoreError> {
                manifest(&self.pool, id, version, $crate::store::Files::RegisteredInputs).await
            }

            async fn block_uploads(&self) -> Result<Vec<(uuid::Uuid, u64)>, $crate::store::StoreError> {
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    "SELECT DISTINCT d.id, b.version FROM row_blocks b \
                     JOIN datasets d ON d.pk = b.dataset_pk ORDER BY d.id, b.version",
                )
                .fetch_all(&self.pool)
                .await?;
                use $crate::store::records::{unsigned, uuid};
                rows.into_iter()
                    .map(|(id, version)| Ok((uuid("dataset id", &id)?, unsigned("block version", version)?)))
                    .collect()
            }

            async fn upload_blocks(
                &self,
                id: uuid::Uuid,
                version: u64,
                shape: $crate::snapshots::Shape,
            ) -> Result<$crate::store::BlockStream, $crate::store::StoreError> {
                stream_blocks(self.pool.clone(), id, version, shape).await
            }

            async fn blocks_to_files(
                &self,
                id: uuid::Uuid,
                version: u64,
                files: &[$crate::dataset::VersionFile],
            ) -> Result<bool, $crate::store::StoreError> {
                use $crate::store::records::signed;
                let mut tx = self.begin_write().await?;
                let Some((pk, _)) = dataset_in(&mut tx, id, true).await? else {
                    return Ok(false);
                };
                let deleted = sqlx::query("DELETE FROM row_blocks WHERE dataset_pk = $1 AND version = $2")
                    .bind(pk)
                    .bind(signed("block version", version)?)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if deleted == 0 {
                    return Ok(false);
                }
                insert_files(&mut tx, pk, files).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn debit(
                &self,
                debit: &$crate::store::Debit,
                decide: $crate::store::Decide,
            ) -> Result<$crate::store::DebitOutcome, $crate::store::StoreError> {
                if !debit.sources.is_empty() {
                    return debit_joint(self, debit, decide).await;
                }
                let store = self.clone();
                self.debits
                    .submit(debit.dataset, (debit.clone(), decide), move |id, batch| {
                        let store = store.clone();
                        async move { write_debits(&store, id, batch).await }
                    })
                    .await
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
                    let analyst = analysts_in(&mut tx, pk, Some(&[name]))
                        .await?
                        .pop()
                        .unwrap_or_else(|| $crate::budget::AnalystRecord::new(name));
                    let capped = $crate::budget::AnalystRecord { cap: *cap, ..analyst };
                    put_analysts(&mut tx, pk, &[&capped]).await?;
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

            async fn finish_release(
                &self,
                release: uuid::Uuid,
                finished: $crate::store::Finished,
            ) -> Result<(), $crate::store::StoreError> {
                let store = self.clone();
                self.finished
                    .submit((), (release, finished), move |(), batch| {
                        let store = store.clone();
                        async move { write_finished(&store, batch).await }
                    })
                    .await
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

            async fn claim_call(
                &self,
                release: uuid::Uuid,
                call: u32,
                theta_hash: &str,
            ) -> Result<$crate::store::CallClaim, $crate::store::StoreError> {
                let release = release.to_string();
                let mut tx = self.begin_write().await?;
                let inserted = sqlx::query(
                    "INSERT INTO gradient_calls (release_id, call, theta_hash) VALUES ($1, $2, $3) \
                     ON CONFLICT DO NOTHING",
                )
                .bind(&release)
                .bind(i64::from(call))
                .bind(theta_hash)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                let claim = if inserted == 1 {
                    let claimed: i64 =
                        sqlx::query_scalar("SELECT COUNT(*) FROM gradient_calls WHERE release_id = $1")
                            .bind(&release)
                            .fetch_one(&mut *tx)
                            .await?;
                    $crate::store::CallClaim::Claimed {
                        claimed: u64::try_from(claimed).unwrap_or(0),
                    }
                } else {
                    $crate::store::CallClaim::Taken(read_call(&mut *tx, &release, call).await?.ok_or_else(
                        || $crate::store::StoreError::Corrupt {
                            what: "gradient call",
                            detail: "a claimed call vanished".to_owned(),
                        },
                    )?)
                };
                tx.commit().await?;
                Ok(claim)
            }

            async fn finish_call(
                &self,
                release: uuid::Uuid,
                call: u32,
                finished: $crate::store::Finished,
            ) -> Result<(), $crate::store::StoreError> {
                let (column, text) = match finished {
                    $crate::store::Finished::Response(text) => ("response", text),
                    $crate::store::Finished::Failure(text) => ("failure", text),
                };
                // Only a call's first ending counts.
                let sql = format!(
                    "UPDATE gradient_calls SET {column} = $1 WHERE release_id = $2 AND call = $3 \
                     AND response IS NULL AND failure IS NULL"
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(text)
                    .bind(release.to_string())
                    .bind(i64::from(call))
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn call(
                &self,
                release: uuid::Uuid,
                call: u32,
            ) -> Result<Option<$crate::store::StoredCall>, $crate::store::StoreError> {
                read_call(&self.pool, &release.to_string(), call).await
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

            async fn start_registration(
                &self,
                registration: &$crate::registration::RegistrationRecord,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query(
                    "INSERT INTO registrations (id, dataset_id, actor, created_at, beat_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(registration.id.to_string())
                .bind(registration.dataset_id.to_string())
                .bind(&registration.actor)
                .bind(&registration.created_at)
                .bind(&registration.beat_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn beat_registration(
                &self,
                id: uuid::Uuid,
                at: &str,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query("UPDATE registrations SET beat_at = $1 WHERE id = $2 AND finished_at IS NULL")
                    .bind(at)
                    .bind(id.to_string())
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn finish_registration(
                &self,
                id: uuid::Uuid,
                ended: &$crate::registration::Ended,
            ) -> Result<(), $crate::store::StoreError> {
                use $crate::store::records::to_json;
                let (report, problem) = match &ended.outcome {
                    Ok(report) => (Some(to_json(report)?), None),
                    Err(problem) => (None, Some(to_json(problem)?)),
                };
                sqlx::query(
                    "UPDATE registrations SET finished_at = $1, report = $2, problem = $3 \
                     WHERE id = $4 AND finished_at IS NULL",
                )
                .bind(&ended.at)
                .bind(report)
                .bind(problem)
                .bind(id.to_string())
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn registration(
                &self,
                id: uuid::Uuid,
            ) -> Result<Option<$crate::registration::RegistrationRecord>, $crate::store::StoreError> {
                use $crate::store::records::{REGISTRATION_COLUMNS, RegistrationRow};
                let sql = format!("SELECT {REGISTRATION_COLUMNS} FROM registrations WHERE id = $1");
                sqlx::query_as::<_, RegistrationRow>(sqlx::AssertSqlSafe(sql))
                    .bind(id.to_string())
                    .fetch_optional(&self.pool)
                    .await?
                    .map(RegistrationRow::into_record)
                    .transpose()
            }
        }
    };
}

pub(super) use common_store;
