//! Datasets: creation, the dataset view, and row uploads.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// What one person's contribution is: the neighbouring datasets that must
/// be indistinguishable. Fixed at creation.
///
/// | unit | private | public |
/// |---|---|---|
/// | `label` | the label and the measures of each row (its outcomes) | N, features, dimensions, row ids |
/// | `row` | the whole row | N |
/// | `user` | every row of one person (the `user_column`), N, the number of people | the contribution bounds |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrivacyUnit {
    /// Neighbours differ in one row's outcomes: its label and its measures.
    /// N, the features, the dimensions and the row ids are public.
    Label,
    /// Neighbours differ in one whole row (replaced by any other); N is public.
    Row,
    /// Neighbours differ in all rows of one person (added or removed), named
    /// by the dataset's `user_column`. Releases read at most
    /// `max_rows_per_user` rows of each person, chosen by a keyed hash
    /// order. N and the number of people are private.
    User,
}

impl PrivacyUnit {
    /// Its name on the wire (`label`, `row`, `user`), for text that is not
    /// JSON: the store's column, the audit's table, problem details.
    pub fn name(self) -> &'static str {
        match self {
            PrivacyUnit::Label => "label",
            PrivacyUnit::Row => "row",
            PrivacyUnit::User => "user",
        }
    }
}

/// Unit `user`: the public bounds on what one person contributes to a
/// release; a release reads no more of a person's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ContributionBounds {
    /// Rows of one person a release reads at most (1 to 10⁶).
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub max_rows_per_user: u32,
    /// Groups of an aggregate's breakdown one person's rows fall in at most
    /// (1 to `max_rows_per_user`, which it is unless declared).
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub max_groups_per_user: u32,
    /// Rows of one person in one group at most (1 to
    /// `max_rows_per_user`, which it is unless declared).
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub max_rows_per_group_per_user: u32,
}

/// How a dataset composes its releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AccountantKind {
    /// The tightest of exact Gaussian composition, Rényi DP and basic
    /// composition, measured at the budget's δ.
    #[default]
    Rdp,
    /// Σεᵢ ≤ ε and Σδᵢ ≤ δ.
    Basic,
}

/// A numeric column with declared public bounds (a feature or a measure).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BoundedColumn {
    #[schema(schema_with = crate::schemas::column_name)]
    pub name: String,
    /// At least −10¹⁵; below `max`, by at least 10⁻⁹ of the bounds'
    /// magnitude (and of 1).
    #[schema(minimum = -1e15, maximum = 1e15)]
    pub min: f64,
    #[schema(minimum = -1e15, maximum = 1e15)]
    pub max: f64,
}

/// A categorical column with its declared, public list of values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Dimension {
    #[schema(schema_with = crate::schemas::column_name)]
    pub name: String,
    #[schema(schema_with = crate::schemas::dimension_values)]
    pub values: Vec<String>,
}

/// An (ε, δ) pair: a budget, or what it is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    #[schema(minimum = 1e-9, maximum = 1e6)]
    pub epsilon: f64,
    #[schema(minimum = 1e-30, exclusive_maximum = 1.0)]
    pub delta: f64,
}

/// `POST /v1/datasets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDataset {
    /// Unique among datasets.
    #[schema(schema_with = crate::schemas::column_name)]
    pub name: String,
    pub privacy_unit: PrivacyUnit,
    /// At least one; uploaded values must lie within [min, max] and are
    /// scaled into [0, 1].
    #[serde(deserialize_with = "crate::strict::objects")]
    #[schema(min_items = 1, max_items = 4096)]
    pub features: Vec<BoundedColumn>,
    /// Name of the 0/1 label column.
    #[schema(schema_with = crate::schemas::column_name)]
    pub label: String,
    /// Numeric columns clamped to their bounds on upload.
    #[serde(default, deserialize_with = "crate::strict::objects")]
    #[schema(max_items = 256)]
    pub measures: Vec<BoundedColumn>,
    #[serde(default, deserialize_with = "crate::strict::objects")]
    #[schema(max_items = 16)]
    pub dimensions: Vec<Dimension>,
    #[serde(deserialize_with = "crate::strict::object")]
    pub budget: Budget,
    #[serde(default)]
    pub accountant: AccountantKind,
    /// Unit `user` (and only it): the column naming each row's person, an
    /// opaque id of 1 to 256 bytes, never released nor exported; dpgate
    /// keeps only its keyed hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::schemas::column_name)]
    pub user_column: Option<String>,
    /// Unit `user` (and required by it): rows of one person a release reads
    /// at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub max_rows_per_user: Option<u32>,
    /// Unit `user`: groups of an aggregate's breakdown one person
    /// contributes to at most (default `max_rows_per_user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub max_groups_per_user: Option<u32>,
    /// Unit `user`: rows of one person in one group at most (default
    /// `max_rows_per_user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub max_rows_per_group_per_user: Option<u32>,
    /// Parquet files to register in place as the dataset's first version,
    /// instead of uploading rows.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::strict::optional_object"
    )]
    pub source: Option<Source>,
}

