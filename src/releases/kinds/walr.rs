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
//! With a feature map φ other than the identity (`map`), (1, x) becomes
//! φ(x) = (v(x), a) throughout ([`super::walr_map`] has the maps and their
//! sensitivities).
//!
//! The exact vector on the identity comes from the running sums every
//! upload keeps, as they stand in the debit's locked record; on any other
//! map, from a pass over the snapshot's rows. Either way nothing is read
//! before the debit.

use async_trait::async_trait;
use dpgate_api_types::{self as api, FeatureMap, WalrMap, WalrResult};

use super::walr_map::{self, MappedSums, Moments};
use crate::dataset::{DatasetRecord, WalrStats};
use crate::dp::Mechanism;
use crate::releases::plan::{Calibrated, noise, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// A WALR release over the stored features, priced.
struct Walr {
    price: Price,
    mechanism: Mechanism,
    intercept: bool,
    map: FeatureMap,
}

/// Prices a WALR release: its map and sensitivity need N, k and (under
/// `label`, where features are public) the features' running moments and
/// largest norm.
pub fn plan(
    dataset: &DatasetRecord,
    params: &api::WalrParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    knobs.approximate("walr")?;
    require_rows(dataset)?;
    let (stats, k) = (&dataset.stats, dataset.schema.k());
    let moments = Moments::of_sums(
        &stats.feature_sums,
        &stats.feature_square_sums,
        dataset.n_rows as f64,
        k,
    );
    let sensitivity_of = |map: &FeatureMap| {
        walr_map::sensitivity(
            map,
            dataset.privacy_unit,
            stats.max_norm_squared,
            dataset.n_rows,
            params.intercept,
        )
    };
    let map = walr_map::choose(params.map, dataset.privacy_unit, k, moments.as_ref())
        .map_err(ReleaseError::Invalid)?;
    let map = settled(map, params, knobs, sensitivity_of)?;
    let sensitivity = sensitivity_of(&map);
    let calibrated = mechanism(&map, sensitivity, params, knobs)?;
    Ok(Box::new(Walr {
        price: calibrated.price(sensitivity, dataset.n_rows),
        mechanism: calibrated.mechanism,
        intercept: params.intercept,
        map,
    }))
}

/// `map`, with `auto`'s shrink kept only if the release's noise (its
/// target, or its σ on the shrunk map) makes it pay.
pub fn settled(
    map: FeatureMap,
    params: &api::WalrParams,
    knobs: &Knobs,
    sensitivity_of: impl Fn(&FeatureMap) -> f64,
) -> Result<FeatureMap, ReleaseError> {
    if map.radius.is_none() {
        return Ok(map);
    }
    let sigma = match params.target_sigma {
        Some(target) => target,
        None => mechanism(&map, sensitivity_of(&map), params, knobs)?
            .mechanism
            .noise_std(),
    };
    Ok(walr_map::settle(map, sigma))
}

/// The Gaussian mechanism of a WALR release on `map`, at the asked ε or
/// the asked `target_sigma`.
pub fn mechanism(
    map: &FeatureMap,
    sensitivity: f64,
    params: &api::WalrParams,
    knobs: &Knobs,
) -> Result<Calibrated, ReleaseError> {
    if sensitivity == 0.0 {
        return Err(ReleaseError::Invalid(
            "every feature vector is zero and the intercept is off: nothing to release".to_owned(),
        ));
    }
    let dims = map.k() + usize::from(params.intercept);
    // The released vector is the mechanism's own output: its std is σ.
    knobs.gaussian(
        params.target_sigma,
        1.0,
        sensitivity,
        dims,
        walr_map::range(map, params.intercept),
    )
}

#[async_trait]
impl Planned for Walr {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let dataset = snapshot.dataset();
        let (n, intercept) = (dataset.n_rows, self.intercept);
        let exact = match self.map.name {
            WalrMap::None => exact(&dataset.stats, n, intercept),
            _ => snapshot
                .scan(MappedSums::new(self.map.clone()))
                .await?
                .mean(n, intercept),
        };
        let noisy = noise(self.mechanism, exact).await?;
        Ok(api::ReleaseResult::Walr(result(noisy, intercept, self.map)))
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

/// Splits the noisy vector back into the result's two parts, with the
/// map it was made on (left out when it is the identity).
pub fn result(mut noisy: Vec<f64>, intercept: bool, map: FeatureMap) -> WalrResult {
    let noisy_intercept = if intercept { noisy.pop() } else { None };
    WalrResult {
        noisy_dot: noisy,
        noisy_intercept,
        map: (map.name != WalrMap::None).then_some(map),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intercept_is_the_last_coordinate_and_comes_back_apart() {
        let mut stats = WalrStats::empty(2);
        stats.add(1, &[0.5, 1.0]);
        stats.add(0, &[1.0, 1.0]);
        assert_eq!(exact(&stats, 2, true), vec![0.25, 0.5, 0.5]);
        assert_eq!(exact(&stats, 2, false), vec![0.25, 0.5]);
        let split = result(vec![0.1, 0.2, 0.3], true, FeatureMap::identity(2));
        assert_eq!(split.noisy_dot, vec![0.1, 0.2]);
        assert_eq!(split.noisy_intercept, Some(0.3));
        assert_eq!(split.map, None);
        let centred = FeatureMap {
            name: WalrMap::Centre,
            ..FeatureMap::identity(1)
        };
        let split = result(vec![0.1], false, centred.clone());
        assert_eq!(split.noisy_intercept, None);
        assert_eq!(split.map, Some(centred));
    }
}
