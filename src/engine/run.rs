//! Passes over a version's rows run by DataFusion, embedded in the
//! replica or spread over a Ballista cluster. dpgate builds the plan
//! (never SQL from a caller): a scan of the version ([`VersionTable`]), a
//! partition a core (embedded) or a file (on a cluster) over the files
//! dpgate wrote or registered, and one aggregate function, the pass
//! ([`SumsOf`]). DataFusion runs the parts and adds them up; the files
//! are read by dpgate's reader, which checks each against the manifest,
//! so a changed file fails the plan instead of being computed on.

use std::sync::Arc;

use arrow_array::{Array, BinaryArray};
use datafusion::common::DataFusionError;
use datafusion::logical_expr::AggregateUDF;
use datafusion::prelude::{SessionConfig, SessionContext, col};

use super::scan::{Scan, VersionTable};
use super::summed::{Prototype, Summed, SumsOf, decode};
use super::{DataDir, bounding};
use crate::domain::dataset::{Schema, VersionFile};
use crate::snapshots::{USER, batch_schema};
use crate::store::StoreError;

/// Where passes run: embedded in the replica, on its cores, or on a
/// Ballista cluster's executors.
#[derive(Debug, Clone)]
pub struct Engine {
    /// Partitions of an embedded pass: the readers open at once.
    partitions: usize,
    #[cfg(feature = "ballista")]
    cluster: Option<Arc<super::cluster::Cluster>>,
}

/// Embedded, a partition per core.
impl Default for Engine {
    fn default() -> Engine {
        Engine::embedded(std::thread::available_parallelism().map_or(1, usize::from))
    }
}

impl Engine {
    /// Passes run here, in `partitions` partitions.
    pub fn embedded(partitions: usize) -> Engine {
        Engine {
            partitions: partitions.max(1),
            #[cfg(feature = "ballista")]
            cluster: None,
        }
    }

    /// Passes run by `cluster`'s executors.
    #[cfg(feature = "ballista")]
    pub fn ballista(cluster: super::cluster::Cluster) -> Engine {
        Engine {
            partitions: 1,
            cluster: Some(Arc::new(cluster)),
        }
    }

    /// The partitions a pass over `files` is split into: on a cluster one
    /// per file (or upload's pair of files), as its executors run as many
    /// at once as they have cores.
    fn partitions(&self, files: &[VersionFile]) -> usize {
        if self.on_cluster() {
            files.len()
        } else {
            self.partitions
        }
    }

    fn on_cluster(&self) -> bool {
        #[cfg(feature = "ballista")]
        return self.cluster.is_some();
        #[cfg(not(feature = "ballista"))]
        false
    }

    async fn context(&self) -> Result<SessionContext, StoreError> {
        #[cfg(feature = "ballista")]
        if let Some(cluster) = &self.cluster {
            return cluster.context().await.map_err(engine_error);
        }
        Ok(SessionContext::new_with_config(
            SessionConfig::new().with_target_partitions(self.partitions),
        ))
    }
}

/// `pass` over every row of `files` (a version's manifest, with its
/// outcomes files if the pass reads an outcome, of `rows` rows in all),
/// of the columns it needs, run by `engine`: the pass with the rows' sums
/// added.
pub async fn sum<S: Summed>(
    engine: &Engine,
    dir: Arc<DataDir>,
    files: Vec<VersionFile>,
    schema: &Schema,
    rows: u64,
    mut pass: S,
) -> Result<S, StoreError> {
    let recorded: u64 = files
        .iter()
        .filter(|file| file.part == crate::domain::dataset::FilePart::Inputs)
        .map(|file| file.rows)
        .sum();
    if recorded != rows {
        return Err(StoreError::Corrupt {
            what: "manifest",
            detail: format!("files of {recorded} rows for a version of {rows}"),
        });
    }
    let needed = pass.needs();
    let partitions = engine.partitions(&files);
    // Under unit `user` the scan also reads what bounds each person's
    // rows; the pass is handed its own columns alone.
    let bounds = schema.users.as_ref().map(|users| users.bounds);
    let read = match bounds {
        Some(_) => needed.with_people(),
        None => needed,
    };
    let scan = Scan::new(files, schema.clone(), read, partitions);
    let shape = needed.shape(schema);
    let batch = batch_schema(shape, needed.outcomes());
    let context = engine.context().await?;
    let arguments = batch
        .fields()
        .iter()
        .map(|field| col(field.name()))
        .collect();
    let function = |name: &str, prototype: Arc<dyn Prototype>| {
        AggregateUDF::new_from_impl(SumsOf::new(
            name.to_owned(),
            prototype,
            shape,
            needed.outcomes(),
        ))
    };
    let bounded = context
        .read_table(Arc::new(VersionTable::new(dir, scan)))
        .and_then(|frame| match bounds {
            Some(bounds) => bounding::bound(frame, bounds, &pass.grouped_by()),
            None => Ok(frame),
        });
    let answer = match (bounds, pass.of_person()) {
        // Each person's rows summed apart (a group of the user column),
        // then the people added up.
        (Some(_), Some(person)) => {
            let people = AggregateUDF::new_from_impl(SumsOf::of_people(
                "dpgate_people".to_owned(),
                Arc::new(pass.clone()),
            ));
            bounded
                .and_then(|frame| {
                    frame.aggregate(
                        vec![col(USER)],
                        vec![
                            function("dpgate_person", Arc::new(person))
                                .call(arguments)
                                .alias(PERSON),
                        ],
                    )
                })
                .and_then(|frame| frame.aggregate(vec![], vec![people.call(vec![col(PERSON)])]))
        }
        _ => bounded.and_then(|frame| {
            frame.aggregate(
                vec![],
                vec![function("dpgate_sums", Arc::new(pass.clone())).call(arguments)],
            )
        }),
    }
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

/// A person's sums, between the two aggregates of a pass over people.
const PERSON: &str = "dpgate_person_sums";

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
