//! A dataset as the service holds it: its validated schema, the running
//! summaries releases are computed from, and its budget state.

use std::collections::HashSet;

use dpgate_api_types as api;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::auth::Role;
use crate::dp;
use crate::dp::contribution::{BoundingKey, ContributionBounds};

/// Longest dataset or column name.
const MAX_NAME_LEN: usize = 128;
/// Most features a dataset may declare.
const MAX_FEATURES: usize = 4096;
/// Most measures or dimensions a dataset may declare.
const MAX_MEASURES: usize = 256;
const MAX_DIMENSIONS: usize = 16;
/// Most values one dimension may declare.
const MAX_DIMENSION_VALUES: usize = 100_000;
/// The largest magnitude a declared bound may have: a sum over 10⁹ rows
/// of values this large stays far inside a double, and every quantity
/// derived from the bounds (spans, sensitivities, unscaled weights) is
/// finite.
pub const MAX_BOUND: f64 = 1e15;
/// The narrowest span a bounded column may declare, relative to the
/// magnitude of its bounds (and absolutely below 1): a double resolves
/// about 10⁻¹⁶ of a value, so a span narrower than 10⁻⁹ of the bounds
/// could not hold distinct values, and scaling by it would blow up.
pub const MIN_RELATIVE_SPAN: f64 = 1e-9;

/// The column every upload identifies its rows by.
pub const ROW_ID: &str = "row_id";

/// A dataset's columns, validated: bounds within ±[`MAX_BOUND`] with a span
/// of at least [`MIN_RELATIVE_SPAN`] of their magnitude, names unique, at
/// least one feature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schema {
    pub features: Vec<api::BoundedColumn>,
    pub label: String,
    pub measures: Vec<api::BoundedColumn>,
    pub dimensions: Vec<api::Dimension>,
    /// Unit `user` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<Users>,
}

/// Unit `user`: the column naming each row's person, the public bounds on
/// what one person contributes, and the secret key of the bounding's hash
/// order (`dp::contribution`), drawn at creation and never released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Users {
    pub column: String,
    pub bounds: ContributionBounds,
    pub key: BoundingKey,
}

impl Users {
    /// The unit's settings of a creation request: `None` for the other
    /// units, which may not name them.
    fn parse(request: &api::CreateDataset) -> Result<Option<Users>, String> {
        let named = request.user_column.is_some()
            || request.max_rows_per_user.is_some()
            || request.max_groups_per_user.is_some()
            || request.max_rows_per_group_per_user.is_some();
        if request.privacy_unit != api::PrivacyUnit::User {
            if named {
                return Err(
                    "user_column and the contribution bounds (max_rows_per_user, \
                     max_groups_per_user, max_rows_per_group_per_user) are for privacy unit \
                     \"user\" only"
                        .to_owned(),
                );
            }
            return Ok(None);
        }
        let (Some(column), Some(rows)) = (&request.user_column, request.max_rows_per_user) else {
            return Err(
                "privacy unit \"user\" needs a user_column and max_rows_per_user".to_owned(),
            );
        };
        let bounds = ContributionBounds::new(
            rows,
            request.max_groups_per_user,
            request.max_rows_per_group_per_user,
        )
        .map_err(|error| error.to_string())?;
        Ok(Some(Users {
            column: column.clone(),
            bounds,
            key: BoundingKey::fresh(),
        }))
    }

    /// The bounds as the dataset view shows them.
    fn view(&self) -> api::ContributionBounds {
        api::ContributionBounds {
            max_rows_per_user: self.bounds.rows,
            max_groups_per_user: self.bounds.groups,
            max_rows_per_group_per_user: self.bounds.rows_per_group,
        }
    }
}

/// A name: 1 to `MAX_NAME_LEN` characters, none a control character, not
/// all whitespace (the API schema's `NAME_PATTERN`).
fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.trim().is_empty()
        || name.chars().count() > MAX_NAME_LEN
        || name.chars().any(char::is_control)
    {
        return Err(format!(
            "{what} name {name:?} must be 1 to {MAX_NAME_LEN} printable characters"
        ));
    }
    Ok(())
}

