//! The queries both backends share. The SQL is written once, with `$N`
//! placeholders (which SQLite accepts as well as Postgres), one file a
//! table or two, and [`common_store!`] expands it for one sqlx database
//! type, generating the `Store` implementation around the backend hooks
//! every backend defines as inherent items:
//!
//! - `LOCK`: the clause that locks a dataset row for the transaction;
//! - `begin_write()`: a transaction that may write;
//! - `stored_signing_key(fresh)`: see [`super::Store::signing_key`];
//! - `UPGRADE_LOCK`, `HAS_LEGACY_ROWS`: a statement that keeps other
//!   processes out of the start-up upgrade, and a query saying whether rows
//!   stored before the `row_blocks` migration are there to convert.
//!
//! Each part expands to free functions taking the backend's store or a
//! connection; the `Store` implementation only forwards to them. They are
//! macros rather than generic functions because sqlx's bounds for one
//! query generic over its database (an executor for every connection
//! borrow, an encoding and a decoding for every bound or read type) are
//! not implied by a trait, so every function would repeat a where clause
//! of a dozen lines.

mod blocks;
mod datasets;
mod debits;
mod files;
mod ledger;
mod releases;
mod sessions;

pub(super) use blocks::blocks_sql;
pub(super) use datasets::datasets_sql;
pub(super) use debits::debits_sql;
pub(super) use files::files_sql;
pub(super) use ledger::ledger_sql;
pub(super) use releases::releases_sql;
pub(super) use sessions::sessions_sql;

