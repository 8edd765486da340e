//! `model/dp-sgd`: logistic regression by SGD over disjoint batches, each
//! batch's sum of clipped gradients released with norm-Gamma noise (Song,
//! Chaudhuri, Sarwate 2013; seed 004 §3.3.8, corrected as in LEARNERS.md
//! §2), optionally on a public random projection of the features.
//!
//! Privacy. Each batch's clipped gradients are summed exactly on the
//! fixed-point grid of [`Grid`] (C′ = min(C, √d), C on projected
//! features). Replacing one row moves that integer sum by at most
//! 2·min(C, √d)/C′ = 2 units of C′ (unit `row`: ‖uᵢ‖ ≤ √d on [0, 1]ᵏ), or
//! under `label` min(2C, max‖uᵢ‖)/C′ plus the grid's rounding term
//! (flipping a label moves the residual by 1 along uᵢ, and the largest
//! ‖uᵢ‖ is public), or 2 on projected features: bounds on integers, with
//! no float rounding to pad. Noise with
//! density ∝ exp(−(ε_e/Δ)‖z‖) makes each step ε_e-DP, and every row lies
//! in exactly one batch of an epoch, so an epoch is ε_e-DP by parallel
//! composition, adaptivity included. That holds for any partition chosen
//! without looking at the data, so the shuffle (from the OS CSPRNG) is not
//! a secret the guarantee rests on. E epochs cost ε = E·ε_e: pure ε-DP,
//! with the E-fold composition on the ledger for its RDP accountant.
//!
//! The thesis's own samplers (a uniform vector in the *ball*, or
//! independent Gamma magnitudes per coordinate) are not ε-DP; this uses
//! [`Mechanism::norm_gamma`], whose norm is Gamma(d, Δ/ε_e) and whose
//! direction is uniform on the sphere, on the lattice (float-safe).

use async_trait::async_trait;
use dpgate_api_types::{self as api, DpSgdParams, PrivacyUnit, ProjectionUsed, ReleaseKind, Seed};
use rand::Rng;
use rand::seq::SliceRandom;

use super::gradients::{FeatureMap, Grid, Identity, LogisticLabels};
use super::iterative::{
    check_step, check_work, learn_on, require_in_memory, require_signal, unfold,
};
use super::projection::Projection;
use super::{dp_gd, dp_sgd_people};
use crate::domain::dataset::{DatasetRecord, Schema, Unit};
use crate::dp::fixed::Fixed;
use crate::dp::{DpError, Epsilon, Mechanism, OsNoise, PrivacyLoss, per_step_epsilon};
use crate::releases::pacing::StepNoise;
use crate::releases::plan::require_rows;
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};
use crate::snapshots::Columns;

/// Most passes over the data.
pub const MAX_EPOCHS: u32 = 100;

/// Most noisy steps ⌈N/b⌉·E.
pub const MAX_STEPS: u64 = 1_000_000;

/// Most noise coordinates (steps × d) one release may draw: exact
/// norm-Gamma draws take about 2 µs a coordinate on two cores, so this is
/// about two minutes, as `super::iterative::MAX_WORK` is for the rows.
pub const MAX_NOISE: u64 = 1 << 26;

/// A DP-SGD release, priced.
struct DpSgd {
    price: Price,
    mechanism: Mechanism,
    /// What one unit of a noisy batch sum is worth in the gradients': C′.
    unit: f64,
    sgd: Sgd,
    /// The projection's seed and k′: R itself (up to 134 MB) is built
    /// only once the release is admitted.
    projection: Option<(u64, usize)>,
    schema: Schema,
    epoch_epsilon: Epsilon,
}

/// SGD as requested, in the model's space: every setting public.
#[derive(Debug, Clone)]
pub struct Sgd {
    pub batch_size: usize,
    pub epochs: u32,
    pub learning_rate: f64,
    pub lambda: f64,
    pub clip: f64,
    pub fit_intercept: bool,
}

impl Sgd {
    /// ⌈N/b⌉·E.
    pub fn steps(&self, n: u64) -> u64 {
        n.div_ceil(self.batch_size as u64) * u64::from(self.epochs)
    }

