//! End-to-end service figures, over HTTP against a real server in this
//! process:
//!
//! ```sh
//! cargo run --release --example service_bench                       # SQLite
//! cargo run --release --example service_bench -- postgres://postgres@127.0.0.1:5432/test
//! cargo run --release --example service_bench -- --parquet DIR --rows 1e8
//! ```
//!
//! `--parquet DIR`: a dataset registered in place from DIR's Parquet files
//! (written there first if it has none), against DuckDB; see `parquet.rs`.
//! Otherwise:
//!
//! 1. ingest of a generated CSV (1,000,000 rows × 32 features by default;
//!    set `BENCH_ROWS`, `BENCH_FEATURES`), and the database's own bulk
//!    loader on the same file where it is installed (`sqlite3 .import`,
//!    `psql \copy`, into a plain table);
//! 2. WALR release latency: the first release, the median of 20, then the
//!    spread of 200 (what an observer of response times sees), and what
//!    holding a 64-dimensional noise draw to its public deadline costs;
//! 3. the releases that read every row (both model learners, an aggregate
//!    of a count and a mean by two dimensions): warm (the upload kept the
//!    snapshot in memory), the fit alone in process, cold on a second
//!    server over the same database, and a snapshot load alone;
//! 4. releases per second with 32 concurrent analysts until the budget runs
//!    out;
//! 5. the latency of a refused model release on two datasets that differ
//!    in one label (it must not depend on the data: nothing is read);
//! 6. `dpgate-client train` end to end (download, release, train, save),
//!    and its parts in process: the Arrow download and the trainer alone.

// A benchmark driver: failing loudly on any error is what it should do.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dpgate::api::{AppState, Limits};
use dpgate::domain::auth::{Keys, Role};
use dpgate::engine::DataDir;
use dpgate::releases::kinds::model::{DesignBuilder, solve};
use dpgate::snapshots::Pass;
use dpgate::snapshots::Snapshots;
use dpgate_client::types::{
    AggregateParams, CreateDataset, Lambda, ObjectivePerturbationParams, OutputPerturbationParams,
    ReleaseParams, ReleaseRequest, WalrMap, WalrParams,
};
use dpgate_client::{Client, ReleaseOptions, UploadFormat};
use futures_util::StreamExt;

mod parquet;

const ANALYSTS: usize = 32;

/// WALR on the identity map (made from the running sums every upload
/// keeps; the default map, `auto`, passes over the rows).
fn identity_walr(epsilon: f64, delta: f64) -> ReleaseRequest {
    ReleaseRequest {
        params: ReleaseParams::Walr(WalrParams {
            map: Some(WalrMap::None),
            ..WalrParams::default()
        }),
        ..ReleaseRequest::walr(epsilon, delta)
    }
}

/// The benchmark's options.
#[derive(clap::Parser)]
struct Args {
    /// A Postgres URL to run on instead of SQLite (a scratch database is
    /// created in it).
    postgres: Option<String>,
    /// Register this directory's Parquet files in place instead (written
    /// there first if it has none).
    #[arg(long)]
    parquet: Option<std::path::PathBuf>,
    /// Rows to write into `--parquet`'s directory (1e8 allowed).
    #[arg(long, default_value = "1e8", value_parser = count)]
    rows: u64,
    /// Files to write them in.
    #[arg(long, default_value_t = 64)]
    files: usize,
    /// Timed runs of each `--parquet` release, after the first.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Steps of the `--parquet` DP-GD release.
    #[arg(long, default_value_t = 1)]
    steps: u32,
}

