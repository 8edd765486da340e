//! The cache over a real SQLite store.

use super::*;
use crate::domain::dataset::WalrStats;
use crate::domain::row::RowRecord;
use crate::engine::Upload;
use crate::engine::tests::{Fixture, fixture};
use crate::store::NewDataset;

/// A dataset of `rows` rows (one feature each) with ids from `first`.
async fn dataset(fixture: &Fixture, name: &str, rows: usize) -> DatasetRecord {
    let store = fixture.store.as_ref();
    let request: dpgate_api_types::CreateDataset = serde_json::from_value(serde_json::json!({
        "name": name, "privacy_unit": "label",
        "features": [{"name": "f", "min": 0, "max": 1}],
        "label": "y", "budget": {"epsilon": 1, "delta": 1e-6}
    }))
    .expect("a valid request");
    let record = DatasetRecord::new(&request, "2026-11-23T00:00:00Z".to_owned()).expect("valid");
    store
        .create_dataset(&NewDataset {
            record: record.clone(),
            actor: "admin".to_owned(),
        })
        .await
        .expect("created");
    append(fixture, &record, 0, rows).await
}

async fn append(
    fixture: &Fixture,
    record: &DatasetRecord,
    from: usize,
    rows: usize,
) -> DatasetRecord {
    let batch: Vec<RowRecord> = (from..from + rows)
        .map(|i| RowRecord {
            line: i as u64 + 2,
            row_id: format!("r{i:06}"),
            label: (i % 2) as u8,
            features: (i as f32 / 1e6).to_le_bytes().to_vec(),
            measures: vec![],
            dimensions: vec![],
            user: 0,
        })
        .collect();
    let mut session = Upload::begin(fixture.store.as_ref(), fixture.data.clone(), record)
        .await
        .expect("begins");
    session.insert(batch).await.expect("inserted");
    session
        .commit(rows as u64, &WalrStats::empty(1))
        .await
        .expect("committed")
}

/// Bytes one snapshot of `rows` rows of these datasets holds.
fn bytes_of(rows: usize) -> u64 {
    (rows * (7 + 8 + 1 + 4)) as u64
}

#[tokio::test]
async fn concurrent_releases_share_one_load() {
    let fixture = fixture().await;
    let record = dataset(&fixture, "one", 3000).await;
    let snapshots = Arc::new(Snapshots::new(
        fixture.store.clone(),
        fixture.data.clone(),
        1 << 30,
    ));
    let loads: Vec<_> = (0..8)
        .map(|_| {
            let (snapshots, record) = (snapshots.clone(), record.clone());
            tokio::spawn(async move { snapshots.load(&record).await })
        })
        .collect();
    let mut loaded = Vec::new();
    for load in loads {
        loaded.push(load.await.expect("joins").expect("loads").expect("fits"));
    }
    assert!(
        loaded
            .iter()
            .all(|columns| Arc::ptr_eq(columns, &loaded[0]))
    );
    assert_eq!(loaded[0].len(), 3000);
    assert_eq!(loaded[0].id(2999), "r002999");
    assert_eq!(loaded[0].labels()[2999], 1);
    assert_eq!(snapshots.held_bytes(), loaded[0].bytes() as u64);
    let held = snapshots.held(record.id, 3000).expect("held");
    assert!(Arc::ptr_eq(&held, &loaded[0]));
}

#[tokio::test]
async fn the_least_recently_used_snapshot_goes_first() {
    let fixture = fixture().await;
    let (a, b, c) = (
        dataset(&fixture, "a", 1000).await,
        dataset(&fixture, "b", 1000).await,
        dataset(&fixture, "c", 1000).await,
    );
    let bound = 2 * bytes_of(1000) + bytes_of(500);
    let snapshots = Snapshots::new(fixture.store.clone(), fixture.data.clone(), bound);
    for record in [&a, &b] {
        snapshots.load(record).await.expect("loads").expect("fits");
    }
    // Using a makes b the least recently used.
    assert!(snapshots.held(a.id, 1000).is_some());
    snapshots.load(&c).await.expect("loads").expect("fits");
    assert!(snapshots.held(b.id, 1000).is_none());
    assert!(snapshots.held(a.id, 1000).is_some() && snapshots.held(c.id, 1000).is_some());
    assert!(
        snapshots.held_bytes() <= bound,
        "{}",
        snapshots.held_bytes()
    );
}

#[tokio::test]
async fn a_snapshot_over_the_bound_is_streamed() {
    let fixture = fixture().await;
    let record = dataset(&fixture, "big", 2 * STREAM_ROWS + 10).await;
    for bound in [0, bytes_of(STREAM_ROWS)] {
        let snapshots = Snapshots::new(fixture.store.clone(), fixture.data.clone(), bound);
        assert!(snapshots.load(&record).await.expect("reads").is_none());
        let blocks: Vec<Columns> = snapshots
            .blocks(&record, true)
            .await
            .expect("streams")
            .map(|block| block.expect("a block"))
            .collect()
            .await;
        let sizes: Vec<usize> = blocks.iter().map(Columns::len).collect();
        assert_eq!(sizes, vec![STREAM_ROWS, STREAM_ROWS, 10]);
        assert_eq!(blocks[2].id(9), format!("r{:06}", 2 * STREAM_ROWS + 9));
        assert_eq!(snapshots.held_bytes(), 0);
    }
}

#[tokio::test]
async fn a_new_version_replaces_the_old_one() {
    let fixture = fixture().await;
    let old = dataset(&fixture, "growing", 100).await;
    let snapshots = Snapshots::new(fixture.store.clone(), fixture.data.clone(), 1 << 30);
    let first = snapshots.load(&old).await.expect("loads").expect("fits");
    let new = append(&fixture, &old, 100, 50).await;
    let added = snapshots.load(&new).await.expect("loads").expect("fits");
    assert_eq!((first.len(), added.len()), (100, 150));
    assert!(snapshots.held(old.id, 100).is_none());
    assert_eq!(snapshots.held_bytes(), added.bytes() as u64);
    // A release debited on the old version still reads exactly it, and
    // it is not kept beside the newer one.
    let again = snapshots.load(&old).await.expect("loads").expect("fits");
    assert_eq!(*again, *first);
    assert!(snapshots.held(old.id, 100).is_none());
    // A version kept by its upload counts like a loaded one.
    let kept = append(&fixture, &new, 150, 1).await;
    let merged = added
        .joined(&Columns::empty(added.shape(), true))
        .expect("joins");
    let bytes = merged.bytes() as u64;
    snapshots.keep(kept.id, 151, merged);
    assert!(snapshots.held(kept.id, 150).is_none());
    assert_eq!(snapshots.held_bytes(), bytes);
}
