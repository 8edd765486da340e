//! Every rejection: exact status, problem type, and nothing stored or spent.

use dpgate::api::Limits;
use dpgate::domain::auth::Role;
use dpgate_client::UploadFormat;
use dpgate_client::types::{PROBLEM_JSON, Problem};
use reqwest::{Method, RequestBuilder, StatusCode};
use rstest::rstest;
use uuid::Uuid;

use crate::helpers::{
    Backend, TestApp, ads_dataset, ads_rows, spawn_app, spawn_app_with, unavailable,
};

/// What must not change when a request is refused.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    datasets: usize,
    n_rows: Option<u64>,
    ledger: usize,
    spent: (f64, f64),
}

pub async fn snapshot(app: &TestApp, dataset: Uuid) -> Snapshot {
    let view = app.admin.dataset(dataset).await.unwrap();
    Snapshot {
        datasets: app.admin.datasets().await.unwrap().len(),
        n_rows: view.n_rows,
        ledger: app.admin.ledger(dataset).await.unwrap().len(),
        spent: (view.spent.epsilon_basic, view.spent.delta_basic),
    }
}

pub async fn expect(request: RequestBuilder, status: StatusCode, slug: &str, case: &str) {
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), status, "{case}");
    let media = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(media, PROBLEM_JSON, "{case}");
    let problem: Problem = response.json().await.unwrap();
    assert_eq!(
        problem.problem_type,
        format!("/problems/{slug}"),
        "{case}: {problem:?}"
    );
    assert_eq!(problem.status, status.as_u16(), "{case}");
    assert!(!problem.detail.is_empty(), "{case}");
}

