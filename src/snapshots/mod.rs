//! The data plane: datasets held in memory as columns, one immutable
//! snapshot per (dataset, version).
//!
//! A dataset's version is its row count: rows are append-only and carry
//! the version they were added at, so the snapshot at N rows is a fixed set
//! whatever uploads follow, and every release computes on the one version
//! its debit was checked against. A snapshot is loaded once, by the first
//! release that needs it while the others wait for that load (no
//! thundering herd), shared through an `Arc`, and kept warm by the upload
//! that makes the next version. Memory is bounded (`DPGATE_CACHE_BYTES`):
//! least recently used snapshots are dropped first, and a dataset whose
//! snapshot would not fit the bound is streamed from its files in blocks.
//!
//! Snapshots are read from the version's files (`crate::engine`), listed
//! by the store's manifest. Loading a snapshot reads the outcomes (labels,
//! measures), so only work after a debit loads one; checks before it read
//! public columns, from a snapshot already held or from the inputs files.

mod columns;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::OnceCell;
use uuid::Uuid;

use crate::domain::dataset::{DatasetRecord, VersionFile};
use crate::engine::{self, BlockStream, DataDir, Engine, Summed};
use crate::store::{Store, StoreError};
#[cfg(test)]
pub use columns::OwnedRow;
pub use columns::{
    Builder, CHUNK_ROWS, Columns, Pass, Row, STREAM_ROWS, Shape, Stored, USER, USER_TYPE,
    batch_schema, chunked, dimension,
};

/// The default bound on snapshot memory.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

type Key = (Uuid, u64);

/// A version and the files of it that were registered in place.
type Registered = (u64, Arc<Vec<VersionFile>>);

/// Held snapshots and the store they come from.
pub struct Snapshots {
    store: Arc<dyn Store>,
    data: Arc<DataDir>,
    bound: u64,
    state: Mutex<State>,
    /// Snapshots read whole from their files (outcomes included) since
    /// [`Snapshots::take_reads`] last looked.
    loads: AtomicU64,
    /// Each dataset's files registered in place, at the last version a
    /// release checked.
    registered: Mutex<HashMap<Uuid, Registered>>,
    /// What runs a pass over files.
    engine: Engine,
    /// How long the engine may take over one pass.
    timeout: Duration,
}

/// What was read through the snapshots since the last look: what the API
/// tests hold a release's work before its debit to (a refused release or a
/// dry run must load nothing and read no label or measure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reads {
    /// Snapshots read whole from their files, outcomes included.
    pub loads: u64,
    /// Outcome files opened (by loads and streamed passes).
    pub outcome_files: u64,
    /// Snapshots held in memory whose labels or measures were read.
    pub outcomes: u64,
    /// Snapshots held in memory whose ids, features or dimensions were
    /// read.
    pub inputs: u64,
}

#[derive(Default)]
struct State {
    slots: HashMap<Key, Slot>,
    /// Bytes of the loaded snapshots in `slots`.
    held: u64,
    /// Ticks on every use, for least-recently-used eviction.
    clock: u64,
}

struct Slot {
    cell: Arc<OnceCell<Arc<Columns>>>,
    /// 0 until loaded.
    bytes: u64,
    used: u64,
}

impl Snapshots {
    /// Snapshots of `store`'s datasets, whose files are in `data`,
    /// holding at most `bound` bytes (0 streams every pass).
    pub fn new(store: Arc<dyn Store>, data: Arc<DataDir>, bound: u64) -> Self {
        Snapshots {
            store,
            data,
            bound,
            state: Mutex::new(State::default()),
            loads: AtomicU64::new(0),
            registered: Mutex::default(),
            engine: Engine::default(),
            timeout: Duration::from_secs(3600),
        }
    }

