//! The seeds' tables through the API (LEARNERS.md, "Results").
//!
//! `cargo run --release --example learner_figures [-- SEEDS]` (default
//! 200): seed 000, DP-GD test accuracy with and without a public warm
//! start, against ε, on the seed's setup: 400 private rows of two 2-D
//! Gaussians, 30% positives, C = 1, δ = 1e-5; config A (T = 50, α = 1) and
//! B (T = 200, α = 4).
//!
//! `cargo run --release --example learner_figures -- sgd [SEEDS]` (default
//! 4): seed 004, one-pass DP-SGD test error with and without a random
//! projection, against ε, on an MNIST-4-vs-9-sized proxy (11,791 rows ×
//! 784 features in [0, 1], noisy views of 10 latent factors, the label
//! from the first; λ = 1e-4, C = 1, η₀ = 1).
//!
//! `cargo run --release --example learner_figures -- fw [SEEDS]` (default
//! 20): seed 001, DP Frank-Wolfe's test SSE against the number of source
//! datasets K, on LEARNERS.md's mirror: y = x₁ + x₂ + 1 + N(0, 1), target
//! x ~ U(0, 5)², each source x ~ U(a, a + 5)² with its own a ~ U(−2.5, 2.5),
//! 500 rows each (features declared on [−2.5, 7.5], y on [−8, 20]); T = 50,
//! r = 1, δ = 1e-6; SSE over 50 fresh target rows (noise floor ≈ 50).
//!
//! `cargo run --release --example learner_figures -- lasso [SEEDS]`
//! (default 4): seed 004's distributed DP Lasso, `dpgate-client
//! train-lasso` over 3 holders against the pooled data and one holder
//! alone, on the DP-SGD proxy (784 features); T = 100, η = 0.5, λ = 1e-3,
//! C = 1, δ = 1e-6; test error on 2,000 fresh rows.
//!
//! `cargo run --release --example learner_figures -- auto [DRAWS]`
//! (default 3): `"lambda": "auto"` through the API at N = 10⁶ × 32, ε = 1
//! (issue 29's first target): the synthetic generator (`learn::synthetic`,
//! 20 % positives) uploaded as CSV, output perturbation (pure and
//! Gaussian) and objective perturbation released with no `lambda`, and
//! λ = 0.01 for contrast; test accuracy on 10⁵ fresh rows, the mean over
//! DRAWS releases each.
//!
//! `cargo run --release --example learner_figures -- select BREAST_DIR
//! [DRAWS]` (default 20): objective perturbation through the API where
//! `"auto"` falls furthest short of the best fixed λ (docs/models.md,
//! "Choosing λ"): `auto` against `{"select": [0.1, 0.01, 0.001, 0.0001]}`
//! at the same ε, on the synthetic generator (k = 32) at N = 10³ and 10⁴
//! and on breast cancer (`examples/sklearn_sets.py`), DRAWS releases each.
//!
//! Each seed is a dataset of its own on a server in this process
//! (SQLite in a temporary directory); every cell is a real release, its
//! noise from the OS CSPRNG, scored on 20,000 fresh rows. The warm starts
//! are fitted without privacy on 2,000 public rows of the same
//! distribution, or of a shifted one (the positive class's mean moved by
//! (0.5, −0.5)).

// A figures driver: failing loudly on any error is what it should do.
#![allow(clippy::unwrap_used)]

#[path = "common/serve.rs"]
mod serve;

use std::time::Duration;

use dpgate::domain::auth::Role;
use dpgate_client::types::{
    CreateDataset, DpGdParams, DpSgdParams, FrankWolfeParams, Iterate, ProjectionParams,
    ReleaseParams, ReleaseRequest, ReleaseResult, Selection, WarmStart,
};
use dpgate_client::{Client, ReleaseOptions, UploadFormat};
use dpgate_learn::Objective;
use ndarray::{Array1, Array2};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use serve::{analyst, serve};

