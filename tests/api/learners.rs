//! The iterative learners end to end: priced by a dry run, debited as T
//! composed steps, trained on the snapshot, released in raw units; and
//! every bad setting refused before anything is spent.

use dpgate::app::Limits;
use dpgate_client::types::{
    DpGdParams, DpGdResult, Iterate, Release, ReleaseParams, ReleaseRequest, ReleaseResult,
    WarmStart,
};
use dpgate_client::{ReleaseOptions, UploadFormat};
use reqwest::{Method, StatusCode};

use crate::bad_input::{expect, snapshot};
use crate::helpers::{TestApp, backends, spawn_app, spawn_app_with};
use crate::models::{N, auc, dataset_request, rows, truth};

fn dp_gd(epsilon: f64, params: DpGdParams) -> ReleaseRequest {
    ReleaseRequest {
        epsilon,
        delta: Some(1e-6),
        params: ReleaseParams::DpGd(params),
    }
}

fn defaults() -> DpGdParams {
    DpGdParams {
        steps: 100,
        learning_rate: 1.0,
        clip: 1.0,
        lambda: 0.0,
        fit_intercept: true,
        theta0: None,
        radius: None,
        output: Iterate::Last,
    }
}

fn trained(release: &Release) -> &DpGdResult {
    let Some(ReleaseResult::DpGd(model)) = &release.result else {
        panic!("a DP-GD result: {release:?}");
    };
    model
}

fn model_auc(model: &DpGdResult, raw: &[Vec<f64>], labels: &[u8]) -> f64 {
    auc(&model.weights, model.intercept, raw, labels)
}

/// The synthetic model's dataset on an `rdp` ledger of ε = 3, δ = 10⁻⁶,
/// with its rows.
async fn synthetic(app: &TestApp, csv: &str) -> uuid::Uuid {
    let mut request = dataset_request();
    request["accountant"] = "rdp".into();
    request["budget"] = serde_json::json!({"epsilon": 3, "delta": 1e-6});
    let dataset = app.dataset(request).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, csv.to_owned())
        .await
        .unwrap();
    dataset.id
}

#[tokio::test]
async fn dp_gd_trains_a_model_priced_exactly_and_warm_starts_from_it() {
    let (csv, raw, labels) = rows();
    for backend in backends() {
        let app = spawn_app(backend).await;
        let dataset = synthetic(&app, &csv).await;
        let analyst = app.analyst("ana", &[dataset]);
        let request = dp_gd(
            1.0,
            DpGdParams {
                steps: 300,
                learning_rate: 3.0,
                ..defaults()
            },
        );
        let dry = ReleaseOptions {
            dry_run: true,
            ..ReleaseOptions::default()
        };
        let priced = analyst.release(dataset, &request, &dry).await.unwrap();
        let release = analyst
            .release(dataset, &request, &ReleaseOptions::default())
            .await
            .unwrap()
            .release;
        assert_eq!(priced.release.spent, release.spent);
        assert_eq!(priced.release.noise, release.noise);
        assert_eq!(priced.release.sigma, release.sigma);
        assert_eq!(release.kind, "model/dp-gd");
        // C = 1 < √5: Δ = 2C/N.
        assert_eq!(release.sensitivity, 2.0 / N as f64);
        let model = trained(&release);
        assert_eq!((model.steps, model.warm_start), (300, false));
        assert_eq!(model.weights.len(), 4);
        assert_eq!(model.sigma, release.sigma);
        assert_eq!(
            model.noise_multiplier,
            model.sigma / release.noise.accounted_sensitivity
        );
        // The slides' σ for comparison: √T times the textbook σ.
        let classic = release.noise.sigma_classic.unwrap();
        let textbook = 2.0 / N as f64 * (2.0 * (1.25f64 / 1e-6).ln()).sqrt();
        assert!((classic / (300f64.sqrt() * textbook) - 1.0).abs() < 1e-12);
        // One Gaussian of μ = √T·Δ′/σ: on a fresh ledger whose δ is the
        // release's, the tight accountant reports the release's ε.
        assert_eq!(release.spent.epsilon_basic, 1.0);
        assert!(
            (0.999..=1.0).contains(&release.spent.epsilon),
            "{:?}",
            release.spent
        );
        // σ ≈ 0.007 per step against gradients of 0.1 at the start: the
        // model is as good as the one that generated the rows.
        let (score, truth) = (model_auc(model, &raw, &labels), truth());
        assert!(score > truth - 0.01, "AUC {score}, truth {truth}");
        let ledger = app.admin.ledger(dataset).await.unwrap();
        let loss = ledger.last().unwrap().loss.clone().unwrap();
        assert_eq!(loss["mechanism"], "composition");
        assert_eq!(loss["count"], 300);
        assert_eq!(loss["each"]["mechanism"], "gaussian");
        assert_eq!(loss["each"]["sigma"], release.sigma);

        // Warm-started from the released model, in raw units.
        let warm = dp_gd(
            0.5,
            DpGdParams {
                steps: 10,
                theta0: Some(WarmStart {
                    weights: model.weights.clone(),
                    intercept: model.intercept,
                }),
                radius: Some(50.0),
                output: Iterate::Average,
                ..defaults()
            },
        );
        let again = analyst
            .release(dataset, &warm, &ReleaseOptions::default())
            .await
            .unwrap()
            .release;
        let continued = trained(&again);
        assert!(continued.warm_start);
        assert_eq!(continued.radius, Some(50.0));
        assert_eq!(continued.output, Iterate::Average);
        // Ten more steps from a good model stay good.
        assert!(model_auc(continued, &raw, &labels) > score - 0.01);
        assert_eq!(again.spent.epsilon_basic, 1.5);
        app.finish().await;
    }
}

