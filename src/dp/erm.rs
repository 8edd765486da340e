//! Privacy parameters of the two one-shot private learners for
//! L2-regularised logistic regression,
//! J(w) = (1/N)·Σ log(1 + exp(−yᵢ wᵀxᵢ)) + (λ/2)‖w‖², ‖xᵢ‖₂ ≤ 1, yᵢ = ±1.
//!
//! **Output perturbation** (seed 003 Theorem 1; Chaudhuri, Monteleoni &
//! Sarwate 2011, Corollary 8): the exact minimiser w* has L2 sensitivity
//! 2/(Nλ) when one example (row or label) changes. A solver stops at some
//! ŵ with ‖∇J(ŵ)‖ ≤ γ, and λ-strong convexity puts ŵ within γ/λ of w*, so
//! two neighbouring solves differ by at most 2/(Nλ) + 2γ/λ: that is the
//! sensitivity the noise is calibrated to. (The seed's Algorithm 1 scales
//! the noise by 1/(λn), half its own Theorem 1's 2/(λn); we use the
//! theorem.)
//!
//! **Objective perturbation** (CMS11 Algorithm 2, seed 003 Theorem 2, with
//! c = 1/4 bounding the logistic loss's second derivative): for a budget
//! ε_p, ε′ = ε_p − 2·ln(1 + c/(Nλ)); if ε′ ≤ 0 an extra regulariser
//! Δ = c/(N(e^{ε_p/4} − 1)) − λ is added and ε′ = ε_p/2. A vector b with
//! density ∝ exp(−(ε′/2)‖b‖) (norm ~ Gamma(d, 2/ε′), direction uniform)
//! enters the objective as (1/N)·bᵀw, and the exact minimiser of
//! J(w) + (1/N)bᵀw + (Δ/2)‖w‖² is ε_p-DP.
//!
//! dpgate adds Δ whenever ε′ would fall below ε_p/2, not only when it
//! would be ≤ 0. The proof holds for any public Δ ≥ 0 with ε′ > 0; CMS11's
//! own rule lets ε′ approach 0 from above, where b's scale 2/ε′ grows
//! without bound: the model is then noise, and ‖b‖/N can exceed what a
//! double-precision solve can certify. With the wider rule b's scale is at
//! most 4/ε_p.
//!
//! That guarantee is for the *exact* minimiser. A real solve stops at
//! ‖∇‖ ≤ γ, so, following Approximate Minima Perturbation (Iyengar, Near,
//! Song, Thakkar, Thakurta & Wang 2019), a small share of ε pays for
//! lattice norm-Gamma output noise of sensitivity 2γ/(λ + Δ), which also
//! makes the published weights float-safe. The two parts compose to ε.
//!
//! Under privacy unit `user` the same algorithm runs with a noisy count for
//! N and a person of up to m rows for the neighbour
//! ([`Neighbours::People`], proof in [`super::erm_people`]).
//!
//! # Citations
//! - K. Chaudhuri, C. Monteleoni, A. D. Sarwate. Differentially Private
//!   Empirical Risk Minimization. JMLR 12, 2011.
//! - R. Iyengar, J. P. Near, D. Song, O. Thakkar, A. Thakurta, L. Wang.
//!   Towards Practical Differentially Private Convex Optimization. IEEE S&P
//!   2019.

use super::{DpError, Epsilon};

/// c: the bound on the logistic loss's second derivative, σ(z)(1 − σ(z)).
pub const LOGISTIC_CURVATURE: f64 = 0.25;

/// The gradient norm every private solve reaches (γ above). Tight enough
/// that the inexactness terms are a rounding error of the real noise, loose
/// enough for Newton's method in double precision on millions of rows.
pub const SOLVE_TOLERANCE: f64 = 1e-10;

/// The output noise that covers the inexact solve gets 1/`OUTPUT_SHARE`
/// of an objective-perturbation budget (in whole ledger units, rounded down,
/// at least one unit); the perturbed objective gets the rest.
pub const OUTPUT_SHARE: u64 = 100;

fn check(n: u64, lambda: f64) -> Result<(), DpError> {
    if n == 0 {
        return Err(DpError::NoExamples);
    }
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(DpError::InvalidRegulariser(lambda));
    }
    Ok(())
}

/// Output perturbation's L2 sensitivity: 2/(Nλ) + 2γ/λ.
pub fn output_sensitivity(n: u64, lambda: f64, tolerance: f64) -> Result<f64, DpError> {
    check(n, lambda)?;
    let sensitivity = 2.0 / (n as f64 * lambda) + 2.0 * tolerance / lambda;
    if !(sensitivity.is_finite() && sensitivity > 0.0) {
        return Err(DpError::InvalidSensitivity(sensitivity));
    }
    Ok(sensitivity)
}