const EPSILONS: [f64; 8] = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 150.0];
const BOUNDS: (f64, f64) = (-4.0, 5.0);

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let (u, v): (f64, f64) = (rng.random(), rng.random());
    (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// `n` raw rows: class 1 (30%) centred at (1, 1) + `shift`, class 0 at the
/// origin, unit variance, clamped into the declared bounds.
fn rows(rng: &mut ChaCha8Rng, n: usize, shift: [f64; 2]) -> (Array2<f64>, Vec<u8>) {
    let mut x = Array2::zeros((n, 2));
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let label = u8::from(rng.random_bool(0.3));
        for j in 0..2 {
            let raw = f64::from(label) + shift[j] * f64::from(label) + normal(rng);
            x[[i, j]] = raw.clamp(BOUNDS.0, BOUNDS.1);
        }
        y.push(label);
    }
    (x, y)
}

/// The non-private logistic fit on raw rows: (weights, intercept).
fn public_model(x: &Array2<f64>, y: &[u8]) -> WarmStart {
    let n = x.nrows();
    let mut design = Array2::ones((n, 3));
    design.slice_mut(ndarray::s![.., ..2]).assign(x);
    let labels: Array1<f64> = y.iter().map(|&l| 2.0 * f64::from(l) - 1.0).collect();
    let fit = Objective {
        x: design.view(),
        y: labels.view(),
        lambda: 1e-6,
        linear: None,
        normaliser: None,
    }
    .minimise(1e-9)
    .unwrap();
    WarmStart {
        weights: vec![fit.weights[0], fit.weights[1]],
        intercept: fit.weights[2],
    }
}

/// Percent of `y` that σ(weightsᵀx + intercept) > ½ gets right.
fn accuracy(weights: &[f64], intercept: f64, x: &Array2<f64>, y: &[u8]) -> f64 {
    let right = x
        .rows()
        .into_iter()
        .zip(y)
        .filter(|(row, label)| {
            let logit: f64 = intercept + row.iter().zip(weights).map(|(x, w)| x * w).sum::<f64>();
            u8::from(logit > 0.0) == **label
        })
        .count();
    100.0 * right as f64 / y.len() as f64
}

fn csv(x: &Array2<f64>, y: &[u8]) -> String {
    let mut out = String::from("row_id,y,x1,x2\n");
    for (i, (row, label)) in x.rows().into_iter().zip(y).enumerate() {
        out.push_str(&format!("r{i},{label},{},{}\n", row[0], row[1]));
    }
    out
}

/// Mean and standard deviation.
fn summary(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds = |default| {
        args.last()
            .and_then(|arg| arg.parse().ok())
            .unwrap_or(default)
    };
    match args.first().map(String::as_str) {
        Some("sgd") => sgd_table(seeds(4)).await,
        Some("fw") => fw_table(seeds(20)).await,
        Some("lasso") => lasso_table(seeds(4)).await,
        Some("auto") => auto_lambda(seeds(3)).await,
        Some("select") => select_lambda(&args[1], seeds(20)).await,
        _ => gd_table(seeds(200)).await,
    }
}

/// Seed 001's mirror: `n` rows of x ~ U(a, a + 5)², y = x₁ + x₂ + 1 + N(0, 1).
fn regression_rows(rng: &mut ChaCha8Rng, n: usize, a: f64) -> Vec<[f64; 3]> {
    (0..n)
        .map(|_| {
            let x = [a + 5.0 * rng.random::<f64>(), a + 5.0 * rng.random::<f64>()];
            [x[0], x[1], x[0] + x[1] + 1.0 + normal(rng)]
        })
        .collect()
}

/// A seed-001 dataset of `rows`, created and filled.
async fn regression_dataset(admin: &Client, name: String, rows: &[[f64; 3]]) -> uuid::Uuid {
    let request: CreateDataset = serde_json::from_value(serde_json::json!({
        "name": name, "privacy_unit": "row",
        "features": [
            {"name": "x1", "min": -2.5, "max": 7.5}, {"name": "x2", "min": -2.5, "max": 7.5}
        ],
        "label": "unused", "measures": [{"name": "y", "min": -8, "max": 20}],
        "budget": {"epsilon": 1000, "delta": 1e-3}, "accountant": "basic"
    }))
    .unwrap();
    let dataset = admin.create_dataset(&request).await.unwrap();
    let mut csv = String::from("row_id,unused,x1,x2,y\n");
    for (i, [x1, x2, y]) in rows.iter().enumerate() {
        csv.push_str(&format!("r{i},0,{x1},{x2},{y}\n"));
    }
    admin
        .upload_rows(dataset.id, UploadFormat::Csv, csv)
        .await
        .unwrap();
    dataset.id
}

