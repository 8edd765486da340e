//! The PostgreSQL backend, for several dpgate replicas sharing one database.
//! Writers lock the dataset's row (`SELECT … FOR UPDATE`) for the length of
//! their transaction: debits of one dataset serialise across every process,
//! while other datasets proceed in parallel.

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, Transaction};

use super::StoreError;
use super::common::common_store;

/// The Postgres store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    debits: std::sync::Arc<super::batches::DebitQueue>,
    finished: std::sync::Arc<super::batches::FinishQueue>,
}

impl PostgresStore {
    /// Locks the dataset's row until the transaction ends.
    const LOCK: &'static str = " FOR UPDATE";

    /// Connects to `url` and migrates the database.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        // No ping before each use: it would be one more round trip per
        // statement outside a transaction. A connection the server dropped
        // fails its next statement instead (a debit then spends nothing)
        // and leaves the pool.
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .test_before_acquire(false)
            .connect(url)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        let store = PostgresStore {
            pool,
            debits: Default::default(),
            finished: Default::default(),
        };
        upgrade_row_storage(&store).await?;
        Ok(store)
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

    /// Replicas starting together convert once: the first waits for no
    /// one, the others find nothing left to convert.
    const UPGRADE_LOCK: &'static str = "SELECT pg_advisory_xact_lock(7406190101)";
    const HAS_LEGACY_ROWS: &'static str = "SELECT to_regclass('rows') IS NOT NULL";
}

common_store!(PostgresStore, Postgres);
