//! The datasets and their analysts: creation, lookups under the budget
//! lock, budget changes.

/// Expands this part of the shared `Store` implementation for `$store`
/// over `$db` (see [`super::common_store`]).
macro_rules! datasets_sql {
    ($store:ty, $db:ty) => {
        /// The dataset by public id (row-locked with `LOCK` when `lock`).
        async fn dataset_in(
            conn: &mut Connection,
            id: uuid::Uuid,
            lock: bool,
        ) -> Result<Option<(i64, $crate::domain::dataset::DatasetRecord)>, $crate::store::StoreError> {
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

        /// The dataset's analysts with a record, by name; only those
        /// named in `only` when given.
        async fn analysts_in(
            conn: &mut Connection,
            pk: i64,
            only: Option<&[&str]>,
        ) -> Result<Vec<$crate::domain::budget::AnalystRecord>, $crate::store::StoreError> {
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
            analysts: &[&$crate::domain::budget::AnalystRecord],
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
            stats: &$crate::domain::dataset::WalrStats,
        ) -> Result<$crate::domain::dataset::DatasetRecord, $crate::store::StoreError> {
            use $crate::store::records::{signed, to_json};
            let (pk, mut record) = dataset_in(&mut *conn, id, false)
                .await?
                .ok_or_else(|| $crate::store::StoreError::Conflict("the dataset vanished".to_owned()))?;
            record.n_rows += rows;
            let cap = $crate::dp::contribution::MAX_ROWS;
            if record.schema.users.is_some() && record.n_rows > cap {
                // Releases under the unit are priced over this cap on N.
                return Err($crate::store::StoreError::Conflict(format!(
                    "a dataset of privacy unit user holds at most {cap} rows; this upload \
                     would take it to {}",
                    record.n_rows
                )));
            }
            record.stats.merge(stats);
            sqlx::query("UPDATE datasets SET n_rows = $1, stats = $2 WHERE pk = $3")
                .bind(signed("row count", record.n_rows)?)
                .bind(to_json(&record.stats)?)
                .bind(pk)
                .execute(&mut *conn)
                .await?;
            Ok(record)
        }

        async fn ping(
            store: &$store,
        ) -> Result<(), $crate::store::StoreError> {
            sqlx::query("SELECT 1").execute(&store.pool).await?;
            Ok(())
        }

        async fn signing_key(
            store: &$store,
            fresh: &str,
        ) -> Result<Option<String>, $crate::store::StoreError> {
            store.stored_signing_key(fresh).await
        }

        async fn create_dataset(
            store: &$store,
            dataset: &$crate::store::NewDataset,
        ) -> Result<(), $crate::store::StoreError> {
            use $crate::store::records::{
                DATASET_COLUMNS, accountant_name, opening_entry, signed, to_json,
            };
            let record = &dataset.record;
            let mut tx = store.begin_write().await?;
            let sql = format!(
                "INSERT INTO datasets ({DATASET_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING pk"
            );
            let pk: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .bind(record.id.to_string())
                .bind(&record.name)
                .bind(record.privacy_unit.name())
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

        async fn datasets(
            store: &$store,
        ) -> Result<Vec<$crate::domain::dataset::DatasetRecord>, $crate::store::StoreError> {
            use $crate::store::records::{DATASET_COLUMNS, DatasetRow};
            let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets ORDER BY pk");
            let rows: Vec<DatasetRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(&store.pool)
                .await?;
            rows.into_iter().map(DatasetRow::into_record).collect()
        }

        async fn dataset(
            store: &$store,
            id: uuid::Uuid,
        ) -> Result<Option<$crate::domain::dataset::DatasetRecord>, $crate::store::StoreError> {
            let mut conn = store.pool.acquire().await?;
            Ok(dataset_in(&mut conn, id, false).await?.map(|(_, record)| record))
        }

        async fn dataset_with_analyst(
            store: &$store,
            id: uuid::Uuid,
            analyst: &str,
        ) -> Result<
            Option<($crate::domain::dataset::DatasetRecord, $crate::domain::budget::AnalystRecord)>,
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
                .fetch_optional(&store.pool)
                .await?
            else {
                return Ok(None);
            };
            let dataset = <DatasetRow as sqlx::FromRow<_>>::from_row(&row)?.into_record()?;
            let record = match row.try_get::<Option<String>, _>("a_composition")? {
                None => $crate::domain::budget::AnalystRecord::new(analyst),
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

        async fn analysts(
            store: &$store,
            id: uuid::Uuid,
        ) -> Result<Vec<$crate::domain::budget::AnalystRecord>, $crate::store::StoreError> {
            let mut conn = store.pool.acquire().await?;
            let Some((pk, _)) = dataset_in(&mut conn, id, false).await? else {
                return Ok(Vec::new());
            };
            analysts_in(&mut conn, pk, None).await
        }

        async fn change_budget(
            store: &$store,
            id: uuid::Uuid,
            change: &$crate::domain::budget::Change,
        ) -> Result<$crate::store::BudgetOutcome, $crate::store::StoreError> {
            use $crate::store::BudgetOutcome;
            use $crate::store::records::signed;
            let mut tx = store.begin_write().await?;
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
                    .unwrap_or_else(|| $crate::domain::budget::AnalystRecord::new(name));
                let capped = $crate::domain::budget::AnalystRecord { cap: *cap, ..analyst };
                put_analysts(&mut tx, pk, &[&capped]).await?;
            }
            let analysts = analysts_in(&mut tx, pk, None).await?;
            tx.commit().await?;
            Ok(BudgetOutcome::Changed(Box::new(record), analysts))
        }
    };
}

pub(crate) use datasets_sql;
