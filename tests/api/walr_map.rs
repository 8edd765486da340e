//! WALR on a public feature map, and accuracy-first releases that name a
//! target noise instead of ε.

use dpgate::domain::auth::Role;
use dpgate_client::types::{
    AggregateParams, FeatureMap, ProblemType, Release, ReleaseParams, ReleaseRequest,
    ReleaseResult, SuppliedRow, WalrMap, WalrParams, WalrResult,
};
use dpgate_client::{Client, ClientError, ReleaseOptions, UploadFormat};
use rstest::rstest;
use uuid::Uuid;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app, unavailable};

const ROWS: usize = 3_000;

/// A walr release on `map` (`None`: the request names none).
fn walr_on(
    epsilon: Option<f64>,
    map: Option<WalrMap>,
    target_sigma: Option<f64>,
) -> ReleaseRequest {
    ReleaseRequest {
        epsilon,
        delta: Some(1e-7),
        params: ReleaseParams::Walr(WalrParams {
            map,
            target_sigma,
            ..WalrParams::default()
        }),
    }
}

/// A walr release on the named `map`.
fn walr(epsilon: Option<f64>, map: WalrMap, target_sigma: Option<f64>) -> ReleaseRequest {
    walr_on(epsilon, Some(map), target_sigma)
}

fn dry() -> ReleaseOptions {
    ReleaseOptions {
        dry_run: true,
        ..ReleaseOptions::default()
    }
}

/// A release made (not a dry run), that must be granted.
async fn granted(client: &Client, id: Uuid, request: &ReleaseRequest) -> Release {
    client
        .release(id, request, &ReleaseOptions::default())
        .await
        .expect("granted")
        .release
}

/// The rows of [`ads_rows`] scaled as stored: f0 ∈ [0, 1] as is, f1 from
/// [−5, 5]; and their labels.
fn scaled_rows(from: usize, count: usize) -> Vec<([f64; 2], u8)> {
    (from..from + count)
        .map(|i| {
            let f0 = (i % 10) as f64 / 10.0;
            let f1 = ((i % 7) as f64 - 3.0 + 5.0) / 10.0;
            ([f0, f1], u8::from(i % 3 == 0))
        })
        .collect()
}

fn walr_result(release: &Release) -> &WalrResult {
    match &release.result {
        Some(ReleaseResult::Walr(result)) => result,
        other => panic!("a walr result: {other:?}"),
    }
}

