//! Prints the model figures quoted in `docs/models.md`: test AUC and
//! accuracy of output and objective perturbation against ε and λ on
//! synthetic data (k = 16, about 20% positives), next to the non-private
//! fit, and the time to fit and release at N = 1,000,000, k = 32.
//!
//! `cargo run --release --example model_figures [-- N…]` (default N =
//! 100000 1000000). `-- allowance` prints instead how long objective
//! perturbation's solves take in units of one Newton iteration's passes
//! (`model::iteration_time`), over N, k, λ, ε, labels and draws of b: what
//! `model::SOLVE_ALLOWANCE` is chosen from; `-- timing` only the times at
//! N = 1,000,000. The pipeline is the server's own (`releases::kinds::model`);
//! noise comes from a seeded generator so the table is reproducible (the
//! server draws from the OS CSPRNG).

use std::time::Instant;

use dpgate::dp::{Delta, Epsilon};
use dpgate::releases::Pass;
use dpgate::releases::kinds::model::{
    Design, DesignBuilder, ObjectivePlan, SOLVE_ALLOWANCE, certifiable, iteration_time,
    output_mechanism, solve, unfold,
};
use dpgate::snapshots::Columns;
use dpgate_learn::synthetic::{Synthetic, logistic_data};
use dpgate_learn::{accuracy, auc, sigmoid};
use ndarray::ArrayView1;
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;

const EPSILONS: [f64; 5] = [0.1, 0.5, 1.0, 5.0, 10.0];
const LAMBDAS: [f64; 3] = [1e-3, 1e-4, 1e-5];
/// Noise draws averaged per cell.
const DRAWS: usize = 3;

fn design_of(data: &Synthetic) -> Design {
    let (n, k) = data.x.dim();
    let mut builder = DesignBuilder::new(k, n as u64, true);
    builder
        .visit(&Columns::of_labelled(data.x.view(), &data.y))
        .expect("rows of k features");
    builder.build().expect("a well-formed design")
}

fn schema(k: usize) -> dpgate::dataset::Schema {
    dpgate::dataset::Schema {
        features: (0..k)
            .map(|j| dpgate_api_types::BoundedColumn {
                name: format!("f{j}"),
                min: 0.0,
                max: 1.0,
            })
            .collect(),
        label: "y".to_owned(),
        measures: vec![],
        dimensions: vec![],
    }
}

/// (AUC, accuracy) of scaled-space weights on the test set.
fn score(weights: &[f64], test: &Synthetic) -> (f64, f64) {
    let (raw, intercept) = unfold(weights, &schema(test.x.ncols()), true);
    let logits = test.x.dot(&ArrayView1::from(&raw)) + intercept;
    let probabilities: Vec<f64> = logits.iter().map(|&z| sigmoid(z)).collect();
    (
        auc(&probabilities, &test.y).unwrap_or(f64::NAN),
        accuracy(&probabilities, &test.y, 0.5),
    )
}

fn mean(pairs: &[(f64, f64)]) -> (f64, f64) {
    let n = pairs.len() as f64;
    (
        pairs.iter().map(|p| p.0).sum::<f64>() / n,
        pairs.iter().map(|p| p.1).sum::<f64>() / n,
    )
}

fn table(n: usize) {
    let k = 16;
    let train = logistic_data(n, k, 1);
    let test = logistic_data(200_000, k, 2);
    let design = design_of(&train);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    println!("\nN = {n}, k = {k}, test N = 200000 (AUC / accuracy, mean of {DRAWS} draws)");
    println!("| ε | λ | non-private | output perturbation | objective perturbation |");
    println!("|---|---|---|---|---|");
    for lambda in LAMBDAS {
        let exact = solve(&design, lambda, None).expect("the fit converges");
        let exact = exact.as_slice().expect("contiguous");
        let (clean_auc, clean_accuracy) = score(exact, &test);
        for epsilon in EPSILONS {
            let mechanism = output_mechanism(
                Epsilon::new(epsilon).expect("ε"),
                Delta::ZERO,
                n as u64,
                lambda,
                k + 1,
            )
            .expect("a mechanism");
            let output: Vec<(f64, f64)> = (0..DRAWS)
                .map(|_| score(&mechanism.release(exact, &mut rng).expect("noise"), &test))
                .collect();
            let plan =
                ObjectivePlan::new(Epsilon::new(epsilon).expect("ε"), n as u64, lambda, k + 1)
                    .expect("a plan");
            let objective: Vec<(f64, f64)> = (0..DRAWS)
                .map(|_| score(&plan.run(&design, &mut rng).expect("a solve"), &test))
                .collect();
            let ((oa, oc), (ba, bc)) = (mean(&output), mean(&objective));
            println!(
                "| {epsilon} | {lambda:.0e} | {clean_auc:.4} / {clean_accuracy:.4} | \
                 {oa:.4} / {oc:.4} | {ba:.4} / {bc:.4} |"
            );
        }
    }
}

