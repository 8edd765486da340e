//! Private selection for DP Frank-Wolfe (LEARNERS.md §3): a calibrated
//! argmin over a vector of scores α, each of which replacing one row moves
//! by at most Δ, in either direction.
//!
//! Like [`super::Mechanism`], a selector never lets a float touch a random
//! draw. Every score is snapped to a lattice point n_i = round(α_i/γ),
//! γ = 2^g (exact), and everything after that is integer arithmetic.
//! Rounding moves a point by at most ½, so a neighbour's points lie within
//! Δ/γ + 1 of these, and, being integers, within Δ′ = ⌊Δ/γ⌋ + 1: the
//! sensitivity both selectors are calibrated to. γ ≤ 2^−20·Δ, so
//! Δ′γ ≤ Δ·(1 + 2^−20), and every score within the declared range snaps to
//! an index of at most 2^61; a selector that cannot have both is refused up
//! front.
//!
//! # Laplace: report-noisy-min, ε₀-DP
//!
//! The winner is the lowest index minimising n_i + Z_i, with independent
//! discrete Laplace Z_i of integer scale t = ⌈2Δ′/ε₀⌉. Fix the other
//! noises: i wins iff Z_i ≤ r for an integer r set by them and by the
//! points (the lowest-index tie-break only shifts r by one against the
//! rivals before i, the same for every dataset). Between neighbours n_i
//! moves by at most Δ′ and the best rival by at most Δ′, possibly in the
//! opposite direction, so r moves by at most 2Δ′. The discrete Laplace pmf
//! satisfies p(x − m) ≥ e^{−m/t}·p(x), so
//! P[Z_i ≤ r − 2Δ′] ≥ e^{−2Δ′/t}·P[Z_i ≤ r] ≥ e^{−ε₀}·P[Z_i ≤ r];
//! averaging over the other noises, P′(i) ≥ e^{−ε₀}·P(i) (Dwork & Roth
//! 2014, §3.3, with the integer shift). The factor 2 is what Frank-Wolfe
//! needs: its ± vertex scores move in opposite directions, and the
//! monotone bound t = Δ′/ε₀ (Dwork & Roth's Claim 3.9, every score moving
//! the same way) is not a guarantee for them; the tests show it failing.
//! Recorded as `PureEpsilon{ε₀}`.
//!
//! # Exponential: ε₀-bounded range
//!
//! P(i) ∝ exp(−λ·n_i) with λ = ε₀/(2Δ′) per lattice unit (McSherry &
//! Talwar 2007), a temperature τ = γ/λ = 2Δ′γ/ε₀ in score units. As i
//! varies, ln P(i)/P′(i) = λ(n_i′ − n_i) + ln(Z′/Z) moves only through its
//! first term, within an interval of width 2λΔ′ = ε₀: the mechanism is
//! ε₀-bounded-range (Durfee & Rogers 2019), hence ε₀-DP and ε₀²/8-zCDP
//! (Cesar & Rogers 2021), which is why `BoundedRange{ε₀}` steps compose
//! about twice as well as pure ones.
//!
//! ε₀ is an exact decimal (whole units of 10⁻⁹), so λ is the exact rational
//! units/(2·10⁹·Δ′), with no rounding at all. It is sampled exactly by
//! rejection: with m = min n_i, propose a uniform index i (an exact uniform
//! integer) and accept it with Bernoulli(exp(−λ(n_i − m))), CKS20's
//! Algorithm 1 on that rational. The minimum has weight 1, so a proposal is
//! accepted with probability at least 1/k for k scores. In integers,
//! n_i − m ≤ 2^62 and units ≤ 10¹⁵ < 2^50, so the numerator (n_i − m)·units
//! stays below 2^112, and the denominator 2·10⁹·Δ′ below 2^98 (Δ′ < 2^67,
//! because the lattice keeps 2Δ/(ε₀γ) below 2^48 and ε₀ ≤ 10⁶).
//!
//! # Timing
//!
//! The Laplace selector's draws depend on t and k, never on the scores. The
//! exponential selector's number of proposals is geometric with success
//! rate p = Σ exp(−λ(n_i − m))/k, between 1/k (one point far below the
//! rest) and 1 (flat scores): its running time depends on the scores, so a
//! caller that hides running times must hold it to a deadline that covers
//! the geometric tail at the worst rate, not the mean.
//! [`Selector::allowance`] is that count for T selections in a row: the
//! least K with P[more than K proposals] ≤ η = 2^−40 whatever the scores.
//! T selections need more than K proposals only if K independent
//! Bernoulli(p) trials succeed fewer than T times, and p ≥ 1/k; Chernoff's
//! bound for the binomial's lower tail, P[Bin(K, q) ≤ aK] ≤ e^{−K·D(a‖q)}
//! for a = T/K ≤ q (D the Bernoulli KL divergence, Hoeffding 1963), is
//! largest at the smallest q, so it holds at q = 1/k for every dataset.
//! For one selection it is k·ln(1/η) ≈ 27.7k proposals; for T in a row
//! about k·(T + √(2T·ln(1/η)) + ln(1/η)), so a whole stage is held to
//! its deadline at little above its worst mean.
//!
//! # Citations
//! - C. Dwork, A. Roth. The Algorithmic Foundations of Differential
//!   Privacy. 2014, §3.3 (report noisy max).
//! - F. McSherry, K. Talwar. Mechanism Design via Differential Privacy.
//!   FOCS 2007.
//! - D. Durfee, R. Rogers. Practical Differentially Private Top-k Selection
//!   with Pay-what-you-get Composition. NeurIPS 2019.
//! - M. Cesar, R. Rogers. Bounding, Concentrating, and Truncating: Unifying
//!   Privacy Loss Composition for Data Analytics. ALT 2021.
//! - C. Canonne, G. Kamath, T. Steinke. The Discrete Gaussian for
//!   Differential Privacy. NeurIPS 2020, §5.
//! - W. Hoeffding. Probability Inequalities for Sums of Bounded Random
//!   Variables. JASA 1963, Theorem 1.

