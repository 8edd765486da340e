//! Files wherever they are, through the `object_store` crate: on local
//! disk (`file://`) or in an object store (`s3://bucket/prefix/`, its
//! endpoint and credentials from the usual `AWS_*` variables). The
//! readers run on the runtime's blocking threads (a pass decodes there)
//! and wait there on each fetch. An object store's Parquet is read with
//! the crate's asynchronous reader, which fetches a row group's column
//! chunks in a few ranged requests instead of a seek per page; a local
//! file's, by the synchronous reader, a page at a time, which holds far
//! less memory when a writer made its row groups large.

use std::io::Read;
use std::sync::Arc;

use arrow_array::RecordBatch;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use object_store::path::Path as ObjectPath;
use object_store::registry::ObjectStoreRegistry;
use object_store::{GetResultPayload, ObjectStore, ObjectStoreExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::async_reader::{
    AsyncFileReader, ParquetRecordBatchStream, ParquetRecordBatchStreamBuilder,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use sha2::{Digest, Sha256};
use tokio::runtime::Handle;
use url::Url;

use super::{DataDir, io_error};
use crate::dataset::VersionFile;
use crate::store::StoreError;

/// An object: its store, its path in it, and its URL (for messages).
#[derive(Debug, Clone)]
pub struct Object {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: Url,
}

/// What an object's metadata says of it, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub bytes: u64,
    /// Nanoseconds since the Unix epoch (an object store's are whole
    /// seconds).
    pub modified_ns: i64,
    pub etag: Option<String>,
}

impl Object {
    pub fn url(&self) -> &Url {
        &self.url
    }

    pub(super) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub(super) fn path(&self) -> &ObjectPath {
        &self.path
    }

    /// The object at `path` in the same store (an object store rooted at
    /// its bucket).
    pub(super) fn at(&self, path: ObjectPath) -> Object {
        let mut url = self.url.clone();
        url.set_path(&format!("/{path}"));
        Object {
            store: self.store.clone(),
            path,
            url,
        }
    }

    /// Its metadata now; one that is gone is a changed file.
    pub async fn stamp(&self) -> Result<Stamp, StoreError> {
        match self.store.head(&self.path).await {
            Ok(meta) => Ok(stamp_of(&meta)),
            Err(error @ object_store::Error::NotFound { .. }) => {
                Err(StoreError::Changed(format!("{}: {error}", self.url)))
            }
            Err(error) => Err(io_error(&self.url, error)),
        }
    }

    /// A reader of its Parquet batches of `batch_rows` rows, of the
    /// columns `columns` picks from its schema; it is `bytes` long. On a
    /// blocking thread of the runtime. A local file is read page by page
    /// by Parquet's synchronous reader; an object store's, row group by
    /// row group, each group's column chunks fetched in one go (so its
    /// memory is a group's projected columns).
    pub fn batches(
        &self,
        bytes: u64,
        batch_rows: usize,
        columns: impl FnOnce(&parquet::schema::types::SchemaDescriptor) -> ProjectionMask,
    ) -> Result<Batches, ParquetError> {
        if let Some(path) = self.local_path() {
            let file = std::fs::File::open(path)
                .map_err(|error| ParquetError::External(Box::new(error)))?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
            let mask = columns(builder.parquet_schema());
            let reader = builder
                .with_projection(mask)
                .with_batch_size(batch_rows)
                .build()?;
            return Ok(Batches::Local(reader));
        }
        let builder = self.parquet(bytes)?;
        let mask = columns(builder.parquet_schema());
        let stream = builder
            .with_projection(mask)
            .with_batch_size(batch_rows)
            .build()?;
        Ok(Batches::Remote {
            stream,
            handle: runtime()?,
        })
    }

    /// Its path, if it is a local file.
    fn local_path(&self) -> Option<std::path::PathBuf> {
        (self.url.scheme() == "file")
            .then(|| self.url.to_file_path().ok())
            .flatten()
    }

    /// Its Parquet footer, read; it is `bytes` long. On a blocking thread
    /// of the runtime.
    pub fn parquet(
        &self,
        bytes: u64,
    ) -> Result<ParquetRecordBatchStreamBuilder<ObjectReader>, ParquetError> {
        let reader = ObjectReader {
            object: self.clone(),
            bytes,
        };
        runtime()?.block_on(ParquetRecordBatchStreamBuilder::new(reader))
    }

    /// The SHA-256 of its bytes, lowercase hex: a local file read in
    /// large blocks, an object store's as it streams in. On a blocking
    /// thread, waiting on `handle`'s runtime.
    pub fn sha256(&self, handle: &Handle) -> Result<String, StoreError> {
        let failed = |error| io_error(&self.url, error);
        let got = handle
            .block_on(self.store.get(&self.path))
            .map_err(failed)?;
        let mut hash = Sha256::new();
        match got.payload {
            // Not `into_stream`, which reads a local file 8 KiB at a time.
            GetResultPayload::File(mut file, _) => {
                let mut buffer = vec![0; 1 << 20];
                loop {
                    match file.read(&mut buffer) {
                        Ok(0) => break,
                        Ok(read) => hash.update(&buffer[..read]),
                        Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(error) => return Err(io_error(&self.url, error)),
                    }
                }
            }
            GetResultPayload::Stream(mut chunks) => {
                while let Some(chunk) = handle.block_on(chunks.next()) {
                    hash.update(chunk.map_err(failed)?);
                }
            }
        }
        Ok(hex::encode(hash.finalize()))
    }
}

/// The runtime this blocking thread serves.
fn runtime() -> Result<Handle, ParquetError> {
    Handle::try_current().map_err(|error| ParquetError::External(Box::new(error)))
}

pub(super) fn stamp_of(meta: &object_store::ObjectMeta) -> Stamp {
    Stamp {
        bytes: meta.size,
        modified_ns: meta.last_modified.timestamp_nanos_opt().unwrap_or(i64::MAX),
        etag: meta.e_tag.clone(),
    }
}

/// Parquet's reader of an object of known size: each range it asks for is
/// one ranged request (those of a row group's column chunks go together,
/// close ones merged by the store); the footer is read with one request
/// of its last 64 KiB (a second one if the metadata is larger).
pub struct ObjectReader {
    object: Object,
    bytes: u64,
}

/// Enough of a file's tail for the footer of a file of many row groups.
const FOOTER_HINT: usize = 64 * 1024;

fn fetch_error(error: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(error))
}

