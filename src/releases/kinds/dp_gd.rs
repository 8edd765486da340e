//! `model/dp-gd`: logistic regression by full-batch gradient descent on
//! per-example clipped gradients, every step released with Gaussian noise
//! (seed 000, corrected as in LEARNERS.md §1).
//!
//! Each step releases the mean clipped gradient g = (1/N)·Σ clip_C(∇ℓᵢ)
//! ([`super::gradients`]): the exact integer sum of the rows' clipped
//! gradients on the grid of C′ = min(C, √d), noised, then scaled by C′/N.
//! The sum's L2 sensitivity ([`Grid`], in units of C′) is
//! - unit `row`: 2·min(C, √d)/C′ = 2, since every row's gradient has norm
//!   at most min(C, ‖uᵢ‖) and ‖uᵢ‖ ≤ √d on [0, 1]ᵏ with the intercept's 1;
//! - unit `label`: min(2C, maxᵢ‖uᵢ‖)/C′ plus the grid's public rounding
//!   term: flipping yᵢ moves the residual by 1 along uᵢ, and clipping is
//!   1-Lipschitz along that line;
//! - unit `user`: each person's rows' gradients are summed exactly, the
//!   total clipped to C (not each row's) on the grid of C′ = min(C, m·√d)
//!   ([`Grid::per_person`]), so adding or removing a person moves the sum
//!   by at most the region's reach, 1 (C′ in the gradient), whatever m.
//!   N is private there: it is released first, with noise, as a sum of
//!   ⌊Δ/m⌋ units a row ([`Grid::count_weight`]), which one person moves by
//!   at most Δ, so the T + 1 releases are priced as T + 1 steps of one
//!   noise multiplier, and each step's gradient is its noisy sum times
//!   C′/max(N̂, 1), post-processing.
//!
//! Both are computed from the grid's integer bounds, which hold exactly,
//! so no float rounding needs padding. The T steps are priced together
//! ([`Mechanism::gaussian_steps`]): σ = √T·σ_analytic(ε, δ, Δ′) with Δ′
//! the sensitivity plus each step's lattice rounding, and the ledger
//! records T composed Gaussians. Every iterate is
//! post-processing of released gradients; only the last (or the mean of
//! all) leaves the server. The steps' noise is drawn ahead of them in
//! blocks, each held to a deadline ([`StepNoise`]), so neither how long the
//! draws took nor how the steps went shows in the response's timing.

use async_trait::async_trait;
use dpgate_api_types::{self as api, DpGdParams, Iterate, PrivacyUnit, ReleaseKind};

