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
//! matrix, plus l2), and decays as lr₀/(1 + decay·epoch). Training runs
//! for a number of epochs that makes [`DEFAULT_STEPS`] minibatch steps
//! unless told otherwise, and stops early once an epoch moves θ by less
//! than `tolerance` (relative to max(1, ‖θ‖)).
//!
//! How it runs fast: the rows are copied once into f32 (`Rows`: half the
//! memory traffic, every θ-dependent sum still in f64); each minibatch is
//! cut into chunks of `CHUNK_ROWS` rows whose sums are computed on the
//! current rayon pool and added in chunk order, so that θ is bitwise the
//! same on any number of threads; and the next epoch's shuffle runs
//! beside the current epoch.

use ndarray::ArrayView2;
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use rand::seq::SliceRandom;
use rayon::prelude::*;

/// Minibatch steps that the default number of epochs adds up to. SGD's
/// progress is counted in steps, not passes: with a fixed 50 epochs,
/// N = 10,000 rows got 500 steps and stopped far from the optimum (true
/// log loss 0.390 against 0.346 at the optimum of the same release),
/// while N = 1,000,000 got 48,850 steps and spent 1.7 s for a loss
/// 10⁻⁵ lower than 10 epochs reach. 10,000 steps: 0.359 at N = 10⁴,
/// 0.34091 at N = 10⁵ (50 epochs: 0.34135), and within 2·10⁻⁵ of 200
/// epochs at N = 10⁶ (`k = 32`, 20% positives, σ at ε ≈ 1).
pub const DEFAULT_STEPS: usize = 10_000;

/// Rows used to estimate the curvature bound for the default step size.
const CURVATURE_SAMPLE: usize = 100_000;

/// Rows in one unit of parallel work. Each chunk's sums are computed in
/// row order and the chunks' sums are added in chunk order, and chunk
/// boundaries depend only on this constant, so θ comes out bitwise the
/// same on any number of threads. 256 rows split a default minibatch of
/// 1024 into four pieces (enough to balance two or four cores) while the
/// partial sums stay a small fraction of the work.
const CHUNK_ROWS: usize = 256;

/// Independent f64 sums in a row's dot product, and columns per block of a
/// chunk's gradient: the compiler may not reorder one f64 sum, but it
/// keeps eight separate ones in vector registers, so the multiply–adds of
/// consecutive columns overlap.
const LANES: usize = 8;

/// How the trainer runs (in JSON, any field left out keeps its default).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainerConfig {
    /// Most passes over the rows; `None`: as many as make
    /// [`DEFAULT_STEPS`] minibatch steps.
    pub epochs: Option<usize>,
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

impl TrainerConfig {
    /// The most epochs training `rows` rows runs.
    pub fn planned_epochs(&self, rows: usize) -> usize {
        self.epochs.unwrap_or_else(|| {
            let steps_per_epoch = rows.div_ceil(self.batch_size.max(1)).max(1);
            DEFAULT_STEPS.div_ceil(steps_per_epoch)
        })
    }
}

