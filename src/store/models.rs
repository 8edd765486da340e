//! What the store takes and answers besides the domain's own records.

use super::StoreError;
use super::blocks::Packed;
use crate::domain::budget::AnalystRecord;
use crate::domain::dataset::DatasetRecord;

/// Which of a snapshot's manifest records to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Files {
    Inputs,
    /// Inputs and outcomes.
    All,
    /// The inputs of files registered in place.
    RegisteredInputs,
}

/// A new dataset and who creates it.
#[derive(Debug, Clone)]
pub struct NewDataset {
    pub record: DatasetRecord,
    pub actor: String,
}

/// How a budget change ended.
#[derive(Debug)]
pub enum BudgetOutcome {
    /// Committed: the dataset and its analysts as they now stand.
    Changed(Box<DatasetRecord>, Vec<AnalystRecord>),
    /// The new total is below what is spent; nothing was written.
    Refused(String),
    NoDataset,
}

/// A claimed call of a gradient session.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCall {
    /// SHA-256 of the θ it was claimed for.
    pub theta_hash: String,
    /// The exact response body sent, once made.
    pub response: Option<String>,
    /// The problem answered when it could not be made (it stays spent).
    pub failure: Option<String>,
}

/// How a claim on a session's call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CallClaim {
    /// This request claimed it; `claimed` calls of the session are taken
    /// now, this one included.
    Claimed { claimed: u64 },
    /// An earlier request did.
    Taken(StoredCall),
}

/// An upload's blocks as stored before the `version_files` migration.
pub type StoredBlocks = tokio_stream::wrappers::ReceiverStream<Result<Packed, StoreError>>;
