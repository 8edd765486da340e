//! One conformance suite for every storage backend, through the `Store`
//! trait and the engine's uploads and reads over its manifest.

use dpgate::domain::budget::{AnalystRecord, Change};
use std::sync::Arc;

use dpgate::domain::dataset::{DatasetRecord, WalrStats};
use dpgate::domain::debit::{Debit, DebitOutcome};
use dpgate::domain::row::RowRecord;
use dpgate::dp::{Budget, Charge, Delta, Epsilon, PrivacyLoss};
use dpgate::engine::{self, DataDir, Upload};
use dpgate::ingest::{RowIds, fingerprint};
use dpgate::snapshots::Columns;
use dpgate::store::blocks::BLOCK_ROWS;
use dpgate::store::{BudgetOutcome, Finished, NewDataset, Store, StoreError};
use dpgate_client::types::{CreateDataset, LedgerEvent};
use futures_util::StreamExt;
use rstest::rstest;
use uuid::Uuid;

use crate::helpers::{Backend, ads_dataset, spawn_app, unavailable};

fn record(name: &str) -> DatasetRecord {
    let request: CreateDataset =
        serde_json::from_value(ads_dataset(name, "label", "rdp", 1.0)).unwrap();
    DatasetRecord::new(&request, "2026-11-22T00:00:00Z".to_owned()).unwrap()
}

fn row(id: &str, label: u8) -> RowRecord {
    RowRecord {
        line: 2,
        row_id: id.to_owned(),
        label,
        features: [0.5f32.to_le_bytes(), 0.25f32.to_le_bytes()].concat(),
        measures: 7.0f64.to_le_bytes().to_vec(),
        dimensions: 1u32.to_le_bytes().to_vec(),
        user: 0,
    }
}

fn debit(dataset: Uuid, rows: u64, key: Option<&str>) -> Debit {
    Debit {
        dataset,
        expected_rows: rows,
        release_id: Uuid::new_v4(),
        analyst: "ana".to_owned(),
        kind: "walr".to_owned(),
        idempotency_key: key.map(str::to_owned),
        request_hash: "h1".to_owned(),
        request: "{}".to_owned(),
        charge: Charge {
            epsilon: Epsilon::new(0.25).unwrap(),
            delta: Delta::new(1e-8).unwrap(),
            loss: PrivacyLoss::Gaussian {
                sensitivity: 1.0,
                sigma: 10.0,
            },
        },
        created_at: "2026-11-22T00:00:01Z".to_owned(),
        sources: Vec::new(),
    }
}

/// Admits every charge.
fn admit() -> dpgate::domain::debit::Decide {
    at_most(u64::MAX)
}

/// Every block of the snapshot of `dataset` at `version`.
async fn blocks(
    store: &dyn Store,
    data: &Arc<DataDir>,
    dataset: &DatasetRecord,
    version: u64,
    outcomes: bool,
    block_rows: usize,
) -> Vec<Columns> {
    let files = store
        .version_files(dataset.id, version, outcomes)
        .await
        .unwrap();
    engine::stream(
        data.clone(),
        files,
        dataset.schema.clone(),
        engine::Needed::all(outcomes),
        block_rows,
    )
    .map(Result::unwrap)
    .collect()
    .await
}

/// An upload of `rows`, not yet committed.
async fn upload(
    store: &dyn Store,
    data: &Arc<DataDir>,
    dataset: &DatasetRecord,
    rows: &[RowRecord],
) -> Upload {
    let mut upload = Upload::begin(store, data.clone(), dataset).await.unwrap();
    for batch in rows.chunks(1000) {
        upload.insert(batch.to_vec()).await.unwrap();
    }
    upload
}

