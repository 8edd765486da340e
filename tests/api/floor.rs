//! At the smallest λ the service accepts, a model release succeeds for any
//! dataset in the declared domain: no release fails after its debit. A
//! seeded property test over random datasets, degenerate ones included
//! (constant columns at either bound, one row, one label only, separable
//! labels).

use dpgate_client::types::{
    Lambda, ObjectivePerturbationParams, OutputPerturbationParams, ReleaseParams, ReleaseRequest,
    ReleaseResult,
};
use dpgate_client::{Client, ReleaseOptions, UploadFormat};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use rstest::rstest;
use uuid::Uuid;

use crate::helpers::{Backend, TestApp, spawn_app, unavailable};

/// How one column of a random dataset is filled.
#[derive(Debug, Clone, Copy)]
enum Column {
    Uniform,
    AtMin,
    AtMax,
    Binary,
}

/// How the labels are drawn.
#[derive(Debug, Clone, Copy)]
enum Labels {
    AllZero,
    AllOne,
    SeparableByFirst,
    Random,
}

/// A random dataset in the declared domain: (name, rows, CSV).
fn random_dataset(rng: &mut ChaCha8Rng, case: usize) -> (serde_json::Value, String) {
    let k = [1, 3, 8][rng.random_range(0..3)];
    let n = [1, 2, 17, 200][rng.random_range(0..4)];
    let bounds: Vec<(f64, f64)> = (0..k)
        .map(|_| match rng.random_range(0..3) {
            0 => (0.0, 1.0),
            1 => (-5.0, 5.0),
            _ => (1000.0, 1e6),
        })
        .collect();
    let columns: Vec<Column> = (0..k)
        .map(|_| match rng.random_range(0..4) {
            0 => Column::Uniform,
            1 => Column::AtMin,
            2 => Column::AtMax,
            _ => Column::Binary,
        })
        .collect();
    let labels = match rng.random_range(0..4) {
        0 => Labels::AllZero,
        1 => Labels::AllOne,
        2 => Labels::SeparableByFirst,
        _ => Labels::Random,
    };
    let features: Vec<_> = bounds
        .iter()
        .enumerate()
        .map(|(j, (min, max))| serde_json::json!({"name": format!("f{j}"), "min": min, "max": max}))
        .collect();
    let schema = serde_json::json!({
        "name": format!("d{case}"), "privacy_unit": "row", "features": features, "label": "y",
        "budget": {"epsilon": 1000, "delta": 1e-6}, "accountant": "basic"
    });
    let names: Vec<String> = (0..k).map(|j| format!("f{j}")).collect();
    let mut csv = format!("row_id,y,{}\n", names.join(","));
    for row in 0..n {
        let shares: Vec<f64> = columns
            .iter()
            .map(|column| match column {
                Column::Uniform => rng.random::<f64>(),
                Column::AtMin => 0.0,
                Column::AtMax => 1.0,
                Column::Binary => f64::from(u8::from(rng.random_bool(0.5))),
            })
            .collect();
        let label = match labels {
            Labels::AllZero => 0,
            Labels::AllOne => 1,
            Labels::SeparableByFirst => u8::from(shares[0] > 0.5),
            Labels::Random => u8::from(rng.random_bool(0.3)),
        };
        let values: Vec<String> = shares
            .iter()
            .zip(&bounds)
            .map(|(share, (min, max))| (min + share * (max - min)).clamp(*min, *max).to_string())
            .collect();
        csv.push_str(&format!("r{row},{label},{}\n", values.join(",")));
    }
    (schema, csv)
}

fn model(kind: &str, lambda: f64) -> ReleaseRequest {
    match kind {
        "output" => ReleaseRequest {
            epsilon: Some(1.0),
            delta: None,
            params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                lambda: Lambda::Fixed(lambda),
                fit_intercept: true,
            }),
        },
        _ => ReleaseRequest {
            epsilon: Some(1.0),
            delta: None,
            params: ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                lambda: Lambda::Fixed(lambda),
                fit_intercept: true,
            }),
        },
    }
}

/// The smallest λ a dry run accepts, to 10⁻⁶ relative, by bisection.
async fn smallest_lambda(analyst: &Client, dataset: Uuid, kind: &str) -> f64 {
    let dry_run = ReleaseOptions {
        dry_run: true,
        ..ReleaseOptions::default()
    };
    let accepts = |lambda: f64| {
        let (request, options) = (model(kind, lambda), dry_run.clone());
        async move { analyst.release(dataset, &request, &options).await.is_ok() }
    };
    let (mut low, mut high) = (1e-30f64, 1e3f64);
    assert!(accepts(high).await);
    // Objective perturbation regularises small λ up itself: it may have
    // no floor at all.
    if accepts(low).await {
        return low;
    }
    while high / low > 1.0 + 1e-6 {
        let middle = (low * high).sqrt();
        if accepts(middle).await {
            high = middle;
        } else {
            low = middle;
        }
    }
    high
}

async fn released_at_the_floor(app: &TestApp, rng: &mut ChaCha8Rng, case: usize) {
    let (schema, csv) = random_dataset(rng, case);
    let dataset = app.dataset(schema.clone()).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, csv)
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[dataset.id]);
    for kind in ["output", "objective"] {
        let lambda = smallest_lambda(&analyst, dataset.id, kind).await;
        let release = analyst
            .release(dataset.id, &model(kind, lambda), &ReleaseOptions::default())
            .await
            .unwrap_or_else(|error| panic!("case {case} {kind} at λ = {lambda}: {error}\n{schema}"))
            .release;
        let Some(ReleaseResult::Model(result)) = &release.result else {
            panic!("{release:?}");
        };
        assert!(
            result.weights.iter().all(|w| w.is_finite()) && result.intercept.is_finite(),
            "case {case} {kind}: {result:?}"
        );
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn models_at_the_smallest_accepted_lambda_never_fail_after_the_debit(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for case in 0..16 {
        released_at_the_floor(&app, &mut rng, case).await;
    }
    app.finish().await;
}
