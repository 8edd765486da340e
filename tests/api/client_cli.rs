//! The analyst's client end to end: `dpgate-client train` against a real
//! server on synthetic data with a known logistic model, `evaluate` on a
//! hold-out, and the client's retries across a server restart.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use dpgate::app::{AppState, Limits};
use dpgate::auth::Role;
use dpgate_client::cli::{Cli, run};
use dpgate_client::model_file::ModelFile;
use dpgate_client::types::{ProblemType, ReleaseRequest};
use dpgate_client::{Client, ClientError, ReleaseOptions, UploadFormat};
use dpgate_learn::synthetic::{Synthetic, logistic_data};
use dpgate_learn::{Objective, auc};
use ndarray::{Array1, Array2, s};

use crate::helpers::{TestApp, backends, spawn_app};

const K: usize = 16;

fn dataset_request(name: &str, epsilon: f64) -> serde_json::Value {
    serde_json::json!({
        "name": name, "privacy_unit": "label",
        "features": (0..K).map(|j| serde_json::json!({"name": format!("f{j}"), "min": 0, "max": 1})).collect::<Vec<_>>(),
        "label": "y",
        "budget": {"epsilon": epsilon, "delta": 1e-5}, "accountant": "basic"
    })
}

/// `row_id,y,f0,…` (with labels) or `row_id,f0,…` (features only).
fn csv(data: &Synthetic, labels: bool) -> String {
    let mut out = String::from(if labels { "row_id,y" } else { "row_id" });
    for j in 0..K {
        out.push_str(&format!(",f{j}"));
    }
    out.push('\n');
    for (i, row) in data.x.rows().into_iter().enumerate() {
        out.push_str(&format!("r{i}"));
        if labels {
            out.push_str(&format!(",{}", data.y[i]));
        }
        for value in row {
            out.push_str(&format!(",{value}"));
        }
        out.push('\n');
    }
    out
}

/// `train` at ε = 1, δ = 1e-6 from the server's features.
fn spend_and_train<'a>(id: &'a str, out: &'a str) -> [&'a str; 9] {
    [
        "train",
        "--dataset",
        id,
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--out",
        out,
    ]
}

/// Runs the CLI in process; its stdout, or its error.
async fn client(app: &TestApp, token: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut argv = vec![
        "dpgate-client",
        "--url",
        &app.address,
        "--token",
        token,
        "--json",
    ];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(argv)?;
    let mut out = Vec::new();
    run(cli, &mut out).await?;
    Ok(String::from_utf8(out)?)
}

async fn evaluate_auc(app: &TestApp, token: &str, model: &Path, data: &Path) -> f64 {
    let model = model.to_str().unwrap();
    let data = data.to_str().unwrap();
    let report = client(app, token, &["evaluate", "--model", model, "--data", data])
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["rows"], 100_000);
    report["auc"].as_f64().unwrap()
}

