//! L2-regularised logistic regression: the objective, its derivatives and a
//! precise Newton solver.
//!
//! The objective is the one of Chaudhuri, Monteleoni and Sarwate (2011,
//! "Differentially private empirical risk minimization"), including the
//! random linear term that objective perturbation adds:
//!
//! ```text
//! J(w) = (1/M) Σᵢ log(1 + exp(−yᵢ wᵀxᵢ)) + (λ/2)‖w‖² + (1/M) bᵀw
//! ```
//!
//! with M the number of rows N, or a public normaliser M ≥ N where N is
//! private ([`Objective::normaliser`]).
//!
//! Objective perturbation is only private if the *exact* minimiser is
//! released, so the solver is Newton's method run to a tight gradient-norm
//! tolerance rather than a few epochs of a first-order method, and it stops
//! only once that tolerance is certified for the exact gradient at the
//! float weights it returns ([`crate::certify`]).

use ndarray::{Array1, Array2, ArrayView1, ArrayView2};
use thiserror::Error;

use crate::passes::{Precision, Wanted, sums};

/// Newton iterations driven by the fast gradient before the certified
/// phase takes over. Newton with a line search on this strongly convex
/// objective normally needs fewer than 20, and about log(1/λ) on separable
/// data; the cap only bounds pathological cases, whose time is paid for.
const MAX_ITERATIONS: usize = 500;

/// Newton iterations of the certified phase (see [`Objective::minimise`]).
const MAX_CERTIFIED_ITERATIONS: usize = 100;

/// Step halvings before the line search gives up on a Newton direction.
const MAX_HALVINGS: usize = 60;

/// Armijo sufficient-decrease constant.
const ARMIJO: f64 = 1e-4;

/// Numerically stable logistic function `1 / (1 + e^−z)`.
///
/// Evaluates `e` only at non-positive arguments, so it never overflows and
/// keeps full relative precision in both tails.
#[must_use]
pub fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// `log(1 + e^z)` without overflow for large `z`, and with full relative
/// precision for very negative `z`, where the value is `≈ e^z` (the naive
/// `(1 + e^z).ln()` rounds it to 0 below z ≈ −37).
#[must_use]
pub fn log1p_exp(z: f64) -> f64 {
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

/// Predicted probabilities `σ(wᵀxᵢ)` of the positive class for each row.
///
/// # Panics
/// If `w.len() != x.ncols()`.
#[must_use]
pub fn probabilities(x: ArrayView2<'_, f64>, w: ArrayView1<'_, f64>) -> Array1<f64> {
    x.dot(&w).mapv_into(sigmoid)
}

/// Why a fit was refused or failed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum FitError {
    /// No rows, or no columns: there is nothing to fit.
    #[error("empty data: {rows} rows × {columns} columns")]
    EmptyData { rows: usize, columns: usize },
    /// Two inputs disagree in size.
    #[error("dimension mismatch: {what} has length {found}, expected {expected}")]
    DimensionMismatch {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// An input holds NaN or ±∞.
    #[error("non-finite value in {what}")]
    NonFinite { what: &'static str },
    /// A label is neither −1 nor +1.
    #[error("label {value} in row {row} is not -1 or +1")]
    InvalidLabel { row: usize, value: f64 },
    /// λ must be positive: it makes the objective strongly convex (a unique
    /// minimiser, an invertible Hessian) and the privacy analysis needs it.
    #[error("regularisation strength must be positive, got {lambda}")]
    NonPositiveLambda { lambda: f64 },
    /// A normaliser must be finite and at least the number of rows.
    #[error("normaliser {normaliser} is not a finite number of at least the {rows} rows")]
    InvalidNormaliser { normaliser: f64, rows: usize },
    /// The stopping tolerance must be a positive finite number.
    #[error("tolerance must be positive and finite, got {tolerance}")]
    InvalidTolerance { tolerance: f64 },
    /// The certified bound on the exact gradient norm did not reach the
    /// tolerance (`gradient_norm` is the smallest certified bound reached).
    /// Cannot happen for data in the domain when
    /// [`certifiable`](crate::certifiable) accepted the parameters.
    #[error(
        "not converged after {iterations} iterations: certified gradient norm {gradient_norm:e}"
    )]
    NotConverged {
        gradient_norm: f64,
        iterations: usize,
    },
}

/// A converged fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The minimiser `w`.
    pub weights: Array1<f64>,
    /// Newton iterations taken.
    pub iterations: usize,
    /// The computed `‖∇J(w)‖₂` at the returned weights (compensated
    /// summation; a floating-point value, not a bound).
    pub gradient_norm: f64,
    /// An upper bound on the exact `‖∇J(w)‖₂` at the returned weights
    /// (see [`crate::certify`]); ≤ the requested tolerance.
    pub certified_gradient_norm: f64,
    /// `J(w)` at the returned weights.
    pub value: f64,
}