fn check_bounds(what: &str, columns: &[api::BoundedColumn]) -> Result<(), String> {
    for column in columns {
        let (min, max) = (column.min, column.max);
        let bounded = |value: f64| value.is_finite() && value.abs() <= MAX_BOUND;
        if !(bounded(min) && bounded(max) && min < max) {
            return Err(format!(
                "{what} {:?} needs bounds with min < max, each between -{MAX_BOUND:e} and \
                 {MAX_BOUND:e} (got [{min}, {max}])",
                column.name
            ));
        }
        let magnitude = min.abs().max(max.abs()).max(1.0);
        if max - min < MIN_RELATIVE_SPAN * magnitude {
            return Err(format!(
                "{what} {:?}: the span max - min = {} is too narrow for bounds of magnitude \
                 {magnitude}; it must be at least {MIN_RELATIVE_SPAN:e} of it (rescale the column)",
                column.name,
                max - min
            ));
        }
    }
    Ok(())
}

impl Schema {
    /// Every feature's declared (min, max), as two lists in schema order:
    /// what maps weights between raw and stored units.
    pub fn feature_bounds(&self) -> (Vec<f64>, Vec<f64>) {
        let min = self.features.iter().map(|column| column.min).collect();
        let max = self.features.iter().map(|column| column.max).collect();
        (min, max)
    }

    /// Validates the columns of a creation request.
    pub fn parse(request: &api::CreateDataset) -> Result<Self, String> {
        if request.features.is_empty() {
            return Err("a dataset needs at least one feature".to_owned());
        }
        if request.features.len() > MAX_FEATURES {
            return Err(format!("at most {MAX_FEATURES} features"));
        }
        if request.measures.len() > MAX_MEASURES || request.dimensions.len() > MAX_DIMENSIONS {
            return Err(format!(
                "at most {MAX_MEASURES} measures and {MAX_DIMENSIONS} dimensions"
            ));
        }
        check_bounds("feature", &request.features)?;
        check_bounds("measure", &request.measures)?;
        let users = Users::parse(request)?;
        let mut names = HashSet::from([ROW_ID]);
        let columns = request
            .features
            .iter()
            .chain(&request.measures)
            .map(|column| ("column", column.name.as_str()))
            .chain(std::iter::once(("label", request.label.as_str())))
            .chain(
                users
                    .iter()
                    .map(|users| ("user column", users.column.as_str())),
            )
            .chain(
                request
                    .dimensions
                    .iter()
                    .map(|d| ("dimension", d.name.as_str())),
            );
        for (what, name) in columns {
            check_name(what, name)?;
            if !names.insert(name) {
                return Err(format!(
                    "column name {name:?} is used twice (or is {ROW_ID:?})"
                ));
            }
        }
        for dimension in &request.dimensions {
            let values: HashSet<&str> = dimension.values.iter().map(String::as_str).collect();
            if values.is_empty()
                || values.len() != dimension.values.len()
                || values.len() > MAX_DIMENSION_VALUES
            {
                return Err(format!(
                    "dimension {:?} needs 1 to {MAX_DIMENSION_VALUES} distinct values",
                    dimension.name
                ));
            }
        }
        Ok(Schema {
            features: request.features.clone(),
            label: request.label.clone(),
            measures: request.measures.clone(),
            dimensions: request.dimensions.clone(),
            users,
        })
    }

    /// The number of features, k.
    pub fn k(&self) -> usize {
        self.features.len()
    }
}

/// Validates a dataset name.
pub fn parse_name(name: &str) -> Result<String, String> {
    check_name("dataset", name)?;
    Ok(name.to_owned())
}

/// Validates a budget: ε in (0, 10⁶], δ in (0, 1).
pub fn parse_budget(budget: &api::Budget) -> Result<dp::Budget, String> {
    Ok(dp::Budget {
        epsilon: dp::Epsilon::new(budget.epsilon).map_err(|error| format!("budget: {error}"))?,
        delta: dp::Delta::positive(budget.delta).map_err(|error| format!("budget: {error}"))?,
    })
}

/// The accountant the wire names.
pub fn accountant(kind: api::AccountantKind) -> dp::Accountant {
    match kind {
        api::AccountantKind::Rdp => dp::Accountant::Rdp,
        api::AccountantKind::Basic => dp::Accountant::Basic,
    }
}

