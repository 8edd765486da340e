//! An upload: the store's transaction holds the dataset's write lock while
//! the new version's files are written; its commit records them.

use std::collections::HashSet;
use std::sync::Arc;

use super::read::row_ids;
use super::write::VersionWriter;
use super::{DataDir, joined};
use crate::dataset::{DatasetRecord, Schema, VersionFile, WalrStats};
use crate::ingest::RowRecord;
use crate::snapshots::{Columns, Shape};
use crate::store::{IngestSession, Store, StoreError};

/// An upload in progress; dropping it stores nothing and removes its files.
pub struct Upload {
    session: Box<dyn IngestSession>,
    dir: Arc<DataDir>,
    dataset: uuid::Uuid,
    schema: Schema,
    writer: Option<VersionWriter>,
    /// The row ids stored before this upload, read at its first check
    /// (the lock keeps them current).
    stored_ids: Option<Arc<HashSet<Box<str>>>>,
}

impl Upload {
    /// Opens the store's transaction on `dataset`, locking it against
    /// other writers.
    pub async fn begin(
        store: &dyn Store,
        dir: Arc<DataDir>,
        dataset: &DatasetRecord,
    ) -> Result<Upload, StoreError> {
        Ok(Upload {
            session: store.begin_ingest(dataset.id).await?,
            dir,
            dataset: dataset.id,
            schema: dataset.schema.clone(),
            writer: None,
            stored_ids: None,
        })
    }

    async fn stored_ids(&mut self) -> Result<Arc<HashSet<Box<str>>>, StoreError> {
        if let Some(ids) = &self.stored_ids {
            return Ok(ids.clone());
        }
        let files = self.session.files().await?;
        let (dir, schema) = (self.dir.clone(), self.schema.clone());
        let ids = Arc::new(joined(
            tokio::task::spawn_blocking(move || row_ids(&dir, &files, &schema)).await,
        )??);
        self.stored_ids = Some(ids.clone());
        Ok(ids)
    }

    /// The version this upload makes: the dataset's row count before it.
    pub fn version(&self) -> u64 {
        self.session.version()
    }

    /// Which of these row ids the dataset already has.
    pub async fn existing(&mut self, row_ids: &[&str]) -> Result<Vec<String>, StoreError> {
        if self.session.version() == 0 {
            return Ok(Vec::new());
        }
        let stored = self.stored_ids().await?;
        Ok(row_ids
            .iter()
            .filter(|id| stored.contains(**id))
            .map(|id| (*id).to_owned())
            .collect())
    }

    /// Writes a batch of rows (whose ids are unique among themselves),
    /// refusing one whose id is already stored.
    pub async fn insert(&mut self, rows: Vec<RowRecord>) -> Result<(), StoreError> {
        if self.session.version() > 0 {
            let stored = self.stored_ids().await?;
            if let Some(row) = rows.iter().find(|row| stored.contains(row.row_id.as_str())) {
                return Err(StoreError::Conflict(format!(
                    "row id {:?} is already stored",
                    row.row_id
                )));
            }
        }
        let writer = self.writer.take();
        let (dir, dataset, version, schema) = (
            self.dir.clone(),
            self.dataset,
            self.session.version(),
            self.schema.clone(),
        );
        let (writer, written) = joined(
            tokio::task::spawn_blocking(move || {
                let mut writer = match writer {
                    Some(writer) => writer,
                    None => match VersionWriter::create(&dir, dataset, version, &schema) {
                        Ok(writer) => writer,
                        Err(error) => return (None, Err(error)),
                    },
                };
                let written = block_of(&schema, &rows).and_then(|block| writer.write(&block));
                (Some(writer), written)
            })
            .await,
        )?;
        self.writer = writer;
        written
    }

    /// Closes the files, records them with the upload's row count and
    /// sums, and commits: the new version exists from here, files and all.
    pub async fn commit(self, rows: u64, stats: &WalrStats) -> Result<DatasetRecord, StoreError> {
        let Upload {
            session, writer, ..
        } = self;
        let Some(writer) = writer else {
            return session.commit(rows, stats, &[]).await;
        };
        let (files, written) = joined(tokio::task::spawn_blocking(move || writer.finish()).await)??;
        let committed = session.commit(rows, stats, &files).await;
        // Whether a commit that failed reached the database is not always
        // known: its files stay (unrecorded files are harmless, recorded
        // ones that are gone are not).
        written.keep();
        committed
    }

    /// Records files registered in place (see [`super::manifest`]) as the
    /// new version, with its row count and sums, and commits. Nothing of
    /// them is written or removed here.
    pub async fn commit_registered(
        self,
        rows: u64,
        stats: &WalrStats,
        files: &[VersionFile],
    ) -> Result<DatasetRecord, StoreError> {
        if self.writer.is_some() {
            return Err(StoreError::Files(
                "an upload cannot both write rows and register files".to_owned(),
            ));
        }
        self.session.commit(rows, stats, files).await
    }
}

/// Rows as parsed (their stored encoding) as a block.
fn block_of(schema: &Schema, rows: &[RowRecord]) -> Result<Columns, StoreError> {
    let mut block = Columns::builder(Shape::of(schema), true, rows.len());
    for row in rows {
        block
            .push(
                &row.row_id,
                row.label,
                &row.features,
                &row.measures,
                &row.dimensions,
            )
            .map_err(|detail| StoreError::Corrupt {
                what: "row",
                detail,
            })?;
    }
    Ok(block.finish())
}