fn timing() {
    let (n, k) = (1_000_000, 32);
    let train = logistic_data(n, k, 4);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let started = Instant::now();
    let design = design_of(&train);
    let built = started.elapsed();
    let started = Instant::now();
    let exact = solve(&design, 1e-4, None).expect("the fit converges");
    let mechanism = output_mechanism(
        Epsilon::new(1.0).expect("ε"),
        Delta::ZERO,
        n as u64,
        1e-4,
        k + 1,
    )
    .expect("a mechanism");
    let released = mechanism
        .release(exact.as_slice().expect("contiguous"), &mut rng)
        .expect("noise");
    let output = started.elapsed();
    let started = Instant::now();
    let plan =
        ObjectivePlan::new(Epsilon::new(1.0).expect("ε"), n as u64, 1e-4, k + 1).expect("a plan");
    let objective = plan.run(&design, &mut rng).expect("a solve");
    let objective_time = started.elapsed();
    let started = Instant::now();
    plan.solve_held(&design).expect("a solve");
    let held = started.elapsed();
    assert_eq!((released.len(), objective.len()), (k + 1, k + 1));
    println!("\nN = {n}, k = {k}, λ = 1e-4, ε = 1:");
    println!(
        "  design matrix from rows:           {:>8.3} s",
        built.as_secs_f64()
    );
    println!(
        "  output perturbation fit + noise:   {:>8.3} s",
        output.as_secs_f64()
    );
    println!(
        "  objective perturbation b + solve:  {:>8.3} s",
        objective_time.as_secs_f64()
    );
    println!(
        "  the same, held to its deadline:    {:>8.3} s (one iteration unit {:.3} s)",
        held.as_secs_f64(),
        iteration_time(&design).as_secs_f64()
    );
}

/// Objective perturbation's solve times in iteration units: every
/// certifiable λ of 10⁻¹…10⁻⁶ at N = 10³…10⁵, k = 4, 16, 64, ε = 0.1, 1,
/// 10, on the synthetic labels and on one class only, 5 draws of b each.
fn allowance() {
    let mut ratios = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    for n in [1_000, 10_000, 100_000] {
        for k in [4, 16, 64] {
            let mut data = logistic_data(n, k, 8);
            let synthetic = design_of(&data);
            data.y.fill(1);
            let one_class = design_of(&data);
            for lambda in [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6] {
                for epsilon in [0.1, 1.0, 10.0] {
                    let Ok(plan) = ObjectivePlan::new(
                        Epsilon::new(epsilon).expect("ε"),
                        n as u64,
                        lambda,
                        k + 1,
                    ) else {
                        continue;
                    };
                    let whole = lambda + plan.params.extra_regulariser;
                    if certifiable(k + 1, n as u64, whole, plan.linear_bound).is_err() {
                        continue;
                    }
                    for design in [&synthetic, &one_class] {
                        let unit = iteration_time(design).as_secs_f64();
                        for _ in 0..5 {
                            let started = Instant::now();
                            plan.solve_perturbed(design, &mut rng)
                                .expect("a certified solve");
                            ratios.push((
                                started.elapsed().as_secs_f64() / unit,
                                n,
                                k,
                                lambda,
                                epsilon,
                            ));
                        }
                    }
                }
            }
        }
    }
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q) as usize].0;
    let worst = ratios[ratios.len() - 1];
    println!(
        "{} solves: median {:.1}, 99th percentile {:.1}, largest {:.1} iteration units          (N = {}, k = {}, λ = {:e}, ε = {}); allowance {SOLVE_ALLOWANCE}",
        ratios.len(),
        at(0.5),
        at(0.99),
        worst.0,
        worst.1,
        worst.2,
        worst.3,
        worst.4
    );
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("allowance") => return allowance(),
        Some("timing") => return timing(),
        _ => {}
    }
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![100_000, 1_000_000]
    } else {
        sizes
    };
    for n in sizes {
        table(n);
    }
    timing();
}
