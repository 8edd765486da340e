//! Data registered in place: the operator's Parquet files, read where they
//! are. Only files under one of the operator's roots (`DPGATE_DATA_ROOTS`)
//! may be registered, after symbolic links are resolved, so a caller
//! cannot name a file the operator did not offer. The manifest records each
//! file's size, modification time and SHA-256 as registered: a release
//! checks the first two before its debit ([`unchanged`]), and a read
//! checks all three, so a changed file is never computed on.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use super::{DataDir, io_error};
use crate::dataset::{FilePart, VersionFile};
use crate::ingest::SourceFile;
use crate::store::StoreError;

/// Why a source cannot be registered.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Not under any of the operator's roots (or none is set).
    #[error("{0}")]
    Forbidden(String),
    /// Not a URI of a readable Parquet file or directory.
    #[error("{0}")]
    Invalid(String),
}

/// A file of a source, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Its name in the registered directory (or the file's own name).
    pub name: String,
    /// Canonical: no link, no `..`.
    pub path: PathBuf,
    pub bytes: u64,
    pub modified_ns: i64,
}

impl Located {
    fn of(path: PathBuf) -> Result<Located, SourceError> {
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (bytes, modified_ns) = metadata(&path).map_err(|error| {
            SourceError::Invalid(format!("cannot read {}: {error}", path.display()))
        })?;
        Ok(Located {
            name,
            path,
            bytes,
            modified_ns,
        })
    }

    pub fn open(&self) -> Result<SourceFile, StoreError> {
        let file = std::fs::File::open(&self.path).map_err(|error| io_error(&self.name, error))?;
        Ok(SourceFile {
            name: self.name.clone(),
            file,
        })
    }
}

/// A file's size and modification time (nanoseconds since the epoch).
fn metadata(path: &Path) -> std::io::Result<(u64, i64)> {
    let metadata = std::fs::metadata(path)?;
    let modified = metadata
        .modified()?
        .duration_since(UNIX_EPOCH)
        .map_err(std::io::Error::other)?;
    let nanos = i64::try_from(modified.as_nanos()).map_err(std::io::Error::other)?;
    Ok((metadata.len(), nanos))
}

impl DataDir {
    /// This data directory, with `roots` the directories whose Parquet
    /// files may be registered in place.
    pub fn with_roots(mut self, roots: Vec<PathBuf>) -> DataDir {
        self.roots = roots;
        self
    }

