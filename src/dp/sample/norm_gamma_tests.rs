use super::*;
use crate::dp::statistics::{FALSE_FAILURE_RATE, kolmogorov_smirnov_p_value};
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use statrs::distribution::{ContinuousCDF, Gamma};

const SCALE: u64 = 1 << 20;

fn norm(vector: &[i128]) -> f64 {
    vector
        .iter()
        .map(|&x| (x as f64).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn the_norm_is_gamma_and_wrong_scales_are_rejected() {
    for (dims, draws) in [(1usize, 20_000usize), (4, 20_000), (64, 5_000)] {
        let gamma = Gamma::new(dims as f64, 1.0 / SCALE as f64).unwrap();
        let p_value = |scale: u64, seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut norms: Vec<f64> = (0..draws)
                .map(|_| norm(&norm_gamma_lattice(dims, scale, &mut rng)))
                .collect();
            kolmogorov_smirnov_p_value(&mut norms, |x| gamma.cdf(x))
        };
        let right = p_value(SCALE, 11);
        assert!(right > FALSE_FAILURE_RATE, "k = {dims}: p = {right:e}");
        for factor in [0.7, 1.3] {
            let wrong = p_value((SCALE as f64 * factor) as u64, 12);
            assert!(
                wrong < FALSE_FAILURE_RATE,
                "k = {dims}, Θ×{factor}: p = {wrong:e}"
            );
        }
    }
}

#[test]
fn the_direction_is_uniform_on_the_sphere_and_a_lopsided_one_is_rejected() {
    // On the 2-sphere one coordinate of a uniform direction is uniform on
    // [−1, 1] (Archimedes). A vector of independent Laplace coordinates has
    // a lopsided direction and must fail the same test.
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut heights: Vec<f64> = (0..50_000)
        .map(|_| {
            let w = norm_gamma_lattice(3, SCALE, &mut rng);
            w[2] as f64 / norm(&w)
        })
        .collect();
    let uniform = |x: f64| ((x + 1.0) / 2.0).clamp(0.0, 1.0);
    let p = kolmogorov_smirnov_p_value(&mut heights, uniform);
    assert!(p > FALSE_FAILURE_RATE, "p = {p:e}");
    let mut lopsided: Vec<f64> = (0..50_000)
        .map(|_| {
            let w: Vec<i128> = (0..3)
                .map(|_| crate::dp::discrete_laplace(SCALE, &mut rng))
                .collect();
            w[2] as f64 / norm(&w)
        })
        .collect();
    let p = kolmogorov_smirnov_p_value(&mut lopsided, uniform);
    assert!(p < FALSE_FAILURE_RATE, "p = {p:e}");
}

#[test]
fn a_decided_rounding_does_not_change_with_more_digits() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    for _ in 0..200 {
        let mut radius: Vec<LazyReal> = (0..8).map(|_| exact_exponential(&mut rng)).collect();
        let mut direction: Vec<LazyReal> = (0..8).map(|_| exact_normal(&mut rng)).collect();
        let coarse = try_round(3, &mut radius, &mut direction, 1, &mut rng);
        let fine = try_round(3, &mut radius, &mut direction, 6, &mut rng).expect("decided");
        if let Some(coarse) = coarse {
            assert_eq!(coarse, fine);
        }
    }
}

#[test]
fn interval_arithmetic_rounds_outwards() {
    let int = |lo: i64, hi: i64| (BigInt::from(lo), BigInt::from(hi));
    assert_eq!(square(&int(-3, 2)), int(0, 9));
    assert_eq!(square(&int(-3, -2)), int(4, 9));
    assert_eq!(product(&int(-1, 2), &int(3, 4)), int(-4, 8));
    assert_eq!(quotient(&int(-7, 7), &int(2, 3)), int(-4, 4));
    assert_eq!(quotient(&int(6, 6), &int(3, 3)), int(2, 2));
}

#[test]
fn the_continuous_draw_has_a_gamma_norm_and_a_uniform_direction() {
    // False-failure rate of each KS test: FALSE_FAILURE_RATE (fixed seeds,
    // so in fact deterministic); the wrong scales must be rejected.
    let dims = 17;
    let gamma = Gamma::new(dims as f64, 1.0 / 2.5).unwrap();
    let norms = |scale: f64, seed: u64| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..5_000)
            .map(|_| {
                let z = norm_gamma_continuous(dims, scale, &mut rng);
                z.iter().map(|x| x * x).sum::<f64>().sqrt()
            })
            .collect::<Vec<f64>>()
    };
    let p = kolmogorov_smirnov_p_value(&mut norms(2.5, 21), |x| gamma.cdf(x));
    assert!(p > FALSE_FAILURE_RATE, "p = {p:e}");
    for factor in [0.7, 1.3] {
        let p = kolmogorov_smirnov_p_value(&mut norms(2.5 * factor, 22), |x| gamma.cdf(x));
        assert!(p < FALSE_FAILURE_RATE, "×{factor}: p = {p:e}");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let mut heights: Vec<f64> = (0..50_000)
        .map(|_| {
            let z = norm_gamma_continuous(3, 1.0, &mut rng);
            z[2] / z.iter().map(|x| x * x).sum::<f64>().sqrt()
        })
        .collect();
    let p = kolmogorov_smirnov_p_value(&mut heights, |x| ((x + 1.0) / 2.0).clamp(0.0, 1.0));
    assert!(p > FALSE_FAILURE_RATE, "p = {p:e}");
}
