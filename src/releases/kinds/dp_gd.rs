//! `model/dp-gd`: logistic regression by full-batch gradient descent on
//! per-example clipped gradients, every step released with Gaussian noise
//! (seed 000, corrected as in LEARNERS.md §1).
//!
//! Each step releases the mean clipped gradient g = (1/N)·Σ clip_C(∇ℓᵢ)
//! ([`super::gradients`]), whose L2 sensitivity is
//! - unit `row`: 2·min(C, √d)/N, since every row's gradient has norm at
//!   most min(C, ‖uᵢ‖) and ‖uᵢ‖ ≤ √d on [0, 1]ᵏ with the intercept's 1;
//! - unit `label`: min(2C, maxᵢ‖uᵢ‖)/N: flipping yᵢ moves the residual by
//!   1 along uᵢ, and clipping is 1-Lipschitz along that line.
//!
//! The T steps are priced together ([`Mechanism::gaussian_steps`]): σ =
//! √T·σ_analytic(ε, δ, Δ′) with Δ′ the sensitivity plus each step's lattice
//! rounding, and the ledger records T composed Gaussians. Every iterate is
//! post-processing of released gradients; only the last (or the mean of
//! all) leaves the server. The noise of all T steps is drawn before a row
//! is read, and held to a deadline, so neither how long the draws took nor
//! how the steps went shows in the response's timing.

use async_trait::async_trait;
use dpgate_api_types::{self as api, DpGdParams, Iterate, PrivacyUnit, ReleaseKind};

use super::gradients::clipped_mean;
use crate::dataset::{DatasetRecord, Schema};
use crate::dp::{DpError, Drawn, Mechanism, OsNoise};
use crate::releases::plan::require_rows;
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot, pacing};
use crate::snapshots::Columns;

/// Most steps a release may take.
pub const MAX_STEPS: u32 = 10_000;

/// Most row-coordinates T·N·d one release may visit: about two minutes on
/// two cores (docs/models.md).
pub const MAX_WORK: u64 = 100_000_000_000;

/// The largest λ, radius or warm-start value a request may name.
const MAX_MAGNITUDE: f64 = 1e6;

/// A DP-GD release, priced.
struct DpGd {
    price: Price,
    mechanism: Mechanism,
    descent: Descent,
    schema: Schema,
    warm_start: bool,
}

/// Gradient descent as requested, in the stored features' space: every
/// setting public.
#[derive(Debug, Clone)]
pub struct Descent {
    pub steps: u32,
    pub learning_rate: f64,
    pub clip: f64,
    pub lambda: f64,
    pub radius: Option<f64>,
    pub output: Iterate,
    pub fit_intercept: bool,
    /// θ₀, intercept first.
    pub start: Vec<f64>,
}

impl Descent {
    /// T steps from θ₀ on `columns`: `release(t, g)` gives step t's
    /// released gradient for the exact one g (the noise, in production).
    /// The last iterate, or the mean of θ₁ … θ_T.
    pub fn run(
        &self,
        columns: &Columns,
        mut release: impl FnMut(usize, &[f64]) -> Result<Vec<f64>, DpError>,
    ) -> Result<Vec<f64>, DpError> {
        let mut theta = self.start.clone();
        project(&mut theta, self.radius);
        let mut total = vec![0.0; theta.len()];
        for step in 0..self.steps as usize {
            let exact = clipped_mean(columns, &theta, self.clip, self.fit_intercept);
            let released = release(step, &exact)?;
            for (weight, gradient) in theta.iter_mut().zip(released) {
                *weight -= self.learning_rate * (gradient + self.lambda * *weight);
            }
            project(&mut theta, self.radius);
            for (sum, weight) in total.iter_mut().zip(&theta) {
                *sum += weight;
            }
        }
        Ok(match self.output {
            Iterate::Last => theta,
            Iterate::Average => {
                let steps = f64::from(self.steps);
                total.into_iter().map(|sum| sum / steps).collect()
            }
        })
    }
}