/// An upload of more rows than a stored block holds is stored in several
/// and read back in one order however the reader cuts it.
async fn many_blocks(store: &dyn Store, data: &Arc<DataDir>) {
    let dataset = record("many-blocks");
    let new = NewDataset {
        record: dataset.clone(),
        actor: "admin".to_owned(),
    };
    store.create_dataset(&new).await.unwrap();
    let rows = 2 * BLOCK_ROWS + 3;
    let all: Vec<RowRecord> = (0..rows)
        .map(|i| row(&format!("r{i}"), (i % 2) as u8))
        .collect();
    upload(store, data, &dataset, &all)
        .await
        .commit(rows as u64, &WalrStats::empty(2))
        .await
        .unwrap();
    let read = blocks(store, data, &dataset, rows as u64, true, 10_000).await;
    assert_eq!(
        read.iter().map(Columns::len).collect::<Vec<_>>(),
        vec![10_000, 10_000, 10_000, rows - 30_000]
    );
    let mut at = 0;
    for block in &read {
        for row in 0..block.len() {
            assert_eq!(block.id(row), format!("r{at}"));
            assert_eq!(block.row(row).label, (at % 2) as u8);
            at += 1;
        }
    }
    let whole = blocks(store, data, &dataset, rows as u64, false, rows).await;
    assert_eq!((whole.len(), whole[0].len()), (1, rows));
    assert_eq!(whole[0].position("r16384"), Some(16_384));
}