pub fn accountant_kind(accountant: dp::Accountant) -> api::AccountantKind {
    match accountant {
        dp::Accountant::Rdp => api::AccountantKind::Rdp,
        dp::Accountant::Basic => api::AccountantKind::Basic,
    }
}

/// Sets the dataset's `dpgate_dataset_epsilon_spent` and
/// `dpgate_dataset_epsilon_remaining` gauges (under its accountant) after
/// a debit or a budget change.
pub fn record_budget_gauges(dataset: &DatasetRecord) {
    let spent = dataset.spent();
    let remaining = dataset.remaining(&spent);
    let id = dataset.id.to_string();
    metrics::gauge!("dpgate_dataset_epsilon_spent", "dataset" => id.clone())
        .set(spent.epsilon.value());
    metrics::gauge!("dpgate_dataset_epsilon_remaining", "dataset" => id).set(remaining.epsilon);
}

/// The running sums a WALR release on the identity map is computed from,
/// kept up to date by every upload, and the features' public facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WalrStats {
    /// Σ yᵢ: the rows labelled 1.
    #[serde(default)]
    pub label_count: u64,
    /// Σ yᵢ·round(xᵢⱼ·2⁴⁰) per feature, exactly: WALR's sums on the
    /// identity's grid ([`crate::releases::kinds::walr_map::WalrGrid`]).
    /// Empty for rows stored before sums were exact, whose WALR releases
    /// then pass over the rows instead.
    #[serde(default)]
    pub label_feature_units: Vec<u128>,
    pub max_norm_squared: f64,
    /// Σ xᵢ and Σ xᵢ² per feature: the public moments a WALR feature map
    /// is fitted to under unit `label`. Empty in the statistics of rows
    /// stored before they were kept.
    #[serde(default)]
    pub feature_sums: Vec<f64>,
    #[serde(default)]
    pub feature_square_sums: Vec<f64>,
}

/// A scaled feature on the identity's grid: round(x·2⁴⁰), within [0, 2⁴⁰]
/// (x·2⁴⁰ is exact, so this is the grid's own rounding).
fn identity_units(x: f32) -> u128 {
    (f64::from(x) * 2f64.powi(crate::dp::fixed::FRACTION_BITS))
        .round()
        .clamp(0.0, 2f64.powi(crate::dp::fixed::FRACTION_BITS)) as u128
}

impl WalrStats {
    /// The sums of no rows.
    pub fn empty(k: usize) -> Self {
        WalrStats {
            label_count: 0,
            label_feature_units: vec![0; k],
            max_norm_squared: 0.0,
            feature_sums: vec![0.0; k],
            feature_square_sums: vec![0.0; k],
        }
    }

    /// The exact sums of the identity map, when they were kept for every
    /// row of `k` features.
    pub fn exact_sums(&self, k: usize) -> Option<&[u128]> {
        (self.label_feature_units.len() == k).then_some(&self.label_feature_units)
    }

    /// Adds one row: its 0/1 label and its scaled features.
    pub fn add(&mut self, label: u8, features: &[f32]) {
        let norm_squared: f64 = features.iter().map(|&x| f64::from(x).powi(2)).sum();
        self.max_norm_squared = self.max_norm_squared.max(norm_squared);
        for ((sum, square), &x) in self
            .feature_sums
            .iter_mut()
            .zip(&mut self.feature_square_sums)
            .zip(features)
        {
            let x = f64::from(x);
            *sum += x;
            *square += x * x;
        }
        self.label_count += u64::from(label);
        for (sum, &x) in self.label_feature_units.iter_mut().zip(features) {
            *sum += u128::from(label) * identity_units(x);
        }
    }