#[tokio::test]
async fn dp_gd_refuses_bad_settings_before_spending_anything() {
    let (csv, _, _) = rows();
    for backend in backends() {
        let app = spawn_app(backend).await;
        let dataset = synthetic(&app, &csv).await;
        let before = snapshot(&app, dataset).await;
        let token = app.token(dpgate::auth::Role::Analyst, "ana", &[dataset]);
        let path = format!("/v1/datasets/{dataset}/releases");
        let post = |body: String| {
            app.raw(Method::POST, &path)
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body)
        };
        let base = r#""kind": "model/dp-gd", "epsilon": 1"#;
        let cases = [
            ("no delta", String::new(), false),
            ("delta 0", r#", "delta": 0"#.to_owned(), false),
            ("steps 0", r#", "steps": 0"#.to_owned(), true),
            ("steps 10001", r#", "steps": 10001"#.to_owned(), true),
            (
                "learning rate 0",
                r#", "learning_rate": 0"#.to_owned(),
                true,
            ),
            (
                "learning rate 101",
                r#", "learning_rate": 101"#.to_owned(),
                true,
            ),
            ("clip 0", r#", "clip": 0"#.to_owned(), true),
            ("clip 1001", r#", "clip": 1001"#.to_owned(), true),
            ("lambda negative", r#", "lambda": -1"#.to_owned(), true),
            (
                "learning rate × lambda = 2",
                r#", "learning_rate": 2, "lambda": 1"#.to_owned(),
                true,
            ),
            ("radius 0", r#", "radius": 0"#.to_owned(), true),
            (
                "theta0 of 3 weights for 4 features",
                r#", "theta0": {"weights": [1, 2, 3]}"#.to_owned(),
                true,
            ),
            (
                "theta0 beyond 1e6",
                r#", "theta0": {"weights": [1, 2, 3, 1e7]}"#.to_owned(),
                true,
            ),
            (
                "theta0 with an unknown field",
                r#", "theta0": {"weights": [1, 2, 3, 4], "bias": 1}"#.to_owned(),
                true,
            ),
            (
                "an unknown output",
                r#", "output": "first""#.to_owned(),
                true,
            ),
            (
                "a field of another kind",
                r#", "epochs": 2"#.to_owned(),
                true,
            ),
        ];
        for (case, fields, with_delta) in cases {
            let delta = if with_delta { r#", "delta": 1e-6"# } else { "" };
            let body = format!("{{{base}{delta}{fields}}}");
            expect(
                post(body),
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-input",
                case,
            )
            .await;
        }
        assert_eq!(snapshot(&app, dataset).await, before);
        app.finish().await;
    }
}

#[tokio::test]
async fn dp_gd_needs_the_snapshot_in_memory() {
    let (csv, _, _) = rows();
    for backend in backends() {
        let limits = Limits {
            cache_bytes: 0,
            ..Limits::default()
        };
        let app = spawn_app_with(backend, limits).await;
        let dataset = synthetic(&app, &csv).await;
        let before = snapshot(&app, dataset).await;
        let token = app.token(dpgate::auth::Role::Analyst, "ana", &[dataset]);
        let request = app
            .raw(Method::POST, &format!("/v1/datasets/{dataset}/releases"))
            .bearer_auth(&token)
            .json(&dp_gd(1.0, defaults()));
        expect(
            request,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "no snapshot cache",
        )
        .await;
        assert_eq!(snapshot(&app, dataset).await, before);
        app.finish().await;
    }
}
