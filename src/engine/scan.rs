//! A version's files as DataFusion sees them: a table ([`VersionTable`])
//! whose scan is DataFusion's file scan (`DataSourceExec` over a
//! `FileScanConfig`), each of its "files" a unit of dpgate's (an upload's
//! pair of files, or a file registered in place) read by dpgate's checked
//! reader ([`VersionSource`]). Being DataFusion's own file scan, it is
//! what Ballista's scheduler knows how to split between tasks (each task's
//! plan keeps its partitions' file groups only); a custom leaf would be
//! read whole by every task. The scan is [`Scan`], all public (the
//! manifest's files, the schema, the columns read), so a plan holding it
//! can be written out and run on other machines.

use std::sync::Arc;

use arrow_schema::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::{
    FileGroup, FileOpenFuture, FileOpener, FileScanConfig, FileScanConfigBuilder, FileSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures_util::StreamExt;
use object_store::ObjectStore;
use serde::{Deserialize, Serialize};

use super::{DataDir, Needed, bounding};
use crate::domain::dataset::{Schema, Users, VersionFile};
use crate::snapshots::{STREAM_ROWS, Shape, batch_schema};

/// Files read together: an upload's inputs and outcomes, or a file
/// registered in place (recorded as both).
pub type Unit = Vec<VersionFile>;

/// What a scan reads: each partition's units, read one after another.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scan {
    pub parts: Vec<Vec<Unit>>,
    pub schema: Schema,
    /// The columns read.
    pub needed: Needed,
}

impl Scan {
    /// `files` (a version's manifest, outcomes included) split into at
    /// most `partitions` partitions of whole units, balanced by rows.
    /// DataFusion runs a plan's partitions all at once, so their count,
    /// not the files', bounds the readers open and the memory they hold:
    /// 64 files read by 64 readers at once on 2 cores held 64 readers'
    /// buffers for no speed. Sums are exact, so any split answers the
    /// same.
    pub fn new(files: Vec<VersionFile>, schema: Schema, needed: Needed, partitions: usize) -> Scan {
        let mut units: Vec<Unit> = Vec::new();
        for file in files {
            match units.last_mut() {
                Some(last)
                    if last
                        .iter()
                        .all(|f| (f.version, f.seq) == (file.version, file.seq)) =>
                {
                    last.push(file);
                }
                _ => units.push(vec![file]),
            }
        }
        let rows = |unit: &Unit| unit.first().map_or(0, |file| file.rows);
        // Largest first, each to the partition with the fewest rows so far.
        units.sort_by_key(|unit| std::cmp::Reverse(rows(unit)));
        let mut parts: Vec<(u64, Vec<Unit>)> =
            vec![(0, Vec::new()); partitions.clamp(1, units.len().max(1))];
        for unit in units {
            if let Some(part) = parts.iter_mut().min_by_key(|(rows, _)| *rows) {
                part.0 += rows(&unit);
                part.1.push(unit);
            }
        }
        Scan {
            parts: parts.into_iter().map(|(_, units)| units).collect(),
            schema,
            needed,
        }
    }

    /// What each row it yields holds.
    pub fn shape(&self) -> Shape {
        self.needed.shape(&self.schema)
    }

    /// The schema of the rows' columns.
    pub fn batch(&self) -> SchemaRef {
        batch_schema(self.shape(), self.needed.outcomes())
    }

    /// The schema of its batches: [`Scan::batch`]'s, and each row's
    /// [`bounding::RANK`] when it reads the ids and the people of a dataset
    /// of unit `user` ([`ranked`]).
    pub fn table(&self) -> SchemaRef {
        match ranked(&self.schema, self.needed) {
            Some(_) => bounding::with_rank(&self.batch()),
            None => self.batch(),
        }
    }

    /// The plan that reads it from `dir`: a partition per part.
    pub fn plan(self, dir: Arc<DataDir>) -> Arc<dyn ExecutionPlan> {
        let groups = self
            .parts
            .iter()
            .map(|units| {
                FileGroup::new(
                    units
                        .iter()
                        .map(|unit| {
                            let (path, bytes) = unit
                                .first()
                                .map_or((String::new(), 0), |file| (file.path.clone(), file.bytes));
                            PartitionedFile::new(path, bytes).with_extension(unit.clone())
                        })
                        .collect(),
                )
            })
            .collect();
        let source = VersionSource {
            dir,
            table: TableSchema::from(self.table()),
            schema: self.schema,
            needed: self.needed,
            metrics: ExecutionPlanMetricsSet::new(),
        };
        // The files are read by dpgate's reader, not through this store.
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .with_file_groups(groups)
                .build();
        DataSourceExec::from_data_source(config)
    }

