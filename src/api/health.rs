//! Liveness (open to all) and metrics (served only on their own listener,
//! `DPGATE_METRICS_ADDR`: per-route latencies are a side channel).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::Problem;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use crate::api::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    status: &'static str,
}

/// Liveness: the server answers and its database does.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    responses(
        (status = 200, description = "Healthy", body = Health),
        (status = 500, description = "The database does not answer", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn healthz(State(state): State<AppState>) -> Result<axum::Json<Health>, ApiError> {
    state.store.ping().await?;
    Ok(axum::Json(Health { status: "ok" }))
}

/// Prometheus metrics in the text exposition format.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut response = (StatusCode::OK, state.metrics.render()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}
