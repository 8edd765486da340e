//! The sweep behind `auto`'s choices (docs/walr-map.md): test AUC of the
//! label-blind WALR trainer on each candidate feature map, with the noise a
//! release would add, simulated in process so that many draws are cheap.
//!
//! `cargo run --release --example walr_map_sweep -- [N] [EPSILON] [DRAWS] [L2]`
//! (default 10,000, 0.1, 24, 0: the trainer's L2 term): k = 32 uniform features, 20 % positives,
//! δ = N^−1.1, σ from the server's own calibration. The noise here is a
//! seeded simulation; the figures through the server are
//! `walr_map_figures`.

use dpgate::domain::dataset::{Unit, WalrStats};
use dpgate::dp::{Delta, Epsilon, Mechanism};
use dpgate::releases::kinds::walr_map::{self, MappedSums, Moments, WalrGrid};
use dpgate_api_types::{FeatureMap, PrivacyUnit, WalrMap};
use dpgate_client::mapped::{map_rows, noisy_dot};
use dpgate_client::trainer::{TrainerConfig, train};
use dpgate_learn::synthetic::logistic_data;
use dpgate_learn::{auc, sigmoid};
use ndarray::Array2;
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

const K: usize = 32;

struct Setup {
    x: Array2<f64>,
    y: Vec<u8>,
    test_x: Array2<f64>,
    test_y: Vec<u8>,
    stats: WalrStats,
    epsilon: f64,
    delta: f64,
}

/// The release's σ on `map` under `unit` (the mechanism noises the exact
/// sums; the mean's σ is theirs over N).
fn sigma(setup: &Setup, map: &FeatureMap, unit: PrivacyUnit) -> f64 {
    let n = setup.y.len() as u64;
    let grid = WalrGrid::new(map, true).expect("a grid");
    let reach = match (unit, map.name) {
        (PrivacyUnit::Label, WalrMap::None) => {
            grid.norm_bound_squared(setup.stats.max_norm_squared)
        }
        _ => grid.reach_squared(),
    };
    Mechanism::gaussian(
        Epsilon::new(setup.epsilon).expect("an ε"),
        Delta::new(setup.delta).expect("a δ"),
        grid.sensitivity(
            match unit {
                PrivacyUnit::Label => Unit::Label,
                _ => Unit::Row,
            },
            reach,
        ),
        K + 1,
        grid.range(n),
    )
    .expect("a mechanism")
    .noise_std()
        / n as f64
}

/// Mean test AUC (and its standard error) over `draws` noise draws.
fn mean_auc(
    setup: &Setup,
    map: &FeatureMap,
    unit: PrivacyUnit,
    l2: f64,
    draws: usize,
) -> (f64, f64, f64) {
    let n = setup.y.len() as u64;
    let grid = WalrGrid::new(map, true).expect("a grid");
    let mut pass = MappedSums::new(map.clone(), grid);
    let rows = setup.x.rows().into_iter().zip(&setup.y);
    let stored: Vec<(u8, Vec<f32>)> = rows
        .map(|(row, &y)| (y, row.iter().map(|&v| v as f32).collect()))
        .collect();
    pass.add_rows(stored.iter().map(|(y, x)| (*y, x.as_slice())));
    let exact: Vec<f64> = pass
        .exact()
        .to_f64()
        .into_iter()
        .map(|sum| sum / n as f64)
        .collect();
    let sigma = sigma(setup, map, unit);
    let (v, test_v) = (
        map_rows(map, setup.x.clone()),
        map_rows(map, setup.test_x.clone()),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let normal = Normal::new(0.0, sigma).expect("a σ");
    let mut aucs = Vec::new();
    for draw in 0..draws {
        let noisy: Vec<f64> = exact.iter().map(|e| e + normal.sample(&mut rng)).collect();
        let release = noisy_dot(map, &noisy[..K], Some(noisy[K]));
        let config = TrainerConfig {
            l2,
            seed: draw as u64,
            ..TrainerConfig::default()
        };
        let trained = train(v.view(), &release, &config, |_| {}).expect("trained");
        let scores: Vec<f64> = test_v
            .rows()
            .into_iter()
            .map(|row| {
                let logit: f64 = row.iter().zip(&trained.weights).map(|(v, w)| v * w).sum();
                sigmoid(logit + trained.intercept.expect("an intercept"))
            })
            .collect();
        aucs.push(auc(&scores, &setup.test_y).expect("both classes"));
    }
    let mean = aucs.iter().sum::<f64>() / draws as f64;
    let var = aucs.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (draws - 1).max(1) as f64;
    (mean, (var / draws as f64).sqrt(), sigma)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(10_000, |v| v.parse().expect("N"));
    let epsilon: f64 = args.get(2).map_or(0.1, |v| v.parse().expect("ε"));
    let draws: usize = args.get(3).map_or(24, |v| v.parse().expect("draws"));
    let l2: f64 = args.get(4).map_or(0.0, |v| v.parse().expect("l2"));
    let data = logistic_data(n, K, 15);
    let test = logistic_data(100_000, K, 16);
    let mut stats = WalrStats::empty(K);
    for (row, &y) in data.x.rows().into_iter().zip(&data.y) {
        let stored: Vec<f32> = row.iter().map(|&v| v as f32).collect();
        stats.add(y, &stored);
    }
    let setup = Setup {
        x: data.x,
        y: data.y,
        test_x: test.x,
        test_y: test.y,
        stats,
        epsilon,
        delta: (n as f64).powf(-1.1),
    };
    let moments = Moments::of_sums(
        &setup.stats.feature_sums,
        &setup.stats.feature_square_sums,
        n as f64,
        K,
    )
    .expect("moments");
    println!(
        "N = {n}, k = {K}, ε = {epsilon}, δ = N^-1.1, {draws} draws: mean test AUC ± s.e. (σ)"
    );
    for unit in [PrivacyUnit::Label, PrivacyUnit::Row] {
        for asked in [WalrMap::None, WalrMap::Centre, WalrMap::Auto] {
            let map = walr_map::fit(asked, unit, K, Some(&moments)).expect("a map");
            let (auc, se, sigma) = mean_auc(&setup, &map, unit, l2, draws);
            println!("{unit:?} {asked:?}: {auc:.4} ± {se:.4} (σ = {sigma:.3e})");
        }
        let centred = walr_map::fit(WalrMap::Centre, unit, K, Some(&moments)).expect("a map");
        let rms = match unit {
            PrivacyUnit::Label => moments.variance.iter().sum::<f64>().sqrt(),
            PrivacyUnit::Row | PrivacyUnit::User => (K as f64 / 12.0).sqrt(),
        };
        for kappa in [0.5, 0.75, 1.0, 1.25] {
            for alpha in [0.1, 0.25, 0.5, 1.0] {
                let radius = kappa * rms;
                let map = FeatureMap {
                    name: WalrMap::Auto,
                    radius: Some(radius),
                    intercept_weight: alpha * radius,
                    ..centred.clone()
                };
                let (auc, se, sigma) = mean_auc(&setup, &map, unit, l2, draws);
                println!(
                    "{unit:?} R = {kappa}·rms, a = {alpha}·R: {auc:.4} ± {se:.4} (σ = {sigma:.3e})"
                );
            }
        }
    }
}