/// Who two neighbouring datasets differ by, in the terms objective
/// perturbation's proof needs: how far one neighbour moves b for a fixed
/// output (the *shift*) and a bound on the log of the Jacobian's
/// determinant ratio at r = c/(nΛ), n the normaliser and Λ the whole
/// regulariser.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Neighbours {
    /// One row replaced, N public (CMS11): shift 2, log-determinant
    /// 2·ln(1 + r).
    Row { n: u64 },
    /// One person of up to m rows added or removed, the loss normalised by
    /// max(N̂, N) and b by N̂ ([`super::erm_people`]): shift 2m,
    /// log-determinant m·r.
    People { normaliser: f64, rows_per_user: u32 },
}

impl Neighbours {
    /// n: the count the linear term is divided by.
    pub fn normaliser(&self) -> f64 {
        match *self {
            Neighbours::Row { n } => n as f64,
            Neighbours::People { normaliser, .. } => normaliser,
        }
    }

    fn check(&self, lambda: f64) -> Result<(), DpError> {
        match *self {
            Neighbours::Row { n } => check(n, lambda),
            Neighbours::People {
                normaliser,
                rows_per_user,
            } => {
                if !(normaliser.is_finite() && normaliser >= 1.0) || rows_per_user == 0 {
                    return Err(DpError::NoExamples);
                }
                check(1, lambda)
            }
        }
    }

    /// The most one neighbour moves b = −n·∇(the unperturbed objective).
    fn shift(&self) -> f64 {
        match *self {
            Neighbours::Row { .. } => 2.0,
            Neighbours::People { rows_per_user, .. } => 2.0 * f64::from(rows_per_user),
        }
    }

    /// The log-determinant bound at r, rounded up.
    fn jacobian(&self, ratio: f64) -> f64 {
        match *self {
            Neighbours::Row { .. } => above(2.0 * above(ratio).ln_1p()),
            Neighbours::People { rows_per_user, .. } => {
                above(f64::from(rows_per_user) * above(ratio))
            }
        }
    }

    /// The r at which [`Self::jacobian`] is `cost`.
    fn ratio_at(&self, cost: f64) -> f64 {
        match *self {
            Neighbours::Row { .. } => (cost / 2.0).exp_m1(),
            Neighbours::People { rows_per_user, .. } => cost / f64::from(rows_per_user),
        }
    }

    /// What rounding the solver's linear term adds to its gradient, for
    /// ‖b‖/n ≤ `linear_bound`: nothing under `row`; under `user` b enters
    /// the solver as fl(b·fl(M/N̂)) over M, within 2.0…·u·‖b‖/N̂ of b/N̂.
    fn rescaling(&self, linear_bound: f64) -> f64 {
        match self {
            Neighbours::Row { .. } => 0.0,
            Neighbours::People { .. } => 3.0 * f64::EPSILON / 2.0 * linear_bound,
        }
    }
}

/// The parameters of one objective-perturbation release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObjectivePerturbation {
    /// ε_p: the part of ε the perturbed objective spends, as the float
    /// below its exact ledger units (so that rounding never spends more).
    pub epsilon_objective: f64,
    /// ε′: the density of b is ∝ exp(−(ε′/shift)‖b‖).
    pub epsilon_prime: f64,
    /// Δ ≥ 0: the extra regulariser (0 unless ε′ came out below ε_p/2).
    pub extra_regulariser: f64,
    /// The Gamma scale of ‖b‖: shift/ε′.
    pub b_scale: f64,
    /// ‖b‖/n at the `tail` multiple of the scale (the 1 − 2⁻⁶⁴ quantile
    /// of ‖b‖ as [`crate::releases`] uses it).
    pub linear_bound: f64,
    /// ε of the output noise, in whole ledger units: with `epsilon_objective`
    /// it adds up to the request's ε exactly.
    pub epsilon_output: Epsilon,
    /// L2 sensitivity of the output noise: 2(γ + ρ)/(λ + Δ), ρ what
    /// rounding the linear term adds ([`Neighbours`]).
    pub output_sensitivity: f64,
}

/// A float computed to within a few ulps, moved up past that error.
fn above(value: f64) -> f64 {
    value * (1.0 + 8.0 * f64::EPSILON)
}

/// Splits ε into the output share (⌊units/[`OUTPUT_SHARE`]⌋, at least one
/// unit) and the objective's share (the rest), both in whole ledger units,
/// so the two add up to ε exactly.
pub fn split_epsilon(epsilon: Epsilon) -> Result<(Epsilon, Epsilon), DpError> {
    split_share(
        epsilon,
        OUTPUT_SHARE,
        "epsilon of objective perturbation (split between the objective and the output)",
    )
}

