//! `walr`: the noisy dot product (1/N)·Σ yᵢ·(1, xᵢ) the client trains a
//! label-blind logistic regression from.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::Schema;

use super::{ReleaseKind, ReleaseOutput, yes};
use crate::feature_map::{FeatureMap, WalrMap};

/// The WALR noisy dot product (1/N)·Σ yᵢ·(1, xᵢ) plus Gaussian noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WalrParams {
    /// Release the intercept's label term (1/N)·Σ yᵢ with the vector.
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub intercept: bool,
    /// The analyst's own feature vectors (unit `label` only): the
    /// release then covers just these rows, with these vectors in
    /// place of the stored features, and N is their number. Omit it to
    /// use the stored features; an empty list is refused.
    // Read by `crate::strict` as it streams in, never buffered as a tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_items = 1)]
    pub features: Option<Vec<SuppliedRow>>,
    /// The public feature map φ the release is made on:
    /// (1/N)·Σ yᵢ·φ(xᵢ) + noise. The result says exactly which map.
    #[serde(default, skip_serializing_if = "WalrMap::is_none")]
    pub map: WalrMap,
    /// Accuracy first: the largest noise std to accept on each released
    /// number, in place of `epsilon`. The server spends the smallest ε
    /// (at the given δ, in the ledger's unit of 10⁻⁹) whose σ is at most
    /// this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0.0)]
    pub target_sigma: Option<f64>,
}

impl Default for WalrParams {
    fn default() -> Self {
        WalrParams {
            intercept: true,
            features: None,
            map: WalrMap::None,
            target_sigma: None,
        }
    }
}

impl ReleaseKind for WalrParams {
    const KIND: &'static str = "walr";
    const EPSILON_REQUIRED: bool = false;

    /// Required and positive: WALR uses the Gaussian mechanism.
    fn delta() -> (Schema, bool) {
        (Schema::Object(crate::schemas::required_delta()), true)
    }

    fn target(&self) -> Option<f64> {
        self.target_sigma
    }
}

/// One row's feature vector supplied with a `walr` release (read by
/// [`crate::strict`]).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuppliedRow {
    /// A row id of the dataset; each may appear once.
    #[schema(min_length = 1)]
    pub row_id: String,
    /// k values in [0, 1]; every row the same k.
    #[schema(schema_with = crate::schemas::feature_vector)]
    pub x: Vec<f64>,
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
    /// The feature map the release was made on (then `noisy_dot` is
    /// (1/N)·Σ yᵢ·v(xᵢ) and `noisy_intercept` (1/N)·Σ yᵢ·a); absent, the
    /// identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<FeatureMap>,
}

impl ReleaseOutput for WalrResult {
    fn is_finite(&self) -> bool {
        self.noisy_dot
            .iter()
            .chain(&self.noisy_intercept)
            .all(|value| value.is_finite())
    }
}