    /// Adds the sums of another batch of rows. Sums not kept on either
    /// side stay unkept.
    pub fn merge(&mut self, other: &WalrStats) {
        self.label_count += other.label_count;
        if self.label_feature_units.len() == other.label_feature_units.len() {
            for (sum, more) in self
                .label_feature_units
                .iter_mut()
                .zip(&other.label_feature_units)
            {
                *sum += more;
            }
        } else {
            self.label_feature_units.clear();
        }
        self.max_norm_squared = self.max_norm_squared.max(other.max_norm_squared);
        for (sum, more) in self.feature_sums.iter_mut().zip(&other.feature_sums) {
            *sum += more;
        }
        for (sum, more) in self
            .feature_square_sums
            .iter_mut()
            .zip(&other.feature_square_sums)
        {
            *sum += more;
        }
    }
}

/// Which of an upload's columns a version file holds: the public inputs
/// (row ids, features, dimensions) or the private outcomes (labels,
/// measures), kept apart so that work before a debit never opens the
/// latter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilePart {
    Inputs,
    Outcomes,
}

impl FilePart {
    pub fn as_str(self) -> &'static str {
        match self {
            FilePart::Inputs => "inputs",
            FilePart::Outcomes => "outcomes",
        }
    }

    pub fn parse(text: &str) -> Option<FilePart> {
        match text {
            "inputs" => Some(FilePart::Inputs),
            "outcomes" => Some(FilePart::Outcomes),
            _ => None,
        }
    }
}

/// One immutable file of a dataset version, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionFile {
    /// The dataset's row count before the upload that wrote it: the
    /// snapshot at N rows is every file with `version < N`.
    pub version: u64,
    pub part: FilePart,
    /// Its place among the version's files (an upload writes one of each
    /// part; a registered directory may hold many).
    pub seq: u64,
    /// Relative to the data directory, or the URI (`file://`, `s3://`) of
    /// a file registered in place.
    pub path: String,
    pub rows: u64,
    pub bytes: u64,
    /// Of the file's bytes, lowercase hex.
    pub sha256: String,
    /// Of a file registered in place: its modification time then, in
    /// nanoseconds since the Unix epoch.
    pub modified_ns: Option<i64>,
    /// Of a file registered in place: its entity tag then, which changes
    /// with its bytes (an object store's, or one derived from a local
    /// file's metadata).
    pub etag: Option<String>,
    /// The BLAKE3 hash of each of its parts a read fetches whole, so a pass
    /// checks the bytes it reads and no others; `None` for files recorded
    /// before they were kept, which a pass checks whole.
    pub chunks: Option<ChunkHashes>,
}

/// The BLAKE3 hashes of a Parquet file's column chunks and of its footer (its
/// last `footer_bytes`: metadata, length and magic), 32 bytes each, in
/// the order of their offsets in the file: the footer's last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkHashes {
    pub footer_bytes: u64,
    pub blake3: std::sync::Arc<[u8]>,
}

impl ChunkHashes {
    /// How many parts they hash, footer included; `None` if they are not
    /// a whole number of hashes.
    pub fn count(&self) -> Option<usize> {
        self.blake3
            .len()
            .is_multiple_of(32)
            .then_some(self.blake3.len() / 32)
    }

    /// The hash of the `index`th part in file order.
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        self.blake3.get(32 * index..32 * (index + 1))
    }
}

impl VersionFile {
    /// Whether the file is the operator's, registered in place (not one
    /// dpgate wrote): its columns are typed as the operator wrote them.
    pub fn registered(&self) -> bool {
        self.modified_ns.is_some()
    }
}

/// A dataset's privacy unit with what its sensitivities need of it: the
/// contribution bounds under `user`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Label,
    Row,
    User(ContributionBounds),
}

/// A stored dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetRecord {
    pub id: Uuid,
    pub name: String,
    pub privacy_unit: api::PrivacyUnit,
    pub accountant: dp::Accountant,
    pub schema: Schema,
    pub budget: dp::Budget,
    pub composition: dp::Composition,
    pub n_rows: u64,
    pub stats: WalrStats,
    /// RFC 3339.
    pub created_at: String,
}

impl DatasetRecord {
    /// A new, empty dataset from a validated creation request.
    pub fn new(request: &api::CreateDataset, created_at: String) -> Result<Self, String> {
        let schema = Schema::parse(request)?;
        Ok(DatasetRecord {
            id: Uuid::new_v4(),
            name: parse_name(&request.name)?,
            privacy_unit: request.privacy_unit,
            accountant: accountant(request.accountant),
            stats: WalrStats::empty(schema.k()),
            schema,
            budget: parse_budget(&request.budget)?,
            composition: dp::Composition::default(),
            n_rows: 0,
            created_at,
        })
    }

