//! `"lambda": "auto"`: the ridge strength of a model release chosen from
//! public facts alone, by minimising a bound on the mechanism's excess
//! risk over a fixed grid of λ.
//!
//! The model (docs/models.md, "Choosing λ"): near its minimum the
//! logistic loss L is taken as the isotropic quadratic
//! L(w) = L* + (h/2)‖w − w₀‖², of curvature h = η/d per direction (rows
//! are scaled to ‖x‖ ≤ 1 by about 2/√d, so a feature's second moment, and
//! with it the Hessian's diagonal, shrinks as 1/d) and a reference model
//! of norm ‖w₀‖² = β·d (the same model in raw units grows by about √d
//! when scaled). Then, in units of h/2:
//!
//! - the ridge's bias: the minimiser of L + (λ/2)‖w‖² is w₀·h/(h + λ), off
//!   by ‖w₀‖²·(λ/(h + λ))²;
//! - output perturbation's noise z: E‖z‖² (d(d + 1)θ² for norm-Gamma of
//!   scale θ = Δ/ε, dσ² for the Gaussian, Δ = 2/(Nλ) + 2γ/λ);
//! - objective perturbation's b: the minimiser moves by b/(N(h + λ + Δ_r)),
//!   E‖b‖² = d(d + 1)(2/ε′)², with its extra regulariser Δ_r in the bias,
//!   plus its small output noise.
//!
//! Every term is a function of N, d, ε, δ and λ: the mechanisms are the
//! ones the release would use, built from the same public facts. η and β
//! are fitted per learner ([`Calibration`]) on test accuracy over a sweep
//! of λ (`cargo run --example model_figures -- sweep`: the synthetic
//! generator at N = 10³…10⁶ and scikit-learn's breast-cancer set, ε = 0.1,
//! 1, 10), and the rule is checked against the best fixed λ and
//! diffprivlib by `-- auto` (docs/models.md). λ below the certified
//! solver's floor, or with a lattice that cannot hold the weights, is
//! never a candidate, so `auto` cannot fail after the debit where a fixed
//! λ would have been refused.

use dpgate_api_types as api;

use super::model::{self, ObjectivePlan};
use super::output_people::{self, Choice};
use super::{lambda_select, objective, objective_people, output};
use crate::domain::dataset::{DatasetRecord, Unit};
use crate::dp::{self, Epsilon};
use crate::releases::{Knobs, Planned, ReleaseError};

/// η and β of the model above, for one learner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// η of the curvature h = η/d per direction.
    pub curvature: f64,
    /// β of the reference model's squared norm ‖w₀‖² = β·d.
    pub reference_norm: f64,
}

impl Calibration {
    /// h, the curvature per direction in `dims` dimensions.
    fn curvature(&self, dims: usize) -> f64 {
        self.curvature / dims as f64
    }

    /// The ridge's bias at `lambda`, in (h/2)-units of excess risk.
    pub fn bias(&self, lambda: f64, dims: usize) -> f64 {
        let h = self.curvature(dims);
        self.reference_norm * dims as f64 * (lambda / (h + lambda)).powi(2)
    }
}

/// Output perturbation's: the least largest shortfall in accuracy against
/// the best λ of the sweep, over every cell.
pub const OUTPUT: Calibration = Calibration {
    curvature: 0.056,
    reference_norm: 4.2,
};

/// Objective perturbation's: b moves the fit least where the data's own
/// curvature is large, so its η comes out far larger.
pub const OBJECTIVE: Calibration = Calibration {
    curvature: 5.6,
    reference_norm: 0.32,
};

/// The grid `auto` searches: ten values a decade (the R10 series, so the
/// λ a response reports reads as a short decimal), from 10⁻¹⁰ to 10².
pub fn grid() -> impl Iterator<Item = f64> {
    const MANTISSAS: [&str; 10] = ["1", "1.25", "1.6", "2", "2.5", "3.2", "4", "5", "6.3", "8"];
    (-10..2)
        .flat_map(|exponent| {
            MANTISSAS
                .iter()
                .map(move |mantissa| format!("{mantissa}e{exponent}"))
        })
        .chain(std::iter::once("1e2".to_owned()))
        .filter_map(|text| text.parse().ok())
}

/// The learner a λ is chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learner {
    Output,
    Objective,
}

impl Learner {
    fn plan_fixed(
        self,
        dataset: &DatasetRecord,
        lambda: f64,
        fit_intercept: bool,
        knobs: &Knobs,
    ) -> Result<Box<dyn Planned>, ReleaseError> {
        match self {
            Learner::Output => output::plan(dataset, lambda, fit_intercept, knobs),
            Learner::Objective => objective::plan(dataset, lambda, fit_intercept, knobs),
        }
    }
}

