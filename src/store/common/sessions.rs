//! A gradient session's calls, revoked tokens and background registrations.

/// Expands this part of the shared `Store` implementation for `$store`
/// over `$db` (see [`super::common_store`]).
macro_rules! sessions_sql {
    ($store:ty, $db:ty) => {
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

        async fn claim_call(
            store: &$store,
            release: uuid::Uuid,
            call: u32,
            theta_hash: &str,
        ) -> Result<$crate::store::CallClaim, $crate::store::StoreError> {
            let release = release.to_string();
            let mut tx = store.begin_write().await?;
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
            store: &$store,
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
                .execute(&store.pool)
                .await?;
            Ok(())
        }

        async fn call(
            store: &$store,
            release: uuid::Uuid,
            call: u32,
        ) -> Result<Option<$crate::store::StoredCall>, $crate::store::StoreError> {
            read_call(&store.pool, &release.to_string(), call).await
        }

        async fn revoke(
            store: &$store,
            jti: &str,
            at: &str,
        ) -> Result<(), $crate::store::StoreError> {
            sqlx::query("INSERT INTO revoked_tokens (jti, revoked_at) VALUES ($1, $2) ON CONFLICT DO NOTHING")
                .bind(jti)
                .bind(at)
                .execute(&store.pool)
                .await?;
            Ok(())
        }

        async fn is_revoked(
            store: &$store,
            jti: &str,
        ) -> Result<bool, $crate::store::StoreError> {
            let found: Option<i32> = sqlx::query_scalar("SELECT CAST(1 AS INTEGER) FROM revoked_tokens WHERE jti = $1")
                .bind(jti)
                .fetch_optional(&store.pool)
                .await?;
            Ok(found.is_some())
        }

        async fn start_registration(
            store: &$store,
            registration: &$crate::domain::registration::RegistrationRecord,
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
            .execute(&store.pool)
            .await?;
            Ok(())
        }

        async fn beat_registration(
            store: &$store,
            id: uuid::Uuid,
            at: &str,
        ) -> Result<(), $crate::store::StoreError> {
            sqlx::query("UPDATE registrations SET beat_at = $1 WHERE id = $2 AND finished_at IS NULL")
                .bind(at)
                .bind(id.to_string())
                .execute(&store.pool)
                .await?;
            Ok(())
        }

        async fn finish_registration(
            store: &$store,
            id: uuid::Uuid,
            ended: &$crate::domain::registration::Ended,
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
            .execute(&store.pool)
            .await?;
            Ok(())
        }

        async fn registration(
            store: &$store,
            id: uuid::Uuid,
        ) -> Result<Option<$crate::domain::registration::RegistrationRecord>, $crate::store::StoreError> {
            use $crate::store::records::{REGISTRATION_COLUMNS, RegistrationRow};
            let sql = format!("SELECT {REGISTRATION_COLUMNS} FROM registrations WHERE id = $1");
            sqlx::query_as::<_, RegistrationRow>(sqlx::AssertSqlSafe(sql))
                .bind(id.to_string())
                .fetch_optional(&store.pool)
                .await?
                .map(RegistrationRow::into_record)
                .transpose()
        }
    };
}

pub(crate) use sessions_sql;
