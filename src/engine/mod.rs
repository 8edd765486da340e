//! The engine's files: every dataset version is a set of immutable Parquet
//! files in the data directory (`DPGATE_DATA_DIR`), recorded in the
//! database's manifest (`version_files`) by the transaction that bumps the
//! dataset's row count. The store holds the manifest and nothing of the
//! files; this module writes, checks and reads them.
//!
//! An upload writes two files: its inputs (row ids, features, dimension
//! codes, with Parquet's statistics, which are about public columns) and
//! its outcomes (labels and measures). Outcomes are private, so their file
//! has no statistics, no page index, no bloom filter, no dictionary and no
//! compression: its layout and size depend on the row count alone, and
//! nothing in it can steer a reader to skip rows. A pass that needs no
//! outcome never opens that file.

mod bounding;
mod chunk_hashes;
#[cfg(feature = "ballista")]
mod cluster;
mod convert;
mod needed;
mod objects;
mod read;
mod run;
mod scan;
mod source;
mod summed;
mod sweep;
mod upload;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::registry::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use url::Url;

#[cfg(feature = "ballista")]
pub use cluster::{Cluster, Codec, executor, scheduler};
pub use convert::blocks_to_files;
pub use needed::Needed;
pub use objects::{Object, ObjectReader, Stamp};
pub use read::stream;
pub use run::{Engine, sum};
pub use source::{Located, Root, SourceError, manifest, unchanged};
#[cfg(test)]
pub(crate) use summed::summed_in_parts;
pub use summed::{Passes, Summed, add_exact};
pub use sweep::{GRACE, sweep};
pub use upload::Upload;

use crate::snapshots::Columns;
use crate::store::StoreError;

/// Rows in blocks, as a pass over a version's files streams them.
pub type BlockStream = tokio_stream::wrappers::ReceiverStream<Result<Columns, StoreError>>;

/// Where dataset files live, where they may be registered from, and how
/// many outcome files were opened.
#[derive(Debug)]
pub struct DataDir {
    /// A directory's URL, `/`-terminated: `file:///…/` or an object
    /// store's (`s3://bucket/prefix/`).
    location: Url,
    /// The same, when it is on local disk.
    local: Option<PathBuf>,
    /// Where data may be registered in place from (none by default).
    roots: Vec<Root>,
    stores: DefaultObjectStoreRegistry,
    outcome_opens: AtomicU64,
}

impl DataDir {
    /// The data directory at `root` on local disk.
    pub fn new(root: PathBuf) -> DataDir {
        let root = std::path::absolute(&root).unwrap_or(root);
        let location = Url::from_directory_path(&root)
            .unwrap_or_else(|()| Url::parse("file:///").expect("a constant URL"));
        DataDir {
            location,
            local: Some(root),
            roots: Vec::new(),
            stores: DefaultObjectStoreRegistry::new(),
            outcome_opens: AtomicU64::new(0),
        }
    }

    /// The data directory at `location`: a local path, or an object
    /// store's URL (`s3://bucket/prefix`).
    pub fn at(location: &str) -> Result<DataDir, SourceError> {
        match remote_url(location)? {
            None => {
                let path = match Url::parse(location) {
                    Ok(url) if url.scheme() == "file" => url.to_file_path().map_err(|()| {
                        SourceError::Invalid(format!("{location:?} is not a local path"))
                    })?,
                    _ => PathBuf::from(location),
                };
                Ok(DataDir::new(path))
            }
            Some(url) => Ok(DataDir {
                location: url,
                local: None,
                roots: Vec::new(),
                stores: DefaultObjectStoreRegistry::new(),
                outcome_opens: AtomicU64::new(0),
            }),
        }
    }

    /// The directory for `database_url` unless one is set: beside a SQLite
    /// file (`dpgate.db` keeps its files in `dpgate.db-data/`, as SQLite
    /// keeps `dpgate.db-wal`), else `dpgate-data` in the working directory.
    pub fn default_for(database_url: &str) -> String {
        let file = database_url
            .strip_prefix("sqlite://")
            .or_else(|| database_url.strip_prefix("sqlite:"))
            .map(|rest| rest.split('?').next().unwrap_or(rest))
            .filter(|file| !file.is_empty() && !file.contains(":memory:"));
        match file {
            Some(file) => format!("{file}-data"),
            None => "dpgate-data".to_owned(),
        }
    }

    /// The directory on local disk, unless it is in an object store.
    pub fn root(&self) -> Option<&Path> {
        self.local.as_deref()
    }

    /// Where it is, as a URL.
    pub fn location(&self) -> &Url {
        &self.location
    }

    /// Uses `store` for objects under `url` (an object store's root,
    /// `s3://bucket`) instead of one configured from the environment.
    pub fn with_store(self, url: &Url, store: Arc<dyn object_store::ObjectStore>) -> DataDir {
        self.stores.register(url.clone(), store);
        self
    }

    /// Outcome files opened since the last call (which resets it): what
    /// the tests hold work before a debit to.
    pub fn take_outcome_opens(&self) -> u64 {
        self.outcome_opens.swap(0, Ordering::Relaxed)
    }

    fn opened_outcomes(&self) {
        self.outcome_opens.fetch_add(1, Ordering::Relaxed);
    }
}

/// The URL of `location` if it names an object store's directory
/// (`/`-terminated), `None` if it is a local path.
fn remote_url(location: &str) -> Result<Option<Url>, SourceError> {
    let Some((scheme, _)) = location.split_once("://") else {
        return Ok(None);
    };
    if scheme == "file" {
        return Ok(None);
    }
    if scheme != "s3" {
        return Err(SourceError::Invalid(format!(
            "{location:?}: only local paths, file:// and s3:// URLs are supported"
        )));
    }
    let mut url = Url::parse(location)
        .map_err(|error| SourceError::Invalid(format!("{location:?}: {error}")))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(SourceError::Invalid(format!(
            "{location:?} names no bucket"
        )));
    }
    if !url.path().ends_with('/') {
        url.set_path(&format!("{}/", url.path()));
    }
    Ok(Some(url))
}

/// A blocking file task's result, its panic or cancellation a file error.
fn joined<T>(result: Result<T, tokio::task::JoinError>) -> Result<T, StoreError> {
    result.map_err(|error| StoreError::Files(format!("a file task failed: {error}")))
}

fn io_error(what: impl std::fmt::Display, error: impl std::fmt::Display) -> StoreError {
    StoreError::Files(format!("{what}: {error}"))
}

#[cfg(test)]
pub(crate) mod tests;
