//! Per-example clipped gradients of a GLM loss over a snapshot's rows:
//! the query every iterative learner releases, step by step.
//!
//! Row i is uᵢ = (1, φ(xᵢ)) with the intercept (first) or φ(xᵢ) without,
//! xᵢ its stored features in [0, 1]ᵏ, φ a public per-row [`FeatureMap`].
//! Its gradient at θ is rᵢ·uᵢ, scaled down to L2 norm at most C, with the
//! residual rᵢ a [`Residual`] of θᵀuᵢ: (σ(θᵀuᵢ) − yᵢ) for the logistic
//! loss on the label ([`LogisticLabels`], what DP-GD and DP-SGD train).
//! The residual is a type parameter, so each learner's loop is compiled
//! for its own loss. The loop over the rows does not branch on a row's
//! values, and the chunks' partial sums are added in row order, so the sum
//! is the same bits on any number of cores. Nor does a row's time depend
//! on θ: the logistic is [`crate::dp::constant_time`]'s, and θ's tiny
//! weights are flushed, so a caller's θ cannot make some rows slower than
//! others and time how many there are.

use crate::dp::constant_time::{flush_tiny, logistic};
use crate::snapshots::{CHUNK_ROWS, Columns};

/// A public map of one row's stored features into the space a model is
/// trained in.
pub trait FeatureMap: Sync {
    /// The dimension of φ(x).
    fn dims(&self) -> usize;

    /// Writes φ(`features`) into `out` (of length [`Self::dims`]).
    fn apply(&self, features: &[f32], out: &mut [f64]);
}

/// φ(x) = x.
pub struct Identity(pub usize);

impl FeatureMap for Identity {
    fn dims(&self) -> usize {
        self.0
    }

    fn apply(&self, features: &[f32], out: &mut [f64]) {
        for (mapped, &value) in out.iter_mut().zip(features) {
            *mapped = f64::from(value);
        }
    }
}

/// dℓ/d(θᵀu) of one row's loss: its gradient is this times u.
pub trait Residual: Sync {
    fn residual(&self, prediction: f64, row: usize) -> f64;
}

/// The logistic loss on the rows' 0/1 labels: σ(θᵀu) − y.
pub struct LogisticLabels<'a>(pub &'a [u8]);

impl Residual for LogisticLabels<'_> {
    fn residual(&self, prediction: f64, row: usize) -> f64 {
        logistic(prediction) - f64::from(self.0[row])
    }
}

/// The clipped gradients of `rows` at `theta`, summed.
pub fn clipped_sum(
    columns: &Columns,
    rows: impl IntoIterator<Item = usize>,
    map: &impl FeatureMap,
    loss: &impl Residual,
    theta: &[f64],
    clip: f64,
    intercept: bool,
) -> Vec<f64> {
    let k = columns.shape().features;
    let offset = usize::from(intercept);
    let theta: Vec<f64> = theta.iter().copied().map(flush_tiny).collect();
    let (bias, one) = if intercept {
        (theta[0], 1.0)
    } else {
        (0.0, 0.0)
    };
    let weights = &theta[offset..];
    let matrix = columns.feature_matrix();
    let mut sum = vec![0.0; theta.len()];
    let mut mapped = vec![0.0; map.dims()];
    for row in rows {
        map.apply(&matrix[row * k..(row + 1) * k], &mut mapped);
        let (mut prediction, mut norm_squared) = (bias, one);
        for (weight, &value) in weights.iter().zip(&mapped) {
            prediction += weight * value;
            norm_squared += value * value;
        }
        let residual = loss.residual(prediction, row);
        // C/0 = ∞ when the gradient is zero: the factor is then 1.
        let factor = residual * (clip / (residual.abs() * norm_squared.sqrt())).min(1.0);
        if intercept {
            sum[0] += factor;
        }
        for (total, &value) in sum[offset..].iter_mut().zip(&mapped) {
            *total += factor * value;
        }
    }
    sum
}

/// The mean clipped gradient of `loss` over every row of `columns` at
/// `theta`.
pub fn clipped_mean(
    columns: &Columns,
    loss: &impl Residual,
    theta: &[f64],
    clip: f64,
    intercept: bool,
) -> Vec<f64> {
    let map = Identity(columns.shape().features);
    let parts =
        columns.chunks(|rows| clipped_sum(columns, rows, &map, loss, theta, clip, intercept));
    let mut mean = vec![0.0; theta.len()];
    for part in parts {
        for (total, value) in mean.iter_mut().zip(part) {
            *total += value;
        }
    }
    let n = columns.len() as f64;
    for total in &mut mean {
        *total /= n;
    }
    mean
}

/// The largest relative error floating point leaves in one coordinate of a
/// computed sum, as a multiple of Σ|terms| (Higham's γ_m, with m ≤ `run`
/// terms added one after another, then `sums` partial sums and a division;
/// m·ε_mach ≥ γ_m while m·ε_mach ≤ 1), plus the `dims` + 3 roundings by
/// which a computed clipped term may exceed C (its norm, clip factor and
/// product; each term is a function of its own row, so how its features
/// were computed does not matter).
pub fn rounding_bound(run: u64, sums: u64, dims: usize) -> f64 {
    (run + sums + dims as u64 + 4) as f64 * f64::EPSILON
}

/// L2 padding that makes a sensitivity proven for exact sums hold for the
/// computed ones: twice [`rounding_bound`] (the two neighbours' errors)
/// times √dims times `magnitude`, a bound on Σ|terms| of one coordinate of
/// the released sum (or mean: Σ|terms|/N).
pub fn rounding_padding(run: u64, sums: u64, dims: usize, magnitude: f64) -> f64 {
    2.0 * rounding_bound(run, sums, dims) * (dims as f64).sqrt() * magnitude
}

/// [`rounding_padding`] of a [`clipped_mean`] over `n` rows (chunks of
/// [`CHUNK_ROWS`] added in row order), whose rows' clipped gradients have
/// coordinates at most `magnitude`: at N = 10⁶, d = 33 and C = 1 it adds
/// 2.1·10⁻⁵ of the sensitivity under unit `row`.
pub fn mean_padding(n: u64, dims: usize, magnitude: f64) -> f64 {
    rounding_padding(
        n.min(CHUNK_ROWS as u64),
        n.div_ceil(CHUNK_ROWS as u64),
        dims,
        magnitude,
    )
}