/// A count written as an integer or in scientific notation (`1e8`).
fn count(text: &str) -> Result<u64, String> {
    match text.parse::<f64>() {
        Ok(value) if value >= 1.0 && value.fract() == 0.0 && value < 2f64.powi(53) => {
            Ok(value as u64)
        }
        _ => Err(format!("{text:?} is not a positive whole number")),
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn write_csv(path: &std::path::Path, rows: usize, features: usize) -> u64 {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let names: Vec<String> = (0..features).map(|j| format!("f{j}")).collect();
    writeln!(
        file,
        "row_id,converted,{},value,campaign,device",
        names.join(",")
    )
    .unwrap();
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
        let value = next() % 10_000;
        let (campaign, device) = (next() % 4, next() % 3);
        line.push_str(&format!(
            ",{}.{:02},c{campaign},d{device}\n",
            value / 100,
            value % 100
        ));
        file.write_all(line.as_bytes()).unwrap();
    }
    file.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

async fn database(
    dir: &tempfile::TempDir,
    postgres: Option<String>,
) -> (String, Option<(String, String)>) {
    match postgres {
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

/// Median, 99th percentile and standard deviation.
fn spread(mut values: Vec<Duration>) -> (Duration, Duration, Duration) {
    values.sort();
    let n = values.len();
    let mean = values.iter().map(Duration::as_secs_f64).sum::<f64>() / n as f64;
    let variance = values
        .iter()
        .map(|value| (value.as_secs_f64() - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    (
        values[n / 2],
        values[(n * 99 / 100).min(n - 1)],
        Duration::from_secs_f64(variance.sqrt()),
    )
}

/// A copy of `csv` whose first row has the other label.
fn one_label_flipped(csv: &std::path::Path, out: &std::path::Path) {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let first = lines.next().unwrap();
    let (id, rest) = first.split_once(',').unwrap();
    let (label, features) = rest.split_once(',').unwrap();
    let flipped = if label == "1" { "0" } else { "1" };
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).unwrap());
    writeln!(file, "{header}\n{id},{flipped},{features}").unwrap();
    for line in lines {
        writeln!(file, "{line}").unwrap();
    }
    file.flush().unwrap();
}

/// What holding a 64-dimensional Gaussian draw to its deadline costs: the
/// draw's own median time against the public budget it is held to.
fn pacing_cost() {
    let mechanism = dpgate::dp::Mechanism::gaussian(
        dpgate::dp::Epsilon::new(1.0).unwrap(),
        dpgate::dp::Delta::new(1e-6).unwrap(),
        1e-3,
        64,
        1.0,
    )
    .unwrap();
    let zeros = vec![0.0; 64];
    let draws: Vec<Duration> = (0..500)
        .map(|_| {
            let started = Instant::now();
            mechanism
                .release(&zeros, &mut dpgate::dp::OsNoise::new())
                .unwrap();
            started.elapsed()
        })
        .collect();
    let (draw, p99, _) = spread(draws);
    let budget = dpgate::releases::pacing::budget(&mechanism);
    println!(
        "64-dim gaussian draw: median {draw:.2?}, p99 {p99:.2?}; held to {budget:.2?}: \
         {:.2?} more latency per release, no more CPU",
        budget.saturating_sub(draw)
    );
}

/// The plain table a native loader fills: one typed column per CSV column.
fn plain_table(features: usize) -> String {
    let columns: Vec<String> = (0..features).map(|j| format!("f{j} REAL")).collect();
    format!(
        "CREATE TABLE native (row_id TEXT, converted INTEGER, {}, value REAL, campaign TEXT, \
         device TEXT)",
        columns.join(", ")
    )
}

/// Runs `command`, or says why not; its time when it ran and succeeded.
fn timed_command(command: &mut std::process::Command) -> Option<Duration> {
    let started = Instant::now();
    match command.output() {
        Ok(output) if output.status.success() => Some(started.elapsed()),
        Ok(output) => {
            println!(
                "{command:?} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
            None
        }
        Err(error) => {
            println!("{:?} not run: {error}", command.get_program());
            None
        }
    }
}

/// The database's own bulk loader on `csv`, into a plain table of a fresh
/// database file (SQLite) or of the bench database (Postgres): its time.
fn native_load(csv: &std::path::Path, features: usize, postgres: Option<&str>) -> Option<Duration> {
    let table = plain_table(features);
    match postgres {
        None => {
            let script = csv.with_file_name("native.sql");
            let commands = format!(
                "{table};\n.mode csv\n.import --skip 1 {} native\n",
                csv.display()
            );
            std::fs::write(&script, commands).unwrap();
            let mut command = std::process::Command::new("sqlite3");
            command
                .arg(csv.with_file_name("native.db"))
                .stdin(std::fs::File::open(&script).unwrap());
            timed_command(&mut command)
        }
        Some(url) => {
            timed_command(std::process::Command::new("psql").args([url, "-qc", &table]))?;
            let copy = format!(
                "\\copy native FROM '{}' WITH (FORMAT csv, HEADER true)",
                csv.display()
            );
            timed_command(std::process::Command::new("psql").args([url, "-qc", &copy]))
        }
    }
}

/// Uploads `csv` into a new dataset of `features` features and budget ε.
async fn loaded(
    admin: &Client,
    name: &str,
    features: usize,
    epsilon: f64,
    csv: &std::path::Path,
) -> uuid::Uuid {
    let request: CreateDataset = serde_json::from_value(serde_json::json!({
        "name": name, "privacy_unit": "label",
        "features": (0..features).map(|j| serde_json::json!({"name": format!("f{j}"), "min": 0, "max": 1})).collect::<Vec<_>>(),
        "label": "converted",
        "measures": [{"name": "value", "min": 0, "max": 100}],
        "dimensions": [
            {"name": "campaign", "values": ["c0", "c1", "c2", "c3"]},
            {"name": "device", "values": ["d0", "d1", "d2"]}
        ],
        "budget": {"epsilon": epsilon, "delta": 1e-3}, "accountant": "basic"
    }))
    .unwrap();
    let dataset = admin.create_dataset(&request).await.unwrap();
    let file = tokio::fs::File::open(csv).await.unwrap();
    let body =
        reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    admin
        .upload_rows(dataset.id, UploadFormat::Csv, body)
        .await
        .unwrap();
    dataset.id
}

/// Uploads of up to 16 GiB, snapshots cached as by default.
fn bench_limits() -> Limits {
    Limits {
        ingest_bytes: 1 << 34,
        ..Limits::default()
    }
}

/// A server over `store` on a random port: its snapshots and address.
async fn serve(
    store: Arc<dyn dpgate::store::Store>,
    data: &Arc<DataDir>,
    keys: &Keys,
    limits: Limits,
) -> (Arc<Snapshots>, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let state = AppState::new(store, data.clone(), keys.clone(), limits);
    let snapshots = state.snapshots.clone();
    tokio::spawn(async move {
        axum::serve(listener, dpgate::api::router(state))
            .await
            .unwrap()
    });
    (snapshots, address)
}

/// The releases that read every row.
fn heavy_releases() -> [(&'static str, ReleaseRequest); 3] {
    [
        (
            "model/output-perturbation",
            ReleaseRequest {
                epsilon: Some(1.0),
                delta: None,
                params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    lambda: Lambda::Fixed(1e-4),
                    fit_intercept: true,
                }),
            },
        ),
        (
            "model/objective-perturbation",
            ReleaseRequest {
                epsilon: Some(1.0),
                delta: None,
                params: ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                    lambda: Lambda::Fixed(1e-4),
                    fit_intercept: true,
                }),
            },
        ),
        (
            "aggregate count, mean:value by campaign × device",
            ReleaseRequest {
                epsilon: Some(1.0),
                delta: Some(1e-9),
                params: ReleaseParams::Aggregate(AggregateParams {
                    statistics: vec!["count".to_owned(), "mean:value".to_owned()],
                    group_by: vec!["campaign".to_owned(), "device".to_owned()],
                    mechanism: dpgate_client::types::AggregateMechanism::Gaussian,
                    target_std: None,
                }),
            },
        ),
    ]
}

/// The fit of the warm output-perturbation release, in process on the
/// snapshot the server holds (the time a release cannot beat), against
/// the release over HTTP: medians of three each.
async fn fit_in_process(
    snapshots: &Snapshots,
    admin: &Client,
    analyst: &Client,
    id: uuid::Uuid,
    request: &ReleaseRequest,
) {
    // An admin's view: N is always in it.
    let n_rows = admin
        .dataset(id)
        .await
        .unwrap()
        .n_rows
        .expect("an admin sees N");
    let columns = snapshots.held(id, n_rows).expect("the upload kept it");
    let (mut built, mut fitted, mut released) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        let started = Instant::now();
        let mut builder = DesignBuilder::new(columns.shape().features, n_rows, true);
        builder.visit(&columns).unwrap();
        let design = builder.build().unwrap();
        built.push(started.elapsed());
        let started = Instant::now();
        solve(&design, 1e-4, None, None).unwrap();
        fitted.push(started.elapsed());
        drop(design);
        let started = Instant::now();
        analyst
            .release(id, request, &ReleaseOptions::default())
            .await
            .unwrap();
        released.push(started.elapsed());
    }
    let (built, fitted, released) = (median(built), median(fitted), median(released));
    println!(
        "in process: design from the snapshot {built:.2?}, fit (λ = 1e-4) {fitted:.2?}; the \
         warm release over HTTP {released:.2?} = {:.2} × in process (medians of 3)",
        released.as_secs_f64() / (built + fitted).as_secs_f64()
    );
}

/// `dpgate-client train` end to end, as its CLI runs it, then its parts in
/// process: the Arrow download and decode, and the trainer alone for 10
/// epochs on the same rows.
async fn train_figures(address: &str, token: &str, dataset: uuid::Uuid, dir: &std::path::Path) {
    use clap::Parser;
    use dpgate_client::features::{FeatureTable, Scaling};
    use dpgate_client::trainer::{NoisyDot, TrainerConfig, train};
    let out = dir.join("model.json");
    let id = dataset.to_string();
    for epochs in [None, Some("10")] {
        let mut args = vec![
            "dpgate-client",
            "--url",
            address,
            "--token",
            token,
            "--json",
            "train",
            "--dataset",
            &id,
            "--epsilon",
            "1",
            "--delta",
            "1e-9",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(epochs.iter().flat_map(|epochs| ["--epochs", epochs]));
        let cli = dpgate_client::cli::Cli::parse_from(args);
        let started = Instant::now();
        let mut printed = Vec::new();
        dpgate_client::cli::run(cli, &mut printed).await.unwrap();
        let end_to_end = started.elapsed();
        let summary: serde_json::Value = serde_json::from_slice(&printed).unwrap();
        let training = &summary["model"]["training"];
        println!(
            "dpgate-client train{} end to end (download, release, train, save): \
             {end_to_end:.2?} ({} epochs, converged: {})",
            epochs.map_or(String::new(), |epochs| format!(" --epochs {epochs}")),
            training["epochs"],
            training["converged"]
        );
    }

    let client = Client::new(address, Some(token.to_owned()));
    let started = Instant::now();
    let bytes = client.features_arrow(dataset, |_| {}).await.unwrap();
    let table = FeatureTable::from_arrow(&bytes[..]).unwrap();
    println!(
        "features as Arrow ({:.1} MB): downloaded and decoded in {:.2?}",
        bytes.len() as f64 / 1e6,
        started.elapsed()
    );
    let view = client.dataset(dataset).await.unwrap();
    let scaled = Scaling::declared(&view.features).scale(table.x);
    // The trainer below fits the raw scaled features: the identity.
    let walr = identity_walr(1.0, 1e-9);
    let release = client
        .release(dataset, &walr, &ReleaseOptions::default())
        .await
        .unwrap()
        .release;
    let Some(dpgate_client::types::ReleaseResult::Walr(result)) = release.result else {
        panic!("a walr release without its vectors");
    };
    let noisy = NoisyDot {
        dot: result.noisy_dot,
        intercept: result.noisy_intercept,
    };
    let config = TrainerConfig {
        epochs: Some(10),
        tolerance: f64::MIN_POSITIVE,
        ..TrainerConfig::default()
    };
    let started = Instant::now();
    let trained = train(scaled.view(), &noisy, &config, |_| {}).unwrap();
    println!(
        "trainer alone: {} epochs in {:.2?}",
        trained.epochs.len(),
        started.elapsed()
    );
}

#[tokio::main]
async fn main() {
    let args = <Args as clap::Parser>::parse();
    if let Some(dir) = &args.parquet {
        let options = parquet::Options {
            dir,
            rows: args.rows,
            files: args.files,
            runs: args.runs,
            steps: args.steps,
        };
        return parquet::run(options).await;
    }
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

    let (url, postgres) = database(&dir, args.postgres).await;
    let store = dpgate::store::connect(&url).await.unwrap();
    let keys = Keys::from_secret("bench-secret-of-at-least-thirty-two-bytes").unwrap();
    let data = Arc::new(DataDir::new(dir.path().join("data")));
    let (snapshots, address) = serve(store.clone(), &data, &keys, bench_limits()).await;
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

    // The native loader first: the VACUUM that follows a large upload to
    // Postgres would otherwise run beside it.
    let native = native_load(&csv, features, postgres.as_ref().map(|_| url.as_str()));
    let started = Instant::now();
    let id = loaded(&admin, "bench", features, 1000.0, &csv).await;
    let ingest = started.elapsed();
    let dataset = admin.dataset(id).await.unwrap();
    let n_rows = dataset.n_rows.expect("an admin sees N");
    println!(
        "ingest: {} rows in {:.2?} ({:.0} rows/s, {:.1} MB/s)",
        n_rows,
        ingest,
        n_rows as f64 / ingest.as_secs_f64(),
        bytes as f64 / 1e6 / ingest.as_secs_f64()
    );
    if let Some(native) = native {
        let loader = if postgres.is_some() {
            "psql \\copy"
        } else {
            "sqlite3 .import"
        };
        println!(
            "{loader} of the same file into a plain table: {native:.2?}; ingest / native = {:.2}",
            ingest.as_secs_f64() / native.as_secs_f64()
        );
    }

    let analyst = admin.with_token(
        &keys
            .mint(Role::Analyst, "ana", &[dataset.id], hour)
            .unwrap(),
    );
    let walr = identity_walr(0.01, 1e-9);
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
    let mut many = Vec::new();
    for _ in 0..200 {
        many.push(timed().await);
    }
    let (middle, p99, std) = spread(many);
    println!("walr response time over 200: median {middle:.2?}, p99 {p99:.2?}, std {std:.2?}");
    pacing_cost();

    // Releases that read every row, each timed end to end over HTTP: warm
    // (the upload kept the snapshot in memory), then cold on a second
    // server over the same database (its first release loads the snapshot).
    let heavy = heavy_releases();
    for (name, request) in &heavy {
        let started = Instant::now();
        analyst
            .release(dataset.id, request, &options)
            .await
            .unwrap();
        println!("warm {name}: {:.2?} for {rows} rows", started.elapsed());
    }
    let mut aggregates = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        analyst
            .release(dataset.id, &heavy[2].1, &options)
            .await
            .unwrap();
        aggregates.push(started.elapsed());
    }
    println!(
        "warm {}: median of 20 {:.2?}",
        heavy[2].0,
        median(aggregates)
    );
    fit_in_process(&snapshots, &admin, &analyst, dataset.id, &heavy[0].1).await;
    let (cold, cold_address) = serve(store.clone(), &data, &keys, bench_limits()).await;
    let cold_analyst = Client::new(
        &cold_address,
        Some(
            keys.mint(Role::Analyst, "ana", &[dataset.id], hour)
                .unwrap(),
        ),
    );
    let started = Instant::now();
    cold_analyst
        .release(dataset.id, &heavy[0].1, &options)
        .await
        .unwrap();
    println!(
        "cold {}: {:.2?} (the snapshot loaded in it)",
        heavy[0].0,
        started.elapsed()
    );
    let started = Instant::now();
    cold_analyst
        .release(dataset.id, &heavy[0].1, &options)
        .await
        .unwrap();
    println!("then warm on that server: {:.2?}", started.elapsed());
    drop(cold);
    let started = Instant::now();
    let record = store.dataset(dataset.id).await.unwrap().unwrap();
    let loads = dpgate::snapshots::Snapshots::new(store.clone(), data.clone(), u64::MAX);
    let snapshot = loads.load(&record).await.unwrap().unwrap();
    println!(
        "snapshot load alone: {} rows, {:.0} MB, in {:.2?}",
        snapshot.len(),
        snapshot.bytes() as f64 / 1e6,
        started.elapsed()
    );

    // Budget for exactly 2,000 more releases of ε = 0.01 (basic): 32
    // analysts race until every one of them is refused.
    let sample = dir.path().join("sample.csv");
    let head: String = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .take(10_001)
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(&sample, head).unwrap();
    let target = loaded(&admin, "throughput", features, 20.0, &sample).await;
    let made = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks = futures_util::stream::iter(0..ANALYSTS)
        .map(|index| {
            let client = admin.with_token(
                &keys
                    .mint(Role::Analyst, &format!("a{index}"), &[target], hour)
                    .unwrap(),
            );
            let made = made.clone();
            let walr = walr.clone();
            tokio::spawn(async move {
                while client
                    .release(target, &walr, &ReleaseOptions::default())
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

    // Refused model releases on two datasets that differ in one label:
    // each has spent its whole budget, so the release is refused before any
    // row is read, and its latency cannot depend on the data.
    let flipped = dir.path().join("flipped.csv");
    one_label_flipped(&csv, &flipped);
    let mut refused = Vec::new();
    for (name, path) in [("refused-a", &csv), ("refused-b", &flipped)] {
        let id = loaded(&admin, name, features, 1.0, path).await;
        let client = admin.with_token(&keys.mint(Role::Analyst, "ana", &[id], hour).unwrap());
        let spend = ReleaseRequest::walr(1.0, 1e-6);
        client.release(id, &spend, &options).await.unwrap();
        refused.push((name, id, client));
    }
    let model = ReleaseRequest {
        epsilon: Some(0.5),
        delta: None,
        params: ReleaseParams::OutputPerturbation(OutputPerturbationParams {
            lambda: Lambda::Fixed(1e-4),
            fit_intercept: true,
        }),
    };
    let mut times = vec![Vec::new(), Vec::new()];
    for _ in 0..300 {
        for (index, (_, id, client)) in refused.iter().enumerate() {
            let started = Instant::now();
            let error = client.release(*id, &model, &options).await.unwrap_err();
            times[index].push(started.elapsed());
            assert_eq!(
                error.problem_type(),
                Some(dpgate_client::types::ProblemType::BudgetExhausted)
            );
        }
    }
    for ((name, ..), times) in refused.iter().zip(times) {
        let (middle, p99, std) = spread(times);
        println!(
            "refused model release on {name} ({rows} rows): median {middle:.2?}, p99 {p99:.2?}, \
             std {std:.2?}"
        );
    }

    let trainer = keys
        .mint(Role::Analyst, "trainer", &[dataset.id], hour)
        .unwrap();
    train_figures(&address, &trainer, dataset.id, dir.path()).await;

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
