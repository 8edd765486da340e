//! Prints the WALR figures quoted in `docs/client.md` and
//! `docs/walr-map.md`: test AUC of `dpgate-client train` on each feature
//! map (`none`, `centre`, `auto`) next to the non-private model — against ε
//! on synthetic data (N = 100,000, k = 16); at the small-N goal (N = 10,000,
//! k = 32, ε = 0.1, δ = N^−1.1, 20 releases per map) and at N = 1,000,000;
//! on the digits 4-vs-9 subset and the breast cancer set at ε ∈ {0.1, 1} —
//! and the training time at N = 1,000,000, k = 32, 10 epochs.
//!
//! `cargo run --release --example walr_figures [-- SETS_DIR]`, where
//! SETS_DIR is what `examples/sklearn_sets.py` writes (the real tables are
//! skipped without it). Everything runs against a real server on a random
//! port over SQLite; the noise is the server's (OS CSPRNG), so each cell is
//! a mean over releases.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use dpgate::api::{AppState, Limits};
use dpgate::domain::auth::{Keys, Role};
use dpgate::engine::DataDir;
use dpgate_client::cli::{Cli, run};
use dpgate_client::evaluate::evaluate;
use dpgate_client::model_file::ModelFile;
use dpgate_client::trainer::{NoisyDot, TrainerConfig, train};
use dpgate_client::{Client, UploadFormat};
use dpgate_learn::synthetic::logistic_data;
use dpgate_learn::{Objective, auc};
use ndarray::{Array1, Array2, s};

const EPSILONS: [f64; 4] = [0.01, 0.1, 1.0, 10.0];
const MAPS: [&str; 3] = ["none", "centre", "auto"];

/// A labelled table: row ids, 0/1 labels, raw features and their bounds.
struct Table {
    x: Array2<f64>,
    y: Vec<u8>,
    names: Vec<String>,
    max: f64,
}

impl Table {
    fn csv(&self) -> String {
        let mut out = format!("row_id,y,{}\n", self.names.join(","));
        for (i, row) in self.x.rows().into_iter().enumerate() {
            let values: Vec<String> = row.iter().map(f64::to_string).collect();
            out.push_str(&format!("r{i},{},{}\n", self.y[i], values.join(",")));
        }
        out
    }

    fn read(path: &Path, max: f64) -> Table {
        let mut reader = csv::Reader::from_path(path).expect("a table CSV");
        let names: Vec<String> = reader
            .headers()
            .expect("a header")
            .iter()
            .skip(2)
            .map(str::to_owned)
            .collect();
        let (mut values, mut y) = (Vec::new(), Vec::new());
        for record in reader.records() {
            let record = record.expect("a row");
            y.push(record[1].parse().expect("a label"));
            values.extend(
                record
                    .iter()
                    .skip(2)
                    .map(|v| v.parse::<f64>().expect("a number")),
            );
        }
        let x = Array2::from_shape_vec((y.len(), names.len()), values).expect("a matrix");
        Table { x, y, names, max }
    }
}

/// The non-private model's test AUC (Newton, λ = 1e-6, on the scaled
/// features with an intercept).
fn non_private_auc(train: &Table, test: &Table) -> f64 {
    let (n, k) = train.x.dim();
    let mut x = Array2::<f64>::ones((n, k + 1));
    x.slice_mut(s![.., ..k]).assign(&(&train.x / train.max));
    let y: Array1<f64> = train
        .y
        .iter()
        .map(|&l| if l == 1 { 1.0 } else { -1.0 })
        .collect();
    let objective = Objective {
        x: x.view(),
        y: y.view(),
        lambda: 1e-6,
        linear: None,
        normaliser: None,
    };
    let w = objective.minimise(1e-9).expect("the fit converges").weights;
    let scores = (&test.x / test.max).dot(&w.slice(s![..k])) + w[k];
    auc(&scores.to_vec(), &test.y).unwrap_or(f64::NAN)
}

struct Server {
    address: String,
    admin: Client,
    keys: Keys,
}