use rand::Rng;

use super::fixed::Fixed;
use super::gaussian::check_sensitivity;
use super::mechanism::{Lattice, MAX_INFLATION_BITS, MAX_SCALE_BITS};
use super::sample::{bernoulli_exp, discrete_laplace, uniform_below};
use super::{DpError, Epsilon, PrivacyLoss};

/// How a step picks its vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectionRule {
    /// Report-noisy-min with discrete Laplace noise: ε₀-DP.
    Laplace,
    /// The exponential mechanism: ε₀-bounded range, cheaper to compose.
    Exponential,
}

/// What a selector draws, in lattice units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Draw {
    /// Discrete Laplace noise of this scale t on every point.
    NoisyMin(u64),
    /// Weights exp(−λ(n_i − m)).
    Exponential(Rate),
}

/// λ = numerator/denominator per lattice unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rate {
    numerator: u128,
    denominator: u128,
}

/// A calibrated private argmin over a fixed-length vector of scores.
#[derive(Debug, Clone)]
pub struct Selector {
    lattice: Lattice,
    /// Δ′, in lattice units.
    shift: u128,
    range: f64,
    epsilon: Epsilon,
    draw: Draw,
}

/// The noise for a lattice sensitivity of `shift` units at ε₀ =
/// `epsilon`, from the exact rational 2Δ′/ε₀ = 2·10⁹·Δ′/units; `None` if
/// the Laplace scale does not fit the sampler.
fn calibrated(rule: SelectionRule, shift: u128, epsilon: Epsilon) -> Option<Draw> {
    let units = u128::from(epsilon.units());
    let twice = 2 * u128::from(Epsilon::UNITS_PER_ONE) * shift;
    match rule {
        SelectionRule::Laplace => u64::try_from(twice.div_ceil(units))
            .ok()
            .map(Draw::NoisyMin),
        SelectionRule::Exponential => Some(Draw::Exponential(Rate {
            numerator: units,
            denominator: twice,
        })),
    }
}