use super::counting::Counting;
use super::gradients::{Gradients, Grid, Logistic};
use super::iterative::{
    Learned, MAX_MAGNITUDE, RowPasses, check_step, check_work, learn_by_passes, require_signal,
    unfold, within,
};
use crate::domain::dataset::{DatasetRecord, Schema, Unit};
use crate::dp::fixed::Fixed;
use crate::dp::{DpError, Mechanism};
use crate::releases::pacing::StepNoise;
use crate::releases::plan::{most_rows, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// Most steps a release may take.
pub const MAX_STEPS: u32 = 10_000;

/// A DP-GD release, priced.
struct DpGd {
    price: Price,
    mechanism: Mechanism,
    /// What one unit of the noisy sum is worth in the summed gradient: C′.
    clip: f64,
    /// N when it is public (not under unit `user`).
    rows: Option<u64>,
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
    /// Under unit `user`, the most rows a person has (m): each person's
    /// summed gradient is clipped instead of each row's, and N, private, is
    /// released with noise before the steps.
    pub people: Option<u32>,
}

/// What a descent released: its model, and under unit `user` the noisy
/// count it divided by.
pub struct Descended {
    pub theta: Vec<f64>,
    pub noisy_rows: Option<f64>,
}

impl Learned for Descended {
    fn is_finite(&self) -> bool {
        self.theta.is_finite() && self.noisy_rows.is_none_or(f64::is_finite)
    }
}

impl Descent {
    /// The grid its gradients are summed on, for rows of `k` features.
    pub fn grid(&self, k: usize) -> Result<Grid, DpError> {
        let dims = k + usize::from(self.fit_intercept);
        match self.people {
            None => Grid::new(self.clip, 1.0, dims, true),
            Some(m) => Grid::per_person(self.clip, 1.0, dims, true, m),
        }
    }

    /// How many sums it releases, all of one sensitivity: the T steps, and
    /// under unit `user` the count before them.
    pub fn releases(&self) -> u32 {
        self.steps + u32::from(self.people.is_some())
    }

    /// T steps from θ₀ on `rows`: `release(t, s)` gives release t's
    /// noisy sum for the exact one s, normalised on [`Descent::grid`] (the
    /// noise, in production); the gradient is that times C′/N. Under unit
    /// `user` release 0 is N's, each row weighing [`Grid::count_weight`]
    /// units, and N is that noisy count (at least 1). The last iterate, or
    /// the mean of θ₁ … θ_T.
    pub fn run(
        &self,
        rows: &impl RowPasses,
        mut release: impl FnMut(usize, &Fixed) -> Result<Vec<f64>, DpError>,
    ) -> Result<Descended, Failure> {
        let grid = self.grid(self.start.len() - usize::from(self.fit_intercept))?;
        let noisy_rows = match self.people {
            Some(m) => Some(noisy_rows(rows, &grid, m, self.start.len(), &mut release)?),
            None => None,
        };
        let (unit, first) = match noisy_rows {
            Some(noisy) => (grid.clip() / noisy.max(1.0), 1),
            None => (grid.clip() / rows.count() as f64, 0),
        };
        let mut theta = self.start.clone();
        project(&mut theta, self.radius);
        let mut total = vec![0.0; theta.len()];
        for step in 0..self.steps as usize {
            let pass = Gradients::at(&grid, Logistic, &theta, self.fit_intercept);
            let released = release(first + step, &rows.sum(pass)?.total())?;
            for (weight, sum) in theta.iter_mut().zip(released) {
                *weight -= self.learning_rate * (sum * unit + self.lambda * *weight);
            }
            project(&mut theta, self.radius);
            for (sum, weight) in total.iter_mut().zip(&theta) {
                *sum += weight;
            }
        }
        let theta = match self.output {
            Iterate::Last => theta,
            Iterate::Average => {
                let steps = f64::from(self.steps);
                total.into_iter().map(|sum| sum / steps).collect()
            }
        };
        Ok(Descended { theta, noisy_rows })
    }
}

/// The rows' count, released as `release` 0 in the first of `dims`
/// coordinates, each row [`Grid::count_weight`] units: a person moves it
/// by at most what they move a step's sum by, so it is priced as a step.
/// (The weight is at least 2⁴⁰/(2·10⁶) units: the reach is at least half
/// a unit of C′, m at most `MAX_ROWS_PER_USER`.)
fn noisy_rows(
    rows: &impl RowPasses,
    grid: &Grid,
    m: u32,
    dims: usize,
    release: &mut impl FnMut(usize, &Fixed) -> Result<Vec<f64>, DpError>,
) -> Result<f64, Failure> {
    let counted = rows.sum(Counting::new(grid.count_weight(m)))?;
    let released = release(0, &counted.fixed(dims))?;
    Ok(counted.rows(&released))
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

/// The L2 sensitivity of one step's normalised sum of clipped gradients
/// on `grid` (module docs); `max_norm_squared` is the largest ‖xᵢ‖² of the
/// stored features, public under unit `label`.
pub fn sensitivity(
    unit: PrivacyUnit,
    grid: &Grid,
    k: usize,
    max_norm_squared: f64,
    intercept: bool,
) -> f64 {
    let rows = Rows {
        k,
        max_norm_squared,
        intercept,
    };
    clipped_sensitivity(unit, grid, &rows, Reach::LOGISTIC)
}

/// The public facts about the rows a sum of clipped gradients is taken
/// over.
pub struct Rows {
    pub k: usize,
    /// The largest ‖xᵢ‖² of the stored features.
    pub max_norm_squared: f64,
    pub intercept: bool,
}

/// How far a row's residual r (its gradient is r·uᵢ) reaches.
#[derive(Debug, Clone, Copy)]
pub struct Reach {
    /// The largest |r| of any row at any θ (∞ when θ does not bound it).
    pub largest: f64,
    /// How far changing one row's outcome moves its r.
    pub shift: f64,
}

impl Reach {
    /// σ(θᵀu) − y with y ∈ [0, 1].
    pub const LOGISTIC: Reach = Reach {
        largest: 1.0,
        shift: 1.0,
    };
}

/// The L2 sensitivity of a normalised sum of clipped gradients r·u on
/// `grid` ([`Grid`]): unit `row`, the grid's diameter, 2·min(C, |r|max·√d)
/// over C′; unit `label`, shift·maxᵢ‖uᵢ‖ over C′ plus the grid's rounding
/// term, at most the diameter, since clipping is 1-Lipschitz along the
/// line an outcome moves r on.
pub fn clipped_sensitivity(unit: PrivacyUnit, grid: &Grid, rows: &Rows, reach: Reach) -> f64 {
    let one = if rows.intercept { 1.0 } else { 0.0 };
    match unit {
        PrivacyUnit::Row => grid.replaced(),
        PrivacyUnit::Label => grid.moved(reach.shift * (rows.max_norm_squared + one).sqrt()),
        PrivacyUnit::User => grid.added(),
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
    check_step(params.learning_rate, params.clip, params.lambda)?;
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
    // Under unit `user` N is private: a refusal by it would tell whether N
    // is above a threshold, so only the steps bound the work there.
    let people = match dataset.unit() {
        Unit::User(bounds) => Some(bounds.rows),
        Unit::Label | Unit::Row => {
            let work = u64::from(params.steps)
                .saturating_mul(dataset.n_rows)
                .saturating_mul(dims as u64);
            check_work(work, "steps × rows × coordinates", "take fewer steps")?;
            None
        }
    };
    let descent = Descent {
        steps: params.steps,
        learning_rate: params.learning_rate,
        clip: params.clip,
        lambda: params.lambda,
        radius: params.radius,
        output: params.output,
        fit_intercept: params.fit_intercept,
        start: start(params, &dataset.schema),
        people,
    };
    let invalid = |error: DpError| ReleaseError::Invalid(error.to_string());
    let grid = descent.grid(k).map_err(invalid)?;
    let sensitivity = sensitivity(
        dataset.privacy_unit,
        &grid,
        k,
        dataset.stats.max_norm_squared,
        params.fit_intercept,
    );
    require_signal(dataset, params.fit_intercept, "nothing to learn")?;
    // Under `user` the summands are people, at most as many as rows.
    let most = most_rows(dataset);
    let mechanism = Mechanism::gaussian_steps(
        knobs.epsilon,
        knobs.delta,
        sensitivity,
        dims,
        descent.releases(),
        grid.range(most),
    )
    .map_err(invalid)?;
    let rows = people.is_none().then_some(dataset.n_rows);
    // The noise is reported on the mean gradient where N is public, on
    // the summed one where it is not.
    let unit = grid.clip() / rows.unwrap_or(1) as f64;
    Ok(Box::new(DpGd {
        price: Price::of_sums(&mechanism, sensitivity * unit, most, unit),
        mechanism,
        clip: grid.clip(),
        rows,
        descent,
        schema: dataset.schema.clone(),
        warm_start: params.theta0.is_some(),
    }))
}

#[async_trait]
impl Planned for DpGd {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let DpGd {
            mechanism,
            clip,
            rows,
            descent,
            schema,
            warm_start,
            ..
        } = *self;
        let (ran, scale) = (descent.clone(), mechanism.noise_scale());
        let noise_multiplier = scale / mechanism.accounted_sensitivity();
        let Descended { theta, noisy_rows } = learn_by_passes(snapshot, move |rows| {
            let mut noise = StepNoise::new(&mechanism, u64::from(ran.releases()));
            ran.run(rows, |_, exact| {
                let drawn = noise.next().ok_or(DpError::NoSteps)?;
                mechanism.add_fixed(exact, &drawn)
            })
        })
        .await?;
        let divisor = match (rows, noisy_rows) {
            (Some(rows), _) => rows as f64,
            (None, noisy) => noisy.unwrap_or(1.0).max(1.0),
        };
        let sigma = scale * (clip / divisor);
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
            noisy_rows,
        }))
    }
}

#[cfg(test)]
#[path = "dp_gd_tests.rs"]
mod tests;
