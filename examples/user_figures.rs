//! The price of protecting people (issue 34, docs/privacy-core.md): WALR's
//! and DP-GD's test AUC and an aggregate's relative error at N = 10⁶ rows of 10⁵
//! people whose rows per person are heavy-tailed (lognormal, σ = 1.5:
//! median 3, mean 10, the largest person about 2,000 rows), under unit
//! `user` at m ∈ {1, 5, 20, 100} rows a person against unit `row` on the
//! same rows.
//!
//! `cargo run --profile test --features ballista,mutants --example
//! user_figures [-- DRAWS]` (default 5; the test profile reuses the test
//! build). The rows are `learn::synthetic::logistic_data` (k = 16,
//! features in [0, 1], 20 % positives), a measure `value` = 100·x₀ and a
//! dimension `campaign` of 8 values; every person's rows are drawn from the
//! same distribution, so what bounding costs here is rows and noise, not a
//! bias between heavy and light users. Each cell is DRAWS real releases
//! through the API at ε = 1, δ = 10⁻⁶ (noise from the OS CSPRNG): WALR
//! (default map) trained label-blind on the uploaded features and scored
//! on 10⁵ fresh rows; `count` and `mean:value` by `campaign`, their error
//! relative to the exact values over all rows; and `model/dp-gd` at its
//! defaults (T = 100, α = 1, C = 1; under `user` each person's summed
//! gradient clipped to C and N released noisy first), scored on the same
//! test rows. A second table scores the other learners the same way, at
//! their defaults and ε = 1: output perturbation (λ `auto`, pure ε),
//! DP-SGD (one epoch, b = 256), Frank-Wolfe on the label (r = 2, 50 steps,
//! δ = 10⁻⁶; its linear score ranks the test rows).

// A figures driver: failing loudly on any error is what it should do.
#![allow(clippy::unwrap_used)]

#[path = "common/serve.rs"]
mod serve;

use std::time::Instant;

use dpgate_client::mapped::{map_rows, noisy_dot};
use dpgate_client::trainer::{NoisyDot, TrainerConfig, train};
use dpgate_client::types::{ReleaseOutput, ReleaseRequest, ReleaseResult};
use dpgate_client::{Client, UploadFormat};
use dpgate_learn::auc;
use dpgate_learn::synthetic::logistic_data;
use ndarray::{Array1, Array2};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use serve::{analyst, serve};

const N: usize = 1_000_000;
const PEOPLE: usize = 100_000;
const K: usize = 16;
const CAMPAIGNS: usize = 8;
const BOUNDS: [u32; 4] = [1, 5, 20, 100];

/// Each row's person: PEOPLE people with lognormal rows each (scaled to N
/// rows in all, at least one each), in a shuffled order.
fn people(rng: &mut ChaCha8Rng) -> Vec<usize> {
    let spread = LogNormal::new(0.0, 1.5).unwrap();
    let weights: Vec<f64> = (0..PEOPLE).map(|_| spread.sample(rng)).collect();
    let total: f64 = weights.iter().sum();
    let extra = (N - PEOPLE) as f64;
    let mut owners: Vec<usize> = Vec::with_capacity(N);
    for (person, weight) in weights.iter().enumerate() {
        let rows = 1 + (weight / total * extra).floor() as usize;
        owners.extend(std::iter::repeat_n(person, rows));
    }
    while owners.len() < N {
        owners.push(rng.random_range(0..PEOPLE));
    }
    owners.truncate(N);
    for at in (1..owners.len()).rev() {
        owners.swap(at, rng.random_range(0..=at));
    }
    owners
}

/// The rows as CSV, with each row's person when `owners` are given.
fn csv(x: &Array2<f64>, y: &[u8], owners: Option<&[usize]>) -> String {
    let names: Vec<String> = (0..K).map(|j| format!("f{j}")).collect();
    let person = if owners.is_some() { ",person" } else { "" };
    let mut out = format!("row_id,y,{},value,campaign{person}\n", names.join(","));
    for (i, row) in x.rows().into_iter().enumerate() {
        let values: Vec<String> = row.iter().map(f64::to_string).collect();
        out.push_str(&format!(
            "r{i},{},{},{},c{}",
            y[i],
            values.join(","),
            100.0 * row[0],
            i % CAMPAIGNS
        ));
        if let Some(owners) = owners {
            out.push_str(&format!(",p{}", owners[i]));
        }
        out.push('\n');
    }
    out
}

fn dataset(name: &str, bound: Option<u32>) -> serde_json::Value {
    let features: Vec<serde_json::Value> = (0..K)
        .map(|j| serde_json::json!({"name": format!("f{j}"), "min": 0, "max": 1}))
        .collect();
    let campaigns: Vec<String> = (0..CAMPAIGNS).map(|c| format!("c{c}")).collect();
    let mut request = serde_json::json!({
        "name": name, "privacy_unit": "row", "features": features, "label": "y",
        "measures": [{"name": "value", "min": 0, "max": 100}],
        "dimensions": [{"name": "campaign", "values": campaigns}],
        "budget": {"epsilon": 1000, "delta": 1e-3},
    });
    if let Some(m) = bound {
        request["privacy_unit"] = "user".into();
        request["user_column"] = "person".into();
        request["max_rows_per_user"] = m.into();
    }
    request
}