async fn server(dir: &Path) -> Server {
    let url = format!("sqlite://{}", dir.join("figures.db").display());
    let store = dpgate::store::connect(&url)
        .await
        .expect("the database opens");
    let keys = Keys::from_secret("figures-secret-of-at-least-thirty-two-bytes").expect("a key");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = format!("http://{}", listener.local_addr().expect("bound"));
    let limits = Limits {
        ingest_bytes: 1 << 34,
        ..Limits::default()
    };
    let data = Arc::new(DataDir::new(dir.join("data")));
    let state = AppState::new(store, data, keys.clone(), limits);
    tokio::spawn(async move { axum::serve(listener, dpgate::api::router(state)).await });
    let hour = Duration::from_secs(3600);
    let admin = Client::new(
        &address,
        Some(keys.mint(Role::Admin, "admin", &[], hour).expect("a token")),
    );
    Server {
        address,
        admin,
        keys,
    }
}

/// Creates and fills a dataset; an analyst token for it.
async fn load(server: &Server, name: &str, table: &Table) -> (uuid::Uuid, String) {
    let request = serde_json::from_value(serde_json::json!({
        "name": name, "privacy_unit": "label",
        "features": table.names.iter().map(|n| serde_json::json!({"name": n, "min": 0, "max": table.max})).collect::<Vec<_>>(),
        "label": "y",
        "budget": {"epsilon": 1000, "delta": 1e-2}, "accountant": "basic"
    }))
    .expect("a dataset");
    let dataset = server
        .admin
        .create_dataset(&request)
        .await
        .expect("created");
    server
        .admin
        .upload_rows(dataset.id, UploadFormat::Csv, table.csv())
        .await
        .expect("uploaded");
    let token = server
        .keys
        .mint(
            Role::Analyst,
            "analyst",
            &[dataset.id],
            Duration::from_secs(3600),
        )
        .expect("a token");
    (dataset.id, token)
}

async fn cli(server: &Server, token: &str, args: &[&str]) {
    let mut argv = vec![
        "dpgate-client",
        "--url",
        &server.address,
        "--token",
        token,
        "--json",
    ];
    argv.extend_from_slice(args);
    let mut out = Vec::new();
    run(Cli::try_parse_from(argv).expect("arguments"), &mut out)
        .await
        .expect("the command runs");
}

/// How a table's releases are made.
struct Plan<'a> {
    epsilons: &'a [f64],
    delta: f64,
    repeats: usize,
}

async fn table(
    server: &Server,
    dir: &Path,
    name: &str,
    train: &Table,
    test: &Table,
    plan: Plan<'_>,
) {
    let (dataset, token) = load(server, name, train).await;
    let test_csv = dir.join(format!("{name}-test.csv"));
    std::fs::write(&test_csv, test.csv()).expect("written");
    let (n, k) = train.x.dim();
    println!(
        "\n{name}: N = {n} train, {} test, k = {k}, δ = {:.3e} (mean test AUC ± s.e. of {} releases)",
        test.y.len(),
        plan.delta,
        plan.repeats
    );
    println!(
        "| ε | {} | non-private |\n|---|---|---|---|---|",
        MAPS.join(" | ")
    );
    let truth = non_private_auc(train, test);
    for &epsilon in plan.epsilons {
        let mut cells = Vec::new();
        for map in MAPS {
            let mut aucs = Vec::new();
            for repeat in 0..plan.repeats {
                let model: PathBuf = dir.join(format!("{name}-{epsilon}-{map}-{repeat}.json"));
                let args = [
                    "train",
                    "--dataset",
                    &dataset.to_string(),
                    "--epsilon",
                    &epsilon.to_string(),
                    "--delta",
                    &plan.delta.to_string(),
                    "--map",
                    map,
                    "--out",
                    model.to_str().expect("utf-8"),
                ];
                cli(server, &token, &args).await;
                let model = ModelFile::load(&model).expect("a model file");
                let file = std::fs::File::open(&test_csv).expect("the test set");
                aucs.push(
                    evaluate(&model, file, "y")
                        .expect("evaluated")
                        .auc
                        .unwrap_or(f64::NAN),
                );
            }
            let mean = aucs.iter().sum::<f64>() / aucs.len() as f64;
            let spread = aucs.iter().map(|a| (a - mean).powi(2)).sum::<f64>();
            let error = (spread / (aucs.len().max(2) - 1) as f64 / aucs.len() as f64).sqrt();
            cells.push(format!("{mean:.4} ± {error:.4}"));
        }
        println!("| {epsilon} | {} | {truth:.4} |", cells.join(" | "));
    }
}