async fn fw_table(seeds: usize) {
    const SOURCES: [usize; 5] = [0, 5, 10, 15, 20];
    const EPSILONS: [f64; 4] = [0.5, 1.0, 2.0, 5.0];
    let (address, admin, keys, _dir) = serve().await;
    let mut rng = ChaCha8Rng::seed_from_u64(2001);
    // Rows: K; columns: the ε of Laplace selection, then the exponential
    // mechanism at ε = 1.
    let mut cells = vec![vec![Vec::new(); EPSILONS.len() + 1]; SOURCES.len()];
    let mut seconds = Vec::new();
    for seed in 0..seeds {
        let target = regression_dataset(
            &admin,
            format!("seed-001-{seed}"),
            &regression_rows(&mut rng, 500, 0.0),
        )
        .await;
        let mut sources = Vec::new();
        for k in 0..20 {
            let a = rng.random_range(-2.5..2.5);
            let rows = regression_rows(&mut rng, 500, a);
            sources.push(regression_dataset(&admin, format!("source-{seed}-{k}"), &rows).await);
        }
        let test = regression_rows(&mut rng, 50, 0.0);
        let token = keys
            .mint(
                Role::Analyst,
                "ana",
                &[vec![target], sources.clone()].concat(),
                Duration::from_secs(86_400),
            )
            .unwrap();
        let analyst = Client::new(&address, Some(token));
        for (row, &count) in SOURCES.iter().enumerate() {
            let settings = EPSILONS
                .iter()
                .map(|&epsilon| (epsilon, Selection::Laplace))
                .chain([(1.0, Selection::Exponential)]);
            for (column, (epsilon, selection)) in settings.enumerate() {
                let request = ReleaseRequest {
                    epsilon: Some(epsilon),
                    delta: Some(1e-6),
                    params: ReleaseParams::FrankWolfe(FrankWolfeParams {
                        target: "measure:y".to_owned(),
                        radius: 1.0,
                        steps: 50,
                        fit_intercept: true,
                        selection,
                        sources: sources[..count].to_vec(),
                        debias: None,
                    }),
                };
                let started = std::time::Instant::now();
                let release = analyst
                    .release(target, &request, &ReleaseOptions::default())
                    .await
                    .unwrap()
                    .release;
                seconds.push(started.elapsed().as_secs_f64());
                let Some(ReleaseResult::FrankWolfe(model)) = &release.result else {
                    panic!("a Frank-Wolfe result");
                };
                let sse: f64 = test
                    .iter()
                    .map(|[x1, x2, y]| {
                        let fitted =
                            model.intercept + model.weights[0] * x1 + model.weights[1] * x2;
                        (fitted - y).powi(2)
                    })
                    .sum();
                cells[row][column].push(sse);
            }
        }
    }
    let (mean, sd) = summary(&seconds);
    println!("release time: {mean:.3}±{sd:.3} s");
    println!("\n{seeds} seeds; SSE over 50 target test rows (mean±sd); rows: K sources");
    let names: Vec<String> = EPSILONS
        .iter()
        .map(|epsilon| format!("Laplace ε = {epsilon}"))
        .chain(["exponential ε = 1".to_owned()])
        .collect();
    let rows: Vec<String> = SOURCES.iter().map(ToString::to_string).collect();
    print_table("K", &rows, &names, &cells, 0);
}

