//! A release that fails after its debit (here: the database fails every
//! read of private rows) keeps its debit, is recorded as failed, and is
//! answered with `release-failed` naming it, now and on every retry with
//! its Idempotency-Key: never with fresh noise, never with a second debit.

use dpgate::api::Limits;
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
    let token = app.token(dpgate::domain::auth::Role::Analyst, "ana", &[dataset.id]);
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

/// How the engine fails a release after its admission.
#[derive(Debug, Clone, Copy)]
enum EngineFault {
    /// One bit of a measure in an outcomes file flipped, the size
    /// unchanged, so only its hashes tell.
    ChangedFile,
    /// The pass takes longer than `DPGATE_ENGINE_TIMEOUT`.
    Timeout,
}

/// A pass of the engine that fails after the release was admitted fails
/// the release after its debit: recorded, and answered with the same
/// `release-failed` on a retry, never with a sum over changed rows.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn an_engine_failure_fails_the_release_after_its_debit(
    #[case] backend: Backend,
    #[values(EngineFault::ChangedFile, EngineFault::Timeout)] fault: EngineFault,
) {
    if unavailable(backend) {
        return;
    }
    // Nothing held in memory: the engine reads the files.
    let limits = Limits {
        cache_bytes: 0,
        engine_timeout: match fault {
            EngineFault::ChangedFile => Limits::default().engine_timeout,
            EngineFault::Timeout => std::time::Duration::ZERO,
        },
        ..Limits::default()
    };
    let app = crate::helpers::spawn_app_with(backend, limits).await;
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", 10.0))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 2_000))
        .await
        .unwrap();
    let files = app
        .store
        .version_files(dataset.id, 2_000, true)
        .await
        .unwrap();
    if let EngineFault::ChangedFile = fault {
        let outcomes = app.snapshots.data().root().unwrap().join(&files[1].path);
        let mut flipped = std::fs::read(&outcomes).unwrap();
        flipped[9_001] ^= 0x01;
        std::fs::write(&outcomes, &flipped).unwrap();
    }

    let token = app.token(dpgate::domain::auth::Role::Analyst, "ana", &[dataset.id]);
    let post = || {
        app.raw(
            Method::POST,
            &format!("/v1/datasets/{}/releases", dataset.id),
        )
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("idempotency-key", "changed")
        .body(r#"{"kind": "aggregate", "epsilon": 1, "delta": 1e-7, "statistics": ["sum:value"]}"#)
    };
    let mut releases = Vec::new();
    for _ in 0..2 {
        let answer = post().send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let failed: Problem = answer.json().await.unwrap();
        assert_eq!(failed.kind(), Some(ProblemType::ReleaseFailed));
        releases.push(failed.release_id.expect("the problem names the release"));
    }
    assert_eq!(releases[0], releases[1]);
    let stored = app
        .store
        .release_by_key(dataset.id, "ana", "changed")
        .await
        .unwrap()
        .unwrap();
    assert!(stored.response.is_none() && stored.failure.is_some());
    let view = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 1.0);
    app.finish().await;
}
