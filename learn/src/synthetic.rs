//! Labelled data drawn from a known logistic model, reproducible from a
//! seed: features uniform on [0, 1]ᵏ, P(y = 1 | x) = σ(wᵀx + b) with fixed
//! alternating weights and the intercept b solved for (by bisection over
//! the drawn features) so that the expected share of positive labels is
//! 20% (a typical conversion-style base rate, where accuracy alone
//! says little and AUC is the measure to watch).

use ndarray::Array2;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use crate::logistic::sigmoid;

/// The expected share of positive labels.
const BASE_RATE: f64 = 0.2;

/// A synthetic labelled dataset and the model that generated it.
#[derive(Debug, Clone)]
pub struct Synthetic {
    /// N × k features in [0, 1].
    pub x: Array2<f64>,
    /// Labels 0/1.
    pub y: Vec<u8>,
    /// The generating weights and intercept.
    pub weights: Vec<f64>,
    pub intercept: f64,
}

/// The generating weights for `k` features: ±2·(1 − j/k), alternating.
pub fn true_weights(k: usize) -> Vec<f64> {
    (0..k)
        .map(|j| {
            let size = 2.0 * (1.0 - j as f64 / k as f64);
            if j % 2 == 0 { size } else { -size }
        })
        .collect()
}

/// `n` rows of `k` features from the seeded generator.
pub fn logistic_data(n: usize, k: usize, seed: u64) -> Synthetic {
    let weights = true_weights(k);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = Array2::from_shape_simple_fn((n, k), || rng.random::<f64>());
    let logits = x.dot(&ndarray::Array1::from(weights.clone()));
    let rate = |b: f64| logits.iter().map(|z| sigmoid(z + b)).sum::<f64>() / n.max(1) as f64;
    let (mut low, mut high) = (-100.0, 100.0);
    for _ in 0..100 {
        let middle = (low + high) / 2.0;
        if rate(middle) < BASE_RATE {
            low = middle;
        } else {
            high = middle;
        }
    }
    let intercept = (low + high) / 2.0;
    let y = logits
        .iter()
        .map(|z| u8::from(rng.random::<f64>() < sigmoid(z + intercept)))
        .collect();
    Synthetic {
        x,
        y,
        weights,
        intercept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_is_reproducible_and_about_a_fifth_positive() {
        let a = logistic_data(20_000, 16, 7);
        let b = logistic_data(20_000, 16, 7);
        assert_eq!(a.y, b.y);
        assert_eq!(a.x, b.x);
        assert!(a.x.iter().all(|v| (0.0..1.0).contains(v)));
        let rate = a.y.iter().map(|&y| f64::from(y)).sum::<f64>() / 20_000.0;
        assert!((0.19..0.21).contains(&rate), "{rate}");
        assert_ne!(logistic_data(100, 16, 8).y, a.y[..100].to_vec());
    }
}