/// θ ← θ·min(1, R/‖θ‖): the nearest point of the ball ‖θ‖ ≤ R.
fn project(theta: &mut [f64], radius: Option<f64>) {
    let Some(radius) = radius else { return };
    let norm = theta.iter().map(|w| w * w).sum::<f64>().sqrt();
    if norm > radius {
        let factor = radius / norm;
        for weight in theta {
            *weight *= factor;
        }
    }
}

/// The L2 sensitivity of one step's mean clipped gradient (module docs);
/// `max_norm_squared` is the largest ‖xᵢ‖² of the stored features, public
/// under unit `label`.
pub fn sensitivity(
    unit: PrivacyUnit,
    clip: f64,
    k: usize,
    max_norm_squared: f64,
    n: u64,
    intercept: bool,
) -> f64 {
    let one = if intercept { 1.0 } else { 0.0 };
    let n = n as f64;
    match unit {
        PrivacyUnit::Row => 2.0 * clip.min((k as f64 + one).sqrt()) / n,
        PrivacyUnit::Label => (2.0 * clip).min((max_norm_squared + one).sqrt()) / n,
    }
}

/// Refuses `value` outside `range`, saying what `name` must be.
fn within(
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

/// Checks the request's settings against their public bounds.
fn check(params: &DpGdParams, dataset: &DatasetRecord) -> Result<(), ReleaseError> {
    if !(1..=MAX_STEPS).contains(&params.steps) {
        return Err(ReleaseError::Invalid(format!(
            "steps must be from 1 to {MAX_STEPS} (got {})",
            params.steps
        )));
    }
    within(
        "learning_rate",
        params.learning_rate,
        |a| a > 0.0 && a <= 100.0,
        "in (0, 100]",
    )?;
    within("clip", params.clip, |c| c > 0.0 && c <= 1e3, "in (0, 1000]")?;
    within(
        "lambda",
        params.lambda,
        |l| (0.0..=MAX_MAGNITUDE).contains(&l),
        "in [0, 1e6]",
    )?;
    within(
        "learning_rate × lambda",
        params.learning_rate * params.lambda,
        |product| product < 2.0,
        "below 2, or the ridge term makes every step diverge",
    )?;
    if let Some(radius) = params.radius {
        within(
            "radius",
            radius,
            |r| r > 0.0 && r <= MAX_MAGNITUDE,
            "in (0, 1e6]",
        )?;
    }
    if let Some(start) = &params.theta0 {
        let k = dataset.schema.k();
        if start.weights.len() != k {
            return Err(ReleaseError::Invalid(format!(
                "theta0 has {} weights; the dataset has {k} features",
                start.weights.len()
            )));
        }
        for &value in start.weights.iter().chain([&start.intercept]) {
            within(
                "every value of theta0",
                value,
                |v| v.abs() <= MAX_MAGNITUDE,
                "finite and at most 1e6 in magnitude",
            )?;
        }
    }
    Ok(())
}

/// θ₀ in the stored features' space, intercept first: the request's
/// warm start (raw units) mapped in, or 0. Without an intercept, the
/// constant part of the mapped start is dropped with it.
fn start(params: &DpGdParams, schema: &Schema) -> Vec<f64> {
    let k = schema.k();
    let (weights, intercept) = match &params.theta0 {
        Some(start) => {
            let (min, max) = schema.feature_bounds();
            dpgate_learn::rescale(&start.weights, start.intercept, &min, &max)
        }
        None => (vec![0.0; k], 0.0),
    };
    let mut theta = Vec::with_capacity(k + 1);
    if params.fit_intercept {
        theta.push(intercept);
    }
    theta.extend(weights);
    theta
}

/// Prices a DP-GD release from its settings, N, k and (under `label`) the
/// largest feature norm.
pub fn plan(
    dataset: &DatasetRecord,
    params: &DpGdParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    knobs.approximate(DpGdParams::KIND)?;
    require_rows(dataset)?;
    check(params, dataset)?;
    let k = dataset.schema.k();
    let dims = k + usize::from(params.fit_intercept);
    let work = u64::from(params.steps)
        .saturating_mul(dataset.n_rows)
        .saturating_mul(dims as u64);
    if work > MAX_WORK {
        return Err(ReleaseError::Invalid(format!(
            "steps × rows × coordinates = {work} is more than one release may do \
             ({MAX_WORK:e}); take fewer steps"
        )));
    }
    let sensitivity = sensitivity(
        dataset.privacy_unit,
        params.clip,
        k,
        dataset.stats.max_norm_squared,
        dataset.n_rows,
        params.fit_intercept,
    );
    if sensitivity == 0.0 {
        return Err(ReleaseError::Invalid(
            "every feature vector is zero and the intercept is off: nothing to learn".to_owned(),
        ));
    }
    // Each coordinate of a mean clipped gradient is at most min(C, 1).
    let range = params.clip.min(1.0);
    let mechanism = Mechanism::gaussian_steps(
        knobs.epsilon,
        knobs.delta,
        sensitivity,
        dims,
        params.steps,
        range,
    )
    .map_err(|error| ReleaseError::Invalid(error.to_string()))?;
    Ok(Box::new(DpGd {
        price: Price::of(&mechanism, sensitivity, dataset.n_rows),
        mechanism,
        descent: Descent {
            steps: params.steps,
            learning_rate: params.learning_rate,
            clip: params.clip,
            lambda: params.lambda,
            radius: params.radius,
            output: params.output,
            fit_intercept: params.fit_intercept,
            start: start(params, &dataset.schema),
        },
        schema: dataset.schema.clone(),
        warm_start: params.theta0.is_some(),
    }))
}

#[async_trait]
impl Planned for DpGd {
    fn price(&self) -> &Price {
        &self.price
    }

    /// Every step passes over all the rows: the snapshot must fit in
    /// memory.
    async fn vet(&mut self, snapshot: &Snapshot) -> Result<(), ReleaseError> {
        if !snapshot.fits() {
            return Err(ReleaseError::Invalid(
                "the dataset is larger than the snapshot cache (DPGATE_CACHE_BYTES), \
                 and every step of descent passes over all its rows"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let columns = snapshot.columns().await?.ok_or(Failure::Unheld)?;
        let DpGd {
            mechanism,
            descent,
            schema,
            warm_start,
            ..
        } = *self;
        let (ran, sigma) = (descent.clone(), mechanism.noise_scale());
        let noise_multiplier = sigma / mechanism.accounted_sensitivity();
        let span = tracing::Span::current();
        let theta = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let drawn = draw(&mechanism, ran.steps);
            ran.run(&columns, |step, exact| mechanism.add(exact, &drawn[step]))
        })
        .await??;
        if theta.iter().any(|value| !value.is_finite()) {
            return Err(Failure::NonFinite);
        }
        let (weights, intercept) = unfold(&theta, &schema, descent.fit_intercept);
        Ok(api::ReleaseResult::DpGd(api::DpGdResult {
            weights,
            intercept,
            fit_intercept: descent.fit_intercept,
            steps: descent.steps,
            learning_rate: descent.learning_rate,
            clip: descent.clip,
            lambda: descent.lambda,
            radius: descent.radius,
            output: descent.output,
            sigma,
            noise_multiplier,
            warm_start,
        }))
    }
}

/// Every step's noise, drawn from the OS CSPRNG before a row is read and
/// held to the steps' [`pacing::budget_of_draws`].
fn draw(mechanism: &Mechanism, steps: u32) -> Vec<Drawn> {
    pacing::paced(pacing::budget_of_draws(mechanism, steps), || {
        let mut rng = OsNoise::new();
        (0..steps).map(|_| mechanism.draw(&mut rng)).collect()
    })
}

/// θ (stored features' space, intercept first) in raw feature units.
fn unfold(theta: &[f64], schema: &Schema, fit_intercept: bool) -> (Vec<f64>, f64) {
    let (intercept, weights) = if fit_intercept {
        (theta[0], &theta[1..])
    } else {
        (0.0, theta)
    };
    let (min, max) = schema.feature_bounds();
    dpgate_learn::unscale(weights, intercept, &min, &max)
}

#[cfg(test)]
#[path = "dp_gd_tests.rs"]
mod tests;
