//! `model/frank-wolfe` end to end: a regression fitted over a target and
//! its source datasets, every one debited in one transaction or none;
//! refusals that spend nothing anywhere.

use dpgate_client::ReleaseOptions;
use dpgate_client::UploadFormat;
use dpgate_client::types::{
    DebiasParams, FrankWolfeParams, FrankWolfeResult, Release, ReleaseParams, ReleaseRequest,
    ReleaseResult, Selection,
};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use reqwest::{Method, StatusCode};
use rstest::rstest;
use uuid::Uuid;

use crate::bad_input::{expect, snapshot};
use crate::helpers::{
    Backend, Cache, TestApp, ads_dataset, spawn_app, spawn_app_caching, unavailable,
};
use crate::learners::{each_invalid, priced_then_released};

/// Rows of [`ads_dataset`] whose measure is value = 30·f0 + 4·f1 + 40 +
/// N(0, 5²) (clamped to [0, 100] on upload).
fn regression_rows(seed: u64, count: usize) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut csv = String::from("row_id,converted,f0,f1,value,campaign\n");
    for index in 0..count {
        let (f0, f1) = (rng.random::<f64>(), rng.random_range(-5.0..5.0));
        let (u, v): (f64, f64) = (rng.random(), rng.random());
        let noise = 5.0 * (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos();
        let value = 30.0 * f0 + 4.0 * f1 + 40.0 + noise;
        csv.push_str(&format!(
            "r{index},{},{f0},{f1},{value},a\n",
            u8::from(f0 > 0.5)
        ));
    }
    csv
}

/// A dataset of 2,000 such rows on an `rdp` ledger of ε = `epsilon`.
async fn regression(app: &TestApp, name: &str, seed: u64, epsilon: f64) -> Uuid {
    regression_on(app, name, seed, epsilon, "rdp").await
}

async fn regression_on(
    app: &TestApp,
    name: &str,
    seed: u64,
    epsilon: f64,
    accountant: &str,
) -> Uuid {
    let dataset = app
        .dataset(ads_dataset(name, "row", accountant, epsilon))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, regression_rows(seed, 2000))
        .await
        .unwrap();
    dataset.id
}

/// A grid of feature values and the true mean of the measure at each.
fn test_grid() -> (Vec<[f64; 2]>, Vec<f64>) {
    let grid: Vec<[f64; 2]> = (0..10)
        .flat_map(|i| (0..5).map(move |j| [f64::from(i) / 9.0, -5.0 + 2.5 * f64::from(j)]))
        .collect();
    let truth = grid
        .iter()
        .map(|x| 30.0 * x[0] + 4.0 * x[1] + 40.0)
        .collect();
    (grid, truth)
}

fn frank_wolfe(epsilon: f64, sources: Vec<Uuid>) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(epsilon),
        delta: Some(1e-6),
        params: ReleaseParams::FrankWolfe(FrankWolfeParams {
            target: "measure:value".to_owned(),
            radius: 1.0,
            steps: 50,
            fit_intercept: true,
            selection: Selection::Laplace,
            sources,
            debias: None,
        }),
    }
}

fn fitted(release: &Release) -> &FrankWolfeResult {
    let Some(ReleaseResult::FrankWolfe(model)) = &release.result else {
        panic!("a Frank-Wolfe result: {release:?}");
    };
    model
}

/// The last ledger entry of `dataset`, as JSON.
async fn last_entry(app: &TestApp, dataset: Uuid) -> serde_json::Value {
    let ledger = app.admin.ledger(dataset).await.unwrap();
    serde_json::to_value(ledger.last().unwrap()).unwrap()
}

