//! Uploads stored as blocks in the database (before the `version_files`
//! migration) written out as files, once, at start-up.

use std::sync::Arc;

use futures_util::StreamExt;

use super::write::VersionWriter;
use super::{DataDir, joined};
use crate::snapshots::{Columns, Shape, Stored};
use crate::store::blocks::Packed;
use crate::store::{Store, StoreError};

/// Writes every upload still stored as blocks as its version's files and
/// records them in place of the blocks, one upload per transaction; an
/// upload another process converted first is left to it. Returns the
/// uploads converted here.
pub async fn blocks_to_files(store: &dyn Store, dir: &Arc<DataDir>) -> Result<u64, StoreError> {
    let mut converted = 0;
    for (id, version) in store.block_uploads().await? {
        let Some(dataset) = store.dataset(id).await? else {
            continue;
        };
        let shape = Shape::of(&dataset.schema);
        let mut blocks = store.upload_blocks(id, version).await?;
        let (folder, schema) = (dir.clone(), dataset.schema.clone());
        let mut writer = joined(
            tokio::task::spawn_blocking(move || {
                VersionWriter::create(&folder, id, version, &schema)
            })
            .await,
        )??;
        while let Some(block) = blocks.next().await {
            let block = decoded(&block?, shape)?;
            writer = joined(
                tokio::task::spawn_blocking(move || writer.write(&block).map(|()| writer)).await,
            )??;
        }
        let (files, written) = joined(tokio::task::spawn_blocking(move || writer.finish()).await)??;
        if store.blocks_to_files(id, version, &files).await? {
            written.keep();
            converted += 1;
        }
    }
    if converted > 0 {
        tracing::info!(uploads = converted, "stored blocks written out as files");
    }
    Ok(converted)
}

/// A stored block checked against the dataset's shape and decoded, its
/// outcomes included.
fn decoded(block: &Packed, shape: Shape) -> Result<Columns, StoreError> {
    let stored = Stored::check(block.raw(), shape, true).map_err(|detail| StoreError::Corrupt {
        what: "row block",
        detail,
    })?;
    let mut columns = Columns::builder(shape, true, stored.rows);
    columns.append_stored(&stored, 0..stored.rows);
    Ok(columns.finish())
}
