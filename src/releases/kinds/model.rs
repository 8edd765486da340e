//! Model releases: L2-regularised logistic regression fitted on the server
//! and released with output perturbation or objective perturbation (the
//! privacy parameters are in [`crate::dp::erm`]).
//!
//! Both learners need ‖xᵢ‖₂ ≤ 1. Features are stored scaled into [0, 1];
//! each training row is centred on the middle of that box and given an
//! intercept coordinate of 1, then scaled: (x̃ᵢ − ½, 1)·s with
//! s = 1/√(k/4 + 1) (or (x̃ᵢ − ½)·2/√k without an intercept). A centred row
//! of [0, 1]ᵏ has norm at most √k/2, so the bound holds for every possible
//! row without looking at the data; against the uncentred (x̃ᵢ, 1)/√(k + 1)
//! the features are scaled up about twice, and the intercept needs only
//! the log-odds of the base rate instead of absorbing Σⱼ wⱼ/2, so the ridge
//! costs much less bias at the same λ (docs/models.md, "The problem
//! fitted"). Labels become ±1. The released weights are then unfolded into
//! the units the features were uploaded in: σ(aᵀraw + b) is the model's
//! prediction.
//!
//! The rows are read and the model fitted only after the debit: how long a
//! fit takes, and whether it converges, depends on the data.

use std::time::{Duration, Instant};

use dpgate_api_types as api;
use dpgate_learn::Objective;
use ndarray::{Array1, Array2, ArrayView1};
use rand::Rng;
use rayon::prelude::*;

use crate::domain::dataset::Schema;
use crate::dp::erm::{self, Neighbours, ObjectivePerturbation, SOLVE_TOLERANCE};
use crate::dp::{self, DpError, Epsilon, Mechanism, OsNoise};
use crate::releases::{Failure, ModelError, Snapshot, pacing};
use crate::snapshots::Pass;
use crate::snapshots::{CHUNK_ROWS, Columns};

/// −ln P of a noise draw beyond the bounds the lattice is sized for:
/// 2^−64 per release.
const TAIL: f64 = 64.0 * std::f64::consts::LN_2;

/// A bound on ‖ŵ‖ for the solve of J(w) + (1/N)·bᵀw with regulariser
/// `lambda` and ‖b‖/N ≤ `linear`, over every dataset: the loss is ≥ 0, so
/// (λ/2)‖w*‖² − (‖b‖/N)‖w*‖ ≤ J(w*) ≤ J(0) = ln 2, whence
/// ‖w*‖ ≤ 2‖b‖/(Nλ) + √(2 ln 2/λ); and λ-strong convexity puts the solver's
/// ŵ (‖∇J(ŵ)‖ ≤ γ) within γ/λ of w*.
pub fn weight_bound(lambda: f64, linear: f64) -> f64 {
    2.0 * linear / lambda
        + (2.0 * std::f64::consts::LN_2 / lambda).sqrt()
        + SOLVE_TOLERANCE / lambda
}

/// x with P(Gamma(d, 1) > x) ≤ 2^−64: Gamma(d, 1) is sub-gamma on the right
/// with variance factor d and scale 1, so P(X > d + √(2ds) + s) ≤ e^{−s}
/// (Boucheron, Lugosi & Massart, Concentration Inequalities, 2013, §2.4).
pub fn gamma_tail(d: usize) -> f64 {
    let d = d as f64;
    d + (2.0 * d * TAIL).sqrt() + TAIL
}

/// Most features a model may have: the Newton solve forms a d × d Hessian
/// per step.
pub const MAX_FEATURES: usize = 512;

/// Most training values (rows × columns) one fit may hold in memory
/// (8 bytes each).
pub const MAX_VALUES: u64 = 200_000_000;

/// The range of λ a model may ask for. Below 10⁻¹² no fit of output
/// perturbation can be certified for any N (the certified solver's floor is
/// above 6·10⁻¹⁰ even at N = 1); above 10⁶ the weights are zero to within
/// any noise the lattice can carry.
pub const MIN_LAMBDA: f64 = 1e-12;
pub const MAX_LAMBDA: f64 = 1e6;

/// Checks what a model request can be checked for before reading data.
pub fn check(lambda: f64, k: usize, n: u64, fit_intercept: bool) -> Result<(), String> {
    check_lambda(lambda)?;
    check_shape(k, n, fit_intercept)
}

/// Refuses a λ outside [`MIN_LAMBDA`, `MAX_LAMBDA`].
pub fn check_lambda(lambda: f64) -> Result<(), String> {
    if (MIN_LAMBDA..=MAX_LAMBDA).contains(&lambda) {
        Ok(())
    } else {
        Err(format!(
            "lambda must be a number from {MIN_LAMBDA:e} to {MAX_LAMBDA:e} (got {lambda})"
        ))
    }
}

