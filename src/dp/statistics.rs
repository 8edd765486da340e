//! Goodness-of-fit tests for the statistical tests of the samplers and
//! mechanisms. Each test draws from a fixed seed, so its outcome is
//! deterministic; the threshold below is its false-failure rate over seeds.

use statrs::distribution::{ChiSquared, ContinuousCDF};

/// Reject a sampler when the goodness-of-fit p-value falls below this: a
/// correct sampler fails with probability 10⁻⁶ for a random seed.
pub const FALSE_FAILURE_RATE: f64 = 1e-6;

/// Counts `samples` into the bins (−∞, e₀), [e₀, e₁), …, [eₙ₋₁, ∞) of the
/// sorted `edges`.
pub fn histogram(samples: impl IntoIterator<Item = i128>, edges: &[i128]) -> Vec<u64> {
    let mut counts = vec![0u64; edges.len() + 1];
    for sample in samples {
        counts[edges.partition_point(|&edge| edge <= sample)] += 1;
    }
    counts
}

/// Pearson's χ² test of bin counts against bin probabilities summing to 1.
pub fn chi_square_p_value(observed: &[u64], probabilities: &[f64]) -> f64 {
    assert_eq!(observed.len(), probabilities.len());
    let total: u64 = observed.iter().sum();
    let statistic: f64 = observed
        .iter()
        .zip(probabilities)
        .map(|(&count, &p)| {
            let expected = p * total as f64;
            assert!(expected >= 5.0, "bin with only {expected} expected samples");
            (count as f64 - expected).powi(2) / expected
        })
        .sum();
    let freedom = (observed.len() - 1) as f64;
    ChiSquared::new(freedom)
        .expect("at least two bins")
        .sf(statistic)
}

/// One-sample Kolmogorov–Smirnov test against a continuous `cdf`, with
/// Stephens' (1970) small-sample correction of the asymptotic distribution.
pub fn kolmogorov_smirnov_p_value(samples: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    let distance = samples
        .iter()
        .enumerate()
        .map(|(index, &x)| {
            let at = cdf(x);
            (at - index as f64 / n).max((index + 1) as f64 / n - at)
        })
        .fold(0.0, f64::max);
    let lambda = (n.sqrt() + 0.12 + 0.11 / n.sqrt()) * distance;
    let tail: f64 = (1..=100)
        .map(|k| {
            let k = f64::from(k);
            let sign = if k % 2.0 == 1.0 { 1.0 } else { -1.0 };
            sign * (-2.0 * k * k * lambda * lambda).exp()
        })
        .sum();
    (2.0 * tail).clamp(0.0, 1.0)
}
