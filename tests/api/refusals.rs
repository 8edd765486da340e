//! What public facts say cannot work is refused before the debit, with
//! 422 and nothing spent: a measure range too wide for the noise lattice,
//! a fit that could not be certified (a λ below the floor, or objective
//! perturbation on many features and few rows).

use dpgate_client::types::{
    AggregateMechanism, AggregateParams, Lambda, ObjectivePerturbationParams,
    OutputPerturbationParams, ProblemType, ReleaseParams, ReleaseRequest,
};
use dpgate_client::{ClientError, ReleaseOptions, UploadFormat};
use rstest::rstest;
use uuid::Uuid;

use crate::helpers::{Backend, TestApp, spawn_app, unavailable};

async fn refused(app: &TestApp, dataset: Uuid, request: &ReleaseRequest, reason: &str) {
    let analyst = app.analyst("ana", &[dataset]);
    for dry_run in [true, false] {
        let options = ReleaseOptions {
            dry_run,
            ..ReleaseOptions::default()
        };
        let error = analyst
            .release(dataset, request, &options)
            .await
            .unwrap_err();
        let ClientError::Problem(problem) = &error else {
            panic!("{error}");
        };
        assert_eq!(
            (problem.kind(), problem.status),
            (Some(ProblemType::InvalidInput), 422)
        );
        assert!(problem.detail.contains(reason), "{}", problem.detail);
    }
    let view = app.admin.dataset(dataset).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 0.0);
    assert_eq!(app.admin.ledger(dataset).await.unwrap().len(), 1);
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_measure_range_too_wide_for_the_noise_is_refused_before_the_debit(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    // Values near 10¹² with a span of 2000: a sum over 1000 rows, divided
    // by its sensitivity, reaches 5·10¹¹ — more than 2^38 noise scales at
    // ε = 10, where no lattice holds it and still resolves the noise.
    let dataset = app
        .dataset(serde_json::json!({
            "name": "wide", "privacy_unit": "row",
            "features": [{"name": "f0", "min": 0, "max": 1}],
            "label": "y",
            "measures": [{"name": "m", "min": 1e12, "max": 1e12 + 2000.0}],
            "budget": {"epsilon": 100, "delta": 1e-6}, "accountant": "basic"
        }))
        .await;
    let mut csv = String::from("row_id,y,f0,m\n");
    for index in 0..1000 {
        csv.push_str(&format!("r{index},{},0.5,{}\n", index % 2, 1e12 + 7.0));
    }
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, csv)
        .await
        .unwrap();
    let sum = |epsilon| ReleaseRequest {
        epsilon,
        delta: Some(1e-6),
        params: ReleaseParams::Aggregate(AggregateParams {
            statistics: vec!["sum:m".to_owned()],
            group_by: vec![],
            mechanism: AggregateMechanism::Gaussian,
            target_std: None,
        }),
    };
    refused(&app, dataset.id, &sum(Some(10.0)), "too large to release").await;
    // At ε = 0.1 the noise is wide enough: the same sum is released.
    let release = app
        .analyst("ana", &[dataset.id])
        .release(dataset.id, &sum(Some(0.1)), &ReleaseOptions::default())
        .await
        .unwrap()
        .release;
    assert_eq!(release.spent.epsilon_basic, 0.1);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn fits_that_could_not_be_certified_are_refused_before_the_debit(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let wide = |name: &str, k: usize| {
        let features: Vec<_> = (0..k)
            .map(|j| serde_json::json!({"name": format!("f{j}"), "min": 0, "max": 1}))
            .collect();
        serde_json::json!({
            "name": name, "privacy_unit": "label", "features": features, "label": "y",
            "budget": {"epsilon": 100, "delta": 1e-6}, "accountant": "basic"
        })
    };
    let upload = |k: usize, n: usize| {
        let header: Vec<String> = (0..k).map(|j| format!("f{j}")).collect();
        let mut csv = format!("row_id,y,{}\n", header.join(","));
        for index in 0..n {
            let values: Vec<String> = (0..k)
                .map(|j| format!("{}", ((index * 7 + j * 3) % 10) as f64 / 10.0))
                .collect();
            csv.push_str(&format!("r{index},{},{}\n", index % 2, values.join(",")));
        }
        csv
    };
    // 512 features, 20 rows, ε = 0.1: b's norm reaches ~1.6·10³·N, too
    // large to certify the solve in double precision at the regulariser
    // objective perturbation ends up with.
    let many = app.dataset(wide("many", 512)).await;
    app.admin
        .upload_rows(many.id, UploadFormat::Csv, upload(512, 20))
        .await
        .unwrap();
    let objective = ReleaseRequest {
        epsilon: Some(0.1),
        delta: None,
        params: ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
            lambda: Lambda::Fixed(1e-4),
            fit_intercept: true,
        }),
    };
    refused(&app, many.id, &objective, "raise lambda").await;
    // With 16 features the same request is certifiable and released.
    let few = app.dataset(wide("few", 16)).await;
    app.admin
        .upload_rows(few.id, UploadFormat::Csv, upload(16, 20))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[few.id]);
    let release = analyst
        .release(few.id, &objective, &ReleaseOptions::default())
        .await
        .unwrap()
        .release;
    assert_eq!(release.spent.epsilon_basic, 0.1);
    // A λ below the output-perturbation floor for these dimensions.
    let floor = dpgate_learn::min_lambda(17, 20, 0.0, dpgate::dp::erm::SOLVE_TOLERANCE).unwrap();
    let output = |lambda| ReleaseRequest {
        epsilon: Some(1.0),
        delta: None,
        params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
            lambda: Lambda::Fixed(lambda),
            fit_intercept: true,
        }),
    };
    let error = analyst
        .release(few.id, &output(floor / 2.0), &ReleaseOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        error.problem_type(),
        Some(ProblemType::InvalidInput),
        "{error}"
    );
    analyst
        .release(few.id, &output(floor), &ReleaseOptions::default())
        .await
        .unwrap();
    app.finish().await;
}
