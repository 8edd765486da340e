//! The audit's own store: a SQLite database in a temporary directory,
//! deleted with it, whose datasets are made by the service's own code
//! (the dataset record, the CSV parser with its clamping and scaling, an
//! ingest session) and read through the same in-memory snapshots a
//! release reads. Nothing touches the operator's database.

use std::sync::Arc;

use anyhow::Context;
use dpgate_api_types as api;

use crate::domain::dataset::DatasetRecord;
use crate::engine::{DataDir, Upload};
use crate::ingest::{self, Format};
use crate::snapshots::Snapshots;
use crate::store::{self, NewDataset};

/// Snapshots of at most this many bytes are held in memory: far more than
/// the audit's datasets need, so every release reads them from memory.
const HELD_BYTES: u64 = 1 << 28;

pub struct Scratch {
    /// Removed, with the database, when the scratch store is dropped.
    _dir: tempfile::TempDir,
    data: Arc<Snapshots>,
}

impl Scratch {
    pub async fn open() -> anyhow::Result<Scratch> {
        let dir = tempfile::tempdir().context("creating the audit's scratch directory")?;
        let url = format!("sqlite://{}", dir.path().join("audit.db").display());
        let store = store::connect(&url).await?;
        let files = Arc::new(DataDir::new(dir.path().join("files")));
        Ok(Scratch {
            _dir: dir,
            data: Arc::new(Snapshots::new(store, files, HELD_BYTES)),
        })
    }

    pub fn data(&self) -> &Arc<Snapshots> {
        &self.data
    }

    /// Creates a dataset of `schema` holding the rows of `csv` (with a
    /// header), as an upload would.
    pub async fn dataset(
        &self,
        schema: &api::CreateDataset,
        csv: String,
    ) -> anyhow::Result<DatasetRecord> {
        let store = self.data.store();
        let record = DatasetRecord::new(schema, crate::domain::clock::timestamp()?)
            .map_err(anyhow::Error::msg)?;
        store
            .create_dataset(&NewDataset {
                record: record.clone(),
                actor: "audit".to_owned(),
            })
            .await?;
        let parsed_schema = record.schema.clone();
        let (summary, rows) = tokio::task::spawn_blocking(move || {
            let mut rows = Vec::new();
            let summary = ingest::parse(Format::Csv, csv.as_bytes(), &parsed_schema, |batch| {
                rows.extend(batch);
                true
            });
            (summary, rows)
        })
        .await?;
        let summary = summary?;
        if let Some(error) = summary.errors.first() {
            anyhow::bail!("BUG: an audit dataset has a bad row: {error:?}");
        }
        let stats = summary.stats.context("BUG: an audit upload without sums")?;
        let mut upload = Upload::begin(store.as_ref(), self.data.data().clone(), &record).await?;
        upload.insert(rows).await?;
        Ok(upload.commit(summary.rows, &stats).await?)
    }
}
