//! Data registered in place: the operator's Parquet files, read where they
//! are, on local disk or in an object store. Only files under one of the
//! operator's roots (`DPGATE_DATA_ROOTS`) may be registered (local ones
//! after symbolic links are resolved), so a caller cannot name a file the
//! operator did not offer. The manifest records each file's size,
//! modification time, entity tag and SHA-256 as registered: a release
//! checks the first three before its debit ([`unchanged`]), and a read
//! checks them all, so a changed file is never computed on.

use std::path::{Path, PathBuf};

use url::Url;

use super::objects::{Object, ObjectReader, Stamp, stamp_of};
use super::{DataDir, remote_url};
use crate::domain::dataset::{ChunkHashes, FilePart, VersionFile};
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

/// A place the operator lets data be registered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// A directory on local disk.
    Local(PathBuf),
    /// A prefix in an object store, `/`-terminated
    /// (`s3://bucket/prefix/`).
    Remote(Url),
}

impl Root {
    /// A root as `DPGATE_DATA_ROOTS` lists it: a local path, a `file://`
    /// URL or an object store's (`s3://bucket/prefix`).
    pub fn parse(text: &str) -> Result<Root, SourceError> {
        match remote_url(text)? {
            Some(url) => Ok(Root::Remote(url)),
            None => match Url::parse(text) {
                Ok(url) if url.scheme() == "file" => url
                    .to_file_path()
                    .map(Root::Local)
                    .map_err(|()| SourceError::Invalid(format!("{text:?} is not a local path"))),
                _ => Ok(Root::Local(PathBuf::from(text))),
            },
        }
    }
}

impl From<PathBuf> for Root {
    fn from(path: PathBuf) -> Root {
        Root::Local(path)
    }
}

/// A file of a source, as found.
#[derive(Debug, Clone)]
pub struct Located {
    /// Its name in the registered directory (or the file's own name).
    pub name: String,
    /// Canonical: no link, no `..`.
    pub object: Object,
    pub stamp: Stamp,
}

impl Located {
    pub fn url(&self) -> &Url {
        self.object.url()
    }

    /// Its Parquet footer, read for a reader of the text columns named in
    /// `dictionaries` as Arrow dictionaries: on a blocking thread of the
    /// runtime.
    pub fn open(&self, dictionaries: &[&str]) -> SourceFile<ObjectReader> {
        SourceFile {
            name: self.name.clone(),
            parquet: self.object.parquet(self.stamp.bytes, None, dictionaries),
        }
    }

    /// The SHA-256 of its bytes (lowercase hex) and of its Parquet parts:
    /// on a blocking thread of `handle`'s runtime.
    pub fn hashes(
        &self,
        handle: &tokio::runtime::Handle,
    ) -> Result<(String, ChunkHashes), StoreError> {
        self.object.hashes(handle, self.stamp.bytes)
    }
}

fn is_parquet(name: &str) -> bool {
    name.ends_with(".parquet")
}

impl DataDir {
    /// This data directory, with `roots` the places whose Parquet files
    /// may be registered in place.
    pub fn with_roots(mut self, roots: Vec<Root>) -> DataDir {
        self.roots = roots;
        self
    }

    /// The files of the source at `uri`: a `file://` or `s3://` URI of a
    /// Parquet file, or of a directory (its `*.parquet` files, in name
    /// order; not those of its subdirectories), under one of the roots.
    pub async fn locate(&self, uri: &str) -> Result<Vec<Located>, SourceError> {
        if self.roots.is_empty() {
            return Err(SourceError::Forbidden(
                "registering data in place is off: the operator lists the directories it may \
                 come from in DPGATE_DATA_ROOTS"
                    .to_owned(),
            ));
        }
        let parsed = Url::parse(uri)
            .map_err(|error| SourceError::Invalid(format!("source.uri {uri:?}: {error}")))?;
        let mut files = match parsed.scheme() {
            "file" => self.locate_local(uri, &parsed).await?,
            "s3" => self.locate_remote(uri, parsed).await?,
            _ => {
                return Err(SourceError::Invalid(format!(
                    "source.uri {uri:?}: only file:// and s3:// URIs can be registered"
                )));
            }
        };
        if files.is_empty() {
            return Err(SourceError::Invalid(format!(
                "source.uri {uri:?} holds no *.parquet file"
            )));
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }

    async fn locate_local(&self, uri: &str, parsed: &Url) -> Result<Vec<Located>, SourceError> {
        let invalid = |error: &dyn std::fmt::Display| {
            SourceError::Invalid(format!("source.uri {uri:?}: {error}"))
        };
        let path = parsed.to_file_path().map_err(|()| {
            SourceError::Invalid(format!("source.uri {uri:?} is not a local path"))
        })?;
        let path = path.canonicalize().map_err(|error| invalid(&error))?;
        let root = self.root_of(&path).ok_or_else(|| outside(uri))?;
        let mut paths = Vec::new();
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(|error| invalid(&error))? {
                let entry = entry.map_err(|error| invalid(&error))?;
                if !is_parquet(&entry.file_name().to_string_lossy()) {
                    continue;
                }
                // A link out of the root is refused, not followed.
                let file = entry.path().canonicalize().map_err(|error| {
                    SourceError::Invalid(format!("{}: {error}", entry.path().display()))
                })?;
                if !file.starts_with(&root) {
                    return Err(SourceError::Forbidden(format!(
                        "{} links out of the allowed directories",
                        entry.path().display()
                    )));
                }
                if file.is_file() {
                    paths.push(file);
                }
            }
        } else {
            paths.push(path);
        }
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let url = Url::from_file_path(&path).map_err(|()| {
                SourceError::Invalid(format!("{} has no file URI", path.display()))
            })?;
            let object = self.object(&url).map_err(|error| invalid(&error))?;
            let stamp = object.stamp().await.map_err(|error| invalid(&error))?;
            let name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push(Located {
                name,
                object,
                stamp,
            });
        }
        Ok(files)
    }

    /// An object store's source: the object `uri` names, or the objects
    /// directly under it.
    async fn locate_remote(&self, uri: &str, parsed: Url) -> Result<Vec<Located>, SourceError> {
        let invalid = |error: &dyn std::fmt::Display| {
            SourceError::Invalid(format!("source.uri {uri:?}: {error}"))
        };
        let under = |root: &Root| match root {
            Root::Remote(root) => {
                root.host_str() == parsed.host_str()
                    && (parsed.path().starts_with(root.path())
                        || format!("{}/", parsed.path()) == root.path())
            }
            Root::Local(_) => false,
        };
        if !self.roots.iter().any(under) {
            return Err(outside(uri));
        }
        let object = self.object(&parsed).map_err(|error| invalid(&error))?;
        if is_parquet(parsed.path())
            && let Ok(stamp) = object.stamp().await
        {
            let name = object.path().filename().unwrap_or_default().to_owned();
            return Ok(vec![Located {
                name,
                object,
                stamp,
            }]);
        }
        let listed = object
            .store()
            .list_with_delimiter(Some(object.path()))
            .await
            .map_err(|error| invalid(&error))?;
        Ok(listed
            .objects
            .iter()
            .filter(|meta| meta.location.filename().is_some_and(is_parquet))
            .map(|meta| Located {
                name: meta.location.filename().unwrap_or_default().to_owned(),
                object: object.at(meta.location.clone()),
                stamp: stamp_of(meta),
            })
            .collect())
    }

    /// The allowed local root `path` is under, canonical.
    fn root_of(&self, path: &Path) -> Option<PathBuf> {
        self.roots
            .iter()
            .filter_map(|root| match root {
                Root::Local(root) => root.canonicalize().ok(),
                Root::Remote(_) => None,
            })
            .find(|root| path.starts_with(root))
    }
}

