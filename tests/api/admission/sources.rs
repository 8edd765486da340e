//! Frank-Wolfe debits each of its source datasets too: a source whose
//! budget or whose cap for the analyst cannot pay refuses the release
//! before a row of the target or of any source is read, and no ledger
//! changes. The iterative learner needs a snapshot cache, so only the cold
//! and warm servers are tried.

use dpgate_client::ReleaseOptions;
use dpgate_client::types::{BudgetChange, ProblemType};
use rstest::rstest;
use uuid::Uuid;

use super::catalogue::frank_wolfe;
use super::{Mode, Seen, Server, problem, walr};
use crate::helpers::{Backend, dry_run, unavailable};

/// How the source is made unable to pay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    /// Its budget is spent (by another analyst).
    Budget,
    /// The analyst's cap on it is spent.
    Cap,
}

#[rstest]
#[tokio::test]
async fn a_source_that_cannot_pay_refuses_frank_wolfe_before_anything_is_read(
    #[values(Backend::Sqlite, Backend::Postgres)] backend: Backend,
    #[values(Mode::Cold, Mode::Warm)] mode: Mode,
    #[values("label", "row")] unit: &str,
    #[values(Spent::Budget, Spent::Cap)] spent: Spent,
) {
    if unavailable(backend) {
        return;
    }
    let mut server = Server::start(backend, mode).await;
    let target = server.dataset("target", unit, 100.0).await;
    let rich = server.dataset("rich", unit, 100.0).await;
    let poor = server.dataset("poor", unit, 2.0).await;
    let all = [target, rich, poor];
    server.settle(&all).await;
    match spent {
        Spent::Budget => spend(&server, poor, "bea", server.left(2.0)).await,
        Spent::Cap => {
            let cap: BudgetChange = serde_json::from_value(serde_json::json!({
                "caps": {"ana": {"epsilon": 0.25, "delta": 1e-6}}
            }))
            .unwrap();
            server.app.admin.change_budget(poor, &cap).await.unwrap();
            spend(&server, poor, "ana", 0.25).await;
        }
    }
    let analyst = server.analyst("ana", &all);
    let before = server.ledgers(&all).await;
    let request = frank_wolfe(vec![rich, poor]);
    for options in [ReleaseOptions::default(), dry_run()] {
        let error = analyst
            .release(target, &request, &options)
            .await
            .unwrap_err();
        let detail = problem(&error, 409, ProblemType::BudgetExhausted, "a poor source");
        assert!(detail.contains("\"poor\""), "{detail}");
        assert_eq!(server.seen(), Seen::default());
    }
    assert_eq!(server.ledgers(&all).await, before);
    // The counters do count: without the poor source it is made, and reads
    // the target and the rich source.
    analyst
        .release(target, &frank_wolfe(vec![rich]), &ReleaseOptions::default())
        .await
        .unwrap();
    let seen = server.seen();
    server.assert_read(seen, unit, "frank-wolfe over a rich source");
    match mode {
        Mode::Cold => assert_eq!(seen.snapshots.loads, 2, "{seen:?}"),
        Mode::Warm => assert_eq!(seen.snapshots.outcomes, 2, "{seen:?}"),
        Mode::Streamed => unreachable!(),
    }
    server.finish().await;
}

/// `analyst` spends `epsilon` of `dataset` on a release that reads no rows.
async fn spend(server: &Server, dataset: Uuid, analyst: &str, epsilon: f64) {
    server
        .analyst(analyst, &[dataset])
        .release(dataset, &walr(epsilon), &ReleaseOptions::default())
        .await
        .unwrap();
    server.seen();
}
