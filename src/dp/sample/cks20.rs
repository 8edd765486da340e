//! Exact discrete Laplace and discrete Gaussian samplers (Canonne, Kamath &
//! Steinke 2020, Algorithms 1–3), in fixed-width integer arithmetic.
//!
//! The samplers use nothing but uniformly random integers and exact integer
//! comparisons, so the output distributions are exactly
//! P(y) ∝ e^{−|y|/t} and P(y) ∝ e^{−y²/2σ²} on ℤ: no floating point touches
//! a random draw. The control flow and the way random words are consumed
//! follow the reference implementation in `prio` (itself from OpenDP and the
//! authors' Python) step for step, so the tests check these samplers against
//! prio's, sample for sample, from a shared seed. The difference is speed:
//! `u128` arithmetic instead of heap-allocated big rationals, with a
//! big-integer path only for draws so far in the tail that they never occur
//! in practice (but would still be handled exactly).
//!
//! # Citations
//! - C. Canonne, G. Kamath, T. Steinke. The Discrete Gaussian for
//!   Differential Privacy. NeurIPS 2020, §5.

use num_bigint::BigUint;
use num_integer::Integer;
use num_traits::Zero;
use rand::Rng;

/// The largest σ [`discrete_gaussian`] accepts: 2σ²(σ+1)² must fit a `u128`.
pub const MAX_GAUSSIAN_SIGMA: u32 = (1 << 31) - 1;

/// A uniform integer in [0, `bound`), `bound ≥ 1`: draw as many 32-bit
/// little-endian words as `bound` has bits, clear the excess top bits, and
/// reject until below `bound` (num-bigint's method, as prio uses it).
/// Also the exponential selection's uniform proposals.
pub(crate) fn uniform_below<R: Rng + ?Sized>(bound: u128, rng: &mut R) -> u128 {
    let bits = 128 - bound.leading_zeros();
    let words = bits.div_ceil(32) as usize;
    let excess_bits = 32 * words as u32 - bits;
    let mut bytes = [0u8; 16];
    loop {
        rng.fill_bytes(&mut bytes[..4 * words]);
        let value = bytes[..4 * words]
            .chunks_exact(4)
            .enumerate()
            .map(|(index, chunk)| {
                let word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                let word = if index + 1 == words {
                    word >> excess_bits
                } else {
                    word
                };
                u128::from(word) << (32 * index)
            })
            .fold(0, |value, word| value | word);
        if value < bound {
            return value;
        }
    }
}

/// Bernoulli(p/q) for 0 ≤ p ≤ q, q ≥ 1: the fraction is reduced first and a
/// uniform s ∈ {1, …, q} is compared with p (CKS20, §5.1).
fn bernoulli<R: Rng + ?Sized>(p: u128, q: u128, rng: &mut R) -> bool {
    let common = p.gcd(&q);
    uniform_below(q / common, rng) < p / common
}

/// Bernoulli(exp(−p/q)) for 0 ≤ p ≤ q: CKS20 Algorithm 1, the γ ∈ [0, 1]
/// branch (count the Bernoulli(γ/k) successes; accept iff the count is even).
fn bernoulli_exp_fraction<R: Rng + ?Sized>(p: u128, q: u128, rng: &mut R) -> bool {
    let mut k: u128 = 1;
    loop {
        let success = match q.checked_mul(k) {
            Some(qk) => bernoulli(p, qk, rng),
            // Bernoulli(p/(qk)) is Bernoulli(1/k) AND an independent
            // Bernoulli(p/q); only reached once k exceeds 2^(128 − log q).
            None => bernoulli(1, k, rng) && bernoulli(p, q, rng),
        };
        if !success {
            return k % 2 == 1;
        }
        k += 1;
    }
}

/// Bernoulli(exp(−p/q)) for any p/q ≥ 0: CKS20 Algorithm 1 (⌊γ⌋ trials of
/// Bernoulli(e⁻¹), then the fractional part). Also the exponential
/// selection's acceptance test, and visible to the timing tests, which
/// replay [`discrete_gaussian`] proposal by proposal.
pub(crate) fn bernoulli_exp<R: Rng + ?Sized>(p: u128, q: u128, rng: &mut R) -> bool {
    for _ in 0..p / q {
        if !bernoulli_exp_fraction(1, 1, rng) {
            return false;
        }
    }
    bernoulli_exp_fraction(p % q, q, rng)
}

