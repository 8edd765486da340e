//! Idempotent retries, dry runs, and fetching releases.

use dpgate_client::types::{ProblemType, ReleaseRequest};
use dpgate_client::{ReleaseOptions, UploadFormat};
use reqwest::{Method, StatusCode};
use rstest::rstest;

use crate::helpers::{Backend, ads_dataset, ads_rows, spawn_app, unavailable};

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_retry_with_the_same_key_returns_the_same_bytes_and_spends_once(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", 10.0))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 50))
        .await
        .unwrap();
    let token = app.token(dpgate::domain::auth::Role::Analyst, "ana", &[dataset.id]);
    let path = format!("/v1/datasets/{}/releases", dataset.id);
    let send = |body: &'static str, key: &'static str| {
        app.raw(Method::POST, &path)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(body)
            .send()
    };
    let body = r#"{"kind": "walr", "epsilon": 0.5, "delta": 1e-8}"#;
    let first = send(body, "key-1").await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first = first.bytes().await.unwrap();
    for _ in 0..3 {
        let again = send(body, "key-1").await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(again.bytes().await.unwrap(), first, "{backend:?}");
    }
    // The same JSON written differently is the same request.
    let respaced = r#"{ "delta": 1e-8, "epsilon": 0.5, "kind": "walr" }"#;
    assert_eq!(
        send(respaced, "key-1").await.unwrap().status(),
        StatusCode::OK
    );
    let spent = app.admin.dataset(dataset.id).await.unwrap().spent;
    assert_eq!((spent.epsilon, spent.delta), (0.5, 1e-8));

    let other = send(
        r#"{"kind": "walr", "epsilon": 0.6, "delta": 1e-8}"#,
        "key-1",
    )
    .await
    .unwrap();
    assert_eq!(other.status(), StatusCode::CONFLICT);
    let problem: dpgate_client::types::Problem = other.json().await.unwrap();
    assert_eq!(problem.kind(), Some(ProblemType::Conflict));
    assert_eq!(app.admin.ledger(dataset.id).await.unwrap().len(), 2);

    // Another analyst's identical key is its own.
    let bea = app.analyst("bea", &[dataset.id]);
    let options = ReleaseOptions {
        idempotency_key: Some("key-1".to_owned()),
        dry_run: false,
    };
    let request = ReleaseRequest::walr(0.5, 1e-8);
    assert!(
        !bea.release(dataset.id, &request, &options)
            .await
            .unwrap()
            .replayed
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_dry_run_prices_exactly_what_the_release_then_spends(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 10.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 80))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[dataset.id]);
    let request = ReleaseRequest::walr(2.0, 1e-7);
    let dry = ReleaseOptions {
        idempotency_key: None,
        dry_run: true,
    };
    let priced = analyst
        .release(dataset.id, &request, &dry)
        .await
        .unwrap()
        .release;
    assert!(priced.dry_run && priced.result.is_none() && priced.id.is_none());
    // The wire form keeps every field of a release (DESIGN §8): `id` is
    // there, null, and only `result` is missing.
    let raw: serde_json::Value = app
        .raw(
            Method::POST,
            &format!("/v1/datasets/{}/releases?dry_run=true", dataset.id),
        )
        .bearer_auth(app.token(dpgate::domain::auth::Role::Analyst, "ana", &[dataset.id]))
        .json(&request)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["id"], serde_json::Value::Null);
    assert!(raw.as_object().unwrap().contains_key("id"));
    assert!(!raw.as_object().unwrap().contains_key("result"));
    assert_eq!(
        app.admin.dataset(dataset.id).await.unwrap().spent.epsilon,
        0.0
    );
    assert_eq!(app.admin.ledger(dataset.id).await.unwrap().len(), 1);

    let made = analyst
        .release(dataset.id, &request, &ReleaseOptions::default())
        .await
        .unwrap()
        .release;
    assert_eq!(made.spent, priced.spent);
    assert_eq!(
        (made.sigma, made.sensitivity, &made.noise),
        (priced.sigma, priced.sensitivity, &priced.noise)
    );

    // A dry run that would not fit is refused like the real thing.
    let huge = ReleaseRequest::walr(50.0, 1e-7);
    let error = analyst.release(dataset.id, &huge, &dry).await.unwrap_err();
    assert_eq!(error.problem_type(), Some(ProblemType::BudgetExhausted));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn analysts_fetch_only_their_own_releases(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 10.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 30))
        .await
        .unwrap();
    let ana = app.analyst("ana", &[dataset.id]);
    let bea = app.analyst("bea", &[dataset.id]);
    let request = ReleaseRequest::walr(0.1, 1e-9);
    let release = ana
        .release(dataset.id, &request, &ReleaseOptions::default())
        .await
        .unwrap()
        .release;
    let id = release.id.unwrap();
    assert_eq!(
        ana.get_release(dataset.id, id).await.unwrap().id,
        release.id
    );
    assert_eq!(
        app.admin.get_release(dataset.id, id).await.unwrap().id,
        release.id
    );
    let error = bea.get_release(dataset.id, id).await.unwrap_err();
    assert_eq!(error.problem_type(), Some(ProblemType::NotFound));
    app.finish().await;
}