/// In memory, and with no snapshot held, where every step is a pass of
/// the engine over each participant's files.
#[rstest]
#[case::sqlite_held(Backend::Sqlite, Cache::Held)]
#[case::sqlite_streamed(Backend::Sqlite, Cache::Streamed)]
#[case::postgres_held(Backend::Postgres, Cache::Held)]
#[case::postgres_streamed(Backend::Postgres, Cache::Streamed)]
#[tokio::test]
async fn frank_wolfe_fits_over_its_sources_and_debits_every_one(
    #[case] backend: Backend,
    #[case] cache: Cache,
) {
    if unavailable(backend) {
        return;
    }
    let cache_bytes = cache.bytes();
    let app = spawn_app_caching(backend, cache_bytes).await;
    let target = regression(&app, "target", 1, 3.0).await;
    let first = regression(&app, "first", 2, 3.0).await;
    let second = regression(&app, "second", 3, 3.0).await;
    let analyst = app.analyst("ana", &[target, first, second]);
    let request = frank_wolfe(1.0, vec![first, second]);
    let release = priced_then_released(&analyst, target, &request).await;
    assert_eq!(release.kind, "model/frank-wolfe");
    assert_eq!(release.n, Some(6000));
    // Δ_s = 2r(r + 1)/N with r = 1 over the three datasets' rows.
    assert_eq!(release.sensitivity, 4.0 / 6000.0);
    assert_eq!(release.noise.mechanism, "report_noisy_min");
    let model = fitted(&release);
    assert_eq!(model.stage.n, Some(6000));
    assert_eq!(model.stage.steps, 50);
    assert!((model.stage.step_epsilon - 0.032494).abs() < 1e-6);
    assert_eq!(model.sources.len(), 2);
    assert_eq!(
        (model.sources[0].dataset, model.sources[0].n),
        (first, Some(2000))
    );
    assert_eq!((model.target_centre, model.target_scale), (50.0, 50.0));
    // In model space the truth is θ* = (0.1, 0.3, 0.4), inside the
    // ball; 50 Frank-Wolfe steps approach an interior optimum slowly
    // and the noise (b ≈ 0.04) soon outweighs the shrinking scores, so
    // the fit falls short of it (measured θ ≈ (0.05, 0.18, 0.22)). It
    // must still explain most of the signal, in raw units: weights
    // mis-mapped from model space would not.
    let (grid, truth) = test_grid();
    let predicted: Vec<f64> = grid
        .iter()
        .map(|x| model.intercept + model.weights[0] * x[0] + model.weights[1] * x[1])
        .collect();
    let mean = truth.iter().sum::<f64>() / truth.len() as f64;
    let error = |predicted: &mut dyn Iterator<Item = f64>| {
        predicted
            .zip(&truth)
            .map(|(p, t)| (p - t).powi(2))
            .sum::<f64>()
    };
    let (model_error, constant_error) = (
        error(&mut predicted.iter().copied()),
        error(&mut std::iter::repeat(mean)),
    );
    assert!(
        model_error < 0.6 * constant_error,
        "{model_error} against {constant_error}: {model:?}"
    );
    assert!(model.weights.iter().all(|w| *w > 0.0), "{model:?}");
    // One charge, on all three ledgers.
    for dataset in [target, first, second] {
        let view = app.admin.dataset(dataset).await.unwrap();
        assert_eq!(view.spent.epsilon_basic, 1.0, "{dataset}");
        let entry = last_entry(&app, dataset).await;
        assert_eq!(entry["release_id"], release.id.unwrap().to_string());
        assert_eq!(entry["loss"]["count"], 50);
        assert_eq!(entry["loss"]["each"]["mechanism"], "pure_epsilon");
    }
    assert_eq!(
        last_entry(&app, target).await["details"],
        serde_json::Value::Null
    );
    let source_entry = last_entry(&app, first).await;
    assert_eq!(source_entry["details"]["source_of"], target.to_string());

    // A retry with its key replays it and spends nothing more anywhere.
    let keyed = ReleaseOptions {
        idempotency_key: Some("fw-1".to_owned()),
        ..ReleaseOptions::default()
    };
    let made = analyst.release(target, &request, &keyed).await.unwrap();
    let replayed = analyst.release(target, &request, &keyed).await.unwrap();
    assert_eq!(made.release, replayed.release);
    for dataset in [target, first, second] {
        let view = app.admin.dataset(dataset).await.unwrap();
        assert_eq!(view.spent.epsilon_basic, 2.0, "{dataset}");
    }

    // The exponential mechanism and a debias stage: the target pays
    // both stages (0.5 + 0.5), the source only the first.
    let mut debiased = frank_wolfe(1.0, vec![first]);
    let ReleaseParams::FrankWolfe(params) = &mut debiased.params else {
        unreachable!()
    };
    params.selection = Selection::Exponential;
    params.debias = Some(DebiasParams {
        radius: 0.2,
        steps: 20,
        epsilon_share: 0.5,
    });
    let release = priced_then_released(&analyst, target, &debiased).await;
    assert_eq!(release.noise.mechanism, "exponential");
    let model = fitted(&release);
    let stage = model.debias.as_ref().unwrap();
    assert_eq!((stage.n, stage.steps, stage.epsilon), (Some(2000), 20, 0.5));
    assert_eq!(model.stage.epsilon, 0.5);
    let spent = |dataset| {
        let admin = &app.admin;
        async move { admin.dataset(dataset).await.unwrap().spent.epsilon_basic }
    };
    assert_eq!(spent(target).await, 3.0);
    assert_eq!(spent(first).await, 2.5);
    assert_eq!(spent(second).await, 2.0);
    let entry = last_entry(&app, target).await;
    assert_eq!(entry["loss"]["mechanism"], "sequence");
    assert_eq!(
        entry["loss"]["parts"][0]["each"]["mechanism"],
        "bounded_range"
    );
    if cache_bytes == 0 {
        let reads = app.snapshots.take_reads();
        assert_eq!(reads.loads, 0, "{reads:?}");
        assert!(reads.outcome_files >= 3 * 50, "{reads:?}");
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_source_that_cannot_pay_leaves_every_dataset_untouched(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let target = regression(&app, "target", 1, 3.0).await;
    let rich = regression(&app, "rich", 2, 3.0).await;
    let poor = regression(&app, "poor", 3, 0.5).await;
    let token = app.token(
        dpgate::domain::auth::Role::Analyst,
        "ana",
        &[target, rich, poor],
    );
    let path = format!("/v1/datasets/{target}/releases");
    let before = [
        snapshot(&app, target).await,
        snapshot(&app, rich).await,
        snapshot(&app, poor).await,
    ];
    let response = app
        .raw(Method::POST, &path)
        .bearer_auth(&token)
        .json(&frank_wolfe(1.0, vec![rich, poor]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let problem: serde_json::Value = response.json().await.unwrap();
    assert_eq!(problem["type"], "/problems/budget-exhausted");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"poor\"") && detail.contains("nothing was spent"),
        "{detail}"
    );
    for (dataset, before) in [target, rich, poor].into_iter().zip(&before) {
        assert_eq!(&snapshot(&app, dataset).await, before);
    }

    // Two releases racing for the last of a shared source's budget
    // (basic: 1 + 1 > 1.5): one is made, and the other spends nothing
    // on its own target.
    let other = regression(&app, "other", 4, 3.0).await;
    let shared = regression_on(&app, "shared", 5, 1.5, "basic").await;
    let analyst = app.analyst("ana", &[target, other, shared]);
    let request = frank_wolfe(1.0, vec![shared]);
    let options = ReleaseOptions::default();
    let (a, b) = tokio::join!(
        analyst.release(target, &request, &options),
        analyst.release(other, &request, &options)
    );
    assert_eq!(a.is_ok() as u8 + b.is_ok() as u8, 1, "{a:?} {b:?}");
    let loser = if a.is_ok() { other } else { target };
    assert_eq!(
        app.admin.dataset(loser).await.unwrap().spent.epsilon_basic,
        0.0
    );
    assert_eq!(
        app.admin.dataset(shared).await.unwrap().spent.epsilon_basic,
        1.0
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn frank_wolfe_refuses_bad_sources_and_settings_before_spending(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let target = regression(&app, "target", 1, 3.0).await;
    let source = regression(&app, "source", 2, 3.0).await;
    let mut request = ads_dataset("rescaled", "row", "rdp", 3.0);
    request["features"][1]["max"] = 6.into();
    let rescaled = app.dataset(request).await.id;
    app.admin
        .upload_rows(rescaled, UploadFormat::Csv, regression_rows(3, 100))
        .await
        .unwrap();
    let empty = app
        .dataset(ads_dataset("empty", "row", "rdp", 3.0))
        .await
        .id;
    let ungranted = regression(&app, "ungranted", 4, 3.0).await;
    let all = [target, source, rescaled, empty];
    // Granted, but never created.
    let missing = Uuid::new_v4();
    let token = app.token(
        dpgate::domain::auth::Role::Analyst,
        "ana",
        &[target, source, rescaled, empty, missing],
    );
    let before: Vec<_> = futures_util::future::join_all(
        all.iter().chain([&ungranted]).map(|id| snapshot(&app, *id)),
    )
    .await;
    let path = format!("/v1/datasets/{target}/releases");
    let base = r#""kind": "model/frank-wolfe", "epsilon": 1, "delta": 1e-6"#;
    let fit = |target: &str, radius: &str, extra: &str| {
        format!(r#", "target": "{target}", "radius": {radius}{extra}"#)
    };
    let value = "measure:value";
    let cases = [
        (
            "other feature bounds",
            fit(value, "1", &format!(r#", "sources": ["{rescaled}"]"#)),
        ),
        (
            "a source without rows",
            fit(value, "1", &format!(r#", "sources": ["{empty}"]"#)),
        ),
        (
            "no such source",
            fit(value, "1", &format!(r#", "sources": ["{missing}"]"#)),
        ),
        (
            "itself",
            fit(value, "1", &format!(r#", "sources": ["{target}"]"#)),
        ),
        (
            "twice",
            fit(
                value,
                "1",
                &format!(r#", "sources": ["{source}", "{source}"]"#),
            ),
        ),
        ("not a uuid", fit(value, "1", r#", "sources": ["nope"]"#)),
        ("radius 0", fit(value, "0", "")),
        ("radius 101", fit(value, "101", "")),
        ("steps 0", fit(value, "1", r#", "steps": 0"#)),
        ("steps 1001", fit(value, "1", r#", "steps": 1001"#)),
        (
            "unknown selection",
            fit(value, "1", r#", "selection": "gumbel""#),
        ),
        ("unknown target", fit("label2", "1", "")),
        ("a measure not declared", fit("measure:spend", "1", "")),
        ("no radius", r#", "target": "label""#.to_owned()),
        (
            "share 1",
            fit(
                value,
                "1",
                r#", "debias": {"radius": 0.1, "epsilon_share": 1}"#,
            ),
        ),
        (
            "a field of another kind",
            fit(value, "1", r#", "epochs": 2"#),
        ),
    ];
    each_invalid(&app, &token, &path, base, &cases).await;
    let request = app
        .raw(Method::POST, &path)
        .bearer_auth(&token)
        .json(&frank_wolfe(1.0, vec![ungranted]));
    expect(
        request,
        StatusCode::FORBIDDEN,
        "forbidden",
        "an ungranted source",
    )
    .await;
    let after: Vec<_> = futures_util::future::join_all(
        all.iter().chain([&ungranted]).map(|id| snapshot(&app, *id)),
    )
    .await;
    assert_eq!(after, before);
    app.finish().await;
}