/// The objective `J(w)` for one data set.
///
/// ```text
/// J(w) = (1/M) Σᵢ log(1 + exp(−yᵢ wᵀxᵢ)) + (λ/2)‖w‖² + (1/M) bᵀw
/// ```
///
/// M is the number of rows N unless a `normaliser` M ≥ N is given. The
/// linear term is scaled by `1/M` like the loss, exactly as in
/// Chaudhuri–Monteleoni–Sarwate (2011), Algorithm 2: callers pass the raw
/// noise vector `b` they drew, not `b/M`.
#[derive(Debug, Clone, Copy)]
pub struct Objective<'a> {
    /// Feature matrix, one row per example (N × k).
    pub x: ArrayView2<'a, f64>,
    /// Labels, −1 or +1 (length N).
    pub y: ArrayView1<'a, f64>,
    /// L2 regularisation strength λ > 0.
    pub lambda: f64,
    /// `Some(b)` adds `(1/M) bᵀw` (objective perturbation); length k.
    pub linear: Option<ArrayView1<'a, f64>>,
    /// `Some(M)` divides the loss and the linear term by M instead of N:
    /// a fit whose normaliser is public while N is not (privacy unit
    /// `user`). M ≥ N keeps every bound of [`crate::certify`] (each term
    /// it divides can only shrink).
    pub normaliser: Option<f64>,
}