async fn gd_table(seeds: usize) {
    let (address, admin, keys, _dir) = serve().await;
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let (test_x, test_y) = rows(&mut rng, 20_000, [0.0; 2]);
    let (public_x, public_y) = rows(&mut rng, 2_000, [0.0; 2]);
    let (shifted_x, shifted_y) = rows(&mut rng, 2_000, [0.5, -0.5]);
    let same = public_model(&public_x, &public_y);
    let shifted = public_model(&shifted_x, &shifted_y);
    println!(
        "public model alone, test accuracy: same distribution {:.1}, shifted {:.1}",
        accuracy(&same.weights, same.intercept, &test_x, &test_y),
        accuracy(&shifted.weights, shifted.intercept, &test_x, &test_y)
    );
    let configs: [(&str, u32, f64, Option<&WarmStart>); 5] = [
        ("A: none", 50, 1.0, None),
        ("A: pre (same)", 50, 1.0, Some(&same)),
        ("A: pre (shifted)", 50, 1.0, Some(&shifted)),
        ("B: none", 200, 4.0, None),
        ("B: pre (same)", 200, 4.0, Some(&same)),
    ];
    let mut cells = vec![vec![Vec::new(); configs.len()]; EPSILONS.len()];
    let mut train = Vec::new();
    for seed in 0..seeds {
        let (x, y) = rows(&mut rng, 400, [0.0; 2]);
        train.push(public_model(&x, &y));
        let request: CreateDataset = serde_json::from_value(serde_json::json!({
            "name": format!("seed-000-{seed}"), "privacy_unit": "row",
            "features": [
                {"name": "x1", "min": BOUNDS.0, "max": BOUNDS.1},
                {"name": "x2", "min": BOUNDS.0, "max": BOUNDS.1}
            ],
            "label": "y",
            "budget": {"epsilon": 1000, "delta": 1e-3}, "accountant": "basic"
        }))
        .unwrap();
        let dataset = admin.create_dataset(&request).await.unwrap();
        admin
            .upload_rows(dataset.id, UploadFormat::Csv, csv(&x, &y))
            .await
            .unwrap();
        let analyst = analyst(&address, &keys, dataset.id);
        for (row, &epsilon) in EPSILONS.iter().enumerate() {
            for (column, (_, steps, learning_rate, warm)) in configs.iter().enumerate() {
                let request = ReleaseRequest {
                    epsilon: Some(epsilon),
                    delta: Some(1e-5),
                    params: ReleaseParams::DpGd(DpGdParams {
                        steps: *steps,
                        learning_rate: *learning_rate,
                        clip: 1.0,
                        lambda: 0.0,
                        fit_intercept: true,
                        theta0: warm.cloned(),
                        radius: None,
                        output: Iterate::Last,
                    }),
                };
                let release = analyst
                    .release(dataset.id, &request, &ReleaseOptions::default())
                    .await
                    .unwrap()
                    .release;
                let Some(ReleaseResult::DpGd(model)) = &release.result else {
                    panic!("a DP-GD result");
                };
                cells[row][column].push(accuracy(
                    &model.weights,
                    model.intercept,
                    &test_x,
                    &test_y,
                ));
            }
        }
    }
    let non_private: Vec<f64> = train
        .iter()
        .map(|model| accuracy(&model.weights, model.intercept, &test_x, &test_y))
        .collect();
    let (mean, sd) = summary(&non_private);
    println!("non-private fit on the 400 private rows: {mean:.1}±{sd:.1}");
    println!("\n{seeds} seeds; test accuracy % (mean±sd)");
    let names: Vec<String> = configs.iter().map(|config| config.0.to_owned()).collect();
    print_table("ε", &epsilon_labels(&EPSILONS), &names, &cells, 1);
}

/// A Markdown table: one row per label (ε, or K), one `mean±sd` column
/// per config, with `decimals` digits.
fn print_table(
    first: &str,
    labels: &[String],
    names: &[String],
    cells: &[Vec<Vec<f64>>],
    decimals: usize,
) {
    println!("| {first} | {} |", names.join(" | "));
    println!("|---|{}", "---|".repeat(names.len()));
    for (label, row) in labels.iter().zip(cells) {
        let line: Vec<String> = row
            .iter()
            .map(|values| {
                let (mean, sd) = summary(values);
                format!("{mean:.decimals$}±{sd:.decimals$}")
            })
            .collect();
        println!("| {label} | {} |", line.join(" | "));
    }
}

/// The ε column of a table.
fn epsilon_labels(epsilons: &[f64]) -> Vec<String> {
    epsilons.iter().map(ToString::to_string).collect()
}

/// The proxy's rows as CSV, features `p0…`.
fn latent_csv(x: &Array2<f64>, y: &[u8], rows: std::ops::Range<usize>) -> String {
    let mut csv = String::from("row_id,y");
    for j in 0..x.ncols() {
        csv.push_str(&format!(",p{j}"));
    }
    for i in rows {
        csv.push_str(&format!("\nr{i},{}", y[i]));
        for value in x.row(i) {
            csv.push_str(&format!(",{value:.4}"));
        }
    }
    csv.push('\n');
    csv
}

