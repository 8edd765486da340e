//! A release planned from public facts: its price, the checks it needs
//! against what the privacy unit leaves public, and the computation that
//! makes it once it is paid for.

use std::sync::Arc;

use async_trait::async_trait;
use dpgate_api_types as api;

use super::{Failure, ReleaseError, pacing};
use crate::dataset::DatasetRecord;
use crate::dp::{Delta, Epsilon, Mechanism, OsNoise, PrivacyLoss};
use crate::store::{Store, StoreError, StoredInputs, StoredRow};

/// Rows fetched per query: large enough that round trips do not dominate,
/// small enough to keep one page's memory modest.
const PAGE_ROWS: u32 = 10_000;

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
            },
            n,
        }
    }

    /// The price of `mechanism`'s noise on a query of `sensitivity`.
    pub fn of(mechanism: &Mechanism, sensitivity: f64, n: u64) -> Price {
        Price {
            loss: Some(mechanism.loss().clone()),
            sensitivity,
            sigma: mechanism.noise_std(),
            noise: api::NoiseDetails {
                mechanism: mechanism.name().to_owned(),
                scale: mechanism.noise_scale(),
                grid: mechanism.grid(),
                accounted_sensitivity: mechanism.accounted_sensitivity(),
                sigma_classic: None,
            },
            n,
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

/// Refuses a release on a dataset without rows.
pub fn require_rows(dataset: &DatasetRecord) -> Result<(), ReleaseError> {
    if dataset.n_rows == 0 {
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
    store: Arc<dyn Store>,
    dataset: DatasetRecord,
}

impl Snapshot {
    /// The snapshot of `dataset` as it was read (`n_rows` is its version).
    pub fn new(store: Arc<dyn Store>, dataset: DatasetRecord) -> Self {
        Snapshot { store, dataset }
    }

    pub fn dataset(&self) -> &DatasetRecord {
        &self.dataset
    }

    /// Visits every row, outcomes included, in row id order. Only for a
    /// release whose debit has committed.
    pub async fn rows(
        &self,
        mut visit: impl FnMut(&StoredRow) -> Result<(), String> + Send,
    ) -> Result<(), Failure> {
        let (id, version) = (self.dataset.id, self.dataset.n_rows);
        let seen = pages(
            |after| {
                let store = self.store.clone();
                async move { store.rows(id, version, after.as_deref(), PAGE_ROWS).await }
            },
            |row: &StoredRow| row.row_id.clone(),
            |row| visit(row).map_err(Failure::Corrupt),
        )
        .await?;
        self.complete(seen).map_err(Failure::Corrupt)
    }

    /// Visits every row without its outcomes, in row id order.
    pub async fn inputs(
        &self,
        mut visit: impl FnMut(&StoredInputs) -> Result<(), String> + Send,
    ) -> Result<(), ReleaseError> {
        let (id, version) = (self.dataset.id, self.dataset.n_rows);
        let seen = pages(
            |after| {
                let store = self.store.clone();
                async move {
                    store
                        .row_inputs(id, version, after.as_deref(), PAGE_ROWS)
                        .await
                }
            },
            |row: &StoredInputs| row.row_id.clone(),
            |row| visit(row).map_err(|error| ReleaseError::Internal(anyhow::anyhow!(error))),
        )
        .await?;
        self.complete(seen)
            .map_err(|error| ReleaseError::Internal(anyhow::anyhow!(error)))
    }

    fn complete(&self, seen: u64) -> Result<(), String> {
        if seen == self.dataset.n_rows {
            Ok(())
        } else {
            Err(format!(
                "the snapshot of {} rows read back {seen}",
                self.dataset.n_rows
            ))
        }
    }
}

/// Reads every page `fetch` returns, keyset-paged by row id, visiting each
/// item; the number of items seen.
async fn pages<T, E, F, Fut>(
    mut fetch: F,
    key: impl Fn(&T) -> String,
    mut visit: impl FnMut(&T) -> Result<(), E>,
) -> Result<u64, E>
where
    E: From<StoreError>,
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, StoreError>>,
{
    let mut after: Option<String> = None;
    let mut seen = 0u64;
    loop {
        let page = fetch(after.take()).await?;
        for item in &page {
            visit(item)?;
        }
        seen += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == PAGE_ROWS as usize => after = Some(key(last)),
            _ => return Ok(seen),
        }
    }
}

/// `mechanism`'s noise on `exact`, drawn from the OS CSPRNG on a blocking
/// thread and held there to its [`pacing::budget`], so that how long the
/// draw took does not show; every released value is checked to be finite.
pub async fn noise(mechanism: Mechanism, exact: Vec<f64>) -> Result<Vec<f64>, Failure> {
    let budget = pacing::budget(&mechanism);
    let span = tracing::Span::current();
    let (drawn, overran) = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        pacing::held(budget, || mechanism.release(&exact, &mut OsNoise::new()))
    })
    .await?;
    if overran {
        metrics::counter!("dpgate_noise_overruns_total").increment(1);
    }
    let noisy = drawn?;
    if noisy.iter().any(|value| !value.is_finite()) {
        return Err(Failure::NonFinite);
    }
    Ok(noisy)
}
