//! Releases compute on in-memory snapshots of one committed version: kept
//! warm by uploads, shared by concurrent releases, and streamed from the
//! version's files when the cache bound is smaller than the dataset.

use dpgate::api::Limits;
use dpgate::snapshots::STREAM_ROWS;
use dpgate_client::types::{
    AggregateMechanism, AggregateParams, ProblemType, Release, ReleaseParams, ReleaseRequest,
    ReleaseResult, SuppliedRow, WalrMap, WalrParams,
};
use dpgate_client::{Client, ReleaseOptions, UploadFormat};
use rstest::rstest;
use uuid::Uuid;

use crate::counting::Counting;
use crate::helpers::{
    Backend, TestApp, ads_dataset, ads_rows, spawn_app, spawn_app_over, spawn_app_with, unavailable,
};

/// Rows per upload in the race.
const BATCH: usize = 1500;
const UPLOADS: usize = 8;

/// Counts by campaign, and (priced) the share of conversions: the counts
/// are exact under unit `label`, computed from the snapshot's rows with
/// their outcomes when the release is priced.
fn counts(priced: bool) -> ReleaseRequest {
    let statistics = if priced {
        vec!["count".to_owned(), "mean:converted".to_owned()]
    } else {
        vec!["count".to_owned()]
    };
    ReleaseRequest {
        epsilon: Some(1.0),
        delta: Some(1e-9),
        params: ReleaseParams::Aggregate(AggregateParams {
            statistics,
            group_by: vec!["campaign".to_owned()],
            mechanism: AggregateMechanism::Gaussian,
            target_std: None,
        }),
    }
}

/// Checks a counts release against a from-scratch count of the first `n`
/// rows of [`ads_rows`] (campaign `a` on even rows); its `n`.
fn check_counts(release: &Release) -> u64 {
    let Some(ReleaseResult::Aggregate(result)) = &release.result else {
        panic!("an aggregate result: {release:?}");
    };
    let n = release.n.expect("N is public under unit label");
    let counted: Vec<(String, f64)> = result
        .groups
        .iter()
        .filter(|group| group.statistic == "count")
        .map(|group| (group.key["campaign"].clone(), group.value))
        .collect();
    let expected = vec![
        ("a".to_owned(), n.div_ceil(2) as f64),
        ("b".to_owned(), (n / 2) as f64),
    ];
    assert_eq!(counted, expected, "n = {n}");
    n
}

async fn release(client: &Client, dataset: Uuid, request: &ReleaseRequest) -> Release {
    client
        .release(dataset, request, &ReleaseOptions::default())
        .await
        .unwrap()
        .release
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn releases_racing_uploads_compute_on_one_committed_version(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app
        .dataset(ads_dataset("race", "label", "basic", 1000.0))
        .await
        .id;
    app.admin
        .upload_rows(dataset, UploadFormat::Csv, ads_rows(0, BATCH))
        .await
        .unwrap();
    let admin = app.admin.clone();
    let uploader = tokio::spawn(async move {
        for upload in 1..UPLOADS {
            admin
                .upload_rows(dataset, UploadFormat::Csv, ads_rows(upload * BATCH, BATCH))
                .await
                .unwrap();
        }
    });
    let last = (UPLOADS * BATCH) as u64;
    let releasers: Vec<_> = [true, false]
        .into_iter()
        .map(|priced| {
            let analyst = app.analyst(if priced { "ana" } else { "bea" }, &[dataset]);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..10_000 {
                    match analyst
                        .release(dataset, &counts(priced), &ReleaseOptions::default())
                        .await
                    {
                        Ok(released) => seen.push(check_counts(&released.release)),
                        // Rows kept arriving between pricing and debit.
                        Err(error) => {
                            assert_eq!(error.problem_type(), Some(ProblemType::Conflict), "{error}")
                        }
                    }
                    if seen.last() == Some(&last) {
                        break;
                    }
                }
                seen
            })
        })
        .collect();
    uploader.await.unwrap();
    for releaser in releasers {
        let seen = releaser.await.unwrap();
        // Every n is a committed version, and they never go back.
        assert!(
            seen.iter().all(|&n| n % BATCH as u64 == 0),
            "{backend:?}: {seen:?}"
        );
        assert!(seen.windows(2).all(|pair| pair[0] <= pair[1]), "{seen:?}");
        assert_eq!(seen.last(), Some(&last));
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn uploads_keep_the_new_version_in_memory(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let mut counting = None;
    let app = spawn_app_over(backend, Limits::default(), |store| {
        let counter = Counting::new(store);
        counting = Some(counter.clone());
        counter
    })
    .await;
    let counting = counting.unwrap();
    let dataset = app
        .dataset(ads_dataset("warm", "label", "basic", 100.0))
        .await
        .id;
    for (from, n) in [(0, 500u64), (500, 900)] {
        app.admin
            .upload_rows(
                dataset,
                UploadFormat::Csv,
                ads_rows(from, 500.min(900 - from)),
            )
            .await
            .unwrap();
        let held = app.snapshots.held(dataset, n).expect("the upload kept it");
        assert_eq!((held.len() as u64, held.id(0)), (n, "r0"));
    }
    assert!(app.snapshots.held(dataset, 500).is_none());
    let analyst = app.analyst("ana", &[dataset]);
    assert_eq!(
        check_counts(&release(&analyst, dataset, &counts(true)).await),
        900
    );
    let model: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "model/output-perturbation", "epsilon": 1, "lambda": 0.01
    }))
    .unwrap();
    release(&analyst, dataset, &model).await;
    // Nothing was read back from the store.
    assert_eq!(counting.take(), (0, 0));
    app.finish().await;
}

