//! The floor on λ below which no fit can be certified: the worst case of
//! the certificate's own error over the domain ‖xᵢ‖₂ ≤ 1.

use super::*;

/// Why public parameters were refused: the solve could fail for some data
/// in the domain.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
pub enum Infeasible {
    /// A parameter is out of its range (zero rows or columns, a
    /// non-positive or non-finite λ or tolerance, a negative or non-finite
    /// bound on ‖b‖/N).
    #[error("invalid {what}: {value}")]
    InvalidParameter { what: &'static str, value: f64 },
    /// λ is below the floor for these columns, rows, linear-term bound and
    /// tolerance.
    #[error(
        "regularisation {lambda:e} is below {floor:e}, the smallest for which the fit can be \
         certified to gradient norm {tolerance:e} with these dimensions"
    )]
    LambdaBelowFloor {
        lambda: f64,
        floor: f64,
        tolerance: f64,
    },
    /// No λ makes the fit certifiable: the tolerance is below what double
    /// precision can certify (about 4·10⁻¹⁴ and more with a linear term).
    #[error("tolerance {tolerance:e} is below what double precision can certify")]
    ToleranceTooSmall { tolerance: f64 },
}

/// R: the bound on ‖ŵ‖ at any point the certificate must accept.
pub(super) fn weight_bound(lambda: f64, beta: f64, tolerance: f64) -> f64 {
    let from_value = (beta + (beta * beta + 2.0 * lambda * std::f64::consts::LN_2).sqrt()) / lambda;
    let from_stationarity = (1.0 + beta) / lambda;
    from_value.min(from_stationarity) + tolerance / lambda
}

/// Worst case over the domain of the certificate's error term as it enters
/// `bound`: (‖Ê‖·(1 + 2⁻²⁰) + 2⁻⁵⁰⁰) with ‖Ê‖ ≤ E(λ) of the module docs.
pub(super) fn worst_certificate_error(
    k: usize,
    rows: usize,
    lambda: f64,
    beta: f64,
    tolerance: f64,
) -> f64 {
    let u = UNIT_ROUNDOFF;
    let r = weight_bound(lambda, beta, tolerance);
    let gamma_k = gamma(margin_depth(k));
    let gamma_n_squared = gamma((rows + 1) as f64).powi(2);
    let bracket = SIGMOID_ERROR
        + u
        + gamma_n_squared
        + 0.25 * gamma_k * (1.0 + gamma_k) * r / (1.0 - gamma_k)
        + 3.0 * u * (1.0 + beta)
        + 2.0 * u * (1.0 + beta + tolerance)
        + gamma_n_squared * beta;
    let error = SAFETY * bracket * (1.0 + 1.0 / (1u64 << 30) as f64) + (k as f64).sqrt() * TINY;
    error * NORM_INFLATION + NORM_SLACK
}

/// Worst case over the domain of ‖Ĥ − H‖₂ for the Hessian the solver forms
/// and solves with (see the module docs).
pub(super) fn worst_hessian_error(
    k: usize,
    rows: usize,
    lambda: f64,
    beta: f64,
    tolerance: f64,
) -> f64 {
    let u = UNIT_ROUNDOFF;
    let kf = k as f64;
    let r = weight_bound(lambda, beta, tolerance);
    0.25 * gamma(rows as f64 + 4.0)
        + 0.25 * (2.0 * SIGMOID_ERROR + 3.0 * u)
        + SIGMOID_SECOND_DERIVATIVE * gamma(kf) * r
        + (u + kf * gamma(3.0 * kf + 1.0)) * 1.125 * (0.25 + lambda)
}

pub(super) fn feasible(k: usize, rows: usize, lambda: f64, beta: f64, tolerance: f64) -> bool {
    worst_certificate_error(k, rows, lambda, beta, tolerance) <= CERTIFICATE_SHARE * tolerance
        && worst_hessian_error(k, rows, lambda, beta, tolerance) <= HESSIAN_SHARE * lambda
}

