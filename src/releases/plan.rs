//! A release planned from public facts: its price, the checks it needs
//! against what the privacy unit leaves public, and the computation that
//! makes it once it is paid for.

use std::sync::Arc;

use async_trait::async_trait;
use dpgate_api_types as api;

use super::{Failure, ReleaseError, pacing};
use crate::domain::dataset::{DatasetRecord, Unit};
use crate::dp::fixed::Fixed;
use crate::dp::{self, Charge, Delta, DpError, Epsilon, Mechanism, OsNoise, PrivacyLoss};
use crate::engine::BlockStream;
use crate::engine::Summed;
use crate::snapshots::{Columns, Pass, Shape, Snapshots};
use futures_util::StreamExt;

/// What a release costs and how noisy it is: everything its response says
/// except the released numbers.
#[derive(Debug, Clone)]
pub struct Price {
    /// What the ledger records; `None` when everything released is public
    /// under the privacy unit (nothing is spent).
    pub loss: Option<PrivacyLoss>,
    /// The declared sensitivity (before lattice rounding).
    pub sensitivity: f64,
    /// The std of the noise on each released number.
    pub sigma: f64,
    pub noise: api::NoiseDetails,
    pub n: u64,
    /// The ε chosen for a request that named a target noise instead.
    pub epsilon: Option<Epsilon>,
}

impl Price {
    /// The price of numbers that are all public: nothing.
    pub fn free(n: u64) -> Price {
        Price {
            loss: None,
            sensitivity: 0.0,
            sigma: 0.0,
            noise: api::NoiseDetails {
                mechanism: "none".to_owned(),
                scale: 0.0,
                grid: 0.0,
                accounted_sensitivity: 0.0,
                sigma_classic: None,
                lambda: None,
            },
            n,
            epsilon: None,
        }
    }

    /// The price of `mechanism`'s noise on a query of `sensitivity`.
    pub fn of(mechanism: &Mechanism, sensitivity: f64, n: u64) -> Price {
        Price::of_sums(mechanism, sensitivity, n, 1.0)
    }

    /// The price of `mechanism`'s noise on exact sums of which one is
    /// worth `unit` in the released numbers (C′/N for a mean gradient on
    /// the grid of C′): its noise reported in the released numbers' units,
    /// `sensitivity` already in them.
    pub fn of_sums(mechanism: &Mechanism, sensitivity: f64, n: u64, unit: f64) -> Price {
        Price {
            loss: Some(mechanism.loss().clone()),
            sensitivity,
            sigma: mechanism.noise_std() * unit,
            noise: api::NoiseDetails {
                mechanism: mechanism.name().to_owned(),
                scale: mechanism.noise_scale() * unit,
                grid: mechanism.grid() * unit,
                accounted_sensitivity: mechanism.accounted_sensitivity() * unit,
                sigma_classic: None,
                lambda: None,
            },
            n,
            epsilon: None,
        }
    }
}

/// A release's (ε, δ), checked, and the service's limits on it.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    pub epsilon: Epsilon,
    pub delta: Delta,
    /// Most groups an aggregate may cover.
    pub max_groups: usize,
}

impl Knobs {
    /// Refuses a δ > 0 for a pure-ε mechanism.
    pub fn pure(&self, kind: &str) -> Result<(), ReleaseError> {
        if self.delta != Delta::ZERO {
            return Err(ReleaseError::Invalid(format!(
                "{kind} is pure ε-DP: omit delta or set it to 0"
            )));
        }
        Ok(())
    }

    /// The Gaussian mechanism for a query of `sensitivity`: at the asked
    /// ε, or at the smallest ε whose released std is at most `target`
    /// (see [`Knobs::calibrated`]).
    pub fn gaussian(
        &self,
        target: Option<f64>,
        spread: f64,
        sensitivity: f64,
        dims: usize,
        range: f64,
    ) -> Result<Calibrated, ReleaseError> {
        self.calibrated(target, spread, |epsilon| {
            Mechanism::gaussian(epsilon, self.delta, sensitivity, dims, range)
        })
    }

