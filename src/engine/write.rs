//! Writing one upload's two files, hashed as they are written, to the
//! data directory on local disk or in an object store.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Float32Array, Float64Array, RecordBatch, StringArray, UInt8Array, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use object_store::{ObjectStoreExt, WriteMultipart};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use sha2::{Digest, Sha256};
use tokio::runtime::Handle;
use uuid::Uuid;

use super::chunk_hashes::{RangeHashes, chunk_ranges};
use super::objects::Object;
use super::{DataDir, io_error};
use crate::domain::dataset::{ChunkHashes, FilePart, ROW_ID, Schema, VersionFile};
use crate::ingest::user_fingerprints;
use crate::snapshots::{Columns, STREAM_ROWS, USER_TYPE};
use crate::store::StoreError;

/// Rows per Parquet row group: a streamed block's worth, so that a reader
/// holds one group of each file at a time.
const GROUP_ROWS: usize = STREAM_ROWS;

/// The Arrow schemas of a version's two files: inputs (`row_id`, the
/// features scaled into [0, 1], the dimensions as codes into their
/// declared values) and outcomes (the label, the clamped measures, and
/// under unit `user` each row's person's keyed fingerprint, private like
/// them and of a fixed width), every column named as in the dataset's
/// schema.
pub(super) fn file_schemas(schema: &Schema) -> (Arc<ArrowSchema>, Arc<ArrowSchema>) {
    let column = |name: &str, kind: DataType| Field::new(name, kind, false);
    let inputs = std::iter::once(column(ROW_ID, DataType::Utf8))
        .chain(
            schema
                .features
                .iter()
                .map(|feature| column(&feature.name, DataType::Float32)),
        )
        .chain(
            schema
                .dimensions
                .iter()
                .map(|dimension| column(&dimension.name, DataType::UInt32)),
        );
    let outcomes = std::iter::once(column(&schema.label, DataType::UInt8))
        .chain(
            schema
                .measures
                .iter()
                .map(|measure| column(&measure.name, DataType::Float64)),
        )
        .chain(
            schema
                .users
                .iter()
                .map(|users| column(&users.column, USER_TYPE)),
        );
    (
        Arc::new(ArrowSchema::new(inputs.collect::<Vec<_>>())),
        Arc::new(ArrowSchema::new(outcomes.collect::<Vec<_>>())),
    )
}

/// How each part is written. Neither uses dictionaries or compresses
/// numbers (scaled floats and codes barely compress, and trying costs
/// most of an upload's time); the inputs keep Parquet's statistics and
/// compress the ids' text with Snappy. Outcomes are private: nothing
/// derived from their values (statistics, page indexes, bloom filters,
/// dictionaries, compressed sizes) is written, so the file's layout and
/// size are a function of its row count alone and no reader can prune on
/// it.
pub(super) fn properties(part: FilePart) -> WriterProperties {
    let builder = WriterProperties::builder()
        .set_max_row_group_row_count(Some(GROUP_ROWS))
        .set_dictionary_enabled(false)
        .set_compression(Compression::UNCOMPRESSED);
    match part {
        FilePart::Inputs => {
            builder.set_column_compression(ColumnPath::from(ROW_ID), Compression::SNAPPY)
        }
        FilePart::Outcomes => builder
            .set_statistics_enabled(EnabledStatistics::None)
            .set_offset_index_disabled(true)
            .set_bloom_filter_enabled(false)
            .set_encoding(Encoding::PLAIN),
    }
    .build()
}

/// Where a file's bytes go: a file in a local data directory, or an
/// object store's multipart upload (completed when the file is closed, so
/// the object appears whole or not at all).
enum Sink {
    Local(File),
    Remote {
        upload: WriteMultipart,
        handle: Handle,
    },
}

/// Parts of a remote file in flight at once.
const UPLOADS_IN_FLIGHT: usize = 4;

/// A file being written, its bytes hashed (whole, and by the parts a read
/// fetches) and counted on the way out.
struct Hashed {
    sink: Sink,
    hash: Sha256,
    chunks: RangeHashes,
    bytes: u64,
}

