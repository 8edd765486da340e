//! Output perturbation under privacy unit `user` (docs/privacy-core.md,
//! "`model/output-perturbation` under `user`").
//!
//! A neighbour adds or removes one person, up to m kept rows, so N itself
//! is private and the 2/(Nλ) of unit `row` cannot be computed. The release
//! therefore counts the kept rows first, with noise (N̂, clamped to
//! [1, 2³⁶]), and fits
//!
//! J̃(w) = (1/M)·Σᵢ ℓᵢ(w) + (λ/2)‖w‖², M = max(N̂, N),
//!
//! a function of the data and of the released N̂ alone.
//!
//! **Sensitivity.** Let D′ be D plus a person of k ≤ m rows, M and M′
//! their normalisers, w the minimiser on D. Stationarity gives
//! Σ_D ∇ℓᵢ(w) = −Mλw, and with ‖∇ℓᵢ‖ ≤ 1 (‖x‖ ≤ 1) ‖w‖ ≤ N/(Mλ) ≤ 1/λ.
//! Then ∇J̃′(w) = λw·(1 − M/M′) + (1/M′)·Σ_person ∇ℓᵢ(w) has norm at most
//! (M′ − M)/M′ + k/M′ ≤ 2k/M′ ≤ 2m/N̂, since M′ − M ≤ k and M′ ≥ N̂; J̃′ is
//! λ-strongly convex, so its minimiser is within 2m/(λN̂) of w. The solver
//! minimises the mean loss with regulariser λ·M/N, the same minimiser,
//! to gradient norm γ, which leaves it within γ·(N/M)/λ ≤ γ/λ of J̃'s:
//! Δ = 2m/(λN̂) + 2γ/λ, with a term for the rounding of λ·M/N
//! ([`output_sensitivity`]). Under unit `row` (replace one row, N public)
//! the same argument with M = N gives the usual 2/(Nλ).
//!
//! **Budget.** The count gets 1/[`COUNT_SHARE`] of it and the model the
//! rest: with δ = 0, ε split in whole ledger units (Laplace count,
//! norm-Gamma weights); with δ > 0, Gaussian noise of multipliers
//! z_c = 10·z and z_w = z·√(100/99), z the analytic Gaussian's for one
//! release at (ε, δ), whose composition is one Gaussian of
//! μ² = 1/z_c² + 1/z_w² = 1/z², exactly (ε, δ) ([`Multipliers`]). The
//! count's relative error is about 10·z·m/N, far below what moves the
//! model.
//!
//! # Objective perturbation
//!
//! CMS11's proof needs the objective's scale to be public, so under `user`
//! the release (with N̂ counted first, as above) minimises
//!
//! F(w) = (1/M)·Σᵢ ℓᵢ(w) + (Λ/2)‖w‖² + (1/N̂)·bᵀw, M = max(N̂, N),
//!
//! Λ = λ + Δ. Dividing the loss by M, not N̂, keeps its weight N/M ≤ 1,
//! which is what lets the certified solver take F for every N
//! (`dpgate_learn::Objective::normaliser`); dividing b by N̂ keeps the
//! density argument free of N. Write α = N̂/M ∈ (0, 1], A = Σᵢ ℓ″ᵢ·xᵢxᵢᵀ.
//! For an output w, b(w) = −α·Σᵢ ∇ℓᵢ(w) − N̂Λw is the only b giving it
//! (F is strictly convex), with Jacobian −(αA + N̂ΛI). Let D′ add a person
//! of k ≤ m rows (gradients gⱼ, curvature E ⪰ 0, rank ≤ k, tr E ≤ kc) and
//! α′ ≤ α its weight:
//!
//! - **Shift.** b′(w) − b(w) = −α′·Σⱼ gⱼ − (α′ − α)·Σᵢ ∇ℓᵢ(w), of norm at
//!   most α′k + (α − α′)N ≤ 2k: (α − α′)N is 0 while M′ = N̂, α′k once
//!   both exceed N̂, and at most kN/N′ ≤ k in between. So b's density
//!   ∝ exp(−(ε′/(2m))‖b‖) changes by at most e^{ε′}.
//! - **Jacobian.** α′(A + E) + N̂ΛI ⪯ G + α′E, G = αA + N̂ΛI ⪰ N̂ΛI, and
//!   det(G + α′E)/det G = Π(1 + μⱼ) over at most k eigenvalues μⱼ ≥ 0 of
//!   G⁻¹α′E, which sum to at most kc/(N̂Λ): by AM–GM at most
//!   (1 + c/(N̂Λ))^k ≤ e^{mc/(N̂Λ)}. The other way, α′A + N̂ΛI ⪯ D′'s
//!   matrix, and against G each eigenvalue aⱼ of A loses at most the
//!   factor 1 + (α − α′)aⱼ/(N̂Λ); Σaⱼ ≤ cN, so that ratio is at most
//!   e^{(α − α′)cN/(N̂Λ)} ≤ e^{kc/(N̂Λ)}.
//!
//! So F's exact minimiser is (ε′ + mc/(N̂Λ))-DP given N̂: with budget
//! ε_p, ε′ = ε_p − m·c/(N̂Λ), and where that falls below ε_p/2 an extra
//! regulariser Δ = 2mc/(N̂ε_p) − λ brings the Jacobian's term to ε_p/2
//! ([`super::erm::Neighbours::People`]). For m = 1 the shift and the
//! noise are unit `row`'s (a replacement, shift 2), the Jacobian's term
//! c/(NΛ) against its 2·ln(1 + c/(NΛ)). The solver takes F as the mean
//! over M of the loss and of b̃ = fl(b·fl(M/N̂)), within 2.0…·u·‖b‖/N̂ of
//! b·M/N̂, so the output noise covers the solver's tolerance plus 3u·‖b‖/N̂
//! for ‖b‖ within the tail the lattice is sized for. The count takes
//! 1/[`COUNT_SHARE`] of ε (Laplace), the output noise 1/100 of the rest,
//! as under `row`.

