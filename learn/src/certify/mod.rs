//! A gradient-norm certificate that holds in exact arithmetic, and the
//! floor on λ below which a fit cannot be certified.
//!
//! Output perturbation (sensitivity 2/(Nλ) + 2γ/λ) and the output noise of
//! objective perturbation (2γ/λ) are private only if the released weights
//! ŵ satisfy ‖∇J(ŵ)‖₂ ≤ γ for the **exact** gradient at the floating-point
//! ŵ. The gradient a solver computes is not that: it is rounded. This module
//! computes the gradient once more, accurately, together with a rigorous
//! bound on how far the computed value can be from the exact one.
//!
//! # What is certified
//!
//! For float weights ŵ and the data exactly as stored (the floats X, y, b,
//! λ and the integer N), let
//!
//! ```text
//! g = ∇J(ŵ) = (1/N)·(Σᵢ −yᵢ σ(−yᵢ mᵢ) xᵢ + b) + λŵ,   mᵢ = ŵᵀxᵢ,
//! ```
//!
//! all in exact real arithmetic. [`Objective::certify`] returns a computed
//! gradient ĝ, a vector Ê with |ĝⱼ − gⱼ| ≤ Êⱼ for every j, and
//! `bound` ≥ ‖ĝ‖₂ + ‖Ê‖₂ ≥ ‖g‖₂ (triangle inequality). The certificate holds
//! for any finite data; the domain (‖xᵢ‖₂ ≤ 1) only enters the worst-case
//! analysis behind [`min_lambda`].
//!
//! # Assumptions
//!
//! 1. IEEE 754 binary64 arithmetic, round to nearest, no flush-to-zero
//!    (Rust's default on x86-64 and aarch64). Rust never contracts `a*b + c`
//!    into a fused multiply-add unless the code says `mul_add`, so every
//!    `+ − × ÷ √` below is one correctly rounded operation:
//!    fl(a∘b) = (a∘b)(1 + δ), |δ| ≤ u = 2⁻⁵³, when the result is normal, and
//!    with an absolute error ≤ 2⁻¹⁰⁷⁵ when it is subnormal (Higham,
//!    *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.2: the
//!    standard model, Theorem 2.2, and its form with gradual underflow). Addition and subtraction of floats never
//!    err in the subnormal range, so TwoSum is exact even there.
//! 2. The platform's `exp` (Rust's `f64::exp` calls libm) is accurate to
//!    [`EXP_ULPS`] = 8 ulps of the exact result, i.e. relative error
//!    ≤ 8·2⁻⁵², and to 8·2⁻¹⁰⁷⁴ absolutely where the result is subnormal.
//!    glibc's `sysdeps/x86_64/fpu/libm-test-ulps` (the source of the
//!    manual's "Known Maximum Errors in Math Functions" table) lists 1 ulp
//!    for double `exp`, and its implementation since 2.28
//!    (`sysdeps/ieee754/dbl-64/e_exp.c`) states a worst case below
//!    0.5 + 1.11/128 ulp plus the polynomial's error, about 0.51 ulp. The
//!    assumption is 8 times the documented bound, and costs nothing: its
//!    whole contribution to Ê is about 2·(8·2⁻⁵² + 5u) ≈ 4.6·10⁻¹⁵ per
//!    coordinate (times the column's mean |xᵢⱼ|).
//! 3. N < 2⁵⁰ rows and k < 2³⁰ columns (far beyond what fits in memory),
//!    so that every γₙ = nu/(1 − nu) used below is at most ½.
//!
//! No assumption is made about the data: the certificate holds for any
//! finite X, b and λ, inside the domain ‖xᵢ‖₂ ≤ 1 or not.
//!
//! # The argument, term by term
//!
//! Fix a coordinate j. The certificate pass computes, per row i:
//!
//! - **Margin.** m̂ᵢ and âᵢ ≈ Σₗ|xᵢₗŵₗ| by a dot product in 8 lanes: lane
//!   ℓ sums the products of the columns ≡ ℓ (mod 8) in order, and the eight
//!   lanes are added as a balanced tree. Each product goes through one
//!   multiplication, at most ⌈k/8⌉ lane additions and 3 tree additions, so
//!   by Higham's Lemma 3.1 and the inner-product analysis of §3.1,
//!   |m̂ᵢ − mᵢ| ≤ γ_K Σₗ|xᵢₗŵₗ| with **K = ⌈k/8⌉ + 4**, and
//!   Σₗ|xᵢₗŵₗ| ≤ âᵢ/(1 − γ_K) (a sum of non-negative terms loses at most the
//!   relative γ_K). Eight lanes rather than one sequential sum make K about
//!   k/8 instead of k, which lowers the λ floor about 55-fold at k = 513.
//! - **σ's Lipschitz constant.** σ′ = σ(1 − σ) ≤ ¼, so with ẑ = −yᵢm̂ᵢ and
//!   z = −yᵢmᵢ (negation is exact), |σ(ẑ) − σ(z)| ≤ ¼|m̂ᵢ − mᵢ|.
//! - **σ's evaluation.** [`sigmoid`] computes 1/(1 + e) with
//!   e = exp(−ẑ) for ẑ ≥ 0, or e/(1 + e) with e = exp(ẑ) for ẑ < 0. With
//!   ê = e(1 + δ₁), |δ₁| ≤ ε_exp = [`EXP_ULPS`]·2⁻⁵², one addition and one
//!   division: the first form has relative error ≤ ε_exp·e/(1 + e) + 2u
//!   (to first order), the second ≤ ε_exp + 2u; with second-order terms,
//!   |ŝᵢ − σ(ẑ)| ≤ (ε_exp + 4u)·σ(ẑ) ≤ ε_σ := ε_exp + 4u, plus an absolute
//!   error below 2⁻¹⁰⁷⁰ where e is subnormal.
//! - **Product.** ĉ = −yᵢŝᵢ is exact and |ĉ| ≤ 1; t̂ᵢⱼ = fl(ĉxᵢⱼ) errs by at
//!   most u|xᵢⱼ| (plus 2⁻¹⁰⁷⁵ if subnormal).
//!
//! So the computed term t̂ᵢⱼ differs from the exact tᵢⱼ = −yᵢσ(z)xᵢⱼ by at
//! most |xᵢⱼ|·(u + ε_σ + ¼γ_K âᵢ/(1 − γ_K)), and |t̂ᵢⱼ| ≤ |xᵢⱼ|.
//!
//! - **Compensated sum.** The N terms t̂ᵢⱼ and then bⱼ are added by Ogita,
//!   Rump and Oishi's *Sum2* (cascaded TwoSum: "Accurate sum and dot
//!   product", SIAM J. Sci. Comput. 26(6), 2005, §4; it is
//!   Neumaier's/Kahan–Babuška's compensated summation with Knuth's
//!   branch-free TwoSum, Higham §4.3). Their error bound for Sum2, proved
//!   also in the presence of underflow, gives for n summands pₗ with exact
//!   sum s:
//!   |res − s| ≤ u|s| + γ²ₙ₋₁ Σ|pₗ|. Using |s| ≤ |res| + |res − s|:
//!   |res − s| ≤ (u|res| + γ²ₙ Σ|pₗ|)/(1 − u).
//!
//!   The rows are summed in blocks of a fixed length, each block by Sum2
//!   on some core, and the blocks' running sums then added in block
//!   order by one more TwoSum cascade, their compensations (and the new
//!   low parts) added to the compensation. The bound holds unchanged for
//!   that order: its proof rests on (i) s = S + Σq exactly, S the
//!   cascaded sum and q the n − 1 TwoSum low parts, which holds for any
//!   tree of TwoSums; (ii) Σ|q| ≤ γₙ₋₁Σ|pₗ|, since each |q| ≤ u times
//!   its partial sum and each partial sum is at most (1 + u)^(n−1) Σ|pₗ|
//!   over its leaves, for any tree of depth ≤ n − 1; and (iii) the
//!   float sum of the n − 1 low parts, in any order, errs by at most
//!   γₙ₋₂Σ|q| (Higham, Lemma 3.1 and §4.2). The rows' Ê terms are a sum
//!   of non-negative floats in the same tree, within the N + 12
//!   roundings counted below.
//! - **Division and the regulariser.** q = fl(res/N) (N is an exact float
//!   for N < 2⁵³; with a normaliser, fl(res/M) for the float M, and M for
//!   N in what follows), r = fl(λŵⱼ), ĝⱼ = fl(q + r), each erring by at
//!   most u|result|/(1 − u).
//!
//! Adding up,
//!
//! ```text
//! |ĝⱼ − gⱼ| ≤ (1/N)·[ Σᵢ |xᵢⱼ|·(ε_σ + u + γ²ₙ + ¼γ_K âᵢ/(1−γ_K))
//!                     + u|resⱼ| + γ²ₙ|bⱼ| ]/(1 − u)
//!             + u(|q| + |r| + |ĝⱼ|)/(1 − u) + (underflow terms).
//! ```
//!
//! - **The bound's own rounding.** Êⱼ is computed from that expression in
//!   floating point. Every quantity in it is non-negative and passes
//!   through at most N + 12 roundings, so the computed value is at least
//!   (1 − γ_{N+12}) ≥ ½ times the exact one, and the remaining factors
//!   (1 − u)⁻¹, (1 − γ_K)⁻¹ are below 1 + 10⁻¹⁰. Multiplying by
//!   [`SAFETY`] = 2 therefore covers the rounding of the bound computation
//!   with a wide margin, and adding 2⁻¹⁰⁰⁰ per coordinate covers every
//!   underflow error above (each at most a few units of 2⁻¹⁰⁷⁰ after the
//!   division by N).
//! - **Norms.** fl(‖v‖₂) ≥ (1 − γ_{k+2})‖v‖₂ − √k·2⁻⁵³⁷ (squares that
//!   underflow lose at most 2⁻¹⁰⁷⁴ each), so
//!   `bound` = fl((fl‖ĝ‖ + fl‖Ê‖)·(1 + 2⁻²⁰)) + 2⁻⁵⁰⁰ ≥ ‖ĝ‖₂ + ‖Ê‖₂ for
//!   k < 2³⁰.
//!
//! # The worst case over the domain, and the floor on λ
//!
//! The certificate can only succeed where the exact gradient is small and
//! Ê is smaller still. Ê is dominated by the margin term, which grows with
//! ‖ŵ‖, and ‖ŵ‖ is bounded by public facts alone. For data in the domain
//! (‖xᵢ‖₂ ≤ 1, yᵢ = ±1) and ‖b‖/N ≤ β:
//!
//! (With a normaliser M ≥ N every (1/N)Σᵢ below becomes (1/M)Σᵢ, at most
//! N/M ≤ 1 times as large, J(0) = (N/M)·ln 2 ≤ ln 2, and β bounds ‖b‖/M:
//! each bound holds as stated, so [`min_lambda`] and [`certifiable`] with
//! N rows and β ≥ ‖b‖/M cover the fit.)
//!
//! - J(w*) ≤ J(0) = ln 2 and the loss is ≥ 0, so
//!   (λ/2)‖w*‖² − β‖w*‖ ≤ ln 2, i.e.
//!   ‖w*‖ ≤ (β + √(β² + 2λ ln 2))/λ ≤ 2β/λ + √(2 ln 2/λ)
//!   (which is √(2 ln 2/λ) without the linear term). Also, from
//!   ∇J(w*) = 0, λ‖w*‖ ≤ ‖(1/N)Σ −yᵢσ(·)xᵢ‖ + β ≤ 1 + β. R* is the smaller
//!   of the two bounds.
//! - λ-strong convexity puts any ŵ with ‖∇J(ŵ)‖ ≤ γ within γ/λ of w*, so at
//!   every point the certificate has to accept, ‖ŵ‖ ≤ **R = R* + γ/λ**.
//! - There Σₗ|xᵢₗŵₗ| ≤ ‖xᵢ‖‖ŵ‖ ≤ R, the norm over j of (1/N)Σᵢ|xᵢⱼ|ρᵢ is at
//!   most maxᵢ ρᵢ, ‖(1/N)res‖, ‖q‖ ≤ 1 + β and ‖r‖ ≤ λR ≤ 1 + β + γ, so
//!
//!   ```text
//!   ‖Ê‖ ≤ E(λ) = 2·[ ε_σ + u + γ²ₙ + ¼γ_K(1+γ_K)R/(1−γ_K)
//!                    + 3u(1 + β) + 2u(1 + β + γ) + γ²ₙβ ]·(1 + 2⁻³⁰)
//!         + √k·2⁻¹⁰⁰⁰
//!   ```
//!
//!   (the first term of the margin dominates: E ≈ ½·K·u·R).
//!
//! Why that is the right quantity: the solver ends with Newton steps driven
//! by the certified gradient ĝ (see
//! [`Objective::minimise`](crate::Objective::minimise)). A Newton step whose
//! Hessian has relative error θ (‖Ĥ − H‖ ≤ θλ) and whose gradient has error
//! e leaves an exact gradient of at most θ/(1−θ)·‖g‖ + ‖e‖/(1−θ), to first
//! order (the change of the Hessian along the step is second order: for the
//! logistic loss with ‖xᵢ‖ ≤ 1 the loss Hessian changes by at most a factor
//! e^{‖step‖}, Bach 2010, "Self-concordant analysis for logistic
//! regression"). So the iteration settles where ‖g‖ ≤ ‖e‖/(1 − 2θ), and
//! there the certificate reports at most ‖g‖ + 2‖Ê‖ ≤ (1/(1 − 2θ) + 2)·E.
//! Two conditions make that well below γ:
//!
//! 1. **Certificate:** (E·(1 + 2⁻²⁰) + 2⁻⁵⁰⁰) ≤ γ/8, so the achievable
//!    certified norm is at most (4/3 + 2)/8·γ ≈ 0.42γ.
//! 2. **Hessian:** θλ ≤ λ/8, with the worst-case error of the Hessian as the
//!    solver forms and solves it: ¼γ_{N+4} (any summation order of
//!    (1/N)Σᵢ dᵢxᵢxᵢᵀ, ‖|X|ᵀD|X|/N‖₂ ≤ ¼), ¼(2ε_σ + 3u) (the weights dᵢ),
//!    γ_k·R/(6√3) (a margin error moves dᵢ = σ′(mᵢ) by at most
//!    |σ″| ≤ 1/(6√3) times it), and (u + kγ_{3k+1})·(9/8)(¼ + λ) (adding
//!    λI, and the backward error of Cholesky and the two triangular
//!    solves, |ΔĤ| ≤ γ_{3k+1}|L||Lᵀ| with ‖|L||Lᵀ|‖₂ ≤ k‖Ĥ‖₂, Higham §10.1).
//!
//! Both left-hand sides, relative to their right-hand sides, fall as λ
//! grows, so the feasible λ form an interval [floor, ∞); [`min_lambda`]
//! finds the floor by bisection and [`certifiable`] checks a given λ.
//! Roughly, condition 1 gives λ ≥ 32 ln 2·(K u/γ)² without the linear term
//! and λ ≥ 8 K u β/γ when β² ≫ λ dominates, and condition 2 gives
//! λ ≥ 2 N u once N is large.
//!
//! Floors for γ = 10⁻¹⁰ (the server's tolerance), as [`min_lambda`] computes
//! them (the test `floor_table_matches_the_docs` checks these numbers); d = 1
//! has the floors of d = 2:
//!
//! | d   | K  | N ≤ 10⁶, β = 0 | N = 10⁷, β = 0 | N = 10⁸, β = 0 | N = 10⁴, β = 10⁻² | N = 10³, β = 1 |
//! |-----|----|----------------|----------------|----------------|-------------------|----------------|
//! | 2   | 5  | 6.84e-10       | 2.23e-9        | 2.22e-8        | 4.45e-7           | 4.44e-5        |
//! | 17  | 7  | 1.34e-9        | 2.26e-9        | 2.22e-8        | 6.23e-7           | 6.22e-5        |
//! | 33  | 9  | 2.22e-9        | 2.29e-9        | 2.22e-8        | 8.02e-7           | 8.00e-5        |
//! | 65  | 13 | 4.63e-9        | 4.63e-9        | 2.23e-8        | 1.16e-6           | 1.16e-4        |
//! | 129 | 21 | 1.21e-8        | 1.21e-8        | 2.23e-8        | 1.88e-6           | 1.87e-4        |
//! | 257 | 37 | 3.75e-8        | 3.75e-8        | 3.75e-8        | 3.33e-6           | 3.29e-4        |
//! | 513 | 69 | 1.30e-7        | 1.30e-7        | 1.30e-7        | 6.26e-6           | 6.13e-4        |
//!
//! (N·d ≤ 2·10⁸ on the server, so N = 10⁸ only occurs for d ≤ 2.) The floor
//! for β = 0 does not depend on N below about 10⁶. With one sequential dot
//! product (K = k + 1) instead of eight lanes the floor at d = 513 would be
//! about 55 times higher (7.2e-6).
//!
//! The certificate is what makes a release private; the floor only makes
//! sure the certificate can be earned. At or above the floor the argument
//! above (first order in the step) says the solver reaches a certified point
//! for every data set in the domain, and the property tests in
//! `tests/certified_fit.rs` exercise it on degenerate data at the floor;
//! below the floor a fit may still succeed, but nothing guarantees it, so
//! the server should refuse such λ before it spends any budget.
mod arithmetic;
mod floor;

