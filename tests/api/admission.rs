//! A release is priced from public facts and admitted against the budget
//! and the analyst's cap before a single label, measure or private row is
//! read; refused releases and dry runs read no label or measure (and under
//! privacy unit `row`, no row at all).
//!
//! Every kind and path ([`catalogue`]) is tried on three servers, because a
//! read can happen in three places: streamed from the files (no snapshot
//! cache), loading a snapshot into a cold cache, or from a snapshot already
//! held in memory, which never reaches the store. The store counts the
//! manifests it gives out ([`Counting`]) and the snapshots count their
//! loads, the outcomes files opened and which held snapshots had their
//! columns read ([`Reads`]), so each test can tell that a refusal read
//! nothing, and that the release it is compared with did.

pub mod catalogue;
mod dry_runs;
mod refusals;
mod sessions;
mod sources;

use std::sync::Arc;

use dpgate::api::Limits;
use dpgate::snapshots::Reads;
use dpgate_client::types::{
    Lambda, OutputPerturbationParams, ProblemType, ReleaseParams, ReleaseRequest, WalrMap,
    WalrParams,
};
use dpgate_client::{Client, ClientError, ReleaseOptions, UploadFormat};
use uuid::Uuid;

use crate::bad_input::{Snapshot, snapshot};
use crate::counting::Counting;
use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app_over};

/// Where a release's reads of the rows go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No snapshot cache: every pass streams its rows from the store, and
    /// the iterative learners, which need the rows in memory, are refused.
    Streamed,
    /// A snapshot cache holding nothing (a restarted server): the first
    /// admitted release that reads rows loads the snapshot.
    Cold,
    /// A snapshot cache holding the snapshot, loaded by an earlier
    /// admitted release: reads never reach the store.
    Warm,
}

/// The ε the warming release of [`Mode::Warm`] spends on each dataset.
const WARMUP: f64 = 0.01;

/// Rows of every dataset here.
const ROWS: usize = 300;

/// A server over a store that counts its reads.
pub struct Server {
    pub app: TestApp,
    pub mode: Mode,
    counting: Arc<Counting>,
}

/// Everything read since the last look.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Reads of rows from the store, with their labels and measures.
    pub outcome_rows: u64,
    /// Reads of rows from the store, without them.
    pub input_rows: u64,
    /// What the snapshots in memory saw.
    pub snapshots: Reads,
}

impl Seen {
    /// Whether anything that `unit` keeps private was read.
    pub fn private(&self, unit: &str) -> bool {
        let outcomes = self.outcome_rows
            + self.snapshots.loads
            + self.snapshots.outcomes
            + self.snapshots.outcome_files
            > 0;
        let inputs = self.input_rows + self.snapshots.inputs > 0;
        outcomes || (unit == "row" && inputs)
    }
}

fn limits(mode: Mode) -> Limits {
    match mode {
        Mode::Streamed => Limits {
            cache_bytes: 0,
            ..Limits::default()
        },
        Mode::Cold | Mode::Warm => Limits::default(),
    }
}

impl Server {
    pub async fn start(backend: Backend, mode: Mode) -> Server {
        let mut counting = None;
        let app = spawn_app_over(backend, limits(mode), |store| {
            let counter = Counting::new(store);
            counting = Some(counter.clone());
            counter
        })
        .await;
        let counting = counting.expect("the store was wrapped");
        Server {
            app,
            mode,
            counting,
        }
    }

    /// A server in `mode` with one settled dataset "ads" (see
    /// [`Server::dataset`]).
    pub async fn with_dataset(
        backend: Backend,
        mode: Mode,
        unit: &str,
        epsilon: f64,
    ) -> (Server, Uuid) {
        let mut server = Server::start(backend, mode).await;
        let dataset = server.dataset("ads", unit, epsilon).await;
        server.settle(&[dataset]).await;
        (server, dataset)
    }

