//! `aggregate`: counts, sums and means by group, with Gaussian (or
//! discrete Gaussian) noise.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ReleaseKind, ReleaseOutput};

/// Counts, sums and means of the label or a measure, optionally over
/// every combination of declared dimension values, released jointly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AggregateParams {
    /// `count`, `sum:COLUMN` or `mean:COLUMN`, where COLUMN is the label
    /// or a declared measure.
    #[schema(schema_with = crate::schemas::statistics)]
    pub statistics: Vec<String>,
    /// Declared dimensions to break the statistics down by.
    #[serde(default)]
    #[schema(schema_with = crate::schemas::group_by)]
    pub group_by: Vec<String>,
    #[serde(default)]
    pub mechanism: AggregateMechanism,
    /// Accuracy first: the largest noise std to accept on every released
    /// count, sum and mean (in their own units), in place of `epsilon` (as
    /// `target_sigma` of `walr`). A mean's std is bounded over every group
    /// it could have: its sum's over the public N without `group_by`, and
    /// with it, its sum's (a group of one row), or under unit `row` with
    /// the noised count, √(std(sum)² + M²·std(count)²) with M the column's
    /// largest |bound|.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0.0)]
    pub target_std: Option<f64>,
}

impl ReleaseKind for AggregateParams {
    const KIND: &'static str = "aggregate";
    const EPSILON_REQUIRED: bool = false;
    const TARGET_NAME: &'static str = "target_std";

    fn target(&self) -> Option<f64> {
        self.target_std
    }
}

/// The noise of an aggregate release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AggregateMechanism {
    /// (ε, δ): analytic Gaussian over the joint L2 sensitivity.
    #[default]
    Gaussian,
    /// Pure ε: Laplace over the joint L1 sensitivity.
    Laplace,
}

/// One statistic of one group of an aggregate release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AggregateGroup {
    /// The group's value of each `group_by` dimension; empty when ungrouped.
    pub key: BTreeMap<String, String>,
    /// As requested: `count`, `sum:COLUMN` or `mean:COLUMN`.
    pub statistic: String,
    /// The statistic; a mean divides by max(count, 1) and is clamped to the
    /// column's bounds, so an empty group's mean is noise alone.
    pub value: f64,
    /// Standard deviation of the noise on `value` (0 when exact).
    pub std: f64,
    /// Whether `value` is exact: the statistic is public under the
    /// dataset's privacy unit (it does not depend on what the unit protects).
    pub exact: bool,
}

/// The released numbers of an aggregate release: every statistic of every
/// combination of the declared values of the `group_by` dimensions,
/// present in the data or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AggregateResult {
    pub groups: Vec<AggregateGroup>,
}

impl ReleaseOutput for AggregateResult {
    fn is_finite(&self) -> bool {
        self.groups
            .iter()
            .all(|group| group.value.is_finite() && group.std.is_finite())
    }
}
