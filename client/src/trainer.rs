//! The label-blind WALR trainer (seed 002, "WALR Trainer Implementation:
//! Hybrid Minibatch GD").
//!
//! The logistic loss's gradient with labels yᵢ ∈ {0, 1} splits into a
//! label-free part and the dot product the server releases:
//!
//! ```text
//! ∇L(θ) = (1/N)·Σ σ(θᵀx̃ᵢ)·x̃ᵢ − (1/N)·Σ yᵢ·x̃ᵢ,   x̃ᵢ = (xᵢ, 1)
//! ```
//!
//! The trainer takes the second term from a release (`noisy_dot`, and
//! `noisy_intercept` for the intercept's coordinate) and estimates the
//! first on a minibatch of m rows: the "hybrid" gradient
//! (1/m)·Σⱼ σ(θᵀx̃ⱼ)·x̃ⱼ − noisy_dot (+ l2·θ), and steps
//! θ ← θ − lr·gradient. It has no way to receive labels: its inputs are a
//! feature matrix and a release. Everything it computes from them is
//! post-processing, so the model is exactly as private as the release.
//!
//! Minibatches are a fresh shuffle of the rows each epoch (seeded, so runs
//! are reproducible). The step size starts at 1/L, where L bounds the
//! loss's curvature (¼ of the largest eigenvalue of the rows' second-moment
//! matrix, plus l2), and decays as lr₀/(1 + decay·epoch). Training stops
//! early once an epoch moves θ by less than `tolerance` (relative to
//! max(1, ‖θ‖)).

use dpgate_learn::{log1p_exp, sigmoid};
use ndarray::{Array1, ArrayView1, ArrayView2, Axis, s};
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use rand::seq::SliceRandom;

/// Rows used to estimate the curvature bound for the default step size.
const CURVATURE_SAMPLE: usize = 100_000;

/// How the trainer runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerConfig {
    /// Most passes over the rows.
    pub epochs: usize,
    /// Rows per minibatch (m); the whole set when it is larger.
    pub batch_size: usize,
    /// The initial step size; `None`: 1/L from the data (see the module
    /// docs).
    pub learning_rate: Option<f64>,
    /// lr at epoch e is lr₀ / (1 + decay·e); 0 keeps it constant.
    pub decay: f64,
    /// The L2 term (l2/2)·‖θ‖², on every coordinate including the
    /// intercept (as the server's models do).
    pub l2: f64,
    /// Stop once an epoch moves θ by less than this, relative to
    /// max(1, ‖θ‖).
    pub tolerance: f64,
    /// Seeds the shuffles.
    pub seed: u64,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        TrainerConfig {
            epochs: 50,
            batch_size: 1024,
            learning_rate: None,
            decay: 0.1,
            l2: 0.0,
            tolerance: 1e-6,
            seed: 0,
        }
    }
}

/// What the server released: (1/N)·Σ yᵢ·xᵢ (+ noise) and, for a model with
/// an intercept, (1/N)·Σ yᵢ (+ noise).
#[derive(Debug, Clone, PartialEq)]
pub struct NoisyDot {
    pub dot: Vec<f64>,
    pub intercept: Option<f64>,
}

/// One epoch's progress.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochReport {
    /// From 1.
    pub epoch: usize,
    pub learning_rate: f64,
    /// ‖Δθ‖ / max(1, ‖θ‖) over the epoch.
    pub change: f64,
    /// A label-blind estimate of the mean log loss during the epoch:
    /// mean softplus(θᵀx̃) over its minibatches − θᵀ·noisy_dot. (Exact
    /// with the exact dot product, up to θ moving within the epoch.)
    pub loss: f64,
}

/// A trained model in the space it was trained in.
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    /// One weight per column of the feature matrix.
    pub weights: Vec<f64>,
    /// `None` when the release had no intercept term.
    pub intercept: Option<f64>,
    pub epochs: Vec<EpochReport>,
    /// Whether training stopped on `tolerance` rather than on `epochs`.
    pub converged: bool,
    pub learning_rate: f64,
}

/// Why training could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrainError {
    #[error("no rows to train on")]
    NoRows,
    #[error("the release has {release} features but the rows have {rows}")]
    Dimension { release: usize, rows: usize },
    #[error("{0} must be a finite positive number")]
    Setting(&'static str),
    #[error("the features must be finite numbers in [0, 1] (row {row}, column {column})")]
    Feature { row: usize, column: usize },
    #[error("training diverged at epoch {0}: lower the learning rate")]
    Diverged(usize),
}

fn check(
    x: ArrayView2<'_, f64>,
    noisy: &NoisyDot,
    config: &TrainerConfig,
) -> Result<(), TrainError> {
    let (rows, k) = x.dim();
    if rows == 0 {
        return Err(TrainError::NoRows);
    }
    if noisy.dot.len() != k {
        return Err(TrainError::Dimension {
            release: noisy.dot.len(),
            rows: k,
        });
    }
    let positive = |value: f64| value.is_finite() && value > 0.0;
    if config.epochs == 0 || config.batch_size == 0 {
        return Err(TrainError::Setting("epochs and batch_size"));
    }
    if config.learning_rate.is_some_and(|lr| !positive(lr)) {
        return Err(TrainError::Setting("learning_rate"));
    }
    if !(config.decay.is_finite() && config.decay >= 0.0) {
        return Err(TrainError::Setting("decay"));
    }
    if !(config.l2.is_finite() && config.l2 >= 0.0) {
        return Err(TrainError::Setting("l2"));
    }
    if !positive(config.tolerance) {
        return Err(TrainError::Setting("tolerance"));
    }
    if !noisy
        .dot
        .iter()
        .chain(&noisy.intercept)
        .all(|v| v.is_finite())
    {
        return Err(TrainError::Setting("the released vector"));
    }
    for ((row, column), value) in x.indexed_iter() {
        if !(0.0..=1.0).contains(value) {
            return Err(TrainError::Feature { row, column });
        }
    }
    Ok(())
}