    /// `mechanism` at the asked ε, or at the smallest ε (in ledger units)
    /// at which the largest released std, `spread` times the mechanism's
    /// noise std per coordinate, is at most `target`.
    pub fn calibrated(
        &self,
        target: Option<f64>,
        spread: f64,
        mechanism: impl Fn(Epsilon) -> Result<Mechanism, DpError>,
    ) -> Result<Calibrated, ReleaseError> {
        let invalid = |error: DpError| ReleaseError::Invalid(error.to_string());
        let chosen = match target {
            None => None,
            Some(target) => Some(
                dp::smallest_epsilon(target, |epsilon| {
                    mechanism(epsilon).map(|mechanism| mechanism.noise_std() * spread)
                })
                .map_err(invalid)?,
            ),
        };
        Ok(Calibrated {
            mechanism: mechanism(chosen.unwrap_or(self.epsilon)).map_err(invalid)?,
            chosen,
            spread,
            unit: 1.0,
        })
    }

    /// Refuses δ = 0 for a Gaussian mechanism.
    pub fn approximate(&self, kind: &str) -> Result<(), ReleaseError> {
        if self.delta == Delta::ZERO {
            return Err(ReleaseError::Invalid(format!(
                "{kind} needs a delta in (0, 1): it uses the Gaussian mechanism"
            )));
        }
        Ok(())
    }
}

/// A mechanism, and the ε chosen for it when a target noise named it.
pub struct Calibrated {
    pub mechanism: Mechanism,
    pub chosen: Option<Epsilon>,
    /// The largest released std per unit of the mechanism's noise std.
    spread: f64,
    /// What the noise details are reported in ([`Price::of_sums`]).
    unit: f64,
}

impl Calibrated {
    /// The mechanism's noise details reported `unit` times its own.
    pub fn counted_in(self, unit: f64) -> Calibrated {
        Calibrated { unit, ..self }
    }

    /// Its price on a query of `sensitivity` over `n` rows; its `sigma` is
    /// the largest std of a released number.
    pub fn price(&self, sensitivity: f64, n: u64) -> Price {
        let price = Price::of_sums(&self.mechanism, sensitivity, n, self.unit);
        Price {
            epsilon: self.chosen,
            sigma: self.mechanism.noise_std() * self.spread,
            ..price
        }
    }
}

/// The most rows a release of `dataset` may be computed on, from public
/// facts: N, except under unit `user`, where N is private and the cap
/// every dataset of the unit is held to stands in for it.
pub fn most_rows(dataset: &DatasetRecord) -> u64 {
    match dataset.unit() {
        Unit::User(_) => dp::contribution::MAX_ROWS,
        Unit::Label | Unit::Row => dataset.n_rows,
    }
}

/// Refuses a release on a dataset without rows, where N is public: under
/// unit `user` whether a dataset is empty is private, and a release on an
/// empty one is noise alone.
pub fn require_rows(dataset: &DatasetRecord) -> Result<(), ReleaseError> {
    if dataset.n_rows == 0 && !matches!(dataset.unit(), Unit::User(_)) {
        return Err(ReleaseError::Invalid(
            "the dataset has no rows yet".to_owned(),
        ));
    }
    Ok(())
}

/// A release priced from public facts alone (the schema, N, the request,
/// and under unit `label` the features): what it costs, and how to make it
/// once it is paid for.
#[async_trait]
pub trait Planned: Send {
    /// What it costs and how noisy it is.
    fn price(&self) -> &Price;

    /// What each source dataset it reads is debited; `None` when it reads
    /// none.
    fn source_charge(&self) -> Option<Charge> {
        None
    }

    /// Checks of the request against what the privacy unit leaves public in
    /// the rows (that supplied row ids exist, say). Runs after the release
    /// is pre-admitted and before its debit, on dry runs too; reads no
    /// label and no measure.
    async fn vet(&mut self, _snapshot: &Snapshot) -> Result<(), ReleaseError> {
        Ok(())
    }

    /// The released numbers: the exact answer from `snapshot`, then the
    /// noise. Runs only once the debit has committed (or, for a release of
    /// public numbers only, reads nothing private), so its running time and
    /// its success may depend on private data.
    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure>;
}