    /// The scan `plan` reads, if it is one of [`Scan::plan`]'s (after any
    /// narrowing to some of its partitions).
    #[cfg(feature = "ballista")]
    pub fn of(plan: &dyn ExecutionPlan) -> Option<Scan> {
        let config = plan
            .downcast_ref::<DataSourceExec>()?
            .data_source()
            .downcast_ref::<FileScanConfig>()?;
        let source = config.file_source().downcast_ref::<VersionSource>()?;
        let parts = config
            .file_groups
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(|file| file.extension::<Unit>().cloned())
                    .collect::<Option<Vec<Unit>>>()
            })
            .collect::<Option<_>>()?;
        Some(Scan {
            parts,
            schema: source.schema.clone(),
            needed: source.needed,
        })
    }
}

/// Whose rows a read of `needed` columns of `schema` ranks: a dataset of
/// unit `user` read with its ids and people.
fn ranked(schema: &Schema, needed: Needed) -> Option<&Users> {
    let shape = needed.shape(schema);
    schema.users.as_ref().filter(|_| shape.users && shape.ids)
}

/// A version's rows as a table.
#[derive(Debug)]
pub struct VersionTable {
    dir: Arc<DataDir>,
    scan: Scan,
    batch: SchemaRef,
}

impl VersionTable {
    pub fn new(dir: Arc<DataDir>, scan: Scan) -> VersionTable {
        VersionTable {
            batch: scan.table(),
            dir,
            scan,
        }
    }

    #[cfg(feature = "ballista")]
    pub fn scan(&self) -> &Scan {
        &self.scan
    }
}

#[async_trait]
impl TableProvider for VersionTable {
    fn schema(&self) -> SchemaRef {
        self.batch.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    /// Every column: dpgate's plans read all they scan.
    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let all = self.batch.fields().len();
        if projection.is_some_and(|columns| !columns.iter().copied().eq(0..all)) {
            return plan_err!("a scan of a version reads every column of its batches");
        }
        Ok(self.scan.clone().plan(self.dir.clone()))
    }
}

/// Reads the units of a [`Scan::plan`] with dpgate's checked reader.
#[derive(Clone)]
struct VersionSource {
    dir: Arc<DataDir>,
    table: TableSchema,
    schema: Schema,
    needed: Needed,
    metrics: ExecutionPlanMetricsSet,
}

impl FileSource for VersionSource {
    fn create_file_opener(
        &self,
        _object_store: Arc<dyn ObjectStore>,
        _base_config: &FileScanConfig,
        _partition: usize,
    ) -> Result<Arc<dyn FileOpener>> {
        Ok(Arc::new(self.clone()))
    }

    fn table_schema(&self) -> &TableSchema {
        &self.table
    }

    fn with_batch_size(&self, _batch_size: usize) -> Arc<dyn FileSource> {
        Arc::new(self.clone())
    }

    fn metrics(&self) -> &ExecutionPlanMetricsSet {
        &self.metrics
    }

    fn file_type(&self) -> &str {
        "dpgate"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    /// A unit is read whole: never split by byte ranges.
    fn supports_repartitioning(&self) -> bool {
        false
    }
}

impl FileOpener for VersionSource {
    fn open(&self, file: PartitionedFile) -> Result<FileOpenFuture> {
        let unit = file
            .extension::<Unit>()
            .cloned()
            .ok_or_else(|| DataFusionError::Internal("a scanned file of no unit".to_owned()))?;
        let blocks = super::stream(
            self.dir.clone(),
            unit,
            self.schema.clone(),
            self.needed,
            STREAM_ROWS,
        );
        let users = ranked(&self.schema, self.needed).cloned();
        let table = self.table.table_schema().clone();
        let batches = blocks.map(move |block| {
            let batch = block
                .map_err(|error| DataFusionError::External(Box::new(error)))?
                .into_batch();
            match &users {
                Some(users) => {
                    batch.and_then(|batch| bounding::ranked(batch, users, table.clone()))
                }
                None => batch,
            }
            .map_err(DataFusionError::Execution)
        });
        Ok(Box::pin(async move { Ok(batches.boxed()) }))
    }
}