impl Default for TrainerConfig {
    fn default() -> Self {
        TrainerConfig {
            epochs: None,
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
    #[error("the features must be finite numbers (row {row}, column {column})")]
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
    if config.epochs == Some(0) || config.batch_size == 0 {
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
    Ok(())
}

/// 1/L with L = ¼·λ_max((1/n)·Σ x̃x̃ᵀ) + l2 over (up to) the first
/// [`CURVATURE_SAMPLE`] rows: the logistic loss's Hessian is at most ¼ of
/// that second-moment matrix. λ_max by power iteration, which approaches
/// it from below, so the result is inflated by 10%.
fn default_learning_rate(rows: &Rows, intercept: bool, l2: f64) -> f64 {
    let sample = rows.len.min(CURVATURE_SAMPLE);
    let dims = rows.width + usize::from(intercept);
    let partials: Vec<Vec<f64>> = (0..sample.div_ceil(CHUNK_ROWS))
        .into_par_iter()
        .map(|chunk| {
            let first = chunk * CHUNK_ROWS;
            second_moments(rows, first..sample.min(first + CHUNK_ROWS), dims)
        })
        .collect();
    let mut gram = vec![0.0; dims * dims];
    for partial in &partials {
        for (sum, &part) in gram.iter_mut().zip(partial) {
            *sum += part;
        }
    }
    for i in 0..dims {
        for j in i..dims {
            gram[j * dims + i] = gram[i * dims + j];
        }
    }
    let gram = ndarray::Array2::from_shape_vec((dims, dims), gram)
        .expect("BUG: the second moments are dims × dims")
        / sample as f64;
    let mut v = ndarray::Array1::<f64>::ones(dims);
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

/// The upper triangle of Σ x̃x̃ᵀ over `range` (row-major, dims × dims),
/// with x̃'s last coordinate 1 when dims exceeds the rows' width.
fn second_moments(rows: &Rows, range: std::ops::Range<usize>, dims: usize) -> Vec<f64> {
    let mut gram = vec![0.0; dims * dims];
    let mut x = vec![1.0; dims];
    for index in range {
        for (x, &value) in x.iter_mut().zip(rows.row(index)) {
            *x = f64::from(value);
        }
        for (i, &xi) in x.iter().enumerate() {
            for (sum, &xj) in gram[i * dims + i..(i + 1) * dims].iter_mut().zip(&x[i..]) {
                *sum += xi * xj;
            }
        }
    }
    gram
}

/// The feature matrix as the gradient loop reads it: row-major f32 without
/// the intercept's column. A shuffled minibatch fetches every row from
/// memory anew, so halving the bytes per row (and starting rows on a cache
/// line) is most of the saving.
///
/// Storing a feature in f32 rounds it by at most 2⁻²⁴ of its size (2⁻²⁵
/// for one in [0, 1]): the trainer descends exactly on the rounded rows, whose
/// optimum and loss differ from the f64 rows' by about that much (the
/// full-batch test's mean log loss moves by 1.2·10⁻¹⁰) — far below any
/// release's noise. Everything that depends on θ is computed in f64: the
/// product of an f32 feature and an f64 weight, summed in f64, is as
/// smooth in θ as before. f32 arithmetic there would not be: a gradient
/// good to only about 10⁻⁷ relative keeps θ moving by more than a
/// tolerance of 10⁻¹², and full-batch descent circles instead of stopping
/// (with f32 dot products the full-batch test runs all its 20,000 epochs).
struct Rows {
    /// Row i is `values[start + i·width..][..width]`.
    values: Vec<f32>,
    start: usize,
    width: usize,
    len: usize,
}

/// f32 values in a cache line: rows start on a line boundary, so a row of
/// 32 features takes two lines to fetch rather than three.
const LINE: usize = 16;

impl Rows {
    /// Copies `x`, refusing the first feature (in row-major order) that is
    /// not a finite number.
    fn new(x: ArrayView2<'_, f64>) -> Result<Self, TrainError> {
        let (len, width) = x.dim();
        let x = x.as_standard_layout();
        let input = x
            .as_slice()
            .expect("BUG: an array in standard layout is one slice");
        let mut values = vec![0.0; input.len() + LINE];
        let start = values
            .as_ptr()
            .align_offset(LINE * size_of::<f32>())
            .min(LINE);
        let piece = CHUNK_ROWS * width.max(1);
        let checked: Vec<Result<(), TrainError>> = values[start..][..input.len()]
            .par_chunks_mut(piece)
            .zip(input.par_chunks(piece))
            .enumerate()
            .map(|(chunk, (out, input))| {
                let inside = |value: &f64| value.is_finite();
                // A fold without early exit, so that the check vectorises.
                if !input.iter().fold(true, |all, value| all & inside(value)) {
                    let at = chunk * piece + input.iter().take_while(|v| inside(v)).count();
                    return Err(TrainError::Feature {
                        row: at / width,
                        column: at % width,
                    });
                }
                for (out, &value) in out.iter_mut().zip(input) {
                    *out = value as f32;
                }
                Ok(())
            })
            .collect();
        checked.into_iter().collect::<Result<(), _>>()?;
        Ok(Rows {
            values,
            start,
            width,
            len,
        })
    }

    fn row(&self, index: usize) -> &[f32] {
        &self.values[self.start + index * self.width..][..self.width]
    }
}

/// Trains on `x` (rows × k: the features scaled into [0, 1], or their
/// image v(x) under the release's feature map) against a release, calling
/// `on_epoch` after every epoch.
///
/// Minibatch gradients are spread over the current rayon thread pool; the
/// result does not depend on its size (see `CHUNK_ROWS`).
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
    let rows = Rows::new(x)?;
    let intercept = noisy.intercept.is_some();
    let target: Vec<f64> = noisy.dot.iter().chain(&noisy.intercept).copied().collect();
    let (learning_rate, mut descent) = rayon::join(
        || {
            config
                .learning_rate
                .unwrap_or_else(|| default_learning_rate(&rows, intercept, config.l2))
        },
        || Descent::new(&rows, target.len(), config),
    );
    let planned = config.planned_epochs(rows.len);
    let mut epochs = Vec::new();
    let mut converged = false;
    for epoch in 1..=planned {
        let rate = learning_rate / (1.0 + config.decay * (epoch - 1) as f64);
        let (change, softplus) = descent.epoch(rate, &target, config.l2, epoch == planned);
        let report = EpochReport {
            epoch,
            learning_rate: rate,
            change,
            loss: softplus / rows.len as f64 - dot(&descent.theta, &target),
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
    let mut weights = descent.theta;
    let intercept = noisy.intercept.map(|_| weights.pop().unwrap_or_default());
    Ok(Trained {
        weights,
        intercept,
        epochs,
        converged,
        learning_rate,
    })
}

/// The state of the descent between minibatches.
struct Descent<'a> {
    rows: &'a Rows,
    /// θ = (w, b), or just w without an intercept.
    theta: Vec<f64>,
    /// This epoch's order of the rows, and the next epoch's.
    order: Vec<usize>,
    next_order: Vec<usize>,
    batch: usize,
    rng: ChaCha8Rng,
    /// One [`chunk_sums`] slot of θ's length + 1 per chunk of a minibatch;
    /// the later slots are added into the first, in order.
    partials: Vec<f64>,
}

impl<'a> Descent<'a> {
    fn new(rows: &'a Rows, dims: usize, config: &TrainerConfig) -> Self {
        let batch = config.batch_size.min(rows.len);
        let mut descent = Descent {
            rows,
            theta: vec![0.0; dims],
            order: (0..rows.len).collect(),
            next_order: Vec::new(),
            batch,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            partials: vec![0.0; batch.div_ceil(CHUNK_ROWS) * (dims + 1)],
        };
        if descent.shuffles() {
            descent.next_order = descent.order.clone();
            descent.order.shuffle(&mut descent.rng);
        }
        descent
    }

    /// Full-batch descent keeps the rows in order.
    fn shuffles(&self) -> bool {
        self.batch < self.rows.len
    }

    /// One pass over the rows at step size `rate`: θ's relative change, and
    /// Σ softplus(θᵀx̃) over the minibatches. Unless this is the `last`
    /// epoch, the next epoch's shuffle runs alongside: it is the one step
    /// that cannot be split, and it does not depend on θ.
    fn epoch(&mut self, rate: f64, target: &[f64], l2: f64, last: bool) -> (f64, f64) {
        let start = self.theta.clone();
        let shuffle_next = self.shuffles() && !last;
        let (order, next_order, rng) = (&self.order, &mut self.next_order, &mut self.rng);
        let (rows, theta, partials) = (self.rows, &mut self.theta, &mut self.partials);
        let ((), softplus) = rayon::join(
            || {
                if shuffle_next {
                    next_order.copy_from_slice(order);
                    next_order.shuffle(rng);
                }
            },
            || {
                let mut softplus = 0.0;
                for indices in order.chunks(self.batch) {
                    softplus += minibatch_step(rows, indices, theta, partials, rate, target, l2);
                }
                softplus
            },
        );
        if shuffle_next {
            std::mem::swap(&mut self.order, &mut self.next_order);
        }
        let moved: f64 = self
            .theta
            .iter()
            .zip(&start)
            .map(|(now, then)| (now - then).powi(2))
            .sum();
        (moved.sqrt() / dot(&start, &start).sqrt().max(1.0), softplus)
    }
}

/// θ ← θ − rate·((1/m)·Σ σ(θᵀx̃ⱼ)·x̃ⱼ − target + l2·θ) over the rows
/// `indices`; returns Σ softplus(θᵀx̃ⱼ) over them.
fn minibatch_step(
    rows: &Rows,
    indices: &[usize],
    theta: &mut [f64],
    partials: &mut [f64],
    rate: f64,
    target: &[f64],
    l2: f64,
) -> f64 {
    let dims = theta.len();
    let current: &[f64] = theta;
    partials
        .par_chunks_mut(dims + 1)
        .zip(indices.par_chunks(CHUNK_ROWS))
        .for_each(|(sums, chunk)| chunk_sums(rows, chunk, current, sums));
    let chunks = indices.len().div_ceil(CHUNK_ROWS);
    let (sums, later) = partials.split_at_mut(dims + 1);
    for slot in later.chunks_exact(dims + 1).take(chunks.saturating_sub(1)) {
        for (sum, &part) in sums.iter_mut().zip(slot) {
            *sum += part;
        }
    }
    let m = indices.len() as f64;
    for ((theta, &sum), &target) in theta.iter_mut().zip(&*sums).zip(target) {
        let step = sum / m - target + *theta * l2;
        *theta += -rate * step;
    }
    sums[dims]
}

/// Σ σ(θᵀx̃ⱼ)·x̃ⱼ over the rows `indices` (at most [`CHUNK_ROWS`]) into
/// `sums[..θ.len()]`, and Σ softplus(θᵀx̃ⱼ) into the last slot. Every sum
/// runs over the rows in the order of `indices`.
fn chunk_sums(rows: &Rows, indices: &[usize], theta: &[f64], sums: &mut [f64]) {
    let (weights, intercept) = theta.split_at(rows.width);
    let bias = intercept.first().copied().unwrap_or(0.0);
    // Each row is a cache miss; touching every row first lets the misses
    // overlap instead of each waiting behind the previous row's arithmetic.
    let mut touched = 0.0;
    for &index in indices {
        let row = rows.row(index);
        touched += row.iter().step_by(LINE).chain(row.last()).sum::<f32>();
    }
    std::hint::black_box(touched);
    let mut probabilities = [0.0; CHUNK_ROWS];
    let probabilities = &mut probabilities[..indices.len()];
    for (logit, &index) in probabilities.iter_mut().zip(indices) {
        *logit = mixed_dot(rows.row(index), weights) + bias;
    }
    // In a loop of their own, consecutive rows' exponentials overlap.
    let mut softplus = 0.0;
    for value in probabilities.iter_mut() {
        let (sigmoid, term) = sigmoid_softplus(*value);
        *value = sigmoid;
        softplus += term;
    }
    // LANES columns at a time, so that their sums stay in registers
    // across the rows instead of going through memory for every row.
    let (gradient, rest) = sums.split_at_mut(rows.width);
    let (blocks, tail) = gradient.as_chunks_mut::<LANES>();
    for (block, out) in blocks.iter_mut().enumerate() {
        let mut lanes = [0.0; LANES];
        for (&p, &index) in probabilities.iter().zip(indices) {
            let x = &rows.row(index).as_chunks::<LANES>().0[block];
            for (lane, &x) in lanes.iter_mut().zip(x) {
                *lane += p * f64::from(x);
            }
        }
        *out = lanes;
    }
    let first_tail_column = blocks.len() * LANES;
    for (column, out) in (first_tail_column..).zip(tail) {
        *out = probabilities
            .iter()
            .zip(indices)
            .map(|(&p, &index)| p * f64::from(rows.row(index)[column]))
            .sum();
    }
    let (softplus_slot, intercept_gradient) = rest
        .split_last_mut()
        .expect("BUG: sums has a softplus slot");
    *softplus_slot = softplus;
    if let Some(sum) = intercept_gradient.first_mut() {
        *sum = probabilities.iter().sum();
    }
}

/// σ(z) and log(1 + eᶻ) from one exponential: bitwise the values of
/// [`dpgate_learn::sigmoid`] and [`dpgate_learn::log1p_exp`] (the same
/// expressions, exact in both tails) for half the exponentials.
fn sigmoid_softplus(z: f64) -> (f64, f64) {
    let e = (-z.abs()).exp();
    let numerator = if z >= 0.0 { 1.0 } else { e };
    (numerator / (1.0 + e), z.max(0.0) + e.ln_1p())
}

/// xᵀw for f32 features and f64 weights, in f64: [`LANES`] independent
/// partial sums, which the compiler turns into vector multiply–adds.
fn mixed_dot(x: &[f32], w: &[f64]) -> f64 {
    let (x_blocks, x_tail) = x.as_chunks::<LANES>();
    let (w_blocks, w_tail) = w.as_chunks::<LANES>();
    let mut lanes = [0.0; LANES];
    for (x, w) in x_blocks.iter().zip(w_blocks) {
        for ((lane, &x), &w) in lanes.iter_mut().zip(x).zip(w) {
            *lane += f64::from(x) * w;
        }
    }
    let tail: f64 = x_tail
        .iter()
        .zip(w_tail)
        .map(|(&x, &w)| f64::from(x) * w)
        .sum();
    lanes.iter().sum::<f64>() + tail
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
#[path = "trainer_tests.rs"]
mod tests;
