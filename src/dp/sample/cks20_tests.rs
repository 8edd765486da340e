use super::*;
use crate::dp::statistics::{FALSE_FAILURE_RATE, chi_square_p_value, histogram};
use prio::dp::Rational;
use prio::dp::distributions::{DiscreteGaussian, DiscreteLaplace};
use prio::vdaf::xof::SeedStreamTurboShake128;
use rand::SeedableRng;
use rand::distr::Distribution;
use rand::rngs::ChaCha8Rng;
use serde::Deserialize;
use statrs::distribution::{ContinuousCDF, Normal};

#[derive(Deserialize)]
struct Vector {
    seed: String,
    std_num: u32,
    std_denom: u32,
    samples: Vec<i128>,
}

fn seed_bytes(hex: &str) -> [u8; 32] {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).expect("hex seed"))
        .collect();
    bytes.try_into().expect("32-byte seed")
}

#[test]
fn replays_the_reference_implementations_test_vectors() {
    let vectors = [
        include_str!("../testdata/prio/discrete_gauss_3.json"),
        include_str!("../testdata/prio/discrete_gauss_9.json"),
        include_str!("../testdata/prio/discrete_gauss_100.json"),
        include_str!("../testdata/prio/discrete_gauss_41293847.json"),
    ];
    for text in vectors {
        let vector: Vector = serde_json::from_str(text).unwrap();
        assert_eq!(vector.std_denom, 1);
        let mut rng = SeedStreamTurboShake128::from_seed(seed_bytes(&vector.seed));
        let samples: Vec<i128> = (0..vector.samples.len())
            .map(|_| discrete_gaussian(vector.std_num, &mut rng))
            .collect();
        assert_eq!(samples, vector.samples, "σ = {}", vector.std_num);
    }
}

fn prio_value(value: impl ToString) -> i128 {
    value.to_string().parse().expect("prio samples fit an i128")
}

#[test]
fn agrees_with_prio_sample_for_sample() {
    for sigma in [
        1u32,
        2,
        3,
        7,
        50,
        1000,
        (1 << 20) + 3,
        1 << 24,
        MAX_GAUSSIAN_SIGMA,
    ] {
        let reference = DiscreteGaussian::new(Rational::from_unsigned(sigma, 1).unwrap()).unwrap();
        let mut ours = ChaCha8Rng::seed_from_u64(u64::from(sigma));
        let mut theirs = ChaCha8Rng::seed_from_u64(u64::from(sigma));
        for draw in 0..300 {
            assert_eq!(
                discrete_gaussian(sigma, &mut ours),
                prio_value(reference.sample(&mut theirs)),
                "Gaussian σ = {sigma}, draw {draw}"
            );
        }
    }
    for scale in [1u64, 2, 5, 1000, 1 << 23, 1 << 40] {
        let reference = DiscreteLaplace::new(Rational::from_unsigned(scale, 1).unwrap()).unwrap();
        let mut ours = ChaCha8Rng::seed_from_u64(scale);
        let mut theirs = ChaCha8Rng::seed_from_u64(scale);
        for draw in 0..300 {
            assert_eq!(
                discrete_laplace(scale, &mut ours),
                prio_value(reference.sample(&mut theirs)),
                "Laplace scale {scale}, draw {draw}"
            );
        }
    }
}

#[test]
fn the_big_integer_tail_path_draws_exactly_like_the_fast_path() {
    for (p, q) in [(0u128, 1u128), (5, 7), (7, 5), (1000, 3), (12345, 12345)] {
        let seed = p as u64 * 31 + q as u64;
        let mut fast = ChaCha8Rng::seed_from_u64(seed);
        let mut big = ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..200 {
            assert_eq!(
                bernoulli_exp(p, q, &mut fast),
                bernoulli_exp_big(&BigUint::from(p), q, &mut big)
            );
        }
    }
}

const SAMPLES: usize = 1_000_000;

/// Bins ±`reach` into `width`-sized bins plus two tails, and returns the
/// χ² p-value of `samples` against the probability `mass(a, b)` of [a, b).
fn fit(samples: &[i128], reach: i128, width: i128, mass: impl Fn(i128, i128) -> f64) -> f64 {
    let edges: Vec<i128> = (-reach..=reach).step_by(width as usize).collect();
    let mut probabilities = vec![mass(i128::MIN, edges[0])];
    probabilities.extend(edges.windows(2).map(|pair| mass(pair[0], pair[1])));
    probabilities.push(mass(edges[edges.len() - 1], i128::MAX));
    chi_square_p_value(&histogram(samples.iter().copied(), &edges), &probabilities)
}