/// A supplied-vector WALR over the first `rows` stored rows, on the
/// identity map.
fn supplied(rows: usize) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(1.0),
        delta: Some(1e-9),
        params: ReleaseParams::Walr(WalrParams {
            intercept: true,
            map: Some(WalrMap::None),
            features: Some(
                (0..rows)
                    .map(|index| SuppliedRow {
                        row_id: format!("r{index}"),
                        x: vec![0.5],
                    })
                    .collect(),
            ),
            ..WalrParams::default()
        }),
    }
}

/// Every kind that reads rows, on `app`'s dataset of `n` rows: counts
/// exact, the others made.
async fn every_row_reading_kind(app: &TestApp, dataset: Uuid, n: u64) {
    let analyst = app.analyst("ana", &[dataset]);
    for priced in [true, false] {
        assert_eq!(
            check_counts(&release(&analyst, dataset, &counts(priced)).await),
            n
        );
    }
    let made = release(&analyst, dataset, &supplied(1000)).await;
    let Some(ReleaseResult::Walr(walr)) = made.result else {
        panic!("a WALR result");
    };
    // (1/N)·Σ yᵢ·0.5 over 1000 rows with a conversion every third: 0.167.
    assert!(
        (walr.noisy_dot[0] - 334.0 * 0.5 / 1000.0).abs() < 0.05,
        "{walr:?}"
    );
    // A map other than the identity sums every row's mapped features.
    let centred: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "walr", "epsilon": 1, "delta": 1e-9, "map": "centre"
    }))
    .unwrap();
    let made = release(&analyst, dataset, &centred).await;
    let Some(ReleaseResult::Walr(walr)) = made.result else {
        panic!("a WALR result");
    };
    assert_eq!((made.n, walr.noisy_dot.len()), (Some(n), 2));
    assert!(walr.map.is_some());
    let model: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "model/objective-perturbation", "epsilon": 1, "lambda": 0.01
    }))
    .unwrap();
    assert_eq!(release(&analyst, dataset, &model).await.n, Some(n));
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_cache_smaller_than_the_dataset_streams_it(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    // Two full streamed blocks and a part: every pass reads it in three.
    let n = 2 * STREAM_ROWS + 1000;
    for bound in [0, 1 << 20] {
        let limits = Limits {
            cache_bytes: bound,
            ..Limits::default()
        };
        let app = spawn_app_with(backend, limits).await;
        let dataset = app
            .dataset(ads_dataset("big", "label", "basic", 100.0))
            .await
            .id;
        app.admin
            .upload_rows(dataset, UploadFormat::Csv, ads_rows(0, n))
            .await
            .unwrap();
        every_row_reading_kind(&app, dataset, n as u64).await;
        assert_eq!(app.snapshots.held_bytes(), 0, "bound {bound}");
        app.finish().await;
    }
}

/// Two replicas over one database and one data directory, uploading in
/// turn: every release on either computes on exactly the version it was
/// priced at (its `n`, and counts recomputed from scratch for that `n`),
/// whichever replica wrote the files, and neither keeps serving a version
/// the other has superseded.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn replicas_sharing_a_database_and_files_never_mix_versions(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let replica = app.replica().await;
    let dataset = app
        .dataset(ads_dataset("shared", "label", "rdp", 100.0))
        .await;
    let token = app.token(dpgate::domain::auth::Role::Analyst, "ana", &[dataset.id]);
    let admin_token = app.token(dpgate::domain::auth::Role::Admin, "admin", &[]);
    let servers = [
        (app.admin.clone(), app.analyst("ana", &[dataset.id])),
        (
            Client::new(&replica, Some(admin_token)),
            Client::new(&replica, Some(token)),
        ),
    ];
    for upload in 0..4 {
        let (admin, _) = &servers[upload % 2];
        let report = admin
            .upload_rows(
                dataset.id,
                UploadFormat::Csv,
                ads_rows(upload * BATCH, BATCH),
            )
            .await
            .unwrap();
        assert_eq!(report.n_rows, ((upload + 1) * BATCH) as u64);
        for (_, analyst) in &servers {
            let released = analyst
                .release(dataset.id, &counts(true), &ReleaseOptions::default())
                .await
                .unwrap();
            assert_eq!(
                check_counts(&released.release),
                report.n_rows,
                "{backend:?}, upload {upload}"
            );
        }
    }
    app.finish().await;
}
