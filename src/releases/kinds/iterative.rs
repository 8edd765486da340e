//! What the iterative learners (`model/dp-gd`, `model/dp-sgd`) share: the
//! public bounds on their settings, the cap on their work, and the mapping
//! of their weights back to raw feature units.

use std::sync::Arc;

use dpgate_api_types::PrivacyUnit;

use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::DpError;
use crate::engine::Summed;
use crate::releases::{Failure, ReleaseError, Snapshot};
use crate::snapshots::Columns;

/// Most row-coordinates one release may visit (T·N·d for descent, E·N·d
/// for SGD, more with a projection): about two minutes on two cores
/// (docs/models.md).
pub const MAX_WORK: u64 = 100_000_000_000;

/// The largest λ, radius or warm-start value a request may name.
pub const MAX_MAGNITUDE: f64 = 1e6;

/// Refuses `value` outside `range`, saying what `name` must be.
pub fn within(
    name: &str,
    value: f64,
    ok: impl Fn(f64) -> bool,
    range: &str,
) -> Result<(), ReleaseError> {
    if ok(value) {
        Ok(())
    } else {
        Err(ReleaseError::Invalid(format!(
            "{name} must be {range} (got {value})"
        )))
    }
}

/// Checks the step size α, the clipping bound C and the ridge λ.
pub fn check_step(learning_rate: f64, clip: f64, lambda: f64) -> Result<(), ReleaseError> {
    within(
        "learning_rate",
        learning_rate,
        |a| a > 0.0 && a <= 100.0,
        "in (0, 100]",
    )?;
    within("clip", clip, |c| c > 0.0 && c <= 1e3, "in (0, 1000]")?;
    within(
        "lambda",
        lambda,
        |l| (0.0..=MAX_MAGNITUDE).contains(&l),
        "in [0, 1e6]",
    )?;
    within(
        "learning_rate × lambda",
        learning_rate * lambda,
        |product| product < 2.0,
        "below 2, or the ridge term makes every step diverge",
    )
}

/// Refuses `work` row-coordinates above [`MAX_WORK`]; `fewer` says what
/// to ask for instead.
pub fn check_work(work: u64, what: &str, fewer: &str) -> Result<(), ReleaseError> {
    if work > MAX_WORK {
        return Err(ReleaseError::Invalid(format!(
            "{what} = {work} is more than one release may do ({MAX_WORK:e}); {fewer}"
        )));
    }
    Ok(())
}

/// Refuses a gradient known to be zero from public facts: under `label`
/// (features public) every feature vector zero and no `constant`
/// coordinate (the intercept's) to learn; `what` says why it is refused.
pub fn require_signal(
    dataset: &DatasetRecord,
    constant: bool,
    what: &str,
) -> Result<(), ReleaseError> {
    if dataset.privacy_unit == PrivacyUnit::Label
        && dataset.stats.max_norm_squared == 0.0
        && !constant
    {
        return Err(ReleaseError::Invalid(format!(
            "every feature vector is zero and the intercept is off: {what}"
        )));
    }
    Ok(())
}

/// DP-SGD's batches are sampled rows, read from the snapshot in memory:
/// it must fit.
pub fn require_in_memory(snapshot: &Snapshot) -> Result<(), ReleaseError> {
    if snapshot.fits() {
        Ok(())
    } else {
        Err(ReleaseError::Invalid(
            "the dataset is larger than the snapshot cache (DPGATE_CACHE_BYTES), \
             and DP-SGD samples its batches from the rows held in memory"
                .to_owned(),
        ))
    }
}

/// θ (stored features' space, intercept first when fitted) in raw feature
/// units.
pub fn unfold(theta: &[f64], schema: &Schema, fit_intercept: bool) -> (Vec<f64>, f64) {
    let (intercept, weights) = if fit_intercept {
        (theta[0], &theta[1..])
    } else {
        (0.0, theta)
    };
    let (min, max) = schema.feature_bounds();
    dpgate_learn::unscale(weights, intercept, &min, &max)
}

