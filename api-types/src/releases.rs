//! Releases: what an analyst asks for and what comes back.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{Remaining, Spent};

fn yes() -> bool {
    true
}

/// `POST /v1/datasets/{id}/releases`: `{"kind": …, "epsilon": …, "delta": …,
/// params…}`. Unknown fields are refused, so a misspelt parameter never
/// silently falls back to its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", deny_unknown_fields)]
pub enum ReleaseRequest {
    /// The WALR noisy dot product (1/N)·Σ yᵢ·(1, xᵢ) plus Gaussian noise.
    #[serde(rename = "walr")]
    Walr {
        epsilon: f64,
        /// Required and positive: WALR uses the Gaussian mechanism.
        delta: Option<f64>,
        /// Release the intercept's label term (1/N)·Σ yᵢ with the vector.
        #[serde(default = "yes")]
        intercept: bool,
    },
}

impl ReleaseRequest {
    /// The `kind` string of the request.
    pub fn kind(&self) -> &'static str {
        match self {
            ReleaseRequest::Walr { .. } => "walr",
        }
    }

    /// The requested ε.
    pub fn epsilon(&self) -> f64 {
        match self {
            ReleaseRequest::Walr { epsilon, .. } => *epsilon,
        }
    }

    /// The requested δ; omitted means 0 (pure ε-DP).
    pub fn delta(&self) -> f64 {
        match self {
            ReleaseRequest::Walr { delta, .. } => delta.unwrap_or(0.0),
        }
    }
}

/// The noise behind a release, for auditing and error bars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NoiseDetails {
    /// `gaussian`, `laplace` or `norm_gamma`.
    pub mechanism: String,
    /// σ, the Laplace scale b, or the Gamma scale of the norm.
    pub scale: f64,
    /// Spacing of the lattice the release lies on (float-safe noise).
    pub grid: f64,
    /// The sensitivity the noise is calibrated to: the declared one plus
    /// what rounding to the lattice can add.
    pub accounted_sensitivity: f64,
    /// The textbook σ = Δ·√(2 ln(1.25/δ))/ε, for comparison only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma_classic: Option<f64>,
}

/// The released numbers of a WALR release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WalrResult {
    /// (1/N)·Σ yᵢ·xᵢ + noise, one entry per feature in schema order, in the
    /// scaled feature space [0, 1]ᵏ.
    pub noisy_dot: Vec<f64>,
    /// (1/N)·Σ yᵢ + noise: the label term of the intercept's gradient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy_intercept: Option<f64>,
}

/// The released numbers, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ReleaseResult {
    Walr(WalrResult),
}

/// A release (201 when new, 200 on an idempotent replay or a dry run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Release {
    pub id: Uuid,
    pub kind: String,
    pub epsilon: f64,
    pub delta: f64,
    /// The release's L2 sensitivity as the privacy unit defines it.
    pub sensitivity: f64,
    /// Standard deviation of the noise on each released number.
    pub sigma: f64,
    /// Rows in the dataset when the release was computed.
    pub n: u64,
    pub noise: NoiseDetails,
    /// Absent on a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ReleaseResult>,
    /// The dataset's spending including this release.
    pub spent: Spent,
    pub remaining: Remaining,
    /// The token subject that asked for it.
    pub analyst: String,
    /// RFC 3339.
    pub created_at: String,
    #[serde(default)]
    pub dry_run: bool,
}

/// One line of a release listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReleaseSummary {
    pub id: Uuid,
    pub kind: String,
    pub analyst: String,
    pub epsilon: f64,
    pub delta: f64,
    /// The ledger entry that debited it.
    pub seq: u64,
    /// RFC 3339.
    pub created_at: String,
}

/// `GET /v1/datasets/{id}/releases`: oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ReleaseList {
    pub releases: Vec<ReleaseSummary>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<u64>,
}
