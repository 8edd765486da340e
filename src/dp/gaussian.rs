//! The Gaussian mechanism's privacy curve, and σ calibrated from it.
//!
//! A Gaussian mechanism with L2 sensitivity Δ and noise σ is characterised by
//! one number, μ = Δ/σ: it is (ε, δ(ε))-DP for every ε ≥ 0 with
//!
//! ```text
//! δ(ε) = Φ(μ/2 − ε/μ) − e^ε · Φ(−μ/2 − ε/μ)
//! ```
//!
//! and no smaller δ (Balle & Wang 2018, Theorem 8). Everything here solves
//! that equation one way or the other.
//!
//! # Citations
//! - B. Balle, Y.-X. Wang. Improving the Gaussian Mechanism for Differential
//!   Privacy: Analytical Calibration and Optimal Denoising. ICML 2018.
//! - C. Dwork, A. Roth. The Algorithmic Foundations of Differential Privacy,
//!   Theorem A.1 (the classic calibration).

use errorfunctions::RealErrorFunctions;

use super::DpError;

const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// erfc, from the Faddeeva-package port (std may grow its own `erfc`).
fn erfc(x: f64) -> f64 {
    RealErrorFunctions::erfc(x)
}

/// erfcx(x) = e^{x²}·erfc(x), finite where erfc underflows.
fn erfcx(x: f64) -> f64 {
    RealErrorFunctions::erfcx(x)
}

/// Relative width at which the bisections stop: far below the 10⁻⁹ the
/// ledger needs, and still a few ulps above the noise of [`gaussian_delta`].
const BISECTION_TOLERANCE: f64 = 1e-14;

/// `erfcx(y) − erfcx(y + h)` for `h ≥ 0`, accurate to a few ulps.
///
/// When `h` is small against `y` the two terms nearly cancel, so instead the
/// drop is integrated: −erfcx′(t) = 2/√π − 2t·erfcx(t) (Abramowitz & Stegun
/// 7.1.19 applied to e^{t²}·erfc t), by 5-point Gauss–Legendre quadrature,
/// which is exact to machine precision over such a short, smooth interval.
fn erfcx_drop(y: f64, h: f64) -> f64 {
    if h >= 0.1 * y.abs().max(1.0) {
        return erfcx(y) - erfcx(y + h);
    }
    const NODES: [f64; 5] = [
        0.0,
        -0.538_469_310_105_683_1,
        0.538_469_310_105_683_1,
        -0.906_179_845_938_664,
        0.906_179_845_938_664,
    ];
    const WEIGHTS: [f64; 5] = [
        0.568_888_888_888_888_9,
        0.478_628_670_499_366_5,
        0.478_628_670_499_366_5,
        0.236_926_885_056_189_1,
        0.236_926_885_056_189_1,
    ];
    let slope = |t: f64| std::f64::consts::FRAC_2_SQRT_PI - 2.0 * t * erfcx(t);
    let half = h / 2.0;
    let sum: f64 = NODES
        .iter()
        .zip(WEIGHTS)
        .map(|(node, weight)| weight * slope(y + half * (1.0 + node)))
        .sum();
    half * sum
}

/// δ(ε) of a Gaussian mechanism with sensitivity-to-noise ratio `mu` = Δ/σ.
///
/// Written with u = ε/μ − μ/2 and v = ε/μ + μ/2 as δ = Φ(−u) − e^ε·Φ(−v).
/// Because v² − u² = 2ε, e^ε·Φ(−v) = ½·e^{−u²/2}·erfcx(v/√2): the huge
/// factor e^ε (ε = 50 and beyond) cancels symbolically, and for u > 0
/// δ = ½·e^{−u²/2}·(erfcx(u/√2) − erfcx(v/√2)) with the difference taken
/// by `erfcx_drop`. For u ≤ 0, Φ(−u) ≥ ½ and δ is large, so the direct
/// difference is well conditioned.
pub fn gaussian_delta(mu: f64, epsilon: f64) -> f64 {
    let u = epsilon / mu - mu / 2.0;
    let v = epsilon / mu + mu / 2.0;
    let scale = 0.5 * (-u * u / 2.0).exp();
    let delta = if u > 0.0 {
        scale * erfcx_drop(u / SQRT_2, mu / SQRT_2)
    } else {
        0.5 * erfc(u / SQRT_2) - scale * erfcx(v / SQRT_2)
    };
    delta.clamp(0.0, 1.0)
}

