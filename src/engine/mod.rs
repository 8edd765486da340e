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

mod convert;
mod read;
mod run;
mod source;
mod summed;
mod sweep;
mod upload;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use convert::blocks_to_files;
pub use read::{Needed, stream};
pub use run::sum;
pub use source::{Located, SourceError, manifest, sha256_of, unchanged};
#[cfg(test)]
pub(crate) use summed::summed_in_parts;
pub use summed::{Summed, add_exact};
pub use sweep::{GRACE, sweep};
pub use upload::Upload;

use crate::store::StoreError;

/// Where dataset files live, and how many outcome files were opened.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    /// Where data may be registered in place from (none by default).
    roots: Vec<PathBuf>,
    outcome_opens: AtomicU64,
}

impl DataDir {
    pub fn new(root: PathBuf) -> DataDir {
        DataDir {
            root,
            roots: Vec::new(),
            outcome_opens: AtomicU64::new(0),
        }
    }

    /// The directory for `database_url` unless one is set: beside a SQLite
    /// file (`dpgate.db` keeps its files in `dpgate.db-data/`, as SQLite
    /// keeps `dpgate.db-wal`), else `dpgate-data` in the working directory.
    pub fn default_for(database_url: &str) -> PathBuf {
        let file = database_url
            .strip_prefix("sqlite://")
            .or_else(|| database_url.strip_prefix("sqlite:"))
            .map(|rest| rest.split('?').next().unwrap_or(rest))
            .filter(|file| !file.is_empty() && !file.contains(":memory:"));
        match file {
            Some(file) => PathBuf::from(format!("{file}-data")),
            None => PathBuf::from("dpgate-data"),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
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

/// A blocking file task's result, its panic or cancellation a file error.
fn joined<T>(result: Result<T, tokio::task::JoinError>) -> Result<T, StoreError> {
    result.map_err(|error| StoreError::Files(format!("a file task failed: {error}")))
}

fn io_error(what: impl std::fmt::Display, error: impl std::fmt::Display) -> StoreError {
    StoreError::Files(format!("{what}: {error}"))
}

#[cfg(test)]
pub(crate) mod tests;
