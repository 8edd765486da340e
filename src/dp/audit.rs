//! The statistics of an empirical privacy audit: turning how often a
//! distinguishing test errs on two neighbouring datasets into a lower
//! bound on ε that holds with a stated confidence.
//!
//! An (ε, δ)-DP mechanism M and neighbours D₀, D₁: for every test that
//! says "D₁" on the set S of outputs, P[M(D₁) ∈ S] ≤ e^ε·P[M(D₀) ∈ S] + δ,
//! and the same with D₀ and D₁ swapped. With the test's false-positive
//! rate α = P[M(D₀) ∈ S] and false-negative rate β = P[M(D₁) ∉ S]:
//!
//!   1 − β ≤ e^ε·α + δ  and  1 − α ≤ e^ε·β + δ,
//!
//! so ε ≥ ln((1 − δ − β)/α) and ε ≥ ln((1 − δ − α)/β). Over n trials
//! each the rates are only estimated; one-sided Clopper–Pearson upper
//! bounds ᾱ and β̄, each at confidence 1 − (1 − c)/2, hold together with
//! confidence c (a union bound), and put ε above
//! max(ln((1 − δ − β̄)/ᾱ), ln((1 − δ − ᾱ)/β̄), 0) with confidence c
//! (Jagielski, Ullman & Oprea, NeurIPS 2020, §3; Nasr et al., IEEE S&P
//! 2021, §4). If that lower bound exceeds the ε a mechanism claims, the
//! mechanism is broken, with confidence c.
//!
//! The test here is a threshold on a score (for a release, its projection
//! onto the canary's direction): the threshold is chosen on the first
//! tenth of each side's trials and the rates counted on the other nine
//! tenths, so the choice does not bias the bound, and the counts, which
//! set how tight it is, keep most of the trials.

use statrs::distribution::{ContinuousCDF, Normal};
use statrs::function::beta::inv_beta_reg;

/// The one-sided upper confidence bound on a rate p from `hits` of
/// `trials`: the least p̄ with P[Binomial(trials, p̄) ≤ hits] ≤ 1 −
/// `confidence`, the Beta(hits + 1, trials − hits) quantile at
/// `confidence` (Clopper & Pearson, Biometrika 1934).
pub fn clopper_pearson_upper(hits: u64, trials: u64, confidence: f64) -> f64 {
    if hits >= trials {
        return 1.0;
    }
    inv_beta_reg(hits as f64 + 1.0, (trials - hits) as f64, confidence)
}

/// How a distinguishing test did: its errors on each side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Errors {
    /// Trials on D₀ the test called D₁, of `negatives`.
    pub false_positives: u64,
    pub negatives: u64,
    /// Trials on D₁ the test called D₀, of `positives`.
    pub false_negatives: u64,
    pub positives: u64,
}

impl Errors {
    /// The lower bound on ε these errors prove at `delta`, with
    /// `confidence` (module docs); 0 when they prove nothing.
    pub fn epsilon_lower(&self, delta: f64, confidence: f64) -> f64 {
        let each = 1.0 - (1.0 - confidence) / 2.0;
        let alpha = clopper_pearson_upper(self.false_positives, self.negatives, each);
        let beta = clopper_pearson_upper(self.false_negatives, self.positives, each);
        let bound = |miss: f64, false_alarm: f64| {
            let caught = 1.0 - delta - miss;
            if caught > 0.0 && false_alarm > 0.0 {
                (caught / false_alarm).ln()
            } else {
                0.0
            }
        };
        bound(beta, alpha).max(bound(alpha, beta)).max(0.0)
    }

    /// The lower bound on μ these errors prove for a μ-GDP mechanism, with
    /// `confidence`: every test of one has β ≥ Φ(Φ⁻¹(1 − α) − μ) (Dong,
    /// Roth & Su 2022, Definition 2.7), so μ ≥ Φ⁻¹(1 − α) − Φ⁻¹(β), which
    /// only falls when α and β are replaced by their upper bounds (the
    /// same with α and β swapped, by symmetry). 0 when they prove nothing.
    pub fn mu_lower(&self, confidence: f64) -> f64 {
        let each = 1.0 - (1.0 - confidence) / 2.0;
        let alpha = clopper_pearson_upper(self.false_positives, self.negatives, each);
        let beta = clopper_pearson_upper(self.false_negatives, self.positives, each);
        if alpha >= 1.0 || beta >= 1.0 {
            return 0.0;
        }
        (standard_normal().inverse_cdf(1.0 - alpha) - standard_normal().inverse_cdf(beta)).max(0.0)
    }