/// Prices a model release at its `lambda`: the analyst's, the one
/// [`auto`] chooses, or a private selection among candidates.
pub fn plan(
    learner: Learner,
    dataset: &DatasetRecord,
    lambda: &api::Lambda,
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    if let Unit::User(bounds) = dataset.unit() {
        let choice = match lambda {
            api::Lambda::Fixed(lambda) => Choice::Fixed(*lambda),
            api::Lambda::Auto => Choice::Auto,
            api::Lambda::Select(_) => {
                return Err(ReleaseError::Invalid(
                    "lambda {\"select\": […]} holds out rows by index, not people, so it is not \
                     available under privacy unit \"user\"; use \"auto\" or a fixed lambda"
                        .to_owned(),
                ));
            }
        };
        return match learner {
            Learner::Output => output_people::plan(dataset, &bounds, choice, fit_intercept, knobs),
            Learner::Objective => {
                objective_people::plan(dataset, &bounds, choice, fit_intercept, knobs)
            }
        };
    }
    match lambda {
        api::Lambda::Fixed(lambda) => learner.plan_fixed(dataset, *lambda, fit_intercept, knobs),
        api::Lambda::Auto => {
            let (k, n) = (dataset.schema.k(), dataset.n_rows);
            model::check_shape(k, n, fit_intercept).map_err(ReleaseError::Invalid)?;
            let dims = model::columns(k, fit_intercept);
            let lambda = auto(learner, knobs.epsilon, knobs.delta, n, dims)
                .map_err(ReleaseError::Invalid)?;
            learner.plan_fixed(dataset, lambda, fit_intercept, knobs)
        }
        api::Lambda::Select(candidates) => {
            lambda_select::plan(learner, dataset, candidates, fit_intercept, knobs)
        }
    }
}

/// The excess-risk bound of `learner` at `lambda`, or `None` where the
/// release would be refused (below the certified floor, or a lattice that
/// cannot hold the weights).
pub fn risk(
    learner: Learner,
    epsilon: Epsilon,
    delta: dp::Delta,
    n: u64,
    dims: usize,
    lambda: f64,
) -> Option<f64> {
    let d = dims as f64;
    match learner {
        Learner::Output => {
            model::certifiable(dims, n, lambda, 0.0).ok()?;
            let mechanism = model::output_mechanism(epsilon, delta, n, lambda, dims).ok()?;
            Some(OUTPUT.bias(lambda, dims) + d * mechanism.noise_std().powi(2))
        }
        Learner::Objective => {
            let plan = ObjectivePlan::new(epsilon, n, lambda, dims).ok()?;
            model::certifiable(dims, n, plan.whole_lambda(), plan.params.linear_bound).ok()?;
            Some(objective_risk(&plan, n as f64, dims))
        }
    }
}

/// Objective perturbation's excess-risk bound for `plan`, whose loss and
/// b are divided by `normaliser` (N, or N̂ under unit `user`).
pub fn objective_risk(plan: &ObjectivePlan, normaliser: f64, dims: usize) -> f64 {
    let d = dims as f64;
    let whole = plan.whole_lambda();
    let h = OBJECTIVE.curvature(dims);
    let b_squared = d * (d + 1.0) * plan.params.b_scale.powi(2);
    let shift = b_squared / (normaliser * (h + whole)).powi(2);
    OBJECTIVE.bias(whole, dims) + shift + d * plan.output.noise_std().powi(2)
}

/// The λ `"auto"` chooses: [`least_risk`] of the learner's own bound, and
/// for objective perturbation never above output perturbation's choice
/// (pure ε) where that λ can be released too. As N grows, b/N vanishes
/// and objective perturbation releases the exact fit with less noise than
/// output perturbation would at the same λ, so output perturbation's λ
/// bounds the useful one from above; the objective's own bound alone
/// would stop falling at about 2·10⁻⁴ from N = 10⁵ on, where the
/// N-independent output noise that covers the solver's γ balances its
/// bias term (docs/models.md, "Choosing λ").
pub fn auto(
    learner: Learner,
    epsilon: Epsilon,
    delta: dp::Delta,
    n: u64,
    dims: usize,
) -> Result<f64, String> {
    let own = least_risk(learner, epsilon, delta, n, dims)?;
    if learner == Learner::Output {
        return Ok(own);
    }
    Ok(
        match least_risk(Learner::Output, epsilon, dp::Delta::ZERO, n, dims) {
            Ok(output)
                if output < own && risk(learner, epsilon, delta, n, dims, output).is_some() =>
            {
                output
            }
            _ => own,
        },
    )
}

/// λ of [`grid`] with the smallest [`risk`] (the largest such λ on a tie),
/// or why none can be released.
pub fn least_risk(
    learner: Learner,
    epsilon: Epsilon,
    delta: dp::Delta,
    n: u64,
    dims: usize,
) -> Result<f64, String> {
    least_risk_by(|lambda| risk(learner, epsilon, delta, n, dims, lambda)).ok_or_else(|| {
        format!(
            "no λ up to 100 can be certified or noised for N = {n} and {dims} model \
             dimensions at this ε; raise ε"
        )
    })
}

/// λ of [`grid`] with the smallest `risk` (the largest such λ on a tie),
/// `risk` being `None` where λ cannot be released.
pub fn least_risk_by(risk: impl Fn(f64) -> Option<f64>) -> Option<f64> {
    let mut best: Option<(f64, f64)> = None;
    for lambda in grid() {
        let Some(risk) = risk(lambda) else {
            continue;
        };
        if best.is_none_or(|(_, least)| risk <= least) {
            best = Some((lambda, risk));
        }
    }
    best.map(|(lambda, _)| lambda)
}

#[cfg(test)]
#[path = "ridge_tests.rs"]
mod tests;
