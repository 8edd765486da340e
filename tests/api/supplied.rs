//! WALR over the analyst's own feature vectors, keyed by row id.

use dpgate_client::types::{
    ProblemType, ReleaseParams, ReleaseRequest, ReleaseResult, SuppliedRow, WalrMap, WalrParams,
};
use dpgate_client::{ReleaseOptions, UploadFormat};
use rstest::rstest;

use crate::helpers::{
    Backend, Cache, ads_dataset, ads_rows, spawn_app, spawn_app_caching, unavailable,
};

/// On the identity map, whose numbers the tests check.
fn supplied(rows: &[(&str, &[f64])]) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(1.0),
        delta: Some(1e-7),
        params: ReleaseParams::Walr(WalrParams {
            intercept: true,
            map: Some(WalrMap::None),
            features: Some(
                rows.iter()
                    .map(|&(id, x)| SuppliedRow {
                        row_id: id.to_owned(),
                        x: x.to_vec(),
                    })
                    .collect(),
            ),
            ..WalrParams::default()
        }),
    }
}

/// In memory (rows found by id), and with no snapshot held (the labels
/// joined by a pass of the engine over the version's files).
#[rstest]
#[case::sqlite_held(Backend::Sqlite, Cache::Held)]
#[case::sqlite_streamed(Backend::Sqlite, Cache::Streamed)]
#[case::postgres_held(Backend::Postgres, Cache::Held)]
#[case::postgres_streamed(Backend::Postgres, Cache::Streamed)]
#[tokio::test]
async fn supplied_vectors_replace_the_stored_features_of_their_rows(
    #[case] backend: Backend,
    #[case] cache: Cache,
) {
    if unavailable(backend) {
        return;
    }
    let cache_bytes = cache.bytes();
    let app = spawn_app_caching(backend, cache_bytes).await;
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", 100.0))
        .await;
    let id = dataset.id;
    // 30,000 rows: label 1 on every third (r0, r3, …).
    app.admin
        .upload_rows(id, UploadFormat::Csv, ads_rows(0, 30_000))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[id]);
    // Three features of the analyst's own for every row: about 1.7 MB
    // of JSON, beyond the 1 MiB limit of other JSON bodies.
    let ids: Vec<String> = (0..30_000).map(|i| format!("r{i}")).collect();
    let vectors: Vec<[f64; 3]> = (0..30_000)
        .map(|i| [f64::from(i % 4) / 4.0, 1.0, 0.123_456_789])
        .collect();
    let rows: Vec<(&str, &[f64])> = ids
        .iter()
        .zip(&vectors)
        .map(|(id, x)| (id.as_str(), x.as_slice()))
        .collect();
    let request = supplied(&rows);
    assert!(serde_json::to_vec(&request).unwrap().len() > 1 << 20);
    let dry = ReleaseOptions {
        dry_run: true,
        ..ReleaseOptions::default()
    };
    let priced = analyst.release(id, &request, &dry).await.unwrap().release;
    let release = analyst
        .release(id, &request, &ReleaseOptions::default())
        .await
        .unwrap()
        .release;
    assert_eq!(
        (priced.sensitivity, priced.sigma),
        (release.sensitivity, release.sigma)
    );
    assert_eq!(priced.spent, release.spent, "{backend:?}");
    // Δ = max √(1 + ‖v‖²)/N_s from the supplied vectors.
    let max_norm = (1.0f64 + 0.75 * 0.75 + 1.0 + 0.123_456_789f64.powi(2)).sqrt();
    // On the grid of the exact sums (the supplied vectors' rounded
    // units): within 10⁻¹¹ of it.
    let declared = max_norm / 30_000.0;
    assert!(
        (release.sensitivity - declared).abs() <= declared * 1e-11,
        "{} against {declared}",
        release.sensitivity
    );
    assert_eq!(release.n, Some(30_000));
    let Some(ReleaseResult::Walr(result)) = &release.result else {
        panic!("a walr result: {release:?}");
    };
    // Exact: rows i ≡ 0 (mod 3) are positive; their first value cycles
    // through i mod 4 evenly, so Σ yᵢvᵢ/N = (1/3)·(0.375, 1, 0.123…).
    let exact = [0.375 / 3.0, 1.0 / 3.0, 0.123_456_789 / 3.0];
    assert_eq!(result.noisy_dot.len(), 3);
    for (noisy, exact) in result.noisy_dot.iter().zip(exact) {
        // A 10σ miss has probability < 1e-22.
        assert!(
            (noisy - exact).abs() < 10.0 * release.sigma,
            "{noisy} vs {exact}"
        );
    }
    let intercept = result.noisy_intercept.unwrap();
    assert!((intercept - 1.0 / 3.0).abs() < 10.0 * release.sigma);
    assert_eq!(app.admin.ledger(id).await.unwrap().len(), 2);
    if cache_bytes == 0 {
        let reads = app.snapshots.take_reads();
        assert_eq!((reads.loads, reads.outcome_files), (0, 1), "{reads:?}");
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_supplied_features_are_422_and_spend_nothing(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    let rows = app.dataset(ads_dataset("rows", "row", "rdp", 5.0)).await;
    for target in [&dataset, &rows] {
        app.admin
            .upload_rows(target.id, UploadFormat::Csv, ads_rows(0, 10))
            .await
            .unwrap();
    }
    let analyst = app.analyst("ana", &[dataset.id, rows.id]);
    let good: &[f64] = &[0.5, 0.5];
    let cases: [(&str, Vec<(&str, &[f64])>, &str); 6] = [
        (
            "unknown row id",
            vec![("r1", good), ("nope", good)],
            "not in the dataset",
        ),
        (
            "duplicate row id",
            vec![("r1", good), ("r1", good)],
            "supplied twice",
        ),
        ("above 1", vec![("r1", &[0.5, 1.5])], "[0, 1]"),
        ("below 0", vec![("r1", &[-0.1, 0.5])], "[0, 1]"),
        ("ragged", vec![("r1", good), ("r2", &[0.5])], "has 1 values"),
        ("empty vector", vec![("r1", &[])], "1 to 4096 values"),
    ];
    for dry_run in [true, false] {
        let options = ReleaseOptions {
            dry_run,
            ..ReleaseOptions::default()
        };
        for (case, supplied_rows, reason) in &cases {
            let error = analyst
                .release(dataset.id, &supplied(supplied_rows), &options)
                .await
                .unwrap_err();
            assert_eq!(
                error.problem_type(),
                Some(ProblemType::InvalidInput),
                "{case}"
            );
            assert!(error.to_string().contains(reason), "{case}: {error}");
        }
    }
    // Under unit row, which ids exist is private: refused outright.
    let error = analyst
        .release(
            rows.id,
            &supplied(&[("r1", good)]),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(error.problem_type(), Some(ProblemType::InvalidInput));
    assert!(
        error.to_string().contains("privacy unit `label`"),
        "{error}"
    );
    for target in [&dataset, &rows] {
        let view = app.admin.dataset(target.id).await.unwrap();
        assert_eq!(view.spent.epsilon_basic, 0.0, "{backend:?}");
        assert_eq!(app.admin.ledger(target.id).await.unwrap().len(), 1);
    }
    app.finish().await;
}
