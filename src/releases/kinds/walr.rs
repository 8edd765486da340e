//! The WALR release: the noisy dot product of the Weighted Aggregate
//! Logistic Regression design (seed document 002), with its intercept term.
//!
//! For labels yᵢ ∈ {0, 1} and scaled features xᵢ ∈ [0, 1]ᵏ the release is
//! (1/N)·Σ yᵢ·(1, xᵢ) + Gaussian noise: the k-vector `noisy_dot` and the
//! scalar `noisy_intercept`, one Gaussian release over k + 1 coordinates.
//! A label-blind trainer subtracts it from (1/m)·Σ σ(θᵀxⱼ)·(1, xⱼ) to get
//! the gradient of the logistic loss.
//!
//! Sensitivity (L2), with the intercept (drop the 1 without it):
//! - unit `label`: flipping yᵢ moves the sum by (1, xᵢ)/N, so
//!   Δ = maxᵢ √(1 + ‖xᵢ‖²) / N, from the features, which are public;
//! - unit `row`: replacing row i by any row moves the sum by
//!   (y′(1, x′) − y(1, x))/N, at most √(k + 1)/N since every coordinate of
//!   (1, x) lies in [0, 1]; N is public (bounded DP).
//!
//! The exact vector comes from the running sums every upload keeps, as they
//! stand in the debit's locked record: nothing is read before the debit.

use async_trait::async_trait;
use dpgate_api_types::{self as api, PrivacyUnit, WalrResult};

use crate::dataset::{DatasetRecord, WalrStats};
use crate::dp::Mechanism;
use crate::releases::plan::{noise, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// Every coordinate is a mean of values in [0, 1].
pub const RANGE: f64 = 1.0;

/// A WALR release over the stored features, priced.
struct Walr {
    price: Price,
    mechanism: Mechanism,
    intercept: bool,
}

/// Prices a WALR release: its sensitivity needs N, k and (under `label`,
/// where features are public) the largest feature norm.
pub fn plan(
    dataset: &DatasetRecord,
    intercept: bool,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    knobs.approximate("walr")?;
    require_rows(dataset)?;
    let sensitivity = sensitivity(
        dataset.privacy_unit,
        dataset.schema.k(),
        dataset.stats.max_norm_squared,
        dataset.n_rows,
        intercept,
    );
    if sensitivity == 0.0 {
        return Err(ReleaseError::Invalid(
            "every feature vector is zero and the intercept is off: nothing to release".to_owned(),
        ));
    }
    let dims = dataset.schema.k() + usize::from(intercept);
    let mechanism = Mechanism::gaussian(knobs.epsilon, knobs.delta, sensitivity, dims, RANGE)
        .map_err(|error| ReleaseError::Invalid(error.to_string()))?;
    Ok(Box::new(Walr {
        price: Price::of(&mechanism, sensitivity, dataset.n_rows),
        mechanism,
        intercept,
    }))
}

#[async_trait]
impl Planned for Walr {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let dataset = snapshot.dataset();
        let exact = exact(&dataset.stats, dataset.n_rows, self.intercept);
        let noisy = noise(self.mechanism, exact).await?;
        Ok(api::ReleaseResult::Walr(result(noisy, self.intercept)))
    }
}

/// The exact (noiseless) release: (1/N)·Σ yᵢ·xᵢ, then (1/N)·Σ yᵢ if
/// `intercept`.
pub fn exact(stats: &WalrStats, n: u64, intercept: bool) -> Vec<f64> {
    let n = n as f64;
    let mut values: Vec<f64> = stats.label_feature_sums.iter().map(|sum| sum / n).collect();
    if intercept {
        values.push(stats.label_sum / n);
    }
    values
}

/// The L2 sensitivity of [`exact`] under `unit` (see the module docs).
pub fn sensitivity(
    unit: PrivacyUnit,
    k: usize,
    max_norm_squared: f64,
    n: u64,
    intercept: bool,
) -> f64 {
    let one = if intercept { 1.0 } else { 0.0 };
    let numerator = match unit {
        PrivacyUnit::Label => (max_norm_squared + one).sqrt(),
        PrivacyUnit::Row => (k as f64 + one).sqrt(),
    };
    numerator / n as f64
}

