//! Model releases end to end: a synthetic logistic model uploaded in raw
//! units, fitted and released by both learners, priced by a dry run,
//! recorded in the ledger, and predicting in the units it was uploaded in.

use dpgate_client::types::{
    LedgerEvent, ModelResult, ObjectivePerturbationParams, OutputPerturbationParams, Release,
    ReleaseParams, ReleaseRequest, ReleaseResult,
};
use dpgate_client::{ReleaseOptions, UploadFormat};
use dpgate_learn::synthetic::logistic_data;

use crate::helpers::{backends, spawn_app};

pub const N: usize = 20_000;

/// Four features declared on ranges other than [0, 1], so that the
/// unfolding into raw units is exercised.
pub fn dataset_request() -> serde_json::Value {
    serde_json::json!({
        "name": "synthetic", "privacy_unit": "row",
        "features": [
            {"name": "a", "min": 0, "max": 1}, {"name": "b", "min": -10, "max": 10},
            {"name": "c", "min": 100, "max": 300}, {"name": "d", "min": 0, "max": 0.5}
        ],
        "label": "y",
        "budget": {"epsilon": 100, "delta": 1e-6}, "accountant": "basic"
    })
}

pub const RANGES: [(f64, f64); 4] = [(0.0, 1.0), (-10.0, 10.0), (100.0, 300.0), (0.0, 0.5)];

/// The synthetic rows in raw units, as CSV, and (raw rows, labels).
pub fn rows() -> (String, Vec<Vec<f64>>, Vec<u8>) {
    let data = logistic_data(N, 4, 41);
    let mut csv = String::from("row_id,y,a,b,c,d\n");
    let mut raw = Vec::with_capacity(N);
    for (i, (x, y)) in data.x.outer_iter().zip(&data.y).enumerate() {
        let values: Vec<f64> = x
            .iter()
            .zip(RANGES)
            .map(|(v, (lo, hi))| lo + v * (hi - lo))
            .collect();
        csv.push_str(&format!(
            "r{i},{y},{},{},{},{}\n",
            values[0], values[1], values[2], values[3]
        ));
        raw.push(values);
    }
    (csv, raw, data.y)
}

fn model(release: &Release) -> &ModelResult {
    let Some(ReleaseResult::Model(model)) = &release.result else {
        panic!("a model result: {release:?}");
    };
    model
}

/// The AUC on raw rows of the model σ(weightsᵀx + intercept).
pub fn auc(weights: &[f64], intercept: f64, raw: &[Vec<f64>], labels: &[u8]) -> f64 {
    let scores: Vec<f64> = raw
        .iter()
        .map(|row| row.iter().zip(weights).map(|(x, w)| x * w).sum::<f64>() + intercept)
        .collect();
    dpgate_learn::auc(&scores, labels).unwrap()
}

/// The generating model's own AUC on the rows of [`rows`].
pub fn truth() -> f64 {
    let data = logistic_data(N, 4, 41);
    let scores: Vec<f64> = data
        .x
        .outer_iter()
        .map(|x| x.iter().zip(&data.weights).map(|(x, w)| x * w).sum::<f64>())
        .collect();
    dpgate_learn::auc(&scores, &data.y).unwrap()
}

#[tokio::test]
async fn both_learners_release_models_that_predict_raw_rows() {
    let (csv, raw, labels) = rows();
    let truth = truth();
    for backend in backends() {
        let app = spawn_app(backend).await;
        let dataset = app.dataset(dataset_request()).await;
        app.admin
            .upload_rows(dataset.id, UploadFormat::Csv, csv.clone())
            .await
            .unwrap();
        let analyst = app.analyst("ana", &[dataset.id]);
        let requests = [
            ReleaseRequest {
                epsilon: Some(5.0),
                delta: None,
                params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    lambda: 1e-3,
                    fit_intercept: true,
                }),
            },
            ReleaseRequest {
                epsilon: Some(5.0),
                delta: Some(1e-7),
                params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    lambda: 1e-3,
                    fit_intercept: false,
                }),
            },
            ReleaseRequest {
                epsilon: Some(5.0),
                delta: None,
                params: ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                    lambda: 1e-3,
                    fit_intercept: true,
                }),
            },
        ];
        let mut spent_basic = 0.0;
        for request in &requests {
            let dry = ReleaseOptions {
                dry_run: true,
                ..ReleaseOptions::default()
            };
            let priced = analyst
                .release(dataset.id, request, &dry)
                .await
                .unwrap()
                .release;
            let release = analyst
                .release(dataset.id, request, &ReleaseOptions::default())
                .await
                .unwrap()
                .release;
            assert_eq!(priced.spent, release.spent, "{request:?}");
            assert_eq!(priced.noise, release.noise, "{request:?}");
            spent_basic += 5.0;
            assert_eq!(release.spent.epsilon_basic, spent_basic);
            assert_eq!(release.n, N as u64);
            let model = model(&release);
            assert_eq!(model.weights.len(), 4);
            assert_eq!(model.lambda, 1e-3);
            let score = auc(&model.weights, model.intercept, &raw, &labels);
            eprintln!(
                "{backend:?} {}: AUC {score:.4} (truth {truth:.4})",
                release.kind
            );
            match &request.params {
                ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    fit_intercept,
                    ..
                }) => {
                    let delta = request.delta;
                    // 2/(Nλ) + 2γ/λ.
                    let declared = 2.0 / (N as f64 * 1e-3) + 2.0 * 1e-10 / 1e-3;
                    assert!((release.sensitivity - declared).abs() < 1e-15);
                    let mechanism = if delta.is_some() {
                        "gaussian"
                    } else {
                        "norm_gamma"
                    };
                    assert_eq!(model.noise_mechanism, mechanism);
                    assert_eq!(release.noise.mechanism, mechanism);
                    assert_eq!(model.fit_intercept, *fit_intercept);
                    if !fit_intercept {
                        // Without an intercept column the only shift is the
                        // unfolding of the feature ranges.
                        assert!(model.intercept.is_finite());
                    }
                    assert!(model.objective.is_none());
                }
                ReleaseParams::ObjectivePerturbation(_) => {
                    let details = model.objective.as_ref().expect("objective details");
                    // ε′ = 0.99·ε − 2·ln(1 + 1/(4Nλ)).
                    let prime = 0.99 * 5.0 - 2.0 * (0.25 / (N as f64 * 1e-3)).ln_1p();
                    assert!((details.epsilon_prime - prime).abs() < 1e-12);
                    assert_eq!(details.extra_regulariser, 0.0);
                    assert!((release.noise.scale - 2.0 / prime).abs() < 1e-12);
                    assert_eq!(release.sensitivity, 2.0);
                    assert_eq!(release.delta, 0.0);
                }
                _ => unreachable!(),
            }
            if model.fit_intercept {
                assert!(score > truth - 0.03, "{score} vs {truth}");
            }
        }
        let ledger = app.admin.ledger(dataset.id).await.unwrap();
        let kinds: Vec<&LedgerEvent> = ledger.iter().map(|entry| &entry.event).collect();
        assert_eq!(kinds.len(), 4, "{kinds:?}");
        assert!(
            kinds[1..]
                .iter()
                .all(|event| **event == LedgerEvent::Release)
        );
        app.finish().await;
    }
}