fn check_epsilon(epsilon: f64) -> Result<(), DpError> {
    if epsilon.is_finite() && epsilon > 0.0 {
        Ok(())
    } else {
        Err(DpError::InvalidEpsilon {
            value: epsilon,
            max: f64::MAX,
        })
    }
}

fn check_delta(delta: f64) -> Result<(), DpError> {
    if delta.is_finite() && delta > 0.0 && delta < 1.0 {
        Ok(())
    } else {
        Err(DpError::InvalidDelta {
            value: delta,
            range: "(0, 1)",
        })
    }
}

pub(crate) fn check_sensitivity(sensitivity: f64) -> Result<(), DpError> {
    if sensitivity.is_finite() && sensitivity > 0.0 {
        Ok(())
    } else {
        Err(DpError::InvalidSensitivity(sensitivity))
    }
}

/// The smallest σ for which Gaussian noise on a query of L2 sensitivity
/// `sensitivity` is (ε, δ)-DP: the analytic Gaussian mechanism (Balle & Wang
/// 2018, Algorithm 1), valid for every ε > 0.
///
/// μ = Δ/σ is found by bisection on log μ (δ(ε) grows with μ) to relative
/// width 10⁻¹⁴, and σ is taken from the end of the bracket that satisfies
/// the constraint (then checked at the returned σ itself), so rounding never
/// under-noises.
pub fn analytic_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64, DpError> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    check_sensitivity(sensitivity)?;
    // Start from the classic calibration and widen until it brackets the root.
    let mut lo = epsilon / (2.0 * (1.25 / delta).ln()).sqrt();
    while gaussian_delta(lo, epsilon) > delta {
        lo /= 2.0;
    }
    let mut hi = 2.0 * lo;
    while gaussian_delta(hi, epsilon) <= delta {
        lo = hi;
        hi *= 2.0;
    }
    while hi / lo > 1.0 + BISECTION_TOLERANCE {
        let mid = (lo * hi).sqrt();
        if gaussian_delta(mid, epsilon) <= delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // Δ/μ rounds, and Δ/(Δ/μ) may land an ulp above μ: step σ up by ulps
    // until δ evaluated at the σ actually returned meets the target.
    let mut sigma = sensitivity / lo;
    while gaussian_delta(sensitivity / sigma, epsilon) > delta {
        sigma = sigma.next_up();
    }
    Ok(sigma)
}

/// The textbook σ = Δ·√(2·ln(1.25/δ))/ε (Dwork & Roth, Theorem A.1).
///
/// Only proven for ε < 1 and looser than [`analytic_sigma`] everywhere;
/// reported beside it so users can see what the analytic calibration saves.
pub fn classic_sigma(epsilon: f64, delta: f64, sensitivity: f64) -> Result<f64, DpError> {
    check_epsilon(epsilon)?;
    check_delta(delta)?;
    check_sensitivity(sensitivity)?;
    Ok(sensitivity * (2.0 * (1.25 / delta).ln()).sqrt() / epsilon)
}

/// The smallest ε ≥ 0 at which a Gaussian mechanism with ratio `mu` = Δ/σ
/// is (ε, δ)-DP: the exact privacy profile, inverted by bisection and taken
/// from the upper end of the bracket. `mu ≤ 0` is no mechanism at all and
/// costs nothing; no finite ε reaches δ ≤ 0.
pub fn gaussian_epsilon(mu: f64, delta: f64) -> f64 {
    if delta.is_nan() || delta <= 0.0 || mu.is_nan() || mu == f64::INFINITY {
        return f64::INFINITY;
    }
    if mu <= 0.0 || gaussian_delta(mu, 0.0) <= delta {
        return 0.0;
    }
    let mut lo = 0.0;
    let mut hi = 1.0;
    while gaussian_delta(mu, hi) > delta {
        lo = hi;
        hi *= 2.0;
    }
    while hi - lo > BISECTION_TOLERANCE * hi {
        let mid = 0.5 * (lo + hi);
        if gaussian_delta(mu, mid) <= delta {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

#[cfg(test)]
#[path = "gaussian_tests.rs"]
mod tests;
