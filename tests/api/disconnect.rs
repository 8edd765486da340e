//! A paid release is never lost to its connection: once debited it is made
//! on a task of its own, so a client that goes away (or a request timeout)
//! leaves it stored for the retry with the same Idempotency-Key, which gets
//! it with 200 and spends nothing more. The store under test takes three
//! seconds to start each read of private rows, and nothing is held in
//! memory, so every release that reads rows is still being made well after
//! its debit, whatever the machine's load.

use std::time::Duration;

use dpgate::api::Limits;
use dpgate_client::UploadFormat;
use dpgate_client::types::{ProblemType, Release};
use reqwest::{Method, StatusCode};
use rstest::rstest;
use uuid::Uuid;

use crate::counting::Counting;
use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app_over, unavailable};

const KEY: &str = "slow-model";
const MODEL: &str = r#"{"kind": "model/output-perturbation", "epsilon": 1, "lambda": 0.01}"#;

/// A server (with `timeout`) whose private row reads take three seconds
/// to start, and a dataset of 25,000 rows.
async fn slow(backend: Backend, timeout: Duration) -> (TestApp, Uuid) {
    let limits = Limits {
        request_timeout: timeout,
        cache_bytes: 0,
        ..Limits::default()
    };
    let app = spawn_app_over(backend, limits, |store| {
        Counting::slowed(store, Duration::from_secs(3))
    })
    .await;
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", 10.0))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 25_000))
        .await
        .unwrap();
    (app, dataset.id)
}

fn post(app: &TestApp, dataset: Uuid, token: &str) -> reqwest::RequestBuilder {
    app.raw(Method::POST, &format!("/v1/datasets/{dataset}/releases"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("idempotency-key", KEY)
        .body(MODEL)
}

/// The retry gets the stored release: 200, and the ledger holds one debit.
async fn retry_gets_the_stored_release(app: &TestApp, dataset: Uuid, token: &str) {
    let retry = post(app, dataset, token).send().await.unwrap();
    assert_eq!(retry.status(), StatusCode::OK);
    let release: Release = retry.json().await.unwrap();
    assert!(release.result.is_some());
    let stored = app
        .store
        .release_by_key(dataset, "ana", KEY)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(stored.id), release.id);
    assert_eq!(
        serde_json::from_str::<Release>(&stored.response.unwrap()).unwrap(),
        release
    );
    let ledger = app.admin.ledger(dataset).await.unwrap();
    assert_eq!(ledger.len(), 2, "one opening, one debit");
    let view = app.admin.dataset(dataset).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 1.0);
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_client_that_disconnects_after_the_debit_gets_the_release_on_retry(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let (app, dataset) = slow(backend, Limits::default().request_timeout).await;
    let token = app.token(dpgate::domain::auth::Role::Analyst, "ana", &[dataset]);
    let request = post(&app, dataset, &token);
    let call = tokio::spawn(async move { request.send().await });
    // Wait for the debit (its release record), then hang up.
    let debited = loop {
        if let Some(stored) = app.store.release_by_key(dataset, "ana", KEY).await.unwrap() {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    call.abort();
    assert!(debited.response.is_none());
    retry_gets_the_stored_release(&app, dataset, &token).await;
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_request_timeout_after_the_debit_leaves_the_release_for_the_retry(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    // Pricing, admission and the debit read no rows: well inside 1.5 s;
    // the model's read of the rows then takes three seconds to start.
    let (app, dataset) = slow(backend, Duration::from_millis(1500)).await;
    let token = app.token(dpgate::domain::auth::Role::Analyst, "ana", &[dataset]);
    let timed_out = post(&app, dataset, &token).send().await.unwrap();
    assert_eq!(timed_out.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(timed_out.headers()["retry-after"], "1");
    let problem: dpgate_client::types::Problem = timed_out.json().await.unwrap();
    assert_eq!(problem.kind(), Some(ProblemType::Timeout));
    // The debit stands and the release is still being made.
    let stored = app
        .store
        .release_by_key(dataset, "ana", KEY)
        .await
        .unwrap()
        .unwrap();
    assert!(stored.response.is_none());
    // The retry may itself outlast the timeout while it waits: the client
    // retries 503s, as it does here.
    let mut answer = post(&app, dataset, &token).send().await.unwrap();
    while answer.status() == StatusCode::SERVICE_UNAVAILABLE {
        answer = post(&app, dataset, &token).send().await.unwrap();
    }
    assert_eq!(answer.status(), StatusCode::OK);
    retry_gets_the_stored_release(&app, dataset, &token).await;
    app.finish().await;
}
