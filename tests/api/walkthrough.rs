//! The README's walk-through: create a dataset, upload rows, give an analyst
//! a token, release a WALR vector, read the ledger.

use dpgate_client::ReleaseOptions;
use dpgate_client::UploadFormat;
use dpgate_client::types::{
    LedgerEvent, ReleaseParams, ReleaseRequest, ReleaseResult, WalrMap, WalrParams,
};

use dpgate::snapshots::Columns;
use futures_util::StreamExt;
use rstest::rstest;

use crate::helpers::{Backend, ads_dataset, ads_rows, spawn_app, unavailable};

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn the_walk_through_works_end_to_end(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 10.0)).await;
    assert_eq!(dataset.n_rows, Some(0));
    assert_eq!(dataset.remaining.epsilon, 10.0);

    let report = app
        .admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 600))
        .await
        .unwrap();
    assert_eq!((report.rows_added, report.n_rows), (600, 600));
    let ndjson: String = (600..650)
        .map(|i| format!(
            "{{\"row_id\": \"r{i}\", \"converted\": {}, \"f0\": 0.5, \"f1\": 0, \"value\": 1, \"campaign\": \"b\"}}\n",
            i % 2
        ))
        .collect();
    let report = app
        .admin
        .upload_rows(dataset.id, UploadFormat::Ndjson, ndjson)
        .await
        .unwrap();
    assert_eq!(report.n_rows, 650, "{backend:?}");

    let analyst = app.analyst("ana", &[dataset.id]);
    assert_eq!(analyst.datasets().await.unwrap().len(), 1);
    let request = ReleaseRequest::walr(1.0, 1e-7);
    let released = analyst
        .release(dataset.id, &request, &ReleaseOptions::default())
        .await
        .unwrap();
    assert!(!released.replayed);
    let release = released.release;
    assert_eq!((release.kind.as_str(), release.n), ("walr", Some(650)));
    // The request names no map: it gets `auto`, fitted to the features'
    // public moments, and says so.
    let Some(ReleaseResult::Walr(result)) = &release.result else {
        panic!("a WALR result");
    };
    let map = result
        .map
        .as_ref()
        .expect("the map the release was made on");
    assert_eq!(map.name, WalrMap::Auto);
    assert_eq!(result.map_fallback, None);
    // Label unit: Δ = √(a² + reach²)/N, reach the largest ‖v(x)‖ over
    // the box.
    let record = app.store.dataset(dataset.id).await.unwrap().unwrap();
    let stored: Vec<Columns> = app
        .snapshots
        .blocks(&record, true)
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    let stored = &stored[0];
    assert_eq!(stored.len(), 650);
    // On the grid of the exact sums: within its rounding.
    let declared = map.box_reach().hypot(map.intercept_weight) / 650.0;
    assert!(
        (release.sensitivity - declared).abs() <= declared * 1e-11,
        "{} against {declared}",
        release.sensitivity
    );
    assert_eq!(result.noisy_dot.len(), 2);
    let exact_intercept = stored.labels().iter().filter(|&&label| label == 1).count() as f64
        * map.intercept_weight
        / 650.0;
    let noisy_intercept = result.noisy_intercept.expect("the intercept term");
    // 6σ away has probability 2e-9.
    assert!((noisy_intercept - exact_intercept).abs() < 6.0 * release.sigma);
    assert!(release.sigma > 0.0 && release.noise.grid > 0.0);
    // The sums were released on the lattice; the mean is them over N,
    // so its values are lattice points up to that one division.
    for value in result.noisy_dot.iter().chain([&noisy_intercept]) {
        assert!(value.is_finite());
        let points = value / release.noise.grid;
        assert!(
            (points - points.round()).abs() < 1e-6,
            "{value} is off the lattice"
        );
    }

    let after = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(after.spent, release.spent);
    assert!(after.spent.epsilon > 0.0 && after.spent.epsilon <= 1.0);
    assert_eq!(after.spent.epsilon_basic, 1.0);
    assert_eq!(after.remaining.epsilon, 10.0 - after.spent.epsilon);
    assert_eq!(
        analyst
            .get_release(dataset.id, release.id.unwrap())
            .await
            .unwrap(),
        release
    );

    let ledger = app.admin.ledger(dataset.id).await.unwrap();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[0].event, LedgerEvent::Open);
    assert_eq!(ledger[1].event, LedgerEvent::Release);
    assert_eq!(ledger[1].release_id, release.id);
    assert_eq!(ledger[1].prev_hash, ledger[0].hash);
    assert_eq!((ledger[1].epsilon, ledger[1].delta), (1.0, 1e-7));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn row_unit_walr_uses_the_public_bound_and_intercept_can_be_left_out(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("rows", "row", "basic", 10.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 100))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[dataset.id]);
    // On the identity map, whose bound is the box's √(k + 1).
    let identity = |intercept| ReleaseRequest {
        epsilon: Some(1.0),
        delta: Some(1e-7),
        params: ReleaseParams::Walr(WalrParams {
            intercept,
            map: Some(WalrMap::None),
            ..WalrParams::default()
        }),
    };
    let (with, without) = (identity(true), identity(false));
    let options = ReleaseOptions::default();
    let release = analyst
        .release(dataset.id, &with, &options)
        .await
        .unwrap()
        .release;
    assert_eq!(release.sensitivity, 3f64.sqrt().next_up() / 100.0);
    let release = analyst
        .release(dataset.id, &without, &options)
        .await
        .unwrap()
        .release;
    assert_eq!(release.sensitivity, 2f64.sqrt().next_up() / 100.0);
    let Some(ReleaseResult::Walr(result)) = release.result else {
        panic!("a WALR result");
    };
    assert_eq!(result.noisy_intercept, None);
    let spent = app.admin.dataset(dataset.id).await.unwrap().spent;
    assert_eq!((spent.epsilon, spent.delta), (2.0, 2e-7));
    app.finish().await;
}
