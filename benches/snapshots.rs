//! Cold snapshot loads: `cargo bench --bench snapshots`.
//!
//! A dataset of 1,000,000 rows × 32 features, a measure and two dimensions
//! (set `BENCH_ROWS` for fewer), stored in a SQLite file, or in a scratch
//! Postgres database (created, then dropped) when `BENCH_POSTGRES_URL`
//! names a server's database. Each iteration loads the snapshot into a
//! fresh cache: one streaming read of the stored blocks, decoded into
//! columns.

// Benchmark set-up only unwraps what a working store returns.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpgate::domain::dataset::{DatasetRecord, WalrStats};
use dpgate::domain::row::RowRecord;
use dpgate::engine::{DataDir, Upload};
use dpgate::snapshots::Snapshots;
use dpgate::store::{NewDataset, Store};

mod common;

use common::FEATURES;

/// Rows per insert while setting up.
const BATCH: usize = 10_000;

fn rows() -> usize {
    std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000)
}

/// The row `index`: features spread over [0, 1], a 20% label rate.
fn row(index: usize) -> RowRecord {
    let features = (0..FEATURES)
        .flat_map(|j| (((index * 31 + j * 7) % 1000) as f32 / 1000.0).to_le_bytes())
        .collect();
    RowRecord {
        line: index as u64 + 2,
        row_id: format!("r{index}"),
        label: u8::from(index.is_multiple_of(5)),
        features,
        measures: ((index % 100) as f64).to_le_bytes().to_vec(),
        dimensions: [(index % 4) as u32, (index % 3) as u32]
            .iter()
            .flat_map(|code| code.to_le_bytes())
            .collect(),
        user: 0,
    }
}

async fn stored(store: &dyn Store, data: &Arc<DataDir>, rows: usize) -> DatasetRecord {
    let request = serde_json::from_value(common::request("snapshot-bench")).unwrap();
    let record = DatasetRecord::new(&request, "2026-11-24T00:00:00Z".to_owned()).unwrap();
    store
        .create_dataset(&NewDataset {
            record: record.clone(),
            actor: "bench".to_owned(),
        })
        .await
        .unwrap();
    let mut session = Upload::begin(store, data.clone(), &record).await.unwrap();
    for start in (0..rows).step_by(BATCH) {
        let batch: Vec<RowRecord> = (start..rows.min(start + BATCH)).map(row).collect();
        session.insert(batch).await.unwrap();
    }
    session
        .commit(rows as u64, &WalrStats::empty(FEATURES))
        .await
        .unwrap()
}

/// Creates or drops the scratch database `name` through `base`.
async fn scratch(base: &str, statement: &str) {
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(base)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .execute(&mut admin)
        .await
        .unwrap();
}

fn loads(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let postgres = std::env::var("BENCH_POSTGRES_URL").ok();
    let name = format!("dpgate_snapshot_bench_{}", uuid::Uuid::new_v4().simple());
    let url = match &postgres {
        Some(base) => {
            runtime.block_on(scratch(base, &format!("CREATE DATABASE {name}")));
            let (server, _) = base.rsplit_once('/').unwrap();
            format!("{server}/{name}")
        }
        None => format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("snapshots.db").display()
        ),
    };
    let rows = rows();
    let data = Arc::new(DataDir::new(dir.path().join("data")));
    let (store, record) = runtime.block_on(async {
        let store = dpgate::store::connect(&url).await.unwrap();
        let record = stored(store.as_ref(), &data, rows).await;
        (store, record)
    });
    let backend = if postgres.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    let mut group = c.benchmark_group("snapshot_load");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.throughput(Throughput::Elements(rows as u64));
    group.bench_function(format!("{backend}_{rows}_rows_{FEATURES}_features"), |b| {
        b.iter(|| {
            runtime.block_on(async {
                let cache = Snapshots::new(Arc::clone(&store), data.clone(), u64::MAX);
                let columns = cache.load(&record).await.unwrap().unwrap();
                assert_eq!(columns.len(), rows);
            })
        })
    });
    group.finish();
    drop(store);
    if let Some(base) = &postgres {
        let drop_database = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        runtime.block_on(scratch(base, &drop_database));
    }
}

criterion_group!(benches, loads);
criterion_main!(benches);
