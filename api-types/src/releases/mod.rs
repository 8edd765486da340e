//! Releases: what an analyst asks for and what comes back. Each kind's
//! parameters and result live in a file of their own; [`kinds!`] and
//! [`results!`] register them, one line each.

mod aggregate;
mod dp_gd;
mod dp_sgd;
mod frank_wolfe;
mod gradient;
mod model;
mod walr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{Object, OneOfBuilder, Schema};
use uuid::Uuid;

use crate::{Remaining, Spent};
pub use aggregate::{AggregateGroup, AggregateMechanism, AggregateParams, AggregateResult};
pub use dp_gd::{DpGdParams, DpGdResult, Iterate, Seed, WarmStart};
pub use dp_sgd::{DpSgdParams, DpSgdResult, ProjectionParams, ProjectionUsed};
pub use frank_wolfe::{
    DebiasParams, FrankWolfeParams, FrankWolfeResult, Selection, SourceUsed, StageUsed,
};
pub use gradient::{
    GradientCall, GradientCallResult, GradientLoss, GradientMechanism, GradientParams,
    GradientResult, GradientSession,
};
pub use model::{
    LambdaSelection, ModelResult, ObjectiveDetails, ObjectivePerturbationParams,
    OutputPerturbationParams,
};
pub use walr::{SuppliedRow, WalrParams, WalrResult};

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

/// A release kind's parameters: what `kind` names it, and what it accepts
/// as ε and δ (for the OpenAPI schema; the server checks them).
pub trait ReleaseKind: ToSchema + serde::de::DeserializeOwned {
    const KIND: &'static str;

    /// The name of the kind's target field, where a target noise may name
    /// the ε instead.
    const TARGET_NAME: &'static str = "target_sigma";

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

    /// The target noise std named instead of ε, if any.
    fn target(&self) -> Option<f64> {
        None
    }

    /// The other datasets whose rows the release reads (and which it
    /// debits).
    fn sources(&self) -> &[Uuid] {
        &[]
    }
}

/// What a kind's release result offers beside its fields.
pub trait ReleaseOutput {
    /// Whether every number is finite: JSON has no NaN or ∞, and a
    /// response never carries `null` where a number is specified.
    fn is_finite(&self) -> bool;

    /// The logistic-regression model it gave, in raw feature units: its
    /// weights and intercept.
    fn model(&self) -> Option<(&[f64], f64)> {
        None
    }
}

/// Declares the release kinds, one line each: `Variant(ParamsType)`. A
/// kind's parameters type is a [`ReleaseKind`] in its own file; this makes
/// [`ReleaseParams`] (in this order, which the untagged serialisation and
/// the OpenAPI schema keep), its `kind` and parse, [`KINDS`] and the
/// request's OpenAPI schema.
macro_rules! kinds {
    ($($variant:ident($params:ty)),+ $(,)?) => {
        /// A release kind's own parameters, by `kind`.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum ReleaseParams {
            $($variant($params),)+
        }

        /// The `kind`s there are.
        pub const KINDS: &[&str] = &[$(<$params as ReleaseKind>::KIND,)+];

        impl ReleaseParams {
            /// The `kind` string.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(ReleaseParams::$variant(_) => <$params as ReleaseKind>::KIND,)+
                }
            }

            /// The target noise std named instead of ε, if any.
            pub fn target(&self) -> Option<f64> {
                match self {
                    $(ReleaseParams::$variant(params) => params.target(),)+
                }
            }

            /// The name of the kind's target field.
            pub fn target_name(&self) -> &'static str {
                match self {
                    $(ReleaseParams::$variant(_) => <$params as ReleaseKind>::TARGET_NAME,)+
                }
            }

            /// The other datasets whose rows the release reads (and which
            /// it debits).
            pub fn sources(&self) -> &[Uuid] {
                match self {
                    $(ReleaseParams::$variant(params) => params.sources(),)+
                }
            }

            /// The parameters of `kind` from the request's other fields.
            ///
            /// # Errors
            /// An unknown kind, or fields the kind does not have or cannot
            /// read.
            pub(crate) fn parse(
                kind: &str,
                fields: serde_json::Map<String, serde_json::Value>,
            ) -> Result<Self, String> {
                let read = || serde_json::Value::Object(fields);
                $(if kind == <$params as ReleaseKind>::KIND {
                    return <$params>::deserialize(read())
                        .map(ReleaseParams::$variant)
                        .map_err(|error| error.to_string());
                })+
                Err(format!(
                    "unknown variant `{kind}`, expected one of {}",
                    KINDS.iter().map(|kind| format!("`{kind}`")).collect::<Vec<_>>().join(", ")
                ))
            }
        }

        /// One object per kind: the kind's parameters with `kind`,
        /// `epsilon` and `delta` added.
        impl utoipa::PartialSchema for ReleaseRequest {
            fn schema() -> RefOr<Schema> {
                OneOfBuilder::new()
                    $(.item(request_object::<$params>()))+
                    .description(Some(REQUEST_DESCRIPTION))
                    .into()
            }
        }

        impl ToSchema for ReleaseRequest {
            fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
                $(<$params as ToSchema>::schemas(schemas);)+
            }
        }
    };
}

kinds! {
    Walr(WalrParams),
    Aggregate(AggregateParams),
    OutputPerturbation(OutputPerturbationParams),
    ObjectivePerturbation(ObjectivePerturbationParams),
    DpGd(DpGdParams),
    DpSgd(DpSgdParams),
    FrankWolfe(FrankWolfeParams),
    Gradient(GradientParams),
}

/// Declares the release results, one line each: `Variant(ResultType)`,
/// each a [`ReleaseOutput`] in its kind's file; tried in this order when
/// read (the serialisation is untagged).
macro_rules! results {
    ($($variant:ident($result:ty)),+ $(,)?) => {
        /// The released numbers, by kind.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
        #[serde(untagged)]
        pub enum ReleaseResult {
            $($variant($result),)+
        }

        impl ReleaseOutput for ReleaseResult {
            fn is_finite(&self) -> bool {
                match self {
                    $(ReleaseResult::$variant(result) => result.is_finite(),)+
                }
            }

            fn model(&self) -> Option<(&[f64], f64)> {
                match self {
                    $(ReleaseResult::$variant(result) => result.model(),)+
                }
            }
        }
    };
}

results! {
    Walr(WalrResult),
    Aggregate(AggregateResult),
    Model(ModelResult),
    DpGd(DpGdResult),
    DpSgd(DpSgdResult),
    FrankWolfe(FrankWolfeResult),
    Gradient(GradientResult),
}

const REQUEST_DESCRIPTION: &str = "`POST /v1/datasets/{id}/releases`: `{\"kind\": …, \"epsilon\": …, \"delta\": …,\n\
     params…}`. Unknown fields, and fields of another kind, are refused, so a\n\
     misspelt parameter never silently falls back to its default.";

/// A kind's parameters with `kind`, `epsilon` and `delta` added: one
/// object of the request's schema.
fn request_object<T: ReleaseKind>() -> Object {
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

pub(crate) fn yes() -> bool {
    true
}

pub(crate) fn one() -> f64 {
    1.0
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
    /// Rows in the dataset when the release was computed; absent under
    /// privacy unit `user`, where N is private.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
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
