//! `model/frank-wolfe`: least squares on an L1 ball by DP Frank-Wolfe,
//! optionally over source datasets that join the objective (seed 001;
//! LEARNERS.md §3).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{ReleaseKind, ReleaseOutput};

/// Linear regression ŷ = intercept + weightsᵀx fitted by T steps of
/// Frank-Wolfe on the L1 ball ‖θ‖₁ ≤ r, each step's vertex chosen
/// privately (Talwar, Thakurta & Zhang 2015, Alg. 2, calibrated for
/// replace-one neighbours). With `sources`, the rows of those datasets
/// join the objective and **each source is debited the same charge**, in
/// one transaction with the target: if any refuses, nothing is spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FrankWolfeParams {
    /// `label` (0/1, fitted as −1/+1) or `measure:NAME`, a declared measure
    /// (fitted scaled into [−1, 1] by its declared bounds).
    #[schema(pattern = "^(label|measure:.+)$")]
    pub target: String,
    /// r, the L1 radius of the ball θ lies in, in model units: features
    /// mapped to v = 2x̃ − 1 ∈ [−1, 1] and the target to [−1, 1].
    #[schema(exclusive_minimum = 0.0, maximum = 100.0)]
    pub radius: f64,
    /// T, the number of Frank-Wolfe steps (one private selection each).
    #[serde(default = "FrankWolfeParams::default_steps")]
    #[schema(default = 50, minimum = 1, maximum = 1000)]
    pub steps: u32,
    #[serde(default = "crate::releases::yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
    #[serde(default)]
    pub selection: Selection,
    /// Datasets whose rows join the objective: the same features (names
    /// and bounds) and, for a measure target, that measure with the same
    /// bounds; the caller must be an analyst of each. Every one is debited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 32)]
    pub sources: Vec<Uuid>,
    /// A second, target-only stage around the first stage's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debias: Option<DebiasParams>,
}

impl FrankWolfeParams {
    fn default_steps() -> u32 {
        50
    }
}

impl ReleaseKind for FrankWolfeParams {
    const KIND: &'static str = "model/frank-wolfe";

    fn sources(&self) -> &[Uuid] {
        &self.sources
    }
}

/// How each step picks its vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// Report-noisy-min with discrete Laplace noise (the seed's choice).
    #[default]
    Laplace,
    /// The exponential mechanism, accounted as bounded range: for the same
    /// (ε, δ), less noise than Laplace.
    Exponential,
}

/// Trans-Lasso's debiasing stage: Frank-Wolfe on the target's rows alone
/// over {θ̂ + δ : ‖δ‖₁ ≤ h} around the first stage's θ̂. The target pays for
/// both stages; sources pay for the first only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DebiasParams {
    /// h, the L1 radius of the correction, in model units.
    #[schema(exclusive_minimum = 0.0, maximum = 100.0)]
    pub radius: f64,
    #[serde(default = "DebiasParams::default_steps")]
    #[schema(default = 20, minimum = 1, maximum = 1000)]
    pub steps: u32,
    /// The share of the target's (ε, δ) the second stage spends.
    #[serde(default = "DebiasParams::default_share")]
    #[schema(default = 0.5, exclusive_minimum = 0.0, exclusive_maximum = 1.0)]
    pub epsilon_share: f64,
}

impl DebiasParams {
    fn default_steps() -> u32 {
        20
    }

    fn default_share() -> f64 {
        0.5
    }
}

/// A linear model fitted by DP Frank-Wolfe: ŷ = intercept + weightsᵀx for
/// a row x in the units it was uploaded in. The settings are repeated from
/// the request; nothing here depends on the data but the weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FrankWolfeResult {
    /// One per feature, in schema order, in raw units of feature and target.
    pub weights: Vec<f64>,
    pub intercept: f64,
    /// θ in model space, intercept first when fitted: ŷ = c + s·θᵀ(1, v),
    /// v = 2x̃ − 1, x̃ the features scaled into [0, 1] by their bounds.
    pub model_weights: Vec<f64>,
    pub target: String,
    /// c and s of the target's map y′ = (y − c)/s from its declared bounds
    /// (for the label, c = s = 1/2).
    pub target_centre: f64,
    pub target_scale: f64,
    pub radius: f64,
    pub fit_intercept: bool,
    pub selection: Selection,
    /// The first stage (target and sources).
    pub stage: StageUsed,
    /// The second, target-only stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debias: Option<StageUsed>,
    /// The sources whose rows joined the first stage, with their N.
    pub sources: Vec<SourceUsed>,
}

/// How one Frank-Wolfe stage selected its vertices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StageUsed {
    pub steps: u32,
    /// The L1 radius of the stage's ball.
    pub radius: f64,
    /// N of the stage's objective (target plus sources); absent when a
    /// participant is of privacy unit `user`, whose N is private (the
    /// scores are then sums, not means).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// The stage's (ε, δ), and ε₀ of each step: the largest whose T-fold
    /// composition the ledger prices at ≤ (ε, δ).
    pub epsilon: f64,
    pub delta: f64,
    pub step_epsilon: f64,
    /// Δ_s, how far one row (a person's rows under unit `user`) moves any
    /// vertex score.
    pub score_sensitivity: f64,
    /// The Laplace scale b, or the exponential mechanism's temperature τ
    /// (P(s) ∝ exp(−α_s/τ)), in score units, lattice rounding included.
    pub selection_scale: f64,
}

/// A source dataset of a Frank-Wolfe release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SourceUsed {
    pub dataset: Uuid,
    /// The source's N; absent under privacy unit `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
}

impl ReleaseOutput for FrankWolfeResult {
    fn is_finite(&self) -> bool {
        self.weights
            .iter()
            .chain(&self.model_weights)
            .chain([&self.intercept, &self.stage.selection_scale])
            .all(|value| value.is_finite())
    }
}
