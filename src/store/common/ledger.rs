//! The hash-chained ledger: entries chained after the last and stored, what
//! a debit leaves, and pages of entries.

/// Expands this part of the shared `Store` implementation for `$store`
/// over `$db` (see [`super::common_store`]).
macro_rules! ledger_sql {
    ($store:ty, $db:ty) => {
        /// Stores ledger entries, in one statement.
        async fn append_ledger(
            conn: &mut Connection,
            pk: i64,
            entries: &[$crate::domain::ledger::LedgerRecord],
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
            insert.push_values(
                entries.iter().zip(numbers),
                |mut row, (entry, (seq, epsilon))| {
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
                },
            );
            insert.build().execute(&mut *conn).await?;
            Ok(())
        }

        /// Chains `entries` after the dataset's last ledger entry and
        /// stores them.
        async fn append_entries(
            conn: &mut Connection,
            pk: i64,
            dataset: &uuid::Uuid,
            entries: Vec<$crate::domain::ledger::NewEntry>,
        ) -> Result<Vec<$crate::domain::ledger::LedgerRecord>, $crate::store::StoreError> {
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

        /// Writes what a transaction's debits of one dataset leave: their
        /// ledger entries, chained, the analysts whose spending changed and
        /// the dataset's composition. The entries as chained.
        async fn write_spending(
            conn: &mut Connection,
            pk: i64,
            record: &$crate::domain::dataset::DatasetRecord,
            entries: Vec<$crate::domain::ledger::NewEntry>,
            changed: &[&$crate::domain::budget::AnalystRecord],
        ) -> Result<Vec<$crate::domain::ledger::LedgerRecord>, $crate::store::StoreError> {
            let chained = append_entries(&mut *conn, pk, &record.id, entries).await?;
            put_analysts(&mut *conn, pk, changed).await?;
            sqlx::query("UPDATE datasets SET composition = $1 WHERE pk = $2")
                .bind($crate::store::records::to_json(&record.composition)?)
                .bind(pk)
                .execute(&mut *conn)
                .await?;
            Ok(chained)
        }

        async fn ledger(
            store: &$store,
            dataset: uuid::Uuid,
            after: Option<u64>,
            limit: u32,
        ) -> Result<Vec<$crate::domain::ledger::LedgerRecord>, $crate::store::StoreError> {
            use $crate::store::records::{LEDGER_COLUMNS, LedgerRow, signed};
            let columns = LEDGER_COLUMNS.replace(", ", ", l.");
            let sql = format!(
                "SELECT l.{columns} FROM ledger l JOIN datasets d ON d.pk = l.dataset_pk \
                 WHERE d.id = $1 AND l.seq > $2 ORDER BY l.seq LIMIT $3"
            );
            let rows: Vec<LedgerRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(dataset.to_string())
                .bind(
                    after
                        .map(|after| signed("after", after))
                        .transpose()?
                        .unwrap_or(-1),
                )
                .bind(i64::from(limit))
                .fetch_all(&store.pool)
                .await?;
            rows.into_iter().map(LedgerRow::into_record).collect()
        }
    };
}

pub(crate) use ledger_sql;