    /// These snapshots, with a pass of the engine failing after `timeout`.
    pub fn with_engine_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// These snapshots, with passes over files run by `engine` (by
    /// default embedded, a partition per core).
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    /// What was read since the last call (which resets it).
    pub fn take_reads(&self) -> Reads {
        let mut reads = Reads {
            loads: self.loads.swap(0, Ordering::Relaxed),
            outcome_files: self.data.take_outcome_opens(),
            ..Reads::default()
        };
        for slot in self.state().slots.values() {
            if let Some(columns) = slot.cell.get() {
                let (outcomes, inputs) = columns.take_touched();
                reads.outcomes += u64::from(outcomes);
                reads.inputs += u64::from(inputs);
            }
        }
        reads
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Where the datasets' files are.
    pub fn data(&self) -> &Arc<DataDir> {
        &self.data
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned one still holds
        // consistent bookkeeping.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The snapshot of `dataset` at `version` if it is in memory; never
    /// reads the store.
    pub fn held(&self, dataset: Uuid, version: u64) -> Option<Arc<Columns>> {
        let mut state = self.state();
        state.clock += 1;
        let clock = state.clock;
        let slot = state.slots.get_mut(&(dataset, version))?;
        slot.used = clock;
        slot.cell.get().cloned()
    }

    /// Whether `rows` rows of `shape` may be held at all.
    pub fn fits(&self, shape: Shape, rows: u64) -> bool {
        let bytes = u64::try_from(shape.row_bytes(true)).unwrap_or(u64::MAX);
        self.bound > 0 && rows.saturating_mul(bytes) <= self.bound
    }

    /// Whether the snapshots of all `datasets` may be held at once.
    pub fn fit_together<'a>(&self, datasets: impl Iterator<Item = &'a DatasetRecord>) -> bool {
        let bytes = datasets.fold(0u64, |total, dataset| {
            let row = u64::try_from(Shape::of(&dataset.schema).row_bytes(true)).unwrap_or(u64::MAX);
            total.saturating_add(dataset.n_rows.saturating_mul(row))
        });
        self.bound > 0 && bytes <= self.bound
    }

    /// The snapshot of `dataset` as read (its `n_rows` is the version), in
    /// memory: held, or loaded now by this caller or one it waits for.
    /// `None` if it would not fit the bound: stream it with
    /// [`Snapshots::blocks`]. It holds the outcomes: only after a debit.
    pub async fn load(&self, dataset: &DatasetRecord) -> Result<Option<Arc<Columns>>, StoreError> {
        let shape = Shape::of(&dataset.schema);
        if !self.fits(shape, dataset.n_rows) {
            metrics::counter!("dpgate_snapshot_streamed_total").increment(1);
            return Ok(None);
        }
        let key = (dataset.id, dataset.n_rows);
        let cell = {
            let mut state = self.state();
            state.clock += 1;
            let used = state.clock;
            let slot = state.slots.entry(key).or_insert_with(|| Slot {
                cell: Arc::new(OnceCell::new()),
                bytes: 0,
                used,
            });
            slot.used = used;
            slot.cell.clone()
        };
        let mut loaded = None;
        let result = cell
            .get_or_try_init(|| async {
                let started = Instant::now();
                let columns = Arc::new(self.read(dataset, shape).await?);
                loaded = Some(started.elapsed());
                Ok::<_, StoreError>(columns)
            })
            .await;
        let columns = match result {
            Ok(columns) => columns.clone(),
            Err(error) => {
                self.forget(key, &cell);
                return Err(error);
            }
        };
        match loaded {
            Some(took) => {
                metrics::counter!("dpgate_snapshot_misses_total").increment(1);
                metrics::histogram!("dpgate_snapshot_load_seconds").record(took.as_secs_f64());
                self.settle(key, &columns);
            }
            None => metrics::counter!("dpgate_snapshot_hits_total").increment(1),
        }
        Ok(Some(columns))
    }

    /// Keeps `columns`, built without reading the store (by the upload
    /// that made `version`), if they fit.
    pub fn keep(&self, dataset: Uuid, version: u64, columns: Columns) {
        if !self.fits(columns.shape(), version) {
            return;
        }
        let cell = Arc::new(OnceCell::new_with(Some(Arc::new(columns))));
        let key = (dataset, version);
        {
            let mut state = self.state();
            state.clock += 1;
            let used = state.clock;
            remove(&mut state, key);
            state.slots.insert(
                key,
                Slot {
                    cell: cell.clone(),
                    bytes: 0,
                    used,
                },
            );
        }
        if let Some(columns) = cell.get() {
            self.settle(key, columns);
        }
    }

    /// Checks, from their metadata alone, that the files registered in
    /// place of `dataset`'s snapshot are as the manifest recorded them,
    /// unless it is held in memory (then its files are not read again):
    /// what a release does before its debit, so that an operator's file
    /// changed since registration is refused for free. dpgate's own files
    /// are checked when they are opened. The list of a version's
    /// registered files never changes, so it is asked of the store once
    /// per version; the files are looked at every time.
    pub async fn unchanged(&self, dataset: &DatasetRecord) -> Result<(), StoreError> {
        if dataset.n_rows == 0 || self.held(dataset.id, dataset.n_rows).is_some() {
            return Ok(());
        }
        let known = self
            .registered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&dataset.id)
            .filter(|(version, _)| *version == dataset.n_rows)
            .map(|(_, files)| files.clone());
        let files = match known {
            Some(files) => files,
            None => {
                let files = Arc::new(
                    self.store
                        .registered_files(dataset.id, dataset.n_rows)
                        .await?,
                );
                self.registered
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(dataset.id, (dataset.n_rows, files.clone()));
                files
            }
        };
        if files.is_empty() {
            return Ok(());
        }
        engine::unchanged(&self.data, &files).await
    }

