//! A release is priced from public facts and admitted against the budget
//! and the analyst's cap before a single label, measure or private row is
//! read; dry runs read no label or measure.

use std::sync::Arc;

use dpgate::app::Limits;
use dpgate_client::types::{
    AggregateMechanism, AggregateParams, BudgetChange, OutputPerturbationParams, ProblemType,
    ReleaseParams, ReleaseRequest, SuppliedRow, WalrParams,
};
use dpgate_client::{ClientError, ReleaseOptions, UploadFormat};
use rstest::rstest;
use uuid::Uuid;

use crate::counting::Counting;
use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app_over, unavailable};

/// A server whose store counts its row reads. It holds no snapshot in
/// memory, so every read reaches the store and is counted.
async fn counted(backend: Backend) -> (TestApp, Arc<Counting>) {
    let mut counting = None;
    let limits = Limits {
        cache_bytes: 0,
        ..Limits::default()
    };
    let app = spawn_app_over(backend, limits, |store| {
        let counter = Counting::new(store);
        counting = Some(counter.clone());
        counter
    })
    .await;
    (app, counting.expect("the store was wrapped"))
}

/// A dataset with 300 rows of the ads schema (unit `label`).
async fn loaded(app: &TestApp, epsilon: f64) -> Uuid {
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", epsilon))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 300))
        .await
        .unwrap();
    dataset.id
}

/// One release of each kind that reads rows or labels when it is made.
fn row_reading_requests() -> Vec<(&'static str, ReleaseRequest)> {
    vec![
        (
            "model",
            ReleaseRequest {
                epsilon: Some(0.5),
                delta: None,
                params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    lambda: 0.01,
                    fit_intercept: true,
                }),
            },
        ),
        (
            "aggregate",
            ReleaseRequest {
                epsilon: Some(0.5),
                delta: Some(1e-7),
                params: ReleaseParams::Aggregate(AggregateParams {
                    statistics: vec!["sum:value".to_owned(), "mean:converted".to_owned()],
                    group_by: vec!["campaign".to_owned()],
                    mechanism: AggregateMechanism::Gaussian,
                    target_std: None,
                }),
            },
        ),
        (
            "supplied walr",
            ReleaseRequest {
                epsilon: Some(0.5),
                delta: Some(1e-7),
                params: ReleaseParams::Walr(WalrParams {
                    intercept: true,
                    features: Some(
                        ["r1", "r2", "r3"]
                            .iter()
                            .map(|id| SuppliedRow {
                                row_id: (*id).to_owned(),
                                x: vec![0.5, 0.25],
                            })
                            .collect(),
                    ),
                    ..WalrParams::default()
                }),
            },
        ),
    ]
}

fn walr(epsilon: f64) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(epsilon),
        delta: Some(1e-7),
        params: ReleaseParams::Walr(WalrParams {
            intercept: true,
            features: None,
            ..WalrParams::default()
        }),
    }
}

fn dry_run() -> ReleaseOptions {
    ReleaseOptions {
        dry_run: true,
        ..ReleaseOptions::default()
    }
}

/// Every row-reading request is refused as `budget-exhausted`, made or
/// priced, without a row read of either kind.
async fn refused_unread(app: &TestApp, counting: &Counting, dataset: Uuid, analyst: &str) {
    let client = app.analyst(analyst, &[dataset]);
    for (name, request) in row_reading_requests() {
        for options in [ReleaseOptions::default(), dry_run()] {
            let error = client
                .release(dataset, &request, &options)
                .await
                .expect_err(name);
            assert_eq!(
                error.problem_type(),
                Some(ProblemType::BudgetExhausted),
                "{name}: {error}"
            );
            assert_eq!(counting.take(), (0, 0), "{name} read rows");
        }
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn with_the_budget_spent_a_release_is_refused_before_any_row_is_read(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let (app, counting) = counted(backend).await;
    let dataset = loaded(&app, 1.0).await;
    // WALR over the stored features reads no rows: it spends everything.
    app.analyst("ana", &[dataset])
        .release(dataset, &walr(1.0), &ReleaseOptions::default())
        .await
        .unwrap();
    assert_eq!(counting.take(), (0, 0));
    refused_unread(&app, &counting, dataset, "ana").await;
    assert_eq!(app.admin.ledger(dataset).await.unwrap().len(), 2);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn with_the_analysts_cap_spent_a_release_is_refused_before_any_row_is_read(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let (app, counting) = counted(backend).await;
    let dataset = loaded(&app, 100.0).await;
    let cap: BudgetChange = serde_json::from_value(serde_json::json!({
        "caps": {"ana": {"epsilon": 0.5, "delta": 1e-6}}
    }))
    .unwrap();
    app.admin.change_budget(dataset, &cap).await.unwrap();
    app.analyst("ana", &[dataset])
        .release(dataset, &walr(0.5), &ReleaseOptions::default())
        .await
        .unwrap();
    counting.take();
    refused_unread(&app, &counting, dataset, "ana").await;
    // The counter does count: another analyst's model reads the rows
    // (after its debit).
    app.analyst("bea", &[dataset])
        .release(
            dataset,
            &row_reading_requests()[0].1,
            &ReleaseOptions::default(),
        )
        .await
        .unwrap();
    let (outcome_reads, _) = counting.take();
    assert!(outcome_reads > 0);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn dry_runs_read_no_label_and_supplied_ones_only_row_ids(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let (app, counting) = counted(backend).await;
    let dataset = loaded(&app, 100.0).await;
    let analyst = app.analyst("ana", &[dataset]);
    for (name, request) in row_reading_requests() {
        let priced = analyst
            .release(dataset, &request, &dry_run())
            .await
            .unwrap()
            .release;
        assert!(priced.dry_run && priced.result.is_none(), "{name}");
        let (outcome_reads, input_reads) = counting.take();
        assert_eq!(outcome_reads, 0, "{name} read labels on a dry run");
        // Only the supplied WALR checks its row ids, which are public.
        assert_eq!(input_reads > 0, name == "supplied walr", "{name}");
    }
    // An unknown row id is refused on the dry run as on the release,
    // from the row ids alone.
    let unknown = ReleaseRequest {
        epsilon: Some(0.5),
        delta: Some(1e-7),
        params: ReleaseParams::Walr(WalrParams {
            intercept: true,
            features: Some(vec![SuppliedRow {
                row_id: "nobody".to_owned(),
                x: vec![0.5],
            }]),
            ..WalrParams::default()
        }),
    };
    for options in [dry_run(), ReleaseOptions::default()] {
        let error = analyst
            .release(dataset, &unknown, &options)
            .await
            .unwrap_err();
        let ClientError::Problem(problem) = &error else {
            panic!("{error}");
        };
        assert_eq!(problem.kind(), Some(ProblemType::InvalidInput));
        assert!(problem.detail.contains("\"nobody\""), "{}", problem.detail);
        let (outcome_reads, input_reads) = counting.take();
        assert_eq!(outcome_reads, 0);
        assert!(input_reads > 0);
    }
    let view = app.admin.dataset(dataset).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 0.0);
    app.finish().await;
}
