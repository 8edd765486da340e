//! `/admin`: the console's page and assets are served from the binary with
//! their media types and the security headers, and nothing else is.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{Backend, TestApp, spawn_app};

const HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-cache"),
];

/// GETs `path` and checks the security headers; returns the status, the
/// content type and the body.
async fn get(app: &TestApp, path: &str) -> (StatusCode, String, String) {
    let response = app.raw(Method::GET, path).send().await.unwrap();
    for (name, value) in HEADERS {
        assert_eq!(response.headers()[name], value, "{name} of {path}");
    }
    let status = response.status();
    let media = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (status, media, response.text().await.unwrap())
}

fn source(file: &str) -> String {
    std::fs::read_to_string(format!("{}/admin/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_with_the_security_headers() {
    let app = spawn_app(Backend::Sqlite).await;
    let page = source("index.html");
    for (path, file, media) in [
        ("/admin", "index.html", "text/html; charset=utf-8"),
        ("/admin/", "index.html", "text/html; charset=utf-8"),
        ("/admin/app.js", "app.js", "text/javascript; charset=utf-8"),
        ("/admin/app.css", "app.css", "text/css; charset=utf-8"),
    ] {
        let (status, served_media, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(served_media, media, "{path}");
        assert!(body == source(file), "{path} does not serve admin/{file}");
    }
    assert!(page.contains(r#"src="/admin/app.js""#));
    assert!(page.contains(r#"href="/admin/app.css""#));
    app.finish().await;
}

#[test]
fn the_page_has_nothing_inline_that_the_policy_would_block() {
    let page = source("index.html").to_lowercase();
    for tag in page.split('<').skip(1) {
        let tag = tag.split('>').next().unwrap();
        let mut words = tag.split_whitespace();
        let element = words.next().unwrap_or_default();
        assert_ne!(element, "style", "an inline stylesheet");
        if element == "script" {
            assert!(tag.contains(" src="), "an inline script: <{tag}>");
        }
        for attribute in words.map(|word| word.split('=').next().unwrap()) {
            assert_ne!(attribute, "style", "a style attribute: <{tag}>");
            assert!(!attribute.starts_with("on"), "an event handler: <{tag}>");
        }
    }
}

#[tokio::test]
async fn an_unknown_console_file_is_a_404_problem() {
    let app = spawn_app(Backend::Sqlite).await;
    for path in ["/admin/x", "/admin/app.js.map", "/admin/a/b"] {
        let (status, media, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(media, "application/problem+json", "{path}");
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["type"], "/problems/not-found", "{path}");
    }
    app.finish().await;
}