    /// Its privacy unit. A dataset is of unit `user` exactly when its
    /// schema has its people: creation (`Users::parse`) and every read
    /// from the store ([`DatasetRecord::consistent`]) check it.
    pub fn unit(&self) -> Unit {
        match (&self.schema.users, self.privacy_unit) {
            (Some(users), _) => Unit::User(users.bounds),
            (None, api::PrivacyUnit::Label) => Unit::Label,
            (None, _) => Unit::Row,
        }
    }

    /// Refuses a record whose unit and people disagree (a stored schema
    /// edited by hand, say).
    pub fn consistent(self) -> Result<Self, String> {
        if (self.privacy_unit == api::PrivacyUnit::User) != self.schema.users.is_some() {
            return Err(format!(
                "a dataset of unit {} {} people",
                self.privacy_unit.name(),
                if self.schema.users.is_some() {
                    "with"
                } else {
                    "without"
                }
            ));
        }
        Ok(self)
    }

    /// What the ledger has spent under the dataset's accountant.
    pub fn spent(&self) -> dp::Spent {
        self.composition.spent(self.accountant, &self.budget)
    }

    /// The budget left: ε under the accountant; δ as basic composition
    /// leaves it (`basic`), or the budget's δ at which `rdp` measures ε.
    pub fn remaining(&self, spent: &dp::Spent) -> api::Remaining {
        let delta = match self.accountant {
            dp::Accountant::Basic => self.budget.delta.saturating_sub(spent.delta_basic),
            dp::Accountant::Rdp => self.budget.delta,
        };
        api::Remaining {
            epsilon: self.budget.epsilon.saturating_sub(spent.epsilon).value(),
            delta: delta.value(),
        }
    }

    /// The dataset view of the API, with the analysts' spending the
    /// caller may see. Under unit `user` N is private: only an admin sees
    /// it.
    pub fn view(
        &self,
        analysts: &[crate::domain::budget::AnalystRecord],
        role: Role,
    ) -> api::Dataset {
        let spent = self.spent();
        let n_public = self.privacy_unit != api::PrivacyUnit::User || role == Role::Admin;
        api::Dataset {
            id: self.id,
            name: self.name.clone(),
            n_rows: n_public.then_some(self.n_rows),
            privacy_unit: self.privacy_unit,
            user_column: self.schema.users.as_ref().map(|users| users.column.clone()),
            contribution_bounds: self.schema.users.as_ref().map(Users::view),
            accountant: accountant_kind(self.accountant),
            features: self.schema.features.clone(),
            label: self.schema.label.clone(),
            measures: self.schema.measures.clone(),
            dimensions: self.schema.dimensions.clone(),
            budget: api::Budget {
                epsilon: self.budget.epsilon.value(),
                delta: self.budget.delta.value(),
            },
            spent: spent_view(&spent),
            remaining: self.remaining(&spent),
            analysts: analysts.iter().map(|analyst| analyst.view(self)).collect(),
            created_at: self.created_at.clone(),
        }
    }
}

