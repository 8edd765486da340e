//! The iterative learners' passes over the rows: `cargo bench --bench
//! learners`.
//!
//! 1,000,000 rows × 32 features in memory (set `BENCH_ROWS` for fewer), as
//! a warm release sees its snapshot: one DP-GD step (a pass computing every
//! row's clipped gradient), a whole T = 100 release with its noise, and
//! one DP-SGD epoch (batches of 256 in a random order, each with its
//! norm-Gamma noise), on the features and on 8 projections of them; and
//! Frank-Wolfe's first stage, T = 50 steps (each a pass over the rows and
//! a private selection among 66 vertices). And `logistic_pass`: one
//! gradient pass at a caller's θ that puts every row at z = 0, 720, −720,
//! or that is tiny (10⁻³⁰⁰): the same time, or a caller could time how
//! many rows lie in a half-space (docs/models.md, "Timing"). And
//! `lambda_auto`: pricing `"lambda": "auto"` for a model release at
//! N = 10⁶, d = 33 (a search over 121 λ, each with its mechanism and
//! certified floor), which every such request pays before admission.

// Benchmark set-up only unwraps what valid parameters return.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpgate::dp::{Delta, Epsilon, Mechanism, OsNoise, SelectionRule};
use dpgate::releases::kinds::dp_gd::Descent;
use dpgate::releases::kinds::dp_sgd::Sgd;
use dpgate::releases::kinds::frank_wolfe::fit_label;
use dpgate::releases::kinds::gradients::{FeatureMap, Gradients, Grid, Identity, Logistic};
use dpgate::releases::kinds::projection::Projection;
use dpgate::releases::pacing::StepNoise;
use dpgate::snapshots::{Columns, Pass};
use dpgate_client::types::Iterate;
use rand::seq::SliceRandom;

/// The shape of the other benches' datasets (`benches/common`).
const FEATURES: usize = 32;

fn rows() -> usize {
    std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000)
}

fn descent(steps: u32) -> Descent {
    Descent {
        steps,
        learning_rate: 1.0,
        clip: 1.0,
        lambda: 0.0,
        radius: None,
        output: Iterate::Last,
        fit_intercept: true,
        start: vec![0.0; FEATURES + 1],
        people: None,
    }
}

fn dp_gd(c: &mut Criterion) {
    let n = rows();
    let data = dpgate_learn::synthetic::logistic_data(n, FEATURES, 7);
    let columns = Columns::of_labelled(data.x.view(), &data.y);
    let mut group = c.benchmark_group("dp_gd");
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function(format!("one step, {n} rows × {FEATURES}"), |b| {
        let one = descent(1);
        b.iter(|| one.run(&columns, |_, exact| Ok(exact.to_f64())).unwrap());
    });
    let steps = 100;
    let mechanism = Mechanism::gaussian_steps(
        Epsilon::new(1.0).unwrap(),
        Delta::new(1e-6).unwrap(),
        2.0,
        FEATURES + 1,
        steps,
        n as f64,
    )
    .unwrap();
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(60));
    group.bench_function(
        format!("T = {steps} with noise, {n} rows × {FEATURES}"),
        |b| {
            let release = descent(steps);
            b.iter(|| {
                let mut rng = OsNoise::new();
                release
                    .run(&columns, |_, exact| {
                        mechanism.release_fixed(exact, &mut rng)
                    })
                    .unwrap()
            });
        },
    );
    group.finish();
}

/// One DP-SGD epoch on `map`'s features as a release runs it: a random
/// order, and the noise drawn ahead in paced blocks.
fn epoch(sgd: &Sgd, map: &impl FeatureMap, columns: &Columns) -> Vec<f64> {
    let mechanism =
        Mechanism::norm_gamma(Epsilon::new(1.0).unwrap(), 2.0, map.dims() + 1, 257.0).unwrap();
    let mut order = OsNoise::new();
    let mut noise = StepNoise::new(&mechanism, sgd.steps(columns.len() as u64));
    sgd.run(
        columns,
        map,
        |rows| rows.shuffle(&mut order),
        |_, exact| mechanism.add_fixed(exact, &noise.next().unwrap()),
    )
    .unwrap()
}