/// Refuses a fit of `n` rows and `k` features the server cannot hold.
pub fn check_shape(k: usize, n: u64, fit_intercept: bool) -> Result<(), String> {
    if n == 0 {
        return Err("the dataset has no rows yet".to_owned());
    }
    if k > MAX_FEATURES {
        return Err(format!(
            "models are limited to {MAX_FEATURES} features (this dataset has {k})"
        ));
    }
    let values = n.saturating_mul(columns(k, fit_intercept) as u64);
    if values > MAX_VALUES {
        return Err(format!(
            "a model fit holds rows × columns = {values} values in memory; the limit is \
             {MAX_VALUES}"
        ));
    }
    Ok(())
}

/// Refuses, before the debit, a fit the solver could fail to certify for
/// some dataset in the declared domain: `lambda` (the whole regulariser)
/// below the floor of [`dpgate_learn::certify`] for `dims` columns, `n`
/// rows and ‖b‖/N ≤ `linear`.
pub fn certifiable(dims: usize, n: u64, lambda: f64, linear: f64) -> Result<(), String> {
    let rows = usize::try_from(n).map_err(|_| format!("{n} rows are more than a fit can hold"))?;
    dpgate_learn::certifiable(dims, rows, lambda, linear, SOLVE_TOLERANCE)
        .map_err(|infeasible| format!("{infeasible}; raise lambda"))
}

pub fn columns(k: usize, fit_intercept: bool) -> usize {
    k + usize::from(fit_intercept)
}

/// s of a training row (x̃ − ½, 1)·s: 1 over the largest norm the
/// unscaled row can have, √(k/4 + 1) (√k/2 without an intercept), less
/// 2⁻⁵⁰ relative so that the roundings of s, of x̃ − ½ and of the product
/// can never leave a row's norm above 1.
pub fn row_scale(k: usize, fit_intercept: bool) -> f64 {
    let largest = k as f64 / 4.0 + if fit_intercept { 1.0 } else { 0.0 };
    if largest > 0.0 {
        (1.0 - 2f64.powi(-50)) / largest.sqrt()
    } else {
        1.0
    }
}

/// The training set of a fit: scaled rows with ‖x‖ ≤ 1 and ±1 labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Design {
    pub x: Array2<f64>,
    pub y: Array1<f64>,
    pub fit_intercept: bool,
}

/// Collects a snapshot's rows into a [`Design`], block by block.
#[derive(Debug)]
pub struct DesignBuilder {
    /// Allocated zeroed for every expected row (pages the OS hands over
    /// zeroed, touched first by the cores that write them), filled up to
    /// `filled` values.
    values: Vec<f64>,
    filled: usize,
    labels: Vec<f64>,
    k: usize,
    fit_intercept: bool,
    scale: f64,
}

impl DesignBuilder {
    pub fn new(k: usize, rows: u64, fit_intercept: bool) -> Self {
        let d = columns(k, fit_intercept);
        let rows = usize::try_from(rows).unwrap_or(0);
        DesignBuilder {
            values: vec![0.0; rows.saturating_mul(d)],
            filled: 0,
            labels: Vec::with_capacity(rows),
            k,
            fit_intercept,
            scale: row_scale(k, fit_intercept),
        }
    }

    pub fn build(mut self) -> Result<Design, String> {
        let d = columns(self.k, self.fit_intercept);
        self.values.truncate(self.filled);
        let x = Array2::from_shape_vec((self.labels.len(), d), self.values)
            .map_err(|error| format!("malformed training rows: {error}"))?;
        Ok(Design {
            x,
            y: Array1::from(self.labels),
            fit_intercept: self.fit_intercept,
        })
    }
}

impl Pass for DesignBuilder {
    /// Appends the block's rows, scaled, each chunk of rows written by
    /// its own core.
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        if block.shape().features != self.k {
            return Err("the rows do not have the schema's features".to_owned());
        }
        let d = columns(self.k, self.fit_intercept);
        let (scale, fit_intercept) = (self.scale, self.fit_intercept);
        let (start, end) = (self.filled, self.filled + block.len() * d);
        if end > self.values.len() {
            self.values.resize(end, 0.0);
        }
        self.filled = end;
        self.values[start..end]
            .par_chunks_mut(CHUNK_ROWS * d)
            .enumerate()
            .for_each(|(chunk, out)| {
                for (offset, row) in out.chunks_exact_mut(d).enumerate() {
                    let features = block.features(chunk * CHUNK_ROWS + offset);
                    for (value, &feature) in row.iter_mut().zip(features) {
                        *value = (f64::from(feature) - 0.5) * scale;
                    }
                    if fit_intercept {
                        row[d - 1] = scale;
                    }
                }
            });
        self.labels.extend(
            block
                .labels()
                .iter()
                .map(|&label| 2.0 * f64::from(label) - 1.0),
        );
        Ok(())
    }
}

