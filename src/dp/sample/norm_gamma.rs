//! The norm-Gamma vector noise of the L2 pure-ε mechanism, exactly, on the
//! integer lattice.
//!
//! The continuous noise Z ∈ ℝᵏ has density ∝ exp(−‖z‖₂/Θ): its norm is
//! Gamma(k, Θ) and its direction uniform on the sphere (Song, Chaudhuri &
//! Sarwate 2013; the seed thesis's Algorithm 5 says "uniform vector in the
//! unit ball", but for this density the direction must be uniform on the
//! unit *sphere*). Here Z = Θ·(E₁ + … + Eₖ)·G/‖G‖ with exact
//! exponentials Eᵢ and exact normals Gⱼ ([`super::lazy`]), and the release
//! is W = round(Z), each coordinate to the nearest integer. The roundings
//! are decided by outward-rounded interval arithmetic on the drawn digits;
//! where an interval still straddles a half-integer, more digits are drawn
//! (which happens with probability ~2^−40 per coordinate at the start).
//!
//! Why the rounded vector keeps pure ε-DP: a release is q + W with q an
//! integer vector, so neighbouring inputs differ by an integer shift d with
//! ‖d‖₂ ≤ Δ/grid, and
//! P[W = w] / P[W = w − d] = ∫_{cell} p(w + t) dt / ∫_{cell} p(w − d + t) dt
//! ≤ sup_t p(w + t)/p(w − d + t) ≤ exp(‖d‖₂/Θ), by the triangle inequality.
//!
//! # Citations
//! - S. Song, K. Chaudhuri, A. Sarwate. Stochastic Gradient Descent with
//!   Differentially Private Updates. GlobalSIP 2013.
//! - K. Chaudhuri, C. Monteleoni, A. Sarwate. Differentially Private
//!   Empirical Risk Minimization. JMLR 2011, Algorithm 1.

use num_bigint::BigInt;
use num_integer::Integer;
use num_traits::{Signed, ToPrimitive, Zero};
use rand::Rng;

use super::lazy::{LazyReal, exact_exponential, exact_normal};

/// Digits (of 32 bits) drawn for the first attempt at deciding the roundings.
const INITIAL_WORDS: usize = 2;

/// A closed interval [lo, hi] of integers, scaled by some power of two.
type Interval = (BigInt, BigInt);

/// The square of an interval.
fn square((lo, hi): &Interval) -> Interval {
    if !lo.is_negative() {
        (lo * lo, hi * hi)
    } else if !hi.is_positive() {
        (hi * hi, lo * lo)
    } else {
        (BigInt::zero(), (lo * lo).max(hi * hi))
    }
}

/// The product of two intervals.
fn product((a, b): &Interval, (c, d): &Interval) -> Interval {
    let corners = [a * c, a * d, b * c, b * d];
    let low = corners.iter().min().cloned().unwrap_or_default();
    let high = corners.iter().max().cloned().unwrap_or_default();
    (low, high)
}

/// `numerator / divisor`, the divisor a strictly positive interval, with the
/// ends rounded outwards.
fn quotient((n_lo, n_hi): &Interval, (d_lo, d_hi): &Interval) -> Interval {
    let floor = |n: &BigInt, d: &BigInt| n.div_floor(d);
    let ceil = |n: &BigInt, d: &BigInt| -((-n).div_floor(d));
    let low = floor(n_lo, d_lo).min(floor(n_lo, d_hi));
    let high = ceil(n_hi, d_lo).max(ceil(n_hi, d_hi));
    (low, high)
}

/// Rounds every coordinate of Θ·S·G/‖G‖ from intervals at `words` digits,
/// or `None` if some rounding is not decided yet.
fn try_round<R: Rng + ?Sized>(
    scale: u64,
    radius: &mut [LazyReal],
    direction: &mut [LazyReal],
    words: usize,
    rng: &mut R,
) -> Option<Vec<i128>> {
    let bits = 32 * words;
    let mut sum: Interval = (BigInt::zero(), BigInt::zero());
    for exponential in radius.iter_mut() {
        let (lo, hi) = exponential.bounds(words, rng);
        sum = (sum.0 + lo, sum.1 + hi);
    }
    let scaled_sum = (sum.0 * scale, sum.1 * scale);
    let coordinates: Vec<Interval> = direction
        .iter_mut()
        .map(|normal| normal.bounds(words, rng))
        .collect();
    let (sq_lo, sq_hi) = coordinates
        .iter()
        .map(square)
        .fold((BigInt::zero(), BigInt::zero()), |(lo, hi), (a, b)| {
            (lo + a, hi + b)
        });
    // ‖G‖ at the same scale 2^bits: the square root of the 2^(2·bits) sum.
    let norm_lo = sq_lo.sqrt();
    let norm_hi = {
        let root = sq_hi.sqrt();
        if &root * &root == sq_hi {
            root
        } else {
            root + 1
        }
    };
    if norm_lo.is_zero() {
        return None;
    }
    let norm = (norm_lo, norm_hi);
    let unit = BigInt::from(1) << bits;
    let half = BigInt::from(1) << (bits - 1);
    coordinates
        .iter()
        .map(|coordinate| {
            // Θ·S·Gⱼ at scale 2^(2·bits), divided by ‖G‖ at 2^bits.
            let (x_lo, x_hi) = quotient(&product(&scaled_sum, coordinate), &norm);
            let low = (x_lo + &half).div_floor(&unit);
            let high = (x_hi + &half).div_floor(&unit);
            // |W| < 2^100 unless the Gamma draw is absurd; saturate rather
            // than report such a coordinate as undecided forever.
            (low == high).then(|| {
                low.to_i128().unwrap_or(if low.is_negative() {
                    i128::MIN
                } else {
                    i128::MAX
                })
            })
        })
        .collect()
}

/// One exact draw of the lattice norm-Gamma noise W ∈ ℤᵏ with scale Θ =
/// `scale` (in lattice units): W = round(Z), Z ∝ exp(−‖z‖₂/Θ).
pub fn norm_gamma_lattice<R: Rng + ?Sized>(dims: usize, scale: u64, rng: &mut R) -> Vec<i128> {
    let mut radius: Vec<LazyReal> = (0..dims).map(|_| exact_exponential(rng)).collect();
    let mut direction: Vec<LazyReal> = (0..dims).map(|_| exact_normal(rng)).collect();
    let mut words = INITIAL_WORDS;
    loop {
        if let Some(rounded) = try_round(scale, &mut radius, &mut direction, words, rng) {
            return rounded;
        }
        words += 1;
    }
}

/// One draw of the continuous norm-Gamma vector Z ∈ ℝᵏ, density ∝
/// exp(−‖z‖₂/`scale`), from the same exact exponentials and normals,
/// each rounded to double precision only at the end. For randomness that
/// a private computation consumes rather than publishes: objective
/// perturbation needs a continuous density (its proof maps the noise
/// one-to-one onto the output), which a lattice draw does not have.
pub fn norm_gamma_continuous<R: Rng + ?Sized>(dims: usize, scale: f64, rng: &mut R) -> Vec<f64> {
    let radius: f64 = (0..dims)
        .map(|_| exact_exponential(rng).approximate(rng))
        .sum::<f64>()
        * scale;
    let direction: Vec<f64> = (0..dims)
        .map(|_| exact_normal(rng).approximate(rng))
        .collect();
    let length = direction.iter().map(|g| g * g).sum::<f64>().sqrt();
    direction.iter().map(|g| radius * g / length).collect()
}

#[cfg(test)]
#[path = "norm_gamma_tests.rs"]
mod tests;