/// A dataset of the proxy's `rows`, on features declared on [0, 1].
async fn latent_dataset(
    admin: &Client,
    name: String,
    (x, y): (&Array2<f64>, &[u8]),
    rows: std::ops::Range<usize>,
) -> uuid::Uuid {
    let features: Vec<serde_json::Value> = (0..x.ncols())
        .map(|j| serde_json::json!({"name": format!("p{j}"), "min": 0, "max": 1}))
        .collect();
    let request: CreateDataset = serde_json::from_value(serde_json::json!({
        "name": name, "privacy_unit": "row", "features": features, "label": "y",
        "budget": {"epsilon": 1000, "delta": 1e-3}, "accountant": "basic"
    }))
    .unwrap();
    let dataset = admin.create_dataset(&request).await.unwrap();
    admin
        .upload_rows(dataset.id, UploadFormat::Csv, latent_csv(x, y, rows))
        .await
        .unwrap();
    dataset.id
}

/// `train-lasso` over `datasets` at ε each (T = 100, η = 0.5, λ = 1e-3):
/// the model file's test error.
async fn lasso_error(
    address: &str,
    token: &str,
    datasets: &[uuid::Uuid],
    epsilon: f64,
    (test_x, test_y): (&Array2<f64>, &[u8]),
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lasso.json");
    let mut argv: Vec<String> = [
        "dpgate-client",
        "--url",
        address,
        "--token",
        token,
        "--json",
    ]
    .map(str::to_owned)
    .to_vec();
    argv.extend(
        [
            "train-lasso",
            "--epsilon",
            &epsilon.to_string(),
            "--delta",
            "1e-6",
            "--steps",
            "100",
            "--learning-rate",
            "0.5",
            "--lambda",
            "1e-3",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(str::to_owned),
    );
    for dataset in datasets {
        argv.extend(["--dataset".to_owned(), dataset.to_string()]);
    }
    let cli = <dpgate_client::cli::Cli as clap::Parser>::try_parse_from(argv).unwrap();
    dpgate_client::cli::run(cli, &mut Vec::new()).await.unwrap();
    let model = dpgate_client::model_file::ModelFile::load(&out).unwrap();
    error(&model.weights, model.intercept, test_x, test_y)
}

async fn lasso_table(seeds: usize) {
    const K: usize = 784;
    // (N total, ε per holder): the rows of LEARNERS.md's table.
    const SETTINGS: [(usize, f64); 5] = [
        (600, 1.0),
        (600, 2.0),
        (3000, 0.5),
        (3000, 1.0),
        (11_791, 0.1),
    ];
    let (address, admin, keys, _dir) = serve().await;
    let mut rng = ChaCha8Rng::seed_from_u64(2044);
    let loadings = Array2::from_shape_fn((K, 10), |_| normal(&mut rng));
    let (test_x, test_y) = latent_rows(&mut rng, &loadings, 2_000);
    let test = (&test_x, &test_y[..]);
    let mut cells = vec![vec![Vec::new(); 4]; SETTINGS.len()];
    for seed in 0..seeds {
        for (row, &(n, epsilon)) in SETTINGS.iter().enumerate() {
            let (x, y) = latent_rows(&mut rng, &loadings, n);
            let third = n / 3;
            let data = (&x, &y[..]);
            let pooled = latent_dataset(&admin, format!("pooled-{seed}-{row}"), data, 0..n).await;
            let mut holders = Vec::new();
            for h in 0..3 {
                let rows = h * third..if h == 2 { n } else { (h + 1) * third };
                holders
                    .push(latent_dataset(&admin, format!("h{h}-{seed}-{row}"), data, rows).await);
            }
            let granted: Vec<uuid::Uuid> = std::iter::once(pooled).chain(holders.clone()).collect();
            let token = keys
                .mint(Role::Analyst, "ana", &granted, Duration::from_secs(86_400))
                .unwrap();
            // μ(ε′) = μ(ε)/√3: one pooled holder with the noise of three.
            let mu = 1.0 / dpgate::dp::analytic_sigma(epsilon, 1e-6, 1.0).unwrap();
            let equivalent = dpgate::dp::gaussian_epsilon(mu / 3f64.sqrt(), 1e-6);
            let runs: [(&[uuid::Uuid], f64); 4] = [
                (&[pooled], epsilon),
                (&holders, epsilon),
                (&holders[..1], epsilon),
                (&[pooled], equivalent),
            ];
            for (column, (datasets, epsilon)) in runs.into_iter().enumerate() {
                cells[row][column]
                    .push(lasso_error(&address, &token, datasets, epsilon, test).await);
            }
        }
    }
    println!("\n{seeds} seeds; test error % (mean±sd)");
    let names = [
        "pooled (1 holder)",
        "distributed (3 × N/3)",
        "single (N/3 alone)",
        "pooled at ε′ (μ/√3)",
    ]
    .map(str::to_owned);
    let labels: Vec<String> = SETTINGS
        .iter()
        .map(|(n, epsilon)| format!("N = {n}, ε = {epsilon}"))
        .collect();
    print_table("setting", &labels, &names, &cells, 1);
}

/// Seed 004's proxy: `n` rows of `K` features, each a noisy view of 10
/// latent factors through `loadings`, clamped into [0, 1]; the label is
/// Bernoulli(σ(3·f₁)).
fn latent_rows(rng: &mut ChaCha8Rng, loadings: &Array2<f64>, n: usize) -> (Array2<f64>, Vec<u8>) {
    let (k, factors) = loadings.dim();
    let mut x = Array2::zeros((n, k));
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let f: Vec<f64> = (0..factors).map(|_| normal(rng)).collect();
        for j in 0..k {
            let signal: f64 = (0..factors).map(|l| loadings[[j, l]] * f[l]).sum();
            x[[i, j]] = (0.5 + 0.1 * signal + 0.05 * normal(rng)).clamp(0.0, 1.0);
        }
        y.push(u8::from(
            rng.random::<f64>() < 1.0 / (1.0 + (-3.0 * f[0]).exp()),
        ));
    }
    (x, y)
}

