//! Rényi-DP curves over a fixed grid of orders, summed across releases and
//! converted to (ε, δ).
//!
//! A mechanism is (α, R(α))-RDP when the Rényi divergence of order α between
//! its outputs on neighbouring datasets is at most R(α). Curves of
//! independent (even adaptively chosen) releases add order by order
//! (Mironov 2017, Proposition 1), so a ledger keeps one curve per dataset.
//!
//! # Citations
//! - I. Mironov. Rényi Differential Privacy. CSF 2017 (Propositions 1, 3, 6, 7).
//! - C. Canonne, G. Kamath, T. Steinke. The Discrete Gaussian for
//!   Differential Privacy. NeurIPS 2020 (Proposition 12, the conversion).
//! - B. Balle, G. Barthe, M. Gaboardi, J. Hsu, T. Sato. Hypothesis Testing
//!   Interpretations and Rényi Differential Privacy. AISTATS 2020 (Theorem 21).
//! - M. Cesar, R. Rogers. Bounding, Concentrating, and Truncating: Unifying
//!   Privacy Loss Composition for Data Analytics. ALT 2021.
//! - P. Kairouz, S. Oh, P. Viswanath. The Composition Theorem for
//!   Differential Privacy. ICML 2015 (randomized response dominates every
//!   ε-DP mechanism).

use serde::{Deserialize, Serialize};

/// Number of orders in [`ORDERS`].
pub const ORDER_COUNT: usize = 125;

/// The orders α at which curves are kept: dense near 1, where small-ε
/// conversions find their optimum, sparser towards 16384 for large ε.
pub const ORDERS: [f64; ORDER_COUNT] = [
    1.25, 1.375, 1.5, 1.625, 1.75, 1.875, 2.0, 2.125, 2.25, 2.375, 2.5, 2.625, 2.75, 2.875, 3.0,
    3.125, 3.25, 3.375, 3.5, 3.625, 3.75, 3.875, 4.0, 4.125, 4.25, 4.375, 4.5, 4.625, 4.75, 4.875,
    5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0, 9.5, 10.0, 10.5, 11.0, 11.5, 12.0, 13.0, 14.0,
    15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0,
    31.0, 32.0, 34.0, 36.0, 38.0, 40.0, 42.0, 44.0, 46.0, 48.0, 50.0, 52.0, 54.0, 56.0, 58.0, 60.0,
    62.0, 64.0, 68.0, 72.0, 76.0, 80.0, 84.0, 88.0, 92.0, 96.0, 100.0, 104.0, 108.0, 112.0, 116.0,
    120.0, 124.0, 128.0, 136.0, 144.0, 152.0, 160.0, 168.0, 176.0, 184.0, 192.0, 200.0, 208.0,
    216.0, 224.0, 232.0, 240.0, 248.0, 256.0, 320.0, 384.0, 448.0, 512.0, 640.0, 768.0, 1024.0,
    1536.0, 2048.0, 4096.0, 8192.0, 16384.0,
];

/// ln cosh x without overflow.
fn ln_cosh(x: f64) -> f64 {
    let x = x.abs();
    x + (-2.0 * x).exp().ln_1p() - std::f64::consts::LN_2
}

/// ln(eᵃ + eᵇ) without overflow.
fn ln_add_exp(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    hi + (lo - hi).exp().ln_1p()
}

/// An RDP curve: one bound per order of [`ORDERS`]. Serialised as the list
/// of bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "Vec<f64>", try_from = "Vec<f64>")]
pub struct RdpCurve([f64; ORDER_COUNT]);

impl From<RdpCurve> for Vec<f64> {
    fn from(curve: RdpCurve) -> Self {
        curve.0.to_vec()
    }
}

impl TryFrom<Vec<f64>> for RdpCurve {
    type Error = String;

    fn try_from(bounds: Vec<f64>) -> Result<Self, String> {
        let count = bounds.len();
        let bounds: [f64; ORDER_COUNT] = bounds
            .try_into()
            .map_err(|_| format!("an RDP curve has {ORDER_COUNT} bounds, not {count}"))?;
        if bounds
            .iter()
            .all(|bound| bound.is_finite() && *bound >= 0.0)
        {
            Ok(RdpCurve(bounds))
        } else {
            Err("RDP bounds are finite and non-negative".to_owned())
        }
    }
}

impl RdpCurve {
    /// No privacy loss.
    pub fn zero() -> Self {
        RdpCurve([0.0; ORDER_COUNT])
    }

    fn from_fn(bound: impl Fn(f64) -> f64) -> Self {
        RdpCurve(ORDERS.map(bound))
    }

    /// The Gaussian mechanism with Δ/σ = `mu`: R(α) = α·μ²/2, exactly
    /// (Mironov 2017, Proposition 7). The discrete Gaussian on a lattice with
    /// integer shifts has the same bound (Canonne et al. 2020, Theorem 14).
    pub fn gaussian(mu: f64) -> Self {
        Self::from_fn(|alpha| alpha * mu * mu / 2.0)
    }