fn request(json: serde_json::Value) -> ReleaseRequest {
    serde_json::from_value(json).unwrap()
}

/// The test AUC of a label-blind model trained on `x` from `noisy` (on
/// the release's map, if any).
fn walr_auc(release: &ReleaseResult, x: &Array2<f64>, test: &(Array2<f64>, Vec<u8>)) -> f64 {
    let ReleaseResult::Walr(walr) = release else {
        panic!("a walr result");
    };
    let (noisy, train_x, test_x) = match &walr.map {
        Some(map) => (
            noisy_dot(map, &walr.noisy_dot, walr.noisy_intercept),
            map_rows(map, x.clone()),
            map_rows(map, test.0.clone()),
        ),
        None => (
            NoisyDot {
                dot: walr.noisy_dot.clone(),
                intercept: walr.noisy_intercept,
            },
            x.clone(),
            test.0.clone(),
        ),
    };
    let trained = train(train_x.view(), &noisy, &TrainerConfig::default(), |_| {}).unwrap();
    let scores = test_x.dot(&Array1::from(trained.weights)) + trained.intercept.unwrap_or(0.0);
    auc(scores.as_slice().unwrap(), &test.1).unwrap()
}

/// The test AUC of a model's linear score (raw features are the stored
/// ones here): a logistic model's, or Frank-Wolfe's least squares on the
/// label.
fn model_auc(release: &ReleaseResult, test: &(Array2<f64>, Vec<u8>)) -> f64 {
    let (weights, intercept) = match release {
        ReleaseResult::FrankWolfe(model) => (&model.weights[..], model.intercept),
        other => other.model().expect("a model"),
    };
    let scores = test.0.dot(&Array1::from(weights.to_vec())) + intercept;
    auc(scores.as_slice().unwrap(), &test.1).unwrap()
}

/// The exact count and mean of `value` of each campaign over all rows.
fn exact_groups(x: &Array2<f64>) -> Vec<(f64, f64)> {
    let mut groups = vec![(0.0, 0.0); CAMPAIGNS];
    for (i, row) in x.rows().into_iter().enumerate() {
        let group = &mut groups[i % CAMPAIGNS];
        group.0 += 1.0;
        group.1 += 100.0 * row[0];
    }
    groups
        .into_iter()
        .map(|(count, sum)| (count, sum / count))
        .collect()
}

/// Mean relative error of the released counts and means against `exact`,
/// and the counts' noise std relative to them (the error the noise alone
/// makes; the rest of a count's is the rows the bounding left out).
fn relative_errors(release: &ReleaseResult, exact: &[(f64, f64)]) -> [f64; 3] {
    let ReleaseResult::Aggregate(result) = release else {
        panic!("an aggregate result");
    };
    let mut errors = [0.0; 3];
    for group in &result.groups {
        let campaign: usize = group.key["campaign"][1..].parse().unwrap();
        let (true_count, true_mean) = exact[campaign];
        if group.statistic == "count" {
            errors[0] += (group.value - true_count).abs() / true_count;
            errors[1] += group.std / true_count;
        } else {
            errors[2] += (group.value - true_mean).abs() / true_mean;
        }
    }
    errors.map(|error| error / CAMPAIGNS as f64)
}

