//! Model releases end to end: a synthetic logistic model uploaded in raw
//! units, fitted and released by both learners, priced by a dry run,
//! recorded in the ledger, and predicting in the units it was uploaded in.

use dpgate_client::types::{
    Dataset, Lambda, LedgerEvent, ModelResult, ObjectivePerturbationParams,
    OutputPerturbationParams, Release, ReleaseParams, ReleaseRequest, ReleaseResult,
};
use dpgate_client::{ReleaseOptions, UploadFormat};
use dpgate_learn::synthetic::logistic_data;

use dpgate::domain::auth::Role;
use rstest::rstest;

use crate::helpers::{Backend, spawn_app, unavailable};

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

/// A server with the dataset of [`dataset_request`] holding `csv`.
async fn with_rows(
    backend: crate::helpers::Backend,
    csv: &str,
) -> (crate::helpers::TestApp, Dataset) {
    let app = spawn_app(backend).await;
    let dataset = app.dataset(dataset_request()).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, csv.to_owned())
        .await
        .unwrap();
    (app, dataset)
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

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn both_learners_release_models_that_predict_raw_rows(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let (csv, raw, labels) = rows();
    let truth = truth();
    let (app, dataset) = with_rows(backend, &csv).await;
    let analyst = app.analyst("ana", &[dataset.id]);
    let requests = [
        ReleaseRequest {
            epsilon: Some(5.0),
            delta: None,
            params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                lambda: Lambda::Fixed(1e-3),
                fit_intercept: true,
            }),
        },
        ReleaseRequest {
            epsilon: Some(5.0),
            delta: Some(1e-7),
            params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                lambda: Lambda::Fixed(1e-3),
                fit_intercept: false,
            }),
        },
        ReleaseRequest {
            epsilon: Some(5.0),
            delta: None,
            params: ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                lambda: Lambda::Fixed(1e-3),
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
        assert_eq!(release.n, Some(N as u64));
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
                fit_intercept, ..
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

/// (a, b) of the same N and schema whose rows and labels all differ: the
/// rows of [`rows`], and those rows reversed with their labels flipped.
async fn twin_datasets(app: &crate::helpers::TestApp) -> (uuid::Uuid, uuid::Uuid) {
    let (csv, raw, labels) = rows();
    let mut flipped = String::from("row_id,y,a,b,c,d\n");
    for (i, (values, label)) in raw.iter().zip(&labels).rev().enumerate() {
        flipped.push_str(&format!(
            "s{i},{},{},{},{},{}\n",
            1 - label,
            values[0],
            values[1],
            values[2],
            values[3]
        ));
    }
    let mut ids = Vec::new();
    for (name, body) in [("one", csv), ("other", flipped)] {
        let mut request = dataset_request();
        request["name"] = name.into();
        let dataset = app.dataset(request).await;
        app.admin
            .upload_rows(dataset.id, UploadFormat::Csv, body)
            .await
            .unwrap();
        ids.push(dataset.id);
    }
    (ids[0], ids[1])
}

fn model_request(
    objective: bool,
    epsilon: f64,
    delta: Option<f64>,
    lambda: Lambda,
) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(epsilon),
        delta,
        params: if objective {
            ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                lambda,
                fit_intercept: true,
            })
        } else {
            ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                lambda,
                fit_intercept: true,
            })
        },
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn auto_lambda_comes_from_public_facts_and_the_dry_run_shows_it(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let (_, raw, labels) = rows();
    let truth = truth();
    let app = spawn_app(backend).await;
    let (one, other) = twin_datasets(&app).await;
    let analyst = app.analyst("ana", &[one, other]);
    let dry = ReleaseOptions {
        dry_run: true,
        ..ReleaseOptions::default()
    };
    for (objective, delta) in [(false, None), (false, Some(1e-7)), (true, None)] {
        let request = model_request(objective, 2.0, delta, Lambda::Auto);
        let mut chosen = Vec::new();
        for dataset in [one, other] {
            let priced = analyst.release(dataset, &request, &dry).await.unwrap();
            chosen.push(priced.release.noise.lambda.expect("λ in a dry run"));
        }
        assert_eq!(chosen[0].to_bits(), chosen[1].to_bits(), "{request:?}");
        // A request without `lambda` at all is `auto`.
        let body = serde_json::json!({
            "kind": request.kind(), "epsilon": 2.0, "delta": delta,
        });
        let bare: Release = app
            .raw(
                reqwest::Method::POST,
                &format!("/v1/datasets/{one}/releases?dry_run=true"),
            )
            .bearer_auth(app.token(Role::Analyst, "ana", &[one]))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(bare.noise.lambda, Some(chosen[0]), "{body}");
        let release = analyst
            .release(one, &request, &ReleaseOptions::default())
            .await
            .unwrap()
            .release;
        let model = model(&release);
        assert_eq!(model.lambda, chosen[0]);
        assert_eq!(release.noise.lambda, Some(chosen[0]));
        let score = auc(&model.weights, model.intercept, &raw, &labels);
        eprintln!(
            "{backend:?} {} auto λ = {}: AUC {score:.4}",
            release.kind, chosen[0]
        );
        assert!(score > truth - 0.03, "{score} vs {truth}");
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_private_selection_of_lambda_is_one_release_of_its_epsilon(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let (csv, raw, labels) = rows();
    let candidates = vec![1e1, 1e-3, 1e-5];
    let (app, dataset) = with_rows(backend, &csv).await;
    let analyst = app.analyst("ana", &[dataset.id]);
    let mut spent = 0.0;
    for (objective, delta) in [(false, None), (false, Some(1e-7)), (true, None)] {
        let request = model_request(objective, 3.0, delta, Lambda::Select(candidates.clone()));
        let dry = ReleaseOptions {
            dry_run: true,
            ..ReleaseOptions::default()
        };
        let priced = analyst
            .release(dataset.id, &request, &dry)
            .await
            .unwrap()
            .release;
        assert_eq!(priced.noise.mechanism, "report_noisy_max");
        assert_eq!(priced.noise.lambda, None);
        let release = analyst
            .release(dataset.id, &request, &ReleaseOptions::default())
            .await
            .unwrap()
            .release;
        spent += 3.0;
        assert_eq!(priced.spent, release.spent);
        assert_eq!(release.spent.epsilon_basic, spent, "{request:?}");
        let model = model(&release);
        let selection = model.selection.as_ref().expect("the selection");
        assert_eq!(selection.candidates, candidates);
        assert_eq!(model.lambda, candidates[selection.chosen]);
        assert_eq!(
            (selection.training_rows, selection.holdout_rows),
            (18_000, 2_000)
        );
        assert_eq!(selection.selection_epsilon, 3.0);
        let share = if delta.is_some() { 0.0 } else { 1.0 };
        assert_eq!(selection.candidate_epsilon, share);
        // The pick maximises held-out accuracy (to within Laplace noise of
        // scale 2/3 on counts of 2,000 rows): λ = 10 shrinks the model to
        // the majority class (80 % here), and no candidate far below it
        // is picked.
        let accuracy = raw
            .iter()
            .zip(&labels)
            .filter(|&(row, &label)| {
                let z: f64 = row.iter().zip(&model.weights).map(|(x, w)| x * w).sum();
                u8::from(z + model.intercept >= 0.0) == label
            })
            .count() as f64
            / N as f64;
        eprintln!(
            "{backend:?} {} picked λ = {}: accuracy {accuracy:.4}",
            release.kind, model.lambda
        );
        assert!(accuracy > 0.78, "{accuracy}: {selection:?}");
        let ledger = app.admin.ledger(dataset.id).await.unwrap();
        let entry = ledger.last().unwrap();
        assert_eq!(entry.release_id, release.id);
        assert_eq!(entry.epsilon, 3.0);
        let loss = entry.loss.as_ref().unwrap();
        assert_eq!(loss["mechanism"], "parallel", "{loss}");
        assert_eq!(loss["parts"][0]["parts"].as_array().unwrap().len(), 3);
        assert_eq!(loss["parts"][1]["epsilon"], 3.0);
    }
    app.finish().await;
}