/// P[a ≤ Y < b] for the discrete Gaussian of scale σ. For σ = 3 the pmf is
/// summed exactly; for σ ≥ 1000 the half-integer-shifted normal CDF is exact
/// up to terms of order e^{−2π²σ²} (Poisson summation).
fn gaussian_mass(sigma: f64) -> impl Fn(i128, i128) -> f64 {
    let normal = Normal::new(0.0, sigma).unwrap();
    let weights: Vec<f64> = (-200..=200)
        .map(|y: i32| (-f64::from(y * y) / (2.0 * sigma * sigma)).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    move |a, b| {
        if sigma < 10.0 {
            let (a, b) = (a.max(-200), b.min(201));
            (a..b).map(|y| weights[(y + 200) as usize]).sum::<f64>() / total
        } else {
            let bound = |y: i128| {
                if y == i128::MIN || y == i128::MAX {
                    y.signum() as f64 * f64::INFINITY
                } else {
                    y as f64 - 0.5
                }
            };
            normal.cdf(bound(b)) - normal.cdf(bound(a))
        }
    }
}

/// P[a ≤ Y < b] for the discrete Laplace of scale t, by its geometric sums.
fn laplace_mass(scale: f64) -> impl Fn(i128, i128) -> f64 {
    let r = (-1.0 / scale).exp();
    let normaliser = (1.0 - r) / (1.0 + r);
    // Σ_{y ≥ n} r^y for n ≥ 0.
    let upper = move |n: i128| r.powf(n as f64) / (1.0 - r);
    move |a, b| {
        let at_least = |n: i128| {
            // P[Y ≥ n] · (1 + r)/(1 − r), by symmetry for negative n.
            if n == i128::MIN {
                2.0 / (1.0 - r) - 1.0
            } else if n == i128::MAX {
                0.0
            } else if n >= 0 {
                upper(n)
            } else {
                2.0 / (1.0 - r) - 1.0 - upper(1 - n)
            }
        };
        normaliser * (at_least(a) - at_least(b))
    }
}

fn draws(seed: u64, sampler: impl Fn(&mut ChaCha8Rng) -> i128) -> Vec<i128> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..SAMPLES).map(|_| sampler(&mut rng)).collect()
}

#[test]
fn discrete_gaussian_matches_its_pmf_and_wrong_scales_are_rejected() {
    // Per-integer bins at σ = 3; quarter-σ bins at the release scale 2^23.
    for (sigma, width) in [(3u32, 1i128), (1 << 23, 1 << 21)] {
        let reach = 4 * i128::from(sigma);
        let mass = gaussian_mass(f64::from(sigma));
        let p = fit(
            &draws(7, |rng| discrete_gaussian(sigma, rng)),
            reach,
            width,
            &mass,
        );
        assert!(p > FALSE_FAILURE_RATE, "σ = {sigma}: p = {p:e}");
        for factor in [0.7, 1.3] {
            let wrong = (f64::from(sigma) * factor).round() as u32;
            let p = fit(
                &draws(8, |rng| discrete_gaussian(wrong, rng)),
                reach,
                width,
                &mass,
            );
            assert!(
                p < FALSE_FAILURE_RATE,
                "σ×{factor} passed as σ = {sigma}: p = {p:e}"
            );
        }
    }
}

#[test]
fn discrete_laplace_matches_its_pmf_and_wrong_scales_are_rejected() {
    for (scale, width) in [(4u64, 1i128), (1 << 23, 1 << 21)] {
        let reach = 8 * i128::from(scale);
        let mass = laplace_mass(scale as f64);
        let p = fit(
            &draws(9, |rng| discrete_laplace(scale, rng)),
            reach,
            width,
            &mass,
        );
        assert!(p > FALSE_FAILURE_RATE, "scale {scale}: p = {p:e}");
        for factor in [0.7, 1.3] {
            let wrong = (scale as f64 * factor).round() as u64;
            let p = fit(
                &draws(10, |rng| discrete_laplace(wrong, rng)),
                reach,
                width,
                &mass,
            );
            assert!(
                p < FALSE_FAILURE_RATE,
                "scale×{factor} passed as {scale}: p = {p:e}"
            );
        }
    }
}
