//! With the dataset's budget or the analyst's cap spent, every release of
//! the catalogue is refused, made or priced, before anything is read: no
//! row from the store, no snapshot loaded, no column of a held snapshot.

use dpgate_client::ReleaseOptions;
use dpgate_client::types::{BudgetChange, ProblemType};
use rstest::rstest;
use uuid::Uuid;

use super::catalogue::every_release;
use super::{Mode, Seen, Server, model, problem, walr};
use crate::helpers::{Backend, dry_run, unavailable};

/// Every release `unit` allows is refused to `analyst`, made and dry run,
/// having read nothing at all, and the ledger is as it was.
async fn refused_unread(server: &Server, dataset: Uuid, analyst: &str, unit: &str) {
    let client = server.analyst(analyst, &[dataset]);
    let before = server.ledgers(&[dataset]).await;
    for case in every_release(unit) {
        for options in [ReleaseOptions::default(), dry_run()] {
            let name = format!("{} (dry run: {})", case.name, options.dry_run);
            let error = client
                .release(dataset, &case.request, &options)
                .await
                .expect_err(&name);
            // Even the iterative learners, which a server without a
            // snapshot cache refuses, are refused on the budget first.
            problem(&error, 409, ProblemType::BudgetExhausted, &name);
            assert_eq!(server.seen(), Seen::default(), "{name} read");
        }
    }
    assert_eq!(server.ledgers(&[dataset]).await, before);
}

#[rstest]
#[tokio::test]
async fn with_the_budget_spent_every_release_is_refused_before_anything_is_read(
    #[values(Backend::Sqlite, Backend::Postgres)] backend: Backend,
    #[values(Mode::Streamed, Mode::Cold, Mode::Warm)] mode: Mode,
    #[values("label", "row")] unit: &str,
) {
    if unavailable(backend) {
        return;
    }
    let (server, dataset) = Server::with_dataset(backend, mode, unit, 1.0).await;
    // WALR over the stored features reads no rows: it spends what is left.
    server
        .analyst("ana", &[dataset])
        .release(dataset, &walr(server.left(1.0)), &ReleaseOptions::default())
        .await
        .unwrap();
    assert!(!server.seen().private(unit));
    refused_unread(&server, dataset, "ana", unit).await;
    server.finish().await;
}

#[rstest]
#[tokio::test]
async fn with_the_analysts_cap_spent_every_release_is_refused_before_anything_is_read(
    #[values(Backend::Sqlite, Backend::Postgres)] backend: Backend,
    #[values(Mode::Streamed, Mode::Cold, Mode::Warm)] mode: Mode,
    #[values("label", "row")] unit: &str,
) {
    if unavailable(backend) {
        return;
    }
    let (server, dataset) = Server::with_dataset(backend, mode, unit, 100.0).await;
    let cap: BudgetChange = serde_json::from_value(serde_json::json!({
        "caps": {"ana": {"epsilon": 0.5, "delta": 1e-6}}
    }))
    .unwrap();
    server.app.admin.change_budget(dataset, &cap).await.unwrap();
    server
        .analyst("ana", &[dataset])
        .release(dataset, &walr(0.5), &ReleaseOptions::default())
        .await
        .unwrap();
    server.seen();
    refused_unread(&server, dataset, "ana", unit).await;
    // The counters do count: another analyst's model reads the labels
    // (after its debit).
    server
        .analyst("bea", &[dataset])
        .release(dataset, &model(0.5), &ReleaseOptions::default())
        .await
        .unwrap();
    server.assert_read(server.seen(), unit, "bea's model");
    server.finish().await;
}