async fn loaded(app: &TestApp, unit: &str, csv: String) -> (Uuid, Client) {
    let name = format!("{unit}-{}", Uuid::new_v4());
    let dataset = app.dataset(ads_dataset(&name, unit, "basic", 100.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, csv)
        .await
        .unwrap();
    (dataset.id, app.analyst("ana", &[dataset.id]))
}

async fn refused(client: &Client, id: Uuid, request: &ReleaseRequest, reason: &str) {
    let error = client
        .release(id, request, &ReleaseOptions::default())
        .await
        .unwrap_err();
    let ClientError::Problem(problem) = &error else {
        panic!("a problem: {error}");
    };
    assert_eq!(
        (problem.kind(), problem.status),
        (Some(ProblemType::InvalidInput), 422),
        "{problem:?}"
    );
    assert!(
        problem.detail.contains(reason),
        "{reason}: {}",
        problem.detail
    );
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_mapped_release_returns_its_map_applied_as_declared_and_charges_its_price(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    for unit in ["label", "row"] {
        let (id, analyst) = loaded(&app, unit, ads_rows(0, ROWS)).await;
        let rows = scaled_rows(0, ROWS);
        for asked in [WalrMap::Centre, WalrMap::Auto] {
            // ε = 0.25: noise enough for `auto` to shrink.
            let request = walr(Some(0.25), asked, None);
            let priced = analyst.release(id, &request, &dry()).await.unwrap().release;
            let before = analyst.dataset(id).await.unwrap().spent.epsilon;
            let release = granted(&analyst, id, &request).await;
            let result = walr_result(&release);
            let map = result.map.clone().expect("the map, returned");
            assert_eq!(map.name, asked);
            // The map: the features' mean under `label`, the box's
            // middle under `row`; `auto` shrinks to the RMS radius.
            let n = ROWS as f64;
            let mean = [0, 1].map(|j| rows.iter().map(|(x, _)| x[j]).sum::<f64>() / n);
            match unit {
                "label" => {
                    for (c, m) in map.centre.iter().zip(mean) {
                        assert!((c - m).abs() < 1e-6, "{unit}: centre {c} ≠ {m}");
                    }
                }
                _ => assert_eq!(map.centre, vec![0.5, 0.5]),
            }
            assert_eq!(map.radius.is_some(), asked == WalrMap::Auto, "{unit}");
            if unit == "row" && asked == WalrMap::Auto {
                assert_eq!(map.radius, Some((2.0f64 / 12.0).sqrt()));
            }
            // The sensitivity of the declared map (DESIGN's WALR rows
            // with φ in place of (1, x)).
            let a = map.intercept_weight;
            let expected = match unit {
                "label" => map.box_reach().hypot(a),
                _ => map.box_diameter().max(map.box_reach().hypot(a)),
            } / n;
            // On the grid of the exact sums: within the grid's
            // rounding (10⁻¹¹ of it).
            assert!(
                (release.sensitivity - expected).abs() <= expected * 1e-11,
                "{unit} {asked:?}: {} ≠ {expected}",
                release.sensitivity
            );
            // The dry run priced exactly this, and the ledger took it.
            assert_eq!(
                (priced.sensitivity, priced.sigma, priced.epsilon),
                (release.sensitivity, release.sigma, 0.25)
            );
            assert!((release.spent.epsilon - before - 0.25).abs() < 1e-9);
            // The server applied this very map: the noisy vector lies
            // within 6σ of Σ yᵢ·φ(xᵢ)/N computed here from it.
            let mut exact = [0.0; 3];
            let mut v = [0.0; 2];
            for (x, y) in &rows {
                map.apply(x, &mut v);
                let y = f64::from(*y);
                exact[0] += y * v[0] / n;
                exact[1] += y * v[1] / n;
                exact[2] += y * a / n;
            }
            let noisy = [
                result.noisy_dot[0],
                result.noisy_dot[1],
                result.noisy_intercept.unwrap(),
            ];
            for (noisy, exact) in noisy.iter().zip(exact) {
                assert!(
                    (noisy - exact).abs() < 6.0 * release.sigma,
                    "{unit} {asked:?}: {noisy} vs {exact} (σ {})",
                    release.sigma
                );
            }
        }
        // The identity, asked for by name, says nothing of a map.
        let plain = analyst
            .release(id, &walr(Some(1.0), WalrMap::None, None), &dry())
            .await
            .unwrap()
            .release;
        let centred = analyst
            .release(id, &walr(Some(1.0), WalrMap::Centre, None), &dry())
            .await
            .unwrap()
            .release;
        assert!(
            centred.sigma < plain.sigma,
            "{unit}: centring must not add noise"
        );
        // Where the noise is slight, `auto` drops the shrink: it is
        // `centre` then.
        let slight = granted(&analyst, id, &walr(Some(50.0), WalrMap::Auto, None)).await;
        let map = walr_result(&slight).map.clone().unwrap();
        assert_eq!((map.radius, map.intercept_weight), (None, 1.0), "{unit}");
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn auto_is_blind_to_labels_and_under_row_to_the_rows(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let relabelled = ads_rows(0, ROWS)
        .lines()
        .enumerate()
        .map(|(i, line)| match i {
            0 => line.to_owned(),
            _ => {
                // Flip every label.
                let (id, rest) = line.split_once(',').unwrap();
                let (label, rest) = rest.split_once(',').unwrap();
                format!("{id},{},{rest}", 1 - label.parse::<u8>().unwrap())
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let map_of = |release: Release| walr_result(&release).map.clone().unwrap();
    let mut maps: Vec<(String, FeatureMap)> = Vec::new();
    for (unit, csv) in [
        ("label", ads_rows(0, ROWS)),
        ("label", relabelled.clone()),
        ("label", ads_rows(5, ROWS + 11)),
        ("row", ads_rows(0, ROWS)),
        ("row", ads_rows(7, ROWS)),
    ] {
        let (id, analyst) = loaded(&app, unit, csv).await;
        let release = granted(&analyst, id, &walr(Some(0.25), WalrMap::Auto, None)).await;
        maps.push((unit.to_owned(), map_of(release)));
    }
    // Labels flipped: bit-identical, down to the JSON.
    assert_eq!(maps[0].1, maps[1].1);
    assert_eq!(
        serde_json::to_string(&maps[0].1).unwrap(),
        serde_json::to_string(&maps[1].1).unwrap()
    );
    // Other rows: another map under `label`, the same under `row`
    // (as many rows: N is public, and the map may depend on it).
    assert_ne!(maps[0].1, maps[2].1);
    assert_eq!(maps[3].1, maps[4].1);
    assert!(maps.iter().all(|(_, map)| map.radius.is_some()));
    app.finish().await;
}

/// `body` posted as a release on `id` with `key`: its status and JSON.
async fn posted(
    app: &TestApp,
    id: Uuid,
    key: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let response = app
        .raw(
            reqwest::Method::POST,
            &format!("/v1/datasets/{id}/releases"),
        )
        .bearer_auth(app.token(Role::Analyst, "ana", &[id]))
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_release_that_names_no_map_gets_auto_and_one_that_names_none_the_identity(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let n = ROWS as f64;
    for unit in ["label", "row"] {
        let (id, analyst) = loaded(&app, unit, ads_rows(0, ROWS)).await;
        let plain = serde_json::json!({"kind": "walr", "epsilon": 0.25, "delta": 1e-7});
        let mut none = plain.clone();
        none["map"] = "none".into();
        // No map: `auto`, exactly as if named, with no fallback to tell of
        // (ε = 0.25: noise enough for it to keep its shrink).
        let priced = analyst
            .release(id, &walr_on(Some(0.25), None, None), &dry())
            .await
            .unwrap()
            .release;
        let (status, body) = posted(&app, id, "plain", plain.clone()).await;
        assert_eq!(status, 201, "{unit}: {body}");
        assert_eq!(body["result"]["map"]["name"], "auto", "{unit}: {body}");
        assert!(body["result"].get("map_fallback").is_none(), "{body}");
        let default: Release = serde_json::from_value(body).unwrap();
        let named = granted(&analyst, id, &walr(Some(0.25), WalrMap::Auto, None)).await;
        assert_eq!(walr_result(&default).map, walr_result(&named).map, "{unit}");
        assert!(walr_result(&default).map.as_ref().unwrap().radius.is_some());
        assert_eq!(
            (default.sensitivity, default.sigma),
            (named.sensitivity, named.sigma)
        );
        assert_eq!(
            (priced.sensitivity, priced.sigma),
            (named.sensitivity, named.sigma)
        );
        // "none" by name: the identity, which the result leaves unsaid,
        // at the identity's sensitivity: from the largest stored norm
        // under `label` (f32 features), √(k + 1)/N under `row`.
        let (status, body) = posted(&app, id, "none", none.clone()).await;
        assert_eq!(status, 201, "{unit}: {body}");
        let result = body["result"].as_object().unwrap();
        assert!(
            !result.contains_key("map") && !result.contains_key("map_fallback"),
            "{unit}: {body}"
        );
        let identity: Release = serde_json::from_value(body).unwrap();
        let expected = match unit {
            "label" => {
                scaled_rows(0, ROWS)
                    .iter()
                    .map(|(x, _)| 1.0 + x[0] * x[0] + x[1] * x[1])
                    .fold(0.0, f64::max)
                    .sqrt()
                    / n
            }
            _ => 3f64.sqrt() / n,
        };
        assert!(
            (identity.sensitivity - expected).abs() <= expected * 1e-6,
            "{unit}: {} ≠ {expected}",
            identity.sensitivity
        );
        assert!(default.sigma < identity.sigma, "{unit}");
        // Two requests now, not one: neither's key replays the other.
        assert_eq!(posted(&app, id, "plain", plain).await.0, 200);
        assert_eq!(posted(&app, id, "plain", none.clone()).await.0, 409);
        assert_eq!(posted(&app, id, "none", none).await.0, 200);
    }
    app.finish().await;
}

/// Makes the dataset `id` look as if its rows predate the features'
/// moments: its stored statistics without them, as such rows' are (every
/// upload has kept them since, so only the database can make this).
async fn forget_moments(app: &TestApp, id: Uuid) {
    use sqlx::Connection;
    let mut record = app.store.dataset(id).await.unwrap().unwrap();
    record.stats.feature_sums.clear();
    record.stats.feature_square_sums.clear();
    let stats = serde_json::to_string(&record.stats).unwrap();
    let sql = format!("UPDATE datasets SET stats = '{stats}' WHERE id = '{id}'");
    let sql = sqlx::AssertSqlSafe(sql);
    let updated = match app.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&app.database_url)
                .await
                .unwrap();
            sqlx::query(sql)
                .execute(&mut conn)
                .await
                .unwrap()
                .rows_affected()
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&app.database_url)
                .await
                .unwrap();
            sqlx::query(sql)
                .execute(&mut conn)
                .await
                .unwrap()
                .rows_affected()
        }
    };
    assert_eq!(updated, 1);
    let stored = app.store.dataset(id).await.unwrap().unwrap();
    assert!(stored.stats.feature_sums.is_empty());
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn without_a_map_on_rows_that_predate_the_moments_the_release_falls_back_to_the_identity(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let (id, analyst) = loaded(&app, "label", ads_rows(0, ROWS)).await;
    forget_moments(&app, id).await;
    let none = walr(Some(0.25), WalrMap::None, None);
    let identity = analyst.release(id, &none, &dry()).await.unwrap().release;
    // A dry run prices the identity; it has no result, so nothing says
    // why until the release is made.
    let plain = serde_json::json!({"kind": "walr", "epsilon": 0.25, "delta": 1e-7});
    let priced = analyst
        .release(id, &walr_on(Some(0.25), None, None), &dry())
        .await
        .unwrap()
        .release;
    assert_eq!(
        (priced.sensitivity, priced.sigma, &priced.result),
        (identity.sensitivity, identity.sigma, &None)
    );
    let (status, body) = posted(&app, id, "plain", plain).await;
    assert_eq!(status, 201, "{body}");
    let result = body["result"].as_object().unwrap();
    assert!(!result.contains_key("map"), "{body}");
    assert_eq!(
        result["map_fallback"],
        "the default map auto needs the features' public moments, which this dataset's rows \
         predate: released on map none; upload the rows again into a new dataset to get auto"
    );
    let release: Release = serde_json::from_value(body).unwrap();
    assert_eq!(
        (release.sensitivity, release.sigma),
        (identity.sensitivity, identity.sigma)
    );
    // "none" by name is no fallback; `auto` or `centre` by name are
    // refused, as they always were.
    let named = granted(&analyst, id, &none).await;
    assert_eq!(
        (&walr_result(&named).map, &walr_result(&named).map_fallback),
        (&None, &None)
    );
    for asked in [WalrMap::Auto, WalrMap::Centre] {
        let request = walr(Some(0.25), asked, None);
        refused(&analyst, id, &request, "needs the features' moments").await;
    }
    // Under `row` the default needs no moments: still `auto`.
    let (row, analyst) = loaded(&app, "row", ads_rows(0, ROWS)).await;
    forget_moments(&app, row).await;
    let release = granted(&analyst, row, &walr_on(Some(0.25), None, None)).await;
    let result = walr_result(&release);
    assert_eq!(
        (
            result.map.as_ref().map(|map| map.name),
            &result.map_fallback
        ),
        (Some(WalrMap::Auto), &None)
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn supplied_vectors_get_a_map_fitted_to_them(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let (id, analyst) = loaded(&app, "label", ads_rows(0, 300)).await;
    let vectors: Vec<[f64; 2]> = (0..300)
        .map(|i| [f64::from(i % 5) / 4.0, f64::from(i % 2)])
        .collect();
    let request = ReleaseRequest {
        epsilon: Some(1.0),
        delta: Some(1e-7),
        params: ReleaseParams::Walr(WalrParams {
            map: Some(WalrMap::Auto),
            features: Some(
                vectors
                    .iter()
                    .enumerate()
                    .map(|(i, x)| SuppliedRow {
                        row_id: format!("r{i}"),
                        x: x.to_vec(),
                    })
                    .collect(),
            ),
            ..WalrParams::default()
        }),
    };
    let release = granted(&analyst, id, &request).await;
    let map = walr_result(&release).map.clone().unwrap();
    assert_eq!(map.centre, vec![0.5, 0.5]);
    // Variances 0.125 and 0.25: R = √0.375, every vector's norm.
    assert!((map.radius.unwrap() - 0.375f64.sqrt()).abs() < 1e-15);
    let reach = vectors
        .iter()
        .map(|x| {
            let mut v = [0.0; 2];
            map.apply(x, &mut v);
            v[0].hypot(v[1])
        })
        .fold(0.0, f64::max);
    let expected = reach.hypot(map.intercept_weight) / 300.0;
    // The vectors' exact units on the grid: within 10⁻⁸ of the floats'
    // norm (the shrink to (1 − 2⁻³⁰)·R of vectors on the sphere).
    assert!(
        (release.sensitivity - expected).abs() <= expected * 1e-8,
        "{} ≠ {expected}",
        release.sensitivity
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_target_noise_buys_the_least_epsilon_that_meets_it(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let (id, analyst) = loaded(&app, "label", ads_rows(0, ROWS)).await;
    let target = 2e-3;
    let request = walr(None, WalrMap::Auto, Some(target));
    let priced = analyst.release(id, &request, &dry()).await.unwrap().release;
    let before = analyst.dataset(id).await.unwrap().spent.epsilon;
    let release = granted(&analyst, id, &request).await;
    assert!(release.sigma <= target, "σ {} > {target}", release.sigma);
    assert_eq!(priced.epsilon, release.epsilon, "the dry run shows the ε");
    assert!((release.spent.epsilon - before - release.epsilon).abs() < 1e-9);
    // One ledger unit (10⁻⁹) less would not have met the target.
    let cheaper = ReleaseRequest {
        epsilon: Some(release.epsilon - 1e-9),
        ..walr(None, WalrMap::Auto, None)
    };
    let cheaper = analyst.release(id, &cheaper, &dry()).await.unwrap().release;
    assert!(cheaper.sigma > target, "σ {} at ε − 10⁻⁹", cheaper.sigma);

    // An aggregate's target is checked like walr's (its figures:
    // tests/api/aggregates.rs).
    let count = |epsilon, target_std| ReleaseRequest {
        epsilon,
        delta: Some(1e-7),
        params: ReleaseParams::Aggregate(AggregateParams {
            statistics: vec!["count".to_owned(), "sum:value".to_owned()],
            group_by: vec![],
            mechanism: Default::default(),
            target_std,
        }),
    };

    // Refused: both, neither, an unreachable target, a target another
    // kind does not take.
    refused(
        &analyst,
        id,
        &walr(Some(1.0), WalrMap::None, Some(1e-3)),
        "not both",
    )
    .await;
    refused(
        &analyst,
        id,
        &walr(None, WalrMap::None, None),
        "epsilon is required",
    )
    .await;
    refused(
        &analyst,
        id,
        &walr(None, WalrMap::None, Some(1e-30)),
        "target noise",
    )
    .await;
    refused(&analyst, id, &count(None, Some(-1.0)), "target noise").await;
    let error = app
        .raw(
            reqwest::Method::POST,
            &format!("/v1/datasets/{id}/releases"),
        )
        .bearer_auth(app.token(Role::Analyst, "ana", &[id]))
        .json(&serde_json::json!({
            "kind": "model/output-perturbation", "lambda": 0.1, "target_sigma": 0.1
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(error.status(), 422);
    app.finish().await;
}