/// The minimiser of J(w) + (1/M)·bᵀw with regulariser `lambda`, J's loss
/// divided by M = `normaliser` (N by default), to gradient norm
/// [`SOLVE_TOLERANCE`].
pub fn solve(
    design: &Design,
    lambda: f64,
    linear: Option<ArrayView1<'_, f64>>,
    normaliser: Option<f64>,
) -> Result<Array1<f64>, ModelError> {
    let objective = Objective {
        x: design.x.view(),
        y: design.y.view(),
        lambda,
        linear,
        normaliser,
    };
    Ok(objective.minimise(SOLVE_TOLERANCE)?.weights)
}

/// Output perturbation's noise: norm-Gamma (pure ε) when `delta` is 0,
/// else the analytic Gaussian, calibrated to 2/(Nλ) + 2γ/λ, on weights
/// within [`weight_bound`].
pub fn output_mechanism(
    epsilon: Epsilon,
    delta: dp::Delta,
    n: u64,
    lambda: f64,
    dims: usize,
) -> Result<Mechanism, DpError> {
    let sensitivity = erm::output_sensitivity(n, lambda, SOLVE_TOLERANCE)?;
    let range = weight_bound(lambda, 0.0);
    if delta == dp::Delta::ZERO {
        Mechanism::norm_gamma(epsilon, sensitivity, dims, range)
    } else {
        Mechanism::gaussian(epsilon, delta, sensitivity, dims, range)
    }
}

/// An objective-perturbation release, planned: CMS11's parameters and the
/// output noise of the inexact solve.
#[derive(Debug, Clone)]
pub struct ObjectivePlan {
    pub params: ObjectivePerturbation,
    pub neighbours: Neighbours,
    pub lambda: f64,
    pub output: Mechanism,
}

impl ObjectivePlan {
    /// CMS11's parameters for (ε, N, λ) under unit `row` or `label`.
    pub fn new(epsilon: Epsilon, n: u64, lambda: f64, dims: usize) -> Result<Self, DpError> {
        Self::between(epsilon, Neighbours::Row { n }, lambda, dims)
    }

    /// CMS11's parameters for ε, `neighbours` and λ, and the output noise,
    /// on a lattice that holds the weights unless ‖b‖ lands beyond its
    /// 1 − 2^−64 quantile.
    pub fn between(
        epsilon: Epsilon,
        neighbours: Neighbours,
        lambda: f64,
        dims: usize,
    ) -> Result<Self, DpError> {
        let params = erm::objective_perturbation(
            epsilon,
            neighbours,
            lambda,
            SOLVE_TOLERANCE,
            gamma_tail(dims),
        )?;
        let range = weight_bound(lambda + params.extra_regulariser, params.linear_bound);
        let output = Mechanism::norm_gamma(
            params.epsilon_output,
            params.output_sensitivity,
            dims,
            range,
        )?;
        Ok(ObjectivePlan {
            params,
            neighbours,
            lambda,
            output,
        })
    }

    /// λ + Δ: the regulariser the objective is solved with.
    pub fn whole_lambda(&self) -> f64 {
        self.lambda + self.params.extra_regulariser
    }

    /// Draws b and solves the perturbed objective: the weights (scaled
    /// space) before their output noise. Under `user` the loss is divided
    /// by M = max(N̂, N) and b by N̂, so b enters the solver times M/N̂
    /// (`dp::erm_people`); with no rows the minimiser is −b/(N̂Λ).
    pub fn solve_perturbed<R: Rng + ?Sized>(
        &self,
        design: &Design,
        rng: &mut R,
    ) -> Result<Array1<f64>, ModelError> {
        let dims = design.x.ncols();
        let mut b = Array1::from(dp::norm_gamma_continuous(dims, self.params.b_scale, rng));
        let whole = self.whole_lambda();
        let normaliser = match self.neighbours {
            Neighbours::Row { .. } => None,
            Neighbours::People { normaliser, .. } => {
                let rows = design.y.len() as f64;
                if rows == 0.0 {
                    return Ok(b.mapv(|value| -value / (normaliser * whole)));
                }
                let most = normaliser.max(rows);
                b *= most / normaliser;
                Some(most)
            }
        };
        solve(design, whole, Some(b.view()), normaliser)
    }

    /// [`Self::solve_perturbed`] with b from the OS CSPRNG, the draw and
    /// the solve together held to [`solve_budget`]: how long the solve
    /// took depends on b, which must stay secret.
    pub fn solve_held(&self, design: &Design) -> Result<Array1<f64>, ModelError> {
        pacing::paced(solve_budget(design), || {
            self.solve_perturbed(design, &mut OsNoise::new())
        })
    }

