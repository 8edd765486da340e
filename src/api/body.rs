//! Request bodies: media types checked, JSON read strictly, every rejection
//! a problem document.
//!
//! - 415 for a body in another media type, a charset other than UTF-8, or
//!   any `Content-Encoding` (bodies are taken as sent, never decoded);
//! - 413 beyond the route's size limit;
//! - 400 for bytes that are not JSON (or carry trailing data);
//! - 422 for JSON of the wrong shape, named by its path (`budget.epsilon:
//!   invalid type …`), a top-level value that is not an object included.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The media type of `headers`' body, if it is `expected` (or one of
/// `aliases`) in UTF-8; else 415.
pub fn media_type(
    headers: &HeaderMap,
    expected: &[&str],
    what: &str,
) -> Result<mime::Mime, ApiError> {
    let refuse = || ApiError::UnsupportedMediaType(format!("{what}, in UTF-8"));
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<mime::Mime>().ok())
        .ok_or_else(refuse)?;
    if !expected.contains(&media.essence_str()) {
        return Err(refuse());
    }
    match media.get_param(mime::CHARSET) {
        Some(charset) if !charset.as_str().eq_ignore_ascii_case("utf-8") => Err(refuse()),
        _ => Ok(media),
    }
}

/// Refuses any `Content-Encoding` but `identity`: a compressed body would
/// otherwise be parsed as if it were plain.
pub async fn plain_bodies(request: Request, next: Next) -> Response {
    let encoded = request
        .headers()
        .get(header::CONTENT_ENCODING)
        .is_some_and(|value| !value.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return ApiError::UnsupportedMediaType(
            "Content-Encoding is not supported: send the body uncompressed".to_owned(),
        )
        .into_response();
    }
    next.run(request).await
}

/// A JSON object body read into `T` (see the module docs).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        media_type(
            request.headers(),
            &["application/json"],
            "the body must be application/json",
        )?;
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge(rejection.body_text())
                } else {
                    ApiError::Malformed(rejection.body_text())
                }
            })?;
        parse(&bytes).map(ApiJson)
    }
}

/// `T` from a JSON object in `bytes`.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let malformed = |error: serde_json::Error| ApiError::Malformed(format!("not JSON: {error}"));
    let first = bytes.iter().find(|byte| !byte.is_ascii_whitespace());
    if first != Some(&b'{') {
        // Say whether it is JSON at all.
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes).map_err(malformed)?;
        return Err(ApiError::Invalid(
            "the body must be a JSON object".to_owned(),
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let detail = if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        };
        match inner.classify() {
            serde_json::error::Category::Data => ApiError::Invalid(detail),
            _ => ApiError::Malformed(format!("not JSON: {detail}")),
        }
    })?;
    deserializer.end().map_err(malformed)?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Probe {
        #[expect(dead_code, reason = "read only to be refused or accepted, never used")]
        epsilon: f64,
    }

    fn status(bytes: &str) -> Result<(), (u16, String)> {
        parse::<Probe>(bytes.as_bytes()).map(drop).map_err(|error| {
            let response = error.into_response();
            (response.status().as_u16(), String::new())
        })
    }

    #[test]
    fn malformed_bytes_are_400_and_wrong_shapes_422() {
        assert_eq!(status(r#" {"epsilon": 1} "#), Ok(()));
        for bad in ["", "{", r#"{"epsilon": 1} x"#, "\u{fffd}", "[1,"] {
            assert_eq!(status(bad).unwrap_err().0, 400, "{bad:?}");
        }
        for wrong in ["[1]", "5", "null", r#"{"epsilon": "1"}"#, r#"{"e": 1}"#] {
            assert_eq!(status(wrong).unwrap_err().0, 422, "{wrong:?}");
        }
    }

    #[test]
    fn media_types_must_be_the_expected_one_in_utf8() {
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            headers
        };
        let json = |value| media_type(&headers(value), &["application/json"], "json");
        assert!(json("application/json").is_ok());
        assert!(json("application/json; charset=UTF-8").is_ok());
        for refused in [
            "application/json; charset=utf-16le",
            "text/plain",
            "text/csv",
        ] {
            assert!(json(refused).is_err(), "{refused}");
        }
        assert!(media_type(&HeaderMap::new(), &["text/csv"], "csv").is_err());
    }
}