/// A dataset at one version: the rows it held when the release was priced.
/// Rows are append-only and versioned, so the snapshot reads the same rows
/// however many uploads commit meanwhile.
#[derive(Clone)]
pub struct Snapshot {
    data: Arc<Snapshots>,
    dataset: DatasetRecord,
}

impl Snapshot {
    /// The snapshot of `dataset` as it was read (`n_rows` is its version).
    pub fn new(data: Arc<Snapshots>, dataset: DatasetRecord) -> Self {
        Snapshot { data, dataset }
    }

    pub fn dataset(&self) -> &DatasetRecord {
        &self.dataset
    }

    /// Another dataset's snapshot at the version `dataset` was read at:
    /// a source of the same release.
    pub fn sibling(&self, dataset: DatasetRecord) -> Snapshot {
        Snapshot::new(self.data.clone(), dataset)
    }

    /// The whole snapshot in memory, outcomes included, loading it if need
    /// be; `None` if it is too large to hold (use [`Snapshot::scan`]).
    /// Under unit `user`, the rows a release reads: at most
    /// `max_rows_per_user` of each person ([`Columns::bounded`]), each
    /// person's together. Only for a release whose debit has committed.
    pub async fn columns(&self) -> Result<Option<Arc<Columns>>, Failure> {
        self.bounded(&[], true).await
    }

    /// [`Snapshot::columns`], bounded per cell of the dimensions
    /// `grouped_by` under unit `user`, each person's rows `together` or
    /// in stored order.
    async fn bounded(
        &self,
        grouped_by: &[usize],
        together: bool,
    ) -> Result<Option<Arc<Columns>>, Failure> {
        let Some(columns) = self.data.load(&self.dataset).await? else {
            return Ok(None);
        };
        let Some(users) = self.dataset.schema.users.clone() else {
            return Ok(Some(columns));
        };
        let grouped_by = grouped_by.to_vec();
        let span = tracing::Span::current();
        let bounded = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            columns.bounded(&users, &grouped_by, together)
        })
        .await?
        .map_err(Failure::Corrupt)?;
        Ok(Some(Arc::new(bounded)))
    }

    /// Whether the snapshot may be held in memory at all: what a learner
    /// that passes over the rows many times needs. Reads nothing.
    pub fn fits(&self) -> bool {
        self.data
            .fits(Shape::of(&self.dataset.schema), self.dataset.n_rows)
    }

    /// Whether this snapshot and those of `others` (at their versions) may
    /// be held in memory at once. Reads nothing.
    pub fn fit_together<'a>(&self, all: impl Iterator<Item = &'a DatasetRecord>) -> bool {
        self.data.fit_together(all)
    }

    /// Refuses a snapshot whose files changed since they were recorded,
    /// from their metadata alone: before a debit.
    pub async fn unchanged(&self) -> Result<(), ReleaseError> {
        Ok(self.data.unchanged(&self.dataset).await?)
    }

    /// The snapshot in memory if it is held already, without reading the
    /// store: what checks before a debit may use for public columns.
    pub fn held(&self) -> Option<Arc<Columns>> {
        self.data.held(self.dataset.id, self.dataset.n_rows)
    }

    /// Runs `visit` over every row, outcomes included, on a blocking
    /// thread: once over the whole snapshot in memory, or block by block
    /// as the store streams it (blocks of [`crate::snapshots::STREAM_ROWS`], so passes
    /// chunked by [`Columns::chunks`] fold the same chunks in the same
    /// order either way). Gives the pass back. Only for a release whose
    /// debit has committed.
    pub async fn scan<V: Pass>(&self, visit: V) -> Result<V, Failure> {
        match self.columns().await? {
            Some(columns) => visit_on(visit, columns).await?.map_err(Failure::Corrupt),
            // A stream of blocks cannot bound a person's rows, which may
            // be in any block.
            None if self.dataset.schema.users.is_some() => Err(Failure::Unheld),
            None => {
                let blocks = self.data.blocks(&self.dataset, true).await?;
                stream(visit, blocks, self.dataset.n_rows)
                    .await?
                    .map_err(Failure::Corrupt)
            }
        }
    }

    /// Runs a summed pass over every row, outcomes included: over the
    /// snapshot in memory if it is held or may be loaded, else by the
    /// engine over the version's files, a partition per file on every
    /// core. Its sums are exact integers, so either way gives the same
    /// (under unit `user`, over the same bounded rows). Only for a release
    /// whose debit has committed.
    pub async fn sum<S: Summed>(&self, pass: S) -> Result<S, Failure> {
        let together = pass.of_person().is_some();
        match self.bounded(&pass.grouped_by(), together).await? {
            Some(columns) => visit_on(pass, columns).await?.map_err(Failure::Corrupt),
            None => Ok(self.data.sum(&self.dataset, pass).await?),
        }
    }

    /// Runs `visit` over every row's public columns (row id, features,
    /// dimensions): the snapshot held in memory if it is, else streamed
    /// from the inputs files alone. Never loads the snapshot, so
    /// it reads no label and no measure.
    pub async fn scan_inputs<V: Pass>(&self, visit: V) -> Result<V, ReleaseError> {
        let internal = |error: String| ReleaseError::Internal(anyhow::anyhow!(error));
        let visited = match self.held() {
            Some(columns) => visit_on(visit, columns).await,
            None => {
                let blocks = self.data.blocks(&self.dataset, false).await?;
                stream(visit, blocks, self.dataset.n_rows).await
            }
        };
        match visited {
            Ok(result) => result.map_err(internal),
            Err(Failure::Store(error)) => Err(error.into()),
            Err(other) => Err(internal(other.to_string())),
        }
    }
}