    /// The grid its batch sums are taken on, for rows mapped by `map`.
    pub fn grid(&self, map: &impl FeatureMap) -> Result<Grid, DpError> {
        let dims = map.dims() + usize::from(self.fit_intercept);
        Grid::new(self.clip, 1.0, dims, map.bounded())
    }

    /// E epochs over `columns` mapped by `map`, from θ = 0: `permute`
    /// orders the rows of each epoch, which is cut into batches of b, and
    /// `release(t, s)` gives step t's released batch sum for the exact one
    /// s, normalised on [`Sgd::grid`] (the noise, in production). Step t
    /// (from 1) moves θ by −(η₀/√t)·(λθ + C′·ŝ/|B|). The last iterate,
    /// intercept first.
    pub fn run(
        &self,
        columns: &Columns,
        map: &impl FeatureMap,
        mut permute: impl FnMut(&mut [usize]),
        mut release: impl FnMut(u64, &Fixed) -> Result<Vec<f64>, DpError>,
    ) -> Result<Vec<f64>, DpError> {
        let grid = self.grid(map)?;
        let mut theta = vec![0.0; map.dims() + usize::from(self.fit_intercept)];
        let mut order: Vec<usize> = (0..columns.len()).collect();
        let mut step = 0u64;
        let loss = LogisticLabels(columns.labels());
        for _ in 0..self.epochs {
            permute(&mut order);
            for batch in order.chunks(self.batch_size) {
                let exact = grid.sum(
                    columns,
                    batch.iter().copied(),
                    map,
                    &loss,
                    &theta,
                    self.fit_intercept,
                );
                let released = release(step, &Fixed::normalised(exact))?;
                step += 1;
                self.descend(
                    &mut theta,
                    &released,
                    step,
                    batch.len() as f64 / grid.clip(),
                );
            }
        }
        Ok(theta)
    }

    /// Step t (from 1): θ −= (η₀/√t)·(λθ + ŝ/`size`), ŝ the released
    /// normalised sum and `size` the batch's rows over C′.
    pub fn descend(&self, theta: &mut [f64], released: &[f64], step: u64, size: f64) {
        let rate = self.learning_rate / (step as f64).sqrt();
        for (weight, sum) in theta.iter_mut().zip(released) {
            *weight -= rate * (self.lambda * *weight + sum / size);
        }
    }
}

/// The L2 sensitivity of one batch's normalised sum of clipped gradients
/// on `grid` (module docs): DP-GD's for one row, or the grid's diameter on
/// projected features, whose norms the declared bounds do not bound.
pub fn sensitivity(
    unit: PrivacyUnit,
    grid: &Grid,
    k: usize,
    max_norm_squared: f64,
    projected: bool,
    fit_intercept: bool,
) -> f64 {
    if projected {
        grid.replaced()
    } else {
        dp_gd::sensitivity(unit, grid, k, max_norm_squared, fit_intercept)
    }
}

/// Checks the request's settings against their public bounds.
fn check(params: &DpSgdParams, dataset: &DatasetRecord) -> Result<(), ReleaseError> {
    let n = dataset.n_rows;
    if !(1..=n).contains(&params.batch_size) {
        return Err(ReleaseError::Invalid(format!(
            "batch_size must be from 1 to the dataset's {n} rows (got {})",
            params.batch_size
        )));
    }
    check_settings(params, dataset.schema.k())?;
    let steps = sgd(params).steps(n);
    if steps > MAX_STEPS {
        return Err(ReleaseError::Invalid(format!(
            "⌈rows / batch_size⌉ × epochs = {steps} steps is more than {MAX_STEPS}; \
             take larger batches or fewer epochs"
        )));
    }
    let dims = mapped(params, dataset.schema.k()) + usize::from(params.fit_intercept);
    let noise = steps.saturating_mul(dims as u64);
    if noise > MAX_NOISE {
        return Err(ReleaseError::Invalid(format!(
            "steps × coordinates = {noise} noise values is more than one release may draw \
             ({MAX_NOISE}); take larger batches, fewer epochs or a projection"
        )));
    }
    Ok(())
}

