//! The dpgate wire format: request, response and problem types shared by the
//! server and its clients, one definition each. Field names follow the
//! contract of DESIGN §8; add around them, never rename.

// Production functions stay short enough to read (clippy.toml: 120
// lines); tests may spell a scenario out at length.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]
#![forbid(unsafe_code)]

mod datasets;
mod feature_map;
mod lambda;
mod ledger;
mod problem;
mod registrations;
mod releases;
pub mod schemas;
pub mod strict;

pub use datasets::{
    AccountantKind, AnalystSpend, BoundedColumn, Budget, BudgetChange, ContributionBounds,
    CreateDataset, Dataset, DatasetList, Dimension, IngestReport, PrivacyUnit, RegisterRows,
    Remaining, Source, Spent,
};
pub use feature_map::{FeatureMap, MapError, WalrMap};
pub use lambda::{Lambda, MAX_CANDIDATES, MIN_CANDIDATES};
pub use ledger::{
    LedgerBreak, LedgerEntry, LedgerEvent, LedgerPage, LedgerVerification, PrivacyProfile,
    ProfilePoint,
};
pub use problem::{LineError, Problem, ProblemType};
pub use registrations::{RESPOND_ASYNC, Registration, RegistrationState};
pub use releases::{
    AggregateGroup, AggregateMechanism, AggregateParams, AggregateResult, DebiasParams, DpGdParams,
    DpGdResult, DpSgdParams, DpSgdResult, FrankWolfeParams, FrankWolfeResult, GradientCall,
    GradientCallResult, GradientLoss, GradientMechanism, GradientParams, GradientResult,
    GradientSession, Iterate, KINDS, LambdaSelection, ModelResult, NoiseDetails, ObjectiveDetails,
    ObjectivePerturbationParams, OutputPerturbationParams, ProjectionParams, ProjectionUsed,
    Release, ReleaseKind, ReleaseList, ReleaseOutput, ReleaseParams, ReleaseRequest, ReleaseResult,
    ReleaseSummary, Seed, Selection, SourceUsed, StageUsed, SuppliedRow, WalrParams, WalrResult,
    WarmStart,
};

/// Media type of problem documents (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Media type of newline-delimited JSON row uploads.
pub const NDJSON: &str = "application/x-ndjson";

/// Media type of CSV row uploads.
pub const CSV: &str = "text/csv";

/// Media type of the Arrow IPC stream format (the binary feature export,
/// and an upload format).
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";

/// Media type of Parquet files (an upload format).
pub const PARQUET: &str = "application/vnd.apache.parquet";

/// The request header that makes a release idempotent.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
