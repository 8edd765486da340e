//! What every handler can reach: the store, the snapshots, the keys, the
//! limits, the metrics, and the releases being made.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::task::TaskTracker;

use crate::domain::auth::Keys;
use crate::engine::{DataDir, Engine};
use crate::snapshots::Snapshots;
use crate::store::Store;

/// Request size limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// JSON bodies.
    pub body_bytes: usize,
    /// Release requests, which may carry supplied feature vectors.
    pub release_bytes: usize,
    /// Row uploads.
    pub ingest_bytes: u64,
    /// Groups (combinations of dimension values) one aggregate may cover.
    pub max_groups: usize,
    /// How long a request may take.
    pub request_timeout: Duration,
    /// Most bytes of dataset snapshots held in memory (0: stream every
    /// pass from the files).
    pub cache_bytes: u64,
    /// Longest pass of the engine over a dataset's files.
    pub engine_timeout: Duration,
    /// Most requests handled at once.
    pub max_concurrent: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_bytes: 1 << 20,
            release_bytes: 256 << 20,
            ingest_bytes: 1 << 30,
            max_groups: crate::releases::kinds::aggregate::DEFAULT_MAX_GROUPS,
            request_timeout: Duration::from_secs(300),
            cache_bytes: crate::snapshots::DEFAULT_CACHE_BYTES,
            engine_timeout: Duration::from_secs(3600),
            max_concurrent: 256,
        }
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    /// The store's datasets as snapshots in memory.
    pub snapshots: Arc<Snapshots>,
    pub keys: Arc<Keys>,
    pub limits: Limits,
    pub metrics: PrometheusHandle,
    /// Debited releases being made: they finish even if their request is
    /// dropped, and shutdown waits for them.
    pub tasks: TaskTracker,
}

impl AppState {
    /// The state over `store`, whose datasets' files are in `data`, with
    /// passes over them embedded.
    pub fn new(store: Arc<dyn Store>, data: Arc<DataDir>, keys: Keys, limits: Limits) -> Self {
        AppState::with_engine(store, data, keys, limits, Engine::default())
    }

    /// The state over `store`, whose datasets' files are in `data`, with
    /// passes over them run by `engine`.
    pub fn with_engine(
        store: Arc<dyn Store>,
        data: Arc<DataDir>,
        keys: Keys,
        limits: Limits,
        engine: Engine,
    ) -> Self {
        crate::releases::pacing::calibrate();
        AppState {
            snapshots: Arc::new(
                Snapshots::new(store.clone(), data, limits.cache_bytes)
                    .with_engine_timeout(limits.engine_timeout)
                    .with_engine(engine),
            ),
            store,
            keys: Arc::new(keys),
            limits,
            metrics: metrics_handle(),
            tasks: TaskTracker::new(),
        }
    }
}

/// The process-wide Prometheus recorder (installed once).
fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder is installed; this one still renders.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