/// [`bernoulli_exp`] for a numerator beyond `u128`.
fn bernoulli_exp_big<R: Rng + ?Sized>(p: &BigUint, q: u128, rng: &mut R) -> bool {
    let (whole, fraction) = p.div_rem(&BigUint::from(q));
    let mut done = BigUint::zero();
    while done < whole {
        if !bernoulli_exp_fraction(1, 1, rng) {
            return false;
        }
        done += 1u8;
    }
    let fraction = u128::try_from(fraction).expect("p mod q is below q, which is a u128");
    bernoulli_exp_fraction(fraction, q, rng)
}

/// P(x) ∝ e^{−x/t} on ℕ, t ≥ 1: CKS20 Algorithm 2 without the sign (the
/// fraction u/t by rejection, the whole multiples of t by a geometric count).
fn geometric<R: Rng + ?Sized>(t: u128, rng: &mut R) -> u128 {
    let mut u = uniform_below(t, rng);
    while !bernoulli_exp_fraction(u, t, rng) {
        u = uniform_below(t, rng);
    }
    let mut v: u128 = 0;
    while bernoulli_exp_fraction(1, 1, rng) {
        v += 1;
    }
    // v counts Bernoulli(e⁻¹) successes in a row: it never nears 2^64.
    u.saturating_add(t.saturating_mul(v))
}

/// An exact draw from the discrete Laplace distribution
/// P(y) ∝ exp(−|y|/`scale`) on ℤ (CKS20 Algorithm 2). `scale = 0` is the
/// point mass at 0.
pub fn discrete_laplace<R: Rng + ?Sized>(scale: u64, rng: &mut R) -> i128 {
    if scale == 0 {
        return 0;
    }
    loop {
        let negative = bernoulli(1, 2, rng);
        let magnitude = geometric(u128::from(scale), rng);
        if negative && magnitude == 0 {
            continue;
        }
        let magnitude = i128::try_from(magnitude).unwrap_or(i128::MAX);
        return if negative { -magnitude } else { magnitude };
    }
}

/// An exact draw from the discrete Gaussian distribution
/// P(y) ∝ exp(−y²/2σ²) on ℤ (CKS20 Algorithm 3): discrete Laplace proposals
/// of scale t = σ + 1, each accepted with probability
/// exp(−(|y| − σ²/t)²/2σ²) = exp(−(|y|·t − σ²)²/(2σ²t²)).
///
/// # Panics
/// If `sigma > MAX_GAUSSIAN_SIGMA`; the mechanisms keep σ below 2^25.
pub fn discrete_gaussian<R: Rng + ?Sized>(sigma: u32, rng: &mut R) -> i128 {
    assert!(
        sigma <= MAX_GAUSSIAN_SIGMA,
        "discrete Gaussian σ must be at most 2^31 − 1"
    );
    if sigma == 0 {
        return 0;
    }
    let s = u128::from(sigma);
    let t = s + 1;
    let s_squared = s * s;
    let denominator = 2 * s_squared * t * t;
    loop {
        let y = discrete_laplace(u64::from(sigma) + 1, rng);
        let y_abs = y.unsigned_abs();
        let accept = match y_abs.checked_mul(t) {
            Some(yt) => {
                let n = yt.abs_diff(s_squared);
                match n.checked_mul(n) {
                    Some(n_squared) => bernoulli_exp(n_squared, denominator, rng),
                    None => bernoulli_exp_big(&(BigUint::from(n).pow(2)), denominator, rng),
                }
            }
            None => {
                let n = BigUint::from(y_abs) * t - s_squared;
                bernoulli_exp_big(&n.pow(2), denominator, rng)
            }
        };
        if accept {
            return y;
        }
    }
}

#[cfg(test)]
#[path = "cks20_tests.rs"]
mod tests;