    /// The lower bound on ε at `delta` these errors prove under `estimate`.
    pub fn bound(&self, estimate: Estimate, delta: f64, confidence: f64) -> f64 {
        match estimate {
            Estimate::ClopperPearson => self.epsilon_lower(delta, confidence),
            Estimate::Gdp => super::gaussian_epsilon(self.mu_lower(confidence), delta),
        }
    }
}

fn standard_normal() -> Normal {
    Normal::standard()
}

/// How a test's errors become a bound on ε.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimate {
    /// [`Errors::epsilon_lower`]: holds for every mechanism, but at a δ
    /// far below 1/trials it cannot see the rare outputs where the
    /// privacy loss is largest, so for the Gaussian it proves at most
    /// 0.76 of ε = 1 at δ = 10⁻⁵ within 10⁶ trials.
    ClopperPearson,
    /// The ε at δ of the μ-GDP mechanism with μ = [`Errors::mu_lower`]
    /// (Nasr et al., USENIX Security 2023, §4): a bound for mechanisms
    /// whose trade-off curve is Gaussian, as the Gaussian mechanism's is
    /// and as T of them compose to (Dong, Roth & Su 2022, Corollary 3.3).
    /// It reads μ where the test is most certain, at error rates near ½,
    /// and so proves nearly all of a Gaussian release's ε.
    Gdp,
}

/// A threshold test's audit: the bound, and the test that proved it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdAudit {
    pub epsilon_lower: f64,
    /// Scores above it are called D₁.
    pub threshold: f64,
    pub errors: Errors,
}

/// One trial in this many chooses the threshold.
const CHOOSING: usize = 10;

/// Candidate thresholds tried on the choosing trials: this many quantiles of
/// each side's scores.
const CANDIDATES: usize = 400;

/// The best threshold test between `null` (scores of trials on D₀) and
/// `alternative` (on D₁), chosen on the first tenth of each and counted
/// on the rest (module docs).
pub fn threshold_audit(
    null: &[f64],
    alternative: &[f64],
    estimate: Estimate,
    delta: f64,
    confidence: f64,
) -> ThresholdAudit {
    let (choose_null, count_null) = null.split_at(null.len() / CHOOSING);
    let (choose_alt, count_alt) = alternative.split_at(alternative.len() / CHOOSING);
    let sorted = |scores: &[f64]| {
        let mut sorted = scores.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted
    };
    let (null_sorted, alt_sorted) = (sorted(choose_null), sorted(choose_alt));
    let errors_at = |threshold: f64, null: &[f64], alternative: &[f64]| Errors {
        false_positives: null.iter().filter(|&&s| s > threshold).count() as u64,
        negatives: null.len() as u64,
        false_negatives: alternative.iter().filter(|&&s| s <= threshold).count() as u64,
        positives: alternative.len() as u64,
    };
    let quantiles = |sorted: &[f64]| -> Vec<f64> {
        (0..CANDIDATES)
            .filter_map(|i| sorted.get(i * sorted.len() / CANDIDATES).copied())
            .collect()
    };
    let mut candidates = quantiles(&null_sorted);
    candidates.extend(quantiles(&alt_sorted));
    let chosen = candidates
        .into_iter()
        .map(|threshold| {
            let bound =
                errors_at(threshold, &null_sorted, &alt_sorted).bound(estimate, delta, confidence);
            (threshold, bound)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(0.0, |(threshold, _)| threshold);
    let errors = errors_at(chosen, count_null, count_alt);
    ThresholdAudit {
        epsilon_lower: errors.bound(estimate, delta, confidence),
        threshold: chosen,
        errors,
    }
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
