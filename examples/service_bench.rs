//! End-to-end service figures, over HTTP against a real server in this
//! process:
//!
//! ```sh
//! cargo run --release --example service_bench                       # SQLite
//! cargo run --release --example service_bench -- postgres://postgres@127.0.0.1:5432/test
//! ```
//!
//! 1. ingest of a generated CSV (1,000,000 rows × 32 features by default;
//!    set `BENCH_ROWS`, `BENCH_FEATURES`);
//! 2. WALR release latency: the first release, then the median of 20;
//! 3. releases per second with 32 concurrent analysts until the budget runs
//!    out.

// A benchmark driver: failing loudly on any error is what it should do.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dpgate::app::{AppState, Limits};
use dpgate::auth::{Keys, Role};
use dpgate_client::types::{CreateDataset, ReleaseRequest};
use dpgate_client::{Client, ReleaseOptions, UploadFormat};
use futures_util::StreamExt;

const ANALYSTS: usize = 32;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn write_csv(path: &std::path::Path, rows: usize, features: usize) -> u64 {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let names: Vec<String> = (0..features).map(|j| format!("f{j}")).collect();
    writeln!(file, "row_id,converted,{}", names.join(",")).unwrap();
    // A deterministic stream of features in [0, 1] and labels at a 20% rate.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut line = String::new();
    for index in 0..rows {
        line.clear();
        let label = u8::from(next() % 5 == 0);
        line.push_str(&format!("r{index},{label}"));
        for _ in 0..features {
            line.push_str(&format!(
                ",{:.6}",
                (next() % 1_000_000) as f64 / 1_000_000.0
            ));
        }
        line.push('\n');
        file.write_all(line.as_bytes()).unwrap();
    }
    file.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

async fn database(dir: &tempfile::TempDir) -> (String, Option<(String, String)>) {
    match std::env::args().nth(1) {
        None => (
            format!("sqlite://{}", dir.path().join("bench.db").display()),
            None,
        ),
        Some(base) => {
            let name = format!("dpgate_bench_{}", uuid::Uuid::new_v4().simple());
            let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&base)
                .await
                .unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await
                .unwrap();
            let (prefix, _) = base.rsplit_once('/').unwrap();
            (format!("{prefix}/{name}"), Some((base, name)))
        }
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let rows = env_number("BENCH_ROWS", 1_000_000);
    let features = env_number("BENCH_FEATURES", 32);
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rows.csv");
    let started = Instant::now();
    let bytes = write_csv(&csv, rows, features);
    println!(
        "generated {rows} rows × {features} features: {:.1} MB in {:.1?}",
        bytes as f64 / 1e6,
        started.elapsed()
    );

    let (url, postgres) = database(&dir).await;
    let store = dpgate::store::connect(&url).await.unwrap();
    let keys = Keys::from_secret("bench-secret-of-at-least-thirty-two-bytes").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let state = AppState::new(
        store,
        keys.clone(),
        Limits {
            ingest_bytes: 1 << 34,
            ..Limits::default()
        },
    );
    tokio::spawn(async move {
        axum::serve(listener, dpgate::api::router(state))
            .await
            .unwrap()
    });
    let hour = Duration::from_secs(3600);
    let admin = Client::new(
        &address,
        Some(keys.mint(Role::Admin, "admin", &[], hour).unwrap()),
    );
    println!(
        "backend: {}",
        if postgres.is_some() {
            "postgres"
        } else {
            "sqlite"
        }
    );

    let request: CreateDataset = serde_json::from_value(serde_json::json!({
        "name": "bench", "privacy_unit": "label",
        "features": (0..features).map(|j| serde_json::json!({"name": format!("f{j}"), "min": 0, "max": 1})).collect::<Vec<_>>(),
        "label": "converted",
        "budget": {"epsilon": 1000, "delta": 1e-3}, "accountant": "basic"
    }))
    .unwrap();
    let dataset = admin.create_dataset(&request).await.unwrap();
    let file = tokio::fs::File::open(&csv).await.unwrap();
    let body =
        reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    let started = Instant::now();
    let report = admin
        .upload_rows(dataset.id, UploadFormat::Csv, body)
        .await
        .unwrap();
    let ingest = started.elapsed();
    println!(
        "ingest: {} rows in {:.2?} ({:.0} rows/s, {:.1} MB/s)",
        report.rows_added,
        ingest,
        report.rows_added as f64 / ingest.as_secs_f64(),
        bytes as f64 / 1e6 / ingest.as_secs_f64()
    );

    let analyst = admin.with_token(
        &keys
            .mint(Role::Analyst, "ana", &[dataset.id], hour)
            .unwrap(),
    );
    let walr = ReleaseRequest::Walr {
        epsilon: 0.01,
        delta: Some(1e-9),
        intercept: true,
        features: None,
    };
    let options = ReleaseOptions::default();
    let timed = || async {
        let started = Instant::now();
        analyst.release(dataset.id, &walr, &options).await.unwrap();
        started.elapsed()
    };
    let first = timed().await;
    let mut repeated = Vec::new();
    for _ in 0..20 {
        repeated.push(timed().await);
    }
    println!(
        "walr latency: first {first:.2?}, repeated median of 20 {:.2?}",
        median(repeated)
    );

    // Releases that read every row: a model fit (both learners) and an
    // aggregate, each timed end to end over HTTP.
    let heavy = [
        (
            "model/output-perturbation",
            ReleaseRequest::OutputPerturbation {
                epsilon: 1.0,
                delta: None,
                lambda: 1e-4,
                fit_intercept: true,
            },
        ),
        (
            "model/objective-perturbation",
            ReleaseRequest::ObjectivePerturbation {
                epsilon: 1.0,
                delta: None,
                lambda: 1e-4,
                fit_intercept: true,
            },
        ),
        (
            "aggregate mean:converted",
            ReleaseRequest::Aggregate {
                epsilon: 1.0,
                delta: Some(1e-9),
                statistics: vec!["mean:converted".to_owned()],
                group_by: vec![],
                mechanism: dpgate_client::types::AggregateMechanism::Gaussian,
            },
        ),
    ];
    for (name, request) in heavy {
        let started = Instant::now();
        analyst
            .release(dataset.id, &request, &options)
            .await
            .unwrap();
        println!("{name}: {:.2?} for {rows} rows", started.elapsed());
    }

    // Budget for exactly 2,000 more releases of ε = 0.01 (basic): 32
    // analysts race until every one of them is refused.
    let throughput: CreateDataset = serde_json::from_value(serde_json::json!({
        "name": "throughput", "privacy_unit": "label",
        "features": (0..features).map(|j| serde_json::json!({"name": format!("f{j}"), "min": 0, "max": 1})).collect::<Vec<_>>(),
        "label": "converted",
        "budget": {"epsilon": 20, "delta": 1e-3}, "accountant": "basic"
    }))
    .unwrap();
    let target = admin.create_dataset(&throughput).await.unwrap();
    let sample: String = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .take(10_001)
        .map(|line| format!("{line}\n"))
        .collect();
    admin
        .upload_rows(target.id, UploadFormat::Csv, sample)
        .await
        .unwrap();
    let made = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks = futures_util::stream::iter(0..ANALYSTS)
        .map(|index| {
            let client = admin.with_token(
                &keys
                    .mint(Role::Analyst, &format!("a{index}"), &[target.id], hour)
                    .unwrap(),
            );
            let made = made.clone();
            let walr = walr.clone();
            tokio::spawn(async move {
                while client
                    .release(target.id, &walr, &ReleaseOptions::default())
                    .await
                    .is_ok()
                {
                    made.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect::<Vec<_>>()
        .await;
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let made = made.load(Ordering::Relaxed);
    println!(
        "throughput: {made} releases by {ANALYSTS} concurrent analysts in {elapsed:.2?}: {:.0} releases/s",
        made as f64 / elapsed.as_secs_f64()
    );

    if let Some((base, name)) = postgres {
        let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&base)
            .await
            .unwrap();
        let drop_database = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        sqlx::query(sqlx::AssertSqlSafe(drop_database))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}