    /// [`Self::solve_perturbed`], then the output noise: the private
    /// weights (scaled space).
    pub fn run<R: Rng + ?Sized>(
        &self,
        design: &Design,
        rng: &mut R,
    ) -> Result<Vec<f64>, ModelError> {
        let weights = self.solve_perturbed(design, rng)?;
        Ok(self.output.release(&weights.to_vec(), rng)?)
    }
}

/// Newton iterations' worth of time ([`iteration_time`]) that objective
/// perturbation's draw of b and its solve are held to. The worst case the
/// solver allows (500 iterations of up to 61 passes, then 100 certified
/// ones) would hold every release thousands of times longer than it takes;
/// 1,620 solves measured over N, k, λ, ε, labels and b took 6.3 units at
/// the median and 31.8 at most (docs/models.md, "Timing of the solve"), so
/// 46 keeps 1.45× over the slowest seen, and an overrun is counted in
/// `dpgate_noise_overruns_total`.
pub const SOLVE_ALLOWANCE: u32 = 46;

/// The time of one Newton iteration's passes on `design` (its Hessian and
/// its gradient), measured at w = 0: the same arithmetic for every dataset
/// of its shape, so a function of N, d and the machine.
pub fn iteration_time(design: &Design) -> Duration {
    let objective = Objective {
        x: design.x.view(),
        y: design.y.view(),
        lambda: 1.0,
        linear: None,
        normaliser: None,
    };
    let zero = Array1::zeros(design.x.ncols());
    let started = Instant::now();
    std::hint::black_box(objective.hessian(zero.view()));
    std::hint::black_box(objective.gradient(zero.view()));
    started.elapsed()
}

/// How long objective perturbation's draw of b and solve may take:
/// [`SOLVE_ALLOWANCE`] iterations of [`iteration_time`].
pub fn solve_budget(design: &Design) -> Duration {
    pacing::BASE.saturating_add(iteration_time(design).saturating_mul(SOLVE_ALLOWANCE))
}

/// Unfolds weights fitted on scaled rows into the uploaded units: the
/// row scaling s and the centring go into the weights, then the features'
/// declared bounds (see [`dpgate_learn::unscale`]).
pub fn unfold(weights: &[f64], schema: &Schema, fit_intercept: bool) -> (Vec<f64>, f64) {
    let k = schema.k();
    let scale = row_scale(k, fit_intercept);
    let scaled: Vec<f64> = weights.iter().take(k).map(|w| w * scale).collect();
    // s·(wᵀ(x̃ − ½) + b) = (s·w)ᵀx̃ + s·b − ½·Σ(s·w).
    let centring: f64 = scaled.iter().sum::<f64>() / 2.0;
    let intercept = if fit_intercept {
        weights.get(k).copied().unwrap_or(0.0) * scale - centring
    } else {
        -centring
    };
    let (min, max) = schema.feature_bounds();
    dpgate_learn::unscale(&scaled, intercept, &min, &max)
}

/// The wire result of a model release.
pub fn result(
    weights: &[f64],
    schema: &Schema,
    fit_intercept: bool,
    lambda: f64,
    mechanism: &Mechanism,
    objective: Option<&ObjectivePerturbation>,
) -> api::ModelResult {
    let (weights, intercept) = unfold(weights, schema, fit_intercept);
    api::ModelResult {
        weights,
        intercept,
        lambda,
        fit_intercept,
        noise_mechanism: mechanism.name().to_owned(),
        noise_scale: mechanism.noise_scale(),
        objective: objective.map(|params| api::ObjectiveDetails {
            epsilon_prime: params.epsilon_prime,
            extra_regulariser: params.extra_regulariser,
            b_scale: params.b_scale,
            epsilon_output: params.epsilon_output.value(),
            normaliser: None,
        }),
        selection: None,
        noisy_rows: None,
    }
}

/// Reads the training set from the snapshot (after the debit) and fits it
/// with `fit` on a blocking thread.
pub async fn fit_on<T: Send + 'static>(
    snapshot: &Snapshot,
    fit_intercept: bool,
    fit: impl FnOnce(&Design) -> Result<T, ModelError> + Send + 'static,
) -> Result<T, Failure> {
    let design = design(snapshot, fit_intercept).await?;
    let span = tracing::Span::current();
    Ok(tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        fit(&design)
    })
    .await??)
}

/// The training set of a model, read from the snapshot (after the debit).
pub async fn design(snapshot: &Snapshot, fit_intercept: bool) -> Result<Design, Failure> {
    let dataset = snapshot.dataset();
    let builder = DesignBuilder::new(dataset.schema.k(), dataset.n_rows, fit_intercept);
    snapshot
        .scan(builder)
        .await?
        .build()
        .map_err(Failure::Corrupt)
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