use super::gaussian::analytic_sigma;
use super::{Delta, DpError, Epsilon, contribution::MAX_ROWS};

/// The count gets 1/`COUNT_SHARE` of the release's budget.
pub const COUNT_SHARE: u64 = 100;

/// 2⁻⁴⁰: relative slack for the rounding of λ·M/N (a few units of 2⁻⁵³
/// of M, which the bound turns into a relative error of N̂/m times that,
/// N̂ ≤ 2³⁶).
const ROUNDING: f64 = 1.0 / (1u64 << 40) as f64;

/// N̂ as the fit is normalised by: the noisy count clamped to
/// [1, [`MAX_ROWS`]] (N ≤ 2³⁶, so the clamp loses nothing).
pub fn normaliser(noisy_rows: f64) -> f64 {
    if noisy_rows.is_nan() {
        return 1.0;
    }
    noisy_rows.clamp(1.0, MAX_ROWS as f64)
}

/// Δ = 2m/(λN̂) + 2γ/λ for `rows_per_user` m and the [`normaliser`] N̂,
/// rounded up past the solver's λ·M/N (module docs).
pub fn output_sensitivity(
    normaliser: f64,
    rows_per_user: u32,
    lambda: f64,
    tolerance: f64,
) -> Result<f64, DpError> {
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(DpError::InvalidRegulariser(lambda));
    }
    if !(normaliser.is_finite() && normaliser >= 1.0) || rows_per_user == 0 {
        return Err(DpError::NoExamples);
    }
    let people = 2.0 * f64::from(rows_per_user) / (lambda * normaliser);
    let sensitivity = (people * (1.0 + ROUNDING)
        + (2.0 * tolerance + ROUNDING * 2f64.powi(-8)) / lambda)
        .next_up();
    if !(sensitivity.is_finite() && sensitivity > 0.0) {
        return Err(DpError::InvalidSensitivity(sensitivity));
    }
    Ok(sensitivity)
}

/// The solver's regulariser for J̃: λ·M/N for N kept rows (N > 0), never
/// below λ.
pub fn solver_lambda(lambda: f64, normaliser: f64, rows: usize) -> f64 {
    let normaliser = normaliser.max(rows as f64);
    (lambda * (normaliser / rows as f64)).max(lambda)
}

/// The Gaussian noise multipliers (σ/Δ) of the count and of the model
/// released together at (ε, δ): z_c = 10·z and z_w = z·√(100/99), each
/// rounded up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Multipliers {
    pub count: f64,
    pub model: f64,
}

impl Multipliers {
    pub fn new(epsilon: Epsilon, delta: Delta) -> Result<Self, DpError> {
        let one = analytic_sigma(epsilon.value(), delta.value(), 1.0)?;
        let share = COUNT_SHARE as f64;
        let count = (share.sqrt() * one).next_up();
        let model = (one * (share / (share - 1.0)).sqrt().next_up()).next_up();
        Ok(Multipliers { count, model })
    }
}

/// ε of the count (1/[`COUNT_SHARE`], at least one ledger unit) and of
/// what is normalised by it (the rest), in whole ledger units that add up
/// to ε: pure-ε releases under unit `user` that divide by a noisy count.
pub fn split_epsilon(epsilon: Epsilon) -> Result<(Epsilon, Epsilon), DpError> {
    super::erm::split_share(
        epsilon,
        COUNT_SHARE,
        "epsilon under unit user (split between the noisy count and what it normalises)",
    )
}

#[cfg(test)]
#[path = "erm_people_tests.rs"]
mod tests;
