//! Registrations of Parquet in place that run in the background.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{IngestReport, Problem};

/// The `Prefer` header's value (RFC 7240) that asks for a registration in
/// the background: the request is answered `202 Accepted` at once, with
/// the registration's address in `Location`.
pub const RESPOND_ASYNC: &str = "respond-async";

/// Where a registration of Parquet in place stands. Asked for with
/// `Prefer: respond-async` (by `POST /v1/datasets` with a `source`, or
/// `POST /v1/datasets/{id}/rows` naming one), it reads and checks every
/// row in the background, and ends as the synchronous call would have:
/// `done`, with what it added, or `failed`, with the problem that call
/// would have answered (bad rows by file and row; nothing registered).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Registration {
    pub id: Uuid,
    /// The dataset it creates (which exists only once it is done) or
    /// appends a version to.
    pub dataset_id: Uuid,
    pub state: RegistrationState,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, once done or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Once done: the rows added and the dataset's N after them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<IngestReport>,
    /// Once failed: why, as the synchronous call would have answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
}

/// A registration's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationState {
    /// Reading and checking the files.
    Running,
    /// Registered: the version is the dataset's.
    Done,
    /// Nothing registered (see `problem`): bad rows, a file that changed
    /// while it was read, or the replica running it stopped.
    Failed,
}
