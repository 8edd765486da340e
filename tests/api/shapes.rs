//! What clients parse, kept by snapshot (insta, in tests/snapshots/):
//! each release kind's response and each problem document a client can
//! provoke. Numbers, ids and times vary from run to run and are replaced
//! by what they are; every key, string and nesting is compared exactly.
//! The OpenAPI document is kept the same way by `openapi.yaml` itself
//! (tests/api/openapi.rs).

use std::collections::BTreeMap;

use dpgate::domain::auth::Role;
use dpgate_client::ReleaseOptions;
use dpgate_client::UploadFormat;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::admission::catalogue::every_release;
use crate::admission::{Mode, Server};
use crate::helpers::{Backend, ads_dataset, ads_rows, spawn_app};

/// `value` with every number, id and time replaced by what it is, and
/// arrays of numbers by one placeholder.
fn shape(value: &Value) -> Value {
    match value {
        Value::Number(_) => Value::from("<number>"),
        Value::String(text) if uuid::Uuid::parse_str(text).is_ok() => Value::from("<uuid>"),
        Value::String(text)
            if time::OffsetDateTime::parse(
                text,
                &time::format_description::well_known::Rfc3339,
            )
            .is_ok() =>
        {
            Value::from("<time>")
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_number) => {
            Value::from("<numbers>")
        }
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, value)| (key.clone(), shape(value)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Runs `assert` against the snapshots in tests/snapshots/ (beside the
/// suites, not among this crate's modules).
fn kept(assert: impl FnOnce()) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(assert);
}

#[tokio::test]
async fn every_kind_answers_in_its_shape() {
    for unit in ["label", "row"] {
        let (server, dataset) =
            Server::with_dataset(Backend::Sqlite, Mode::Warm, unit, 100.0).await;
        let analyst = server.analyst("ana", &[dataset]);
        let mut shapes = BTreeMap::new();
        for case in every_release(unit) {
            let made = analyst
                .release(dataset, &case.request, &ReleaseOptions::default())
                .await
                .unwrap_or_else(|error| panic!("{}: {error}", case.name))
                .release;
            let value = serde_json::to_value(&made).expect("a release is JSON");
            shapes.insert(case.name, shape(&value));
        }
        kept(|| insta::assert_json_snapshot!(format!("release_shapes_{unit}"), shapes));
        server.finish().await;
    }
}

/// The problem document of each refusal a client can provoke without a
/// fault: one per problem type and the bad lines of an upload.
#[tokio::test]
async fn problem_documents_keep_their_shape() {
    let app = spawn_app(Backend::Sqlite).await;
    let labelled = app
        .dataset(ads_dataset("labelled", "label", "basic", 1.0))
        .await;
    let private = app
        .dataset(ads_dataset("private", "row", "basic", 1.0))
        .await;
    app.admin
        .upload_rows(labelled.id, UploadFormat::Csv, ads_rows(0, 50))
        .await
        .unwrap();
    let analyst = app.token(Role::Analyst, "ana", &[labelled.id, private.id]);
    let admin = app.token(Role::Admin, "root", &[]);
    let releases = |id| format!("/v1/datasets/{id}/releases");
    let walr =
        |epsilon: f64| serde_json::json!({"kind": "walr", "epsilon": epsilon, "delta": 1e-7});
    let cases: Vec<(&str, reqwest::RequestBuilder, StatusCode)> = vec![
        (
            "budget_exhausted",
            app.raw(Method::POST, &releases(labelled.id))
                .bearer_auth(&analyst)
                .json(&walr(5.0)),
            StatusCode::CONFLICT,
        ),
        (
            "invalid_input",
            app.raw(Method::POST, &releases(labelled.id))
                .bearer_auth(&analyst)
                .json(&walr(-1.0)),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "unauthorized",
            app.raw(Method::GET, "/v1/datasets"),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "forbidden",
            app.raw(Method::POST, "/v1/datasets")
                .bearer_auth(&analyst)
                .json(&ads_dataset("x", "label", "basic", 1.0)),
            StatusCode::FORBIDDEN,
        ),
        (
            "features_not_public",
            app.raw(
                Method::GET,
                &format!("/v1/datasets/{}/features", private.id),
            )
            .bearer_auth(&analyst),
            StatusCode::FORBIDDEN,
        ),
        (
            "not_found",
            app.raw(Method::GET, &format!("/v1/datasets/{}", uuid::Uuid::nil()))
                .bearer_auth(&admin),
            StatusCode::NOT_FOUND,
        ),
        (
            "conflict",
            app.raw(Method::POST, "/v1/datasets")
                .bearer_auth(&admin)
                .json(&ads_dataset("labelled", "label", "basic", 1.0)),
            StatusCode::CONFLICT,
        ),
        (
            "unsupported_media_type",
            app.raw(Method::POST, &format!("/v1/datasets/{}/rows", labelled.id))
                .bearer_auth(&admin)
                .header("content-type", "text/plain")
                .body("row_id"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "method_not_allowed",
            app.raw(Method::DELETE, "/v1/datasets").bearer_auth(&admin),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "bad_lines",
            app.raw(Method::POST, &format!("/v1/datasets/{}/rows", labelled.id))
                .bearer_auth(&admin)
                .header("content-type", "text/csv")
                .body("row_id,converted,f0,f1,value,campaign\nr1,2,0.5,0,1,a\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ];
    let mut problems = BTreeMap::new();
    for (name, request, status) in cases {
        let response = request.send().await.expect("the server answers");
        assert_eq!(response.status(), status, "{name}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{name}"
        );
        let mut problem: Value = response.json().await.expect("a problem document");
        problem["request_id"] = Value::from("<request id>");
        problems.insert(name, problem);
    }
    kept(|| insta::assert_json_snapshot!("problem_documents", problems));
    app.finish().await;
}