pub(super) fn check_shape(
    columns: usize,
    rows: usize,
    beta: f64,
    tolerance: f64,
) -> Result<(), Infeasible> {
    if columns == 0 || columns >= 1 << 30 {
        return Err(Infeasible::InvalidParameter {
            what: "columns",
            value: columns as f64,
        });
    }
    if rows == 0 || rows as f64 >= 2f64.powi(50) {
        return Err(Infeasible::InvalidParameter {
            what: "rows",
            value: rows as f64,
        });
    }
    if !(beta.is_finite() && beta >= 0.0) {
        return Err(Infeasible::InvalidParameter {
            what: "linear_norm_over_n",
            value: beta,
        });
    }
    if !(tolerance.is_finite() && tolerance > 0.0) {
        return Err(Infeasible::InvalidParameter {
            what: "tolerance",
            value: tolerance,
        });
    }
    Ok(())
}

/// The smallest λ for which a fit with `columns` columns, `rows` rows, a
/// linear term with ‖b‖/N ≤ `linear_norm_over_n` (0 without one) and
/// gradient-norm tolerance `tolerance` is guaranteed to be certifiable for
/// every data set with ‖xᵢ‖₂ ≤ 1 and yᵢ = ±1 (derivation and table in the
/// [module docs](crate::certify)).
///
/// # Errors
/// [`Infeasible::InvalidParameter`] for zero rows or columns, a negative or
/// non-finite bound or a non-positive tolerance;
/// [`Infeasible::ToleranceTooSmall`] if no λ works.
pub fn min_lambda(
    columns: usize,
    rows: usize,
    linear_norm_over_n: f64,
    tolerance: f64,
) -> Result<f64, Infeasible> {
    check_shape(columns, rows, linear_norm_over_n, tolerance)?;
    let ok = |lambda: f64| feasible(columns, rows, lambda, linear_norm_over_n, tolerance);
    let mut high = 1.0f64;
    while !ok(high) {
        high *= 4.0;
        if high > 1e300 {
            return Err(Infeasible::ToleranceTooSmall { tolerance });
        }
    }
    let mut low = high;
    while ok(low) {
        low *= 0.25;
        if low < 1e-300 {
            return Ok(low);
        }
    }
    // ok(high), !ok(low): bisect in log scale to a relative 2⁻⁴⁰.
    for _ in 0..200 {
        if high <= low * (1.0 + 1.0 / (1u64 << 40) as f64) {
            break;
        }
        let middle = (low * high).sqrt();
        if ok(middle) {
            high = middle;
        } else {
            low = middle;
        }
    }
    Ok(high)
}

/// Checks, before any privacy budget is spent, that a fit with these
/// public parameters will be certified for every data set in the domain
/// (‖xᵢ‖₂ ≤ 1, yᵢ = ±1, ‖b‖/N ≤ `linear_norm_over_n`), so that
/// [`Objective::minimise`](crate::Objective::minimise) cannot fail after the
/// debit.
///
/// `columns` is d (including an intercept column), `rows` is N, `lambda`
/// the total regularisation the objective uses, `linear_norm_over_n` a
/// bound on ‖b‖/N of the linear term (0 without one).
///
/// # Errors
/// [`Infeasible::LambdaBelowFloor`] (with the floor) if λ is below
/// [`min_lambda`], and the errors of [`min_lambda`].
pub fn certifiable(
    columns: usize,
    rows: usize,
    lambda: f64,
    linear_norm_over_n: f64,
    tolerance: f64,
) -> Result<(), Infeasible> {
    check_shape(columns, rows, linear_norm_over_n, tolerance)?;
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(Infeasible::InvalidParameter {
            what: "lambda",
            value: lambda,
        });
    }
    if feasible(columns, rows, lambda, linear_norm_over_n, tolerance) {
        return Ok(());
    }
    let floor = min_lambda(columns, rows, linear_norm_over_n, tolerance)?;
    Err(Infeasible::LambdaBelowFloor {
        lambda,
        floor,
        tolerance,
    })
}