use ndarray::{Array1, ArrayView1, s};
use thiserror::Error;

use crate::logistic::{Objective, sigmoid};
use crate::passes::{BLOCK_ROWS, block_range, by_core};

use arithmetic::*;
pub use floor::*;

/// u = 2⁻⁵³, the unit roundoff of binary64 with round-to-nearest.
pub const UNIT_ROUNDOFF: f64 = f64::EPSILON / 2.0;

/// The assumed accuracy of the platform's `exp`, in ulps of the exact
/// result (8 times the 1 ulp glibc documents for x86-64).
pub const EXP_ULPS: f64 = 8.0;

/// The factor applied to the computed error bound to cover the rounding of
/// its own computation (which is below a relative 2⁻³, see the module docs).
pub const SAFETY: f64 = 2.0;

/// ε_σ: the bound on the evaluation error of [`sigmoid`], which is ≤ 1.
pub(super) const SIGMOID_ERROR: f64 = EXP_ULPS * f64::EPSILON + 4.0 * UNIT_ROUNDOFF;

/// 2⁻¹⁰⁰⁰: per-coordinate slack for every underflow error.
pub(super) const TINY: f64 = f64::from_bits((1023 - 1000) << 52);

/// 2⁻⁵⁰⁰: slack for squares that underflow inside a norm.
pub(super) const NORM_SLACK: f64 = f64::from_bits((1023 - 500) << 52);