/// Test error in %, of σ(weightsᵀx + intercept) > ½.
fn error(weights: &[f64], intercept: f64, x: &Array2<f64>, y: &[u8]) -> f64 {
    let wrong = x
        .rows()
        .into_iter()
        .zip(y)
        .filter(|(row, label)| {
            let logit = intercept + row.iter().zip(weights).map(|(x, w)| x * w).sum::<f64>();
            u8::from(logit > 0.0) != **label
        })
        .count();
    100.0 * wrong as f64 / y.len() as f64
}

async fn sgd_table(seeds: usize) {
    const K: usize = 784;
    const EPSILONS: [f64; 3] = [0.1, 1.0, 10.0];
    // (batch size, projection dims): the rows of LEARNERS.md's table.
    const CONFIGS: [(u64, Option<usize>); 7] = [
        (5, Some(15)),
        (5, Some(50)),
        (5, Some(100)),
        (5, None),
        (500, Some(50)),
        (500, Some(100)),
        (500, None),
    ];
    let (address, admin, keys, _dir) = serve().await;
    let mut rng = ChaCha8Rng::seed_from_u64(2004);
    let loadings = Array2::from_shape_fn((K, 10), |_| normal(&mut rng));
    let (test_x, test_y) = latent_rows(&mut rng, &loadings, 2_000);
    let mut cells = vec![vec![Vec::new(); CONFIGS.len()]; EPSILONS.len()];
    let mut non_private = Vec::new();
    for seed in 0..seeds {
        let (x, y) = latent_rows(&mut rng, &loadings, 11_791);
        let mut design = Array2::ones((x.nrows(), K + 1));
        design.slice_mut(ndarray::s![.., ..K]).assign(&x);
        let labels: Array1<f64> = y.iter().map(|&l| 2.0 * f64::from(l) - 1.0).collect();
        let fit = Objective {
            x: design.view(),
            y: labels.view(),
            lambda: 1e-4,
            linear: None,
            normaliser: None,
        }
        .minimise(1e-9)
        .unwrap();
        let weights = fit.weights.to_vec();
        non_private.push(error(&weights[..K], weights[K], &test_x, &test_y));
        let features: Vec<serde_json::Value> = (0..K)
            .map(|j| serde_json::json!({"name": format!("p{j}"), "min": 0, "max": 1}))
            .collect();
        let request: CreateDataset = serde_json::from_value(serde_json::json!({
            "name": format!("seed-004-{seed}"), "privacy_unit": "row",
            "features": features, "label": "y",
            "budget": {"epsilon": 1000, "delta": 1e-3}, "accountant": "basic"
        }))
        .unwrap();
        let dataset = admin.create_dataset(&request).await.unwrap();
        let mut csv = String::from("row_id,y");
        for j in 0..K {
            csv.push_str(&format!(",p{j}"));
        }
        for (i, (row, label)) in x.rows().into_iter().zip(&y).enumerate() {
            csv.push_str(&format!("\nr{i},{label}"));
            for value in row {
                csv.push_str(&format!(",{value:.4}"));
            }
        }
        csv.push('\n');
        admin
            .upload_rows(dataset.id, UploadFormat::Csv, csv)
            .await
            .unwrap();
        let analyst = analyst(&address, &keys, dataset.id);
        for (row, &epsilon) in EPSILONS.iter().enumerate() {
            for (column, &(batch_size, dims)) in CONFIGS.iter().enumerate() {
                let request = ReleaseRequest {
                    epsilon: Some(epsilon),
                    delta: None,
                    params: ReleaseParams::DpSgd(DpSgdParams {
                        batch_size,
                        learning_rate: 1.0,
                        lambda: 1e-4,
                        clip: 1.0,
                        epochs: 1,
                        fit_intercept: true,
                        projection: dims.map(|dims| ProjectionParams { dims, seed: None }),
                    }),
                };
                let release = analyst
                    .release(dataset.id, &request, &ReleaseOptions::default())
                    .await
                    .unwrap()
                    .release;
                let Some(ReleaseResult::DpSgd(model)) = &release.result else {
                    panic!("a DP-SGD result");
                };
                cells[row][column].push(error(&model.weights, model.intercept, &test_x, &test_y));
            }
        }
    }
    let (mean, sd) = summary(&non_private);
    println!("non-private logistic regression (λ = 1e-4): {mean:.1}±{sd:.1} % error");
    println!("\n{seeds} seeds; test error % (mean±sd)");
    let names: Vec<String> = CONFIGS
        .iter()
        .map(|(b, dims)| match dims {
            Some(dims) => format!("b = {b}, k′ = {dims}"),
            None => format!("b = {b}, 784 (none)"),
        })
        .collect();
    print_table("ε", &epsilon_labels(&EPSILONS), &names, &cells, 1);
}