impl Selector {
    /// `epsilon`: the per-step ε₀; `sensitivity`: Δ, how far any one score
    /// can move between neighbouring datasets (every score by at most Δ,
    /// in any direction); `range`: the largest |score| any dataset in the
    /// declared domain can give (public), which sizes the lattice.
    pub fn new(
        rule: SelectionRule,
        epsilon: Epsilon,
        sensitivity: f64,
        range: f64,
    ) -> Result<Selector, DpError> {
        if epsilon == Epsilon::ZERO {
            return Err(DpError::InvalidEpsilon {
                value: 0.0,
                max: Epsilon::MAX,
            });
        }
        check_sensitivity(sensitivity)?;
        let noise = 2.0 * sensitivity / epsilon.value();
        let refused = DpError::RangeTooWide { range, noise };
        let lattice = Lattice::choose(noise, sensitivity, MAX_SCALE_BITS, range)?;
        // A range so wide that the lattice must be coarser than 2^−20·Δ
        // would inflate the sensitivity: Frank-Wolfe never needs one.
        if lattice.spacing() > sensitivity / 2f64.powi(MAX_INFLATION_BITS) {
            return Err(refused);
        }
        // Exact: γ is a power of two, and Δ/γ an integer-valued float below
        // 2^67 once floored.
        let shift = (sensitivity / lattice.spacing()).floor() as u128 + 1;
        let draw = calibrated(rule, shift, epsilon).ok_or(refused)?;
        Ok(Selector {
            lattice,
            shift,
            range,
            epsilon,
            draw,
        })
    }

    /// What one selection costs: `PureEpsilon{ε₀}` (Laplace) or
    /// `BoundedRange{ε₀}` (exponential). The rounding of the scale only ever
    /// makes the real cost smaller.
    pub fn loss(&self) -> PrivacyLoss {
        let epsilon = self.epsilon.value();
        match self.draw {
            Draw::NoisyMin(_) => PrivacyLoss::PureEpsilon { epsilon },
            Draw::Exponential(_) => PrivacyLoss::BoundedRange { epsilon },
        }
    }

    /// The noise scale in score units: the Laplace b = t·γ, or the
    /// exponential mechanism's temperature τ, P(s) ∝ exp(−α_s/τ).
    pub fn scale(&self) -> f64 {
        let units = match self.draw {
            Draw::NoisyMin(scale) => scale as f64,
            Draw::Exponential(rate) => rate.denominator as f64 / rate.numerator as f64,
        };
        units * self.lattice.spacing()
    }

    /// How the selector picks.
    pub fn rule(&self) -> SelectionRule {
        match self.draw {
            Draw::NoisyMin(_) => SelectionRule::Laplace,
            Draw::Exponential(_) => SelectionRule::Exponential,
        }
    }

    /// The lattice spacing γ.
    pub fn grid(&self) -> f64 {
        self.lattice.spacing()
    }

    /// Δ′·γ, the sensitivity after lattice rounding, as calibrated.
    pub fn accounted_sensitivity(&self) -> f64 {
        self.shift as f64 * self.lattice.spacing()
    }

    /// The most draws T selections among `candidates` scores may take, with
    /// P\[more\] ≤ [`OVERRUN`] whatever the scores: discrete Laplace values
    /// (exactly k·T), or exponential proposals (module docs, "Timing").
    pub fn allowance(&self, candidates: usize, selections: u32) -> u64 {
        let (k, t) = (candidates as u64, u64::from(selections));
        match self.draw {
            Draw::NoisyMin(_) => k.saturating_mul(t),
            Draw::Exponential(_) => proposal_allowance(k, t),
        }
    }

    /// The index of the (noisy) smallest score. Errors on a non-finite
    /// score or one beyond the range.
    pub fn select<R: Rng + ?Sized>(&self, scores: &[f64], rng: &mut R) -> Result<usize, DpError> {
        self.select_counted(scores, rng).map(|(index, _)| index)
    }

    /// [`Selector::select`], with how many draws it took (the unit of
    /// [`Selector::allowance`]).
    pub fn select_counted<R: Rng + ?Sized>(
        &self,
        scores: &[f64],
        rng: &mut R,
    ) -> Result<(usize, u64), DpError> {
        if scores.is_empty() {
            return Err(DpError::NoCoordinates);
        }
        for (index, &score) in scores.iter().enumerate() {
            if !score.is_finite() {
                return Err(DpError::NonFiniteValue(index));
            }
            self.within_range(index, score)?;
        }
        let points = self.lattice.snap(scores)?;
        Ok(self.pick(&points, rng))
    }