    /// The files of the source at `uri`: a `file://` URI of a Parquet file,
    /// or of a directory (its regular `*.parquet` files, in name order),
    /// under one of the roots.
    pub fn locate(&self, uri: &str) -> Result<Vec<Located>, SourceError> {
        if self.roots.is_empty() {
            return Err(SourceError::Forbidden(
                "registering data in place is off: the operator lists the directories it may \
                 come from in DPGATE_DATA_ROOTS"
                    .to_owned(),
            ));
        }
        let parsed = url::Url::parse(uri)
            .map_err(|error| SourceError::Invalid(format!("source.uri {uri:?}: {error}")))?;
        if parsed.scheme() != "file" {
            return Err(SourceError::Invalid(format!(
                "source.uri {uri:?}: only file:// URIs can be registered"
            )));
        }
        let path = parsed.to_file_path().map_err(|()| {
            SourceError::Invalid(format!("source.uri {uri:?} is not a local path"))
        })?;
        let path = path
            .canonicalize()
            .map_err(|error| SourceError::Invalid(format!("source.uri {uri:?}: {error}")))?;
        let root = self.root_of(&path).ok_or_else(|| {
            SourceError::Forbidden(format!(
                "source.uri {uri:?} is not under any directory DPGATE_DATA_ROOTS allows"
            ))
        })?;
        if !path.is_dir() {
            return Ok(vec![Located::of(path)?]);
        }
        let listed = std::fs::read_dir(&path)
            .map_err(|error| SourceError::Invalid(format!("source.uri {uri:?}: {error}")))?;
        let mut files = Vec::new();
        for entry in listed {
            let entry = entry
                .map_err(|error| SourceError::Invalid(format!("source.uri {uri:?}: {error}")))?;
            let file = entry.path();
            if file
                .extension()
                .is_none_or(|extension| extension != "parquet")
            {
                continue;
            }
            // A link out of the root is refused, not followed.
            let file = file
                .canonicalize()
                .map_err(|error| SourceError::Invalid(format!("{}: {error}", file.display())))?;
            if !file.starts_with(&root) {
                return Err(SourceError::Forbidden(format!(
                    "{} links out of the allowed directories",
                    entry.path().display()
                )));
            }
            if file.is_file() {
                files.push(Located::of(file)?);
            }
        }
        if files.is_empty() {
            return Err(SourceError::Invalid(format!(
                "source.uri {uri:?} holds no *.parquet file"
            )));
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    /// The allowed root `path` is under, canonical.
    fn root_of(&self, path: &Path) -> Option<PathBuf> {
        self.roots
            .iter()
            .filter_map(|root| root.canonicalize().ok())
            .find(|root| path.starts_with(root))
    }
}

/// The manifest's records of `files` as version `version` of a dataset,
/// `rows` and `sha256` each file's: every file as the version's inputs and
/// as its outcomes. A file whose size or modification time changed since
/// it was located is refused (it changed while it was read).
pub fn manifest(
    files: &[Located],
    rows: &[u64],
    sha256: &[String],
    version: u64,
) -> Result<Vec<VersionFile>, SourceError> {
    let mut records = Vec::with_capacity(2 * files.len());
    for (seq, ((file, &rows), sha256)) in files.iter().zip(rows).zip(sha256).enumerate() {
        if metadata(&file.path).ok() != Some((file.bytes, file.modified_ns)) {
            return Err(SourceError::Invalid(format!(
                "{} changed while it was registered",
                file.name
            )));
        }
        let path = url::Url::from_file_path(&file.path)
            .map_err(|()| SourceError::Invalid(format!("{} has no file URI", file.name)))?;
        for part in [FilePart::Inputs, FilePart::Outcomes] {
            records.push(VersionFile {
                version,
                part,
                seq: seq as u64,
                path: path.to_string(),
                rows,
                bytes: file.bytes,
                sha256: sha256.clone(),
                modified_ns: Some(file.modified_ns),
            });
        }
    }
    Ok(records)
}

/// Where a recorded file is.
pub(super) fn full_path(dir: &DataDir, file: &VersionFile) -> Result<PathBuf, StoreError> {
    if !file.registered() {
        return Ok(dir.path(&file.path));
    }
    url::Url::parse(&file.path)
        .ok()
        .and_then(|uri| uri.to_file_path().ok())
        .ok_or_else(|| StoreError::Corrupt {
            what: "dataset file",
            detail: format!("{} is not a file URI", file.path),
        })
}

/// Why `file` no longer matches its record, from its metadata alone
/// (size, and the modification time of a registered file), or `None`.
pub(super) fn changed(dir: &DataDir, file: &VersionFile) -> Option<String> {
    let path = match full_path(dir, file) {
        Ok(path) => path,
        Err(error) => return Some(error.to_string()),
    };
    match metadata(&path) {
        Err(error) => Some(format!("{}: {error}", file.path)),
        Ok((bytes, _)) if bytes != file.bytes => Some(format!(
            "{} is {bytes} bytes where the manifest recorded {}",
            file.path, file.bytes
        )),
        Ok((_, modified))
            if file
                .modified_ns
                .is_some_and(|recorded| recorded != modified) =>
        {
            Some(format!(
                "{} was modified after it was registered",
                file.path
            ))
        }
        Ok(_) => None,
    }
}

/// Checks every file of a snapshot against its record from metadata alone,
/// reading none of it: what a release does before its debit, so that a
/// file changed since it was recorded costs nothing.
pub fn unchanged(dir: &DataDir, files: &[VersionFile]) -> Result<(), StoreError> {
    match files.iter().find_map(|file| changed(dir, file)) {
        Some(why) => Err(StoreError::Changed(why)),
        None => Ok(()),
    }
}

/// The SHA-256 of a located file's bytes, lowercase hex.
pub fn sha256_of(file: &Located) -> Result<String, StoreError> {
    super::read::sha256(&file.path)
}
