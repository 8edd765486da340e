//! `GET /v1/datasets/{id}/privacy-profile`: ε as a function of δ for what
//! a ledger has composed so far.

use axum::Json;
use axum::extract::{Path, State};
use dpgate_api_types::{PrivacyProfile, Problem, ProfilePoint};
use serde::Deserialize;
use utoipa::IntoParams;

use super::datasets::load_visible;
use super::extract::{ApiQuery, Caller};
use crate::app::AppState;
use crate::auth::Role;
use crate::dataset::accountant_kind;
use crate::dp::{Composition, Delta};
use crate::error::ApiError;

/// Most δ one request may ask for.
const MAX_DELTAS: usize = 200;

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
    let deltas = match query.deltas.as_deref() {
        Some(text) => parse_deltas(text)?,
        None => (1..=12)
            .rev()
            .map(|decade| 10f64.powi(-decade))
            .chain([dataset.budget.delta.value()])
            .collect(),
    };
    let composition: Composition = match &analyst {
        None => dataset.composition.clone(),
        Some(analyst) => state
            .store
            .dataset_with_analyst(dataset.id, analyst)
            .await?
            .map(|(_, record)| record.composition)
            .unwrap_or_default(),
    };
    let points = deltas
        .into_iter()
        .map(|delta| {
            let exact = Delta::new(delta).map_err(|error| ApiError::Invalid(error.to_string()))?;
            Ok(ProfilePoint {
                delta,
                epsilon: composition
                    .epsilon_at(dataset.accountant, exact)
                    .map(|epsilon| epsilon.value()),
            })
        })
        .collect::<Result<_, ApiError>>()?;
    Ok(Json(PrivacyProfile {
        accountant: accountant_kind(dataset.accountant),
        analyst,
        releases: composition.releases(),
        points,
    }))
}

fn parse_deltas(text: &str) -> Result<Vec<f64>, ApiError> {
    let deltas: Vec<f64> = text
        .split(',')
        .map(|part| {
            part.trim()
                .parse::<f64>()
                .ok()
                .filter(|delta| (0.0..1.0).contains(delta))
                .ok_or_else(|| {
                    ApiError::Invalid(format!(
                        "deltas must be numbers in [0, 1), comma-separated (got {part:?})"
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    if deltas.len() > MAX_DELTAS {
        return Err(ApiError::Invalid(format!(
            "at most {MAX_DELTAS} deltas (got {})",
            deltas.len()
        )));
    }
    Ok(deltas)
}
