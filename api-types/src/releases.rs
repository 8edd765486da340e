//! Releases: what an analyst asks for and what comes back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{Object, OneOfBuilder, Schema};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use crate::feature_map::{FeatureMap, WalrMap};
use crate::frank_wolfe::{FrankWolfeParams, FrankWolfeResult};
use crate::gradient::{GradientParams, GradientResult};
use crate::lambda::Lambda;
use crate::{Remaining, Spent};

/// `POST /v1/datasets/{id}/releases`: `{"kind": …, "epsilon": …, "delta": …,
/// params…}`. Unknown fields, and fields of another kind, are refused, so a
/// misspelt parameter never silently falls back to its default (read by
/// [`crate::strict`]; its OpenAPI schema is one object per kind, from
/// [`ReleaseKind`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseRequest {
    /// Omitted only when the kind's parameters name a target noise
    /// (`target_sigma`, `target_std`) instead: the server then chooses ε.
    pub epsilon: Option<f64>,
    /// Omitted means 0 (pure ε-DP).
    pub delta: Option<f64>,
    pub params: ReleaseParams,
}

impl ReleaseRequest {
    /// A `walr` release over the stored features, with the intercept's
    /// term: the common request.
    pub fn walr(epsilon: f64, delta: f64) -> Self {
        ReleaseRequest {
            epsilon: Some(epsilon),
            delta: Some(delta),
            params: ReleaseParams::Walr(WalrParams::default()),
        }
    }

    /// The `kind` string of the request.
    pub fn kind(&self) -> &'static str {
        self.params.kind()
    }

    /// The requested δ; omitted means 0 (pure ε-DP).
    pub fn delta(&self) -> f64 {
        self.delta.unwrap_or(0.0)
    }
}

/// `kind`, `epsilon`, `delta`, then the kind's own fields: the order the
/// request has always been written in, which its idempotency hash covers.
impl Serialize for ReleaseRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Wire<'a> {
            kind: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            epsilon: Option<f64>,
            delta: Option<f64>,
            #[serde(flatten)]
            params: &'a ReleaseParams,
        }
        Wire {
            kind: self.kind(),
            epsilon: self.epsilon,
            delta: self.delta,
            params: &self.params,
        }
        .serialize(serializer)
    }
}

/// A release kind's own parameters, by `kind`. Adding a kind: its
/// parameters type (a [`ReleaseKind`]), a variant here, and its arm in
/// [`ReleaseParams::kind`], [`ReleaseParams::parse`] and the schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ReleaseParams {
    Walr(WalrParams),
    Aggregate(AggregateParams),
    OutputPerturbation(OutputPerturbationParams),
    ObjectivePerturbation(ObjectivePerturbationParams),
    DpGd(DpGdParams),
    DpSgd(DpSgdParams),
    FrankWolfe(FrankWolfeParams),
    Gradient(GradientParams),
}