impl Objective<'_> {
    /// Checks sizes, finiteness, labels and λ, so that [`Objective::minimise`]
    /// can report bad input as a [`FitError`] instead of a panic or NaN.
    ///
    /// # Errors
    /// The first problem found, as a [`FitError`].
    pub fn validate(&self) -> Result<(), FitError> {
        let (rows, columns) = self.x.dim();
        if rows == 0 || columns == 0 {
            return Err(FitError::EmptyData { rows, columns });
        }
        if self.y.len() != rows {
            return Err(FitError::DimensionMismatch {
                what: "y",
                expected: rows,
                found: self.y.len(),
            });
        }
        if let Some(b) = self.linear {
            if b.len() != columns {
                return Err(FitError::DimensionMismatch {
                    what: "linear",
                    expected: columns,
                    found: b.len(),
                });
            }
            if !b.iter().all(|v| v.is_finite()) {
                return Err(FitError::NonFinite { what: "linear" });
            }
        }
        if let Some(normaliser) = self.normaliser
            && !(normaliser.is_finite() && normaliser >= rows as f64)
        {
            return Err(FitError::InvalidNormaliser { normaliser, rows });
        }
        if !self.lambda.is_finite() {
            return Err(FitError::NonFinite { what: "lambda" });
        }
        if self.lambda <= 0.0 {
            return Err(FitError::NonPositiveLambda {
                lambda: self.lambda,
            });
        }
        if !self.x.iter().all(|v| v.is_finite()) {
            return Err(FitError::NonFinite { what: "x" });
        }
        for (row, &value) in self.y.iter().enumerate() {
            if value.is_nan() {
                return Err(FitError::NonFinite { what: "y" });
            }
            if value != 1.0 && value != -1.0 {
                return Err(FitError::InvalidLabel { row, value });
            }
        }
        Ok(())
    }

    /// `J(w)`.
    ///
    /// # Panics
    /// If `w.len() != x.ncols()` or `y.len() != x.nrows()`.
    #[must_use]
    pub fn value(&self, w: ArrayView1<'_, f64>) -> f64 {
        self.evaluate(w, false).0
    }

    /// `∇J(w) = (1/M) Σᵢ −yᵢ σ(−yᵢ wᵀxᵢ) xᵢ + λw + (1/M) b`.
    ///
    /// # Panics
    /// If `w.len() != x.ncols()` or `y.len() != x.nrows()`.
    #[must_use]
    pub fn gradient(&self, w: ArrayView1<'_, f64>) -> Array1<f64> {
        self.evaluate(w, true).1
    }

    /// `∇²J(w) = (1/M) Xᵀ D X + λI` with `Dᵢᵢ = σ(wᵀxᵢ) σ(−wᵀxᵢ)`.
    ///
    /// The O(N k²) step of a fit, so the rows are split across the available
    /// cores (each part sums its own k×k matrix, then the parts are added).
    ///
    /// # Panics
    /// If `w.len() != x.ncols()`.
    #[must_use]
    pub fn hessian(&self, w: ArrayView1<'_, f64>) -> Array2<f64> {
        self.hessian_in(w, Precision::Double)
    }

    fn hessian_in(&self, w: ArrayView1<'_, f64>, precision: Precision) -> Array2<f64> {
        let wanted = Wanted {
            loss: false,
            gradient: false,
            hessian: Some(precision),
        };
        let gram = sums(self.x, self.y, w, wanted).hessian;
        self.hessian_of(gram.unwrap_or_else(|| Array2::zeros((w.len(), w.len()))))
    }

    /// M: the normaliser, or the number of rows.
    pub(crate) fn divisor(&self) -> f64 {
        self.normaliser.unwrap_or(self.x.nrows() as f64)
    }

    /// `(1/M)·gram + λI` for `gram = Σᵢ dᵢ xᵢxᵢᵀ`.
    fn hessian_of(&self, mut gram: Array2<f64>) -> Array2<f64> {
        gram *= 1.0 / self.divisor();
        for j in 0..gram.nrows() {
            gram[(j, j)] += self.lambda;
        }
        gram
    }

    /// Minimises `J` from `w = 0` until the exact gradient norm at the
    /// returned float weights is certified to be ≤ `tolerance`
    /// ([`Objective::certify`]).
    ///
    /// Two phases:
    ///
    /// 1. Newton's method with a backtracking (Armijo) line search on the
    ///    fast gradient, until its norm is ≤ `tolerance/2` or no step along
    ///    the Newton direction improves anything (the rounding floor of the
    ///    fast evaluation). Each iteration costs one pass forming the Hessian
    ///    (an N×k×k matrix product, in row blocks, on all cores; in single
    ///    precision while the steps keep converging faster, then in double)
    ///    plus one cheap pass per line-search trial (on all cores); the k×k
    ///    system is solved by Cholesky.
    /// 2. Certification: one pass computing the gradient with compensated
    ///    summation and a bound on its error. Usually that bound is already
    ///    ≤ `tolerance` and the fit returns. Otherwise Newton steps driven by
    ///    the certified gradient follow, each accepted only if it lowers the
    ///    certified bound, until the bound is ≤ `tolerance`.
    ///
    /// Neither phase has any other way out than success or an exhausted
    /// budget: a failed line search ends phase 1 (the certificate then
    /// decides), and a Hessian that rounding made indefinite is shifted
    /// until it factors. When [`certifiable`](crate::certifiable) accepts
    /// the public parameters, the analysis in [`crate::certify`] puts the
    /// point where the certified phase settles at a certified bound of at
    /// most about 0.42·`tolerance` (to first order) for any data in the
    /// domain, so the fit returns.
    ///
    /// # Errors
    /// Invalid input (see [`Objective::validate`]), a non-positive
    /// tolerance, or [`FitError::NotConverged`] when the certified bound
    /// cannot be brought to `tolerance` (a tolerance below what rounding
    /// allows for these data and λ).
    pub fn minimise(&self, tolerance: f64) -> Result<Fit, FitError> {
        self.validate()?;
        if !(tolerance > 0.0 && tolerance.is_finite()) {
            return Err(FitError::InvalidTolerance { tolerance });
        }
        let start = Array1::<f64>::zeros(self.x.ncols());
        let (w, value, iterations) = self.newton_phase(start, 0.5 * tolerance);
        self.certified_phase(w, value, iterations, tolerance)
    }

    /// Phase 1 of [`Objective::minimise`]: Newton with a line search on the
    /// fast gradient from `w`, until its norm is ≤ `target`, no step helps,
    /// or [`MAX_ITERATIONS`]. Returns (w, J(w), iterations).
    fn newton_phase(&self, mut w: Array1<f64>, target: f64) -> (Array1<f64>, f64, usize) {
        // Single precision while Newton's steps keep converging faster
        // (each full step's ratio ‖g′‖/‖g‖ below the last one's, as in
        // Newton's quadratic phase); a full step that converged no faster
        // than the last is the approximate Hessian's linear rate, and the
        // rest of the phase runs in double precision.
        let mut precision = Precision::Single;
        let mut last_ratio = f64::INFINITY;
        let (mut value, mut gradient, mut hessian) = self.evaluate_with(w.view(), Some(precision));
        let mut gradient_norm = norm(&gradient);
        let mut iterations = 0;
        while gradient_norm > target && iterations < MAX_ITERATIONS {
            iterations += 1;
            let hessian_here = hessian
                .take()
                .unwrap_or_else(|| self.hessian_in(w.view(), precision));
            let direction = shifted_newton_direction(&hessian_here, self.lambda, &gradient);
            let slope = gradient.dot(&direction);
            // The full step's pass also forms the Hessian there, which the
            // next iteration needs, unless Newton's quadratic rate (the
            // next ratio about the square of the last) says the phase ends
            // at that step.
            let ends = gradient_norm * last_ratio * last_ratio < 0.1 * target;

            // Near the optimum the decrease in J is below the rounding noise
            // of evaluating J, and Armijo's test becomes a coin toss. There,
            // a step that leaves J unchanged up to that noise is accepted if
            // it shrinks the gradient, which Newton steps do quadratically.
            let noise = 1e-13 * (value.abs() + 1.0);
            let mut step = 1.0;
            let mut accepted = None;
            for _ in 0..MAX_HALVINGS {
                let trial = &w + &(&direction * step);
                let with_hessian = (step == 1.0 && !ends).then_some(precision);
                let (trial_value, trial_gradient, trial_hessian) =
                    self.evaluate_with(trial.view(), with_hessian);
                let trial_norm = norm(&trial_gradient);
                let armijo = trial_value <= value + ARMIJO * step * slope;
                let flat = trial_value <= value + noise && trial_norm < gradient_norm;
                if trial_value.is_finite() && trial_norm.is_finite() && (armijo || flat) {
                    accepted = Some((
                        trial,
                        trial_value,
                        trial_gradient,
                        trial_norm,
                        trial_hessian,
                    ));
                    break;
                }
                step *= 0.5;
            }
            // No progress along the Newton direction: the fast gradient is as
            // small as its rounding lets it get. The certificate decides.
            let Some((trial, trial_value, trial_gradient, trial_norm, trial_hessian)) = accepted
            else {
                break;
            };
            let ratio = trial_norm / gradient_norm;
            if step == 1.0 && ratio >= last_ratio {
                precision = Precision::Double;
            }
            last_ratio = if step == 1.0 { ratio } else { f64::INFINITY };
            hessian = trial_hessian.filter(|_| precision == Precision::Single);
            w = trial;
            value = trial_value;
            gradient = trial_gradient;
            gradient_norm = trial_norm;
        }
        (w, value, iterations)
    }

    /// Phase 2 of [`Objective::minimise`]: certifies `w` (whose objective
    /// value is `value`); while the certified bound exceeds `tolerance`,
    /// takes Newton steps driven by the certified gradient, backtracking
    /// until the certified bound falls. Along the Newton direction
    /// d‖∇J‖²/dt = −2 gᵀ H Ĥ⁻¹ g < 0 whenever Ĥ is within λ/2 of H, so a
    /// short enough step lowers the bound until rounding dominates.
    fn certified_phase(
        &self,
        mut w: Array1<f64>,
        mut value: f64,
        mut iterations: usize,
        tolerance: f64,
    ) -> Result<Fit, FitError> {
        let mut certificate = self.certify(w.view());
        let mut moved = false;
        let mut certified_iterations = 0;
        // A NaN bound is never ≤ tolerance: it is not certified.
        while certificate.bound.is_nan() || certificate.bound > tolerance {
            if certified_iterations == MAX_CERTIFIED_ITERATIONS {
                return Err(FitError::NotConverged {
                    gradient_norm: certificate.bound,
                    iterations,
                });
            }
            certified_iterations += 1;
            iterations += 1;
            let direction = self.newton_direction(w.view(), &certificate.gradient);
            let mut step = 1.0;
            let mut accepted = None;
            for _ in 0..MAX_HALVINGS {
                let trial = &w + &(&direction * step);
                let trial_certificate = self.certify(trial.view());
                if trial_certificate.bound < certificate.bound {
                    accepted = Some((trial, trial_certificate));
                    break;
                }
                step *= 0.5;
            }
            let Some((trial, trial_certificate)) = accepted else {
                return Err(FitError::NotConverged {
                    gradient_norm: certificate.bound,
                    iterations,
                });
            };
            w = trial;
            certificate = trial_certificate;
            moved = true;
        }
        if moved {
            value = self.value(w.view());
        }
        Ok(Fit {
            weights: w,
            iterations,
            gradient_norm: certificate.gradient_norm,
            certified_gradient_norm: certificate.bound,
            value,
        })
    }

    /// The Newton direction −Ĥ⁻¹g at `w`. In exact arithmetic the Hessian is
    /// ⪰ λI; should rounding make the computed one fail to factor, a shift
    /// λ, 16λ, 256λ, … is added until it does (a shifted Newton step is
    /// still a descent direction), and as a last resort the direction is
    /// −g.
    fn newton_direction(&self, w: ArrayView1<'_, f64>, gradient: &Array1<f64>) -> Array1<f64> {
        shifted_newton_direction(&self.hessian(w), self.lambda, gradient)
    }

    /// `J(w)` and, if asked, `∇J(w)`, in one pass over the rows.
    fn evaluate(&self, w: ArrayView1<'_, f64>, with_gradient: bool) -> (f64, Array1<f64>) {
        let wanted = Wanted {
            loss: true,
            gradient: with_gradient,
            hessian: None,
        };
        let (value, gradient, _) = self.evaluate_wanted(w, wanted);
        (value, gradient)
    }

    /// `J(w)`, `∇J(w)` and, in `hessian`'s precision if asked, `∇²J(w)`,
    /// in one pass over the rows.
    fn evaluate_with(
        &self,
        w: ArrayView1<'_, f64>,
        hessian: Option<Precision>,
    ) -> (f64, Array1<f64>, Option<Array2<f64>>) {
        let wanted = Wanted {
            loss: true,
            gradient: true,
            hessian,
        };
        self.evaluate_wanted(w, wanted)
    }

    fn evaluate_wanted(
        &self,
        w: ArrayView1<'_, f64>,
        wanted: Wanted,
    ) -> (f64, Array1<f64>, Option<Array2<f64>>) {
        let inv_n = 1.0 / self.divisor();
        let sums = sums(self.x, self.y, w, wanted);
        let mut value = sums.loss * inv_n + 0.5 * self.lambda * w.dot(&w);
        if let Some(b) = self.linear {
            value += b.dot(&w) * inv_n;
        }
        let mut gradient = sums.gradient;
        if wanted.gradient {
            gradient *= inv_n;
            gradient.scaled_add(self.lambda, &w);
            if let Some(b) = self.linear {
                gradient.scaled_add(inv_n, &b);
            }
        }
        (
            value,
            gradient,
            sums.hessian.map(|gram| self.hessian_of(gram)),
        )
    }
}