/// Runs `learn` on the snapshot's rows, held in memory, on a blocking
/// thread in the release's span: the model it trained, refused if any of
/// it is not finite.
pub async fn learn_on(
    snapshot: Snapshot,
    learn: impl FnOnce(&Columns) -> Result<Vec<f64>, DpError> + Send + 'static,
) -> Result<Vec<f64>, Failure> {
    let columns = snapshot.columns().await?.ok_or(Failure::Unheld)?;
    learned(move || Ok(learn(&columns)?)).await
}

/// Runs `learn`, whose every pass over the rows is a summed one, on a
/// blocking thread in the release's span: what it trained, refused if any
/// of it is not finite.
pub async fn learn_by_passes<L: Learned>(
    snapshot: Snapshot,
    learn: impl FnOnce(&SnapshotRows) -> Result<L, Failure> + Send + 'static,
) -> Result<L, Failure> {
    let rows = SnapshotRows::of(snapshot, true).await?;
    learned(move || learn(&rows)).await
}

/// Rows a learner passes over from its blocking thread, every pass a
/// summed one: what lets one learner's code run in memory or over files.
pub trait RowPasses {
    /// N, where it is public (never read under unit `user`).
    fn count(&self) -> u64;

    /// `pass` over every row, outcomes included.
    fn sum<S: Summed>(&self, pass: S) -> Result<S, Failure>;
}

impl RowPasses for Columns {
    fn count(&self) -> u64 {
        self.len() as u64
    }

    fn sum<S: Summed>(&self, mut pass: S) -> Result<S, Failure> {
        pass.visit(self).map_err(Failure::Corrupt)?;
        Ok(pass)
    }
}

/// A snapshot's rows, held in memory for the whole release if it may be;
/// else each pass is the snapshot's own ([`Snapshot::sum`]): run by the
/// engine over the version's files when the snapshot is too large to
/// hold, so a dataset no replica can hold is learned on all the same.
pub struct SnapshotRows {
    snapshot: Snapshot,
    columns: Option<Arc<Columns>>,
    runtime: tokio::runtime::Handle,
}

impl SnapshotRows {
    /// Held for the whole release if `hold` and it fits in memory. Only
    /// for a release whose debit has committed.
    pub async fn of(snapshot: Snapshot, hold: bool) -> Result<SnapshotRows, Failure> {
        Ok(SnapshotRows {
            columns: match hold {
                true => snapshot.columns().await?,
                false => None,
            },
            snapshot,
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

impl RowPasses for SnapshotRows {
    fn count(&self) -> u64 {
        self.snapshot.dataset().n_rows
    }

    fn sum<S: Summed>(&self, pass: S) -> Result<S, Failure> {
        match &self.columns {
            Some(columns) => columns.sum(pass),
            None => self.runtime.block_on(self.snapshot.sum(pass)),
        }
    }
}

impl<R: RowPasses> RowPasses for Arc<R> {
    fn count(&self) -> u64 {
        R::count(self)
    }

    fn sum<S: Summed>(&self, pass: S) -> Result<S, Failure> {
        R::sum(self, pass)
    }
}

/// What a learner trained: a model, and what else it released with it.
pub trait Learned: Send + 'static {
    fn is_finite(&self) -> bool;
}

impl Learned for Vec<f64> {
    fn is_finite(&self) -> bool {
        self.iter().all(|value| value.is_finite())
    }
}

/// Runs `learn` on a blocking thread in the release's span: what it
/// trained, refused if any of it is not finite.
pub async fn learned<L: Learned>(
    learn: impl FnOnce() -> Result<L, Failure> + Send + 'static,
) -> Result<L, Failure> {
    let span = tracing::Span::current();
    let trained = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        learn()
    })
    .await??;
    if !trained.is_finite() {
        return Err(Failure::NonFinite);
    }
    Ok(trained)
}
