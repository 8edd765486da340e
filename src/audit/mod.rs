//! `dpgate audit`: an empirical lower bound on the ε of every release kind,
//! measured through the real release path.
//!
//! For each [`cases::Case`] the audit builds two neighbouring datasets on a
//! [`scratch::Scratch`] store, makes the same release on each `trials`
//! times (the kind's own pricing, calibration, lattice and exact sampler,
//! noise from the OS CSPRNG; only the ledger and the paced wait are left
//! out, neither of which changes what is released), fits a distinguishing
//! test on the first tenth of each side's releases ([`attack`]), scores
//! the rest, and turns the test's errors into a lower bound ε̂ that holds
//! with the confidence asked, 95 % by default ([`crate::dp::audit`]). A kind whose ε̂ exceeds the
//! ε it claims is broken, with that confidence.

pub mod attack;
pub mod cases;
pub mod command;
pub mod report;
mod scratch;

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use dpgate_api_types::{self as api, PrivacyUnit, ReleaseOutput};
use futures_util::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use crate::domain::dataset::DatasetRecord;
use crate::dp::{Delta, Epsilon};
use crate::releases::kinds::Kind;
use crate::releases::{Knobs, Snapshot};
use crate::snapshots::Snapshots;
use attack::Fitted;
pub use cases::Case;
pub use scratch::Scratch;

/// The confidence of every lower bound unless `--confidence` says
/// otherwise. A correct release whose canary reaches its sensitivity (the
/// Laplace and Gaussian kinds here) still FAILs with probability up to
/// 1 − confidence: the test suite asks for 1 − 10⁻⁶.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

/// One trial in this many fits the attack; the rest are scored.
const FITTING: u64 = 10;

/// Releases in flight at once: enough to keep every core busy while
/// others wait on their blocking thread.
const IN_FLIGHT: usize = 8;

/// What to audit and how hard.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Release kinds as the API names them; all if empty.
    pub kinds: Vec<String>,
    /// Privacy units; all if empty.
    pub units: Vec<PrivacyUnit>,
    pub epsilon: f64,
    /// For the kinds that take one; pure ε kinds are audited at δ = 0.
    pub delta: f64,
    /// Releases made on each of the two datasets.
    pub trials: u64,
    /// Draws the rows besides the canary (never the noise).
    pub seed: u64,
    /// Of every lower bound, in (0, 1).
    pub confidence: f64,
}

/// One kind's audit: the field names are a contract (`--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: String,
    /// What sets this case apart from the kind's others (a map, a
    /// mechanism).
    pub variant: String,
    pub unit: PrivacyUnit,
    /// The (ε, δ) the release claims.
    pub epsilon: f64,
    pub delta: f64,
    /// The lower bound on ε the attack proved, with `confidence`.
    pub epsilon_lower: f64,
    pub confidence: f64,
    /// Releases on each of the two datasets.
    pub trials: u64,
    pub attack: String,
    /// ε̂ ≤ ε.
    pub pass: bool,
    /// Wall time of this case's trials.
    pub seconds: f64,
}

