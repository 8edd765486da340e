//! `openapi.yaml` is the document generated from the very routes the server
//! serves (utoipa-axum registers both from one list), so the two cannot
//! drift: these tests keep the committed file equal to it and check that
//! every documented operation is routed.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{Backend, spawn_app};

const REGENERATE: &str = "regenerate it with `cargo run -- openapi > openapi.yaml`";

#[test]
fn the_committed_spec_is_the_generated_one() {
    let generated = dpgate::commands::openapi_yaml().unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "openapi.yaml is stale: {REGENERATE}"
    );
}

#[test]
fn every_operation_has_its_own_operation_id() {
    let spec: Value = serde_json::to_value(dpgate::api::openapi()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(seen.insert(id.to_owned()), "{id} is used twice");
        }
    }
    assert_eq!(seen.len(), 15);
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_every_error_is_a_problem() {
    let spec: Value = serde_json::to_value(dpgate::api::openapi()).unwrap();
    let app = spawn_app(Backend::Sqlite).await;
    let mut operations = 0;
    for (path, item) in spec["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{id}", &uuid::Uuid::new_v4().to_string())
            .replace("{release_id}", &uuid::Uuid::new_v4().to_string());
        for (method, operation) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            operations += 1;
            // Every documented error status is described by a problem document.
            for (status, response) in operation["responses"].as_object().unwrap() {
                if status.starts_with('4') || status.starts_with('5') {
                    assert!(
                        response["content"]["application/problem+json"].is_object(),
                        "{method} {path} {status} is not a problem document"
                    );
                }
            }
            let response = app.raw(method.clone(), &concrete).send().await.unwrap();
            let status = response.status();
            let body = response.text().await.unwrap();
            assert!(
                status != StatusCode::METHOD_NOT_ALLOWED && !body.contains("no such route"),
                "{method} {path} is documented but not routed: {status} {body}"
            );
        }
    }
    assert_eq!(operations, 15);
    app.finish().await;
}