/// 1 + 2⁻²⁰: covers the relative rounding of the two norms and their sum.
pub(super) const NORM_INFLATION: f64 = 1.0 + 1.0 / (1u64 << 20) as f64;

/// Lanes of the certificate's dot product.
pub(super) const LANES: usize = 8;

/// The share of the tolerance the certificate's worst-case error may take.
pub(super) const CERTIFICATE_SHARE: f64 = 1.0 / 8.0;

/// The share of λ the Hessian's worst-case error may take.
pub(super) const HESSIAN_SHARE: f64 = 1.0 / 8.0;

/// max |σ″| = 1/(6√3).
pub(super) const SIGMOID_SECOND_DERIVATIVE: f64 = 0.096_225_044_864_937_6;

/// The gradient at some weights, with a bound on its error that holds in
/// exact arithmetic (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq)]
pub struct Certificate {
    /// ĝ: ∇J(w) computed with compensated summation.
    pub gradient: Array1<f64>,
    /// Ê: |ĝⱼ − ∇J(w)ⱼ| ≤ Êⱼ for the exact gradient at the float w.
    pub error_bound: Array1<f64>,
    /// fl(‖ĝ‖₂): the computed gradient's norm (not a bound).
    pub gradient_norm: f64,
    /// An upper bound on the exact ‖∇J(w)‖₂ (+∞ or NaN if the inputs
    /// were not finite).
    pub bound: f64,
}

