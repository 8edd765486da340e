//! `gradient`: a clipped noisy gradient at the analyst's θ, one call or a
//! pre-paid session of T calls (LEARNERS.md §4), the building block of a
//! client-side learner such as distributed ISTA.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ReleaseKind, ReleaseOutput};

/// The mean clipped gradient (1/N)·Σ clip_C(∇ℓᵢ(θ)) in model space, u =
/// (1, x̃) with x̃ the features scaled into [0, 1] by their declared bounds
/// (intercept first when fitted), released with noise. With `calls`, no
/// gradient is computed now: the release pre-pays T calls at one σ (their
/// exact composition is debited once), each then made by
/// `POST /v1/datasets/{id}/releases/{release_id}/calls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GradientParams {
    #[serde(default)]
    pub loss: GradientLoss,
    /// `label` (0/1) or `measure:NAME`, a declared measure scaled into
    /// [0, 1] by its declared bounds.
    #[serde(default = "GradientParams::default_target")]
    #[schema(default = "label", pattern = "^(label|measure:.+)$")]
    pub target: String,
    /// [y₀, y₁]: the values the squared loss fits for labels 0 and 1
    /// (label target only; default [0, 1]). Finite, |y| ≤ 10⁶, y₀ ≠ y₁.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_items = 2, max_items = 2)]
    pub label_values: Option<[f64; 2]>,
    /// C: each row's gradient is scaled down to L2 norm at most C.
    #[serde(default = "GradientParams::default_clip")]
    #[schema(default = 1.0, exclusive_minimum = 0.0, maximum = 1000.0)]
    pub clip: f64,
    #[serde(default = "crate::releases::yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
    #[serde(default)]
    pub mechanism: GradientMechanism,
    /// θ in model space, intercept first when fitted: d = k +
    /// fit_intercept values, each finite, |θ| ≤ 10⁶. Required for a single
    /// call; must be absent with `calls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::schemas::weights)]
    pub theta: Option<Vec<f64>>,
    /// T: open a pre-paid session of T calls instead of making one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000)]
    pub calls: Option<u32>,
}

impl GradientParams {
    fn default_target() -> String {
        "label".to_owned()
    }

    fn default_clip() -> f64 {
        1.0
    }
}

impl ReleaseKind for GradientParams {
    const KIND: &'static str = "gradient";
}

/// The loss whose gradient is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GradientLoss {
    /// ∇ℓ = (σ(θᵀu) − y)·u, y ∈ [0, 1].
    #[default]
    Logistic,
    /// ∇ℓ = (θᵀu − y)·u.
    Squared,
}

/// The noise on each call's gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GradientMechanism {
    /// (ε, δ): the analytic Gaussian, T calls composed exactly.
    #[default]
    Gaussian,
    /// Pure ε: norm-Gamma vector noise, ε/T per call.
    NormGamma,
}

/// A gradient release: one call's gradient, or a session's terms. The
/// settings are repeated from the request; nothing here depends on the
/// data but `gradient` (and, under unit `user`, `noisy_rows`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GradientResult {
    /// d values in model space; absent when a session was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient: Option<Vec<f64>>,
    /// The session opened; its id is the release's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<GradientSession>,
    /// N of the snapshot every call reads; absent under privacy unit
    /// `user`, where N is private.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// Under privacy unit `user`: the noisy count of the rows read (at
    /// most `max_rows_per_user` a person), released with the call (or when
    /// the session opens) with the same noise as a call; every gradient
    /// is the summed one over it (at least 1) instead of over N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy_rows: Option<f64>,
    /// σ of each call's noise on each coordinate, or the norm-Gamma scale
    /// (under unit `user`, on the sum over `noisy_rows`).
    pub sigma: f64,
    /// Δ of one call's mean clipped gradient (under unit `user`, of the
    /// summed one: a person's reach, C′).
    pub sensitivity: f64,
    pub clip: f64,
    pub loss: GradientLoss,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_values: Option<[f64; 2]>,
    pub fit_intercept: bool,
    pub mechanism: GradientMechanism,
    /// ε of one call alone: at the release's δ for the Gaussian, ε/T
    /// (ledger units) for norm-Gamma.
    pub call_epsilon: f64,
    /// Always `model`: θ and the gradient are in model space.
    #[schema(value_type = String, pattern = "^model$")]
    pub space: String,
    /// [min, max] of each feature, in schema order: x̃ = (x − min)/(max −
    /// min).
    pub feature_bounds: Vec<[f64; 2]>,
}

/// A pre-paid gradient session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GradientSession {
    /// T, the calls it holds: indices 0 … T − 1.
    pub calls: u32,
}

/// `POST /v1/datasets/{id}/releases/{release_id}/calls`: call k of a
/// session at θ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GradientCall {
    /// k, from 0 to T − 1; each is spent once.
    #[schema(minimum = 0, maximum = 9999)]
    pub call: u32,
    /// θ in model space, as for a single call.
    #[schema(schema_with = crate::schemas::weights)]
    pub theta: Vec<f64>,
}

/// The gradient of one session call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GradientCallResult {
    pub call: u32,
    pub gradient: Vec<f64>,
    /// Calls never claimed.
    pub remaining: u32,
}

impl ReleaseOutput for GradientResult {
    fn is_finite(&self) -> bool {
        self.gradient
            .iter()
            .flatten()
            .chain([&self.sigma, &self.sensitivity, &self.call_epsilon])
            .chain(&self.noisy_rows)
            .all(|value| value.is_finite())
    }
}
