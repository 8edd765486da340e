use super::*;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};

#[test]
fn clopper_pearson_matches_scipy() {
    // scipy.stats.beta.ppf(q, hits + 1, trials − hits).
    let close = |ours: f64, theirs: f64| (ours - theirs).abs() < 1e-9 * theirs.max(1e-12);
    assert!(close(
        clopper_pearson_upper(0, 10, 0.95),
        0.258_865_550_893_052_2
    ));
    assert!(close(
        clopper_pearson_upper(5, 10, 0.95),
        0.777_558_898_991_870_6
    ));
    assert!(close(
        clopper_pearson_upper(100, 100_000, 0.975),
        0.001_216_136_395_647_646_8
    ));
    assert_eq!(clopper_pearson_upper(7, 7, 0.95), 1.0);
}

#[test]
fn the_bound_is_the_tradeoff_inequality_at_the_upper_rates() {
    let errors = Errors {
        false_positives: 100,
        negatives: 100_000,
        false_negatives: 50_000,
        positives: 100_000,
    };
    let alpha = clopper_pearson_upper(100, 100_000, 0.975);
    let beta = clopper_pearson_upper(50_000, 100_000, 0.975);
    let expected = ((1.0 - 1e-5 - beta) / alpha).ln();
    assert!((errors.epsilon_lower(1e-5, 0.95) - expected).abs() < 1e-12);
    // A test no better than a coin proves nothing.
    let coin = Errors {
        false_positives: 50_000,
        negatives: 100_000,
        false_negatives: 50_000,
        positives: 100_000,
    };
    assert_eq!(coin.epsilon_lower(1e-5, 0.95), 0.0);
}

fn laplace(rng: &mut ChaCha8Rng, scale: f64) -> f64 {
    let u: f64 = rng.random::<f64>() - 0.5;
    -scale * u.signum() * (1.0 - 2.0 * u.abs()).ln()
}

/// 10⁶ trials a side of a mechanism adding `noise` to a query that is 0
/// on D₀ and 1 on D₁ (sensitivity 1).
fn audit(noise: impl Fn(&mut ChaCha8Rng) -> f64, estimate: Estimate, delta: f64, seed: u64) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let null: Vec<f64> = (0..1_000_000).map(|_| noise(&mut rng)).collect();
    let alternative: Vec<f64> = (0..1_000_000).map(|_| 1.0 + noise(&mut rng)).collect();
    threshold_audit(&null, &alternative, estimate, delta, 0.95).epsilon_lower
}

// The bounds below are 95 % lower bounds from one seeded run each: a
// correct mechanism exceeds its ε with probability at most 5 % over
// seeds, and these seeds are fixed.

#[test]
fn laplace_at_epsilon_one_is_audited_to_at_least_0_9_and_at_most_1() {
    let bound = audit(|rng| laplace(rng, 1.0), Estimate::ClopperPearson, 0.0, 1);
    assert!((0.9..=1.0).contains(&bound), "{bound}");
    // Half the scale is ε = 2 claimed as 1: caught.
    let broken = audit(|rng| laplace(rng, 0.5), Estimate::ClopperPearson, 0.0, 2);
    assert!(broken > 1.0, "{broken}");
}

/// The best a threshold test can prove here, computed from the exact
/// rates at 9·10⁵ counted trials a side, is 0.763; this seed, with its
/// threshold chosen on 10⁵ trials a side, proves 0.751. (Laplace's test
/// below proves 0.991.)
#[test]
fn the_gaussian_at_epsilon_one_is_audited_to_at_least_0_7() {
    let delta = 1e-5;
    let sigma = crate::dp::analytic_sigma(1.0, delta, 1.0).unwrap();
    let normal = Normal::new(0.0, sigma).unwrap();
    let bound = audit(|rng| normal.sample(rng), Estimate::ClopperPearson, delta, 3);
    assert!((0.7..=1.0).contains(&bound), "σ = {sigma}: {bound}");
    // σ halved: caught.
    let halved = Normal::new(0.0, sigma / 2.0).unwrap();
    let broken = audit(|rng| halved.sample(rng), Estimate::ClopperPearson, delta, 4);
    assert!(broken > 1.0, "{broken}");
}

/// The GDP estimate reads μ at error rates near ½, where 9·10⁵ trials
/// pin it to within 2 %: it proves nearly all of the Gaussian's ε (this
/// seed 0.977), and catches the halved σ by far more (2.11 of its 2.15).
#[test]
fn the_gdp_estimate_proves_nearly_all_of_the_gaussians_epsilon() {
    let delta = 1e-5;
    let sigma = crate::dp::analytic_sigma(1.0, delta, 1.0).unwrap();
    let normal = Normal::new(0.0, sigma).unwrap();
    let bound = audit(|rng| normal.sample(rng), Estimate::Gdp, delta, 5);
    assert!((0.95..=1.0).contains(&bound), "σ = {sigma}: {bound}");
    let halved = Normal::new(0.0, sigma / 2.0).unwrap();
    let broken = audit(|rng| halved.sample(rng), Estimate::Gdp, delta, 6);
    assert!(broken > 2.0, "{broken}");
}

