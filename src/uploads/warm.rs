//! An upload's rows kept as a block while they are read, so that the new
//! version is held in memory without reading it back, when the version it
//! follows is held (or the dataset is empty) and it fits.

use std::sync::Arc;

use crate::domain::dataset::DatasetRecord;
use crate::domain::row::RowRecord;
use crate::snapshots::{Builder, Columns, Shape, Snapshots};

/// The snapshot an upload to `dataset` extends, if it is in memory (or
/// the dataset is empty): then the upload's rows are kept as they are
/// parsed, and the new version is held without reading it back.
pub(super) fn warm_base(snapshots: &Snapshots, dataset: &DatasetRecord) -> Option<Arc<Columns>> {
    if dataset.n_rows == 0 {
        return Some(Arc::new(Columns::empty(Shape::of(&dataset.schema), true)));
    }
    snapshots.held(dataset.id, dataset.n_rows)
}

fn keep_rows(builder: &mut Builder, batch: &[RowRecord]) -> Result<(), String> {
    for row in batch {
        builder.push(
            &row.row_id,
            row.label,
            &row.features,
            &row.measures,
            &row.dimensions,
            row.user,
        )?;
    }
    Ok(())
}

/// Holds the version `record` just committed: `base` followed by the
/// upload's rows, as they are stored.
pub(super) async fn keep_warm(
    snapshots: &Arc<Snapshots>,
    record: &DatasetRecord,
    base: Arc<Columns>,
    added: Builder,
) {
    let (snapshots, id, version) = (snapshots.clone(), record.id, record.n_rows);
    let kept = tokio::task::spawn_blocking(move || {
        let added = added.finish();
        let next = if base.is_empty() {
            added
        } else {
            base.joined(&added)?
        };
        snapshots.keep(id, version, next);
        Ok::<_, String>(())
    })
    .await;
    if let Ok(Err(error)) | Err(error) = kept.map_err(|error| error.to_string()) {
        tracing::warn!(dataset = %id, %error, "the new version was not kept in memory");
    }
}

/// Passes the parsed rows on to the store, keeping them as a block too
/// while the new version may be held in memory.
pub(super) struct Keeper {
    pub(super) added: Option<Builder>,
    pub(super) snapshots: Arc<Snapshots>,
    pub(super) shape: Shape,
    pub(super) version: u64,
    pub(super) batches: tokio::sync::mpsc::Sender<Vec<RowRecord>>,
}

impl Keeper {
    pub(super) fn take(&mut self, batch: Vec<RowRecord>) -> bool {
        if let Some(builder) = &mut self.added {
            let rows = self.version + (builder.len() + batch.len()) as u64;
            if !self.snapshots.fits(self.shape, rows) || keep_rows(builder, &batch).is_err() {
                self.added = None;
            }
        }
        self.batches.blocking_send(batch).is_ok()
    }
}