fn outside(uri: &str) -> SourceError {
    SourceError::Forbidden(format!(
        "source.uri {uri:?} is not under any directory DPGATE_DATA_ROOTS allows"
    ))
}

/// The manifest's records of `files` as version `version` of a dataset,
/// `rows` and `hashes` each file's: every file as the version's inputs and
/// as its outcomes. A file whose metadata changed since it was located is
/// refused (it changed while it was read).
pub async fn manifest(
    files: &[Located],
    rows: &[u64],
    hashes: &[(String, ChunkHashes)],
    version: u64,
) -> Result<Vec<VersionFile>, SourceError> {
    let mut records = Vec::with_capacity(2 * files.len());
    for (seq, ((file, &rows), (sha256, chunks))) in files.iter().zip(rows).zip(hashes).enumerate() {
        if file.object.stamp().await.ok().as_ref() != Some(&file.stamp) {
            return Err(SourceError::Invalid(format!(
                "{} changed while it was registered",
                file.name
            )));
        }
        for part in [FilePart::Inputs, FilePart::Outcomes] {
            records.push(VersionFile {
                version,
                part,
                seq: seq as u64,
                path: file.url().to_string(),
                rows,
                bytes: file.stamp.bytes,
                sha256: sha256.clone(),
                modified_ns: Some(file.stamp.modified_ns),
                etag: file.stamp.etag.clone(),
                chunks: Some(chunks.clone()),
            });
        }
    }
    Ok(records)
}

/// Why `stamp` (a recorded file's metadata now) is not what the manifest
/// recorded, or `None`: the size, and a registered file's modification
/// time and entity tag.
pub(super) fn differs(file: &VersionFile, stamp: &Stamp) -> Option<String> {
    if stamp.bytes != file.bytes {
        return Some(format!(
            "{} is {} bytes where the manifest recorded {}",
            file.path, stamp.bytes, file.bytes
        ));
    }
    let modified = file
        .modified_ns
        .is_some_and(|recorded| recorded != stamp.modified_ns);
    let retagged = file.etag.is_some() && file.etag != stamp.etag;
    (modified || retagged).then(|| format!("{} was modified after it was registered", file.path))
}

/// Why `file` no longer matches its record, from its metadata alone, or
/// `None`.
async fn changed(dir: &DataDir, file: &VersionFile) -> Option<String> {
    let object = match dir.object_of(file) {
        Ok(object) => object,
        Err(error) => return Some(error.to_string()),
    };
    match object.stamp().await {
        Err(error) => Some(error.to_string()),
        Ok(stamp) => differs(file, &stamp),
    }
}

/// Checks every file of a snapshot against its record from metadata alone,
/// reading none of it: what a release does before its debit, so that a
/// file changed since it was recorded costs nothing.
pub async fn unchanged(dir: &DataDir, files: &[VersionFile]) -> Result<(), StoreError> {
    // A few at a time: an object store answers each in a round trip.
    for some in files.chunks(16) {
        let changes = futures_util::future::join_all(some.iter().map(|file| changed(dir, file)));
        if let Some(why) = changes.await.into_iter().flatten().next() {
            return Err(StoreError::Changed(why));
        }
    }
    Ok(())
}