#[test]
fn mu_is_bounded_by_the_gaussian_tradeoff_at_the_upper_rates() {
    use statrs::distribution::{ContinuousCDF, Normal};
    let normal = Normal::standard();
    // α = β = Φ(−μ/2), over 10⁶ trials a side.
    let errors_at = |mu: f64| {
        let wrong = (normal.cdf(-mu / 2.0) * 1e6).round() as u64;
        Errors {
            false_positives: wrong,
            negatives: 1_000_000,
            false_negatives: wrong,
            positives: 1_000_000,
        }
    };
    let errors = errors_at(0.5);
    let each = 0.975;
    let alpha = clopper_pearson_upper(errors.false_positives, 1_000_000, each);
    let expected = normal.inverse_cdf(1.0 - alpha) - normal.inverse_cdf(alpha);
    assert!((errors.mu_lower(0.95) - expected).abs() < 1e-12);
    assert!((0.49..0.5).contains(&expected), "{expected}");
    // And its ε at δ is the Gaussian mechanism's of that μ.
    let epsilon = errors.bound(Estimate::Gdp, 1e-5, 0.95);
    assert!((epsilon - crate::dp::gaussian_epsilon(expected, 1e-5)).abs() < 1e-12);
    // A coin proves nothing.
    assert_eq!(errors_at(0.0).mu_lower(0.95), 0.0);
    assert_eq!(errors_at(0.0).bound(Estimate::Gdp, 1e-5, 0.95), 0.0);
}

/// 2·10⁵ releases a side of a production mechanism (its lattice, its
/// exact sampler, the OS CSPRNG) on a query that is 0 on D₀ and 1 on D₁:
/// the errors of the best threshold test.
fn audit_mechanism(mechanism: &crate::dp::Mechanism, estimate: Estimate, delta: f64) -> Errors {
    let mut rng = crate::dp::OsNoise::new();
    let mut scores = |value: f64| -> Vec<f64> {
        (0..200_000)
            .map(|_| mechanism.release(&[value], &mut rng).unwrap()[0])
            .collect()
    };
    let (null, alternative) = (scores(0.0), scores(1.0));
    threshold_audit(&null, &alternative, estimate, delta, 0.95).errors
}

/// Most audits of one mechanism before its power check fails: one audit's
/// chosen threshold sometimes lands where it proves little (here 2 of 7
/// runs of this test fell below a floor, once to 0.16 for the Gaussian),
/// so the power floor must be reached by one of these; every audit's
/// bound is still checked against ε.
const POWER_ATTEMPTS: usize = 5;

/// The production mechanisms never show more than their ε, with fresh OS
/// noise: the bound is taken at confidence 1 − 10⁻⁶, so a correct
/// mechanism fails with probability at most `FALSE_FAILURE_RATE` per
/// audit. At 95 % the errors of one of [`POWER_ATTEMPTS`] audits must
/// still prove most of ε (power: Laplace 0.97–0.99 and the Gaussian
/// 0.52–0.59 over five runs), or the test could not fail.
#[test]
fn the_production_laplace_and_gaussian_mechanisms_pass_their_own_audit() {
    use crate::dp::statistics::FALSE_FAILURE_RATE;
    use crate::dp::{Delta, Epsilon, Mechanism};
    let sure = 1.0 - FALSE_FAILURE_RATE;
    let epsilon = Epsilon::new(1.0).unwrap();
    let delta = Delta::new(1e-5).unwrap();
    for (name, mechanism, delta, power) in [
        (
            "Laplace",
            Mechanism::laplace(epsilon, 1.0, 1, 100.0).unwrap(),
            0.0,
            0.8,
        ),
        (
            "Gaussian",
            Mechanism::gaussian(epsilon, delta, 1.0, 1, 100.0).unwrap(),
            1e-5,
            0.4,
        ),
    ] {
        let mut estimates = vec![(Estimate::ClopperPearson, power)];
        if delta > 0.0 {
            estimates.push((Estimate::Gdp, 0.9));
        }
        for (estimate, power) in estimates {
            let mut seen = Vec::new();
            while seen.len() < POWER_ATTEMPTS && seen.iter().all(|&value| value < power) {
                let errors = audit_mechanism(&mechanism, estimate, delta);
                let proved = errors.bound(estimate, delta, sure);
                assert!(
                    proved <= 1.0,
                    "{name} ({estimate:?}): {proved} > ε: {errors:?}"
                );
                seen.push(errors.bound(estimate, delta, 0.95));
            }
            assert!(
                seen.iter().any(|&value| value >= power),
                "{name} ({estimate:?}): only {seen:?}"
            );
        }
    }
}
