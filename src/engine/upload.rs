//! An upload: the store's transaction holds the dataset's write lock while
//! the new version's files are written; its commit records them.

use std::sync::Arc;

use dpgate_api_types::LineError;

use super::read::row_ids;
use super::write::VersionWriter;
use super::{DataDir, joined};
use crate::domain::dataset::{DatasetRecord, Schema, VersionFile, WalrStats};
use crate::domain::row::RowRecord;
use crate::ingest::{MAX_REPORTED_ERRORS, RowIds};
use crate::snapshots::{Columns, Shape};
use crate::store::{IngestSession, Store, StoreError};

/// An upload in progress; dropping it stores nothing and removes its files.
pub struct Upload {
    session: Box<dyn IngestSession>,
    dir: Arc<DataDir>,
    dataset: uuid::Uuid,
    schema: Schema,
    writer: Option<VersionWriter>,
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
        })
    }

    /// The version this upload makes: the dataset's row count before it.
    pub fn version(&self) -> u64 {
        self.session.version()
    }

    /// The rows of `ids` whose id the dataset already has (read under the
    /// lock, so current): the first few by line.
    pub async fn stored(&mut self, ids: RowIds) -> Result<Vec<LineError>, StoreError> {
        if self.session.version() == 0 {
            return Ok(Vec::new());
        }
        let files = self.session.files().await?;
        let (dir, schema) = (self.dir.clone(), self.schema.clone());
        joined(
            tokio::task::spawn_blocking(move || {
                let stored = row_ids(&dir, &files, &schema)?;
                let mut ids = ids;
                Ok(ids.stored(&stored, MAX_REPORTED_ERRORS))
            })
            .await,
        )?
    }

    /// Writes a batch of rows; their ids are checked at the end
    /// ([`Upload::stored`]), before the commit.
    pub async fn insert(&mut self, rows: Vec<RowRecord>) -> Result<(), StoreError> {
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
                row.user,
            )
            .map_err(|detail| StoreError::Corrupt {
                what: "row",
                detail,
            })?;
    }
    Ok(block.finish())
}