impl ReleaseParams {
    /// The `kind` string.
    pub fn kind(&self) -> &'static str {
        match self {
            ReleaseParams::Walr(_) => WalrParams::KIND,
            ReleaseParams::Aggregate(_) => AggregateParams::KIND,
            ReleaseParams::OutputPerturbation(_) => OutputPerturbationParams::KIND,
            ReleaseParams::ObjectivePerturbation(_) => ObjectivePerturbationParams::KIND,
            ReleaseParams::DpGd(_) => DpGdParams::KIND,
            ReleaseParams::DpSgd(_) => DpSgdParams::KIND,
            ReleaseParams::FrankWolfe(_) => FrankWolfeParams::KIND,
            ReleaseParams::Gradient(_) => GradientParams::KIND,
        }
    }

    /// The target noise std named instead of ε, if any.
    pub fn target(&self) -> Option<f64> {
        match self {
            ReleaseParams::Walr(walr) => walr.target_sigma,
            ReleaseParams::Aggregate(aggregate) => aggregate.target_std,
            _ => None,
        }
    }

    /// The name of the kind's target field.
    pub fn target_name(&self) -> &'static str {
        match self {
            ReleaseParams::Aggregate(_) => "target_std",
            _ => "target_sigma",
        }
    }

    /// The other datasets whose rows the release reads (and which it
    /// debits).
    pub fn sources(&self) -> &[Uuid] {
        match self {
            ReleaseParams::FrankWolfe(params) => &params.sources,
            _ => &[],
        }
    }

    /// The parameters of `kind` from the request's other fields.
    ///
    /// # Errors
    /// An unknown kind, or fields the kind does not have or cannot read.
    pub(crate) fn parse(
        kind: &str,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, String> {
        fn read<T: ReleaseKind>(
            fields: serde_json::Map<String, serde_json::Value>,
        ) -> Result<T, String> {
            T::deserialize(serde_json::Value::Object(fields)).map_err(|error| error.to_string())
        }
        Ok(match kind {
            WalrParams::KIND => ReleaseParams::Walr(read(fields)?),
            AggregateParams::KIND => ReleaseParams::Aggregate(read(fields)?),
            OutputPerturbationParams::KIND => ReleaseParams::OutputPerturbation(read(fields)?),
            ObjectivePerturbationParams::KIND => {
                ReleaseParams::ObjectivePerturbation(read(fields)?)
            }
            DpGdParams::KIND => ReleaseParams::DpGd(read(fields)?),
            DpSgdParams::KIND => ReleaseParams::DpSgd(read(fields)?),
            FrankWolfeParams::KIND => ReleaseParams::FrankWolfe(read(fields)?),
            GradientParams::KIND => ReleaseParams::Gradient(read(fields)?),
            other => {
                return Err(format!(
                    "unknown variant `{other}`, expected one of {}",
                    KINDS.map(|kind| format!("`{kind}`")).join(", ")
                ));
            }
        })
    }
}

/// The `kind`s there are.
pub const KINDS: [&str; 8] = [
    WalrParams::KIND,
    AggregateParams::KIND,
    OutputPerturbationParams::KIND,
    ObjectivePerturbationParams::KIND,
    DpGdParams::KIND,
    DpSgdParams::KIND,
    FrankWolfeParams::KIND,
    GradientParams::KIND,
];

/// A release kind's parameters: what `kind` names it, and what it accepts
/// as ε and δ (for the OpenAPI schema; the server checks them).
pub trait ReleaseKind: ToSchema + serde::de::DeserializeOwned {
    const KIND: &'static str;

    /// Whether `epsilon` is required: not where a target noise may name
    /// the ε instead.
    const EPSILON_REQUIRED: bool = true;

    /// `epsilon`'s schema.
    fn epsilon() -> Object {
        crate::schemas::epsilon(crate::schemas::MIN_EPSILON, None)
    }

    /// `delta`'s schema, and whether it is required.
    fn delta() -> (Schema, bool) {
        (crate::schemas::optional_delta(), false)
    }
}

pub(crate) fn yes() -> bool {
    true
}

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
}

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
}

/// L2-regularised logistic regression, fitted exactly and released
/// with noise of L2 sensitivity 2/(Nλ) (Chaudhuri et al. 2011).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputPerturbationParams {
    /// The regularisation strength λ of (λ/2)‖w‖²: `"auto"` (the
    /// default), a number in [10⁻¹², 10⁶] at least the floor at which the
    /// fit can be certified for the dataset's N and k, or `{"select":
    /// [λ₁, …]}`.
    #[serde(default)]
    #[schema(schema_with = Lambda::schema)]
    pub lambda: Lambda,
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
}

impl ReleaseKind for OutputPerturbationParams {
    const KIND: &'static str = "model/output-perturbation";
}

/// L2-regularised logistic regression minimising a randomly perturbed
/// objective (Chaudhuri et al. 2011, Algorithm 2); pure ε only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectivePerturbationParams {
    /// As for output perturbation.
    #[serde(default)]
    #[schema(schema_with = Lambda::schema)]
    pub lambda: Lambda,
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub fit_intercept: bool,
}

impl ReleaseKind for ObjectivePerturbationParams {
    const KIND: &'static str = "model/objective-perturbation";

    /// At least 2·10⁻⁹: ε is split, in ledger units, between the perturbed
    /// objective and the output noise.
    fn epsilon() -> Object {
        crate::schemas::epsilon(
            2.0 * crate::schemas::MIN_EPSILON,
            Some(
                "At least 2·10⁻⁹: ε is split, in ledger units, between the\n\
                 perturbed objective and the output noise.",
            ),
        )
    }

