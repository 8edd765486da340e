//! Tokens: the JWT validation matrix, and who may call which route.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use dpgate::domain::auth::{AUDIENCE, ISSUER, Role, now};
use dpgate_client::UploadFormat;
use dpgate_client::types::ReleaseRequest;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Method, StatusCode};
use rstest::rstest;
use serde_json::{Value, json};

use crate::helpers::{Backend, SECRET, TestApp, ads_dataset, ads_rows, spawn_app, unavailable};

fn claims() -> Value {
    json!({
        "sub": "mallory", "role": "admin", "datasets": [],
        "iss": ISSUER, "aud": AUDIENCE,
        "exp": now() + 3600, "iat": now(), "jti": "j-1"
    })
}

fn signed(algorithm: Algorithm, claims: &Value, secret: &str) -> String {
    jsonwebtoken::encode(
        &Header::new(algorithm),
        claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn with(edit: impl Fn(&mut serde_json::Map<String, Value>)) -> String {
    let mut claims = claims();
    edit(claims.as_object_mut().unwrap());
    signed(Algorithm::HS256, &claims, SECRET)
}

fn unsigned(claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{payload}.")
}

async fn status(app: &TestApp, authorization: Option<String>) -> StatusCode {
    let mut request = app.raw(Method::GET, "/v1/datasets");
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.send().await.unwrap().status()
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn every_malformed_or_foreign_token_is_401(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let bearer = |token: String| Some(format!("Bearer {token}"));
    assert_eq!(status(&app, bearer(with(|_| {}))).await, StatusCode::OK);
    let revoked = app.token(Role::Admin, "admin", &[]);
    let jti = app.keys.verify(&revoked).unwrap().jti;
    app.store
        .revoke(&jti, "2026-01-01T00:00:00Z")
        .await
        .unwrap();

    let cases: Vec<(&str, Option<String>)> = vec![
        ("no Authorization header", None),
        (
            "not a Bearer scheme",
            Some(format!("Basic {}", with(|_| {}))),
        ),
        ("alg none", bearer(unsigned(&claims()))),
        (
            "signed with another key",
            bearer(signed(
                Algorithm::HS256,
                &claims(),
                "a-different-secret-of-thirty-two-bytes",
            )),
        ),
        (
            "HS384, an algorithm not allowed",
            bearer(signed(Algorithm::HS384, &claims(), SECRET)),
        ),
        (
            "HS512, an algorithm not allowed",
            bearer(signed(Algorithm::HS512, &claims(), SECRET)),
        ),
        (
            "expired",
            bearer(with(|c| {
                c.insert("exp".into(), json!(now() - 3600));
            })),
        ),
        (
            "no exp",
            bearer(with(|c| {
                c.remove("exp");
            })),
        ),
        (
            "nbf in the future",
            bearer(with(|c| {
                c.insert("nbf".into(), json!(now() + 3600));
            })),
        ),
        (
            "nbf given as a string",
            bearer(with(|c| {
                c.insert("nbf".into(), json!(now().to_string()));
            })),
        ),
        (
            "no iss",
            bearer(with(|c| {
                c.remove("iss");
            })),
        ),
        (
            "another iss",
            bearer(with(|c| {
                c.insert("iss".into(), json!("someone-else"));
            })),
        ),
        (
            "no aud",
            bearer(with(|c| {
                c.remove("aud");
            })),
        ),
        (
            "another aud",
            bearer(with(|c| {
                c.insert("aud".into(), json!("another-api"));
            })),
        ),
        (
            "no sub",
            bearer(with(|c| {
                c.remove("sub");
            })),
        ),
        (
            "an empty sub",
            bearer(with(|c| {
                c.insert("sub".into(), json!(""));
            })),
        ),
        (
            "an unknown role",
            bearer(with(|c| {
                c.insert("role".into(), json!("root"));
            })),
        ),
        ("malformed base64", bearer("eyJ!!!.@@@.###".to_owned())),
        ("not three parts", bearer("abc.def".to_owned())),
        (
            "a tampered payload",
            bearer({
                let token = with(|_| {});
                let parts: Vec<&str> = token.split('.').collect();
                let mut forged = claims();
                forged["sub"] = json!("root");
                format!(
                    "{}.{}.{}",
                    parts[0],
                    URL_SAFE_NO_PAD.encode(forged.to_string()),
                    parts[2]
                )
            }),
        ),
        ("revoked", bearer(revoked)),
    ];
    for (case, authorization) in cases {
        let response = {
            let mut request = app.raw(Method::GET, "/v1/datasets");
            if let Some(value) = &authorization {
                request = request.header("authorization", value);
            }
            request.send().await.unwrap()
        };
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{backend:?}: {case}"
        );
        let problem: dpgate_client::types::Problem = response.json().await.unwrap();
        assert_eq!(problem.problem_type, "/problems/unauthorized", "{case}");
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn every_route_admits_exactly_the_right_callers(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 100.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 30))
        .await
        .unwrap();
    let request = ReleaseRequest::walr(0.1, 1e-9);
    let release = app
        .analyst("granted", &[dataset.id])
        .release(dataset.id, &request, &Default::default())
        .await
        .unwrap()
        .release;
    let admin = app.token(Role::Admin, "admin", &[]);
    let granted = app.token(Role::Analyst, "granted", &[dataset.id]);
    let stranger = app.token(Role::Analyst, "stranger", &[uuid::Uuid::new_v4()]);
    let id = dataset.id;
    let release_body = json!({"kind": "walr", "epsilon": 0.1, "delta": 1e-9});
    let mut counter = 0;
    // (method, path, body, [admin, granted analyst, analyst without grant, no token])
    let routes: Vec<(Method, String, Option<(&str, String)>, [u16; 4])> = vec![
        (
            Method::POST,
            "/v1/datasets".into(),
            Some((
                "application/json",
                ads_dataset("NAME", "label", "rdp", 1.0).to_string(),
            )),
            [201, 403, 403, 401],
        ),
        (
            Method::GET,
            "/v1/datasets".into(),
            None,
            [200, 200, 200, 401],
        ),
        (
            Method::GET,
            format!("/v1/datasets/{id}"),
            None,
            [200, 200, 403, 401],
        ),
        (
            Method::POST,
            format!("/v1/datasets/{id}/rows"),
            Some(("text/csv", "ROWS".into())),
            [200, 403, 403, 401],
        ),
        (
            Method::POST,
            format!("/v1/datasets/{id}/releases"),
            Some(("application/json", release_body.to_string())),
            [403, 201, 403, 401],
        ),
        (
            Method::GET,
            format!("/v1/datasets/{id}/releases/{}", release.id.unwrap()),
            None,
            [200, 200, 403, 401],
        ),
        (
            Method::GET,
            format!("/v1/datasets/{id}/ledger"),
            None,
            [200, 403, 403, 401],
        ),
        (Method::GET, "/healthz".into(), None, [200, 200, 200, 200]),
        // Metrics live on their own listener, never on the API's.
        (Method::GET, "/metrics".into(), None, [404, 404, 404, 404]),
    ];
    for (method, path, body, expected) in routes {
        for (caller, (token, status)) in [Some(&admin), Some(&granted), Some(&stranger), None]
            .into_iter()
            .zip(expected)
            .enumerate()
        {
            let mut request = app.raw(method.clone(), &path);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some((media, text)) = &body {
                counter += 1;
                let text = text
                    .replace("NAME", &format!("made-{counter}"))
                    .replace("ROWS", &ads_rows(1000 + 10 * counter, 2));
                request = request.header("content-type", *media).body(text);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status().as_u16(),
                status,
                "{backend:?}: {method} {path} as caller #{caller}: {}",
                response.text().await.unwrap_or_default()
            );
        }
    }
    // An analyst's list holds only its grants.
    let listed = app
        .analyst("stranger", &[uuid::Uuid::new_v4()])
        .datasets()
        .await
        .unwrap();
    assert!(listed.is_empty());
    // Tokens minted by the CLI path verify here too.
    let minted = app
        .keys
        .mint(Role::Analyst, "cli", &[id], Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        app.admin.with_token(&minted).dataset(id).await.unwrap().id,
        id
    );
    app.finish().await;
}