/// The features' count after the projection, if any.
pub(super) fn mapped(params: &DpSgdParams, k: usize) -> usize {
    params.projection.as_ref().map_or(k, |p| p.dims)
}

/// Checks the settings whose bounds do not depend on N.
pub(super) fn check_settings(params: &DpSgdParams, k: usize) -> Result<(), ReleaseError> {
    if !(1..=MAX_EPOCHS).contains(&params.epochs) {
        return Err(ReleaseError::Invalid(format!(
            "epochs must be from 1 to {MAX_EPOCHS} (got {})",
            params.epochs
        )));
    }
    check_step(params.learning_rate, params.clip, params.lambda)?;
    if let Some(projection) = &params.projection
        && !(1..=k).contains(&projection.dims)
    {
        return Err(ReleaseError::Invalid(format!(
            "projection.dims must be from 1 to the dataset's {k} features (got {})",
            projection.dims
        )));
    }
    Ok(())
}

/// Prices a DP-SGD release from its settings, N, k and (under `label`,
/// without a projection) the largest feature norm.
pub fn plan(
    dataset: &DatasetRecord,
    params: &DpSgdParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    knobs.pure(DpSgdParams::KIND)?;
    if let Unit::User(bounds) = dataset.unit() {
        return dp_sgd_people::plan(dataset, &bounds, params, knobs);
    }
    require_rows(dataset)?;
    check(params, dataset)?;
    let k = dataset.schema.k();
    let dims = mapped(params, k) + usize::from(params.fit_intercept);
    // Each row costs d for the gradient and k·k′ for its projection.
    let per_row = dims + params.projection.as_ref().map_or(0, |p| p.dims * k);
    let work = u64::from(params.epochs)
        .saturating_mul(dataset.n_rows)
        .saturating_mul(per_row as u64);
    check_work(
        work,
        "epochs × rows × (coordinates + projection)",
        "take fewer epochs or a smaller projection",
    )?;
    // Pure ε: each epoch gets ⌊ε/E⌋ on the ledger's grid.
    let epoch_epsilon = per_step_epsilon(knobs.epsilon, knobs.delta, params.epochs, |each| {
        Ok(PrivacyLoss::PureEpsilon {
            epsilon: each.value(),
        })
    })
    .map_err(|error| ReleaseError::Invalid(error.to_string()))?;
    let projected = params.projection.is_some();
    let invalid = |error: DpError| ReleaseError::Invalid(error.to_string());
    let sgd = sgd(params);
    let grid = match params.projection.as_ref() {
        // The grid needs the map's shape only: no matrix is built here.
        Some(projection) => Grid::new(
            params.clip,
            1.0,
            projection.dims + usize::from(params.fit_intercept),
            false,
        ),
        None => sgd.grid(&Identity(k)),
    }
    .map_err(invalid)?;
    let sensitivity = sensitivity(
        dataset.privacy_unit,
        &grid,
        k,
        dataset.stats.max_norm_squared,
        projected,
        params.fit_intercept,
    );
    require_signal(
        dataset,
        params.fit_intercept || projected,
        "nothing to learn",
    )?;
    let mechanism = Mechanism::norm_gamma(
        epoch_epsilon,
        sensitivity,
        dims,
        grid.range(params.batch_size),
    )
    .map_err(invalid)?;
    let unit = grid.clip();
    let mut price = Price::of_sums(&mechanism, sensitivity * unit, dataset.n_rows, unit);
    if params.epochs > 1 {
        price.loss = Some(PrivacyLoss::Composition {
            count: params.epochs,
            each: Box::new(mechanism.loss().clone()),
        });
    }
    let projection = projection_seed(params);
    Ok(Box::new(DpSgd {
        price,
        mechanism,
        unit,
        sgd,
        projection,
        schema: dataset.schema.clone(),
        epoch_epsilon,
    }))
}