    /// Any ε-DP mechanism: R(α) ≤ min(ε, ln(cosh((α−½)ε)/cosh(ε/2))/(α−1)).
    ///
    /// The second term is the Rényi divergence of randomized response with
    /// parameter ε; every ε-DP pair of output distributions is a
    /// post-processing of it (Kairouz et al. 2015), so by the data-processing
    /// inequality it bounds them all. Used for the norm-Gamma vector
    /// mechanism, whose exact curve has no closed form.
    pub fn pure(epsilon: f64) -> Self {
        Self::from_fn(|alpha| {
            let randomized_response =
                (ln_cosh((alpha - 0.5) * epsilon) - ln_cosh(epsilon / 2.0)) / (alpha - 1.0);
            randomized_response.clamp(0.0, epsilon)
        })
    }

    /// An ε-bounded-range mechanism: R(α) ≤ min(the ε-DP bound of
    /// [`RdpCurve::pure`], α·ε²/8).
    ///
    /// Bounded range implies ε-DP, hence the first term; it also implies
    /// ε²/8-zCDP (Cesar & Rogers 2021: Hoeffding's lemma applied to a
    /// privacy loss confined to an interval of width ε), which is the second
    /// term and, for small ε, a quarter of randomized response's ≈ α·ε²/2.
    pub fn bounded_range(epsilon: f64) -> Self {
        let mut curve = Self::pure(epsilon);
        for (bound, alpha) in curve.0.iter_mut().zip(ORDERS) {
            *bound = bound.min(alpha * epsilon * epsilon / 8.0);
        }
        curve
    }

    /// The discrete Laplace mechanism P(y) ∝ exp(−|y|/`scale`) on ℤᵏ whose
    /// neighbouring inputs differ by an integer vector of L1 norm ≤ `shift`.
    ///
    /// For one coordinate shifted by d, summing P(y)^α·P(y−d)^{1−α} over
    /// y ≤ 0, 0 < y < d and y ≥ d (three geometric series; r = e^{−1/b},
    /// s = e^{−(2α−1)/b}, c = (1−r)/(1+r)) gives exactly
    ///
    /// ```text
    /// R(α) = ln( c·[ e^{(α−1)d/b}·(1/(1−r) + s/(1−s)) + e^{−αd/b}·(1/(1−r) − 1/(1−s)) ] ) / (α−1)
    /// ```
    ///
    /// Both coefficients are positive, so (α−1)·R is a log-sum-exp of affine
    /// functions of d: convex with value 0 at d = 0, hence superadditive.
    /// Splitting an L1 budget across coordinates therefore never beats
    /// putting all of it on one, and the one-coordinate formula bounds the
    /// whole vector. As b and d grow it tends to the continuous Laplace curve
    /// of Mironov 2017, Proposition 6. It is capped at the pure ε = d/b.
    pub fn discrete_laplace(shift: f64, scale: f64) -> Self {
        let inverse_one_minus_r = 1.0 / -(-1.0 / scale).exp_m1();
        let ln_c = (0.5 / scale).tanh().ln();
        Self::from_fn(|alpha| {
            let a = (2.0 * alpha - 1.0) / scale;
            let rising = inverse_one_minus_r + 1.0 / a.exp_m1();
            let falling = inverse_one_minus_r - 1.0 / -(-a).exp_m1();
            let ln_sum = ln_add_exp(
                (alpha - 1.0) * shift / scale + rising.ln(),
                -alpha * shift / scale + falling.ln(),
            );
            ((ln_c + ln_sum) / (alpha - 1.0)).clamp(0.0, shift / scale)
        })
    }

    /// The curve of `count` adaptive repetitions of this mechanism.
    pub fn repeated(&self, count: u32) -> Self {
        RdpCurve(self.0.map(|bound| bound * f64::from(count)))
    }

    /// Adds another release's curve to this one (composition).
    pub fn add(&mut self, other: &RdpCurve) {
        for (bound, more) in self.0.iter_mut().zip(other.0) {
            *bound += more;
        }
    }

    /// Raises this curve to `other` wherever `other` is larger: the curve of
    /// mechanisms on disjoint rows (parallel composition, order by order).
    pub fn max(&mut self, other: &RdpCurve) {
        for (bound, other) in self.0.iter_mut().zip(other.0) {
            *bound = bound.max(other);
        }
    }

    /// The bound at each order of [`ORDERS`].
    pub fn bounds(&self) -> &[f64; ORDER_COUNT] {
        &self.0
    }

    /// The smallest ε such that a mechanism with this curve is (ε, δ)-DP,
    /// by the improved conversion ε = R(α) + ln((α−1)/α) − (ln δ + ln α)/(α−1)
    /// (Canonne et al. 2020, Proposition 12; Balle et al. 2020, Theorem 21),
    /// minimised over the grid.
    pub fn epsilon(&self, delta: f64) -> f64 {
        let ln_delta = delta.ln();
        ORDERS
            .iter()
            .zip(self.0)
            .map(|(&alpha, bound)| {
                bound + ((alpha - 1.0) / alpha).ln() - (ln_delta + alpha.ln()) / (alpha - 1.0)
            })
            .fold(f64::INFINITY, f64::min)
            .max(0.0)
    }
}

#[cfg(test)]
#[path = "rdp_tests.rs"]
mod tests;