/// Expands the shared `Store` implementation for `$store` over `$db`.
macro_rules! common_store {
    ($store:ty, $db:ty) => {
        type Connection = <$db as sqlx::Database>::Connection;

        $crate::store::common::datasets_sql!($store, $db);
        $crate::store::common::ledger_sql!($store, $db);
        $crate::store::common::debits_sql!($store, $db);
        $crate::store::common::releases_sql!($store, $db);
        $crate::store::common::sessions_sql!($store, $db);
        $crate::store::common::files_sql!($store, $db);
        $crate::store::common::blocks_sql!($store, $db);

        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            async fn ping(&self) -> Result<(), $crate::store::StoreError> {
                self::ping(self).await
            }

            async fn signing_key(
                &self,
                fresh: &str,
            ) -> Result<Option<String>, $crate::store::StoreError> {
                self::signing_key(self, fresh).await
            }

            async fn create_dataset(
                &self,
                dataset: &$crate::store::NewDataset,
            ) -> Result<(), $crate::store::StoreError> {
                self::create_dataset(self, dataset).await
            }

            async fn datasets(
                &self,
            ) -> Result<Vec<$crate::domain::dataset::DatasetRecord>, $crate::store::StoreError>
            {
                self::datasets(self).await
            }

            async fn dataset(
                &self,
                id: uuid::Uuid,
            ) -> Result<Option<$crate::domain::dataset::DatasetRecord>, $crate::store::StoreError>
            {
                self::dataset(self, id).await
            }

            async fn dataset_with_analyst(
                &self,
                id: uuid::Uuid,
                analyst: &str,
            ) -> Result<
                Option<(
                    $crate::domain::dataset::DatasetRecord,
                    $crate::domain::budget::AnalystRecord,
                )>,
                $crate::store::StoreError,
            > {
                self::dataset_with_analyst(self, id, analyst).await
            }

            async fn begin_ingest(
                &self,
                id: uuid::Uuid,
            ) -> Result<Box<dyn $crate::store::IngestSession>, $crate::store::StoreError> {
                self::begin_ingest(self, id).await
            }

            async fn version_files(
                &self,
                id: uuid::Uuid,
                version: u64,
                outcomes: bool,
            ) -> Result<Vec<$crate::domain::dataset::VersionFile>, $crate::store::StoreError> {
                self::version_files(self, id, version, outcomes).await
            }

            async fn registered_files(
                &self,
                id: uuid::Uuid,
                version: u64,
            ) -> Result<Vec<$crate::domain::dataset::VersionFile>, $crate::store::StoreError> {
                self::registered_files(self, id, version).await
            }

            async fn block_uploads(
                &self,
            ) -> Result<Vec<(uuid::Uuid, u64)>, $crate::store::StoreError> {
                self::block_uploads(self).await
            }

            async fn upload_blocks(
                &self,
                id: uuid::Uuid,
                version: u64,
            ) -> Result<$crate::store::StoredBlocks, $crate::store::StoreError> {
                self::upload_blocks(self, id, version).await
            }

            async fn blocks_to_files(
                &self,
                id: uuid::Uuid,
                version: u64,
                files: &[$crate::domain::dataset::VersionFile],
            ) -> Result<bool, $crate::store::StoreError> {
                self::blocks_to_files(self, id, version, files).await
            }

            async fn debit(
                &self,
                debit: &$crate::domain::debit::Debit,
                decide: $crate::domain::debit::Decide,
            ) -> Result<$crate::domain::debit::DebitOutcome, $crate::store::StoreError> {
                self::debit(self, debit, decide).await
            }

            async fn analysts(
                &self,
                id: uuid::Uuid,
            ) -> Result<Vec<$crate::domain::budget::AnalystRecord>, $crate::store::StoreError> {
                self::analysts(self, id).await
            }

            async fn change_budget(
                &self,
                id: uuid::Uuid,
                change: &$crate::domain::budget::Change,
            ) -> Result<$crate::store::BudgetOutcome, $crate::store::StoreError> {
                self::change_budget(self, id, change).await
            }

            async fn releases(
                &self,
                id: uuid::Uuid,
                analyst: Option<&str>,
                after: Option<u64>,
                limit: u32,
            ) -> Result<Vec<dpgate_api_types::ReleaseSummary>, $crate::store::StoreError> {
                self::releases(self, id, analyst, after, limit).await
            }

            async fn finish_release(
                &self,
                release: uuid::Uuid,
                finished: $crate::store::Finished,
            ) -> Result<(), $crate::store::StoreError> {
                self::finish_release(self, release, finished).await
            }

            async fn release(
                &self,
                dataset: uuid::Uuid,
                release: uuid::Uuid,
            ) -> Result<Option<$crate::domain::debit::StoredRelease>, $crate::store::StoreError>
            {
                self::release(self, dataset, release).await
            }

            async fn release_by_key(
                &self,
                dataset: uuid::Uuid,
                analyst: &str,
                key: &str,
            ) -> Result<Option<$crate::domain::debit::StoredRelease>, $crate::store::StoreError>
            {
                self::release_by_key(self, dataset, analyst, key).await
            }

            async fn ledger(
                &self,
                dataset: uuid::Uuid,
                after: Option<u64>,
                limit: u32,
            ) -> Result<Vec<$crate::domain::ledger::LedgerRecord>, $crate::store::StoreError> {
                self::ledger(self, dataset, after, limit).await
            }

            async fn claim_call(
                &self,
                release: uuid::Uuid,
                call: u32,
                theta_hash: &str,
            ) -> Result<$crate::store::CallClaim, $crate::store::StoreError> {
                self::claim_call(self, release, call, theta_hash).await
            }

            async fn finish_call(
                &self,
                release: uuid::Uuid,
                call: u32,
                finished: $crate::store::Finished,
            ) -> Result<(), $crate::store::StoreError> {
                self::finish_call(self, release, call, finished).await
            }

            async fn call(
                &self,
                release: uuid::Uuid,
                call: u32,
            ) -> Result<Option<$crate::store::StoredCall>, $crate::store::StoreError> {
                self::call(self, release, call).await
            }

            async fn revoke(&self, jti: &str, at: &str) -> Result<(), $crate::store::StoreError> {
                self::revoke(self, jti, at).await
            }

            async fn is_revoked(&self, jti: &str) -> Result<bool, $crate::store::StoreError> {
                self::is_revoked(self, jti).await
            }

            async fn start_registration(
                &self,
                registration: &$crate::domain::registration::RegistrationRecord,
            ) -> Result<(), $crate::store::StoreError> {
                self::start_registration(self, registration).await
            }

            async fn beat_registration(
                &self,
                id: uuid::Uuid,
                at: &str,
            ) -> Result<(), $crate::store::StoreError> {
                self::beat_registration(self, id, at).await
            }

            async fn finish_registration(
                &self,
                id: uuid::Uuid,
                ended: &$crate::domain::registration::Ended,
            ) -> Result<(), $crate::store::StoreError> {
                self::finish_registration(self, id, ended).await
            }

            async fn registration(
                &self,
                id: uuid::Uuid,
            ) -> Result<
                Option<$crate::domain::registration::RegistrationRecord>,
                $crate::store::StoreError,
            > {
                self::registration(self, id).await
            }
        }
    };
}

pub(super) use common_store;