    /// [`Selector::select_counted`] of exact scores (sums on a fixed-point
    /// grid), snapped to the lattice in integer arithmetic.
    pub fn select_fixed<R: Rng + ?Sized>(
        &self,
        scores: &Fixed,
        rng: &mut R,
    ) -> Result<(usize, u64), DpError> {
        if scores.units.is_empty() {
            return Err(DpError::NoCoordinates);
        }
        for (index, &units) in scores.units.iter().enumerate() {
            // The range is a sanity check of the caller's calibration: a
            // float's rounding of the score is close enough for it.
            self.within_range(index, units as f64 * 2f64.powi(scores.exponent))?;
        }
        let points = self.lattice.snap_fixed(scores)?;
        Ok(self.pick(&points, rng))
    }

    fn within_range(&self, index: usize, score: f64) -> Result<(), DpError> {
        if score.abs() > self.range {
            return Err(DpError::OutsideRange {
                index,
                range: self.range,
            });
        }
        Ok(())
    }

    fn pick<R: Rng + ?Sized>(&self, points: &[i128], rng: &mut R) -> (usize, u64) {
        match self.draw {
            Draw::NoisyMin(scale) => (noisy_min(points, scale, rng), points.len() as u64),
            Draw::Exponential(rate) => exponential(points, rate, rng),
        }
    }
}

/// The bound on the chance that T selections overrun their
/// [`Selector::allowance`]: 2^−40.
pub const OVERRUN: f64 = 1.0 / (1u64 << 40) as f64;

/// The least K with e^{−K·D(T/K ‖ 1/k)} ≤ [`OVERRUN`] (module docs,
/// "Timing"), or the exact (1 − 1/k)^K ≤ η for one selection; k = 1
/// always accepts at once.
fn proposal_allowance(k: u64, selections: u64) -> u64 {
    if k <= 1 || selections == 0 {
        return selections;
    }
    let q = 1.0 / k as f64;
    let t = selections as f64;
    let log_tail = |draws: u64| -> f64 {
        let draws = draws as f64;
        if selections == 1 {
            return draws * (-q).ln_1p();
        }
        let a = t / draws;
        if a >= q {
            return 0.0;
        }
        -draws * (a * (a / q).ln() + (1.0 - a) * ((1.0 - a) / (1.0 - q)).ln())
    };
    let target = OVERRUN.ln();
    let mut high = selections.saturating_mul(k);
    while log_tail(high) > target {
        high = high.saturating_mul(2);
    }
    // The tail falls as K grows: bisect for the least K that meets η.
    let mut low = selections;
    while low < high {
        let middle = low + (high - low) / 2;
        if log_tail(middle) <= target {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    high
}

/// The first index of the smallest value: a fixed priority among ties,
/// whatever the data.
fn lowest_argmin(values: impl IntoIterator<Item = i128>) -> usize {
    values
        .into_iter()
        .enumerate()
        .min_by_key(|&(_, value)| value)
        .map_or(0, |(index, _)| index)
}

/// Report-noisy-min over `points` with discrete Laplace noise of `scale`.
fn noisy_min<R: Rng + ?Sized>(points: &[i128], scale: u64, rng: &mut R) -> usize {
    // Points are below 2^61 and the noise never nears 2^126: saturating
    // only keeps a panic out of a path no draw reaches.
    lowest_argmin(
        points
            .iter()
            .map(|&point| point.saturating_add(discrete_laplace(scale, rng))),
    )
}

/// An exact draw of P(i) ∝ exp(−λ·points\[i\]), by uniform proposals, and
/// how many proposals it took.
fn exponential<R: Rng + ?Sized>(points: &[i128], rate: Rate, rng: &mut R) -> (usize, u64) {
    let low = points.iter().copied().min().unwrap_or(0);
    let mut proposals = 0;
    loop {
        proposals += 1;
        let index = uniform_below(points.len() as u128, rng) as usize;
        let gap = points[index].abs_diff(low);
        if bernoulli_exp(gap * rate.numerator, rate.denominator, rng) {
            return (index, proposals);
        }
    }
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