fn norm(v: &Array1<f64>) -> f64 {
    v.dot(v).sqrt()
}

/// −(H + μI)⁻¹g for the smallest μ in 0, λ, 16λ, 256λ, … for which the
/// Cholesky factorisation succeeds; −g if none does (only for a non-finite
/// H).
fn shifted_newton_direction(
    hessian: &Array2<f64>,
    lambda: f64,
    gradient: &Array1<f64>,
) -> Array1<f64> {
    let mut shift = 0.0f64;
    while shift.is_finite() {
        let mut factor = hessian.clone();
        for j in 0..factor.nrows() {
            factor[(j, j)] += shift;
        }
        if cholesky_in_place(&mut factor).is_ok() {
            return -cholesky_solve(&factor, gradient);
        }
        shift = if shift == 0.0 { lambda } else { 16.0 * shift };
    }
    -gradient
}

/// Overwrites the lower triangle of the symmetric positive definite `a` with
/// its Cholesky factor `L` (`a = L Lᵀ`); the upper triangle is not read.
/// Fails with the column of the first non-positive pivot.
///
/// Hand-written because k ≤ a few hundred makes the O(k³) cost negligible
/// next to forming the Hessian, and it avoids a LAPACK dependency.
pub fn cholesky_in_place(a: &mut Array2<f64>) -> Result<(), usize> {
    let k = a.nrows();
    for j in 0..k {
        let mut pivot = a[(j, j)];
        for p in 0..j {
            pivot -= a[(j, p)] * a[(j, p)];
        }
        if !(pivot > 0.0 && pivot.is_finite()) {
            return Err(j);
        }
        let diagonal = pivot.sqrt();
        a[(j, j)] = diagonal;
        for i in j + 1..k {
            let mut sum = a[(i, j)];
            for p in 0..j {
                sum -= a[(i, p)] * a[(j, p)];
            }
            a[(i, j)] = sum / diagonal;
        }
    }
    Ok(())
}

