//! The budget ledger as admins audit it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

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
}

/// A page of the ledger, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LedgerPage {
    pub entries: Vec<LedgerEntry>,
    /// Pass as `after` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<u64>,
}
