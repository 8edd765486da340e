//! Passes over a version's rows run by DataFusion, embedded in the
//! replica. dpgate builds the plan (never SQL from a caller): a scan of
//! the version, one partition per file dpgate wrote or registered, and one
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

/// One file's rows (an upload's pair of files, or a file registered in
/// place): a partition of a plan.
#[derive(Debug)]
struct FileRows {
    dir: Arc<DataDir>,
    files: Vec<VersionFile>,
    schema: Schema,
    features: bool,
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
            Needed {
                outcomes: true,
                features: self.features,
            },
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

/// `files` (a version's manifest, outcomes included) split into one
/// partition per file.
fn partitions(
    dir: &Arc<DataDir>,
    files: Vec<VersionFile>,
    schema: &Schema,
    features: bool,
    batch: &SchemaRef,
) -> Vec<Arc<dyn PartitionStream>> {
    let mut parts: Vec<Vec<VersionFile>> = Vec::new();
    for file in files {
        match parts.last_mut() {
            Some(last)
                if last
                    .iter()
                    .all(|f| (f.version, f.seq) == (file.version, file.seq)) =>
            {
                last.push(file);
            }
            _ => parts.push(vec![file]),
        }
    }
    parts
        .into_iter()
        .map(|files| {
            Arc::new(FileRows {
                dir: dir.clone(),
                files,
                schema: schema.clone(),
                features,
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
    let batch = batch_schema(shape, true);
    let parts = partitions(&dir, files, schema, S::READS_FEATURES, &batch);
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
