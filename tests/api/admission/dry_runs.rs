//! A dry run of every release reads no label or measure (under unit `row`
//! nothing at all) and spends nothing; the same release made reads them,
//! after its debit, which shows the counters would catch a dry run that
//! did.

use dpgate_client::ReleaseOptions;
use dpgate_client::types::{ProblemType, ReleaseParams, ReleaseRequest, SuppliedRow, WalrParams};
use rstest::rstest;

use super::catalogue::{every_release, supplied};
use super::{Mode, Server, problem};
use crate::helpers::{Backend, dry_run, unavailable};

#[rstest]
#[tokio::test]
async fn every_release_is_priced_unread_and_read_only_once_made(
    #[values(Backend::Sqlite, Backend::Postgres)] backend: Backend,
    #[values(Mode::Streamed, Mode::Cold, Mode::Warm)] mode: Mode,
    #[values("label", "row")] unit: &str,
) {
    if unavailable(backend) {
        return;
    }
    let (mut server, dataset) = Server::with_dataset(backend, mode, unit, 100.0).await;
    for case in every_release(unit) {
        let name = case.name;
        let analyst = server.analyst("ana", &[dataset]);
        let before = server.ledgers(&[dataset]).await;
        let priced = analyst.release(dataset, &case.request, &dry_run()).await;
        if mode == Mode::Streamed && case.in_memory {
            // Refused on public facts: it never reaches admission.
            let error = priced.expect_err(name);
            problem(&error, 422, ProblemType::InvalidInput, name);
            assert_eq!(server.seen(), Default::default(), "{name}");
            continue;
        }
        let priced = priced
            .unwrap_or_else(|error| panic!("{name}: {error}"))
            .release;
        assert!(priced.dry_run && priced.result.is_none(), "{name}");
        let seen = server.seen();
        assert!(!seen.private(unit), "{name} read on a dry run: {seen:?}");
        assert_eq!(server.ledgers(&[dataset]).await, before, "{name}");

        let made = analyst
            .release(dataset, &case.request, &ReleaseOptions::default())
            .await
            .unwrap()
            .release;
        assert!(made.result.is_some(), "{name}");
        let seen = server.seen();
        if case.reads {
            server.assert_read(seen, unit, name);
        } else {
            assert!(!seen.private(unit), "{name} read: {seen:?}");
        }
        server.cool().await;
    }
    server.finish().await;
}

/// Under unit `label`, a supplied WALR's dry run checks its row ids, which
/// are public, and nothing else; an unknown row id is refused on the dry
/// run as on the release, from the row ids alone.
#[rstest]
#[tokio::test]
async fn supplied_vectors_are_checked_on_row_ids_alone(
    #[values(Backend::Sqlite, Backend::Postgres)] backend: Backend,
    #[values(Mode::Streamed, Mode::Cold, Mode::Warm)] mode: Mode,
) {
    if unavailable(backend) {
        return;
    }
    let mut server = Server::start(backend, mode).await;
    let dataset = server.dataset("ads", "label", 100.0).await;
    server.settle(&[dataset]).await;
    let analyst = server.analyst("ana", &[dataset]);
    let known = ReleaseRequest {
        epsilon: Some(0.5),
        delta: Some(1e-7),
        params: supplied(),
    };
    analyst.release(dataset, &known, &dry_run()).await.unwrap();
    let seen = server.seen();
    assert!(!seen.private("label"), "{seen:?}");
    assert!(seen.input_rows + seen.snapshots.inputs > 0, "{seen:?}");

    let unknown = ReleaseRequest {
        params: ReleaseParams::Walr(WalrParams {
            features: Some(vec![SuppliedRow {
                row_id: "nobody".to_owned(),
                x: vec![0.5, 0.25],
            }]),
            ..WalrParams::default()
        }),
        ..known
    };
    let before = server.ledgers(&[dataset]).await;
    for options in [dry_run(), ReleaseOptions::default()] {
        let error = analyst
            .release(dataset, &unknown, &options)
            .await
            .unwrap_err();
        let detail = problem(&error, 422, ProblemType::InvalidInput, "unknown row id");
        assert!(detail.contains("\"nobody\""), "{detail}");
        let seen = server.seen();
        assert!(!seen.private("label"), "{seen:?}");
        assert!(seen.input_rows + seen.snapshots.inputs > 0, "{seen:?}");
    }
    assert_eq!(server.ledgers(&[dataset]).await, before);
    server.finish().await;
}
