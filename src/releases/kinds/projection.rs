//! A public random projection of the features (seed 004 §3.3.8): z = R·x
//! with R ∈ ℝ^{k′×k} of independent N(0, 1/k′) entries. R is a public
//! transform chosen before any data is read, not noise, so it comes from a
//! seeded generator that anyone can rerun: `rand_distr::StandardNormal`
//! draws from `ChaCha20Rng::seed_from_u64(seed)`, row by row, each divided
//! by √k′ (the wire format's `ProjectionParams` says the same).

use rand::rngs::ChaCha20Rng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;

use super::gradients::FeatureMap;

/// R, row-major.
#[derive(Debug, Clone)]
pub struct Projection {
    dims: usize,
    features: usize,
    seed: u64,
    matrix: Vec<f64>,
}

impl Projection {
    /// The k′ × k projection of `seed`.
    pub fn new(seed: u64, dims: usize, features: usize) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let scale = (dims as f64).sqrt();
        let matrix = (0..dims * features)
            .map(|_| rng.sample::<f64, _>(StandardNormal) / scale)
            .collect();
        Projection {
            dims,
            features,
            seed,
            matrix,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Rᵀ·w: the weights on x of the linear map w on z = R·x.
    pub fn back(&self, weights: &[f64]) -> Vec<f64> {
        let mut back = vec![0.0; self.features];
        for (row, &weight) in self.matrix.chunks_exact(self.features).zip(weights) {
            for (total, &entry) in back.iter_mut().zip(row) {
                *total += weight * entry;
            }
        }
        back
    }
}

impl FeatureMap for Projection {
    fn dims(&self) -> usize {
        self.dims
    }

    fn apply(&self, features: &[f32], out: &mut [f64]) {
        for (mapped, row) in out.iter_mut().zip(self.matrix.chunks_exact(self.features)) {
            *mapped = row
                .iter()
                .zip(features)
                .map(|(&entry, &value)| entry * f64::from(value))
                .sum();
        }
    }

    /// A projection's entries have either sign: its coordinates are bounded
    /// only by the clip.
    fn bounded(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_matrix_and_back_is_the_transpose() {
        let (a, b) = (Projection::new(7, 3, 5), Projection::new(7, 3, 5));
        assert_eq!(a.matrix, b.matrix);
        assert_ne!(a.matrix, Projection::new(8, 3, 5).matrix);
        // wᵀ(R·x) = (Rᵀw)ᵀx for every w and x.
        let x = [0.1f32, 0.9, 0.5, 0.0, 1.0];
        let w = [0.3, -2.0, 1.5];
        let mut z = [0.0; 3];
        a.apply(&x, &mut z);
        let through: f64 = w.iter().zip(z).map(|(w, z)| w * z).sum();
        let back: f64 = a
            .back(&w)
            .iter()
            .zip(x)
            .map(|(v, x)| v * f64::from(x))
            .sum();
        assert!((through - back).abs() < 1e-12, "{through} vs {back}");
    }

    #[test]
    fn the_entries_have_variance_one_over_dims() {
        // 20,000 entries: the sample variance of N(0, 1/k′) is within 5 %
        // of 1/k′ except with probability below 10⁻⁶ (its relative std is
        // √(2/20,000) = 1 %).
        let projection = Projection::new(1, 50, 400);
        let n = projection.matrix.len() as f64;
        let variance = projection.matrix.iter().map(|e| e * e).sum::<f64>() / n;
        assert!((variance * 50.0 - 1.0).abs() < 0.05, "{variance}");
    }
}
