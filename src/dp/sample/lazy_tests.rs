use super::*;
use crate::dp::statistics::{FALSE_FAILURE_RATE, chi_square_p_value, kolmogorov_smirnov_p_value};
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use statrs::distribution::{ContinuousCDF, Exp, Normal};

const SAMPLES: usize = 200_000;

fn draws(seed: u64, sampler: fn(&mut ChaCha8Rng) -> LazyReal) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..SAMPLES)
        .map(|_| sampler(&mut rng).approximate(&mut rng))
        .collect()
}

/// KS p-values of the draws, and of the draws rescaled by 0.7 and 1.3
/// (deliberately wrong samplers), against `cdf`.
fn fits(values: &[f64], cdf: impl Fn(f64) -> f64) -> [f64; 3] {
    [1.0, 0.7, 1.3].map(|factor| {
        let mut scaled: Vec<f64> = values.iter().map(|x| x * factor).collect();
        kolmogorov_smirnov_p_value(&mut scaled, &cdf)
    })
}

#[test]
fn exact_exponential_is_exp_one_and_rescaled_draws_are_rejected() {
    let exp = Exp::new(1.0).unwrap();
    let [right, low, high] = fits(&draws(1, exact_exponential), |x| exp.cdf(x));
    assert!(right > FALSE_FAILURE_RATE, "p = {right:e}");
    assert!(
        low < FALSE_FAILURE_RATE && high < FALSE_FAILURE_RATE,
        "{low:e} {high:e}"
    );
}

#[test]
fn exact_normal_is_standard_normal_and_rescaled_draws_are_rejected() {
    let normal = Normal::standard();
    let [right, low, high] = fits(&draws(2, exact_normal), |x| normal.cdf(x));
    assert!(right > FALSE_FAILURE_RATE, "p = {right:e}");
    assert!(
        low < FALSE_FAILURE_RATE && high < FALSE_FAILURE_RATE,
        "{low:e} {high:e}"
    );
}

#[test]
fn exp_half_succeeds_with_probability_e_to_the_minus_half() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let trials = 1_000_000;
    let successes = (0..trials).filter(|_| exp_half(&mut rng)).count() as f64;
    let p = (-0.5f64).exp();
    let z = (successes - trials as f64 * p) / (trials as f64 * p * (1.0 - p)).sqrt();
    // |z| > 5.33 has two-sided probability 10⁻⁷.
    assert!(z.abs() < 5.33, "z = {z}");
}

#[test]
fn choose_has_its_three_stated_probabilities() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for k in [1u64, 3, 10] {
        let mut counts = [0u64; 3];
        for _ in 0..300_000 {
            counts[(choose(k, &mut rng) + 1) as usize] += 1;
        }
        let m = 2.0 * k as f64 + 2.0;
        let p = chi_square_p_value(&counts, &[1.0 / m, 1.0 / m, (m - 2.0) / m]);
        assert!(p > FALSE_FAILURE_RATE, "k = {k}: p = {p:e}");
    }
}

#[test]
fn bounds_bracket_the_value_and_narrow_with_more_digits() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for _ in 0..1000 {
        let mut normal = exact_normal(&mut rng);
        let (lo1, hi1) = normal.bounds(1, &mut rng);
        let (lo3, hi3) = normal.bounds(3, &mut rng);
        assert_eq!(&hi1 - &lo1, BigInt::from(1));
        assert_eq!(&hi3 - &lo3, BigInt::from(1));
        // [lo3, hi3]·2^-96 lies within [lo1, hi1]·2^-32.
        assert!(lo3 >= &lo1 << 64u32 && hi3 <= &hi1 << 64u32);
        let value = normal.approximate(&mut rng);
        let (lo, hi) = (
            lo1.to_string().parse::<f64>().unwrap(),
            hi1.to_string().parse::<f64>().unwrap(),
        );
        assert!(lo / 2f64.powi(32) <= value && value <= hi / 2f64.powi(32));
    }
}