/// `-- auto`: see the module docs.
async fn auto_lambda(draws: usize) {
    use dpgate_client::types::{Lambda, ObjectivePerturbationParams, OutputPerturbationParams};
    let (k, n) = (32, 1_000_000);
    let train = dpgate_learn::synthetic::logistic_data(n, k, 1);
    let test = dpgate_learn::synthetic::logistic_data(100_000, k, 2);
    let (address, admin, keys, _dir) = serve().await;
    let dataset = unit_box_dataset(&admin, "auto", k, synthetic_csv(&train, 0..n)).await;
    let client = analyst(&address, &keys, dataset);
    println!("N = {n} × {k}, ε = 1, test accuracy on 10^5 fresh rows, mean of {draws} releases");
    println!("| learner | λ asked | λ used | accuracy (%) |");
    println!("|---|---|---|---|");
    for (name, objective, delta) in [
        ("output", false, None),
        ("output δ=1e-6", false, Some(1e-6)),
        ("objective", true, None),
    ] {
        for lambda in [Lambda::Auto, Lambda::Fixed(0.01)] {
            let params = if objective {
                ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                    lambda: lambda.clone(),
                    fit_intercept: true,
                })
            } else {
                ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    lambda: lambda.clone(),
                    fit_intercept: true,
                })
            };
            let request = ReleaseRequest {
                epsilon: Some(1.0),
                delta,
                params,
            };
            let (scores, used) =
                model_accuracy(&client, dataset, &request, (&test.x, &test.y), draws).await;
            let (mean, spread) = summary(&scores);
            println!("| {name} | {lambda} | {used:e} | {mean:.2} ± {spread:.2} |");
        }
    }
}

/// A dataset of `k` features on [0, 1] holding `csv` (`row_id,y,…`).
async fn unit_box_dataset(admin: &Client, name: &str, k: usize, csv: String) -> uuid::Uuid {
    let features: Vec<serde_json::Value> = (0..k)
        .map(|j| serde_json::json!({"name": format!("c{j}"), "min": 0, "max": 1}))
        .collect();
    let request: CreateDataset = serde_json::from_value(serde_json::json!({
        "name": name, "privacy_unit": "row", "features": features, "label": "y",
        "budget": {"epsilon": 1e6, "delta": 1e-3}, "accountant": "basic"
    }))
    .unwrap();
    let dataset = admin.create_dataset(&request).await.unwrap().id;
    admin
        .upload_rows(dataset, UploadFormat::Csv, csv)
        .await
        .unwrap();
    dataset
}

