//! `ApiError`: every failure a handler returns, turned into an RFC 9457
//! problem document with a stable `type`. Internal errors are logged with
//! their cause chain and never shown to the caller.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{LineError, PROBLEM_JSON, Problem, ProblemType, Remaining};

use crate::releases::ReleaseError;
use crate::store::StoreError;

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 409 `budget-exhausted`.
    #[error("{detail}")]
    BudgetExhausted {
        detail: String,
        remaining: Remaining,
    },
    /// 422 `invalid-input`: well-formed but not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// 400 `invalid-input`: not even parseable.
    #[error("{0}")]
    Malformed(String),
    /// 422 `invalid-input` naming the first bad lines of an upload.
    #[error("{detail}")]
    BadLines {
        detail: String,
        lines: Vec<LineError>,
    },
    /// 401 `unauthorized`.
    #[error("{0}")]
    Unauthorized(String),
    /// 403 `forbidden`.
    #[error("{0}")]
    Forbidden(String),
    /// 403 `features-not-public`.
    #[error("{0}")]
    FeaturesNotPublic(String),
    /// 404 `not-found`.
    #[error("{0}")]
    NotFound(String),
    /// 409 `conflict`.
    #[error("{0}")]
    Conflict(String),
    /// 413 `payload-too-large`.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// 415 `unsupported-media-type`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 405 `method-not-allowed`.
    #[error("this route does not accept this method")]
    MethodNotAllowed,
    /// 503 `timeout`, with `Retry-After`.
    #[error(
        "the request took longer than {0:?}; a release already debited is still being made: \
         retry with the same Idempotency-Key"
    )]
    Timeout(std::time::Duration),
    /// 500 `release-failed`: debited, not made; the ledger entry stays.
    #[error("{detail}")]
    ReleaseFailed { release: uuid::Uuid, detail: String },
    /// 500 `internal`; the cause goes to the log only.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    fn kind(&self) -> (StatusCode, ProblemType) {
        match self {
            ApiError::BudgetExhausted { .. } => {
                (StatusCode::CONFLICT, ProblemType::BudgetExhausted)
            }
            ApiError::Invalid(_) | ApiError::BadLines { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, ProblemType::InvalidInput)
            }
            ApiError::Malformed(_) => (StatusCode::BAD_REQUEST, ProblemType::InvalidInput),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, ProblemType::Unauthorized),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, ProblemType::Forbidden),
            ApiError::FeaturesNotPublic(_) => {
                (StatusCode::FORBIDDEN, ProblemType::FeaturesNotPublic)
            }
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ProblemType::NotFound),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, ProblemType::Conflict),
            ApiError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ProblemType::PayloadTooLarge)
            }
            ApiError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ProblemType::UnsupportedMediaType,
            ),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                ProblemType::MethodNotAllowed,
            ),
            ApiError::Timeout(_) => (StatusCode::SERVICE_UNAVAILABLE, ProblemType::Timeout),
            ApiError::ReleaseFailed { .. } => (
                StatusCode::INTERNAL_SERVER_ERROR,
                ProblemType::ReleaseFailed,
            ),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ProblemType::Internal),
        }
    }

    /// The problem document this error answers, with its status (an
    /// internal error's cause goes to the log, not into the document).
    pub fn problem(self) -> (StatusCode, Problem) {
        let (status, kind) = self.kind();
        let detail = match &self {
            ApiError::Internal(error) => {
                tracing::error!(error = format!("{error:#}"), "internal error");
                "the server failed to handle the request; it has been logged".to_owned()
            }
            other => other.to_string(),
        };
        let (errors, remaining, release_id) = match self {
            ApiError::BadLines { lines, .. } => (lines, None, None),
            ApiError::BudgetExhausted { remaining, .. } => (Vec::new(), Some(remaining), None),
            ApiError::ReleaseFailed { release, .. } => (Vec::new(), None, Some(release)),
            _ => (Vec::new(), None, None),
        };
        let problem = Problem {
            problem_type: kind.uri(),
            title: kind.title().to_owned(),
            status: status.as_u16(),
            detail,
            errors,
            remaining,
            release_id,
            request_id: None,
        };
        (status, problem)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = matches!(self, ApiError::Timeout(_));
        let challenge = matches!(self, ApiError::Unauthorized(_));
        let (status, problem) = self.problem();
        let mut response = problem_response(status, &problem);
        if retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if challenge {
            // RFC 6750 §3: a 401 names the scheme it wants.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"dpgate\""),
            );
        }
        response
    }
}

/// Writes a problem document with its media type.
pub fn problem_response(status: StatusCode, problem: &Problem) -> Response {
    let body = serde_json::to_string(problem).expect("BUG: a problem document is plain data");
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}

impl From<crate::domain::clock::ClockError> for ApiError {
    fn from(error: crate::domain::clock::ClockError) -> Self {
        ApiError::Internal(error.into())
    }
}

impl From<crate::export::ExportError> for ApiError {
    fn from(error: crate::export::ExportError) -> Self {
        match error {
            crate::export::ExportError::Store(error) => error.into(),
            encode @ crate::export::ExportError::Encode(_) => ApiError::Internal(encode.into()),
        }
    }
}

impl From<crate::uploads::UploadError> for ApiError {
    fn from(error: crate::uploads::UploadError) -> Self {
        use crate::uploads::UploadError;
        match error {
            too_large @ UploadError::TooLarge(_) => {
                ApiError::PayloadTooLarge(too_large.to_string())
            }
            UploadError::Malformed(detail) => ApiError::Malformed(detail),
            UploadError::Invalid(detail) => ApiError::Invalid(detail),
            UploadError::Forbidden(detail) => ApiError::Forbidden(detail),
            UploadError::BadLines { detail, lines } => ApiError::BadLines { detail, lines },
            UploadError::Store(error) => error.into(),
            UploadError::Internal(error) => ApiError::Internal(error),
        }
    }
}

impl From<crate::uploads::background::StartError> for ApiError {
    fn from(error: crate::uploads::background::StartError) -> Self {
        match error {
            crate::uploads::background::StartError::Clock(error) => error.into(),
            crate::uploads::background::StartError::Store(error) => error.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Conflict(detail) => ApiError::Conflict(detail),
            changed @ StoreError::Changed(_) => ApiError::Conflict(changed.to_string()),
            other => ApiError::Internal(other.into()),
        }
    }
}

impl From<ReleaseError> for ApiError {
    fn from(error: ReleaseError) -> Self {
        match error {
            ReleaseError::Invalid(detail) => ApiError::Invalid(detail),
            ReleaseError::NoDataset => ApiError::NotFound("no such dataset".to_owned()),
            ReleaseError::NotFound(detail) => ApiError::NotFound(detail),
            ReleaseError::BudgetExhausted { detail, remaining } => {
                ApiError::BudgetExhausted { detail, remaining }
            }
            ReleaseError::Conflict(detail) => ApiError::Conflict(detail),
            ReleaseError::Failed { release, detail } => ApiError::ReleaseFailed { release, detail },
            ReleaseError::Store(error) => error.into(),
            ReleaseError::Internal(error) => ApiError::Internal(error),
        }
    }
}