/// `visit` on `columns` on a blocking thread: the pass back, or why it
/// failed.
async fn visit_on<V: Pass>(
    mut visit: V,
    columns: Arc<Columns>,
) -> Result<Result<V, String>, Failure> {
    let span = tracing::Span::current();
    Ok(tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        visit.visit(&columns).map(|()| visit)
    })
    .await?)
}

/// `visit` on every block of `blocks`, which must hold `rows` rows.
async fn stream<V: Pass>(
    mut visit: V,
    mut blocks: BlockStream,
    rows: u64,
) -> Result<Result<V, String>, Failure> {
    let mut seen = 0u64;
    while let Some(block) = blocks.next().await {
        let block = Arc::new(block?);
        seen += block.len() as u64;
        visit = match visit_on(visit, block).await? {
            Ok(visit) => visit,
            Err(error) => return Ok(Err(error)),
        };
    }
    if seen != rows {
        return Ok(Err(format!("the snapshot of {rows} rows read back {seen}")));
    }
    Ok(Ok(visit))
}

/// `mechanism`'s noise on `exact`, drawn from the OS CSPRNG on a blocking
/// thread and held there to its [`pacing::budget`], so that how long the
/// draw took does not show; every released value is checked to be finite.
pub async fn noise(mechanism: Mechanism, exact: Vec<f64>) -> Result<Vec<f64>, Failure> {
    paced_release(mechanism, move |mechanism, rng| {
        mechanism.release(&exact, rng)
    })
    .await
}

/// [`noise`] on exact sums ([`dp::fixed`]), snapped to the lattice without
/// passing through a float.
pub async fn noise_fixed(mechanism: Mechanism, exact: Fixed) -> Result<Vec<f64>, Failure> {
    paced_release(mechanism, move |mechanism, rng| {
        mechanism.release_fixed(&exact, rng)
    })
    .await
}

async fn paced_release(
    mechanism: Mechanism,
    release: impl FnOnce(&Mechanism, &mut OsNoise) -> Result<Vec<f64>, DpError> + Send + 'static,
) -> Result<Vec<f64>, Failure> {
    let budget = pacing::budget(&mechanism);
    let span = tracing::Span::current();
    let noisy = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        pacing::paced(budget, || release(&mechanism, &mut OsNoise::new()))
    })
    .await??;
    if noisy.iter().any(|value| !value.is_finite()) {
        return Err(Failure::NonFinite);
    }
    Ok(noisy)
}
