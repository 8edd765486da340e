//! Files in the data directory that no manifest records: left by an
//! upload whose commit failed in a way that leaves its outcome unknown
//! (its files are kept then, since a recorded file that is gone is worse
//! than an unrecorded one), or by a process that died mid-upload. Nothing
//! reads them; the sweep at start-up removes those older than a grace
//! period that no upload still being written, on any replica, reaches.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{DataDir, io_error, joined};
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
    let dir = dir.clone();
    joined(
        tokio::task::spawn_blocking(move || remove_unrecorded(dir.root(), &recorded, cutoff)).await,
    )?
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

/// The work of [`sweep`]: dpgate's files are `DATASET/NAME.parquet` under
/// `root`, recorded by that relative path.
fn remove_unrecorded(
    root: &Path,
    recorded: &HashSet<String>,
    cutoff: SystemTime,
) -> Result<u64, StoreError> {
    let entries =
        |dir: &Path| std::fs::read_dir(dir).map_err(|error| io_error(dir.display(), error));
    let mut removed = 0;
    for folder in entries(root)? {
        let folder = folder.map_err(|error| io_error(root.display(), error))?;
        if !folder.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        let folder_path = folder.path();
        for file in entries(&folder_path)? {
            let file = file.map_err(|error| io_error(folder_path.display(), error))?;
            let path = file.path();
            let relative = format!(
                "{}/{}",
                folder.file_name().to_string_lossy(),
                file.file_name().to_string_lossy()
            );
            let stale = file
                .metadata()
                .and_then(|metadata| metadata.modified())
                .is_ok_and(|modified| modified < cutoff);
            let ours = uuid::Uuid::parse_str(&folder.file_name().to_string_lossy()).is_ok()
                && dpgate_named(&file.file_name().to_string_lossy());
            if ours && stale && !recorded.contains(&relative) {
                std::fs::remove_file(&path).map_err(|error| io_error(path.display(), error))?;
                tracing::info!(file = %relative, "removed a file no manifest records");
                removed += 1;
            }
        }
    }
    Ok(removed)
}