/// The wire form of spent figures.
pub fn spent_view(spent: &dp::Spent) -> api::Spent {
    api::Spent {
        epsilon: spent.epsilon.value(),
        delta: spent.delta.value(),
        epsilon_basic: spent.epsilon_basic.value(),
        delta_basic: spent.delta_basic.value(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid dataset for tests elsewhere.
    pub(crate) fn record() -> DatasetRecord {
        DatasetRecord::new(&request(), "2026-11-22T00:00:00Z".to_owned()).unwrap()
    }

    fn request() -> api::CreateDataset {
        serde_json::from_value(serde_json::json!({
            "name": "ads", "privacy_unit": "label",
            "features": [{"name": "f0", "min": 0, "max": 1}, {"name": "f1", "min": -5, "max": 5}],
            "label": "converted",
            "measures": [{"name": "value", "min": 0, "max": 100}],
            "dimensions": [{"name": "campaign", "values": ["a", "b"]}],
            "budget": {"epsilon": 10, "delta": 1e-6}
        }))
        .unwrap()
    }

    #[test]
    fn a_well_formed_schema_is_accepted() {
        let schema = Schema::parse(&request()).unwrap();
        assert_eq!(schema.k(), 2);
        assert_eq!(schema.label, "converted");
    }

    #[test]
    fn malformed_schemas_are_refused_with_a_reason() {
        type Mutation = Box<dyn Fn(&mut api::CreateDataset)>;
        let cases: Vec<(&str, Mutation)> = vec![
            ("at least one feature", Box::new(|r| r.features.clear())),
            ("min < max", Box::new(|r| r.features[0].max = 0.0)),
            ("min < max", Box::new(|r| r.measures[0].min = f64::NAN)),
            // A span that is not finite, or derived quantities that are not.
            (
                "between -1e15 and 1e15",
                Box::new(|r| {
                    r.features[0].min = -1e308;
                    r.features[0].max = 1e308;
                }),
            ),
            (
                "between -1e15 and 1e15",
                Box::new(|r| r.measures[0].max = 1e308),
            ),
            ("too narrow", Box::new(|r| r.features[0].max = 1e-320)),
            (
                "too narrow",
                Box::new(|r| {
                    r.measures[0].min = 1e12;
                    r.measures[0].max = 1e12 + 1e-4;
                }),
            ),
            ("used twice", Box::new(|r| r.label = "f0".to_owned())),
            (
                "used twice",
                Box::new(|r| r.features[1].name = "row_id".to_owned()),
            ),
            (
                "printable",
                Box::new(|r| r.features[0].name = String::new()),
            ),
            (
                "distinct values",
                Box::new(|r| r.dimensions[0].values = vec!["a".into(), "a".into()]),
            ),
            (
                "distinct values",
                Box::new(|r| r.dimensions[0].values.clear()),
            ),
        ];
        for (reason, mutate) in cases {
            let mut bad = request();
            mutate(&mut bad);
            let error = Schema::parse(&bad).unwrap_err();
            assert!(error.contains(reason), "{error:?} lacks {reason:?}");
        }
    }

    #[test]
    fn budgets_need_positive_epsilon_and_delta_below_one() {
        assert!(
            parse_budget(&api::Budget {
                epsilon: 1.0,
                delta: 1e-6
            })
            .is_ok()
        );
        for (epsilon, delta) in [
            (0.0, 1e-6),
            (-1.0, 1e-6),
            (1.0, 0.0),
            (1.0, 1.0),
            (f64::NAN, 1e-6),
        ] {
            assert!(parse_budget(&api::Budget { epsilon, delta }).is_err());
        }
    }

    #[test]
    fn stats_add_only_labelled_rows_to_the_sums_but_every_row_to_the_norm() {
        let mut stats = WalrStats::empty(2);
        stats.add(1, &[0.5, 1.0]);
        stats.add(0, &[1.0, 1.0]);
        let one = 1u128 << 40;
        assert_eq!(stats.label_count, 1);
        assert_eq!(stats.exact_sums(2), Some(&[one / 2, one][..]));
        assert_eq!(stats.max_norm_squared, 2.0);
        let mut more = WalrStats::empty(2);
        more.add(1, &[0.25, 0.0]);
        stats.merge(&more);
        assert_eq!(stats.exact_sums(2), Some(&[one / 2 + one / 4, one][..]));
        assert_eq!(stats.label_count, 2);
        // Rows stored before sums were exact keep them unkept.
        let mut legacy: WalrStats = serde_json::from_str(
            r#"{"label_sum": 3.0, "label_feature_sums": [1.0, 2.0], "max_norm_squared": 2.0}"#,
        )
        .unwrap();
        assert_eq!(legacy.exact_sums(2), None);
        legacy.merge(&more);
        assert_eq!(legacy.exact_sums(2), None);
        // Exact sums survive JSON, beyond 2⁶⁴.
        let mut big = WalrStats::empty(1);
        big.label_feature_units[0] = (1u128 << 100) + 1;
        let back: WalrStats = serde_json::from_str(&serde_json::to_string(&big).unwrap()).unwrap();
        assert_eq!(back, big);
    }
}
