//! `model/output-perturbation` and `model/objective-perturbation`: ridge
//! logistic regression made private by noise on its output or its
//! objective.

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{Object, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::{ReleaseKind, ReleaseOutput, yes};
use crate::lambda::Lambda;

/// L2-regularised logistic regression, fitted exactly and released
/// with noise of L2 sensitivity 2/(Nλ) (Chaudhuri et al. 2011).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputPerturbationParams {
    /// The regularisation strength λ of (λ/2)‖w‖²: `"auto"` (the
    /// default), a number in [10⁻¹², 10⁶] at least the floor at which the
    /// fit can be certified for the dataset's N and k, or `{"select":
    /// [λ₁, …]}`.
    #[serde(default)]
    #[schema(schema_with = Lambda::schema)]
    pub lambda: Lambda,
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
}

impl ReleaseKind for OutputPerturbationParams {
    const KIND: &'static str = "model/output-perturbation";
}

/// L2-regularised logistic regression minimising a randomly perturbed
/// objective (Chaudhuri et al. 2011, Algorithm 2); pure ε only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectivePerturbationParams {
    /// As for output perturbation.
    #[serde(default)]
    #[schema(schema_with = Lambda::schema)]
    pub lambda: Lambda,
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
}

impl ReleaseKind for ObjectivePerturbationParams {
    const KIND: &'static str = "model/objective-perturbation";

    /// At least 2·10⁻⁹: ε is split, in ledger units, between the perturbed
    /// objective and the output noise.
    fn epsilon() -> Object {
        crate::schemas::epsilon(
            2.0 * crate::schemas::MIN_EPSILON,
            Some(
                "At least 2·10⁻⁹: ε is split, in ledger units, between the\n\
                 perturbed objective and the output noise.",
            ),
        )
    }

    /// Must be omitted or 0: the algorithm is pure ε-DP.
    fn delta() -> (Schema, bool) {
        (crate::schemas::no_delta(), false)
    }
}

/// A released logistic-regression model: σ(weightsᵀx + intercept) is the
/// predicted probability for a row x in the units it was uploaded in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelResult {
    /// One per feature, in schema order, in raw feature units.
    pub weights: Vec<f64>,
    pub intercept: f64,
    pub lambda: f64,
    pub fit_intercept: bool,
    /// `norm_gamma` or `gaussian`: the noise on the weights.
    pub noise_mechanism: String,
    /// The Gamma scale of the noise's norm, or σ (in the scaled space the
    /// model is fitted in, where every row has norm ≤ 1).
    pub noise_scale: f64,
    /// Objective perturbation's parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<ObjectiveDetails>,
    /// How `{"select": […]}` chose `lambda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<LambdaSelection>,
    /// Under privacy unit `user` only (N is private there): the kept
    /// rows' count, released with noise before the model; the fit's loss
    /// is normalised by it (clamped to at least 1; for objective
    /// perturbation see `objective.normaliser`) where it exceeds N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy_rows: Option<f64>,
}

/// A private selection of λ: every candidate trained privately on the
/// training rows, the pick made by report-noisy-max of the candidates'
/// errors on the held-out rows (every tenth row by index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LambdaSelection {
    /// As requested.
    pub candidates: Vec<f64>,
    /// The index of `lambda` among `candidates`.
    pub chosen: usize,
    /// ε of each candidate's training (the request's ε split evenly, in
    /// ledger units; with δ > 0 the Gaussian candidates compose to the
    /// request's (ε, δ) instead, and this is 0).
    pub candidate_epsilon: f64,
    /// ε of the pick: the request's ε, spent on the held-out rows only.
    pub selection_epsilon: f64,
    /// The Laplace scale of the noise on each candidate's count of
    /// held-out errors.
    pub selection_scale: f64,
    pub training_rows: u64,
    pub holdout_rows: u64,
}

/// How an objective-perturbation release spent its ε.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ObjectiveDetails {
    /// ε′ of CMS11 Algorithm 2: b has density ∝ exp(−(ε′/2)‖b‖), or
    /// ∝ exp(−(ε′/(2m))‖b‖) under privacy unit `user` (m rows a person).
    pub epsilon_prime: f64,
    /// Δ: the extra regulariser added where ε′ would fall below half the
    /// objective's ε.
    pub extra_regulariser: f64,
    /// The Gamma scale of ‖b‖: 2/ε′ (2m/ε′ under unit `user`).
    pub b_scale: f64,
    /// The share of ε spent on the output noise that covers the solver's
    /// last 1e-10 of gradient norm.
    pub epsilon_output: f64,
    /// Under privacy unit `user`: N̂ as the objective was normalised by,
    /// the noisy count rounded down to a power of 2^(1/16) and raised to
    /// the smallest such value the request can be released from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normaliser: Option<f64>,
}

impl ReleaseOutput for ModelResult {
    fn is_finite(&self) -> bool {
        self.weights
            .iter()
            .chain([&self.intercept, &self.noise_scale])
            .chain(&self.noisy_rows)
            .all(|value| value.is_finite())
    }

    fn model(&self) -> Option<(&[f64], f64)> {
        Some((&self.weights, self.intercept))
    }
}
