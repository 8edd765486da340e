//! Problem documents (RFC 9457) and their stable types.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::Remaining;

/// Every kind of error the API returns. The `type` URI of a problem is
/// `/problems/<slug>`; slugs never change, so clients can match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemType {
    /// 409: the release does not fit the remaining budget.
    BudgetExhausted,
    /// 422 (or 400 for unparseable bodies): the request is malformed.
    InvalidInput,
    /// 401: no token, or a token that is invalid, expired or revoked.
    Unauthorized,
    /// 403: a valid token without the role or dataset grant the route needs.
    Forbidden,
    /// 403: the features of a dataset whose privacy unit is `row` are
    /// private, so they are never exported.
    FeaturesNotPublic,
    /// 404: no such route, dataset or release (for this caller).
    NotFound,
    /// 409: the request conflicts with stored state (a taken name, a reused
    /// idempotency key, …).
    Conflict,
    /// 413: the body exceeds the configured limit.
    PayloadTooLarge,
    /// 415: the body's media type is not accepted on this route.
    UnsupportedMediaType,
    /// 405: the route exists but not for this method.
    MethodNotAllowed,
    /// 503: the request took longer than the server allows. A release
    /// already debited is still made: retry with the same Idempotency-Key.
    Timeout,
    /// 500: a fault on the server; the detail is in its log, not here.
    Internal,
    /// 500: the release was debited but could not be made. Its ledger
    /// entry stays; a retry with the same `Idempotency-Key` gets the same
    /// answer, never fresh noise.
    ReleaseFailed,
}

impl ProblemType {
    /// All problem types, for exhaustive tests and documentation.
    pub const ALL: [ProblemType; 13] = [
        ProblemType::BudgetExhausted,
        ProblemType::InvalidInput,
        ProblemType::Unauthorized,
        ProblemType::Forbidden,
        ProblemType::FeaturesNotPublic,
        ProblemType::NotFound,
        ProblemType::Conflict,
        ProblemType::PayloadTooLarge,
        ProblemType::UnsupportedMediaType,
        ProblemType::MethodNotAllowed,
        ProblemType::Timeout,
        ProblemType::Internal,
        ProblemType::ReleaseFailed,
    ];

    /// The stable last segment of the `type` URI.
    pub fn slug(self) -> &'static str {
        match self {
            ProblemType::BudgetExhausted => "budget-exhausted",
            ProblemType::InvalidInput => "invalid-input",
            ProblemType::Unauthorized => "unauthorized",
            ProblemType::Forbidden => "forbidden",
            ProblemType::FeaturesNotPublic => "features-not-public",
            ProblemType::NotFound => "not-found",
            ProblemType::Conflict => "conflict",
            ProblemType::PayloadTooLarge => "payload-too-large",
            ProblemType::UnsupportedMediaType => "unsupported-media-type",
            ProblemType::MethodNotAllowed => "method-not-allowed",
            ProblemType::Timeout => "timeout",
            ProblemType::Internal => "internal",
            ProblemType::ReleaseFailed => "release-failed",
        }
    }

    /// The problem's `type` URI (relative to the API's base).
    pub fn uri(self) -> String {
        format!("/problems/{}", self.slug())
    }

    /// The short, fixed human title of the type.
    pub fn title(self) -> &'static str {
        match self {
            ProblemType::BudgetExhausted => "Privacy budget exhausted",
            ProblemType::InvalidInput => "Invalid input",
            ProblemType::Unauthorized => "Unauthorized",
            ProblemType::Forbidden => "Forbidden",
            ProblemType::FeaturesNotPublic => "Features are not public",
            ProblemType::NotFound => "Not found",
            ProblemType::Conflict => "Conflict",
            ProblemType::PayloadTooLarge => "Payload too large",
            ProblemType::UnsupportedMediaType => "Unsupported media type",
            ProblemType::MethodNotAllowed => "Method not allowed",
            ProblemType::Timeout => "Request timed out",
            ProblemType::Internal => "Internal server error",
            ProblemType::ReleaseFailed => "Release failed after its debit",
        }
    }

    /// The type named by a problem's `type` URI, if it is one of ours.
    pub fn from_uri(uri: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| uri.rsplit('/').next() == Some(kind.slug()))
    }
}

/// A problem document, `application/problem+json` (RFC 9457).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// `/problems/<slug>`; see [`ProblemType`].
    #[serde(rename = "type")]
    pub problem_type: String,
    pub title: String,
    pub status: u16,
    /// What went wrong with this request, for a person to read.
    pub detail: String,
    /// The first bad lines of a rejected upload (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<LineError>,
    /// On `budget-exhausted`: what the dataset (or the caller's cap) has left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<Remaining>,
    /// On `release-failed`: the release whose debit stays in the ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_id: Option<uuid::Uuid>,
    /// The request's `x-request-id` (the caller's, or one the server made),
    /// which every log line of the request carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Problem {
    /// The problem's type, if the server sent one of ours.
    pub fn kind(&self) -> Option<ProblemType> {
        ProblemType::from_uri(&self.problem_type)
    }
}

/// One rejected line of an upload, or row of a registered file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LineError {
    /// 1-based line number in the uploaded file (a CSV header is line 1);
    /// in Arrow and Parquet, the row number from 1.
    pub line: u64,
    pub reason: String,
    /// Of data registered in place: the file the row is in (its name
    /// within the registered directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl LineError {
    /// A bad line of an upload.
    pub fn new(line: u64, reason: String) -> LineError {
        LineError {
            line,
            reason,
            file: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_its_uri() {
        for kind in ProblemType::ALL {
            assert_eq!(ProblemType::from_uri(&kind.uri()), Some(kind));
            assert!(kind.uri().ends_with(kind.slug()));
        }
        assert_eq!(ProblemType::from_uri("/problems/unheard-of"), None);
    }
}
