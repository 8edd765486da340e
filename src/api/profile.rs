//! `GET /v1/datasets/{id}/privacy-profile`: ε as a function of δ for what
//! a ledger has composed so far.

use axum::Json;
use axum::extract::{Path, State};
use dpgate_api_types::{PrivacyProfile, Problem};
use serde::Deserialize;
use utoipa::IntoParams;

use super::datasets::load_visible;
use super::error::ApiError;
use super::extract::{ApiQuery, Caller};
use crate::api::AppState;
use crate::domain::auth::Role;
use crate::domain::profile;
use crate::ledger;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProfileQuery {
    /// Comma-separated δ in [0, 1), at most 200 (default: 10⁻¹² to 10⁻¹ by
    /// decades, and the dataset's budget δ).
    deltas: Option<String>,
    /// Admins: one analyst's releases instead of the whole ledger.
    /// Analysts always get their own.
    analyst: Option<String>,
}

/// The ledger's privacy profile: for each δ, the smallest ε (rounded up
/// like `spent`) for which the releases so far are (ε, δ)-DP under the
/// dataset's accountant (`rdp`: exact Gaussian composition while every
/// release is Gaussian, RDP otherwise, and basic composition where its δ
/// fits; `basic`: Σεᵢ from δ = Σδᵢ on). At the budget's δ it is `spent`.
/// Admins see the whole ledger (or one analyst's part with `analyst`);
/// an analyst sees the releases they made.
#[utoipa::path(
    get,
    path = "/v1/datasets/{id}/privacy-profile",
    operation_id = "getPrivacyProfile",
    tag = "ledger",
    params(("id" = Uuid, Path, description = "Dataset id"), ProfileQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "ε at each δ asked for", body = PrivacyProfile),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not granted this dataset, or an analyst asking for another's", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad δ", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ProfileQuery>,
) -> Result<Json<PrivacyProfile>, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let analyst = match (caller.role, query.analyst) {
        (Role::Admin, analyst) => analyst,
        (Role::Analyst, Some(other)) if other != caller.sub => {
            return Err(ApiError::Forbidden(
                "an analyst may see only their own privacy profile".to_owned(),
            ));
        }
        (Role::Analyst, _) => Some(caller.sub.clone()),
    };
    let deltas = profile::deltas(query.deltas.as_deref(), dataset.budget.delta)
        .map_err(ApiError::Invalid)?;
    let composition =
        ledger::composition(state.store.as_ref(), &dataset, analyst.as_deref()).await?;
    profile::profile(&composition, dataset.accountant, analyst, &deltas)
        .map(Json)
        .map_err(ApiError::Invalid)
}
