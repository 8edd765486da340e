//! `model/dp-sgd`: noisy minibatch gradient descent with Poisson sampling
//! and an optional projection (LEARNERS.md §2).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::Schema;

use super::dp_gd::Seed;
use super::{ReleaseKind, ReleaseOutput, one, yes};

/// Logistic regression by one or more passes of SGD over disjoint
/// batches, each batch's clipped gradient sum released with norm-Gamma
/// noise (Song, Chaudhuri, Sarwate 2013; seed 004; LEARNERS.md §2). Pure
/// ε: every row is in one batch per epoch, so an epoch costs one batch's ε.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DpSgdParams {
    /// b, rows per batch (the last batch of an epoch may be shorter); at
    /// most N. The noise's norm is about 2·C·d/ε, so b ≳ 2·C·d/ε keeps it
    /// below the batch's gradient. Under privacy unit `user`, the rows a
    /// batch holds on average: each person goes whole into one of
    /// ⌈N̂/b⌉ batches at random (N̂ the noisy count).
    #[serde(default = "DpSgdParams::default_batch_size")]
    #[schema(default = 256, minimum = 1)]
    pub batch_size: u64,
    /// η₀ of the step size η_t = η₀/√t, in the space of the stored
    /// features (each in [0, 1]).
    #[serde(default = "one")]
    #[schema(default = 1.0, exclusive_minimum = 0.0, maximum = 100.0)]
    pub learning_rate: f64,
    /// λ of a ridge term (λ/2)‖θ‖²; learning_rate × lambda must be below 2.
    #[serde(default = "DpSgdParams::default_lambda")]
    #[schema(default = 1e-4, minimum = 0.0, maximum = 1e6)]
    pub lambda: f64,
    /// C: each row's gradient is scaled down to L2 norm at most C.
    #[serde(default = "one")]
    #[schema(default = 1.0, exclusive_minimum = 0.0, maximum = 1000.0)]
    pub clip: f64,
    /// E, passes over the data; each costs ε/E.
    #[serde(default = "DpSgdParams::default_epochs")]
    #[schema(default = 1, minimum = 1, maximum = 100)]
    pub epochs: u32,
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
    /// Train on k′ public random projections of the features instead of
    /// the k features: the noise's norm grows with the dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<ProjectionParams>,
}

impl DpSgdParams {
    fn default_batch_size() -> u64 {
        256
    }

    fn default_lambda() -> f64 {
        1e-4
    }

    fn default_epochs() -> u32 {
        1
    }
}

impl ReleaseKind for DpSgdParams {
    const KIND: &'static str = "model/dp-sgd";

    /// Must be omitted or 0: the algorithm is pure ε-DP.
    fn delta() -> (Schema, bool) {
        (crate::schemas::no_delta(), false)
    }
}

/// A public random projection z = R·x̃ of the features x̃ scaled into
/// [0, 1]: R ∈ ℝ^{k′×k} with independent N(0, 1/k′) entries, row by row,
/// each `rand_distr::StandardNormal` 0.6 from `rand`'s `ChaCha20Rng` 0.10
/// seeded by `seed_from_u64(seed)`, divided by √k′.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectionParams {
    /// k′, from 1 to the number of features.
    #[schema(minimum = 1)]
    pub dims: usize,
    /// The generator's seed; the server picks one at random without it,
    /// and returns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, pattern = r"^[0-9]{1,20}$")]
    pub seed: Option<Seed>,
}

/// A model trained by DP-SGD: σ(weightsᵀx + intercept) is the predicted
/// probability for a row x in the units it was uploaded in. The settings
/// are repeated from the request; nothing here depends on the data but the
/// weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DpSgdResult {
    /// One per feature, in schema order, in raw feature units (with a
    /// projection, Rᵀ times the projected weights, unscaled).
    pub weights: Vec<f64>,
    pub intercept: f64,
    pub fit_intercept: bool,
    pub batch_size: u64,
    pub epochs: u32,
    /// ⌈N/b⌉·E noisy steps.
    pub steps: u64,
    pub learning_rate: f64,
    pub lambda: f64,
    pub clip: f64,
    /// The projection used, with its seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<ProjectionUsed>,
    /// With a projection: the model in the projected space, intercept
    /// first (when fitted), σ(θ₀ + Σⱼ θⱼ·zⱼ) with z = R·x̃ and x̃ the
    /// features scaled into [0, 1] by their declared bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projected_weights: Option<Vec<f64>>,
    /// ε of each epoch (ε/E, rounded down to the ledger's unit).
    pub epoch_epsilon: f64,
    /// The Gamma scale of the norm of each batch's noise (on the sum of
    /// the batch's clipped gradients), lattice rounding included.
    pub noise_scale: f64,
    /// Under privacy unit `user` only (N is private there): the kept rows'
    /// count, released with noise before the steps; the people are put in
    /// ⌈noisy_rows/batch_size⌉ batches at random each epoch, and every
    /// batch's sum is divided by noisy_rows over that many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy_rows: Option<f64>,
}

/// The projection a DP-SGD release used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectionUsed {
    pub dims: usize,
    #[schema(value_type = String)]
    pub seed: Seed,
}

impl ReleaseOutput for DpSgdResult {
    fn is_finite(&self) -> bool {
        self.weights
            .iter()
            .chain(self.projected_weights.iter().flatten())
            .chain([&self.intercept, &self.noise_scale])
            .chain(&self.noisy_rows)
            .all(|value| value.is_finite())
    }

    fn model(&self) -> Option<(&[f64], f64)> {
        Some((&self.weights, self.intercept))
    }
}