fn dp_sgd(c: &mut Criterion) {
    let n = rows();
    let data = dpgate_learn::synthetic::logistic_data(n, FEATURES, 7);
    let columns = Columns::of_labelled(data.x.view(), &data.y);
    let sgd = Sgd {
        batch_size: 256,
        epochs: 1,
        learning_rate: 1.0,
        lambda: 1e-4,
        clip: 1.0,
        fit_intercept: true,
    };
    let mut group = c.benchmark_group("dp_sgd");
    group.throughput(Throughput::Elements(n as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    let identity = Identity(FEATURES);
    group.bench_function(format!("one epoch, b = 256, {n} rows × {FEATURES}"), |b| {
        b.iter(|| epoch(&sgd, &identity, &columns));
    });
    let projection = Projection::new(1, 8, FEATURES);
    group.bench_function(
        format!("one epoch on 8 projections, b = 256, {n} rows × {FEATURES}"),
        |b| b.iter(|| epoch(&sgd, &projection, &columns)),
    );
    group.finish();
}

fn frank_wolfe(c: &mut Criterion) {
    let n = rows();
    let data = dpgate_learn::synthetic::logistic_data(n, FEATURES, 7);
    let columns = std::sync::Arc::new(Columns::of_labelled(data.x.view(), &data.y));
    let mut group = c.benchmark_group("frank_wolfe");
    group.throughput(Throughput::Elements(n as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    for rule in [SelectionRule::Laplace, SelectionRule::Exponential] {
        // T = 50 steps at ε = 1, δ = 1e-6, r = 1.
        let budget = (Epsilon::new(1.0).unwrap(), Delta::new(1e-6).unwrap());
        group.bench_function(format!("T = 50, {rule:?}, {n} rows × {FEATURES}"), |b| {
            b.iter(|| {
                fit_label(
                    columns.clone(),
                    (1.0, 50),
                    (rule, budget),
                    &mut OsNoise::new(),
                )
                .unwrap()
            });
        });
    }
    group.finish();
}

fn logistic_pass(c: &mut Criterion) {
    let n = rows().min(100_000);
    let data = dpgate_learn::synthetic::logistic_data(n, FEATURES, 7);
    let columns = Columns::of_labelled(data.x.view(), &data.y);
    let grid = Grid::new(1.0, 1.0, FEATURES + 1, true).unwrap();
    let mut group = c.benchmark_group("logistic_pass");
    group.throughput(Throughput::Elements(n as u64));
    let at = |bias: f64, weight: f64| {
        let mut theta = vec![weight; FEATURES + 1];
        theta[0] = bias;
        theta
    };
    for (name, theta) in [
        ("z = 0", at(0.0, 0.0)),
        ("z = 720", at(720.0, 0.0)),
        ("z = -720", at(-720.0, 0.0)),
        ("tiny theta", at(0.0, 1e-300)),
    ] {
        group.bench_function(format!("{name}, {n} rows × {FEATURES}"), |b| {
            b.iter(|| {
                let mut pass = Gradients::at(&grid, Logistic, &theta, true);
                pass.visit(&columns).unwrap();
                pass.total()
            });
        });
    }
    group.finish();
}

fn lambda_auto(c: &mut Criterion) {
    use dpgate::releases::kinds::ridge::{Learner, auto};
    let mut group = c.benchmark_group("lambda_auto");
    let epsilon = Epsilon::new(1.0).unwrap();
    for (name, learner, delta) in [
        ("output", Learner::Output, Delta::ZERO),
        (
            "output gaussian",
            Learner::Output,
            Delta::new(1e-6).unwrap(),
        ),
        ("objective", Learner::Objective, Delta::ZERO),
    ] {
        group.bench_function(format!("{name}, N = 10^6, d = 33"), |b| {
            b.iter(|| auto(learner, epsilon, delta, 1_000_000, 33).unwrap());
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    dp_gd,
    dp_sgd,
    frank_wolfe,
    logistic_pass,
    lambda_auto
);
criterion_main!(benches);