async fn conformance(store: &dyn Store, data: &Arc<DataDir>) {
    let dataset = record("conformance");
    let new = NewDataset {
        record: dataset.clone(),
        actor: "admin".to_owned(),
    };
    store.create_dataset(&new).await.unwrap();
    let mut twin = new.clone();
    twin.record.id = Uuid::new_v4();
    assert!(matches!(
        store.create_dataset(&twin).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.dataset(dataset.id).await.unwrap().unwrap(), dataset);
    assert_eq!(store.dataset(Uuid::new_v4()).await.unwrap(), None);
    assert_eq!(store.datasets().await.unwrap(), vec![dataset.clone()]);

    // An abandoned upload leaves nothing behind.
    drop(upload(store, data, &dataset, &[row("a", 1), row("b", 0)]).await);
    assert_eq!(store.dataset(dataset.id).await.unwrap().unwrap().n_rows, 0);
    let empty = blocks(store, data, &dataset, 0, true, 10).await;
    assert_eq!((empty.len(), empty[0].len()), (1, 0));

    let mut stats = WalrStats::empty(2);
    stats.add(1, &[0.5, 0.25]);
    stats.add(0, &[0.5, 0.25]);
    let committed = upload(store, data, &dataset, &[row("a", 1), row("b", 0)])
        .await
        .commit(2, &stats)
        .await
        .unwrap();
    assert_eq!((committed.n_rows, &committed.stats), (2, &stats));
    let mut session = upload(store, data, &dataset, &[]).await;
    // Stored row ids are found by line, and nothing is stored.
    let mut ids = RowIds::default();
    for (line, id) in ["b", "c", "a"].into_iter().enumerate() {
        ids.push(fingerprint(id), line as u64 + 1);
    }
    let found: Vec<u64> = session
        .stored(ids)
        .await
        .unwrap()
        .iter()
        .map(|error| error.line)
        .collect();
    assert_eq!(found, [1, 3]);
    drop(session);
    assert_eq!(store.dataset(dataset.id).await.unwrap().unwrap().n_rows, 2);
    let stored = blocks(store, data, &dataset, 2, true, 10).await;
    assert_eq!(stored.len(), 1);
    let (a, b) = (stored[0].row(0), stored[0].row(1));
    assert_eq!((a.id, a.label, b.id, b.label), ("a", 1, "b", 0));
    assert_eq!(
        (a.features, a.measures, a.dimensions),
        (&[0.5f32, 0.25][..], vec![7.0], vec![1u32])
    );
    // Blocks of one row each; without outcomes, none are read.
    let small = blocks(store, data, &dataset, 2, false, 1).await;
    assert_eq!(small.len(), 2);
    assert_eq!((small[0].id(0), small[1].id(0)), ("a", "b"));
    assert!(small.iter().all(|block| !block.has_outcomes()));
    assert_eq!(small[1].features(0), &[0.5, 0.25]);
    // Rows come in the order they were stored, upload after upload, across
    // stored blocks and re-cut blocks alike, and a version reads only the
    // rows it held.
    let more = [row("é", 1), row("B", 0), row("Z", 1), row("aa", 0)];
    upload(store, data, &dataset, &more)
        .await
        .commit(4, &WalrStats::empty(2))
        .await
        .unwrap();
    let ids = |blocks: Vec<Columns>| -> Vec<String> {
        blocks
            .iter()
            .flat_map(|block| (0..block.len()).map(|row| block.id(row).to_owned()))
            .collect()
    };
    assert_eq!(
        ids(blocks(store, data, &dataset, 6, false, 4).await),
        vec!["a", "b", "é", "B", "Z", "aa"]
    );
    assert_eq!(
        ids(blocks(store, data, &dataset, 2, true, 4).await),
        vec!["a", "b"]
    );
    many_blocks(store, data).await;

    // Debits: every outcome.
    let first = debit(dataset.id, 6, Some("k1"));
    assert!(matches!(
        store
            .debit(&debit(Uuid::new_v4(), 2, None), admit())
            .await
            .unwrap(),
        DebitOutcome::NoDataset
    ));
    assert!(matches!(
        store
            .debit(&debit(dataset.id, 1, None), admit())
            .await
            .unwrap(),
        DebitOutcome::Stale
    ));
    assert!(matches!(
        store.debit(&first, Box::new(|_, _, _| None)).await.unwrap(),
        DebitOutcome::Refused(refused) if refused.1 == AnalystRecord::new("ana")
    ));
    assert_eq!(store.ledger(dataset.id, None, 10).await.unwrap().len(), 1);
    let DebitOutcome::Debited(after) = store.debit(&first, admit()).await.unwrap() else {
        panic!("the debit commits");
    };
    assert_eq!(after.composition.releases(), 1);
    assert_eq!(
        store
            .dataset(dataset.id)
            .await
            .unwrap()
            .unwrap()
            .composition,
        after.composition
    );
    let stored = store
        .release(dataset.id, first.release_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.response.as_deref(), stored.request_hash.as_str()),
        (None, "h1")
    );
    store
        .finish_release(
            first.release_id,
            Finished::Response("{\"done\":true}".to_owned()),
        )
        .await
        .unwrap();
    store
        .finish_release(first.release_id, Finished::Failure("too late".to_owned()))
        .await
        .unwrap();
    let by_key = store
        .release_by_key(dataset.id, "ana", "k1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (by_key.response.as_deref(), by_key.failure),
        (Some("{\"done\":true}"), None)
    );
    assert_eq!(
        store.release_by_key(dataset.id, "bea", "k1").await.unwrap(),
        None
    );
    let mut retry = debit(dataset.id, 6, Some("k1"));
    retry.request_hash = "h2".to_owned();
    let DebitOutcome::Replay(replayed) = store.debit(&retry, admit()).await.unwrap() else {
        panic!("a reused key replays");
    };
    assert_eq!(
        (replayed.id, replayed.request_hash.as_str()),
        (first.release_id, "h1")
    );

    let second = debit(dataset.id, 6, None);
    assert!(matches!(
        store.debit(&second, admit()).await.unwrap(),
        DebitOutcome::Debited(_)
    ));
    let ledger = store.ledger(dataset.id, None, 10).await.unwrap();
    assert_eq!(
        ledger.iter().map(|entry| entry.seq).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert_eq!(ledger[2].prev_hash, ledger[1].hash);
    let recomputed = dpgate::domain::ledger::verify(&dataset.id, &ledger).unwrap();
    assert_eq!(
        recomputed,
        store
            .dataset(dataset.id)
            .await
            .unwrap()
            .unwrap()
            .composition
    );
    assert_eq!(
        store.ledger(dataset.id, Some(0), 1).await.unwrap()[0].seq,
        1
    );

    // Both debits were the same analyst's; releases list by ledger order.
    let analysts = store.analysts(dataset.id).await.unwrap();
    assert_eq!(analysts.len(), 1);
    assert_eq!(
        (
            analysts[0].analyst.as_str(),
            analysts[0].composition.releases()
        ),
        ("ana", 2)
    );
    let releases = store.releases(dataset.id, None, None, 10).await.unwrap();
    assert_eq!(
        releases.iter().map(|r| (r.seq, r.id)).collect::<Vec<_>>(),
        vec![(1, first.release_id), (2, second.release_id)]
    );
    assert_eq!(releases[0].epsilon, 0.25);
    assert_eq!(
        store
            .releases(dataset.id, None, Some(1), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .releases(dataset.id, Some("bea"), None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Budget changes: refused below the spent, else ledger events.
    let budget = |epsilon| Budget {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(1e-6).unwrap(),
    };
    let change = |total: Option<f64>, caps: Vec<(&str, Option<Budget>)>| Change {
        budget: total.map(budget),
        caps: caps.into_iter().map(|(a, c)| (a.to_owned(), c)).collect(),
        actor: "root".to_owned(),
        created_at: "2026-11-22T00:00:04Z".to_owned(),
    };
    assert!(matches!(
        store
            .change_budget(dataset.id, &change(Some(0.001), vec![]))
            .await
            .unwrap(),
        BudgetOutcome::Refused(_)
    ));
    assert!(matches!(
        store
            .change_budget(Uuid::new_v4(), &change(Some(5.0), vec![]))
            .await
            .unwrap(),
        BudgetOutcome::NoDataset
    ));
    let BudgetOutcome::Changed(changed, analysts) = store
        .change_budget(
            dataset.id,
            &change(
                Some(5.0),
                vec![("ana", Some(budget(1.5))), ("cy", Some(budget(0.1)))],
            ),
        )
        .await
        .unwrap()
    else {
        panic!("a raise commits");
    };
    assert_eq!(changed.budget, budget(5.0));
    assert_eq!(
        store.dataset(dataset.id).await.unwrap().unwrap().budget,
        budget(5.0)
    );
    assert_eq!(
        analysts
            .iter()
            .map(|a| (a.analyst.as_str(), a.cap, a.composition.releases()))
            .collect::<Vec<_>>(),
        vec![("ana", Some(budget(1.5)), 2), ("cy", Some(budget(0.1)), 0)]
    );
    let BudgetOutcome::Changed(_, analysts) = store
        .change_budget(dataset.id, &change(None, vec![("cy", None)]))
        .await
        .unwrap()
    else {
        panic!("removing a cap commits");
    };
    assert_eq!(analysts[1].cap, None);
    let ledger = store.ledger(dataset.id, None, 10).await.unwrap();
    assert_eq!(
        ledger.iter().map(|entry| entry.event).collect::<Vec<_>>(),
        vec![
            LedgerEvent::Open,
            LedgerEvent::Release,
            LedgerEvent::Release,
            LedgerEvent::Budget,
            LedgerEvent::Cap,
            LedgerEvent::Cap,
            LedgerEvent::Cap,
        ]
    );
    assert_eq!(ledger[3].actor, "root");
    dpgate::domain::ledger::verify(&dataset.id, &ledger).unwrap();

    assert!(!store.is_revoked("jti-1").await.unwrap());
    store.revoke("jti-1", "2026-11-22T00:00:02Z").await.unwrap();
    store.revoke("jti-1", "2026-11-22T00:00:03Z").await.unwrap();
    assert!(store.is_revoked("jti-1").await.unwrap());
    store.ping().await.unwrap();
}

/// The old layout's table on each backend, as its migrations left it.
fn legacy_table(backend: crate::helpers::Backend) -> &'static str {
    match backend {
        crate::helpers::Backend::Sqlite => {
            "CREATE TABLE rows (dataset_pk INTEGER NOT NULL, row_id TEXT NOT NULL, \
             label INTEGER NOT NULL, features BLOB NOT NULL, measures BLOB NOT NULL, \
             dimensions BLOB NOT NULL, version INTEGER NOT NULL DEFAULT 0, \
             PRIMARY KEY (dataset_pk, row_id)) WITHOUT ROWID"
        }
        crate::helpers::Backend::Postgres => {
            "CREATE TABLE rows (dataset_pk BIGINT NOT NULL, row_id TEXT COLLATE \"C\" NOT NULL, \
             label SMALLINT NOT NULL, features BYTEA NOT NULL, measures BYTEA NOT NULL, \
             dimensions BYTEA NOT NULL, version BIGINT NOT NULL DEFAULT 0, \
             PRIMARY KEY (dataset_pk, row_id))"
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Runs `statements` on the database at `url`, outside any store.
async fn execute(
    backend: crate::helpers::Backend,
    url: &str,
    statements: &[String],
) -> Result<(), sqlx::Error> {
    use sqlx::Connection;
    match backend {
        crate::helpers::Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(url).await?;
            for statement in statements {
                sqlx::raw_sql(sqlx::AssertSqlSafe(statement.as_str()))
                    .execute(&mut conn)
                    .await?;
            }
        }
        crate::helpers::Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(url).await?;
            for statement in statements {
                sqlx::raw_sql(sqlx::AssertSqlSafe(statement.as_str()))
                    .execute(&mut conn)
                    .await?;
            }
        }
    }
    Ok(())
}

/// Rows stored one per database row, before the `row_blocks` migration,
/// are converted into blocks on start-up, each upload's rows in row id
/// order as they were read then, and the old table dropped; the blocks
/// are then written out as each upload's files (`version_files`) and
/// deleted.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn rows_stored_before_files_are_converted_on_start_up(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = record("legacy");
    let new = NewDataset {
        record: dataset.clone(),
        actor: "admin".to_owned(),
    };
    app.store.create_dataset(&new).await.unwrap();
    let blob = |bytes: &[u8]| match backend {
        crate::helpers::Backend::Sqlite => format!("X'{}'", hex(bytes)),
        crate::helpers::Backend::Postgres => format!("'\\x{}'::bytea", hex(bytes)),
    };
    let mut statements = vec![legacy_table(backend).to_owned()];
    for (id, label, version) in [("b", 0, 0), ("a", 1, 0), ("c", 1, 2)] {
        let stored = row(id, label);
        statements.push(format!(
            "INSERT INTO rows (dataset_pk, row_id, label, features, measures, dimensions, \
             version) SELECT pk, '{id}', {label}, {}, {}, {}, {version} FROM datasets \
             WHERE name = 'legacy'",
            blob(&stored.features),
            blob(&stored.measures),
            blob(&stored.dimensions)
        ));
    }
    statements.push("UPDATE datasets SET n_rows = 3 WHERE name = 'legacy'".to_owned());
    execute(backend, &app.database_url, &statements)
        .await
        .unwrap();
    let restarted = dpgate::store::connect(&app.database_url).await.unwrap();
    assert_eq!(
        restarted.block_uploads().await.unwrap(),
        vec![(dataset.id, 0), (dataset.id, 2)],
        "{backend:?}"
    );
    let data = app.snapshots.data();
    assert_eq!(
        engine::blocks_to_files(restarted.as_ref(), data)
            .await
            .unwrap(),
        2
    );
    assert_eq!(restarted.block_uploads().await.unwrap(), vec![]);
    let files = restarted.version_files(dataset.id, 3, true).await.unwrap();
    assert_eq!(files.len(), 4, "{backend:?}: two uploads, two files each");
    let read = blocks(restarted.as_ref(), data, &dataset, 3, true, 10).await;
    let rows: Vec<(&str, u8)> = (0..read[0].len())
        .map(|at| (read[0].id(at), read[0].row(at).label))
        .collect();
    assert_eq!(rows, vec![("a", 1), ("b", 0), ("c", 1)], "{backend:?}");
    assert_eq!(read[0].features(2), &[0.5, 0.25]);
    let before = blocks(restarted.as_ref(), data, &dataset, 2, true, 10).await;
    assert_eq!(before[0].len(), 2, "{backend:?}");
    let left = execute(
        backend,
        &app.database_url,
        &["SELECT 1 FROM rows".to_owned()],
    )
    .await;
    assert!(left.is_err(), "{backend:?}: the old table is dropped");
    // A second start finds nothing to convert.
    let again = dpgate::store::connect(&app.database_url).await.unwrap();
    assert_eq!(
        engine::blocks_to_files(again.as_ref(), data).await.unwrap(),
        0
    );
    app.finish().await;
}

/// Admits while fewer than `most` releases are composed, whoever asks.
fn at_most(most: u64) -> dpgate::domain::debit::Decide {
    Box::new(
        move |dataset: &DatasetRecord, analyst: &AnalystRecord, charge: &Charge| {
            if dataset.composition.releases() >= most {
                return None;
            }
            let (mut total, mut own) = (dataset.composition.clone(), analyst.composition.clone());
            total.push(charge);
            own.push(charge);
            Some((total, own))
        },
    )
}

/// Debits sent together share transactions; each is still decided in turn
/// (exactly `most` are made), a key used twice replays its first release,
/// and finished releases stored together keep their first ending.
async fn concurrent_debits(store: &dyn Store) {
    const MOST: u64 = 12;
    let dataset = record("batched");
    store
        .create_dataset(&NewDataset {
            record: dataset.clone(),
            actor: "admin".to_owned(),
        })
        .await
        .unwrap();
    // 40 debits by 8 analysts, each key sent twice.
    let debits: Vec<Debit> = (0..20)
        .flat_map(|index| {
            let mut first = debit(dataset.id, 0, Some(&format!("k{index}")));
            first.analyst = format!("a{}", index % 8);
            let mut again = first.clone();
            again.release_id = Uuid::new_v4();
            [first, again]
        })
        .collect();
    let outcomes = futures_util::future::join_all(
        debits.iter().map(|debit| store.debit(debit, at_most(MOST))),
    )
    .await;
    let mut made = Vec::new();
    let (mut refused, mut replayed) = (0, 0);
    for (debit, outcome) in debits.iter().zip(outcomes) {
        match outcome.unwrap() {
            DebitOutcome::Debited(after) => {
                assert!(after.composition.releases() <= MOST);
                made.push(debit.release_id);
            }
            DebitOutcome::Refused(_) => refused += 1,
            DebitOutcome::Replay(earlier) => {
                assert_eq!(earlier.analyst, debit.analyst);
                assert_ne!(earlier.id, debit.release_id);
                replayed += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(made.len() as u64, MOST);
    // Every key's second use replays its first, made or not (a refused
    // first stored nothing, so its second is decided, and refused).
    assert_eq!(replayed, MOST as usize);
    assert_eq!(refused, 40 - 2 * MOST as usize);
    let after = store.dataset(dataset.id).await.unwrap().unwrap();
    assert_eq!(after.composition.releases(), MOST);
    let ledger = store.ledger(dataset.id, None, 1000).await.unwrap();
    assert_eq!(
        ledger.len() as u64,
        MOST + 1,
        "the opening entry and one per release"
    );
    let finishes = made.iter().flat_map(|release| {
        [
            store.finish_release(
                *release,
                Finished::Response(format!("{{\"id\":\"{release}\"}}")),
            ),
            store.finish_release(*release, Finished::Failure("second".to_owned())),
        ]
    });
    for finished in futures_util::future::join_all(finishes).await {
        finished.unwrap();
    }
    for release in &made {
        let stored = store.release(dataset.id, *release).await.unwrap().unwrap();
        assert_eq!(
            (stored.response, stored.failure),
            (Some(format!("{{\"id\":\"{release}\"}}")), None)
        );
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn concurrent_debits_are_batched_and_each_decided_in_turn(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    concurrent_debits(app.store.as_ref()).await;
    app.finish().await;
}

/// A debit with sources: all datasets debited in one transaction, the
/// release recorded on its own and named by each source's entry; a source
/// that refuses (or has new rows, or is gone) leaves every dataset as it
/// was.
async fn joint_debits(store: &dyn Store) {
    use dpgate::domain::debit::SourceDebit;
    let [target, first, second] = ["target", "first", "second"].map(record);
    for dataset in [&target, &first, &second] {
        let new = NewDataset {
            record: dataset.clone(),
            actor: "admin".to_owned(),
        };
        store.create_dataset(&new).await.unwrap();
    }
    let source = |dataset: &DatasetRecord, rows: u64| SourceDebit {
        dataset: dataset.id,
        expected_rows: rows,
        charge: debit(dataset.id, 0, None).charge,
    };
    let ledgers = || async {
        let mut lengths = Vec::new();
        for dataset in [&target, &first, &second] {
            lengths.push(store.ledger(dataset.id, None, 100).await.unwrap().len());
        }
        lengths
    };
    // `second` has one release already: a decider that admits one per
    // dataset refuses it, and nothing is written anywhere.
    store
        .debit(&debit(second.id, 0, None), admit())
        .await
        .unwrap();
    let mut joint = debit(target.id, 0, Some("j1"));
    joint.sources = vec![source(&first, 0), source(&second, 0)];
    let before = ledgers().await;
    let outcome = store.debit(&joint, at_most(1)).await.unwrap();
    let DebitOutcome::Refused(refused) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(refused.0.id, second.id);
    assert_eq!(ledgers().await, before);
    assert!(
        store
            .release(target.id, joint.release_id)
            .await
            .unwrap()
            .is_none()
    );
    // A source with rows it was not priced for, or one that is gone.
    joint.sources = vec![source(&first, 5), source(&second, 0)];
    assert!(matches!(
        store.debit(&joint, admit()).await.unwrap(),
        DebitOutcome::Stale
    ));
    let gone = DatasetRecord {
        id: Uuid::new_v4(),
        ..record("gone")
    };
    joint.sources = vec![source(&first, 0), source(&gone, 0)];
    assert!(matches!(
        store.debit(&joint, admit()).await.unwrap(),
        DebitOutcome::NoDataset
    ));
    assert_eq!(ledgers().await, before);
    // Admitted: one entry on each, the release on the target alone.
    joint.sources = vec![source(&second, 0), source(&first, 0)];
    let DebitOutcome::Debited(after) = store.debit(&joint, admit()).await.unwrap() else {
        panic!("admitted");
    };
    assert_eq!(after.id, target.id);
    assert_eq!(after.composition.releases(), 1);
    assert_eq!(
        ledgers().await,
        before.iter().map(|n| n + 1).collect::<Vec<_>>()
    );
    for dataset in [&first, &second] {
        let entry = store
            .ledger(dataset.id, None, 100)
            .await
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(entry.release_id, Some(joint.release_id));
        assert_eq!(
            entry.details.as_deref(),
            Some(format!(r#"{{"source_of":"{}"}}"#, target.id).as_str())
        );
        let view = store.dataset(dataset.id).await.unwrap().unwrap();
        let analysts = store.analysts(dataset.id).await.unwrap();
        assert_eq!(
            analysts[0].composition,
            view.composition.clone(),
            "{}",
            dataset.name
        );
    }
    assert!(
        store
            .release(target.id, joint.release_id)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .release(first.id, joint.release_id)
            .await
            .unwrap()
            .is_none()
    );
    // The same key again replays it, debiting nothing.
    let mut again = joint.clone();
    again.release_id = Uuid::new_v4();
    let outcome = store.debit(&again, admit()).await.unwrap();
    let DebitOutcome::Replay(earlier) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(earlier.id, joint.release_id);
    assert_eq!(
        ledgers().await,
        before.iter().map(|n| n + 1).collect::<Vec<_>>()
    );
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_debit_with_sources_debits_all_or_none(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    joint_debits(app.store.as_ref()).await;
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn every_backend_keeps_the_store_contract(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    conformance(app.store.as_ref(), app.snapshots.data()).await;
    // Keys live in Postgres itself (shared by replicas), not in SQLite.
    let first = app.store.signing_key("first-candidate-key").await.unwrap();
    let second = app.store.signing_key("second-candidate-key").await.unwrap();
    assert_eq!(first, second, "{backend:?}");
    assert_eq!(
        first.is_some(),
        backend == crate::helpers::Backend::Postgres
    );
    app.finish().await;
}
