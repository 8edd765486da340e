//! Reading a version's files back as blocks of rows.

use std::sync::Arc;

use arrow_array::types::{Float32Type, Float64Type, UInt32Type};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, Decimal128Array, PrimitiveArray, RecordBatch,
    RecordBatchOptions, StringArray, UInt8Array,
};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;
use rayon::slice::ParallelSliceMut;
use tokio::runtime::Handle;

use super::objects::{Batches, Object};
use super::source::differs;
use super::{BlockStream, DataDir, Needed, io_error};
use crate::domain::dataset::{FilePart, ROW_ID, Schema, VersionFile};
use crate::ingest::{fingerprint, stored_columns};
use crate::snapshots::{Builder, Columns, Shape, batch_schema};
use crate::store::StoreError;

/// Rows decoded at a time where features are read: a batch's columns and
/// their row-major copy stay in cache while one is turned into the other.
/// A read of no features takes each batch as a block as it is decoded.
const DECODE_ROWS: usize = 8_192;

fn corrupt(path: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        what: "dataset file",
        detail: format!("{path}: {detail}"),
    }
}

/// The error reading `path` failed with: the reader's own when a part of
/// it was not what the manifest recorded, else a corrupt file.
fn read_failed(path: &str, error: ParquetError) -> StoreError {
    if let ParquetError::External(inner) = &error
        && let Some(StoreError::Changed(why)) = inner.downcast_ref::<StoreError>()
    {
        return StoreError::Changed(why.clone());
    }
    corrupt(path, error)
}

/// A recorded file, after checking its metadata against the manifest: a
/// file that was replaced, truncated, removed or (registered in place)
/// modified is refused before a byte of it is read. On a blocking thread
/// of the runtime.
fn open(dir: &DataDir, file: &VersionFile) -> Result<Object, StoreError> {
    let object = dir.object_of(file)?;
    let stamp = runtime()?.block_on(object.stamp())?;
    if let Some(why) = differs(file, &stamp) {
        return Err(StoreError::Changed(why));
    }
    if file.part == FilePart::Outcomes {
        dir.opened_outcomes();
    }
    Ok(object)
}

fn runtime() -> Result<Handle, StoreError> {
    Handle::try_current().map_err(|error| io_error("reading files", error))
}

/// Checks the whole file's SHA-256 against the manifest, waiting on
/// `handle`'s runtime, unless its reader checks each part it reads.
fn verify(dir: &DataDir, file: &VersionFile, handle: &Handle) -> Result<(), StoreError> {
    if file.chunks.is_some() || dir.object_of(file)?.sha256(handle)? == file.sha256 {
        Ok(())
    } else {
        Err(StoreError::Changed(format!(
            "{}: its SHA-256 is not the manifest's",
            file.path
        )))
    }
}

/// A reader of `file`'s batches: of `columns`, or of the columns of its
/// part that `names` holds.
fn reader(
    dir: &DataDir,
    file: &VersionFile,
    names: &Names,
    batch_rows: usize,
    columns: Option<&[&str]>,
) -> Result<Batches, StoreError> {
    let part = names.of_part(file.part);
    let columns = columns.unwrap_or(&part);
    // dpgate's own files hold dimension codes; a registered file, text.
    let dictionaries: Vec<&str> = if file.registered() {
        names.dimensions.iter().map(String::as_str).collect()
    } else {
        Vec::new()
    };
    open(dir, file)?
        .batches(
            file.bytes,
            file.chunks.as_ref(),
            batch_rows,
            &dictionaries,
            |schema| ProjectionMask::columns(schema, columns.iter().copied()),
        )
        .map_err(|error| read_failed(&file.path, error))
}

/// A batch of `file` as dpgate's own files hold it: a registered file's
/// typed columns are checked and encoded as an upload's rows would be.
fn encoded(
    file: &VersionFile,
    schema: &Schema,
    batch: Result<RecordBatch, ParquetError>,
) -> Result<RecordBatch, StoreError> {
    let batch = batch.map_err(|error| read_failed(&file.path, error))?;
    if !file.registered() {
        return Ok(batch);
    }
    stored_columns(&batch, schema).map_err(|detail| {
        StoreError::Changed(format!(
            "{} no longer holds the rows it was registered with: {detail}",
            file.path
        ))
    })
}

fn column<'b, T: 'static>(
    batch: &'b RecordBatch,
    name: &str,
    path: &str,
) -> Result<&'b T, StoreError> {
    batch
        .column_by_name(name)
        .and_then(|array| array.as_any().downcast_ref::<T>())
        .ok_or_else(|| corrupt(path, format!("no column {name:?} of the expected type")))
}