impl Write for Hashed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = match &mut self.sink {
            Sink::Local(file) => file.write(buf)?,
            Sink::Remote { upload, handle } => {
                handle
                    .block_on(upload.wait_for_capacity(UPLOADS_IN_FLIGHT))
                    .map_err(std::io::Error::other)?;
                upload.write(buf);
                buf.len()
            }
        };
        self.hash.update(&buf[..written]);
        self.chunks.feed(&buf[..written]);
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Local(file) => file.flush(),
            Sink::Remote { .. } => Ok(()),
        }
    }
}

impl Hashed {
    /// Closes the file (flushed to disk, or its upload completed): its
    /// size, SHA-256 and parts' hashes.
    fn close(self, path: &str) -> Result<(u64, String, ChunkHashes), StoreError> {
        let chunks = self
            .chunks
            .finish_file(self.bytes)
            .map_err(|error| io_error(path, error))?;
        match self.sink {
            Sink::Local(file) => file.sync_all().map_err(|error| io_error(path, error))?,
            Sink::Remote { upload, handle } => {
                handle
                    .block_on(upload.finish())
                    .map_err(|error| io_error(path, error))?;
            }
        }
        Ok((self.bytes, hex::encode(self.hash.finalize()), chunks))
    }
}

/// Files written but not yet recorded: removed when dropped unless kept,
/// so an upload that fails leaves nothing behind.
#[derive(Debug, Default)]
pub struct Written {
    paths: Vec<PathBuf>,
    objects: Vec<Object>,
}

impl Written {
    /// The manifest now records them.
    pub fn keep(mut self) {
        self.paths.clear();
        self.objects.clear();
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        for path in &self.paths {
            if let Err(error) = std::fs::remove_file(path)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), %error, "an unrecorded file was not removed");
            }
        }
        // An object store's are removed in the background (a drop cannot
        // wait); one left behind is the start-up sweep's.
        let Ok(handle) = Handle::try_current() else {
            return;
        };
        for object in std::mem::take(&mut self.objects) {
            handle.spawn(async move {
                if let Err(error) = object.store().delete(object.path()).await {
                    tracing::warn!(url = %object.url(), %error, "an unrecorded file was not removed");
                }
            });
        }
    }
}

struct Part {
    writer: ArrowWriter<Hashed>,
    path: String,
    /// Row groups whose chunks the sink was told of.
    told_groups: usize,
}

impl Part {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), StoreError> {
        self.writer
            .write(batch)
            .map_err(|error| io_error(&self.path, error))?;
        // Told as each row group is written, the sink keeps no more than
        // one group's bytes.
        let groups = self.writer.flushed_row_groups();
        let ranges = chunk_ranges(&groups[self.told_groups..]);
        self.told_groups = groups.len();
        self.writer
            .inner_mut()
            .chunks
            .extend(&ranges)
            .map_err(|error| io_error(&self.path, error))
    }
}

/// One upload's files, written block by block.
pub(super) struct VersionWriter {
    inputs: Part,
    outcomes: Part,
    schemas: (Arc<ArrowSchema>, Arc<ArrowSchema>),
    version: u64,
    rows: u64,
    written: Written,
    /// The folder, on local disk, whose new names a close makes durable.
    folder: Option<PathBuf>,
}

impl VersionWriter {
    /// Creates the files of dataset `dataset`'s upload at `version` (its
    /// row count before). Their names carry a random tag: a file of an
    /// upload that failed, or of a process that raced this one, is never
    /// overwritten or taken for this one's. On a blocking thread of the
    /// runtime.
    pub(super) fn create(
        dir: &DataDir,
        dataset: Uuid,
        version: u64,
        schema: &Schema,
    ) -> Result<VersionWriter, StoreError> {
        let folder = dataset.to_string();
        let local = dir.root().map(|root| root.join(&folder));
        if let Some(local) = &local {
            std::fs::create_dir_all(local).map_err(|error| io_error(local.display(), error))?;
        }
        let tag = &Uuid::new_v4().simple().to_string()[..12];
        let schemas = file_schemas(schema);
        let mut written = Written::default();
        let mut open = |part: FilePart, schema: &Arc<ArrowSchema>| {
            let name = format!("{version:020}-{tag}-{}.parquet", part.as_str());
            let path = format!("{folder}/{name}");
            let sink = match &local {
                Some(local) => {
                    let full = local.join(&name);
                    let file =
                        File::create_new(&full).map_err(|error| io_error(full.display(), error))?;
                    written.paths.push(full);
                    Sink::Local(file)
                }
                None => {
                    let object = dir.object_at(&path)?;
                    let handle = Handle::try_current().map_err(|error| io_error(&path, error))?;
                    let upload = handle
                        .block_on(object.store().put_multipart(object.path()))
                        .map_err(|error| io_error(object.url(), error))?;
                    written.objects.push(object);
                    Sink::Remote {
                        upload: WriteMultipart::new(upload),
                        handle,
                    }
                }
            };
            let sink = Hashed {
                sink,
                hash: Sha256::new(),
                chunks: RangeHashes::default(),
                bytes: 0,
            };
            let writer = ArrowWriter::try_new(sink, schema.clone(), Some(properties(part)))
                .map_err(|error| io_error(&path, error))?;
            Ok::<_, StoreError>(Part {
                writer,
                path,
                told_groups: 0,
            })
        };
        let inputs = open(FilePart::Inputs, &schemas.0)?;
        let outcomes = open(FilePart::Outcomes, &schemas.1)?;
        Ok(VersionWriter {
            inputs,
            outcomes,
            schemas,
            version,
            rows: 0,
            written,
            folder: local,
        })
    }

