//! The label-blind trainer on N = 1,000,000 rows, k = 32 features, 10
//! epochs at the default batch size: `cargo bench -p dpgate-client --bench
//! trainer`. Run it with `RAYON_NUM_THREADS=1` for the single-core figure.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dpgate_client::trainer::{NoisyDot, TrainerConfig, train};
use dpgate_learn::synthetic::logistic_data;
use ndarray::Array1;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

const ROWS: usize = 1_000_000;
const FEATURES: usize = 32;
/// The per-coordinate noise of a release at about ε = 1, δ = 1e-6 for this N.
const SIGMA: f64 = 2e-5;

/// The exact (1/N)·Σ yᵢ·x̃ᵢ plus seeded Gaussian noise, as a release would
/// carry it.
fn noisy_dot(x: &ndarray::Array2<f64>, y: &[u8]) -> NoisyDot {
    let labels: Array1<f64> = y.iter().map(|&label| f64::from(label)).collect();
    let n = ROWS as f64;
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let mut gaussian = || {
        // Box–Muller: a standard normal from two uniforms.
        let (u, v): (f64, f64) = (rng.random(), rng.random());
        (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    };
    NoisyDot {
        dot: (x.t().dot(&labels) / n)
            .iter()
            .map(|value| value + SIGMA * gaussian())
            .collect(),
        intercept: Some(labels.sum() / n + SIGMA * gaussian()),
    }
}

fn trainer(c: &mut Criterion) {
    let data = logistic_data(ROWS, FEATURES, 1);
    let noisy = noisy_dot(&data.x, &data.y);
    let config = TrainerConfig {
        epochs: Some(10),
        ..TrainerConfig::default()
    };
    let mut group = c.benchmark_group("trainer");
    group.sample_size(10);
    group.bench_function("1m_rows_32_features_10_epochs", |b| {
        b.iter(|| train(black_box(data.x.view()), &noisy, &config, |_| {}))
    });
    group.finish();
}

criterion_group!(benches, trainer);
criterion_main!(benches);