/// The values of `batch`'s columns `names`, in that order.
fn values_of<'b, T: ArrowPrimitiveType>(
    batch: &'b RecordBatch,
    names: &[String],
    path: &str,
) -> Result<Vec<&'b [T::Native]>, StoreError> {
    names
        .iter()
        .map(|name| {
            Ok(column::<PrimitiveArray<T>>(batch, name, path)?
                .values()
                .as_ref())
        })
        .collect()
}

/// A version's inputs file and, when read, its outcomes file.
struct Version<'f> {
    inputs: &'f VersionFile,
    outcomes: Option<&'f VersionFile>,
}

/// Each version's files, in manifest order: inputs alone, or paired with
/// its outcomes when they are read.
fn versions(files: &[VersionFile], outcomes: bool) -> Result<Vec<Version<'_>>, StoreError> {
    let mut paired = Vec::new();
    let mut at = files.iter().peekable();
    while let Some(inputs) = at.next() {
        if inputs.part != FilePart::Inputs {
            return Err(corrupt(&inputs.path, "an outcomes file without its inputs"));
        }
        let partner = if outcomes {
            let Some(partner) = at.next_if(|next| {
                (next.version, next.seq) == (inputs.version, inputs.seq)
                    && next.part == FilePart::Outcomes
            }) else {
                return Err(corrupt(&inputs.path, "an inputs file without its outcomes"));
            };
            if partner.rows != inputs.rows {
                return Err(corrupt(&partner.path, "not as many rows as its inputs"));
            }
            Some(partner)
        } else {
            None
        };
        paired.push(Version {
            inputs,
            outcomes: partner,
        });
    }
    Ok(paired)
}

/// One batch of each file, column by column, appended to blocks of rows
/// (which lay them out row-major) a range of rows at a time.
struct Decoded<'b> {
    /// `None` when they are not read: the rows' ids are then empty.
    ids: Option<&'b StringArray>,
    features: Vec<&'b [f32]>,
    dimensions: Vec<&'b [u32]>,
    labels: &'b [u8],
    measures: Vec<&'b [f64]>,
    users: &'b [i128],
}

impl<'b> Decoded<'b> {
    fn of(
        names: &Names,
        inputs: &'b RecordBatch,
        outcomes: Option<&'b RecordBatch>,
        path: &str,
    ) -> Result<Decoded<'b>, StoreError> {
        let ids = match names.ids {
            true => Some(column::<StringArray>(inputs, ROW_ID, path)?),
            false => None,
        };
        if ids.is_some_and(|ids| ids.null_count() > 0) {
            return Err(corrupt(path, "a null row id"));
        }
        let features = values_of::<Float32Type>(inputs, &names.features, path)?;
        let dimensions = values_of::<UInt32Type>(inputs, &names.dimensions, path)?;
        let (mut labels, mut measures, mut users) = (&[][..], Vec::new(), &[][..]);
        if let Some(outcomes) = outcomes {
            if outcomes.num_rows() != inputs.num_rows() {
                return Err(corrupt(
                    path,
                    "its outcomes are out of step with its inputs",
                ));
            }
            if let Some(label) = &names.label {
                labels = column::<UInt8Array>(outcomes, label, path)?.values();
            }
            measures = values_of::<Float64Type>(outcomes, &names.measures, path)?;
            if let Some(user) = &names.users {
                users = column::<Decimal128Array>(outcomes, user, path)?.values();
            }
        }
        Ok(Decoded {
            ids,
            features,
            dimensions,
            labels,
            measures,
            users,
        })
    }

    fn append(&self, block: &mut Builder, rows: std::ops::Range<usize>) -> Result<(), String> {
        fn cut<'c, T>(columns: &[&'c [T]], rows: &std::ops::Range<usize>) -> Vec<&'c [T]> {
            columns.iter().map(|column| &column[rows.clone()]).collect()
        }
        let ids: Vec<&str> = match self.ids {
            Some(ids) => rows.clone().map(|row| ids.value(row)).collect(),
            None => vec![""; rows.len()],
        };
        block.append_columns(
            &ids,
            &cut(&self.features, &rows),
            &cut(&self.dimensions, &rows),
            (
                self.labels.get(rows.clone()).unwrap_or_default(),
                &cut(&self.measures, &rows),
                self.users.get(rows.clone()).unwrap_or_default(),
            ),
        )
    }
}

