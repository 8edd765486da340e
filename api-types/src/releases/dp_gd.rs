//! `model/dp-gd`: noisy full-batch gradient descent (LEARNERS.md §1), and
//! what the iterative learners share (a seed, a warm start, which iterate
//! is released).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::Schema;

use super::{ReleaseKind, ReleaseOutput, one, yes};

/// Logistic regression by full-batch gradient descent on per-example
/// clipped gradients, each step released with Gaussian noise (seed 000;
/// LEARNERS.md §1): T steps that are (ε, δ)-DP together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DpGdParams {
    /// T, the number of gradient steps.
    #[serde(default = "DpGdParams::default_steps")]
    #[schema(default = 100, minimum = 1, maximum = 10000)]
    pub steps: u32,
    /// α of θ ← θ − α(ĝ + λθ), in the space of the stored features
    /// (each in [0, 1]).
    #[serde(default = "one")]
    #[schema(default = 1.0, exclusive_minimum = 0.0, maximum = 100.0)]
    pub learning_rate: f64,
    /// C: each row's gradient is scaled down to L2 norm at most C (under
    /// privacy unit `user`, each person's summed gradient).
    #[serde(default = "one")]
    #[schema(default = 1.0, exclusive_minimum = 0.0, maximum = 1000.0)]
    pub clip: f64,
    /// λ of a ridge term (λ/2)‖θ‖² (data-independent); learning_rate ×
    /// lambda must be below 2.
    #[serde(default)]
    #[schema(default = 0.0, minimum = 0.0, maximum = 1e6)]
    pub lambda: f64,
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
    /// A public starting point (a model trained on public data), in raw
    /// feature units; descent starts from 0 without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theta0: Option<WarmStart>,
    /// R: every iterate is projected onto ‖θ‖₂ ≤ R (in the stored features'
    /// space, intercept included); no projection without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0.0, maximum = 1e6)]
    pub radius: Option<f64>,
    #[serde(default)]
    pub output: Iterate,
}

impl DpGdParams {
    fn default_steps() -> u32 {
        100
    }
}

impl ReleaseKind for DpGdParams {
    const KIND: &'static str = "model/dp-gd";

    /// Required and positive: every step uses the Gaussian mechanism.
    fn delta() -> (Schema, bool) {
        (Schema::Object(crate::schemas::required_delta()), true)
    }
}

/// A u64, written as a decimal string so that no JSON reader rounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed(pub u64);

impl Serialize for Seed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map(Seed).map_err(|_| {
            serde::de::Error::custom(format!(
                "a seed is a decimal u64 in a string, from \"0\" to \"{}\" (got {text:?})",
                u64::MAX
            ))
        })
    }
}

/// A model's starting point in raw feature units: σ(weightsᵀx + intercept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WarmStart {
    /// One per feature, in schema order; each finite, |w| ≤ 10⁶.
    #[schema(schema_with = crate::schemas::weights)]
    pub weights: Vec<f64>,
    #[serde(default)]
    #[schema(default = 0.0, minimum = -1e6, maximum = 1e6)]
    pub intercept: f64,
}

/// Which iterate an iterative learner releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Iterate {
    /// θ_T.
    #[default]
    Last,
    /// The mean of θ₁ … θ_T.
    Average,
}

/// A model trained by DP gradient descent: σ(weightsᵀx + intercept) is the
/// predicted probability for a row x in the units it was uploaded in. The
/// settings are repeated from the request; nothing here depends on the
/// data but the weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DpGdResult {
    /// One per feature, in schema order, in raw feature units.
    pub weights: Vec<f64>,
    pub intercept: f64,
    pub fit_intercept: bool,
    pub steps: u32,
    pub learning_rate: f64,
    pub clip: f64,
    pub lambda: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radius: Option<f64>,
    pub output: Iterate,
    /// σ of each step's noise on each coordinate of the mean clipped
    /// gradient (under privacy unit `user`, of the sum over
    /// `noisy_rows`).
    pub sigma: f64,
    /// σ over the per-step sensitivity (lattice rounding included).
    pub noise_multiplier: f64,
    /// Whether descent started from the request's `theta0`.
    pub warm_start: bool,
    /// Under privacy unit `user`, where N is private: the noisy count of
    /// the rows read (at most `max_rows_per_user` a person), released
    /// before the steps with the same noise multiplier; every step's
    /// summed gradient is divided by it (at least 1) instead of N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy_rows: Option<f64>,
}

impl ReleaseOutput for DpGdResult {
    fn is_finite(&self) -> bool {
        self.weights
            .iter()
            .chain([&self.intercept, &self.sigma, &self.noise_multiplier])
            .chain(&self.noisy_rows)
            .all(|value| value.is_finite())
    }

    fn model(&self) -> Option<(&[f64], f64)> {
        Some((&self.weights, self.intercept))
    }
}
