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
    /// Absent, `auto`; but where `auto` cannot be had (unit `label` on a
    /// dataset whose rows predate the features' public moments) the
    /// release falls back to the identity, `none`, and its result's
    /// `map_fallback` says why. A map named here is made or refused, never
    /// replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<WalrMap>,
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
            map: None,
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
    /// Why the release is not on the map a request without `map` gets
    /// (`auto`): a sentence naming the reason and the map it was made on
    /// instead. Absent when the request named its map, or got the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_fallback: Option<String>,
    /// Under privacy unit `user`, where N is private: the noisy count of
    /// the rows read (at most `max_rows_per_user` a person), released with
    /// the sums, which `noisy_dot` and `noisy_intercept` are divided by
    /// (at least 1) instead of N. The release's `sigma` is then the noise
    /// on the sums: a mean's is about `sigma / noisy_rows`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy_rows: Option<f64>,
    /// The std of the noise on `noisy_rows`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noisy_rows_std: Option<f64>,
}

impl ReleaseOutput for WalrResult {
    fn is_finite(&self) -> bool {
        self.noisy_dot
            .iter()
            .chain(&self.noisy_intercept)
            .chain(&self.noisy_rows)
            .all(|value| value.is_finite())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_map_is_left_to_the_server_and_a_named_one_is_kept() {
        let read = |json: &str| serde_json::from_str::<WalrParams>(json).unwrap();
        let written = |params: &WalrParams| serde_json::to_string(params).unwrap();
        assert_eq!(read("{}"), WalrParams::default());
        assert_eq!(read("{}").map, None);
        assert_eq!(read(r#"{"map": "none"}"#).map, Some(WalrMap::None));
        assert_eq!(read(r#"{"map": "auto"}"#).map, Some(WalrMap::Auto));
        // Written as read: a named "none" is another request than none
        // named (the idempotency hash covers these bytes).
        assert_eq!(written(&read("{}")), r#"{"intercept":true}"#);
        assert_eq!(
            written(&read(r#"{"map": "none"}"#)),
            r#"{"intercept":true,"map":"none"}"#
        );
    }

    #[test]
    fn a_result_names_its_fallback_only_when_there_is_one() {
        let result = WalrResult {
            noisy_dot: vec![0.5],
            noisy_intercept: None,
            map: None,
            map_fallback: None,
            noisy_rows: None,
            noisy_rows_std: None,
        };
        assert_eq!(
            serde_json::to_string(&result).unwrap(),
            r#"{"noisy_dot":[0.5]}"#
        );
        let fell = WalrResult {
            map_fallback: Some("why".to_owned()),
            ..result
        };
        let json = serde_json::to_string(&fell).unwrap();
        assert_eq!(json, r#"{"noisy_dot":[0.5],"map_fallback":"why"}"#);
        assert_eq!(serde_json::from_str::<WalrResult>(&json).unwrap(), fell);
    }
}
