//! Throughput of the privacy core: `cargo bench --bench dp`.
//!
//! Every sampler draws from `OsNoise`, the production source (the OS CSPRNG),
//! so the figures include the cost of real randomness.

// Benchmark set-up only unwraps constants that are valid by construction.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use dpgate::dp::{
    Accountant, Budget, Charge, Composition, Delta, Epsilon, Mechanism, OsNoise, PrivacyLoss,
    analytic_sigma, discrete_gaussian, discrete_laplace, norm_gamma_lattice,
};

/// Noise scales as the mechanisms use them: 2^23 to 2^24 lattice points.
const SCALE: u32 = (1 << 23) + 12_345;

fn samplers(c: &mut Criterion) {
    let mut group = c.benchmark_group("samplers");
    group.throughput(Throughput::Elements(1));
    let mut noise = OsNoise::new();
    group.bench_function("discrete_gaussian", |b| {
        b.iter(|| discrete_gaussian(black_box(SCALE), &mut noise))
    });
    group.bench_function("discrete_laplace", |b| {
        b.iter(|| discrete_laplace(black_box(u64::from(SCALE)), &mut noise))
    });
    group.throughput(Throughput::Elements(64));
    group.bench_function("norm_gamma_64", |b| {
        b.iter(|| norm_gamma_lattice(64, black_box(u64::from(SCALE)), &mut noise))
    });
    group.finish();
}

fn vector_releases(c: &mut Criterion) {
    let mut group = c.benchmark_group("release_64_dims");
    group.throughput(Throughput::Elements(64));
    let epsilon = Epsilon::new(1.0).unwrap();
    let values: Vec<f64> = (0..64).map(|i| f64::from(i) / 64.0).collect();
    let mechanisms = [
        (
            "gaussian",
            Mechanism::gaussian(epsilon, Delta::new(1e-6).unwrap(), 1e-3, 64, 1.0),
        ),
        ("laplace", Mechanism::laplace(epsilon, 1e-3, 64, 1.0)),
        ("norm_gamma", Mechanism::norm_gamma(epsilon, 1e-3, 64, 1.0)),
    ];
    for (name, mechanism) in mechanisms {
        let mechanism = mechanism.unwrap();
        group.bench_function(name, |b| {
            // A fresh OS buffer per release, as the service does.
            b.iter_batched(
                OsNoise::new,
                |mut noise| mechanism.release(black_box(&values), &mut noise),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn calibration(c: &mut Criterion) {
    let mut group = c.benchmark_group("calibration");
    group.throughput(Throughput::Elements(1));
    group.bench_function("analytic_sigma", |b| {
        b.iter(|| analytic_sigma(black_box(1.0), black_box(1e-6), black_box(1e-3)))
    });
    let (epsilon, delta) = (Epsilon::new(1.0).unwrap(), Delta::new(1e-6).unwrap());
    group.bench_function("gaussian_mechanism", |b| {
        b.iter(|| Mechanism::gaussian(epsilon, delta, black_box(1e-3), 33, 1.0))
    });
    group.finish();
}

fn accountant(c: &mut Criterion) {
    let mut group = c.benchmark_group("accountant_10000_entries");
    let budget = Budget {
        epsilon: Epsilon::new(1e5).unwrap(),
        delta: Delta::new(1e-5).unwrap(),
    };
    let gaussian = |i: u32| Charge {
        epsilon: Epsilon::new(0.1).unwrap(),
        delta: Delta::new(1e-10).unwrap(),
        loss: PrivacyLoss::Gaussian {
            sensitivity: 1.0,
            sigma: 40.0 + f64::from(i % 7),
        },
    };
    let all_gaussian: Vec<Charge> = (0..10_000).map(gaussian).collect();
    let mixed: Vec<Charge> = (0..10_000)
        .map(|i| match i % 3 {
            0 => Charge {
                epsilon: Epsilon::new(0.01).unwrap(),
                delta: Delta::ZERO,
                loss: PrivacyLoss::PureEpsilon { epsilon: 0.01 },
            },
            _ => gaussian(i),
        })
        .collect();
    for (name, ledger) in [("gaussian", &all_gaussian), ("mixed", &mixed)] {
        group.bench_function(name, |b| {
            b.iter(|| dpgate::dp::spent(black_box(ledger), Accountant::Rdp, &budget))
        });
    }
    let running = Composition::of(&mixed);
    group.bench_function("admit_one_more", |b| {
        b.iter(|| running.admits(black_box(&mixed[1]), Accountant::Rdp, &budget))
    });
    group.finish();
}

criterion_group!(benches, samplers, vector_releases, calibration, accountant);
criterion_main!(benches);
