//! The manifest of a version's files, and an upload's transaction that
//! records them.

/// Expands this part of the shared `Store` implementation for `$store`
/// over `$db` (see [`super::common_store`]).
macro_rules! files_sql {
    ($store:ty, $db:ty) => {
        /// The manifest's files of dataset `pk` below `version`, in
        /// version order, inputs before outcomes, of `which`.
        async fn files_in(
            conn: &mut Connection,
            pk: i64,
            version: u64,
            which: $crate::store::Files,
        ) -> Result<Vec<$crate::domain::dataset::VersionFile>, $crate::store::StoreError> {
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
        ) -> Result<Vec<$crate::domain::dataset::VersionFile>, $crate::store::StoreError> {
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
            files: &[$crate::domain::dataset::VersionFile],
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

            async fn files(&mut self) -> Result<Vec<$crate::domain::dataset::VersionFile>, $crate::store::StoreError> {
                files_in(&mut self.tx, self.pk, self.version, $crate::store::Files::Inputs).await
            }

            async fn commit(
                mut self: Box<Self>,
                rows: u64,
                stats: &$crate::domain::dataset::WalrStats,
                files: &[$crate::domain::dataset::VersionFile],
            ) -> Result<$crate::domain::dataset::DatasetRecord, $crate::store::StoreError> {
                insert_files(&mut self.tx, self.pk, files).await?;
                let record = add_upload(&mut self.tx, self.id, rows, stats).await?;
                self.tx.commit().await?;
                Ok(record)
            }
        }

        async fn begin_ingest(
            store: &$store,
            id: uuid::Uuid,
        ) -> Result<Box<dyn $crate::store::IngestSession>, $crate::store::StoreError> {
            let mut tx = store.begin_write().await?;
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
            store: &$store,
            id: uuid::Uuid,
            version: u64,
            outcomes: bool,
        ) -> Result<Vec<$crate::domain::dataset::VersionFile>, $crate::store::StoreError> {
            use $crate::store::Files;
            let which = if outcomes { Files::All } else { Files::Inputs };
            manifest(&store.pool, id, version, which).await
        }

        async fn registered_files(
            store: &$store,
            id: uuid::Uuid,
            version: u64,
        ) -> Result<Vec<$crate::domain::dataset::VersionFile>, $crate::store::StoreError> {
            manifest(&store.pool, id, version, $crate::store::Files::RegisteredInputs).await
        }
    };
}

pub(crate) use files_sql;