/// The non-private model's test AUC (Newton, λ = 1e-6, with an intercept).
fn non_private_auc(train: &Synthetic, test: &Synthetic) -> f64 {
    let (n, k) = train.x.dim();
    let mut x = Array2::<f64>::ones((n, k + 1));
    x.slice_mut(s![.., ..k]).assign(&train.x);
    let y: Array1<f64> = train
        .y
        .iter()
        .map(|&l| if l == 1 { 1.0 } else { -1.0 })
        .collect();
    let fit = Objective {
        x: x.view(),
        y: y.view(),
        lambda: 1e-6,
        linear: None,
    }
    .minimise(1e-9)
    .unwrap();
    let w = fit.weights;
    let scores = test.x.dot(&w.slice(s![..k])) + w[k];
    auc(&scores.to_vec(), &test.y).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_trains_label_blind_within_0_02_auc_of_the_non_private_model() {
    let train = logistic_data(100_000, K, 21);
    let test = logistic_data(100_000, K, 22);
    let truth = non_private_auc(&train, &test);
    let dir = tempfile::tempdir().unwrap();
    let test_csv = dir.path().join("test.csv");
    std::fs::write(&test_csv, csv(&test, true)).unwrap();
    let own_features = dir.path().join("own.csv");
    std::fs::write(&own_features, csv(&train, false)).unwrap();
    for backend in backends() {
        let app = spawn_app(backend).await;
        let dataset = app.dataset(dataset_request("synthetic", 2.5)).await;
        let id = dataset.id.to_string();
        app.admin
            .upload_rows(dataset.id, UploadFormat::Csv, csv(&train, true))
            .await
            .unwrap();
        let token = app.token(Role::Analyst, "ana", &[dataset.id]);
        let model = dir.path().join(format!("{backend:?}.json"));
        let out = model.to_str().unwrap();
        // The server's features come as an Arrow stream by default.
        let trained = client(&app, &token, &spend_and_train(&id, out))
            .await
            .unwrap();
        let trained: serde_json::Value = serde_json::from_str(&trained).unwrap();
        assert_eq!(trained["model"]["epsilon"], 1.0);
        assert_eq!(trained["model"]["feature_names"][15], "f15");
        assert_eq!(trained["model"]["training"]["rows"], 100_000);
        let private = evaluate_auc(&app, &token, &model, &test_csv).await;
        assert!(
            (truth - private).abs() <= 0.02,
            "{backend:?}: AUC {private} vs non-private {truth}"
        );
        // The analyst's own copy of the features, supplied to the release.
        let own_model = dir.path().join(format!("{backend:?}-own.json"));
        let own_out = own_model.to_str().unwrap();
        let features = own_features.to_str().unwrap();
        let args = [
            "train",
            "--dataset",
            &id,
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--features",
            features,
            "--out",
            own_out,
        ];
        client(&app, &token, &args).await.unwrap();
        let own = evaluate_auc(&app, &token, &own_model, &test_csv).await;
        assert!(
            (truth - own).abs() <= 0.02,
            "{backend:?}: AUC {own} vs {truth}"
        );
        // Training again from the first release spends nothing more; from
        // the features as CSV it makes the same model, but for the
        // features' last digits (CSV rounds them to decimals, Arrow to f32).
        let release = trained["model"]["release_id"].as_str().unwrap();
        let again = dir.path().join("again.json");
        let args = [
            "train",
            "--dataset",
            &id,
            "--release",
            release,
            "--features-format",
            "csv",
            "--out",
            again.to_str().unwrap(),
        ];
        client(&app, &token, &args).await.unwrap();
        let (arrow, csv) = (
            ModelFile::load(&model).unwrap(),
            ModelFile::load(&again).unwrap(),
        );
        assert_eq!(csv.release_id, arrow.release_id);
        for (a, c) in arrow.weights.iter().zip(&csv.weights) {
            assert!((a - c).abs() < 1e-4, "{backend:?}: {a} vs {c}");
        }
        let spent = app.admin.dataset(dataset.id).await.unwrap().spent;
        assert_eq!(spent.epsilon_basic, 2.0, "{backend:?}");
        // Beyond the budget: the problem comes back typed, no model is written.
        let refused = dir.path().join("refused.json");
        let args = spend_and_train(&id, refused.to_str().unwrap());
        let error = client(&app, &token, &args).await.unwrap_err();
        let problem = error
            .downcast_ref::<ClientError>()
            .and_then(ClientError::problem_type);
        assert_eq!(problem, Some(ProblemType::BudgetExhausted), "{error:#}");
        assert!(!refused.exists());
        app.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_releases_and_reports_bad_arguments() {
    let app = spawn_app(backends()[0]).await;
    let dataset = app.dataset(dataset_request("small", 5.0)).await;
    let id = dataset.id.to_string();
    app.admin
        .upload_rows(
            dataset.id,
            UploadFormat::Csv,
            csv(&logistic_data(500, K, 23), true),
        )
        .await
        .unwrap();
    let analyst = app.token(Role::Analyst, "ana", &[dataset.id]);
    let admin = app.token(Role::Admin, "root", &[]);
    let listed = client(&app, &analyst, &["datasets"]).await.unwrap();
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["n_rows"], 500);
    let priced = client(
        &app,
        &analyst,
        &[
            "release",
            "aggregate",
            "--dataset",
            &id,
            "--epsilon",
            "0.5",
            "--delta",
            "1e-7",
            "--statistics",
            "count,mean:y",
            "--dry-run",
        ],
    )
    .await
    .unwrap();
    let priced: serde_json::Value = serde_json::from_str(&priced).unwrap();
    assert_eq!(
        (priced["dry_run"].as_bool(), priced["epsilon"].as_f64()),
        (Some(true), Some(0.5))
    );
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("server.json");
    client(
        &app,
        &analyst,
        &[
            "release",
            "model",
            "--dataset",
            &id,
            "--epsilon",
            "1",
            "--lambda",
            "0.01",
            "--learner",
            "objective",
            "--out",
            model.to_str().unwrap(),
        ],
    )
    .await
    .unwrap();
    let saved = ModelFile::load(&model).unwrap();
    assert_eq!(
        (saved.weights.len(), saved.kind.as_str()),
        (K, "model/objective-perturbation")
    );
    let ledger = client(&app, &admin, &["ledger", "--dataset", &id])
        .await
        .unwrap();
    let ledger: serde_json::Value = serde_json::from_str(&ledger).unwrap();
    assert_eq!(ledger.as_array().unwrap().len(), 2);
    // The ledger is for admins; a missing --delta is refused before any call.
    let error = client(&app, &analyst, &["ledger", "--dataset", &id])
        .await
        .unwrap_err();
    let problem = error
        .downcast_ref::<ClientError>()
        .and_then(ClientError::problem_type);
    assert_eq!(problem, Some(ProblemType::Forbidden));
    let args = ["train", "--dataset", &id, "--epsilon", "1", "--out", "x"];
    let missing = client(&app, &analyst, &args).await.unwrap_err();
    assert!(missing.to_string().contains("--delta"), "{missing}");
    // A format for the server's features makes no sense with one's own.
    let args = [
        "train",
        "--dataset",
        &id,
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--features",
        "own.csv",
        "--features-format",
        "csv",
        "--out",
        "x",
    ];
    let both = client(&app, &analyst, &args).await.unwrap_err();
    assert!(both.to_string().contains("cannot be used with"), "{both}");
    // DP-GD warm-started from the model file just saved, saved in turn.
    let descended = dir.path().join("gd.json");
    let dp_gd = |theta0: &Path| {
        [
            "release",
            "dp-gd",
            "--dataset",
            &id,
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--steps",
            "20",
            "--output",
            "average",
            "--theta0",
            theta0.to_str().unwrap(),
            "--out",
            descended.to_str().unwrap(),
        ]
        .map(str::to_owned)
    };
    let released = client(
        &app,
        &analyst,
        &dp_gd(&model).each_ref().map(String::as_str),
    )
    .await
    .unwrap();
    let released: serde_json::Value = serde_json::from_str(&released).unwrap();
    assert_eq!(released["result"]["warm_start"], true);
    assert_eq!(released["result"]["steps"], 20);
    let saved = ModelFile::load(&descended).unwrap();
    assert_eq!(
        (saved.weights.len(), saved.kind.as_str()),
        (K, "model/dp-gd")
    );
    // A model of other features is refused before anything is sent.
    let mut other = saved.clone();
    other.feature_names[0] = "elsewhere".to_owned();
    let other_path = dir.path().join("other.json");
    other.save(&other_path).unwrap();
    let refused = client(
        &app,
        &analyst,
        &dp_gd(&other_path).each_ref().map(String::as_str),
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("elsewhere"), "{refused}");
    // DP-SGD on a seeded projection, saved as a model file.
    let sgd_path = dir.path().join("sgd.json");
    let args = [
        "release",
        "dp-sgd",
        "--dataset",
        &id,
        "--epsilon",
        "1",
        "--batch-size",
        "50",
        "--epochs",
        "2",
        "--projection-dims",
        "4",
        "--projection-seed",
        "18446744073709551615",
        "--out",
        sgd_path.to_str().unwrap(),
    ];
    let released = client(&app, &analyst, &args).await.unwrap();
    let released: serde_json::Value = serde_json::from_str(&released).unwrap();
    assert_eq!(released["result"]["steps"], 20);
    assert_eq!(released["result"]["epoch_epsilon"], 0.5);
    assert_eq!(
        released["result"]["projection"],
        serde_json::json!({"dims": 4, "seed": "18446744073709551615"})
    );
    let saved = ModelFile::load(&sgd_path).unwrap();
    assert_eq!(
        (saved.weights.len(), saved.kind.as_str(), saved.delta),
        (K, "model/dp-sgd", 0.0)
    );
    // A seed without a projection is refused by the CLI itself.
    let seedless = client(
        &app,
        &analyst,
        &[
            "release",
            "dp-sgd",
            "--dataset",
            &id,
            "--epsilon",
            "1",
            "--projection-seed",
            "3",
        ],
    )
    .await
    .unwrap_err();
    assert!(
        seedless.to_string().contains("--projection-dims"),
        "{seedless}"
    );
    // Frank-Wolfe on the label with the exponential mechanism and a debias
    // stage; no model file (it is a linear model, not a classifier).
    let args = [
        "release",
        "frank-wolfe",
        "--dataset",
        &id,
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--target",
        "label",
        "--radius",
        "2",
        "--steps",
        "30",
        "--selection",
        "exponential",
        "--debias-radius",
        "0.5",
        "--debias-share",
        "0.25",
    ];
    let released = client(&app, &analyst, &args).await.unwrap();
    let released: serde_json::Value = serde_json::from_str(&released).unwrap();
    assert_eq!(released["noise"]["mechanism"], "exponential");
    assert_eq!(released["result"]["stage"]["steps"], 30);
    assert_eq!(released["result"]["stage"]["epsilon"], 0.75);
    assert_eq!(released["result"]["debias"]["epsilon"], 0.25);
    assert_eq!(released["result"]["weights"].as_array().unwrap().len(), K);
    let unknown = client(
        &app,
        &analyst,
        &[&args[..14], &["--source", "nope"]].concat(),
    )
    .await
    .unwrap_err();
    assert!(unknown.to_string().contains("--source"), "{unknown}");
    assert_eq!(
        app.admin
            .dataset(dataset.id)
            .await
            .unwrap()
            .spent
            .epsilon_basic,
        4.0
    );
    app.finish().await;
}

/// A release sent while the server is down is retried until it is back,
/// and is made (and paid for) once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_retried_across_a_restart_and_spent_once() {
    let app = spawn_app(backends()[0]).await;
    let dataset = app.dataset(dataset_request("restart", 5.0)).await;
    app.admin
        .upload_rows(
            dataset.id,
            UploadFormat::Csv,
            csv(&logistic_data(100, K, 24), true),
        )
        .await
        .unwrap();
    // A port with nothing listening yet; the server comes up on it later.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = probe.local_addr().unwrap();
    drop(probe);
    let state = AppState::new(app.store.clone(), app.keys.clone(), Limits::default());
    let server = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let listener = tokio::net::TcpListener::bind(address).await.unwrap();
        axum::serve(listener, dpgate::api::router(state))
            .await
            .unwrap();
    });
    let token = app.token(Role::Analyst, "ana", &[dataset.id]);
    let late = Client::new(&format!("http://{address}"), Some(token));
    let request = ReleaseRequest::walr(1.0, 1e-7);
    let released = late
        .release(dataset.id, &request, &ReleaseOptions::default())
        .await
        .unwrap();
    assert!(!released.replayed);
    let view = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 1.0);
    assert_eq!(app.admin.ledger(dataset.id).await.unwrap().len(), 2);
    server.abort();
    app.finish().await;
}
