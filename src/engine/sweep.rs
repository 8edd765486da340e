//! Files in the data directory (on local disk or in an object store) that
//! no manifest records: left by an upload whose commit failed in a way
//! that leaves its outcome unknown (its files are kept then, since a
//! recorded file that is gone is worse than an unrecorded one), or by a
//! process that died mid-upload. Nothing reads them; the sweep at start-up
//! removes those older than a grace period that no upload still being
//! written, on any replica, reaches.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{DataDir, io_error};
use crate::store::{Store, StoreError};

/// How old an unrecorded file must be to be removed: far beyond the
/// longest upload.
pub const GRACE: Duration = Duration::from_secs(24 * 3600);

/// Removes the files under `dir` that no dataset's manifest in `store`
/// records and that were last modified more than `grace` ago; how many.
pub async fn sweep(
    store: &dyn Store,
    dir: &Arc<DataDir>,
    grace: Duration,
) -> Result<u64, StoreError> {
    let mut recorded = HashSet::new();
    for dataset in store.datasets().await? {
        let files = store.version_files(dataset.id, u64::MAX, true).await?;
        recorded.extend(
            files
                .into_iter()
                .filter(|file| !file.registered())
                .map(|file| file.path),
        );
    }
    let cutoff = SystemTime::now()
        .checked_sub(grace)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    // dpgate's files are `DATASET/NAME.parquet` in the directory, recorded
    // by that relative path.
    let home = dir.object_at("")?;
    let failed = |error: object_store::Error| io_error(home.url(), error);
    let mut listing = home.store().list(Some(home.path()));
    let mut removed = 0;
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(failed)?;
        let Some(parts) = meta.location.prefix_match(home.path()) else {
            continue;
        };
        let parts: Vec<String> = parts.map(|part| part.as_ref().to_owned()).collect();
        let [folder, name] = parts.as_slice() else {
            continue;
        };
        let relative = format!("{folder}/{name}");
        let stale = SystemTime::from(meta.last_modified) < cutoff;
        let ours = uuid::Uuid::parse_str(folder).is_ok() && dpgate_named(name);
        if ours && stale && !recorded.contains(&relative) {
            home.store().delete(&meta.location).await.map_err(failed)?;
            tracing::info!(file = %relative, "removed a file no manifest records");
            removed += 1;
        }
    }
    Ok(removed)
}

/// Whether `name` is one dpgate gives its files,
/// `VERSION-TAG-PART.parquet` (20 digits, 12 hex digits, `inputs` or
/// `outcomes`): the sweep never touches a file it did not write, even in a
/// data directory an operator shares with other data.
pub(super) fn dpgate_named(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".parquet") else {
        return false;
    };
    let mut parts = stem.splitn(3, '-');
    let (Some(version), Some(tag), Some(part)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    version.len() == 20
        && version.bytes().all(|byte| byte.is_ascii_digit())
        && tag.len() == 12
        && tag.bytes().all(|byte| byte.is_ascii_hexdigit())
        && (part == "inputs" || part == "outcomes")
}