    /// A dataset of [`ROWS`] rows of the ads schema under `unit`, on a
    /// basic ledger of ε = `epsilon` (and δ = 10⁻³, room for every
    /// release of the catalogue). Call [`Server::settle`] once all are made.
    pub async fn dataset(&self, name: &str, unit: &str, epsilon: f64) -> Uuid {
        let mut request = ads_dataset(name, unit, "basic", epsilon);
        request["budget"]["delta"] = 1e-3.into();
        let dataset = self.app.dataset(request).await;
        self.app
            .admin
            .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, ROWS))
            .await
            .unwrap();
        dataset.id
    }

    /// Brings `datasets` into the server's mode: the upload left their
    /// snapshots in memory, so a cold server restarts, and a warm one
    /// restarts and loads each by an admitted release of "warden" (who
    /// spends [`WARMUP`] on each). Then forgets what was read.
    pub async fn settle(&mut self, datasets: &[Uuid]) {
        if self.mode != Mode::Streamed {
            self.app.restart(limits(self.mode)).await;
        }
        if self.mode == Mode::Warm {
            let warden = self.analyst("warden", datasets);
            for &dataset in datasets {
                warden
                    .release(dataset, &model(WARMUP), &ReleaseOptions::default())
                    .await
                    .unwrap();
                assert!(self.held(dataset), "the warming release loaded it");
            }
            let seen = self.seen();
            assert_eq!(seen.snapshots.loads, datasets.len() as u64, "{seen:?}");
        }
        self.seen();
    }

    /// After a release that read the rows: a cold server forgets the
    /// snapshot it loaded (restarts), so that the next load shows.
    pub async fn cool(&mut self) {
        if self.mode == Mode::Cold {
            self.app.restart(limits(self.mode)).await;
        }
    }

    /// ε a dataset has left after [`Server::settle`], of `budget`.
    pub fn left(&self, budget: f64) -> f64 {
        match self.mode {
            Mode::Warm => budget - WARMUP,
            Mode::Streamed | Mode::Cold => budget,
        }
    }

    /// Whether the snapshot of `dataset` (at [`ROWS`] rows) is in memory.
    pub fn held(&self, dataset: Uuid) -> bool {
        self.app.snapshots.held(dataset, ROWS as u64).is_some()
    }

    /// A client for analyst `sub` of the server as it runs now.
    pub fn analyst(&self, sub: &str, datasets: &[Uuid]) -> Client {
        self.app.analyst(sub, datasets)
    }

    /// What was read since the last call; resets it.
    pub fn seen(&self) -> Seen {
        let (outcome_rows, input_rows) = self.counting.take();
        Seen {
            outcome_rows,
            input_rows,
            snapshots: self.app.snapshots.take_reads(),
        }
    }

    /// Asserts that the release just made read private data where this
    /// server keeps it: so the counters do count.
    pub fn assert_read(&self, seen: Seen, unit: &str, case: &str) {
        assert!(seen.private(unit), "{case}: {seen:?}");
        match self.mode {
            // The outcomes files were opened, not just asked for.
            Mode::Streamed => assert!(
                seen.outcome_rows > 0 && seen.snapshots.outcome_files > 0,
                "{case}: {seen:?}"
            ),
            Mode::Cold => assert!(
                seen.snapshots.loads > 0 && seen.snapshots.outcome_files > 0,
                "{case}: {seen:?}"
            ),
            // Nothing reached the store: the snapshot in memory was read.
            Mode::Warm => {
                assert_eq!(
                    (
                        seen.outcome_rows,
                        seen.snapshots.loads,
                        seen.snapshots.outcome_files
                    ),
                    (0, 0, 0),
                    "{case}: {seen:?}"
                );
                assert!(seen.snapshots.outcomes > 0, "{case}: {seen:?}");
            }
        }
    }

    /// The ledgers and spending of `datasets`, to compare after a refusal.
    pub async fn ledgers(&self, datasets: &[Uuid]) -> Vec<Snapshot> {
        let mut all = Vec::with_capacity(datasets.len());
        for &dataset in datasets {
            all.push(snapshot(&self.app, dataset).await);
        }
        all
    }

    pub async fn finish(self) {
        self.app.finish().await;
    }
}

/// An output-perturbation model at ε: a release that reads every label.
pub fn model(epsilon: f64) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(epsilon),
        delta: None,
        params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
            lambda: Lambda::Fixed(0.01),
            fit_intercept: true,
        }),
    }
}

/// WALR over the stored features at ε on the identity map: it reads no
/// rows when made.
pub fn walr(epsilon: f64) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(epsilon),
        delta: Some(1e-7),
        params: ReleaseParams::Walr(WalrParams {
            map: Some(WalrMap::None),
            ..WalrParams::default()
        }),
    }
}

/// Asserts that `error` is a problem of `kind` with HTTP `status`; gives
/// its detail.
pub fn problem(error: &ClientError, status: u16, kind: ProblemType, case: &str) -> String {
    let ClientError::Problem(problem) = error else {
        panic!("{case}: not a problem: {error}");
    };
    assert_eq!(
        (problem.status, problem.kind()),
        (status, Some(kind)),
        "{case}: {problem:?}"
    );
    problem.detail.clone()
}