/// Audits `case`; `progress` is told of every release made.
pub async fn audit(
    scratch: &Scratch,
    case: &Case,
    settings: &Settings,
    progress: &(dyn Fn(u64) + Sync),
) -> anyhow::Result<Finding> {
    if settings.trials < 2 * FITTING {
        anyhow::bail!("--trials must be at least {}", 2 * FITTING);
    }
    if !(settings.confidence > 0.0 && settings.confidence < 1.0) {
        anyhow::bail!("--confidence must lie in (0, 1)");
    }
    let started = Instant::now();
    let delta = case.delta(settings.delta);
    let knobs = Knobs {
        epsilon: Epsilon::new(settings.epsilon)?,
        delta: Delta::new(delta)?,
        max_groups: crate::releases::kinds::aggregate::DEFAULT_MAX_GROUPS,
    };
    let (rows0, rows1) = case.neighbours(settings.seed);
    let name = |side: u8| format!("audit-{}-{side}", uuid::Uuid::new_v4());
    let d0 = scratch
        .dataset(&case.schema(&name(0)), case.csv(&rows0))
        .await?;
    let d1 = scratch
        .dataset(&case.schema(&name(1)), case.csv(&rows1))
        .await?;
    let request = case
        .request(settings.epsilon, settings.delta, &rows0)
        .context("BUG: an audit request does not parse")?;
    let side = |dataset: &DatasetRecord| Side {
        data: scratch.data().clone(),
        dataset: dataset.clone(),
        request: request.clone(),
        knobs,
    };
    let (side0, side1) = (side(&d0), side(&d1));
    let fitting = settings.trials / FITTING;
    let fit0 = side0.releases(fitting, progress, |release| release).await?;
    let fit1 = side1.releases(fitting, progress, |release| release).await?;
    let fitted = Fitted::new(case.attack, &fit0, &fit1)
        .context("the releases cannot be told apart by any test (they have no coordinates)")?;
    let scored = settings.trials - fitting;
    let score = |release: Vec<f64>| fitted.score(&release);
    let null = side0.releases(scored, progress, score).await?;
    let alternative = side1.releases(scored, progress, score).await?;
    let found = crate::dp::audit::threshold_audit(
        &null,
        &alternative,
        case.estimate(),
        delta,
        settings.confidence,
    );
    Ok(Finding {
        kind: case.kind.to_owned(),
        variant: case.variant.to_owned(),
        unit: case.unit,
        epsilon: settings.epsilon,
        delta,
        epsilon_lower: found.epsilon_lower,
        confidence: settings.confidence,
        trials: settings.trials,
        attack: case.attack_name(),
        pass: found.epsilon_lower <= settings.epsilon,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// One of the two datasets and the release made on it.
struct Side {
    data: Arc<Snapshots>,
    dataset: DatasetRecord,
    request: api::ReleaseRequest,
    knobs: Knobs,
}

impl Side {
    /// `count` releases, each kept as `keep` makes it, in the order they
    /// were asked for (so which of them fit the attack cannot depend on
    /// how long each took).
    async fn releases<T>(
        &self,
        count: u64,
        progress: &(dyn Fn(u64) + Sync),
        keep: impl Fn(Vec<f64>) -> T,
    ) -> anyhow::Result<Vec<T>> {
        futures_util::stream::iter(0..count)
            .map(|_| async {
                let released = self.release().await;
                progress(1);
                released.map(&keep)
            })
            .buffered(IN_FLIGHT)
            .try_collect()
            .await
    }

    /// One release, as the service makes it once paid for: priced, vetted
    /// and computed on the snapshot; its released numbers.
    async fn release(&self) -> anyhow::Result<Vec<f64>> {
        let kind = Kind::parse(self.request.params.clone())?;
        let mut planned = kind.plan(&self.dataset, &[], &self.knobs)?;
        let snapshot = Snapshot::new(self.data.clone(), self.dataset.clone());
        planned.vet(&snapshot).await?;
        Ok(released(&planned.compute(snapshot).await?))
    }
}

/// Every number a release gives that depends on the data, in model units
/// where the kind reports them.
fn released(result: &api::ReleaseResult) -> Vec<f64> {
    use api::ReleaseResult as Result;
    match result {
        Result::Walr(walr) => walr
            .noisy_dot
            .iter()
            .chain(&walr.noisy_intercept)
            .chain(&walr.noisy_rows)
            .copied()
            .collect(),
        Result::Aggregate(aggregate) => aggregate.groups.iter().map(|group| group.value).collect(),
        Result::FrankWolfe(model) => model
            .model_weights
            .iter()
            .chain([&model.intercept])
            .copied()
            .collect(),
        Result::Gradient(gradient) => gradient.gradient.clone().unwrap_or_default(),
        Result::Model(_) | Result::DpGd(_) | Result::DpSgd(_) => result
            .model()
            .map(|(weights, intercept)| weights.iter().chain([&intercept]).copied().collect())
            .unwrap_or_default(),
    }
}