/// The augmented rows x̃ = (x, 1) when fitting an intercept.
fn augmented(x: ArrayView2<'_, f64>, intercept: bool) -> ndarray::Array2<f64> {
    if !intercept {
        return x.to_owned();
    }
    let (rows, k) = x.dim();
    let mut out = ndarray::Array2::<f64>::ones((rows, k + 1));
    out.slice_mut(s![.., ..k]).assign(&x);
    out
}

/// 1/L with L = ¼·λ_max((1/n)·Σ x̃x̃ᵀ) + l2 over (up to) the first
/// [`CURVATURE_SAMPLE`] rows: the logistic loss's Hessian is at most ¼ of
/// that second-moment matrix. λ_max by power iteration, which approaches
/// it from below, so the result is inflated by 10%.
fn default_learning_rate(x: ArrayView2<'_, f64>, l2: f64) -> f64 {
    let sample = x.slice(s![..x.nrows().min(CURVATURE_SAMPLE), ..]);
    let gram = sample.t().dot(&sample) / sample.nrows() as f64;
    let mut v = Array1::<f64>::ones(gram.nrows());
    let mut largest = 0.0;
    for _ in 0..100 {
        let next = gram.dot(&v);
        let norm = next.dot(&next).sqrt();
        if norm == 0.0 {
            break;
        }
        largest = norm / v.dot(&v).sqrt();
        v = next / norm;
    }
    1.0 / (0.25 * largest * 1.1 + l2).max(f64::MIN_POSITIVE)
}

/// Trains on `x` (rows × k, scaled into [0, 1]) against a release, calling
/// `on_epoch` after every epoch.
///
/// # Errors
/// Bad input or settings, or divergence (θ no longer finite).
pub fn train(
    x: ArrayView2<'_, f64>,
    noisy: &NoisyDot,
    config: &TrainerConfig,
    mut on_epoch: impl FnMut(&EpochReport),
) -> Result<Trained, TrainError> {
    check(x, noisy, config)?;
    let x = augmented(x, noisy.intercept.is_some());
    let target: Array1<f64> = noisy.dot.iter().chain(&noisy.intercept).copied().collect();
    let learning_rate = config
        .learning_rate
        .unwrap_or_else(|| default_learning_rate(x.view(), config.l2));
    let rows = x.nrows();
    let batch = config.batch_size.min(rows);
    let mut theta = Array1::<f64>::zeros(x.ncols());
    let mut order: Vec<usize> = (0..rows).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut epochs = Vec::new();
    let mut converged = false;
    for epoch in 1..=config.epochs {
        let rate = learning_rate / (1.0 + config.decay * (epoch - 1) as f64);
        let start = theta.clone();
        if batch < rows {
            order.shuffle(&mut rng);
        }
        let mut softplus = 0.0;
        for indices in order.chunks(batch) {
            let (gradient, batch_softplus) = if batch == rows {
                hybrid_gradient(x.view(), theta.view())
            } else {
                hybrid_gradient(x.select(Axis(0), indices).view(), theta.view())
            };
            softplus += batch_softplus;
            let step = gradient - &target + &(&theta * config.l2);
            theta.scaled_add(-rate, &step);
        }
        let moved = &theta - &start;
        let change = moved.dot(&moved).sqrt() / start.dot(&start).sqrt().max(1.0);
        let report = EpochReport {
            epoch,
            learning_rate: rate,
            change,
            loss: softplus / rows as f64 - theta.dot(&target),
        };
        if !(change.is_finite() && report.loss.is_finite()) {
            return Err(TrainError::Diverged(epoch));
        }
        on_epoch(&report);
        epochs.push(report);
        if change < config.tolerance {
            converged = true;
            break;
        }
    }
    let mut weights = theta.to_vec();
    let intercept = noisy.intercept.map(|_| weights.pop().unwrap_or_default());
    Ok(Trained {
        weights,
        intercept,
        epochs,
        converged,
        learning_rate,
    })
}

/// (1/m)·Σ σ(θᵀx̃ⱼ)·x̃ⱼ over the batch, and Σ softplus(θᵀx̃ⱼ).
fn hybrid_gradient(rows: ArrayView2<'_, f64>, theta: ArrayView1<'_, f64>) -> (Array1<f64>, f64) {
    let logits = rows.dot(&theta);
    let softplus = logits.iter().map(|&z| log1p_exp(z)).sum();
    let probabilities = logits.mapv(sigmoid);
    let gradient = rows.t().dot(&probabilities) / rows.nrows() as f64;
    (gradient, softplus)
}

#[cfg(test)]
#[path = "trainer_tests.rs"]
mod tests;
