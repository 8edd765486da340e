//! Releases: recorded at their debit, found by id or idempotency key,
//! listed, and finished in batches.

/// Expands this part of the shared `Store` implementation for `$store`
/// over `$db` (see [`super::common_store`]).
macro_rules! releases_sql {
    ($store:ty, $db:ty) => {
        /// A release by dataset id, analyst and idempotency key.
        const BY_KEY: &str = "d.id = $1 AND r.analyst = $2 AND r.idempotency_key = $3";

        /// The release matching `condition` (on `r` and `d`) and its binds.
        async fn find_release<'a>(
            executor: impl sqlx::Executor<'a, Database = $db>,
            condition: &str,
            binds: [&str; 3],
        ) -> Result<Option<$crate::domain::debit::StoredRelease>, $crate::store::StoreError> {
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

        /// The dataset's releases made under any of `keys` (analyst,
        /// idempotency key), in one query.
        async fn keyed_releases(
            conn: &mut Connection,
            pk: i64,
            keys: &[(&str, &str)],
        ) -> Result<
            std::collections::HashMap<(String, String), $crate::domain::debit::StoredRelease>,
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

        /// Records debited releases of dataset `pk`, each with the ledger
        /// entry that debited it.
        async fn insert_releases(
            conn: &mut Connection,
            pk: i64,
            made: &[$crate::domain::debit::Debit],
            chained: &[$crate::domain::ledger::LedgerRecord],
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::signed;
            let seqs = chained
                .iter()
                .map(|entry| signed("ledger sequence number", entry.seq))
                .collect::<Result<Vec<_>, _>>()?;
            let rows = made
                .iter()
                .map(|debit| signed("release rows", debit.expected_rows))
                .collect::<Result<Vec<_>, _>>()?;
            let mut insert = sqlx::QueryBuilder::<$db>::new(
                "INSERT INTO releases (id, dataset_pk, ledger_seq, analyst, kind, idempotency_key, \
                 request_hash, request, created_at, n_rows) ",
            );
            insert.push_values(made.iter().zip(seqs).zip(rows), |mut row, ((debit, seq), rows)| {
                row.push_bind(debit.release_id.to_string())
                    .push_bind(pk)
                    .push_bind(seq)
                    .push_bind(&debit.analyst)
                    .push_bind(&debit.kind)
                    .push_bind(&debit.idempotency_key)
                    .push_bind(&debit.request_hash)
                    .push_bind(&debit.request)
                    .push_bind(&debit.created_at)
                    .push_bind(rows);
            });
            insert.build().execute(&mut *conn).await?;
            Ok(())
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

        async fn releases(
            store: &$store,
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
            .fetch_all(&store.pool)
            .await?;
            rows.into_iter().map(ReleaseListingRow::into_summary).collect()
        }

        async fn finish_release(
            store: &$store,
            release: uuid::Uuid,
            finished: $crate::store::Finished,
        ) -> Result<(), $crate::store::StoreError> {
            let owned = store.clone();
            store.finished
                .submit((), (release, finished), move |(), batch| {
                    let store = owned.clone();
                    async move { write_finished(&store, batch).await }
                })
                .await
        }

        async fn release(
            store: &$store,
            dataset: uuid::Uuid,
            release: uuid::Uuid,
        ) -> Result<Option<$crate::domain::debit::StoredRelease>, $crate::store::StoreError> {
            let (dataset, release) = (dataset.to_string(), release.to_string());
            find_release(&store.pool, "d.id = $1 AND r.id = $2", [&dataset, &release, ""]).await
        }

        async fn release_by_key(
            store: &$store,
            dataset: uuid::Uuid,
            analyst: &str,
            key: &str,
        ) -> Result<Option<$crate::domain::debit::StoredRelease>, $crate::store::StoreError> {
            let dataset = dataset.to_string();
            find_release(&store.pool, BY_KEY, [&dataset, analyst, key]).await
        }
    };
}

pub(crate) use releases_sql;