impl Objective<'_> {
    /// Certifies the gradient norm at `w`: one pass over the rows.
    ///
    /// The returned [`Certificate::bound`] is ≥ the exact ‖∇J(w)‖₂, under
    /// the assumptions listed in the [module docs](self).
    ///
    /// # Panics
    /// If `w.len() != x.ncols()` or `y.len() != x.nrows()`.
    #[must_use]
    pub fn certify(&self, w: ArrayView1<'_, f64>) -> Certificate {
        let (rows, k) = self.x.dim();
        assert_eq!(w.len(), k, "weights of the wrong length");
        assert_eq!(self.y.len(), rows, "labels of the wrong length");
        let w: Vec<f64> = w.to_vec();
        let summands = rows + usize::from(self.linear.is_some());
        let gamma_k = gamma(margin_depth(k));
        let gamma_n_squared = gamma(summands as f64).powi(2);
        // ρᵢ = ROW_CONSTANT + MARGIN·âᵢ bounds |t̂ᵢⱼ − tᵢⱼ|/|xᵢⱼ|, with the
        // γ²ₙ|t̂ᵢⱼ| ≤ γ²ₙ|xᵢⱼ| of Sum2 folded in.
        let row_constant = SIGMOID_ERROR + UNIT_ROUNDOFF + gamma_n_squared;
        let margin = 0.25 * gamma_k / (1.0 - gamma_k);

        // Each block of rows by Sum2 on its own core, then the blocks'
        // sums added in block order by one more TwoSum cascade (see
        // "Compensated sum" above).
        let block = |range: std::ops::Range<usize>| {
            let mut sums = BlockSums::new(k);
            let mut scratch = vec![0.0f64; k];
            for (row, &y) in self
                .x
                .slice(s![range.clone(), ..])
                .outer_iter()
                .zip(self.y.slice(s![range]))
            {
                let x: &[f64] = if let Some(slice) = row.to_slice() {
                    slice
                } else {
                    for (s, &v) in scratch.iter_mut().zip(row.iter()) {
                        *s = v;
                    }
                    &scratch
                };
                let (m, a) = lane_dot(x, &w);
                let c = -y * sigmoid(-y * m);
                let rho = row_constant + margin * a;
                // Equal-length slices, so the loop compiles without bounds
                // checks and vectorises across columns.
                let (sum, compensation, error) = (
                    &mut sums.sum[..k],
                    &mut sums.compensation[..k],
                    &mut sums.error[..k],
                );
                let x = &x[..k];
                for j in 0..k {
                    let (total, low) = two_sum(sum[j], c * x[j]);
                    sum[j] = total;
                    compensation[j] += low;
                    error[j] += rho * x[j].abs();
                }
            }
            sums
        };
        let parts = by_core(rows.div_ceil(BLOCK_ROWS), |blocks| {
            blocks
                .map(|index| block(block_range(index, rows)))
                .collect::<Vec<_>>()
        });
        let mut total = BlockSums::new(k);
        for part in parts.iter().flatten() {
            for j in 0..k {
                let (sum, low) = two_sum(total.sum[j], part.sum[j]);
                total.sum[j] = sum;
                total.compensation[j] += part.compensation[j] + low;
                total.error[j] += part.error[j];
            }
        }
        let BlockSums {
            sum,
            compensation,
            error,
        } = total;

        let n = self.divisor();
        let mut gradient = Array1::<f64>::zeros(k);
        let mut error_bound = Array1::<f64>::zeros(k);
        for j in 0..k {
            let (mut s, mut comp, mut linear) = (sum[j], compensation[j], 0.0);
            if let Some(b) = self.linear {
                let (total, low) = two_sum(s, b[j]);
                s = total;
                comp += low;
                linear = b[j].abs();
            }
            let res = s + comp;
            let q = res / n;
            let r = self.lambda * w[j];
            let g = q + r;
            let rows_part = error[j] + UNIT_ROUNDOFF * res.abs() + gamma_n_squared * linear;
            let bound = rows_part / n + UNIT_ROUNDOFF * (q.abs() + r.abs() + g.abs());
            gradient[j] = g;
            error_bound[j] = SAFETY * bound + TINY;
        }
        let gradient_norm = norm(&gradient);
        let bound = (gradient_norm + norm(&error_bound)) * NORM_INFLATION + NORM_SLACK;
        Certificate {
            gradient,
            error_bound,
            gradient_norm,
            bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOLERANCE: f64 = 1e-10;

    #[test]
    fn floor_table_matches_the_docs() {
        // (d, [N ≤ 10⁶, 10⁷, 10⁸ with β = 0; N = 10⁴, β = 10⁻²; N = 10³, β = 1])
        let table: [(usize, [f64; 5]); 7] = [
            (2, [6.84e-10, 2.23e-9, 2.22e-8, 4.45e-7, 4.44e-5]),
            (17, [1.34e-9, 2.26e-9, 2.22e-8, 6.23e-7, 6.22e-5]),
            (33, [2.22e-9, 2.29e-9, 2.22e-8, 8.02e-7, 8.00e-5]),
            (65, [4.63e-9, 4.63e-9, 2.23e-8, 1.16e-6, 1.16e-4]),
            (129, [1.21e-8, 1.21e-8, 2.23e-8, 1.88e-6, 1.87e-4]),
            (257, [3.75e-8, 3.75e-8, 3.75e-8, 3.33e-6, 3.29e-4]),
            (513, [1.30e-7, 1.30e-7, 1.30e-7, 6.26e-6, 6.13e-4]),
        ];
        let settings = [
            (1_000_000, 0.0),
            (10_000_000, 0.0),
            (100_000_000, 0.0),
            (10_000, 1e-2),
            (1000, 1.0),
        ];
        for (d, floors) in table {
            for (&(rows, beta), expected) in settings.iter().zip(floors) {
                let floor = min_lambda(d, rows, beta, TOLERANCE).unwrap();
                assert!(
                    (floor / expected - 1.0).abs() < 6e-3,
                    "d = {d}, N = {rows}, β = {beta}: {floor:e} vs {expected:e}"
                );
            }
            // Below 10⁶ rows the floor does not depend on N, and d = 1 is d = 2.
            let small = min_lambda(d, 1, 0.0, TOLERANCE).unwrap();
            assert!((small / floors[0] - 1.0).abs() < 6e-3, "d = {d}");
        }
        assert_eq!(
            min_lambda(1, 50, 0.0, TOLERANCE),
            min_lambda(2, 50, 0.0, TOLERANCE)
        );
    }

    #[test]
    fn the_floor_is_the_edge_of_the_feasible_set() {
        for d in [1, 2, 9, 33, 513] {
            for rows in [1, 1000, 3_000_000] {
                for beta in [0.0, 1e-3, 0.5] {
                    let floor = min_lambda(d, rows, beta, TOLERANCE).unwrap();
                    assert_eq!(certifiable(d, rows, floor, beta, TOLERANCE), Ok(()));
                    for above in [1.0 + 1e-9, 1.5, 10.0, 1e6, 1e30] {
                        assert_eq!(
                            certifiable(d, rows, floor * above, beta, TOLERANCE),
                            Ok(()),
                            "d = {d}, N = {rows}, β = {beta}, λ = floor·{above}"
                        );
                    }
                    for below in [1.0 - 1e-9, 0.5, 1e-3] {
                        assert_eq!(
                            certifiable(d, rows, floor * below, beta, TOLERANCE),
                            Err(Infeasible::LambdaBelowFloor {
                                lambda: floor * below,
                                floor,
                                tolerance: TOLERANCE
                            }),
                            "d = {d}, N = {rows}, β = {beta}, λ = floor·{below}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_floor_grows_with_dimension_linear_term_and_rows() {
        let floor = |d, rows, beta| min_lambda(d, rows, beta, TOLERANCE).unwrap();
        assert!(floor(2, 100, 0.0) < floor(33, 100, 0.0));
        assert!(floor(33, 100, 0.0) < floor(513, 100, 0.0));
        assert!(floor(33, 100, 0.0) < floor(33, 100, 1e-3));
        assert!(floor(33, 100, 1e-3) < floor(33, 100, 1.0));
        assert!(floor(2, 1_000_000, 0.0) < floor(2, 50_000_000, 0.0));
        // A looser tolerance lowers it.
        assert!(min_lambda(33, 100, 0.0, 1e-8).unwrap() < floor(33, 100, 0.0));
    }

    #[test]
    fn infeasible_parameters_are_refused() {
        // λ well below the floor, with and without a linear term.
        assert!(matches!(
            certifiable(513, 1000, 1e-9, 0.0, TOLERANCE),
            Err(Infeasible::LambdaBelowFloor { .. })
        ));
        assert!(matches!(
            certifiable(33, 1000, 1e-6, 1.0, TOLERANCE),
            Err(Infeasible::LambdaBelowFloor { .. })
        ));
        assert!(matches!(
            certifiable(2, 100_000_000, 1e-9, 0.0, TOLERANCE),
            Err(Infeasible::LambdaBelowFloor { .. })
        ));
        // A tolerance no λ can certify.
        assert_eq!(
            certifiable(33, 1000, 1.0, 0.0, 1e-14),
            Err(Infeasible::ToleranceTooSmall { tolerance: 1e-14 })
        );
        assert_eq!(
            min_lambda(33, 1000, 0.0, 1e-14),
            Err(Infeasible::ToleranceTooSmall { tolerance: 1e-14 })
        );
        // Malformed parameters.
        let invalid = |result: Result<(), Infeasible>, name: &str| match result {
            Err(Infeasible::InvalidParameter { what, .. }) => assert_eq!(what, name),
            other => panic!("{name}: {other:?}"),
        };
        invalid(certifiable(0, 10, 1.0, 0.0, TOLERANCE), "columns");
        invalid(certifiable(3, 0, 1.0, 0.0, TOLERANCE), "rows");
        for lambda in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            invalid(certifiable(3, 10, lambda, 0.0, TOLERANCE), "lambda");
        }
        for beta in [-1e-3, f64::NAN, f64::INFINITY] {
            invalid(
                certifiable(3, 10, 1.0, beta, TOLERANCE),
                "linear_norm_over_n",
            );
        }
        for tolerance in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            invalid(certifiable(3, 10, 1.0, 0.0, tolerance), "tolerance");
        }
    }

    #[test]
    fn lane_dot_has_the_stated_depth() {
        // With every product 1 + 2⁻⁵² and enough terms, rounding happens;
        // the error stays within γ_K Σ|xw| (checked against an exact sum).
        for k in [1, 2, 7, 8, 9, 33, 100, 513] {
            let x: Vec<f64> = (0..k).map(|i| 1.0 + (i as f64) * f64::EPSILON).collect();
            let w: Vec<f64> = (0..k)
                .map(|i| if i % 3 == 0 { 1e-3 } else { 1.0 / 3.0 })
                .collect();
            let (m, a) = lane_dot(&x, &w);
            // Exact: Σ as i128 multiples of 2⁻¹⁵⁰ is overkill; use the
            // compensated sum of exact products (TwoProduct via mul_add).
            let mut s = 0.0;
            let mut c = 0.0;
            for (&xv, &wv) in x.iter().zip(&w) {
                let p = xv * wv;
                let low = xv.mul_add(wv, -p);
                let (t, e) = two_sum(s, p);
                s = t;
                c += e + low;
            }
            let exact = s + c;
            let bound = gamma(margin_depth(k)) * a / (1.0 - gamma(margin_depth(k)));
            assert!(
                (m - exact).abs() <= bound,
                "k = {k}: {m} vs {exact}, bound {bound:e}"
            );
            assert!(margin_depth(k) <= (k as f64 / 8.0).ceil() + 4.0);
        }
    }
}