/// `row_id,y,c0,…` rows of a synthetic set.
fn synthetic_csv(
    data: &dpgate_learn::synthetic::Synthetic,
    rows: std::ops::Range<usize>,
) -> String {
    let k = data.x.ncols();
    let header: Vec<String> = (0..k).map(|j| format!("c{j}")).collect();
    let mut body = format!("row_id,y,{}\n", header.join(","));
    for i in rows {
        let row: Vec<String> = data.x.row(i).iter().map(|v| format!("{v:.6}")).collect();
        body.push_str(&format!("r{i},{},{}\n", data.y[i], row.join(",")));
    }
    body
}

/// A model release's test accuracy and the λ it used, `draws` times.
async fn model_accuracy(
    client: &Client,
    dataset: uuid::Uuid,
    request: &ReleaseRequest,
    test: (&Array2<f64>, &[u8]),
    draws: usize,
) -> (Vec<f64>, f64) {
    let mut scores = Vec::new();
    let mut used = 0.0;
    for _ in 0..draws {
        let release = client
            .release(dataset, request, &ReleaseOptions::default())
            .await
            .unwrap()
            .release;
        let Some(ReleaseResult::Model(model)) = release.result else {
            panic!("a model");
        };
        used = model.lambda;
        scores.push(accuracy(&model.weights, model.intercept, test.0, test.1));
    }
    (scores, used)
}

/// `-- select`: see the module docs.
async fn select_lambda(breast: &str, draws: usize) {
    use dpgate_client::types::{Lambda, ObjectivePerturbationParams};
    let read = |path: String| {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut values = Vec::new();
        let mut labels = Vec::new();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split(',').collect();
            labels.push(fields[1].parse::<u8>().unwrap());
            values.extend(fields[2..].iter().map(|v| v.parse::<f64>().unwrap()));
        }
        let x =
            Array2::from_shape_vec((labels.len(), values.len() / labels.len()), values).unwrap();
        (text, x, labels)
    };
    let synthetic_test = dpgate_learn::synthetic::logistic_data(100_000, 32, 2);
    let (address, admin, keys, _dir) = serve().await;
    let mut cells = Vec::new();
    for (n, epsilons) in [(1_000, &[0.1, 1.0][..]), (10_000, &[0.1][..])] {
        let data = dpgate_learn::synthetic::logistic_data(n, 32, 1);
        let id = unit_box_dataset(
            &admin,
            &format!("synthetic-{n}"),
            32,
            synthetic_csv(&data, 0..n),
        )
        .await;
        for &epsilon in epsilons {
            cells.push((
                format!("synthetic-{n}"),
                id,
                epsilon,
                synthetic_test.x.clone(),
                synthetic_test.y.clone(),
            ));
        }
    }
    let (train, _, _) = read(format!("{breast}/train.csv"));
    let (_, test_x, test_y) = read(format!("{breast}/test.csv"));
    let id = unit_box_dataset(&admin, "breast-cancer", test_x.ncols(), train).await;
    cells.push(("breast-cancer".to_owned(), id, 1.0, test_x, test_y));
    println!("objective perturbation, test accuracy (%), mean ± sd of {draws} releases");
    println!("| set | ε | auto (λ) | select [0.1, 0.01, 0.001, 0.0001] |");
    println!("|---|---|---|---|");
    for (name, dataset, epsilon, x, y) in &cells {
        let client = analyst(&address, &keys, *dataset);
        let request = |lambda: Lambda| ReleaseRequest {
            epsilon: Some(*epsilon),
            delta: None,
            params: ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                lambda,
                fit_intercept: true,
            }),
        };
        let (auto, used) =
            model_accuracy(&client, *dataset, &request(Lambda::Auto), (x, y), draws).await;
        let candidates = Lambda::Select(vec![0.1, 0.01, 0.001, 0.0001]);
        let (picked, _) =
            model_accuracy(&client, *dataset, &request(candidates), (x, y), draws).await;
        let ((a, a_sd), (p, p_sd)) = (summary(&auto), summary(&picked));
        println!("| {name} | {epsilon} | {a:.2} ± {a_sd:.2} ({used:e}) | {p:.2} ± {p_sd:.2} |");
    }
}
