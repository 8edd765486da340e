//! Passes spread over machines by Apache Ballista: the same plan as an
//! embedded pass ([`super::run`]), sent by a replica to a scheduler
//! (`dpgate scheduler`), which hands its partitions to executors
//! (`dpgate executor`), each reading its files from the shared data
//! directory. The plan's two parts of dpgate's own, the scan of a
//! version ([`VersionTable`], [`Scan::plan`]) and the pass ([`SumsOf`]),
//! travel in it through [`Codec`]; everything else is DataFusion's and
//! Ballista's. Sums are exact integers, so the answer
//! is bit-identical to an embedded pass's, however the executors split
//! the work.
//!
//! The scheduler and the executors run any plan sent to them, and the
//! executors read every dataset's rows: like the database, they belong
//! on a network only the replicas reach.

use std::net::SocketAddr;
use std::sync::Arc;

use ballista::prelude::SessionContextExt;
use ballista_core::extension::SessionConfigExt;
use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use datafusion::catalog::TableProvider;
use datafusion::common::{Result, TableReference, internal_datafusion_err};
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::execution::TaskContext;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{AggregateUDF, Extension, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use super::DataDir;
use super::scan::{Scan, VersionTable};
use super::summed::{Passes, SumsOf};

/// Marks a table or plan node as dpgate's among those Ballista's own
/// codecs write.
const SCAN: &[u8] = b"dpgate-scan:";

fn write(scan: &Scan, buf: &mut Vec<u8>) -> Result<()> {
    buf.extend_from_slice(SCAN);
    serde_json::to_writer(buf, scan).map_err(|error| internal_datafusion_err!("{error}"))
}

fn read(buf: &[u8]) -> Option<Result<Scan>> {
    let json = buf.strip_prefix(SCAN)?;
    Some(serde_json::from_slice(json).map_err(|error| internal_datafusion_err!("{error}")))
}

/// Writes and reads dpgate's parts of a plan, and leaves the rest to
/// Ballista's codecs. A scan read back reads the files of `dir`, this
/// process's data directory.
#[derive(Debug)]
pub struct Codec {
    dir: Arc<DataDir>,
    passes: Passes,
    logical: BallistaLogicalExtensionCodec,
    physical: BallistaPhysicalExtensionCodec,
}

impl Codec {
    pub fn new(dir: Arc<DataDir>, passes: Passes) -> Arc<Codec> {
        Arc::new(Codec {
            dir,
            passes,
            logical: BallistaLogicalExtensionCodec::default(),
            physical: BallistaPhysicalExtensionCodec::default(),
        })
    }

    /// A pass's function, else none (a function of DataFusion's, which
    /// its name finds).
    fn encode_udaf(node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        if let Some(sums) = node.inner().downcast_ref::<SumsOf>() {
            buf.extend(sums.encode()?);
        }
        Ok(())
    }

    fn decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        if buf.is_empty() {
            return self.physical.try_decode_udaf(name, buf);
        }
        let sums = SumsOf::decode(name, buf, &self.passes)?;
        Ok(Arc::new(AggregateUDF::new_from_impl(sums)))
    }
}

impl LogicalExtensionCodec for Codec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> Result<Extension> {
        self.logical.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        self.logical.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: arrow_schema::SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        match read(buf) {
            Some(scan) => Ok(Arc::new(VersionTable::new(self.dir.clone(), scan?))),
            None => self
                .logical
                .try_decode_table_provider(buf, table_ref, schema, ctx),
        }
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        match node.downcast_ref::<VersionTable>() {
            Some(table) => write(table.scan(), buf),
            None => self.logical.try_encode_table_provider(table_ref, node, buf),
        }
    }

    fn try_decode_file_format(
        &self,
        buf: &[u8],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn FileFormatFactory>> {
        self.logical.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(
        &self,
        buf: &mut Vec<u8>,
        node: Arc<dyn FileFormatFactory>,
    ) -> Result<()> {
        self.logical.try_encode_file_format(buf, node)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        self.decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        Codec::encode_udaf(node, buf)
    }
}

impl PhysicalExtensionCodec for Codec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match read(buf) {
            Some(scan) => Ok(scan?.plan(self.dir.clone())),
            None => self.physical.try_decode(buf, inputs, ctx, proto_converter),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        // The scan as the scheduler narrowed it to a task's partitions.
        match Scan::of(node.as_ref()) {
            Some(scan) => write(&scan, buf),
            None => self.physical.try_encode(node, buf, proto_converter),
        }
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        self.decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        Codec::encode_udaf(node, buf)
    }
}

/// A Ballista scheduler's address, and how plans are written for it.
#[derive(Debug)]
pub struct Cluster {
    /// `df://HOST:PORT`, as Ballista's client takes it.
    url: String,
    codec: Arc<Codec>,
}

impl Cluster {
    /// The scheduler `url` names (`ballista://HOST:PORT`).
    pub fn new(url: &str, codec: Arc<Codec>) -> Result<Cluster, String> {
        let address = url
            .strip_prefix("ballista://")
            .filter(|address| !address.is_empty() && !address.contains('/'))
            .ok_or_else(|| format!("{url:?} is not ballista://HOST:PORT"))?;
        Ok(Cluster {
            url: format!("df://{address}"),
            codec,
        })
    }

    /// A session whose plans run on the cluster.
    pub(super) async fn context(&self) -> Result<SessionContext> {
        let config = SessionConfig::new_with_ballista()
            .with_ballista_logical_extension_codec(self.codec.clone())
            .with_ballista_physical_extension_codec(self.codec.clone());
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .build();
        SessionContext::remote_with_state(&self.url, state).await
    }
}

/// Runs a scheduler listening on `bind` until the process is stopped.
pub async fn scheduler(bind: SocketAddr, codec: Arc<Codec>) -> anyhow::Result<()> {
    let config = SchedulerConfig {
        bind_host: bind.ip().to_string(),
        bind_port: bind.port(),
        override_logical_codec: Some(codec.clone()),
        override_physical_codec: Some(codec),
        ..SchedulerConfig::default()
    };
    let cluster = BallistaCluster::new_from_config(&config).await?;
    start_server(cluster, bind, Arc::new(config)).await?;
    Ok(())
}

/// Runs an executor until the process is stopped (or the scheduler asks
/// it to stop): it registers with the scheduler at `scheduler`
/// (`HOST:PORT`), serves Arrow Flight on `bind` and gRPC on the next port,
/// is reached by `external_host` if set, and runs `cores` tasks at once
/// (its cores by default).
pub async fn executor(
    scheduler: &str,
    bind: SocketAddr,
    external_host: Option<String>,
    cores: Option<usize>,
    codec: Arc<Codec>,
) -> anyhow::Result<()> {
    let (host, port) = scheduler
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
        .ok_or_else(|| anyhow::anyhow!("--scheduler {scheduler:?} is not HOST:PORT"))?;
    let grpc_port = bind
        .port()
        .checked_add(1)
        .ok_or_else(|| anyhow::anyhow!("--bind {bind}: no port follows it for gRPC"))?;
    let defaults = ExecutorProcessConfig::default();
    let config = ExecutorProcessConfig {
        bind_host: bind.ip().to_string(),
        port: bind.port(),
        grpc_port,
        external_host,
        scheduler_host: host,
        scheduler_port: port,
        vcores: cores.unwrap_or(defaults.vcores),
        override_logical_codec: Some(codec.clone()),
        override_physical_codec: Some(codec),
        ..defaults
    };
    start_executor_process(Arc::new(config)).await?;
    Ok(())
}