    /// Appends a block of rows (with their outcomes).
    pub(super) fn write(&mut self, block: &Columns) -> Result<(), StoreError> {
        let (inputs, outcomes) = batches(block, &self.schemas)?;
        self.inputs.write(&inputs)?;
        self.outcomes.write(&outcomes)?;
        self.rows += block.len() as u64;
        Ok(())
    }

    /// Closes both files, flushed to disk or uploaded, and describes them
    /// for the manifest; they are removed when the returned guard drops
    /// unless it is kept.
    pub(super) fn finish(self) -> Result<(Vec<VersionFile>, Written), StoreError> {
        let mut files = Vec::with_capacity(2);
        for (part, kind) in [
            (self.inputs, FilePart::Inputs),
            (self.outcomes, FilePart::Outcomes),
        ] {
            let sink = part
                .writer
                .into_inner()
                .map_err(|error| io_error(&part.path, error))?;
            let (bytes, sha256, chunks) = sink.close(&part.path)?;
            files.push(VersionFile {
                version: self.version,
                part: kind,
                seq: 0,
                path: part.path,
                rows: self.rows,
                bytes,
                sha256,
                modified_ns: None,
                etag: None,
                chunks: Some(chunks),
            });
        }
        if let Some(folder) = &self.folder {
            // The new names must survive a crash once the manifest has them.
            File::open(folder)
                .and_then(|folder| folder.sync_all())
                .map_err(|error| io_error(folder.display(), error))?;
        }
        Ok((files, self.written))
    }
}

/// A block as the two files' record batches.
fn batches(
    block: &Columns,
    (inputs, outcomes): &(Arc<ArrowSchema>, Arc<ArrowSchema>),
) -> Result<(RecordBatch, RecordBatch), StoreError> {
    let shape = block.shape();
    let rows = block.len();
    let mut input_columns: Vec<ArrayRef> = Vec::with_capacity(inputs.fields().len());
    input_columns.push(Arc::new(StringArray::from_iter_values(
        (0..rows).map(|row| block.id(row)),
    )));
    let features = block.feature_matrix();
    for j in 0..shape.features {
        input_columns.push(Arc::new(Float32Array::from_iter_values(
            (0..rows).map(|row| features[row * shape.features + j]),
        )));
    }
    for j in 0..shape.dimensions {
        input_columns.push(Arc::new(UInt32Array::from(block.dimension(j).to_vec())));
    }
    let mut outcome_columns: Vec<ArrayRef> = Vec::with_capacity(outcomes.fields().len());
    outcome_columns.push(Arc::new(UInt8Array::from(block.labels().to_vec())));
    for j in 0..shape.measures {
        outcome_columns.push(Arc::new(Float64Array::from(block.measure(j).to_vec())));
    }
    if shape.users {
        outcome_columns.push(
            user_fingerprints(block.users().to_vec())
                .map_err(|error| io_error("a block", error))?,
        );
    }
    let batch = |schema: &Arc<ArrowSchema>, columns| {
        RecordBatch::try_new(schema.clone(), columns).map_err(|error| io_error("a block", error))
    };
    Ok((
        batch(inputs, input_columns)?,
        batch(outcomes, outcome_columns)?,
    ))
}
