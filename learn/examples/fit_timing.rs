//! Times `Objective::minimise` on a synthetic N = 1,000,000, k = 32 problem,
//! the largest size the server is expected to fit.
//!
//! `cargo run --release -p dpgate-learn --example fit_timing [rows] [columns] [tolerance]`
//! (tolerance 1e-9 by default; the server uses 1e-10)

use std::time::Instant;

use dpgate_learn::{Objective, sigmoid};
use ndarray::{Array1, Array2};

/// Deterministic 64-bit LCG (Knuth's MMIX constants): reproducible data
/// without a `rand` dependency. Returns uniforms on [0, 1).
struct Lcg(u64);

impl Lcg {
    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let k: usize = args.next().map_or(Ok(32), |a| a.parse())?;
    let tolerance: f64 = args.next().map_or(Ok(1e-9), |a| a.parse())?;

    let started = Instant::now();
    let mut rng = Lcg(42);
    // Rows scaled to ‖x‖ ≤ 1, as objective perturbation requires.
    let scale = 1.0 / (k as f64).sqrt();
    let truth: Vec<f64> = (0..k)
        .map(|j| if j % 2 == 0 { 4.0 } else { -3.0 })
        .collect();
    let mut x = Array2::<f64>::zeros((rows, k));
    let mut y = Array1::<f64>::zeros(rows);
    for (mut row, label) in x.outer_iter_mut().zip(y.iter_mut()) {
        let mut margin = 0.0;
        for (value, weight) in row.iter_mut().zip(&truth) {
            *value = (2.0 * rng.uniform() - 1.0) * scale;
            margin += *value * weight;
        }
        *label = if rng.uniform() < sigmoid(margin) {
            1.0
        } else {
            -1.0
        };
    }
    let b: Array1<f64> = (0..k).map(|_| 2.0 * rng.uniform() - 1.0).collect();
    println!("generated {rows} × {k} in {:.2?}", started.elapsed());

    let probe = Objective {
        x: x.view(),
        y: y.view(),
        lambda: 1e-4,
        linear: None,
        normaliser: None,
    };
    let w = Array1::from_elem(k, 0.1);
    // Each pass timed 5 times; the fastest is the least disturbed by load.
    let fastest = |pass: &dyn Fn() -> f64| {
        let mut best = std::time::Duration::MAX;
        let mut checksum = 0.0;
        for _ in 0..5 {
            let started = Instant::now();
            checksum += pass();
            best = best.min(started.elapsed());
        }
        (best, checksum)
    };
    let (gradient_time, g) = fastest(&|| probe.gradient(w.view()).sum());
    let (hessian_time, h) = fastest(&|| probe.hessian(w.view()).sum());
    let (certificate_time, c) = fastest(&|| probe.certify(w.view()).gradient.sum());
    println!(
        "one value+gradient pass: {gradient_time:.2?}; one Hessian pass: {hessian_time:.2?}; \
         one certificate pass: {certificate_time:.2?} (fastest of 5; checksum {:.3})",
        g + h + c
    );

    for lambda in [1e-2, 1e-4, 1e-6] {
        for linear in [None, Some(b.view())] {
            let objective = Objective {
                x: x.view(),
                y: y.view(),
                lambda,
                linear,
                normaliser: None,
            };
            let started = Instant::now();
            let fit = objective.minimise(tolerance)?;
            println!(
                "λ = {lambda:e}, linear term: {:5}: {:.2?}, {} Newton iterations, |∇J| = {:.1e} \
                 (certified ≤ {:.1e}), J = {:.12}",
                linear.is_some(),
                started.elapsed(),
                fit.iterations,
                fit.gradient_norm,
                fit.certified_gradient_norm,
                fit.value
            );
        }
    }
    Ok(())
}
