//! Logistic-regression fitting and evaluation, shared by the dpgate server
//! and client.
//!
//! - [`logistic`]: the L2-regularised logistic objective with the optional
//!   linear term of objective perturbation, and a Newton solver precise
//!   enough that the privacy guarantee (which assumes the exact minimiser)
//!   holds in practice.
//! - [`certify`]: a bound on the exact gradient norm at the float weights a
//!   fit returns (what the privacy analysis needs), and the floor on λ,
//!   from public parameters alone, above which every fit can be certified.
//! - [`affine`]: weights over scaled features re-expressed over raw ones.
//! - [`metrics`]: AUC, log loss, accuracy and calibration of the resulting
//!   probabilities.
//!
//! - [`synthetic`]: seeded labelled data from a known logistic model, for
//!   tests, benchmarks and figures.
//!
//! Pure math in `f64` (the Newton phase's Hessian products in `f32`, which
//! only steer its steps): no I/O, and randomness only in [`synthetic`]
//! (noise is drawn by the caller).

// Production functions stay short enough to read (clippy.toml: 120
// lines); tests may spell a scenario out at length.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod affine;
pub mod certify;
pub mod logistic;
pub mod metrics;
mod passes;
pub mod synthetic;

pub use affine::{rescale, unscale};
pub use certify::{Certificate, Infeasible, certifiable, min_lambda};
pub use logistic::{
    Fit, FitError, Objective, cholesky_in_place, cholesky_solve, log1p_exp, probabilities, sigmoid,
};
pub use metrics::{
    CalibrationBin, DEFAULT_THRESHOLD, accuracy, auc, calibration, expected_calibration_error,
    log_loss,
};
