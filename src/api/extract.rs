//! Extractors that fail as problem documents: the authenticated caller
//! (checked for its role and grant before any body is read), and query
//! strings whose rejections become `invalid-input`.

use axum::extract::FromRequestParts;
use axum::extract::rejection::QueryRejection;
use axum::http::request::Parts;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use utoipa::IntoParams;
use uuid::Uuid;

use super::error::ApiError;
use crate::api::AppState;
use crate::domain::auth::Role;

/// The authenticated caller of a request: a valid, unrevoked bearer token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub sub: String,
    pub role: Role,
    pub datasets: Vec<Uuid>,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .ok_or_else(|| ApiError::Unauthorized("missing bearer token".to_owned()))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|value| {
                let (scheme, token) = value.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or_else(|| {
                ApiError::Unauthorized(
                    "the Authorization header must be `Bearer <token>`".to_owned(),
                )
            })?;
        let claims = state
            .keys
            .verify(token)
            .map_err(|error| ApiError::Unauthorized(error.0))?;
        if state.store.is_revoked(&claims.jti).await? {
            return Err(ApiError::Unauthorized(
                "the token has been revoked".to_owned(),
            ));
        }
        Ok(Caller {
            sub: claims.sub,
            role: claims.role,
            datasets: claims.datasets,
        })
    }
}

impl Caller {
    /// Only admins pass.
    pub fn admin(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Analyst => Err(ApiError::Forbidden("this route is for admins".to_owned())),
        }
    }

    /// Only analysts granted `dataset` pass.
    pub fn analyst_of(&self, dataset: Uuid) -> Result<(), ApiError> {
        match self.role {
            Role::Analyst if self.datasets.contains(&dataset) => Ok(()),
            Role::Analyst => Err(ApiError::Forbidden(
                "your token does not grant this dataset".to_owned(),
            )),
            Role::Admin => Err(ApiError::Forbidden("this route is for analysts".to_owned())),
        }
    }

    /// Admins, and analysts granted `dataset`, pass.
    pub fn may_see(&self, dataset: Uuid) -> Result<(), ApiError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Analyst => self.analyst_of(dataset),
        }
    }
}

/// An admin, checked from the headers alone: an analyst's request is 403
/// whatever its body says.
pub struct Admin(pub Caller);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        caller.admin()?;
        Ok(Admin(caller))
    }
}

/// An analyst granted the dataset `{id}` of the path, checked from the
/// headers and path alone; the id is `None` when it is not a UUID (a
/// dataset that cannot exist: 404 once the grant is checked).
pub struct GrantedAnalyst {
    pub caller: Caller,
    pub dataset: Uuid,
}

impl FromRequestParts<AppState> for GrantedAnalyst {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|_| ApiError::NotFound("no such dataset".to_owned()))?;
        match Uuid::parse_str(&id) {
            Ok(dataset) => {
                caller.analyst_of(dataset)?;
                Ok(GrantedAnalyst { caller, dataset })
            }
            Err(_) => {
                caller.analyst_of(Uuid::nil())?;
                Err(ApiError::NotFound("no such dataset".to_owned()))
            }
        }
    }
}

/// A dataset or release id from the path; one that is not a UUID names
/// nothing that exists.
pub fn parse_id(what: &str, text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| ApiError::NotFound(format!("no such {what}")))
}

/// `axum::extract::Query` whose rejections are 422 problem documents.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| ApiQuery(value))
            .map_err(|error: QueryRejection| ApiError::Invalid(error.body_text()))
    }
}

/// Largest page of a listing.
const MAX_PAGE: u32 = 1000;
const DEFAULT_PAGE: u32 = 100;

/// Keyset paging over a listing ordered by ledger sequence number.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Return items with a larger sequence number (the previous page's
    /// `next_after`).
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_u64)]
    pub after: Option<u64>,
    /// Items per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

impl PageQuery {
    /// The page size asked for, checked.
    pub fn limit(&self) -> Result<u32, ApiError> {
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ApiError::Invalid(format!(
                "limit must be 1 to {MAX_PAGE} (got {limit})"
            )));
        }
        Ok(limit)
    }

    /// The cursor asked for, checked: sequence numbers are 63-bit.
    pub fn after(&self) -> Result<Option<u64>, ApiError> {
        match self.after {
            Some(after) if after > i64::MAX as u64 => Err(ApiError::Invalid(format!(
                "after must be at most {} (got {after})",
                i64::MAX
            ))),
            other => Ok(other),
        }
    }

    /// The `next_after` of a page: the last item's sequence number when the
    /// page is full (there may be more), else none.
    pub fn next_after<T>(limit: u32, items: &[T], seq: impl Fn(&T) -> u64) -> Option<u64> {
        (items.len() == limit as usize)
            .then(|| items.last().map(seq))
            .flatten()
    }
}