const HEADER: &str = "row_id,converted,f0,f1,value,campaign\n";

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_uploads_are_refused_by_line_and_store_nothing(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 10))
        .await
        .unwrap();
    let before = snapshot(&app, dataset.id).await;
    let path = format!("/v1/datasets/{}/rows", dataset.id);
    let token = app.token(Role::Admin, "admin", &[]);
    let upload = |media: &str, body: String| {
        app.raw(Method::POST, &path)
            .bearer_auth(&token)
            .header("content-type", media)
            .body(body)
    };
    let csv = |rows: &str| upload("text/csv", format!("{HEADER}{rows}"));
    let cases: Vec<(&str, RequestBuilder, StatusCode, &str, Option<u64>)> = vec![
        (
            "unknown column",
            upload(
                "text/csv",
                format!("{}x\n", HEADER.trim_end()) + "r90,1,0,0,0,a,1\n",
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(1),
        ),
        (
            "missing column",
            upload(
                "text/csv",
                "row_id,converted,f0,f1,value\nr90,1,0,0,0\n".to_owned(),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(1),
        ),
        (
            "non-finite number",
            csv("r90,1,0.5,0,0,a\nr91,1,inf,0,0,a\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(3),
        ),
        (
            "outside the declared bounds",
            csv("r90,1,0.5,6,0,a\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(2),
        ),
        (
            "label not 0/1",
            csv("r90,2,0.5,0,0,a\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(2),
        ),
        (
            "duplicate row id in the upload",
            csv("r90,1,0.5,0,0,a\nr90,0,0.5,0,0,a\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(3),
        ),
        (
            "row id already stored",
            csv("r90,1,0.5,0,0,a\nr3,0,0.5,0,0,a\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(3),
        ),
        (
            "wrong field count",
            csv("r90,1,0.5,0,0\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(2),
        ),
        (
            "undeclared dimension value",
            csv("r90,1,0.5,0,0,z\n"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(2),
        ),
        (
            "bad NDJSON",
            upload("application/x-ndjson", "{\"row_id\": \"r90\"\n".to_owned()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            Some(1),
        ),
        (
            "wrong content type",
            upload("application/xml", ads_rows(90, 2)),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            None,
        ),
        (
            "rows sent as the JSON that names a source",
            upload("application/json", ads_rows(90, 2)),
            StatusCode::BAD_REQUEST,
            "invalid-input",
            None,
        ),
        (
            "a JSON body that names no source",
            upload("application/json", r#"{"uri": "file:///tmp"}"#.to_owned()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            None,
        ),
        (
            "no content type",
            app.raw(Method::POST, &path)
                .bearer_auth(&token)
                .body(ads_rows(90, 2)),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            None,
        ),
        (
            "no such dataset",
            app.raw(
                Method::POST,
                &format!("/v1/datasets/{}/rows", Uuid::new_v4()),
            )
            .bearer_auth(&token)
            .header("content-type", "text/csv")
            .body(ads_rows(90, 2)),
            StatusCode::NOT_FOUND,
            "not-found",
            None,
        ),
    ];
    for (case, request, status, slug, line) in cases {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status, "{backend:?}: {case}");
        let problem: Problem = response.json().await.unwrap();
        assert_eq!(problem.problem_type, format!("/problems/{slug}"), "{case}");
        if let Some(line) = line {
            assert_eq!(
                problem.errors.first().map(|e| e.line),
                Some(line),
                "{case}: {problem:?}"
            );
        }
        assert_eq!(
            snapshot(&app, dataset.id).await,
            before,
            "{backend:?}: {case} changed the database"
        );
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn uploads_beyond_the_limit_are_413_and_store_nothing(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let limits = Limits {
        ingest_bytes: 2_000,
        ..Limits::default()
    };
    let app = spawn_app_with(backend, limits).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    let path = format!("/v1/datasets/{}/rows", dataset.id);
    let token = app.token(Role::Admin, "admin", &[]);
    let body = ads_rows(0, 200);
    assert!(body.len() > 2_000);
    let declared = app
        .raw(Method::POST, &path)
        .bearer_auth(&token)
        .header("content-type", "text/csv")
        .body(body.clone());
    expect(
        declared,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "declared length",
    )
    .await;
    // A streamed body without Content-Length is cut off as it crosses the limit.
    let chunks: Vec<Result<String, std::io::Error>> =
        body.lines().map(|line| Ok(format!("{line}\n"))).collect();
    let streamed = app
        .raw(Method::POST, &path)
        .bearer_auth(&token)
        .header("content-type", "text/csv")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )));
    expect(
        streamed,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "streamed",
    )
    .await;
    assert_eq!(app.admin.dataset(dataset.id).await.unwrap().n_rows, Some(0));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_release_requests_are_refused_and_spend_nothing(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let limits = Limits {
        release_bytes: 1 << 20,
        ..Limits::default()
    };
    let app = spawn_app_with(backend, limits).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    let empty = app.dataset(ads_dataset("empty", "label", "rdp", 5.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 20))
        .await
        .unwrap();
    let before = snapshot(&app, dataset.id).await;
    let token = app.token(Role::Analyst, "ana", &[dataset.id, empty.id]);
    let path = format!("/v1/datasets/{}/releases", dataset.id);
    let post = |body: &str| {
        app.raw(Method::POST, &path)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body.to_owned())
    };
    let invalid = StatusCode::UNPROCESSABLE_ENTITY;
    let cases: Vec<(&str, RequestBuilder, StatusCode, &str)> = vec![
        (
            "malformed JSON",
            post(r#"{"kind": "walr", "epsilon": 1,"#),
            StatusCode::BAD_REQUEST,
            "invalid-input",
        ),
        (
            "not JSON at all",
            post("epsilon=1"),
            StatusCode::BAD_REQUEST,
            "invalid-input",
        ),
        (
            "wrong content type",
            app.raw(Method::POST, &path)
                .bearer_auth(&token)
                .header("content-type", "text/plain")
                .body(r#"{"kind":"walr","epsilon":1,"delta":1e-7}"#),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
        ),
        (
            "epsilon zero",
            post(r#"{"kind": "walr", "epsilon": 0, "delta": 1e-7}"#),
            invalid,
            "invalid-input",
        ),
        (
            "epsilon negative",
            post(r#"{"kind": "walr", "epsilon": -1, "delta": 1e-7}"#),
            invalid,
            "invalid-input",
        ),
        (
            "epsilon a string",
            post(r#"{"kind": "walr", "epsilon": "1", "delta": 1e-7}"#),
            invalid,
            "invalid-input",
        ),
        (
            "delta one",
            post(r#"{"kind": "walr", "epsilon": 1, "delta": 1}"#),
            invalid,
            "invalid-input",
        ),
        (
            "delta above one",
            post(r#"{"kind": "walr", "epsilon": 1, "delta": 2.5}"#),
            invalid,
            "invalid-input",
        ),
        (
            "walr without delta",
            post(r#"{"kind": "walr", "epsilon": 1}"#),
            invalid,
            "invalid-input",
        ),
        (
            "unknown kind",
            post(r#"{"kind": "magic", "epsilon": 1, "delta": 1e-7}"#),
            invalid,
            "invalid-input",
        ),
        (
            "misspelt parameter",
            post(r#"{"kind": "walr", "epsilon": 1, "delta": 1e-7, "intercpt": false}"#),
            invalid,
            "invalid-input",
        ),
        (
            "bad dry_run",
            app.raw(Method::POST, &format!("{path}?dry_run=maybe"))
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(r#"{"kind":"walr","epsilon":1,"delta":1e-7}"#),
            invalid,
            "invalid-input",
        ),
        (
            "overlong idempotency key",
            post(r#"{"kind":"walr","epsilon":1,"delta":1e-7}"#)
                .header("idempotency-key", "k".repeat(300)),
            invalid,
            "invalid-input",
        ),
        (
            "body over the release limit",
            post(&format!(
                r#"{{"kind":"walr","epsilon":1,"delta":1e-7,"pad":"{}"}}"#,
                "x".repeat(1 << 21)
            )),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
        ),
        (
            "over budget",
            post(r#"{"kind": "walr", "epsilon": 6, "delta": 1e-7}"#),
            StatusCode::CONFLICT,
            "budget-exhausted",
        ),
        (
            "empty dataset",
            app.raw(Method::POST, &format!("/v1/datasets/{}/releases", empty.id))
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(r#"{"kind":"walr","epsilon":1,"delta":1e-7}"#),
            invalid,
            "invalid-input",
        ),
    ];
    for (case, request, status, slug) in cases {
        expect(request, status, slug, &format!("{backend:?}: {case}")).await;
        assert_eq!(
            snapshot(&app, dataset.id).await,
            before,
            "{backend:?}: {case} changed the database"
        );
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_model_and_aggregate_parameters_are_422_and_spend_nothing(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    // At most 1 group: `campaign` (2 values) is beyond the limit.
    let limits = Limits {
        max_groups: 1,
        ..Limits::default()
    };
    let app = spawn_app_with(backend, limits).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    let empty = app.dataset(ads_dataset("empty", "label", "rdp", 5.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 20))
        .await
        .unwrap();
    let before = snapshot(&app, dataset.id).await;
    let token = app.token(Role::Analyst, "ana", &[dataset.id, empty.id]);
    let post_to = |id: Uuid, body: &str| {
        app.raw(Method::POST, &format!("/v1/datasets/{id}/releases"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body.to_owned())
    };
    let post = |body: &str| post_to(dataset.id, body);
    let cases: Vec<(&str, RequestBuilder)> = vec![
        (
            "λ = 0",
            post(r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":0}"#),
        ),
        (
            "λ < 0",
            post(r#"{"kind":"model/objective-perturbation","epsilon":1,"lambda":-1}"#),
        ),
        (
            "λ a word",
            post(r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":"best"}"#),
        ),
        (
            "λ a list",
            post(r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":[0.1,0.01]}"#),
        ),
        (
            "λ another key",
            post(
                r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":{"pick":[0.1,0.01]}}"#,
            ),
        ),
        (
            "λ select of one",
            post(r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":{"select":[0.1]}}"#),
        ),
        (
            "λ select empty",
            post(r#"{"kind":"model/objective-perturbation","epsilon":1,"lambda":{"select":[]}}"#),
        ),
        (
            "λ select twice the same",
            post(
                r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":{"select":[0.1,0.1]}}"#,
            ),
        ),
        (
            "λ select with 0",
            post(
                r#"{"kind":"model/objective-perturbation","epsilon":1,"lambda":{"select":[0.1,0]}}"#,
            ),
        ),
        (
            "λ select of nine",
            post(
                r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":{"select":[1,2,3,4,5,6,7,8,9]}}"#,
            ),
        ),
        (
            "λ auto of an empty dataset",
            post_to(
                empty.id,
                r#"{"kind":"model/output-perturbation","epsilon":1}"#,
            ),
        ),
        (
            "λ select of an empty dataset",
            post_to(
                empty.id,
                r#"{"kind":"model/objective-perturbation","epsilon":1,"lambda":{"select":[0.1,0.01]}}"#,
            ),
        ),
        (
            "δ on objective perturbation",
            post(
                r#"{"kind":"model/objective-perturbation","epsilon":1,"delta":1e-6,"lambda":0.01}"#,
            ),
        ),
        (
            "model of an empty dataset",
            post_to(
                empty.id,
                r#"{"kind":"model/output-perturbation","epsilon":1,"lambda":0.01}"#,
            ),
        ),
        (
            "unknown measure",
            post(r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"statistics":["sum:revenue"]}"#),
        ),
        (
            "unknown statistic",
            post(r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"statistics":["median:value"]}"#),
        ),
        (
            "unknown dimension",
            post(
                r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"statistics":["count"],"group_by":["region"]}"#,
            ),
        ),
        (
            "group_by beyond the configured limit",
            post(
                r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"statistics":["sum:converted"],"group_by":["campaign"]}"#,
            ),
        ),
        (
            "no statistics",
            post(r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"statistics":[]}"#),
        ),
        (
            "gaussian without δ",
            post(r#"{"kind":"aggregate","epsilon":1,"statistics":["sum:converted"]}"#),
        ),
        (
            "laplace with δ",
            post(
                r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"mechanism":"laplace","statistics":["sum:converted"]}"#,
            ),
        ),
        (
            "unknown mechanism",
            post(
                r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"mechanism":"exponential","statistics":["count"]}"#,
            ),
        ),
        (
            "aggregate of an empty dataset",
            post_to(
                empty.id,
                r#"{"kind":"aggregate","epsilon":1,"delta":1e-6,"statistics":["sum:converted"]}"#,
            ),
        ),
    ];
    for (case, request) in cases {
        let case = format!("{backend:?}: {case}");
        expect(
            request,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            &case,
        )
        .await;
        assert_eq!(
            snapshot(&app, dataset.id).await,
            before,
            "{case} changed the database"
        );
        assert_eq!(
            app.admin
                .dataset(empty.id)
                .await
                .unwrap()
                .spent
                .epsilon_basic,
            0.0,
            "{case}"
        );
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_dataset_requests_and_routes_are_refused(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    let before = snapshot(&app, dataset.id).await;
    let token = app.token(Role::Admin, "admin", &[]);
    let create = |body: serde_json::Value| {
        app.raw(Method::POST, "/v1/datasets")
            .bearer_auth(&token)
            .json(&body)
    };
    let mut min_above_max = ads_dataset("other", "label", "rdp", 5.0);
    min_above_max["features"][0]["min"] = 2.into();
    let mut zero_epsilon = ads_dataset("other", "label", "rdp", 5.0);
    zero_epsilon["budget"]["epsilon"] = 0.into();
    let mut delta_one = ads_dataset("other", "label", "rdp", 5.0);
    delta_one["budget"]["delta"] = 1.into();
    let mut unknown_unit = ads_dataset("other", "label", "rdp", 5.0);
    unknown_unit["privacy_unit"] = "person".into();
    let invalid = StatusCode::UNPROCESSABLE_ENTITY;
    let cases: Vec<(&str, RequestBuilder, StatusCode, &str)> = vec![
        (
            "malformed JSON",
            app.raw(Method::POST, "/v1/datasets")
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body("{"),
            StatusCode::BAD_REQUEST,
            "invalid-input",
        ),
        (
            "min above max",
            create(min_above_max),
            invalid,
            "invalid-input",
        ),
        (
            "budget epsilon zero",
            create(zero_epsilon),
            invalid,
            "invalid-input",
        ),
        (
            "budget delta one",
            create(delta_one),
            invalid,
            "invalid-input",
        ),
        (
            "unknown privacy unit",
            create(unknown_unit),
            invalid,
            "invalid-input",
        ),
        (
            "a taken name",
            create(ads_dataset("ads", "row", "basic", 1.0)),
            StatusCode::CONFLICT,
            "conflict",
        ),
        (
            "unknown route",
            app.raw(Method::GET, "/v1/nothing-here").bearer_auth(&token),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "wrong method",
            app.raw(Method::DELETE, "/v1/datasets").bearer_auth(&token),
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
        ),
        (
            "no such dataset",
            app.raw(Method::GET, &format!("/v1/datasets/{}", Uuid::new_v4()))
                .bearer_auth(&token),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "a dataset id that is no UUID",
            app.raw(Method::GET, "/v1/datasets/not-a-uuid")
                .bearer_auth(&token),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "no such release",
            app.raw(
                Method::GET,
                &format!("/v1/datasets/{}/releases/{}", dataset.id, Uuid::new_v4()),
            )
            .bearer_auth(&token),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "ledger limit zero",
            app.raw(
                Method::GET,
                &format!("/v1/datasets/{}/ledger?limit=0", dataset.id),
            )
            .bearer_auth(&token),
            invalid,
            "invalid-input",
        ),
        (
            "ledger limit not a number",
            app.raw(
                Method::GET,
                &format!("/v1/datasets/{}/ledger?limit=ten", dataset.id),
            )
            .bearer_auth(&token),
            invalid,
            "invalid-input",
        ),
    ];
    for (case, request, status, slug) in cases {
        expect(request, status, slug, &format!("{backend:?}: {case}")).await;
        assert_eq!(
            snapshot(&app, dataset.id).await,
            before,
            "{backend:?}: {case} changed the database"
        );
    }
    app.finish().await;
}