fn synthetic(n: usize, k: usize, seed: u64) -> Table {
    let data = logistic_data(n, k, seed);
    Table {
        names: (0..k).map(|j| format!("f{j}")).collect(),
        x: data.x,
        y: data.y,
        max: 1.0,
    }
}

async fn timing(server: &Server, dir: &Path) {
    let (n, k) = (1_000_000, 32);
    let data = logistic_data(n, k, 43);
    let labels: Array1<f64> = data.y.iter().map(|&l| f64::from(l)).collect();
    let noisy = NoisyDot {
        dot: (data.x.t().dot(&labels) / n as f64).to_vec(),
        intercept: Some(labels.sum() / n as f64),
    };
    let config = TrainerConfig {
        epochs: Some(10),
        tolerance: 1e-300,
        ..TrainerConfig::default()
    };
    let started = Instant::now();
    let trained = train(data.x.view(), &noisy, &config, |_| {}).expect("trained");
    let trainer = started.elapsed();
    assert_eq!(trained.epochs.len(), 10);
    let table = Table {
        names: (0..k).map(|j| format!("f{j}")).collect(),
        x: data.x,
        y: data.y,
        max: 1.0,
    };
    let (dataset, token) = load(server, "timing", &table).await;
    let model = dir.join("timing.json");
    let started = Instant::now();
    let args = [
        "train",
        "--dataset",
        &dataset.to_string(),
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--epochs",
        "10",
        "--tolerance",
        "1e-300",
        "--out",
        model.to_str().expect("utf-8"),
    ];
    cli(server, &token, &args).await;
    let end_to_end = started.elapsed();
    println!("\nN = {n}, k = {k}, 10 epochs, batch 1024:");
    println!(
        "  trainer alone (in memory):                            {:>7.2} s",
        trainer.as_secs_f64()
    );
    println!(
        "  `dpgate-client train` (features download + release + training): {:>7.2} s",
        end_to_end.as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    let sets = std::env::args().nth(1).map(PathBuf::from);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = server(dir.path()).await;
    let paths = dir.path();
    let by_epsilon = Plan {
        epsilons: &EPSILONS,
        delta: 1e-6,
        repeats: 3,
    };
    table(
        &server,
        paths,
        "synthetic",
        &synthetic(100_000, 16, 41),
        &synthetic(100_000, 16, 42),
        by_epsilon,
    )
    .await;
    for (n, repeats) in [(10_000, 20), (1_000_000, 2)] {
        let plan = Plan {
            epsilons: &[0.1],
            delta: (n as f64).powf(-1.1),
            repeats,
        };
        let name = format!("goal-{n}");
        table(
            &server,
            paths,
            &name,
            &synthetic(n, 32, 15),
            &synthetic(100_000, 32, 16),
            plan,
        )
        .await;
    }
    if let Some(sets) = sets {
        for (name, bound, from) in [
            ("digits-4-vs-9", 16.0, sets.clone()),
            ("breast-cancer", 1.0, sets.join("breast-cancer")),
        ] {
            let train = Table::read(&from.join("train.csv"), bound);
            let test = Table::read(&from.join("test.csv"), bound);
            let plan = Plan {
                epsilons: &[0.1, 1.0],
                delta: 1e-6,
                repeats: 10,
            };
            table(&server, paths, name, &train, &test, plan).await;
        }
    }
    timing(&server, paths).await;
}
