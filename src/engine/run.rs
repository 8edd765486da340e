//! Passes over a version's rows run by DataFusion, embedded in the
//! replica. dpgate builds the plan (never SQL from a caller): a scan of
//! the version, a partition a core over the files dpgate wrote or registered, and one
//! aggregate function, the pass ([`SumsOf`]). DataFusion runs the parts on
//! every core and adds them up; the files are read by dpgate's reader,
//! which checks each against the manifest, so a changed file fails the
//! plan instead of being computed on.

use std::sync::Arc;

use arrow_array::{Array, BinaryArray};
use arrow_schema::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::AggregateUDF;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::{SessionConfig, SessionContext, col};
use futures_util::StreamExt;

use super::summed::{Summed, SumsOf, decode};
use super::{DataDir, Needed};
use crate::dataset::{Schema, VersionFile};
use crate::snapshots::{STREAM_ROWS, Shape, batch_schema};
use crate::store::StoreError;

/// Some files' rows (uploads' pairs of files, or files registered in
/// place), read one after another: a partition of a plan.
#[derive(Debug)]
struct FileRows {
    dir: Arc<DataDir>,
    files: Vec<VersionFile>,
    schema: Schema,
    /// Of the columns besides the outcomes and dimensions, those read.
    needed: Needed,
    batch: SchemaRef,
}

impl PartitionStream for FileRows {
    fn schema(&self) -> &SchemaRef {
        &self.batch
    }

    fn execute(&self, _context: Arc<TaskContext>) -> SendableRecordBatchStream {
        let blocks = super::stream(
            self.dir.clone(),
            self.files.clone(),
            self.schema.clone(),
            self.needed,
            STREAM_ROWS,
        );
        let batches = blocks.map(|block| {
            block
                .map_err(|error| DataFusionError::External(Box::new(error)))?
                .into_batch()
                .map_err(DataFusionError::Execution)
        });
        Box::pin(RecordBatchStreamAdapter::new(self.batch.clone(), batches))
    }
}

/// `files` (a version's manifest, outcomes included) split into at most
/// `threads` partitions, each reading whole files one after another (a
/// file, or an upload's pair of files, is never split), balanced by rows.
/// DataFusion runs a plan's partitions all at once, so their count, not
/// the files', bounds the readers open and the memory they hold: 64 files
/// read by 64 readers at once on 2 cores held 64 readers' buffers for no
/// speed. Sums are exact, so any split answers the same.
fn partitions(
    dir: &Arc<DataDir>,
    files: Vec<VersionFile>,
    schema: &Schema,
    needed: Needed,
    batch: &SchemaRef,
    threads: usize,
) -> Vec<Arc<dyn PartitionStream>> {
    let mut groups: Vec<Vec<VersionFile>> = Vec::new();
    for file in files {
        match groups.last_mut() {
            Some(last)
                if last
                    .iter()
                    .all(|f| (f.version, f.seq) == (file.version, file.seq)) =>
            {
                last.push(file);
            }
            _ => groups.push(vec![file]),
        }
    }
    let rows = |group: &[VersionFile]| group.first().map_or(0, |file| file.rows);
    // Largest first, each to the partition with the fewest rows so far.
    groups.sort_by_key(|group| std::cmp::Reverse(rows(group)));
    let mut parts: Vec<(u64, Vec<VersionFile>)> =
        vec![(0, Vec::new()); threads.clamp(1, groups.len().max(1))];
    for group in groups {
        if let Some(part) = parts.iter_mut().min_by_key(|(rows, _)| *rows) {
            part.0 += rows(&group);
            part.1.extend(group);
        }
    }
    parts
        .into_iter()
        .filter(|(_, files)| !files.is_empty())
        .map(|(_, files)| {
            Arc::new(FileRows {
                dir: dir.clone(),
                files,
                schema: schema.clone(),
                needed,
                batch: batch.clone(),
            }) as Arc<dyn PartitionStream>
        })
        .collect()
}

/// `pass` over every row of `files` (a version's manifest, outcomes
/// included, of `rows` rows in all), on `threads` partitions: the pass
/// with the rows' sums added.
pub async fn sum<S: Summed>(
    dir: Arc<DataDir>,
    files: Vec<VersionFile>,
    schema: &Schema,
    rows: u64,
    mut pass: S,
    threads: usize,
) -> Result<S, StoreError> {
    let recorded: u64 = files
        .iter()
        .filter(|file| file.part == crate::dataset::FilePart::Inputs)
        .map(|file| file.rows)
        .sum();
    if recorded != rows {
        return Err(StoreError::Corrupt {
            what: "manifest",
            detail: format!("files of {recorded} rows for a version of {rows}"),
        });
    }
    let mut shape = Shape::of(schema);
    if !S::READS_FEATURES {
        shape.features = 0;
    }
    shape.ids = S::READS_IDS;
    let batch = batch_schema(shape, true);
    let needed = Needed {
        outcomes: true,
        features: S::READS_FEATURES,
        ids: S::READS_IDS,
    };
    let parts = partitions(&dir, files, schema, needed, &batch, threads);
    let table = StreamingTable::try_new(batch.clone(), parts).map_err(engine_error)?;
    let context = SessionContext::new_with_config(
        SessionConfig::new().with_target_partitions(threads.max(1)),
    );
    let function = AggregateUDF::new_from_impl(SumsOf::new(
        "dpgate_sums".to_owned(),
        pass.clone(),
        shape,
        true,
    ));
    let arguments = batch
        .fields()
        .iter()
        .map(|field| col(field.name()))
        .collect();
    let answer = context
        .read_table(Arc::new(table))
        .and_then(|frame| frame.aggregate(vec![], vec![function.call(arguments)]))
        .map_err(engine_error)?
        .collect()
        .await
        .map_err(engine_error)?;
    let sums = answer
        .first()
        .and_then(|batch| batch.columns().first())
        .and_then(|column| column.as_any().downcast_ref::<BinaryArray>())
        .filter(|column| column.len() == 1 && column.is_valid(0))
        .map(|column| decode(column.value(0)))
        .ok_or_else(|| StoreError::Files("the engine answered no sums".to_owned()))?
        .map_err(StoreError::Files)?;
    pass.add_sums(&sums).map_err(StoreError::Files)?;
    Ok(pass)
}

/// The store's error a plan failed with (a changed file, say), else the
/// engine's as a file error.
fn engine_error(error: DataFusionError) -> StoreError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(at) = cause {
        if let Some(store) = at.downcast_ref::<StoreError>() {
            return match store {
                StoreError::Changed(why) => StoreError::Changed(why.clone()),
                StoreError::Corrupt { what, detail } => StoreError::Corrupt {
                    what,
                    detail: detail.clone(),
                },
                other => StoreError::Files(other.to_string()),
            };
        }
        cause = at.source();
    }
    StoreError::Files(format!("the engine failed: {error}"))
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