/// The requested projection's seed (drawn from the OS CSPRNG if not
/// given) and k′: R itself is built only once the release is admitted.
pub(super) fn projection_seed(params: &DpSgdParams) -> Option<(u64, usize)> {
    params.projection.as_ref().map(|requested| {
        let seed = requested
            .seed
            .map_or_else(|| OsNoise::new().next_u64(), |Seed(seed)| seed);
        (seed, requested.dims)
    })
}

/// R of the projection `(seed, k′)` over `features` features, built on a
/// blocking thread (up to 134 MB).
pub(super) async fn projected(
    projection: Option<(u64, usize)>,
    features: usize,
) -> Result<Option<Projection>, Failure> {
    Ok(match projection {
        Some((seed, dims)) => {
            Some(tokio::task::spawn_blocking(move || Projection::new(seed, dims, features)).await?)
        }
        None => None,
    })
}

pub(super) fn sgd(params: &DpSgdParams) -> Sgd {
    Sgd {
        // At most N, which is held in memory: the cast is exact.
        batch_size: params.batch_size as usize,
        epochs: params.epochs,
        learning_rate: params.learning_rate,
        lambda: params.lambda,
        clip: params.clip,
        fit_intercept: params.fit_intercept,
    }
}

#[async_trait]
impl Planned for DpSgd {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn vet(&mut self, snapshot: &Snapshot) -> Result<(), ReleaseError> {
        require_in_memory(snapshot)
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let DpSgd {
            mechanism,
            unit,
            sgd,
            projection,
            schema,
            epoch_epsilon,
            ..
        } = *self;
        let (steps, noise_scale) = (
            sgd.steps(snapshot.dataset().n_rows),
            mechanism.noise_scale() * unit,
        );
        let projection = projected(projection, schema.k()).await?;
        let (ran, map) = (sgd.clone(), projection.clone());
        let theta = learn_on(snapshot, move |columns| {
            let mut noise = StepNoise::new(&mechanism, steps);
            let mut rng = OsNoise::new();
            let permute = |order: &mut [usize]| order.shuffle(&mut rng);
            let release = |_, exact: &Fixed| {
                let drawn = noise.next().ok_or(DpError::NoSteps)?;
                mechanism.add_fixed(exact, &drawn)
            };
            match &map {
                Some(projection) => ran.run(columns, projection, permute, release),
                None => {
                    let identity = Identity(columns.shape().features);
                    ran.run(columns, &identity, permute, release)
                }
            }
        })
        .await?;
        Ok(api::ReleaseResult::DpSgd(result(
            &theta,
            &sgd,
            projection.as_ref(),
            &schema,
            steps,
            epoch_epsilon,
            noise_scale,
        )))
    }
}

/// The response: θ mapped back through the projection (Rᵀ) and into raw
/// feature units.
pub(super) fn result(
    theta: &[f64],
    sgd: &Sgd,
    projection: Option<&Projection>,
    schema: &Schema,
    steps: u64,
    epoch_epsilon: Epsilon,
    noise_scale: f64,
) -> api::DpSgdResult {
    let (weights, intercept) = match projection {
        Some(projection) => {
            let offset = usize::from(sgd.fit_intercept);
            let mut stored = theta[..offset].to_vec();
            stored.extend(projection.back(&theta[offset..]));
            unfold(&stored, schema, sgd.fit_intercept)
        }
        None => unfold(theta, schema, sgd.fit_intercept),
    };
    api::DpSgdResult {
        weights,
        intercept,
        fit_intercept: sgd.fit_intercept,
        batch_size: sgd.batch_size as u64,
        epochs: sgd.epochs,
        steps,
        learning_rate: sgd.learning_rate,
        lambda: sgd.lambda,
        clip: sgd.clip,
        projection: projection.map(|projection| ProjectionUsed {
            dims: projection.dims(),
            seed: Seed(projection.seed()),
        }),
        projected_weights: projection.map(|_| theta.to_vec()),
        epoch_epsilon: epoch_epsilon.value(),
        noise_scale,
        noisy_rows: None,
    }
}

#[cfg(test)]
#[path = "dp_sgd_tests.rs"]
mod tests;