    /// Must be omitted or 0: the algorithm is pure ε-DP.
    fn delta() -> (Schema, bool) {
        (crate::schemas::no_delta(), false)
    }
}

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
    /// C: each row's gradient is scaled down to L2 norm at most C.
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

fn one() -> f64 {
    1.0
}

/// Logistic regression by one or more passes of SGD over disjoint
/// batches, each batch's clipped gradient sum released with norm-Gamma
/// noise (Song, Chaudhuri, Sarwate 2013; seed 004; LEARNERS.md §2). Pure
/// ε: every row is in one batch per epoch, so an epoch costs one batch's ε.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DpSgdParams {
    /// b, rows per batch (the last batch of an epoch may be shorter); at
    /// most N. The noise's norm is about 2·C·d/ε, so b ≳ 2·C·d/ε keeps it
    /// below the batch's gradient.
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

/// One object per kind: the kind's parameters with `kind`, `epsilon` and
/// `delta` added.
impl utoipa::PartialSchema for ReleaseRequest {
    fn schema() -> RefOr<Schema> {
        fn object<T: ReleaseKind>() -> Object {
            let RefOr::T(Schema::Object(mut object)) = T::schema() else {
                unreachable!("BUG: a derived struct schema is an inline object")
            };
            let (delta, delta_required) = T::delta();
            object
                .properties
                .insert("kind".to_owned(), crate::schemas::constant(T::KIND).into());
            object
                .properties
                .insert("epsilon".to_owned(), T::epsilon().into());
            object.properties.insert("delta".to_owned(), delta.into());
            let mut required: Vec<String> = T::EPSILON_REQUIRED
                .then(|| "epsilon".to_owned())
                .into_iter()
                .collect();
            required.extend(delta_required.then(|| "delta".to_owned()));
            required.append(&mut object.required);
            required.push("kind".to_owned());
            object.required = required;
            object
        }
        OneOfBuilder::new()
            .item(object::<WalrParams>())
            .item(object::<AggregateParams>())
            .item(object::<OutputPerturbationParams>())
            .item(object::<ObjectivePerturbationParams>())
            .item(object::<DpGdParams>())
            .item(object::<DpSgdParams>())
            .item(object::<FrankWolfeParams>())
            .item(object::<GradientParams>())
            .description(Some(
                "`POST /v1/datasets/{id}/releases`: `{\"kind\": …, \"epsilon\": …, \"delta\": …,\n\
                 params…}`. Unknown fields, and fields of another kind, are refused, so a\n\
                 misspelt parameter never silently falls back to its default.",
            ))
            .into()
    }
}

impl ToSchema for ReleaseRequest {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        <WalrParams as ToSchema>::schemas(schemas);
        <AggregateParams as ToSchema>::schemas(schemas);
        <OutputPerturbationParams as ToSchema>::schemas(schemas);
        <ObjectivePerturbationParams as ToSchema>::schemas(schemas);
        <DpGdParams as ToSchema>::schemas(schemas);
        <DpSgdParams as ToSchema>::schemas(schemas);
        <FrankWolfeParams as ToSchema>::schemas(schemas);
        <GradientParams as ToSchema>::schemas(schemas);
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

/// The noise behind a release, for auditing and error bars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NoiseDetails {
    /// `gaussian`, `laplace` or `norm_gamma`; `objective_perturbation`
    /// (b's norm-Gamma), or `report_noisy_max` for a private selection of
    /// λ (the noise on each candidate's held-out errors).
    pub mechanism: String,
    /// σ, the Laplace scale b, or the Gamma scale of the norm.
    pub scale: f64,
    /// Spacing of the lattice the release lies on (float-safe noise).
    pub grid: f64,
    /// The sensitivity the noise is calibrated to: the declared one plus
    /// what rounding to the lattice can add.
    pub accounted_sensitivity: f64,
    /// The textbook σ = Δ·√(2 ln(1.25/δ))/ε (×√T for T steps of descent),
    /// for comparison only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma_classic: Option<f64>,
    /// Output and objective perturbation: the λ the release is fitted and
    /// noised at (the one `"lambda": "auto"` chose), so a dry run shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambda: Option<f64>,
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

/// A released logistic-regression model: σ(weightsᵀx + intercept) is the
/// predicted probability for a row x in the units it was uploaded in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelResult {
    /// One per feature, in schema order, in raw feature units.
    pub weights: Vec<f64>,
    pub intercept: f64,
    pub lambda: f64,
    pub fit_intercept: bool,
    /// `norm_gamma` or `gaussian`: the noise on the weights.
    pub noise_mechanism: String,
    /// The Gamma scale of the noise's norm, or σ (in the scaled space the
    /// model is fitted in, where every row has norm ≤ 1).
    pub noise_scale: f64,
    /// Objective perturbation's parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<ObjectiveDetails>,
    /// How `{"select": […]}` chose `lambda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<LambdaSelection>,
}

