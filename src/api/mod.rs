//! The HTTP layer: routes, extractors, OpenAPI. No math here and no SQL.
//!
//! Every route is registered through utoipa-axum, so the router and the
//! OpenAPI document are built from one list and cannot drift apart; a test
//! keeps `openapi.yaml` equal to the generated document.

mod body;
mod budget;
mod console;
mod datasets;
mod error;
mod extract;
mod features;
mod health;
mod ledger;
mod profile;
mod registrations;
mod releases;
mod rows;
mod state;

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use dpgate_api_types::{LineError, Problem};
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use error::ApiError;
pub use state::{AppState, Limits};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "dpgate",
        description = "A private measurement service: labelled data in, only differentially \
            private releases out. Every release debits a persistent per-dataset (ε, δ) budget. \
            Errors are `application/problem+json` (RFC 9457) whose `type` is \
            `/problems/<slug>` with a stable slug: budget-exhausted, invalid-input, \
            unauthorized, forbidden, features-not-public, not-found, conflict, payload-too-large, \
            unsupported-media-type, method-not-allowed, internal."
    ),
    modifiers(&BearerAuth),
    components(schemas(Problem, LineError)),
    tags(
        (name = "datasets", description = "Datasets, their schema, rows and budget (admins create and load; analysts see the datasets they are granted)"),
        (name = "releases", description = "Differentially private releases (analysts)"),
        (name = "ledger", description = "The hash-chained budget ledger (admins)"),
        (name = "operations", description = "Liveness (metrics are served on a listener of their own, DPGATE_METRICS_ADDR)"),
    )
)]
struct ApiDoc;

/// Declares the bearer-token security scheme the routes refer to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

fn routes(limits: &Limits) -> OpenApiRouter<AppState> {
    // Release requests may carry supplied feature vectors: their own limit
    // (the innermost body limit wins).
    let (schemas, paths, releases) = routes!(releases::create, releases::list);
    let releases = releases.layer(DefaultBodyLimit::max(limits.release_bytes));
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(datasets::create, datasets::list))
        .routes(routes!(datasets::get))
        .routes(routes!(rows::upload))
        .routes(routes!(registrations::get))
        .routes((schemas, paths, releases))
        .routes(routes!(budget::change))
        .routes(routes!(features::export))
        .routes(routes!(releases::get))
        .routes(routes!(releases::call))
        .routes(routes!(ledger::page))
        .routes(routes!(ledger::verify))
        .routes(routes!(profile::get))
        .routes(routes!(health::healthz))
}

/// The OpenAPI document of every route the server serves.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes(&Limits::default()).split_for_parts().1
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".to_owned())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal(anyhow::anyhow!("a handler panicked")).into_response()
}

/// Answers 503 `timeout` once a request has taken `limit`. Dropping the
/// handler is safe: uploads roll back, and a debited release is made on a
/// task of its own, which a retry with the same Idempotency-Key collects.
async fn deadline(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout(limit).into_response(),
    }
}

/// Counts requests and their latency by route template and status.
async fn record(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let labels = [("route", route), ("method", method), ("status", status)];
    metrics::counter!("dpgate_http_requests_total", &labels).increment(1);
    metrics::histogram!("dpgate_http_request_seconds", &labels).record(started.elapsed());
    response
}

/// The id of every request: the caller's `x-request-id`, or a fresh UUID.
const REQUEST_ID: &str = "x-request-id";

/// The request's id, for its span and its problem documents.
fn request_id(request: &Request) -> String {
    request
        .headers()
        .get(REQUEST_ID)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Writes the request id into every problem document, so that a caller's
/// report of an error leads to its log lines.
async fn stamp_problems(request: Request, next: Next) -> Response {
    let id = request_id(&request);
    let response = next.run(request).await;
    let is_problem = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|kind| kind.as_bytes() == dpgate_api_types::PROBLEM_JSON.as_bytes());
    if !is_problem || id.is_empty() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, PROBLEM_BYTES).await else {
        return ApiError::Internal(anyhow::anyhow!("a problem document too large to stamp"))
            .into_response();
    };
    let stamped = serde_json::from_slice::<Problem>(&bytes).and_then(|mut problem| {
        problem.request_id = Some(id);
        serde_json::to_vec(&problem)
    });
    let body = stamped.map_or(bytes, axum::body::Bytes::from);
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// The largest problem document (an upload's 20 bad lines included).
const PROBLEM_BYTES: usize = 1 << 20;

/// The application's router, with its fallbacks and middleware.
pub fn router(state: AppState) -> Router {
    let body_limit = state.limits.body_bytes;
    let timeout = state.limits.request_timeout;
    let max_concurrent = state.limits.max_concurrent;
    routes(&state.limits)
        .split_for_parts()
        .0
        .merge(console::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(timeout, deadline))
        .layer(middleware::from_fn(body::plain_bodies))
        .layer(middleware::from_fn(record))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn(stamp_problems))
        .layer(GlobalConcurrencyLimitLayer::new(max_concurrent))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %request.uri().path(),
                        request_id = %request_id(request),
                    )
                })
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
        )
        .layer(PropagateRequestIdLayer::new(
            REQUEST_ID.parse().expect("a header name"),
        ))
        .layer(SetRequestIdLayer::new(
            REQUEST_ID.parse().expect("a header name"),
            MakeRequestUuid,
        ))
        .with_state(state)
}

/// The metrics listener's router: `/metrics` and nothing else.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(health::metrics))
        .fallback(not_found)
        .with_state(state)
}