/// `request` released on `id`, and the seconds the release took.
async fn timed(client: &Client, id: uuid::Uuid, request: &ReleaseRequest) -> (ReleaseResult, f64) {
    let started = Instant::now();
    let released = client
        .release(id, request, &Default::default())
        .await
        .unwrap();
    (
        released.release.result.unwrap(),
        started.elapsed().as_secs_f64(),
    )
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[tokio::main]
async fn main() {
    let draws: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(5);
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    let data = logistic_data(N + 100_000, K, 34);
    let (x, y) = (
        data.x.slice(ndarray::s![..N, ..]).to_owned(),
        data.y[..N].to_vec(),
    );
    let test = (
        data.x.slice(ndarray::s![N.., ..]).to_owned(),
        data.y[N..].to_vec(),
    );
    let owners = people(&mut rng);
    let mut per_person = vec![0usize; PEOPLE];
    for &owner in &owners {
        per_person[owner] += 1;
    }
    per_person.sort_unstable();
    println!(
        "{N} rows of {PEOPLE} people: rows a person median {}, p99 {}, max {}",
        per_person[PEOPLE / 2],
        per_person[PEOPLE * 99 / 100],
        per_person[PEOPLE - 1]
    );
    for m in BOUNDS {
        let read: usize = per_person.iter().map(|&rows| rows.min(m as usize)).sum();
        println!(
            "m = {m}: {read} rows read ({:.1} %)",
            100.0 * read as f64 / N as f64
        );
    }
    let (anonymous, of_people) = (csv(&x, &y, None), csv(&x, &y, Some(&owners)));
    let exact = exact_groups(&x);
    let (address, admin, keys, _dir) = serve().await;
    let walr = request(serde_json::json!({"kind": "walr", "epsilon": 1.0, "delta": 1e-6}));
    let aggregate = request(serde_json::json!({
        "kind": "aggregate", "epsilon": 1.0, "delta": 1e-6,
        "statistics": ["count", "mean:value"], "group_by": ["campaign"],
    }));
    let descent = request(serde_json::json!({
        "kind": "model/dp-gd", "epsilon": 1.0, "delta": 1e-6,
    }));
    // The other learners at their defaults (Frank-Wolfe's radius has none).
    let learners = [
        request(serde_json::json!({"kind": "model/output-perturbation", "epsilon": 1.0})),
        request(serde_json::json!({"kind": "model/objective-perturbation", "epsilon": 1.0})),
        request(serde_json::json!({"kind": "model/dp-sgd", "epsilon": 1.0})),
        request(serde_json::json!({
            "kind": "model/frank-wolfe", "epsilon": 1.0, "delta": 1e-6,
            "target": "label", "radius": 2.0,
        })),
    ];
    let mut learned = Vec::new();
    println!(
        "\n| unit | WALR test AUC | count rel. error | of it, noise std | mean rel. error | WALR \
         release time | DP-GD test AUC | DP-GD release time |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let cells = std::iter::once(None).chain(BOUNDS.map(Some));
    for bound in cells {
        let name = bound.map_or("row".to_owned(), |m| format!("user-m{m}"));
        let schema = serde_json::from_value(dataset(&name, bound)).unwrap();
        let id = admin.create_dataset(&schema).await.unwrap().id;
        let body = if bound.is_some() {
            &of_people
        } else {
            &anonymous
        };
        admin
            .upload_rows(id, UploadFormat::Csv, body.clone())
            .await
            .unwrap();
        let client: Client = analyst(&address, &keys, id);
        let (mut aucs, mut errors, mut seconds) = (vec![], vec![], vec![]);
        let (mut model_aucs, mut model_seconds) = (vec![], vec![]);
        for _ in 0..draws {
            let (released, took) = timed(&client, id, &walr).await;
            seconds.push(took);
            aucs.push(walr_auc(&released, &x, &test));
            let (released, _) = timed(&client, id, &aggregate).await;
            errors.push(relative_errors(&released, &exact));
            let (released, took) = timed(&client, id, &descent).await;
            model_seconds.push(took);
            model_aucs.push(model_auc(&released, &test));
        }
        let mut cells = Vec::new();
        for learner in &learners {
            let (mut aucs, mut seconds) = (vec![], vec![]);
            for _ in 0..draws {
                let (released, took) = timed(&client, id, learner).await;
                seconds.push(took);
                aucs.push(model_auc(&released, &test));
            }
            cells.push(format!("{:.4} | {:.1} s", mean(&aucs), mean(&seconds)));
        }
        let error = |at: usize| mean(&errors.iter().map(|e| e[at]).collect::<Vec<f64>>());
        let unit = bound.map_or("`row`".to_owned(), |m| format!("`user`, m = {m}"));
        println!(
            "| {unit} | {:.4} | {:.2e} | {:.2e} | {:.2e} | {:.2} s | {:.4} | {:.1} s |",
            mean(&aucs),
            error(0),
            error(1),
            error(2),
            mean(&seconds),
            mean(&model_aucs),
            mean(&model_seconds)
        );
        learned.push(format!("| {unit} | {} |", cells.join(" | ")));
    }
    println!(
        "\n| unit | output perturbation test AUC | release | objective perturbation test AUC | \
         release | DP-SGD test AUC | release | Frank-Wolfe test AUC | release |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in learned {
        println!("{row}");
    }
    let exact_dot = NoisyDot {
        dot: (0..K)
            .map(|j| {
                x.column(j)
                    .iter()
                    .zip(&y)
                    .map(|(v, &l)| v * f64::from(l))
                    .sum::<f64>()
                    / N as f64
            })
            .collect(),
        intercept: Some(y.iter().map(|&l| f64::from(l)).sum::<f64>() / N as f64),
    };
    let trained = train(x.view(), &exact_dot, &TrainerConfig::default(), |_| {}).unwrap();
    let scores = test.0.dot(&Array1::from(trained.weights)) + trained.intercept.unwrap_or(0.0);
    println!(
        "| non-private (exact dot product) | {:.4} | 0 | 0 | 0 | | | |",
        auc(scores.as_slice().unwrap(), &test.1).unwrap()
    );
}