/// Splits ε into 1/`share` of it (⌊units/share⌋, at least one unit) and
/// the rest, both in whole ledger units, so the two add up to ε exactly;
/// `what` names ε in the refusal of one too small to split.
pub fn split_share(
    epsilon: Epsilon,
    share: u64,
    what: &'static str,
) -> Result<(Epsilon, Epsilon), DpError> {
    let units = epsilon.units();
    if units < 2 {
        return Err(DpError::BelowResolution {
            name: what,
            value: epsilon.value(),
            resolution: 2.0 / Epsilon::UNITS_PER_ONE as f64,
        });
    }
    let part = (units / share).max(1);
    Ok((Epsilon::from_units(part), Epsilon::from_units(units - part)))
}

/// CMS11 Algorithm 2 for total ε (see the module docs) and `neighbours`,
/// with a share of it reserved for the output noise of a solve to
/// `tolerance` ([`split_epsilon`]); ‖b‖ is bounded at `tail` times its
/// scale. Every float on the way is rounded towards spending less: ε_p
/// down, the Jacobian's term and Δ up, ε′ down.
pub fn objective_perturbation(
    epsilon: Epsilon,
    neighbours: Neighbours,
    lambda: f64,
    tolerance: f64,
    tail: f64,
) -> Result<ObjectivePerturbation, DpError> {
    neighbours.check(lambda)?;
    let n = neighbours.normaliser();
    let (epsilon_output, objective) = split_epsilon(epsilon)?;
    // The float nearest units/10⁹ may lie above it; the one below never does.
    let epsilon_objective = objective.value().next_down();
    let ratio = LOGISTIC_CURVATURE / (n * lambda);
    let mut epsilon_prime = (epsilon_objective - neighbours.jacobian(ratio)).next_down();
    let mut extra_regulariser = 0.0;
    if epsilon_prime < epsilon_objective / 2.0 {
        // With Δ, the Jacobian's term is ε_p/2 exactly; rounding Δ up only
        // makes it smaller. When e^{ε_p/4} overflows (`row`), `needed`
        // underflows to 0 while the true value is positive but far below
        // λ: no Δ is needed then.
        let needed = LOGISTIC_CURVATURE / (n * neighbours.ratio_at(epsilon_objective / 2.0));
        extra_regulariser = above(above(needed) - lambda).max(0.0);
        epsilon_prime = epsilon_objective / 2.0;
    }
    let b_scale = neighbours.shift() / epsilon_prime;
    let linear_bound = above(b_scale * tail / n);
    let whole = lambda + extra_regulariser;
    let slack = tolerance + neighbours.rescaling(linear_bound);
    Ok(ObjectivePerturbation {
        epsilon_objective,
        epsilon_prime,
        extra_regulariser,
        b_scale,
        linear_bound,
        epsilon_output,
        output_sensitivity: above(2.0 * slack / whole),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sensitivity_is_two_over_n_lambda_plus_the_solve_slack() {
        assert_eq!(output_sensitivity(1000, 0.01, 0.0).unwrap(), 0.2);
        let with_slack = output_sensitivity(1_000_000, 1e-5, 1e-10).unwrap();
        assert!((with_slack - (0.2 + 2e-5)).abs() < 1e-15, "{with_slack}");
        assert!(output_sensitivity(0, 0.01, 0.0).is_err());
        for lambda in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(output_sensitivity(10, lambda, 0.0).is_err(), "{lambda}");
        }
    }

    fn eps(value: f64) -> Epsilon {
        Epsilon::new(value).unwrap()
    }

    #[test]
    fn objective_perturbation_follows_cms11_algorithm_2() {
        // N = 1000, λ = 0.01: c/(Nλ) = 0.025, ε′ = 0.99 − 2·ln(1.025).
        let p = objective_perturbation(eps(1.0), Neighbours::Row { n: 1000 }, 0.01, 1e-10, 1.0)
            .unwrap();
        assert!((p.epsilon_objective - 0.99).abs() < 1e-15);
        assert!(p.epsilon_objective < 0.99);
        assert_eq!(p.epsilon_output, eps(0.01));
        let expected = 0.99 - 2.0 * 1.025f64.ln();
        assert!((p.epsilon_prime - expected).abs() < 1e-15);
        assert_eq!(p.extra_regulariser, 0.0);
        assert!((p.b_scale - 2.0 / expected).abs() < 1e-12);
        assert!((p.output_sensitivity - 2e-8).abs() < 1e-22);
        // ε′ matches the paper's unsimplified ln(1 + 2c/(nλ) + c²/(nλ)²).
        let paper = 0.99 - (1.0 + 2.0 * 0.025 + 0.025f64.powi(2)).ln();
        assert!((p.epsilon_prime - paper).abs() < 1e-15);
    }

    #[test]
    fn a_small_n_lambda_adds_the_extra_regulariser() {
        // N = 100, λ = 1e-4: c/(Nλ) = 25, 2·ln 26 ≫ ε, so ε′ = ε_p/2 and
        // Δ = c/(N(e^{ε_p/4} − 1)) − λ.
        let p =
            objective_perturbation(eps(1.0), Neighbours::Row { n: 100 }, 1e-4, 1e-10, 1.0).unwrap();
        assert!((p.epsilon_prime - 0.495).abs() < 1e-15);
        let delta = 0.25 / (100.0 * (0.99f64 / 4.0).exp_m1()) - 1e-4;
        assert!((p.extra_regulariser - delta).abs() < 1e-15);
        assert!(p.extra_regulariser >= delta);
        assert!(p.extra_regulariser > 0.0);
        // With Δ, the total regulariser λ + Δ makes c/(N(λ+Δ)) fit:
        // 2·ln(1 + c/(N(λ+Δ))) = 2·ln(e^{ε_p/4}) = ε_p/2 = ε_p − ε′.
        let total = 1e-4 + p.extra_regulariser;
        let spent = 2.0 * (0.25 / (100.0 * total)).ln_1p();
        assert!((spent - (p.epsilon_objective - p.epsilon_prime)).abs() < 1e-12);
    }

    #[test]
    fn an_epsilon_prime_below_half_the_budget_gets_the_regulariser_instead() {
        // N = 1000, λ = 2.5e-4: c/(Nλ) = 1, 2·ln 2 = 1.386 > ε_p/2 = 0.99
        // while ε′ = 1.98 − 1.386 = 0.594 is still positive: CMS11 would
        // keep λ and noise b at scale 2/0.594; dpgate regularises instead.
        let p = objective_perturbation(eps(2.0), Neighbours::Row { n: 1000 }, 2.5e-4, 1e-10, 1.0)
            .unwrap();
        assert_eq!(p.epsilon_prime, p.epsilon_objective / 2.0);
        assert!(p.extra_regulariser > 0.0);
        let spent = 2.0 * (0.25 / (1000.0 * (2.5e-4 + p.extra_regulariser))).ln_1p();
        assert!(spent <= p.epsilon_objective - p.epsilon_prime);
        assert!(p.b_scale <= 4.0 / p.epsilon_objective);
        // With e^{ε_p/4} beyond a double, no Δ is needed and none is added.
        let huge = objective_perturbation(
            eps(999_999.0),
            Neighbours::Row { n: 200 },
            1e-12,
            1e-10,
            1.0,
        )
        .unwrap();
        assert_eq!(huge.extra_regulariser, 0.0);
        assert!(huge.output_sensitivity.is_finite() && huge.output_sensitivity > 0.0);
    }

    fn person(normaliser: f64, rows_per_user: u32) -> Neighbours {
        Neighbours::People {
            normaliser,
            rows_per_user,
        }
    }

    #[test]
    fn a_person_of_m_rows_costs_m_c_over_n_lambda_and_shifts_b_by_2m() {
        // m = 5, N̂ = 1000, λ = 0.01: r = 0.025, the Jacobian's term
        // 5·0.025 = 0.125, ε′ = 0.99 − 0.125, b's scale 2·5/ε′.
        let p = objective_perturbation(eps(1.0), person(1000.0, 5), 0.01, 1e-10, 100.0).unwrap();
        assert!(
            (p.epsilon_prime - 0.865).abs() < 1e-15,
            "{}",
            p.epsilon_prime
        );
        assert!(p.epsilon_prime < 0.865);
        assert_eq!(p.extra_regulariser, 0.0);
        assert!((p.b_scale - 10.0 / 0.865).abs() < 1e-12);
        assert!((p.linear_bound - p.b_scale * 100.0 / 1000.0).abs() < 1e-12);
        // The output noise covers γ and b's rescaling: 3u·‖b‖/N̂.
        let rescaling = 1.5 * f64::EPSILON * p.linear_bound;
        let expected = 2.0 * (1e-10 + rescaling) / 0.01;
        assert!(p.output_sensitivity >= expected);
        assert!(p.output_sensitivity <= expected * (1.0 + 1e-14));
        // One row a person at N̂ = N: the Jacobian's term r ≥ 2·ln(1 + r)/2
        // and the shift 2 are unit row's (a replacement is two people).
        let one = objective_perturbation(eps(1.0), person(1000.0, 1), 0.01, 1e-10, 1.0).unwrap();
        let row = objective_perturbation(eps(1.0), Neighbours::Row { n: 1000 }, 0.01, 1e-10, 1.0)
            .unwrap();
        assert!((one.b_scale * one.epsilon_prime - 2.0).abs() < 1e-15);
        assert!(one.epsilon_prime > row.epsilon_prime);
        assert!((one.epsilon_prime - (0.99 - 0.025)).abs() < 1e-15);
    }

    #[test]
    fn a_small_noisy_count_adds_the_regulariser_that_halves_the_budget() {
        // m = 20, N̂ = 100, λ = 10⁻³: m·c/(N̂λ) = 50 ≫ ε_p/2, so
        // Δ = 2mc/(N̂ε_p) − λ and ε′ = ε_p/2.
        let p = objective_perturbation(eps(1.0), person(100.0, 20), 1e-3, 1e-10, 1.0).unwrap();
        assert_eq!(p.epsilon_prime, p.epsilon_objective / 2.0);
        let delta = 2.0 * 20.0 * 0.25 / (100.0 * p.epsilon_objective) - 1e-3;
        assert!(p.extra_regulariser >= delta);
        assert!((p.extra_regulariser - delta).abs() < 1e-15);
        let spent = 20.0 * 0.25 / (100.0 * (1e-3 + p.extra_regulariser));
        assert!(spent <= p.epsilon_objective - p.epsilon_prime);
        assert!((p.b_scale - 40.0 / p.epsilon_prime).abs() < 1e-12);
        for bad in [person(0.5, 5), person(f64::NAN, 5), person(10.0, 0)] {
            assert!(objective_perturbation(eps(1.0), bad, 0.1, 1e-10, 1.0).is_err());
        }
        assert!(objective_perturbation(eps(1.0), person(10.0, 5), 0.0, 1e-10, 1.0).is_err());
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(
            objective_perturbation(eps(1e-9), Neighbours::Row { n: 10 }, 0.1, 1e-10, 1.0).is_err()
        );
        assert!(
            objective_perturbation(eps(1.0), Neighbours::Row { n: 0 }, 0.1, 1e-10, 1.0).is_err()
        );
        assert!(
            objective_perturbation(eps(1.0), Neighbours::Row { n: 10 }, 0.0, 1e-10, 1.0).is_err()
        );
    }

    proptest::proptest! {
        #[test]
        fn the_split_never_spends_more_than_requested(units in 2u64..1_000_000_000_000_000) {
            let epsilon = Epsilon::from_units(units);
            let (output, objective) = split_epsilon(epsilon).unwrap();
            proptest::prop_assert_eq!(output.units() + objective.units(), units);
            proptest::prop_assert!(output.units() >= 1 && objective.units() >= 1);
            proptest::prop_assert!(output.units() <= units / OUTPUT_SHARE + 1);
            let p = objective_perturbation(epsilon, Neighbours::Row { n: 1000 }, 1e-3, 1e-10, 1.0).unwrap();
            // The float the objective is calibrated with is at most its
            // units, exactly: (units − output)·10⁻⁹ ≥ ε_p.
            let exact = num_rational(objective.units());
            proptest::prop_assert!(p.epsilon_objective <= exact);
            proptest::prop_assert!(p.epsilon_prime <= p.epsilon_objective);
        }
    }

    /// units·10⁻⁹ as the largest float not above it.
    fn num_rational(units: u64) -> f64 {
        let nearest = units as f64 / 1e9;
        let above_exact = |x: f64| {
            use num_bigint::BigUint;
            let (mantissa, exponent) = decompose(x);
            // x > units/10⁹ ⇔ m·2^e·10⁹ > units, in exact integers.
            let scaled = BigUint::from(mantissa) * 1_000_000_000u32;
            let units = BigUint::from(units);
            if exponent >= 0 {
                (scaled << exponent.unsigned_abs()) > units
            } else {
                scaled > (units << exponent.unsigned_abs())
            }
        };
        if above_exact(nearest) {
            nearest.next_down()
        } else {
            nearest
        }
    }

    fn decompose(x: f64) -> (u64, i32) {
        let bits = x.to_bits();
        let exponent = ((bits >> 52) & 0x7ff) as i32;
        let fraction = bits & ((1 << 52) - 1);
        if exponent == 0 {
            (fraction, -1074)
        } else {
            (fraction | (1 << 52), exponent - 1075)
        }
    }
}