/// Parquet data registered in place: the files stay where they are, and
/// dpgate records their size, modification time, entity tag and SHA-256,
/// refusing to compute on a file that no longer matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// `file:///…` or `s3://bucket/…`: a directory (its `*.parquet` files,
    /// in name order) or one Parquet file, under one of the operator's
    /// `DPGATE_DATA_ROOTS`.
    /// Columns are named as the schema's (`row_id`, the label, features,
    /// measures, dimensions), typed as in a Parquet upload.
    #[schema(example = "file:///srv/campaigns/2026-11/")]
    pub uri: String,
}

/// `POST /v1/datasets/{id}/rows` as `application/json`: registers more
/// Parquet files in place as the dataset's next version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRows {
    #[serde(deserialize_with = "crate::strict::object")]
    pub source: Source,
}

/// What a dataset has spent, rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Spent {
    /// Under the dataset's accountant.
    pub epsilon: f64,
    pub delta: f64,
    /// Under basic composition, for comparison.
    pub epsilon_basic: f64,
    pub delta_basic: f64,
}

/// What a dataset has left under its accountant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Remaining {
    pub epsilon: f64,
    pub delta: f64,
}

/// An analyst's own spending on a dataset, and its cap if it has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AnalystSpend {
    pub analyst: String,
    /// The most this analyst may spend, measured like the dataset's budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<Budget>,
    pub spent: Spent,
}

/// `PATCH /v1/datasets/{id}/budget`: every field optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetChange {
    /// The new total; it may not fall below what is already spent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::strict::optional_object"
    )]
    pub budget: Option<Budget>,
    /// Caps by analyst (token subject): `{"ana": {"epsilon": 1, "delta":
    /// 1e-7}, "bob": null}`; `null` removes a cap.
    #[serde(default, deserialize_with = "crate::strict::optional_objects_by_name")]
    #[schema(schema_with = crate::schemas::caps)]
    pub caps: std::collections::BTreeMap<String, Option<Budget>>,
}

/// The dataset view: metadata, schema, N, and the budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Dataset {
    pub id: Uuid,
    pub name: String,
    /// The rows stored. Under unit `user` N is private: admins see it,
    /// analysts do not (the field is left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_rows: Option<u64>,
    pub privacy_unit: PrivacyUnit,
    /// Unit `user`: the column naming each row's person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_column: Option<String>,
    /// Unit `user`: the public contribution bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contribution_bounds: Option<ContributionBounds>,
    pub accountant: AccountantKind,
    pub features: Vec<BoundedColumn>,
    pub label: String,
    pub measures: Vec<BoundedColumn>,
    pub dimensions: Vec<Dimension>,
    pub budget: Budget,
    pub spent: Spent,
    pub remaining: Remaining,
    /// Per-analyst spending and caps: every analyst for admins, the
    /// caller's own for an analyst.
    #[serde(default)]
    pub analysts: Vec<AnalystSpend>,
    /// RFC 3339.
    pub created_at: String,
}

/// `GET /v1/datasets`: the datasets the caller may see.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DatasetList {
    pub datasets: Vec<Dataset>,
}

/// The outcome of an accepted upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IngestReport {
    pub rows_added: u64,
    pub n_rows: u64,
}