    /// `pass` over every row of `dataset`'s version, of the columns it
    /// needs, run by the engine over its files: only after a debit.
    pub async fn sum<S: Summed>(&self, dataset: &DatasetRecord, pass: S) -> Result<S, StoreError> {
        // Under unit `user` every pass reads who owns each row, from the
        // outcomes files.
        let outcomes = pass.needs().outcomes() || dataset.schema.users.is_some();
        let files = self
            .store
            .version_files(dataset.id, dataset.n_rows, outcomes)
            .await?;
        let summing = engine::sum(
            &self.engine,
            self.data.clone(),
            files,
            &dataset.schema,
            dataset.n_rows,
            pass,
        );
        let deadline = tokio::time::Instant::now() + self.timeout;
        match tokio::time::timeout_at(deadline, summing).await {
            Ok(Err(error)) => Err(error),
            // A small pass may run to its end inside one poll, where the
            // timer cannot interrupt it: its answer, come late, is refused
            // all the same, so the limit holds for every pass.
            Ok(Ok(pass)) if tokio::time::Instant::now() < deadline => Ok(pass),
            _ => Err(StoreError::Files(format!(
                "the engine did not finish within {}",
                humantime::format_duration(self.timeout)
            ))),
        }
    }

    /// Streams the snapshot of `dataset` from its files in blocks of
    /// [`STREAM_ROWS`], with the outcomes only if `outcomes`.
    pub async fn blocks(
        &self,
        dataset: &DatasetRecord,
        outcomes: bool,
    ) -> Result<BlockStream, StoreError> {
        self.stream(dataset, outcomes, STREAM_ROWS).await
    }

    async fn stream(
        &self,
        dataset: &DatasetRecord,
        outcomes: bool,
        block_rows: usize,
    ) -> Result<BlockStream, StoreError> {
        let files = self
            .store
            .version_files(dataset.id, dataset.n_rows, outcomes)
            .await?;
        Ok(engine::stream(
            self.data.clone(),
            files,
            dataset.schema.clone(),
            engine::Needed::all(outcomes),
            block_rows,
        ))
    }

    /// Reads the whole snapshot in one block.
    async fn read(&self, dataset: &DatasetRecord, shape: Shape) -> Result<Columns, StoreError> {
        self.loads.fetch_add(1, Ordering::Relaxed);
        let rows = usize::try_from(dataset.n_rows).unwrap_or(usize::MAX);
        let mut blocks = self.stream(dataset, true, rows.max(1)).await?;
        let mut whole: Option<Columns> = None;
        while let Some(block) = blocks.next().await {
            let block = block?;
            whole = Some(match whole {
                None => block,
                Some(earlier) => earlier
                    .joined(&block)
                    .map_err(|detail| StoreError::Corrupt {
                        what: "snapshot",
                        detail,
                    })?,
            });
        }
        let whole = whole.unwrap_or_else(|| Columns::empty(shape, true));
        if whole.len() as u64 != dataset.n_rows {
            return Err(StoreError::Corrupt {
                what: "snapshot",
                detail: format!(
                    "the snapshot of {} rows read back {}",
                    dataset.n_rows,
                    whole.len()
                ),
            });
        }
        Ok(whole)
    }

    /// Drops a slot whose load failed (a later caller tries again).
    fn forget(&self, key: Key, cell: &Arc<OnceCell<Arc<Columns>>>) {
        let mut state = self.state();
        if state
            .slots
            .get(&key)
            .is_some_and(|slot| Arc::ptr_eq(&slot.cell, cell) && slot.cell.get().is_none())
        {
            state.slots.remove(&key);
        }
    }

    /// Accounts a snapshot just loaded or kept: drops the dataset's older
    /// versions (no release can be priced on them again), does not keep it
    /// if a newer one is held, and evicts the least recently used until
    /// the bound holds.
    fn settle(&self, key: Key, columns: &Columns) {
        let mut state = self.state();
        let (dataset, version) = key;
        if state
            .slots
            .keys()
            .any(|&(other, newer)| other == dataset && newer > version)
        {
            remove(&mut state, key);
            return;
        }
        let older: Vec<Key> = state
            .slots
            .keys()
            .filter(|&&(other, older)| other == dataset && older < version)
            .copied()
            .collect();
        for old in older {
            remove(&mut state, old);
        }
        let bytes = columns.bytes() as u64;
        if let Some(slot) = state.slots.get_mut(&key)
            && slot.bytes == 0
        {
            slot.bytes = bytes;
            state.held += bytes;
        }
        while state.held > self.bound {
            let Some(victim) = state
                .slots
                .iter()
                .filter(|(_, slot)| slot.bytes > 0)
                .min_by_key(|(_, slot)| slot.used)
                .map(|(key, _)| *key)
            else {
                break;
            };
            remove(&mut state, victim);
            metrics::counter!("dpgate_snapshot_evictions_total").increment(1);
        }
        metrics::gauge!("dpgate_snapshot_bytes").set(state.held as f64);
    }

    /// Bytes of snapshots held.
    pub fn held_bytes(&self) -> u64 {
        self.state().held
    }
}

fn remove(state: &mut State, key: Key) {
    if let Some(slot) = state.slots.remove(&key) {
        state.held -= slot.bytes;
    }
}

#[cfg(test)]
mod tests;