/// A batch of a file's inputs (and, paired, of its outcomes), encoded as
/// dpgate's files hold them, as a block of rows of `shape`, its columns
/// taken as they are: for a read of no features, which needs no row-major
/// matrix.
fn adopted(
    names: &Names,
    shape: Shape,
    inputs: &RecordBatch,
    outcomes: Option<&RecordBatch>,
) -> Result<Columns, String> {
    fn named(batch: &RecordBatch, name: &str) -> Result<ArrayRef, String> {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| format!("no column {name:?}"))
    }
    let rows = inputs.num_rows();
    let mut columns = Vec::new();
    if names.ids {
        columns.push(named(inputs, ROW_ID)?);
    }
    for name in &names.dimensions {
        columns.push(named(inputs, name)?);
    }
    if let Some(outcomes) = outcomes {
        if outcomes.num_rows() != rows {
            return Err("its outcomes are out of step with its inputs".to_owned());
        }
        for name in names
            .label
            .iter()
            .chain(&names.measures)
            .chain(&names.users)
        {
            columns.push(named(outcomes, name)?);
        }
    }
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    let batch = RecordBatch::try_new_with_options(
        batch_schema(shape, outcomes.is_some()),
        columns,
        &options,
    )
    .map_err(|error| error.to_string())?;
    Columns::from_batch(shape, outcomes.is_some(), &batch)
}

/// The schema's column names, in file order.
#[derive(Debug, Clone)]
pub struct Names {
    /// Whether `row_id` is read.
    ids: bool,
    /// `None` where the label is not read.
    label: Option<String>,
    features: Vec<String>,
    measures: Vec<String>,
    dimensions: Vec<String>,
    /// Unit `user`'s column, read with the outcomes (`None` otherwise).
    users: Option<String>,
}

impl Names {
    /// The columns of `part`, by name.
    fn of_part(&self, part: FilePart) -> Vec<&str> {
        match part {
            FilePart::Inputs => std::iter::once(ROW_ID)
                .filter(|_| self.ids)
                .chain(self.features.iter().map(String::as_str))
                .chain(self.dimensions.iter().map(String::as_str))
                .collect(),
            FilePart::Outcomes => self
                .label
                .iter()
                .chain(&self.measures)
                .chain(&self.users)
                .map(String::as_str)
                .collect(),
        }
    }

    pub fn of(schema: &Schema) -> Names {
        let names = |columns: &[dpgate_api_types::BoundedColumn]| {
            columns.iter().map(|column| column.name.clone()).collect()
        };
        Names {
            ids: true,
            label: Some(schema.label.clone()),
            features: names(&schema.features),
            measures: names(&schema.measures),
            dimensions: schema.dimensions.iter().map(|d| d.name.clone()).collect(),
            users: schema.users.as_ref().map(|users| users.column.clone()),
        }
    }

    /// The names of the columns of `schema` that `needed` reads.
    fn read(schema: &Schema, needed: Needed) -> Names {
        let mut names = Names::of(schema);
        names.ids = needed.ids;
        let clear = |read: bool, names: &mut Vec<String>| {
            if !read {
                names.clear();
            }
        };
        clear(needed.features, &mut names.features);
        clear(needed.dimensions, &mut names.dimensions);
        clear(needed.measures, &mut names.measures);
        names.label = names.label.filter(|_| needed.labels);
        names.users = names.users.filter(|_| needed.outcomes());
        names
    }
}

