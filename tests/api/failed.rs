//! A release that fails after its debit (here: the database fails every
//! read of private rows) keeps its debit, is recorded as failed, and is
//! answered with `release-failed` naming it, now and on every retry with
//! its Idempotency-Key: never with fresh noise, never with a second debit.

use dpgate::app::Limits;
use dpgate_client::UploadFormat;
use dpgate_client::types::{Problem, ProblemType};
use reqwest::{Method, StatusCode};
use rstest::rstest;

use crate::counting::Counting;
use crate::helpers::{Backend, ads_dataset, ads_rows, spawn_app_over, unavailable};

const MODEL: &str = r#"{"kind": "model/output-perturbation", "epsilon": 1, "lambda": 0.01}"#;

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_release_that_fails_after_its_debit_keeps_it_and_answers_the_same_failure(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    // Nothing held in memory: the release reads the (broken) store.
    let limits = Limits {
        cache_bytes: 0,
        ..Limits::default()
    };
    let app = spawn_app_over(backend, limits, |store| Counting::broken(store)).await;
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", 10.0))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 100))
        .await
        .unwrap();
    let token = app.token(dpgate::auth::Role::Analyst, "ana", &[dataset.id]);
    let post = |key: &str| {
        app.raw(
            Method::POST,
            &format!("/v1/datasets/{}/releases", dataset.id),
        )
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(MODEL)
    };

    let first = post("doomed").send().await.unwrap();
    assert_eq!(first.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(first.headers()["content-type"], "application/problem+json");
    let failed: Problem = first.json().await.unwrap();
    assert_eq!(failed.kind(), Some(ProblemType::ReleaseFailed));
    let release = failed.release_id.expect("the problem names the release");
    assert!(
        failed.detail.contains(&release.to_string()),
        "{}",
        failed.detail
    );

    // The debit stands, and the record says the release failed.
    let stored = app
        .store
        .release_by_key(dataset.id, "ana", "doomed")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.id, release);
    assert!(stored.response.is_none());
    assert_eq!(stored.failure.as_deref(), Some(failed.detail.as_str()));
    let view = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 1.0);

    // Every retry with the key gets the same answer and spends nothing.
    for _ in 0..2 {
        let retry = post("doomed").send().await.unwrap();
        assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let again: Problem = retry.json().await.unwrap();
        // The same problem; only the request's own id differs.
        assert_ne!(again.request_id, failed.request_id);
        let again = Problem {
            request_id: failed.request_id.clone(),
            ..again
        };
        assert_eq!(again, failed);
    }
    let ledger = app.admin.ledger(dataset.id).await.unwrap();
    assert_eq!(ledger.len(), 2, "one opening, one debit");
    let view = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 1.0);
    app.finish().await;
}
