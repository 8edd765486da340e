//! Uploads stored as blocks before the `version_files` migration: the
//! start-up upgrade of rows stored one per database row into blocks, and
//! the blocks read out for the engine to write as files.

/// Expands this part of the shared `Store` implementation for `$store`
/// over `$db` (see [`super::common_store`]).
macro_rules! blocks_sql {
    ($store:ty, $db:ty) => {
        /// Stores one block of an upload's rows: the `seq`th of the upload
        /// that made dataset `pk`'s `version`.
        async fn write_block(
            conn: &mut Connection,
            pk: i64,
            version: i64,
            seq: i64,
            block: $crate::store::blocks::Packed,
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
                let mut block = $crate::store::blocks::Packed::default();
                let mut seq = 0;
                for (row_id, label, features, measures, dimensions) in rows {
                    block.push(&$crate::domain::row::RowRecord {
                        line: 0,
                        row_id,
                        label: u8::try_from(label).unwrap_or(u8::MAX),
                        features,
                        measures,
                        dimensions,
                        user: 0,
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

        /// Streams the blocks stored for the upload that made dataset
        /// `id`'s `version` (before the `version_files` migration), in the
        /// order they were stored, on a task of its own.
        async fn stream_blocks(
            pool: sqlx::Pool<$db>,
            id: uuid::Uuid,
            version: u64,
        ) -> Result<$crate::store::StoredBlocks, $crate::store::StoreError> {
            use futures_util::StreamExt;
            use sqlx::Row;
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
                while let Some(row) = stored.next().await {
                    let block = row.map_err($crate::store::StoreError::from).and_then(|row| {
                        let rows: i64 = row.try_get(0)?;
                        let rows = usize::try_from(rows).map_err(|_| $crate::store::StoreError::Corrupt {
                            what: "row block",
                            detail: format!("a block of {rows} rows"),
                        })?;
                        Ok($crate::store::blocks::Packed {
                            rows,
                            ids: row.try_get(1)?,
                            id_ends: row.try_get(2)?,
                            features: row.try_get(3)?,
                            dimensions: row.try_get(4)?,
                            labels: row.try_get(5)?,
                            measures: row.try_get(6)?,
                        })
                    });
                    let failed = block.is_err();
                    if sender.send(block).await.is_err() || failed {
                        return;
                    }
                }
            });
            Ok(tokio_stream::wrappers::ReceiverStream::new(receiver))
        }

        async fn block_uploads(
            store: &$store,
        ) -> Result<Vec<(uuid::Uuid, u64)>, $crate::store::StoreError> {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT DISTINCT d.id, b.version FROM row_blocks b \
                 JOIN datasets d ON d.pk = b.dataset_pk ORDER BY d.id, b.version",
            )
            .fetch_all(&store.pool)
            .await?;
            use $crate::store::records::{unsigned, uuid};
            rows.into_iter()
                .map(|(id, version)| Ok((uuid("dataset id", &id)?, unsigned("block version", version)?)))
                .collect()
        }

        async fn upload_blocks(
            store: &$store,
            id: uuid::Uuid,
            version: u64,
        ) -> Result<$crate::store::StoredBlocks, $crate::store::StoreError> {
            stream_blocks(store.pool.clone(), id, version).await
        }

        async fn blocks_to_files(
            store: &$store,
            id: uuid::Uuid,
            version: u64,
            files: &[$crate::domain::dataset::VersionFile],
        ) -> Result<bool, $crate::store::StoreError> {
            use $crate::store::records::signed;
            let mut tx = store.begin_write().await?;
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
    };
}

pub(crate) use blocks_sql;
