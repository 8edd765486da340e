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
use dpgate::releases::kinds::model::{
    Design, DesignBuilder, ObjectivePlan, SOLVE_ALLOWANCE, certifiable, iteration_time,
    output_mechanism, solve, unfold,
};
use dpgate::releases::kinds::ridge::{self, Learner};
use dpgate::snapshots::Columns;
use dpgate::snapshots::Pass;
use dpgate_learn::synthetic::{Synthetic, logistic_data};
use dpgate_learn::{accuracy, auc, sigmoid};
use ndarray::{Array2, ArrayView1, ArrayView2};
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

fn schema(k: usize) -> dpgate::domain::dataset::Schema {
    dpgate::domain::dataset::Schema {
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
        users: None,
    }
}

/// (AUC, accuracy) of scaled-space weights on the test set.
fn score(weights: &[f64], test: &Synthetic) -> (f64, f64) {
    score_on(weights, test.x.view(), &test.y)
}

fn score_on(weights: &[f64], x: ArrayView2<'_, f64>, y: &[u8]) -> (f64, f64) {
    let (raw, intercept) = unfold(weights, &schema(x.ncols()), true);
    let logits = x.dot(&ArrayView1::from(&raw)) + intercept;
    let probabilities: Vec<f64> = logits.iter().map(|&z| sigmoid(z)).collect();
    (
        auc(&probabilities, y).unwrap_or(f64::NAN),
        accuracy(&probabilities, y, 0.5),
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
        let exact = solve(&design, lambda, None, None).expect("the fit converges");
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
    let exact = solve(&design, 1e-4, None, None).expect("the fit converges");
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
                    if certifiable(k + 1, n as u64, whole, plan.params.linear_bound).is_err() {
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

/// Reads a train/test CSV of `examples/sklearn_sets.py` (row_id, y, then
/// features in [0, 1]).
fn read_set(path: &std::path::Path) -> Synthetic {
    let mut reader = csv::Reader::from_path(path).expect("a readable CSV");
    let (mut values, mut y, mut k) = (Vec::new(), Vec::new(), 0);
    for record in reader.records() {
        let record = record.expect("a CSV record");
        y.push(record[1].parse::<u8>().expect("a 0/1 label"));
        k = record.len() - 2;
        values.extend(
            record
                .iter()
                .skip(2)
                .map(|v| v.parse::<f64>().expect("a number")),
        );
    }
    Synthetic {
        x: Array2::from_shape_vec((y.len(), k), values).expect("rows of k features"),
        y,
        weights: Vec::new(),
        intercept: 0.0,
    }
}

/// Writes a set in the format [`read_set`] reads, for the diffprivlib
/// comparison (`examples/lambda_baselines.py`).
fn write_set(data: &Synthetic, path: &std::path::Path) {
    let mut writer = csv::Writer::from_path(path).expect("a writable CSV");
    let k = data.x.ncols();
    let header = ["row_id".to_owned(), "y".to_owned()]
        .into_iter()
        .chain((0..k).map(|j| format!("c{j}")));
    writer.write_record(header).expect("a header");
    for (i, (row, label)) in data.x.rows().into_iter().zip(&data.y).enumerate() {
        let fields = [format!("r{i}"), label.to_string()]
            .into_iter()
            .chain(row.iter().map(|v| format!("{v:.6}")));
        writer.write_record(fields).expect("a row");
    }
}

/// The sets the λ figures are measured on: the synthetic generator (k = 32)
/// at N = 10³…10⁶ against one test set of 100,000 rows, and, given its
/// directory, breast cancer; with the noise draws each cell averages.
fn lambda_sets(breast: Option<&std::path::Path>) -> Vec<(String, Synthetic, Synthetic, usize)> {
    let test = logistic_data(100_000, 32, 2);
    let mut sets: Vec<(String, Synthetic, Synthetic, usize)> =
        [(1_000, 40), (10_000, 20), (100_000, 6), (1_000_000, 3)]
            .into_iter()
            .map(|(n, draws)| {
                let train = logistic_data(n, 32, 1);
                (format!("synthetic-{n}"), train, test.clone(), draws)
            })
            .collect();
    if let Some(dir) = breast {
        let (train, test) = (
            read_set(&dir.join("train.csv")),
            read_set(&dir.join("test.csv")),
        );
        sets.push(("breast-cancer".to_owned(), train, test, 100));
    }
    sets
}

/// The ε a set is measured at: 1 alone at N = 10⁶.
fn lambda_epsilons(n: usize) -> &'static [f64] {
    if n >= 1_000_000 {
        &[1.0]
    } else {
        &[0.1, 1.0, 10.0]
    }
}

/// A training design, its test set and the draws each of its cells
/// averages.
struct Cells<'a> {
    design: &'a Design,
    test: &'a Synthetic,
    draws: usize,
}

/// (accuracy, AUC) of `learner` at λ, the mean over `draws` releases, or
/// `None` where the server would refuse λ.
fn released(
    Cells {
        design,
        test,
        draws,
    }: &Cells<'_>,
    (learner, delta): (Learner, f64),
    epsilon: f64,
    lambda: f64,
    rng: &mut ChaCha8Rng,
) -> Option<(f64, f64)> {
    let (n, dims) = (design.x.nrows() as u64, design.x.ncols());
    let eps = Epsilon::new(epsilon).expect("ε");
    let score = |weights: &[f64]| {
        let (auc, accuracy) = score_on(weights, test.x.view(), &test.y);
        (accuracy, auc)
    };
    let scores: Vec<(f64, f64)> = match learner {
        Learner::Output => {
            certifiable(dims, n, lambda, 0.0).ok()?;
            let delta = Delta::new(delta).expect("δ");
            let mechanism = output_mechanism(eps, delta, n, lambda, dims).ok()?;
            let exact = solve(design, lambda, None, None).expect("the fit converges");
            let exact = exact.as_slice().expect("contiguous");
            (0..*draws)
                .map(|_| score(&mechanism.release(exact, rng).expect("noise")))
                .collect()
        }
        Learner::Objective => {
            let plan = ObjectivePlan::new(eps, n, lambda, dims).ok()?;
            let whole = lambda + plan.params.extra_regulariser;
            certifiable(dims, n, whole, plan.params.linear_bound).ok()?;
            (0..*draws)
                .map(|_| score(&plan.run(design, rng).expect("a solve")))
                .collect()
        }
    };
    Some(mean(&scores))
}

const LEARNERS: [(Learner, f64, &str); 3] = [
    (Learner::Output, 0.0, "output"),
    (Learner::Output, 1e-6, "output δ=1e-6"),
    (Learner::Objective, 0.0, "objective"),
];

/// Test accuracy and AUC against λ on a fine grid (10^−j/4, j = 0…28) for
/// each learner, beside the non-private fit: what the constants of
/// `"lambda": "auto"` (`ridge::OUTPUT`, `ridge::OBJECTIVE`) are fitted to.
/// One CSV line per (set, ε, λ). `-- sweep OUT [BREAST_CANCER_DIR]` also
/// writes the synthetic sets to OUT for `examples/lambda_baselines.py`.
fn sweep(out: &std::path::Path, breast: Option<&std::path::Path>) {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    println!(
        "set,n,d,epsilon,lambda,nonprivate,output,output_gaussian,objective,output_auc,objective_auc"
    );
    for (name, train, test, draws) in lambda_sets(breast) {
        let dir = out.join(&name);
        std::fs::create_dir_all(&dir).expect("an output directory");
        write_set(&train, &dir.join("train.csv"));
        write_set(&test, &dir.join("test.csv"));
        let design = design_of(&train);
        let (n, dims) = (design.x.nrows(), design.x.ncols());
        let cells = Cells {
            design: &design,
            test: &test,
            draws,
        };
        for j in 0..=28 {
            let lambda = 10f64.powf(-f64::from(j) / 4.0);
            let Ok(exact) = solve(&design, lambda, None, None) else {
                continue;
            };
            let clean = score_on(
                exact.as_slice().expect("contiguous"),
                test.x.view(),
                &test.y,
            )
            .1;
            for &epsilon in lambda_epsilons(n) {
                let cells: Vec<Option<(f64, f64)>> = LEARNERS
                    .iter()
                    .map(|&(learner, delta, _)| {
                        released(&cells, (learner, delta), epsilon, lambda, &mut rng)
                    })
                    .collect();
                let cell = |value: Option<(f64, f64)>, auc: bool| {
                    value.map_or(String::new(), |(c, a)| {
                        format!("{:.5}", if auc { a } else { c })
                    })
                };
                println!(
                    "{name},{n},{dims},{epsilon},{lambda:e},{clean:.5},{},{},{},{},{}",
                    cell(cells[0], false),
                    cell(cells[1], false),
                    cell(cells[2], false),
                    cell(cells[0], true),
                    cell(cells[2], true),
                );
            }
        }
    }
}

/// `-- auto [BREAST_CANCER_DIR]`: test accuracy (and AUC) of the λ
/// `"lambda": "auto"` chooses against the best fixed λ of 10⁻¹…10⁻⁶ in
/// hindsight, each learner, set and ε, every cell the mean over the same
/// number of noise draws. The table of docs/models.md, "Choosing λ".
fn auto_table(breast: Option<&std::path::Path>) {
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    println!(
        "| set | ε | learner | auto λ | auto: acc / AUC | best fixed λ | best: acc / AUC | shortfall (points) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, train, test, draws) in lambda_sets(breast) {
        let design = design_of(&train);
        let (n, dims) = (design.x.nrows(), design.x.ncols());
        let cells = Cells {
            design: &design,
            test: &test,
            draws,
        };
        for &epsilon in lambda_epsilons(n) {
            for (learner, delta, label) in LEARNERS {
                let eps = Epsilon::new(epsilon).expect("ε");
                let delta_ = Delta::new(delta).expect("δ");
                let lambda = ridge::auto(learner, eps, delta_, n as u64, dims).expect("a λ");
                let mut at = |lambda| released(&cells, (learner, delta), epsilon, lambda, &mut rng);
                let Some(chosen) = at(lambda) else {
                    panic!("auto chose a λ the server refuses");
                };
                let (best_lambda, best) = [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6]
                    .into_iter()
                    .filter_map(|fixed| at(fixed).map(|cell| (fixed, cell)))
                    .max_by(|a, b| a.1.0.total_cmp(&b.1.0))
                    .expect("a fixed λ the server accepts");
                println!(
                    "| {name} | {epsilon} | {label} | {lambda:e} | {:.4} / {:.4} | {best_lambda:e} | {:.4} / {:.4} | {:+.2} |",
                    chosen.0,
                    chosen.1,
                    best.0,
                    best.1,
                    100.0 * (best.0 - chosen.0)
                );
            }
        }
    }
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("allowance") => return allowance(),
        Some("timing") => return timing(),
        Some("auto") => {
            let breast = std::env::args().nth(2);
            return auto_table(breast.as_deref().map(std::path::Path::new));
        }
        Some("sweep") => {
            let out = std::env::args()
                .nth(2)
                .expect("-- sweep OUT [BREAST_CANCER_DIR]");
            let breast = std::env::args().nth(3);
            return sweep(out.as_ref(), breast.as_deref().map(std::path::Path::new));
        }
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
