//! `/admin`: the admin console, a static page compiled into the binary.
//!
//! The page holds no secret and has no powers of its own: it asks for a
//! token and calls the public API with it, so it is served to anyone. It
//! is not API and so not in the OpenAPI document. A strict
//! Content-Security-Policy keeps any injected markup from running script or
//! reaching another origin, and the page may not be framed (clickjacking).

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::error::ApiError;

const INDEX: &str = include_str!("../../admin/index.html");
const SCRIPT: &str = include_str!("../../admin/app.js");
const STYLE: &str = include_str!("../../admin/app.css");

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

const SECURITY_HEADERS: [(HeaderName, &str); 5] = [
    (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    // Revalidate on every load, so an upgraded server never runs an old
    // script against its new API.
    (header::CACHE_CONTROL, "no-cache"),
];

/// The console's routes; every answer under `/admin` carries the security
/// headers, a 404 for an unknown file included.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/admin", get(|| file(HTML, INDEX)))
        .route("/admin/", get(|| file(HTML, INDEX)))
        .route("/admin/app.js", get(|| file(JAVASCRIPT, SCRIPT)))
        .route("/admin/app.css", get(|| file(CSS, STYLE)))
        .route("/admin/{*file}", get(no_such_file))
        .layer(middleware::from_fn(secure))
}

async fn file(media_type: &'static str, body: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, media_type)], body)
}

async fn no_such_file() -> ApiError {
    ApiError::NotFound("no such file in the admin console".to_owned())
}

async fn secure(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