/// A private selection of λ: every candidate trained privately on the
/// training rows, the pick made by report-noisy-max of the candidates'
/// errors on the held-out rows (every tenth row by index).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LambdaSelection {
    /// As requested.
    pub candidates: Vec<f64>,
    /// The index of `lambda` among `candidates`.
    pub chosen: usize,
    /// ε of each candidate's training (the request's ε split evenly, in
    /// ledger units; with δ > 0 the Gaussian candidates compose to the
    /// request's (ε, δ) instead, and this is 0).
    pub candidate_epsilon: f64,
    /// ε of the pick: the request's ε, spent on the held-out rows only.
    pub selection_epsilon: f64,
    /// The Laplace scale of the noise on each candidate's count of
    /// held-out errors.
    pub selection_scale: f64,
    pub training_rows: u64,
    pub holdout_rows: u64,
}

/// How an objective-perturbation release spent its ε.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ObjectiveDetails {
    /// ε′ of CMS11 Algorithm 2: b has density ∝ exp(−(ε′/2)‖b‖).
    pub epsilon_prime: f64,
    /// Δ: the extra regulariser added when ε′ would be ≤ 0.
    pub extra_regulariser: f64,
    /// The Gamma scale 2/ε′ of ‖b‖.
    pub b_scale: f64,
    /// The share of ε spent on the output noise that covers the solver's
    /// last 1e-10 of gradient norm.
    pub epsilon_output: f64,
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
    /// gradient.
    pub sigma: f64,
    /// σ over the per-step sensitivity (lattice rounding included).
    pub noise_multiplier: f64,
    /// Whether descent started from the request's `theta0`.
    pub warm_start: bool,
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
}

/// The projection a DP-SGD release used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectionUsed {
    pub dims: usize,
    #[schema(value_type = String)]
    pub seed: Seed,
}

/// The released numbers, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ReleaseResult {
    Walr(WalrResult),
    Aggregate(AggregateResult),
    Model(ModelResult),
    DpGd(DpGdResult),
    DpSgd(DpSgdResult),
    FrankWolfe(FrankWolfeResult),
    Gradient(GradientResult),
}

impl ReleaseResult {
    /// The logistic-regression model a release gave, in raw feature
    /// units: its weights and intercept.
    pub fn model(&self) -> Option<(&[f64], f64)> {
        match self {
            ReleaseResult::Model(model) => Some((&model.weights, model.intercept)),
            ReleaseResult::DpGd(model) => Some((&model.weights, model.intercept)),
            ReleaseResult::DpSgd(model) => Some((&model.weights, model.intercept)),
            ReleaseResult::Walr(_)
            | ReleaseResult::Aggregate(_)
            | ReleaseResult::FrankWolfe(_)
            | ReleaseResult::Gradient(_) => None,
        }
    }
}

/// A release (201 when new, 200 on an idempotent replay or a dry run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Release {
    /// The recorded release; `null` for a dry run and for a release of
    /// public numbers only, which are not recorded (the field is always
    /// there: DESIGN §8 promises dry runs the same fields).
    #[schema(required = true)]
    pub id: Option<Uuid>,
    pub kind: String,
    pub epsilon: f64,
    pub delta: f64,
    /// The release's L2 sensitivity as the privacy unit defines it.
    pub sensitivity: f64,
    /// Standard deviation of the noise on each released number; for an
    /// `aggregate`, the largest std any of its released numbers can have
    /// (each group's own is in its `std`), which is what `target_std`
    /// bounds.
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