/// Streams the rows of `files` (a snapshot's manifest) in blocks of
/// `block_rows` (the last may be shorter; a read of no features, whose
/// blocks are the files' batches as decoded, in blocks of at most
/// `block_rows`), of the columns `needed` names (with no outcomes, no
/// outcomes file is opened), on a blocking thread that runs one block
/// ahead of the consumer. Every file read is checked against the
/// manifest: its size before it is opened, then its footer and each
/// column chunk read against their BLAKE3 hashes before they are decoded
/// (a file recorded before those hashes were kept: its whole SHA-256, on
/// the other core while its rows are decoded, before the stream goes on
/// past its version). A file changed since it was recorded ends the
/// stream with an error, never with its last block: a pass, which reads
/// to the end before it answers, never answers on it.
pub fn stream(
    dir: Arc<DataDir>,
    files: Vec<VersionFile>,
    schema: Schema,
    needed: Needed,
    block_rows: usize,
) -> BlockStream {
    let (sender, receiver) = tokio::sync::mpsc::channel(1);
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let names = Names::read(&schema, needed);
        let reading = Reading {
            dir: &dir,
            schema: &schema,
            names: &names,
            shape: needed.shape(&schema),
        };
        if let Err(error) = reading.send_blocks(&files, needed.outcomes(), block_rows, &sender) {
            let _ = sender.blocking_send(Err(error));
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

type Sender = tokio::sync::mpsc::Sender<Result<Columns, StoreError>>;

/// What a [`stream`] reads with.
struct Reading<'r> {
    dir: &'r DataDir,
    schema: &'r Schema,
    names: &'r Names,
    shape: Shape,
}

impl Reading<'_> {
    /// The work of [`stream`]; `Ok` also when the consumer went away.
    fn send_blocks(
        &self,
        files: &[VersionFile],
        outcomes: bool,
        block_rows: usize,
        sender: &Sender,
    ) -> Result<(), StoreError> {
        let Reading {
            dir,
            schema,
            names,
            shape,
        } = *self;
        let fresh = || Columns::builder(shape, outcomes, block_rows);
        let mut block = fresh();
        let mut sent = false;
        let adopting = shape.features == 0;
        for version in versions(files, outcomes)? {
            let path = &version.inputs.path;
            let batch_rows = match adopting {
                true => block_rows,
                false => DECODE_ROWS.min(block_rows),
            };
            let mut inputs = reader(dir, version.inputs, names, batch_rows, None)?;
            let mut outcome_reader = version
                .outcomes
                .map(|file| reader(dir, file, names, batch_rows, None).map(|read| (file, read)))
                .transpose()?;
            // Files without parts' hashes are checked whole on the other
            // core while this one decodes (a registered file, both parts of
            // the version, once).
            let handle = runtime()?;
            let read = std::thread::scope(|scope| {
                let hashing = scope.spawn(|| {
                    verify(dir, version.inputs, &handle)?;
                    match version.outcomes {
                        Some(file) if file.path != version.inputs.path => {
                            verify(dir, file, &handle)
                        }
                        _ => Ok(()),
                    }
                });
                let mut rows = 0u64;
                for batch in inputs.by_ref() {
                    let batch = encoded(version.inputs, schema, batch)?;
                    let paired = match &mut outcome_reader {
                        Some((file, reader)) => Some(encoded(
                            file,
                            schema,
                            reader
                                .next()
                                .ok_or_else(|| corrupt(path, "its outcomes end early"))?,
                        )?),
                        None => None,
                    };
                    let count = batch.num_rows();
                    rows += count as u64;
                    if adopting {
                        let block = adopted(names, shape, &batch, paired.as_ref())
                            .map_err(|detail| corrupt(path, detail))?;
                        if sender.blocking_send(Ok(block)).is_err() {
                            return Ok(false);
                        }
                        sent = true;
                        continue;
                    }
                    let decoded = Decoded::of(names, &batch, paired.as_ref(), path)?;
                    let mut at = 0;
                    while at < count {
                        let take = (block_rows - block.len()).min(count - at);
                        decoded
                            .append(&mut block, at..at + take)
                            .map_err(|detail| corrupt(path, detail))?;
                        at += take;
                        if block.len() == block_rows {
                            let full = std::mem::replace(&mut block, fresh()).finish();
                            if sender.blocking_send(Ok(full)).is_err() {
                                return Ok(false);
                            }
                            sent = true;
                        }
                    }
                }
                if outcome_reader
                    .as_mut()
                    .is_some_and(|(_, reader)| reader.next().is_some())
                {
                    return Err(corrupt(path, "its outcomes run past its inputs"));
                }
                if rows != version.inputs.rows {
                    return Err(corrupt(
                        path,
                        format!(
                            "{rows} rows where the manifest recorded {}",
                            version.inputs.rows
                        ),
                    ));
                }
                hashing
                    .join()
                    .map_err(|_| corrupt(path, "checking its hash panicked"))??;
                Ok(true)
            })?;
            if !read {
                return Ok(());
            }
        }
        if !block.is_empty() || !sent {
            let _ = sender.blocking_send(Ok(block.finish()));
        }
        Ok(())
    }
}

/// The fingerprints of every row id in `files`' inputs, sorted: only
/// their `row_id` column is read, and 16 bytes a row kept.
pub(super) fn row_ids(
    dir: &DataDir,
    files: &[VersionFile],
    schema: &Schema,
) -> Result<Vec<u128>, StoreError> {
    let names = Names::of(schema);
    let mut ids = Vec::new();
    for file in files.iter().filter(|file| file.part == FilePart::Inputs) {
        for batch in reader(dir, file, &names, 65_536, Some(&[ROW_ID]))? {
            let batch = encoded(file, schema, batch)?;
            let column = column::<StringArray>(&batch, ROW_ID, &file.path)?;
            ids.extend(column.iter().flatten().map(fingerprint));
        }
    }
    ids.par_sort_unstable();
    Ok(ids)
}