/// Splits the noisy vector back into the result's two parts.
pub fn result(mut noisy: Vec<f64>, intercept: bool) -> WalrResult {
    let noisy_intercept = if intercept { noisy.pop() } else { None };
    WalrResult {
        noisy_dot: noisy,
        noisy_intercept,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::releases::kinds::test_rows::{Tightness, distance};
    use rand::rngs::ChaCha8Rng;
    use rand::{RngExt, SeedableRng};

    fn random_row(rng: &mut ChaCha8Rng, k: usize) -> (u8, Vec<f32>) {
        let label = u8::from(rng.random_bool(0.5));
        // Some rows at the corners of the cube, where sensitivity is tight.
        let features = (0..k)
            .map(|_| {
                if rng.random_bool(0.2) {
                    1.0
                } else {
                    rng.random::<f32>()
                }
            })
            .collect();
        (label, features)
    }

    fn vector(rows: &[(u8, Vec<f32>)], k: usize, intercept: bool) -> (Vec<f64>, WalrStats) {
        let mut stats = WalrStats::empty(k);
        for (label, features) in rows {
            stats.add(*label, features);
        }
        (exact(&stats, rows.len() as u64, intercept), stats)
    }

    #[test]
    fn neighbouring_datasets_differ_by_at_most_the_declared_sensitivity() {
        let mut rng = ChaCha8Rng::seed_from_u64(2026);
        let mut tight = Tightness::new(2);
        for pair in 0..10_000 {
            let unit = if pair % 2 == 0 {
                PrivacyUnit::Label
            } else {
                PrivacyUnit::Row
            };
            let intercept = pair % 4 < 2;
            let k = rng.random_range(1..8);
            let n = rng.random_range(1..30);
            let rows: Vec<(u8, Vec<f32>)> = (0..n).map(|_| random_row(&mut rng, k)).collect();
            let mut neighbour = rows.clone();
            let changed = rng.random_range(0..n);
            match unit {
                PrivacyUnit::Label => neighbour[changed].0 ^= 1,
                PrivacyUnit::Row => neighbour[changed] = random_row(&mut rng, k),
            }
            let (original, stats) = vector(&rows, k, intercept);
            let (moved, _) = vector(&neighbour, k, intercept);
            let declared = sensitivity(unit, k, stats.max_norm_squared, n as u64, intercept);
            let gap = distance(&original, &moved);
            tight.record(usize::from(unit == PrivacyUnit::Row), gap, declared, || {
                format!("pair {pair} ({unit:?}, k = {k}, N = {n})")
            });
        }
        // The bound is attained (label flips of the largest row) or nearly so.
        tight.attained(0, 0.999, "label unit");
        tight.attained(1, 0.9, "row unit");
    }

    #[test]
    fn the_intercept_is_the_last_coordinate_and_comes_back_apart() {
        let mut stats = WalrStats::empty(2);
        stats.add(1, &[0.5, 1.0]);
        stats.add(0, &[1.0, 1.0]);
        assert_eq!(exact(&stats, 2, true), vec![0.25, 0.5, 0.5]);
        assert_eq!(exact(&stats, 2, false), vec![0.25, 0.5]);
        let split = result(vec![0.1, 0.2, 0.3], true);
        assert_eq!(split.noisy_dot, vec![0.1, 0.2]);
        assert_eq!(split.noisy_intercept, Some(0.3));
        assert_eq!(result(vec![0.1], false).noisy_intercept, None);
    }

    #[test]
    fn sensitivity_follows_the_unit() {
        assert_eq!(sensitivity(PrivacyUnit::Row, 3, 0.0, 10, true), 0.2);
        assert_eq!(sensitivity(PrivacyUnit::Row, 4, 0.0, 10, false), 0.2);
        assert_eq!(sensitivity(PrivacyUnit::Label, 9, 3.0, 4, true), 0.5);
        assert_eq!(sensitivity(PrivacyUnit::Label, 9, 4.0, 4, false), 0.5);
    }
}