/// Solves `L Lᵀ x = rhs` given the factor from [`cholesky_in_place`].
pub fn cholesky_solve(l: &Array2<f64>, rhs: &Array1<f64>) -> Array1<f64> {
    let k = l.nrows();
    let mut x = rhs.clone();
    for i in 0..k {
        let mut sum = x[i];
        for p in 0..i {
            sum -= l[(i, p)] * x[p];
        }
        x[i] = sum / l[(i, i)];
    }
    for i in (0..k).rev() {
        let mut sum = x[i];
        for p in i + 1..k {
            sum -= l[(p, i)] * x[p];
        }
        x[i] = sum / l[(i, i)];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array, array, s};

    /// A small deterministic data set (LCG), features in [0, 1) plus an
    /// intercept column, labels from a fixed logistic model.
    fn synthetic(rows: usize, k: usize, seed: u64) -> (Array2<f64>, Array1<f64>) {
        let mut state = seed;
        let mut uniform = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut x = Array2::<f64>::zeros((rows, k));
        let mut y = Array1::<f64>::zeros(rows);
        for i in 0..rows {
            x[(i, 0)] = 1.0;
            let mut margin = -0.5;
            for j in 1..k {
                x[(i, j)] = uniform();
                margin += if j % 2 == 0 { 1.5 } else { -1.0 } * x[(i, j)];
            }
            y[i] = if uniform() < sigmoid(margin) {
                1.0
            } else {
                -1.0
            };
        }
        (x, y)
    }

    #[test]
    fn sigmoid_extremes_and_symmetry() {
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(800.0), 1.0);
        assert_eq!(sigmoid(-800.0), 0.0);
        assert!((sigmoid(-700.0) / (-700.0f64).exp() - 1.0).abs() < 1e-12);
        assert_eq!(sigmoid(1e-20), 0.5);
        assert_eq!(sigmoid(-1e-20), 0.5);
        assert!((sigmoid(-40.0) / (-40.0f64).exp() - 1.0).abs() < 1e-15);
        for z in [-30.0, -3.0, -0.1, 0.2, 5.0, 30.0] {
            assert!((sigmoid(z) + sigmoid(-z) - 1.0).abs() < 1e-15, "{z}");
        }
    }

    #[test]
    fn log1p_exp_extremes() {
        assert_eq!(log1p_exp(800.0), 800.0);
        assert_eq!(log1p_exp(-800.0), 0.0);
        assert_eq!(log1p_exp(0.0), std::f64::consts::LN_2);
        assert_eq!(log1p_exp(1e-20), std::f64::consts::LN_2);
        assert_eq!(log1p_exp(-1e-20), std::f64::consts::LN_2);
        // Tail keeps relative precision: log(1 + e^−50) = e^−50 (1 − e^−50/2 …).
        assert!((log1p_exp(-50.0) / (-50.0f64).exp() - 1.0).abs() < 1e-15);
        assert!((log1p_exp(-700.0) / (-700.0f64).exp() - 1.0).abs() < 1e-12);
        assert!((log1p_exp(40.0) - 40.0 - (-40.0f64).exp()).abs() < 1e-14);
        // log(1 + e^z) − log(1 + e^−z) = z
        for z in [0.3, 2.0, 17.0, 36.0, 100.0] {
            assert!((log1p_exp(z) - log1p_exp(-z) - z).abs() < 1e-13, "{z}");
        }
    }

    #[test]
    fn sigmoid_and_log1p_exp_monotone() {
        let grid: Vec<f64> = (-4000..=4000).map(|i| f64::from(i) * 0.2).collect();
        for pair in grid.windows(2) {
            assert!(sigmoid(pair[0]) <= sigmoid(pair[1]), "{pair:?}");
            assert!(log1p_exp(pair[0]) <= log1p_exp(pair[1]), "{pair:?}");
            assert!(sigmoid(pair[0]).is_finite() && log1p_exp(pair[0]).is_finite());
        }
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let (x, y) = synthetic(300, 4, 7);
        let b = array![0.7, -1.1, 0.4, 2.0];
        let objective = Objective {
            x: x.view(),
            y: y.view(),
            lambda: 0.05,
            linear: Some(b.view()),
            normaliser: None,
        };
        let w = array![0.3, -0.8, 1.2, 0.1];
        let gradient = objective.gradient(w.view());
        let h = 1e-6;
        for j in 0..4 {
            let mut plus = w.clone();
            plus[j] += h;
            let mut minus = w.clone();
            minus[j] -= h;
            let numeric =
                (objective.value(plus.view()) - objective.value(minus.view())) / (2.0 * h);
            assert!(
                (numeric - gradient[j]).abs() < 1e-8,
                "coordinate {j}: {numeric} vs {}",
                gradient[j]
            );
        }
    }

    #[test]
    fn hessian_matches_finite_differences_of_gradient() {
        // More rows than one block, so the blocking is exercised.
        let (x, y) = synthetic(2 * 2_048 + 1234, 3, 11);
        let objective = Objective {
            x: x.view(),
            y: y.view(),
            lambda: 0.01,
            linear: None,
            normaliser: None,
        };
        let w = array![0.2, -0.4, 0.9];
        let hessian = objective.hessian(w.view());
        let h = 1e-5;
        for j in 0..3 {
            let mut plus = w.clone();
            plus[j] += h;
            let mut minus = w.clone();
            minus[j] -= h;
            let column =
                (objective.gradient(plus.view()) - objective.gradient(minus.view())) / (2.0 * h);
            for i in 0..3 {
                assert!((column[i] - hessian[(i, j)]).abs() < 1e-8, "({i}, {j})");
            }
        }
    }

    #[test]
    fn cholesky_solves_spd_system() {
        let a = array![[4.0, 2.0, 0.4], [2.0, 5.0, 1.0], [0.4, 1.0, 3.0]];
        let rhs = array![1.0, -2.0, 0.5];
        let mut l = a.clone();
        cholesky_in_place(&mut l).unwrap();
        let x = cholesky_solve(&l, &rhs);
        let residual = a.dot(&x) - &rhs;
        assert!(residual.iter().all(|r| r.abs() < 1e-14), "{residual}");

        let mut indefinite = array![[1.0, 2.0], [2.0, 1.0]];
        assert_eq!(cholesky_in_place(&mut indefinite), Err(1));
    }

    #[test]
    fn minimise_reaches_zero_gradient_and_beats_perturbations() {
        let (x, y) = synthetic(5000, 6, 3);
        let b = Array::linspace(-2.0, 2.0, 6);
        for linear in [None, Some(b.view())] {
            let objective = Objective {
                x: x.view(),
                y: y.view(),
                lambda: 1e-3,
                linear,
                normaliser: None,
            };
            let fit = objective.minimise(1e-10).unwrap();
            assert!(fit.gradient_norm <= 1e-10);
            assert!(norm(&objective.gradient(fit.weights.view())) <= 1e-10);
            assert_eq!(fit.value, objective.value(fit.weights.view()));
            for j in 0..6 {
                for delta in [-1e-3, 1e-3] {
                    let mut w = fit.weights.clone();
                    w[j] += delta;
                    assert!(objective.value(w.view()) > fit.value);
                }
            }
        }
    }

    #[test]
    fn linear_term_is_scaled_by_one_over_n() {
        let (x, y) = synthetic(40, 3, 5);
        let b = array![1.0, 2.0, -3.0];
        let w = array![0.5, -0.25, 1.0];
        let plain = Objective {
            x: x.view(),
            y: y.view(),
            lambda: 0.1,
            linear: None,
            normaliser: None,
        };
        let perturbed = Objective {
            linear: Some(b.view()),
            ..plain
        };
        let expected = b.dot(&w) / 40.0;
        let got = perturbed.value(w.view()) - plain.value(w.view());
        assert!((got - expected).abs() < 1e-15, "{got} vs {expected}");
        let gradient_shift = perturbed.gradient(w.view()) - plain.gradient(w.view());
        assert!((gradient_shift - &b / 40.0).iter().all(|d| d.abs() < 1e-15));
    }

    #[test]
    fn matches_scipy_reference() {
        let reference: serde_json::Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/reference.json"
        )))
        .unwrap();
        let to_vec = |v: &serde_json::Value| -> Vec<f64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_f64().unwrap())
                .collect()
        };
        let rows = reference["rows"].as_u64().unwrap() as usize;
        let columns = reference["columns"].as_u64().unwrap() as usize;
        let x: Vec<f64> = reference["x"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(&to_vec)
            .collect();
        let x = Array2::from_shape_vec((rows, columns), x).unwrap();
        let y = Array1::from(to_vec(&reference["y"]));
        let cases = reference["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 4);
        for case in cases {
            let lambda = case["lambda"].as_f64().unwrap();
            let linear = (!case["linear"].is_null()).then(|| Array1::from(to_vec(&case["linear"])));
            let expected_w = Array1::from(to_vec(&case["weights"]));
            let expected_value = case["value"].as_f64().unwrap();
            let objective = Objective {
                x: x.view(),
                y: y.view(),
                lambda,
                linear: linear.as_ref().map(|b| b.view()),
                normaliser: None,
            };
            let fit = objective.minimise(1e-10).unwrap();
            let max_diff = (&fit.weights - &expected_w)
                .iter()
                .fold(0.0f64, |m, d| m.max(d.abs()));
            let relative = (fit.value - expected_value).abs() / expected_value.abs();
            eprintln!(
                "λ={lambda} linear={}: {} iterations, |∇J|={:e}, max|w−w*|={max_diff:e}, rel ΔJ={relative:e}",
                linear.is_some(),
                fit.iterations,
                fit.gradient_norm
            );
            assert!(max_diff <= 1e-6, "λ={lambda}: max |w − w*| = {max_diff:e}");
            assert!(
                relative <= 1e-10,
                "λ={lambda}: relative J error {relative:e}"
            );
            // Our J at scipy's optimum agrees too (same objective definition).
            let at_reference = objective.value(expected_w.view());
            assert!((at_reference - expected_value).abs() / expected_value.abs() <= 1e-13);
        }
    }

    #[test]
    fn rejects_bad_input() {
        let (x, y) = synthetic(10, 3, 1);
        let base = Objective {
            x: x.view(),
            y: y.view(),
            lambda: 0.1,
            linear: None,
            normaliser: None,
        };
        assert!(base.minimise(1e-9).is_ok());

        for lambda in [0.0, -1.0] {
            let objective = Objective { lambda, ..base };
            assert_eq!(
                objective.minimise(1e-9),
                Err(FitError::NonPositiveLambda { lambda })
            );
        }
        let objective = Objective {
            lambda: f64::NAN,
            ..base
        };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::NonFinite { what: "lambda" })
        );

        let empty_x = Array2::<f64>::zeros((0, 3));
        let empty_y = Array1::<f64>::zeros(0);
        let objective = Objective {
            x: empty_x.view(),
            y: empty_y.view(),
            ..base
        };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::EmptyData {
                rows: 0,
                columns: 3
            })
        );

        let mut nan_x = x.clone();
        nan_x[(4, 1)] = f64::NAN;
        let objective = Objective {
            x: nan_x.view(),
            ..base
        };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::NonFinite { what: "x" })
        );

        let mut nan_y = y.clone();
        nan_y[2] = f64::NAN;
        let objective = Objective {
            y: nan_y.view(),
            ..base
        };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::NonFinite { what: "y" })
        );

        let mut zero_one = y.clone();
        zero_one[3] = 0.0;
        let objective = Objective {
            y: zero_one.view(),
            ..base
        };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::InvalidLabel { row: 3, value: 0.0 })
        );

        let short_y = y.slice(s![..9]);
        let objective = Objective { y: short_y, ..base };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::DimensionMismatch {
                what: "y",
                expected: 10,
                found: 9
            })
        );

        let b = array![1.0, 2.0];
        let objective = Objective {
            linear: Some(b.view()),
            ..base
        };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::DimensionMismatch {
                what: "linear",
                expected: 3,
                found: 2
            })
        );

        let b = array![1.0, f64::INFINITY, 0.0];
        let objective = Objective {
            linear: Some(b.view()),
            ..base
        };
        assert_eq!(
            objective.minimise(1e-9),
            Err(FitError::NonFinite { what: "linear" })
        );

        for tolerance in [0.0, -1.0, f64::NAN] {
            assert!(matches!(
                base.minimise(tolerance),
                Err(FitError::InvalidTolerance { .. })
            ));
        }
        for normaliser in [9.5, f64::NAN, f64::INFINITY, -10.0] {
            let objective = Objective {
                normaliser: Some(normaliser),
                ..base
            };
            assert!(matches!(
                objective.minimise(1e-9),
                Err(FitError::InvalidNormaliser { rows: 10, .. })
            ));
        }
    }

    #[test]
    fn a_normaliser_m_fits_the_mean_objective_with_lambda_scaled_by_m_over_n() {
        // (1/M)(Σℓ + bᵀw) + (λ/2)‖w‖² = (N/M)·[(1/N)(Σℓ + bᵀw) + (λM/N/2)‖w‖²].
        let (x, y) = synthetic(2000, 4, 5);
        let b = array![3.0, -1.0, 0.5, 2.0];
        let normalised = Objective {
            x: x.view(),
            y: y.view(),
            lambda: 1e-3,
            linear: Some(b.view()),
            normaliser: Some(5000.0),
        };
        let mean = Objective {
            lambda: 1e-3 * 2.5,
            normaliser: None,
            ..normalised
        };
        let fit = normalised.minimise(1e-10).unwrap();
        assert!(fit.certified_gradient_norm <= 1e-10);
        let reference = mean.minimise(1e-12).unwrap();
        for (a, b) in fit.weights.iter().zip(&reference.weights) {
            assert!((a - b).abs() < 1e-7, "{a} vs {b}");
        }
        let at = fit.weights.view();
        assert!((normalised.value(at) - 0.4 * mean.value(at)).abs() < 1e-14);
        // The certificate is of the normalised gradient: 0.4 times the mean's.
        let certified = normalised.certify(at).bound;
        assert!(certified <= 1e-10, "{certified}");
        let scaled = &mean.gradient(at) * 0.4;
        let difference = &normalised.gradient(at) - &scaled;
        assert!(difference.dot(&difference).sqrt() < 1e-15);
    }

    #[test]
    fn the_certified_phase_alone_converges() {
        // Started at 0, or after one Newton step, the certified phase must
        // reach the tolerance by itself (it is the fallback when the fast
        // gradient stalls above tolerance/2).
        let (x, y) = synthetic(3000, 5, 21);
        let b = array![0.5, -1.0, 0.25, 2.0, -0.75];
        for linear in [None, Some(b.view())] {
            for lambda in [1e-2, 1e-6] {
                let objective = Objective {
                    x: x.view(),
                    y: y.view(),
                    lambda,
                    linear,
                    normaliser: None,
                };
                let reference = objective.minimise(1e-10).unwrap();
                for newton_steps in [0, 1] {
                    let start = Array1::zeros(5);
                    let (w, value, iterations) = if newton_steps == 0 {
                        (start.clone(), objective.value(start.view()), 0)
                    } else {
                        let gradient = objective.gradient(start.view());
                        let w = &start + &objective.newton_direction(start.view(), &gradient);
                        let value = objective.value(w.view());
                        (w, value, 1)
                    };
                    let fit = objective
                        .certified_phase(w, value, iterations, 1e-10)
                        .unwrap();
                    assert!(fit.certified_gradient_norm <= 1e-10);
                    assert!(fit.iterations > iterations);
                    assert_eq!(fit.value, objective.value(fit.weights.view()));
                    let distance = (&fit.weights - &reference.weights)
                        .iter()
                        .fold(0.0f64, |m, d| m.max(d.abs()));
                    // Both within γ/λ of the minimiser.
                    assert!(distance <= 2e-10 / lambda, "λ = {lambda}: {distance:e}");
                }
            }
        }
    }

    #[test]
    fn an_indefinite_hessian_is_shifted_not_fatal() {
        // An indefinite matrix (as rounding could make a Hessian with λ far
        // below its scale) still gives a finite descent direction.
        let indefinite = array![[1.0, 2.0], [2.0, 1.0]];
        let gradient = array![0.3, -0.1];
        for lambda in [1e-300, 1e-8, 1.0] {
            let direction = shifted_newton_direction(&indefinite, lambda, &gradient);
            assert!(direction.iter().all(|d| d.is_finite()), "{lambda}");
            assert!(gradient.dot(&direction) < 0.0, "{lambda}");
        }
        // A positive definite one gets the plain Newton direction.
        let spd = array![[4.0, 1.0], [1.0, 3.0]];
        let direction = shifted_newton_direction(&spd, 1e-3, &gradient);
        let residual = spd.dot(&direction) + &gradient;
        assert!(residual.iter().all(|r| r.abs() < 1e-15), "{residual}");
        // A non-finite one falls back to steepest descent.
        let broken = array![[f64::NAN, 0.0], [0.0, 1.0]];
        assert_eq!(
            shifted_newton_direction(&broken, 1.0, &gradient),
            -&gradient
        );
    }

    #[test]
    fn reports_non_convergence() {
        // A tolerance below what rounding allows cannot be met.
        let (x, y) = synthetic(2000, 4, 9);
        let objective = Objective {
            x: x.view(),
            y: y.view(),
            lambda: 1e-2,
            linear: None,
            normaliser: None,
        };
        assert!(matches!(
            objective.minimise(1e-300),
            Err(FitError::NotConverged { .. })
        ));
    }
}
