//! Files wherever they are, through the `object_store` crate: on local
//! disk (`file://`) or in an object store (`s3://bucket/prefix/`, its
//! endpoint and credentials from the usual `AWS_*` variables). The
//! readers run on the runtime's blocking threads (a pass decodes there)
//! and wait there on each fetch. Parquet is read with the crate's
//! asynchronous reader, which fetches a row group's column chunks whole
//! (in a few ranged requests to an object store instead of a seek per
//! page), so each chunk is checked against its recorded hash before a
//! value of it is decoded. A reader holds one row group's projected
//! columns: dpgate writes groups of 65,536 rows; a registered file's
//! groups are as its writer made them.

use std::io::Read;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use object_store::path::Path as ObjectPath;
use object_store::registry::ObjectStoreRegistry;
use object_store::{GetResultPayload, ObjectStore, ObjectStoreExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{
    AsyncFileReader, ParquetRecordBatchStream, ParquetRecordBatchStreamBuilder,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use sha2::{Digest, Sha256};
use tokio::runtime::Handle;
use url::Url;

use super::chunk_hashes::{RangeHashes, checked_ranges, footer_bytes, hash, metadata_bytes};
use super::{DataDir, io_error};
use crate::domain::dataset::{ChunkHashes, VersionFile};
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
    /// columns `columns` picks from its schema, the text columns named in
    /// `dictionaries` read as Arrow dictionaries; it is `bytes` long, and
    /// each part read is checked against `checks` when there are. On a
    /// blocking thread of the runtime. It reads row group by row group,
    /// each group's column chunks fetched in one go (a few ranged
    /// requests to an object store), so its memory is a group's projected
    /// columns.
    pub fn batches(
        &self,
        bytes: u64,
        checks: Option<&ChunkHashes>,
        batch_rows: usize,
        dictionaries: &[&str],
        columns: impl FnOnce(&parquet::schema::types::SchemaDescriptor) -> ProjectionMask,
    ) -> Result<Batches, ParquetError> {
        let builder = self.parquet(bytes, checks, dictionaries)?;
        let mask = columns(builder.parquet_schema());
        let stream = builder
            .with_projection(mask)
            .with_batch_size(batch_rows)
            .build()?;
        Ok(Batches {
            stream,
            handle: runtime()?,
        })
    }

    /// Its Parquet footer, read (and checked against `checks` when there
    /// are), for a reader of the text columns named in `dictionaries` as
    /// Arrow dictionaries; it is `bytes` long. On a blocking thread of the
    /// runtime.
    pub fn parquet(
        &self,
        bytes: u64,
        checks: Option<&ChunkHashes>,
        dictionaries: &[&str],
    ) -> Result<ParquetRecordBatchStreamBuilder<ObjectReader>, ParquetError> {
        let mut reader = ObjectReader {
            object: self.clone(),
            bytes,
            checks: checks.map(|hashes| Checks {
                hashes: hashes.clone(),
                chunks: Vec::new(),
            }),
        };
        runtime()?.block_on(async {
            let options = ArrowReaderOptions::new();
            let metadata = ArrowReaderMetadata::load_async(&mut reader, options.clone()).await?;
            let metadata = match as_dictionaries(metadata.schema(), dictionaries) {
                Some(schema) => ArrowReaderMetadata::try_new(
                    metadata.metadata().clone(),
                    options.with_schema(schema),
                )?,
                None => metadata,
            };
            Ok(ParquetRecordBatchStreamBuilder::new_with_metadata(
                reader, metadata,
            ))
        })
    }

    /// Its bytes, in order, to `each`: a local file read in large blocks,
    /// an object store's as it streams in. On a blocking thread, waiting
    /// on `handle`'s runtime.
    fn read_all(&self, handle: &Handle, mut each: impl FnMut(&[u8])) -> Result<(), StoreError> {
        let failed = |error| io_error(&self.url, error);
        let got = handle
            .block_on(self.store.get(&self.path))
            .map_err(failed)?;
        match got.payload {
            // Not `into_stream`, which reads a local file 8 KiB at a time.
            GetResultPayload::File(mut file, _) => {
                let mut buffer = vec![0; 1 << 20];
                loop {
                    match file.read(&mut buffer) {
                        Ok(0) => break,
                        Ok(read) => each(&buffer[..read]),
                        Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(error) => return Err(io_error(&self.url, error)),
                    }
                }
            }
            GetResultPayload::Stream(mut chunks) => {
                while let Some(chunk) = handle.block_on(chunks.next()) {
                    each(&chunk.map_err(failed)?);
                }
            }
        }
        Ok(())
    }

    /// The SHA-256 of its bytes, lowercase hex. On a blocking thread,
    /// waiting on `handle`'s runtime.
    pub fn sha256(&self, handle: &Handle) -> Result<String, StoreError> {
        let mut hash = Sha256::new();
        self.read_all(handle, |bytes| hash.update(bytes))?;
        Ok(hex::encode(hash.finalize()))
    }

    /// The SHA-256 of its bytes (lowercase hex) and the BLAKE3 hashes of
    /// its Parquet parts, in one read after its footer's; it is `bytes`
    /// long. On a blocking thread, waiting on `handle`'s runtime.
    pub fn hashes(&self, handle: &Handle, bytes: u64) -> Result<(String, ChunkHashes), StoreError> {
        let failed = |error: String| StoreError::Changed(format!("{}: {error}", self.url));
        let mut reader = ObjectReader {
            object: self.clone(),
            bytes,
            checks: None,
        };
        let (metadata, footer) = handle
            .block_on(reader.footer(None))
            .map_err(|error| io_error(&self.url, error))?;
        let mut chunks = RangeHashes::default();
        chunks
            .extend(&checked_ranges(&metadata, bytes, footer).map_err(failed)?)
            .map_err(failed)?;
        let mut hash = Sha256::new();
        self.read_all(handle, |bytes| {
            hash.update(bytes);
            chunks.feed(bytes);
        })?;
        Ok((
            hex::encode(hash.finalize()),
            chunks.finish(footer).map_err(failed)?,
        ))
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
/// close ones merged by the store). With `Checks`, every part it reads
/// (the footer, then whole column chunks) is checked against the hashes
/// the manifest recorded before it is decoded, so a pass decodes only the
/// bytes that were recorded and hashes only the columns it reads.
pub struct ObjectReader {
    object: Object,
    bytes: u64,
    checks: Option<Checks>,
}

/// What a checked reader's parts must hash to.
struct Checks {
    hashes: ChunkHashes,
    /// The column chunks' ranges then the footer's, in file order, once
    /// the footer is read and checked.
    chunks: Vec<Range<u64>>,
}

/// Enough of a file's tail for the footer of a file of many row groups.
const FOOTER_HINT: u64 = 64 * 1024;

fn fetch_error(error: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(error))
}

/// A file that is not what the manifest recorded.
fn changed(url: &Url, why: impl std::fmt::Display) -> ParquetError {
    ParquetError::External(Box::new(StoreError::Changed(format!("{url}: {why}"))))
}

impl Checks {
    /// Whether `bytes` are a whole column chunk as recorded.
    fn check(&self, url: &Url, range: &Range<u64>, bytes: &[u8]) -> Result<(), ParquetError> {
        let index = self
            .chunks
            .binary_search_by_key(&range.start, |chunk| chunk.start)
            .ok()
            .filter(|&index| self.chunks[index] == *range && index + 1 < self.chunks.len())
            .ok_or_else(|| {
                changed(
                    url,
                    format!("bytes {range:?} are not a column chunk it was recorded with"),
                )
            })?;
        if self.hashes.get(index) == Some(&hash(bytes)[..]) {
            Ok(())
        } else {
            Err(changed(
                url,
                "a column chunk's BLAKE3 hash is not the manifest's",
            ))
        }
    }
}

impl ObjectReader {
    async fn fetch(&self, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        self.object
            .store
            .get_range(&self.object.path, range)
            .await
            .map_err(fetch_error)
    }

    /// Its footer, decoded, and its length. A checked reader fetches the
    /// recorded length and checks it; an unchecked one fetches the last
    /// 64 KiB, then the rest if the metadata is larger.
    async fn footer(
        &mut self,
        options: Option<&ArrowReaderOptions>,
    ) -> parquet::errors::Result<(ParquetMetaData, u64)> {
        let url = &self.object.url;
        let footer = match &self.checks {
            Some(checks) => {
                let length = checks.hashes.footer_bytes;
                let start = self
                    .bytes
                    .checked_sub(length)
                    .ok_or_else(|| changed(url, "it is shorter than its recorded footer"))?;
                let footer = self.fetch(start..self.bytes).await?;
                let last = checks.hashes.count().and_then(|count| count.checked_sub(1));
                if last.and_then(|last| checks.hashes.get(last)) != Some(&hash(&footer)[..]) {
                    return Err(changed(
                        url,
                        "its footer's BLAKE3 hash is not the manifest's",
                    ));
                }
                footer
            }
            None => {
                let hint = FOOTER_HINT.min(self.bytes);
                let tail = self.fetch(self.bytes - hint..self.bytes).await?;
                let length = tail
                    .len()
                    .checked_sub(8)
                    .and_then(|at| footer_bytes(&tail[at..]))
                    .filter(|&length| length <= self.bytes)
                    .ok_or_else(|| ParquetError::General("not a Parquet file".to_owned()))?;
                if length <= hint {
                    tail.slice((hint - length) as usize..)
                } else {
                    self.fetch(self.bytes - length..self.bytes).await?
                }
            }
        };
        let metadata = ParquetMetaDataReader::decode_metadata_with_options(
            metadata_bytes(&footer),
            options.map(ArrowReaderOptions::metadata_options),
        )?;
        let length = footer.len() as u64;
        if let Some(checks) = &mut self.checks {
            let ranges = checked_ranges(&metadata, self.bytes, length)
                .map_err(|error| changed(url, error))?;
            if checks.hashes.count() != Some(ranges.len()) {
                return Err(changed(url, "its parts are not those the manifest hashed"));
            }
            checks.chunks = ranges;
        }
        Ok((metadata, length))
    }
}

/// `schema` with its text columns named in `names` as dictionaries of
/// their values (`None`: no such column). Parquet writers encode a column
/// of few distinct values with a dictionary page as a rule: read as a
/// dictionary, it stays its page's few values and a key a row, where read
/// as text it is a string built for every row (14% of an aggregate's time
/// over registered files, and matching those strings to the declared
/// values another 19%).
fn as_dictionaries(schema: &SchemaRef, names: &[&str]) -> Option<SchemaRef> {
    let mut changed = false;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| {
            let text = matches!(
                field.data_type(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            );
            if text && names.contains(&field.name().as_str()) {
                changed = true;
                let dictionary = DataType::Dictionary(
                    Box::new(DataType::Int32),
                    Box::new(field.data_type().clone()),
                );
                field.as_ref().clone().with_data_type(dictionary)
            } else {
                field.as_ref().clone()
            }
        })
        .collect();
    changed.then(|| Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

impl AsyncFileReader for ObjectReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        Box::pin(async move {
            let bytes = self.fetch(range.clone()).await?;
            if let Some(checks) = &self.checks {
                checks.check(&self.object.url, &range, &bytes)?;
            }
            Ok(bytes)
        })
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        Box::pin(async move {
            let fetched = self
                .object
                .store
                .get_ranges(&self.object.path, &ranges)
                .await
                .map_err(fetch_error)?;
            if let Some(checks) = &self.checks {
                for (range, bytes) in ranges.iter().zip(&fetched) {
                    checks.check(&self.object.url, range, bytes)?;
                }
            }
            Ok(fetched)
        })
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        Box::pin(async move { Ok(Arc::new(self.footer(options).await?.0)) })
    }
}

/// A Parquet file's batches, read as they are asked for: an iterator for
/// a blocking thread.
pub struct Batches {
    stream: ParquetRecordBatchStream<ObjectReader>,
    handle: Handle,
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, ParquetError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.handle.block_on(self.stream.next())
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
