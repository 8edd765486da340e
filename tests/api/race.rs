//! The ledger never overspends: many analysts race for the same budget.

use std::collections::HashSet;

use dpgate_client::types::{LedgerEvent, ProblemType, ReleaseParams, ReleaseRequest, WalrParams};
use dpgate_client::{ReleaseOptions, UploadFormat};
use rstest::rstest;

use crate::helpers::{Backend, ads_dataset, ads_rows, spawn_app, unavailable};

const ANALYSTS: usize = 32;
const REPETITIONS: usize = 20;

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_analysts_never_spend_beyond_the_budget(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    for repetition in 0..REPETITIONS {
        let app = spawn_app(backend).await;
        let accountant = if repetition % 2 == 0 { "basic" } else { "rdp" };
        let dataset = app
            .dataset(ads_dataset("race", "label", accountant, 1.0))
            .await;
        app.admin
            .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 40))
            .await
            .unwrap();
        // 32 releases of ε = 3/32: three times the budget in total.
        let epsilon = 3.0 / ANALYSTS as f64;
        let tasks: Vec<_> = (0..ANALYSTS)
            .map(|index| {
                let client = app.analyst(&format!("analyst-{index}"), &[dataset.id]);
                let id = dataset.id;
                tokio::spawn(async move {
                    let request = ReleaseRequest {
                        epsilon: Some(epsilon),
                        delta: Some(1e-8),
                        params: ReleaseParams::Walr(WalrParams {
                            intercept: true,
                            features: None,
                            ..WalrParams::default()
                        }),
                    };
                    client
                        .release(id, &request, &ReleaseOptions::default())
                        .await
                })
            })
            .collect();
        let mut made = HashSet::new();
        let mut refused = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(released) => {
                    assert!(!released.replayed);
                    made.insert(released.release.id.unwrap());
                }
                Err(error) => {
                    assert_eq!(
                        error.problem_type(),
                        Some(ProblemType::BudgetExhausted),
                        "{backend:?} #{repetition}: {error}"
                    );
                    refused += 1;
                }
            }
        }
        assert_eq!(made.len() + refused, ANALYSTS);
        let view = app.admin.dataset(dataset.id).await.unwrap();
        assert!(
            view.spent.epsilon <= 1.0,
            "{backend:?} #{repetition}: {:?}",
            view.spent
        );
        assert!(view.spent.epsilon_basic >= view.spent.epsilon);
        let ledger = app.admin.ledger(dataset.id).await.unwrap();
        let debited: HashSet<_> = ledger
            .iter()
            .filter(|entry| entry.event == LedgerEvent::Release)
            .filter_map(|entry| entry.release_id)
            .collect();
        assert_eq!(
            debited, made,
            "every 201 has its ledger entry, and only those"
        );
        // Basic composition admits exactly ⌊1 / (3/32)⌋ = 10; RDP at least that.
        if accountant == "basic" {
            assert_eq!(made.len(), 10, "{backend:?} #{repetition}");
        } else {
            assert!(
                made.len() >= 10,
                "{backend:?} #{repetition}: {}",
                made.len()
            );
        }
        app.finish().await;
    }
}
