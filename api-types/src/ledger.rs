//! The budget ledger as admins audit it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{AccountantKind, Budget, Spent};

/// What a ledger entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LedgerEvent {
    /// The dataset was created with its budget (always entry 0).
    Open,
    /// A release debited the budget.
    Release,
    /// An admin changed the dataset's total budget.
    Budget,
    /// An admin set or removed an analyst's cap.
    Cap,
}

/// One entry of a dataset's hash-chained ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LedgerEntry {
    /// Position in the dataset's ledger, from 0.
    pub seq: u64,
    pub event: LedgerEvent,
    /// The token subject that caused it.
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_id: Option<Uuid>,
    /// The nominal (ε, δ) debited (0 for events that spend nothing).
    pub epsilon: f64,
    pub delta: f64,
    /// The noise behind a release (its privacy-loss description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub loss: Option<Value>,
    /// Event details (the budget of an `open`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
    /// RFC 3339.
    pub created_at: String,
    /// SHA-256 of the previous entry (hex; 64 zeros for entry 0).
    pub prev_hash: String,
    /// SHA-256 of this entry's canonical form, including `prev_hash`.
    pub hash: String,
    pub dataset_id: Uuid,
    /// What the ledger had spent after this entry, as the dataset's
    /// `spent` reports it (under the budget then in force); absent when an
    /// entry up to here cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_after: Option<Spent>,
    /// The total budget in force after this entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_after: Option<Budget>,
}

/// A page of the ledger, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LedgerPage {
    pub entries: Vec<LedgerEntry>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<u64>,
}

/// `POST /v1/datasets/{id}/ledger/verify`: the whole chain walked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LedgerVerification {
    /// Every hash and link recomputed, and the dataset's running state
    /// equal to what its entries add up to.
    pub intact: bool,
    /// Entries checked (up to and including a break).
    pub entries: u64,
    #[serde(rename = "break", default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<LedgerBreak>,
}

/// Where a ledger stops verifying, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LedgerBreak {
    pub seq: u64,
    pub reason: String,
}

/// `GET /v1/datasets/{id}/privacy-profile`: ε as a function of δ for the
/// ledger so far (or one analyst's releases), under the dataset's
/// accountant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PrivacyProfile {
    pub accountant: AccountantKind,
    /// The analyst whose releases are measured; absent for the whole
    /// ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analyst: Option<String>,
    /// Releases composed.
    pub releases: u64,
    /// One point per δ asked for, in the order asked.
    pub points: Vec<ProfilePoint>,
}

/// The ledger is (ε, δ)-DP; ε rounded up like `spent`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProfilePoint {
    pub delta: f64,
    /// Absent where the accountant claims no finite ε at this δ (below the
    /// summed δ under `basic`; δ = 0 with Gaussian releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f64>,
}