impl AsyncFileReader for ObjectReader {
    fn get_bytes(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        Box::pin(async move {
            self.object
                .store
                .get_range(&self.object.path, range)
                .await
                .map_err(fetch_error)
        })
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<std::ops::Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        Box::pin(async move {
            self.object
                .store
                .get_ranges(&self.object.path, &ranges)
                .await
                .map_err(fetch_error)
        })
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        Box::pin(async move {
            let bytes = self.bytes;
            let metadata = ParquetMetaDataReader::new()
                .with_metadata_options(options.map(|options| options.metadata_options().clone()))
                .with_prefetch_hint(Some(FOOTER_HINT))
                .load_and_finish(self, bytes)
                .await?;
            Ok(Arc::new(metadata))
        })
    }
}

/// A Parquet file's batches, read as they are asked for: an iterator for
/// a blocking thread.
pub enum Batches {
    Local(ParquetRecordBatchReader),
    Remote {
        stream: ParquetRecordBatchStream<ObjectReader>,
        handle: Handle,
    },
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, ParquetError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Batches::Local(reader) => reader.next().map(|batch| batch.map_err(ParquetError::from)),
            Batches::Remote { stream, handle } => handle.block_on(stream.next()),
        }
    }
}

impl DataDir {
    /// The object at `url`: a `file://` URL or an object store's.
    pub fn object(&self, url: &Url) -> Result<Object, StoreError> {
        let (store, path) = self
            .stores
            .resolve(url)
            .map_err(|error| io_error(url, error))?;
        Ok(Object {
            store,
            path,
            url: url.clone(),
        })
    }

    /// Where a recorded file is: in the data directory, or (registered
    /// in place) at its URI.
    pub(super) fn object_of(&self, file: &VersionFile) -> Result<Object, StoreError> {
        let url = if file.registered() {
            Url::parse(&file.path)
        } else {
            self.location.join(&file.path)
        }
        .map_err(|error| StoreError::Corrupt {
            what: "dataset file",
            detail: format!("{} is not a file's address: {error}", file.path),
        })?;
        self.object(&url)
    }

    /// The object `relative` names in the data directory.
    pub(super) fn object_at(&self, relative: &str) -> Result<Object, StoreError> {
        let url = self
            .location
            .join(relative)
            .map_err(|error| io_error(relative, error))?;
        self.object(&url)
    }
}
