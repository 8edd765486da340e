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
//!   (1, x) lies in [0, 1]; N is public (bounded DP);
//! - unit `user`: N is private, so the count of the rows read is released
//!   with the sums (one more coordinate, [`WalrGrid::counted`]) and the
//!   means are over it; a person adds or removes at most m rows of norm
//!   at most √(reach² + A² + W²) each, so m times that.
//!
//! With a feature map φ other than the identity (`map`), (1, x) becomes
//! φ(x) = (v(x), a) throughout ([`super::walr_map`] has the maps and their
//! sensitivities). A request that names no map gets `auto`, or where that
//! needs moments the dataset lacks the identity, with the reason in the
//! result's `map_fallback` ([`walr_map::choose`]).
//!
//! The release is (1/N) times exact integer sums on a public fixed-point
//! grid ([`WalrGrid`], which proves the same sensitivities for them): the
//! same integers however the rows are split, with no float rounding to
//! pad. On the identity they come from the running sums every upload
//! keeps, as they stand in the debit's locked record; on any other map
//! (or for rows stored before sums were exact), from a pass over the
//! rows: the snapshot in memory, or the engine over the version's files
//! (`crate::engine::sum`). Either way nothing is read before the debit.

use async_trait::async_trait;
use dpgate_api_types::{self as api, FeatureMap, WalrMap, WalrResult};

use super::walr_map::{self, MappedSums, Moments, WalrGrid};
use crate::domain::dataset::{DatasetRecord, Unit, WalrStats};
use crate::dp::Mechanism;
use crate::dp::fixed::Fixed;
use crate::releases::plan::{Calibrated, most_rows, noise_fixed, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// A WALR release over the stored features, priced.
struct Walr {
    price: Price,
    mechanism: Mechanism,
    intercept: bool,
    map: FeatureMap,
    /// Why `map` is not the default a request without one gets.
    fallback: Option<String>,
    grid: WalrGrid,
}

/// Prices a WALR release: its map and sensitivity need N, k and (under
/// `label`, where features are public) the features' running moments and
/// largest norm. Under `user` N is private: the release counts its rows
/// with one more noisy coordinate ([`WalrGrid::counted`]) and divides by
/// that, so it is priced over the cap on N instead, its noise reported in
/// units of the sums.
pub fn plan(
    dataset: &DatasetRecord,
    params: &api::WalrParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    knobs.approximate("walr")?;
    require_rows(dataset)?;
    let unit = dataset.unit();
    let people = matches!(unit, Unit::User(_));
    if people && params.target_sigma.is_some() {
        return Err(ReleaseError::Invalid(
            "target_sigma is the noise on a mean over N, which is private under privacy unit \
             \"user\": name epsilon instead"
                .to_owned(),
        ));
    }
    let (stats, k, n) = (&dataset.stats, dataset.schema.k(), most_rows(dataset));
    let moments = Moments::of_sums(
        &stats.feature_sums,
        &stats.feature_square_sums,
        dataset.n_rows as f64,
        k,
    );
    let sensitivity_of = |grid: &WalrGrid, map: &FeatureMap| {
        let reach = match (unit, map.name) {
            (Unit::Label, WalrMap::None) => grid.norm_bound_squared(stats.max_norm_squared),
            _ => grid.reach_squared(),
        };
        grid.sensitivity(unit, reach)
    };
    let chosen = walr_map::choose(params.map, dataset.privacy_unit, k, moments.as_ref())
        .map_err(ReleaseError::Invalid)?;
    // Whether `auto`'s shrink pays depends on the noise on the mean, which
    // under `user` depends on the private N: the shrunk map stands.
    let (map, grid, per_row) = if people {
        let grid = grid(&chosen.map, params.intercept)?.counted();
        (chosen.map, grid, 1.0)
    } else {
        let map = settled(chosen.map, params, knobs, n, sensitivity_of)?;
        let grid = grid(&map, params.intercept)?;
        (map, grid, 1.0 / n as f64)
    };
    let sensitivity = sensitivity_of(&grid, &map);
    let calibrated = mechanism(&grid, sensitivity, (n, per_row), params, knobs)?;
    Ok(Box::new(Walr {
        price: calibrated.price(sensitivity * per_row, n),
        mechanism: calibrated.mechanism,
        intercept: params.intercept,
        map,
        fallback: chosen.fallback,
        grid,
    }))
}

/// The grid of a release on `map`.
pub fn grid(map: &FeatureMap, intercept: bool) -> Result<WalrGrid, ReleaseError> {
    WalrGrid::new(map, intercept).map_err(|error| ReleaseError::Invalid(error.to_string()))
}

/// `map`, with `auto`'s shrink kept only if the release's noise (its
/// target, or its σ on the shrunk map) makes it pay; `sensitivity_of`
/// gives the sensitivity of the exact sums on a map's grid, over `n` rows.
pub fn settled(
    map: FeatureMap,
    params: &api::WalrParams,
    knobs: &Knobs,
    n: u64,
    sensitivity_of: impl Fn(&WalrGrid, &FeatureMap) -> f64,
) -> Result<FeatureMap, ReleaseError> {
    if map.radius.is_none() {
        return Ok(map);
    }
    let per_row = 1.0 / n as f64;
    let sigma = match params.target_sigma {
        Some(target) => target,
        None => {
            let grid = grid(&map, params.intercept)?;
            let sensitivity = sensitivity_of(&grid, &map);
            mechanism(&grid, sensitivity, (n, per_row), params, knobs)?
                .mechanism
                .noise_std()
                * per_row
        }
    };
    Ok(walr_map::settle(map, sigma))
}

/// The Gaussian mechanism of a WALR release on `grid` over at most `n`
/// rows, at the asked ε or the asked `target_sigma`: it noises the exact
/// sums, of which one unit is `per_row` in the released numbers (1/N of a
/// mean over the public N).
pub fn mechanism(
    grid: &WalrGrid,
    sensitivity: f64,
    (n, per_row): (u64, f64),
    params: &api::WalrParams,
    knobs: &Knobs,
) -> Result<Calibrated, ReleaseError> {
    Ok(knobs
        .gaussian(
            params.target_sigma,
            per_row,
            sensitivity,
            grid.dims(),
            grid.range(n),
        )?
        .counted_in(per_row))
}

#[async_trait]
impl Planned for Walr {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let dataset = snapshot.dataset();
        let (n, k) = (dataset.n_rows, dataset.schema.k());
        let counted = self.grid.count_weight();
        // The running sums are over every row: under `user` a pass reads
        // the bounded rows instead.
        let kept = match self.map.name {
            WalrMap::None if counted == 0.0 => exact(&dataset.stats, k, n, &self.grid),
            _ => None,
        };
        let exact = match kept {
            Some(exact) => exact,
            None => snapshot
                .sum(MappedSums::new(self.map.clone(), self.grid.clone()))
                .await?
                .exact(),
        };
        let noise_std = self.mechanism.noise_std();
        let mut noisy = noise_fixed(self.mechanism, exact).await?;
        // Counted, the last coordinate is the rows' count, W a row.
        let rows = match counted > 0.0 {
            true => noisy.pop().map(|count| count / counted),
            false => None,
        };
        let over = rows.map_or(n as f64, |rows| rows.max(1.0));
        let mean = noisy.into_iter().map(|sum| sum / over).collect();
        Ok(api::ReleaseResult::Walr(WalrResult {
            noisy_rows: rows,
            noisy_rows_std: rows.map(|_| noise_std / counted),
            ..result(mean, self.intercept, self.map, self.fallback)
        }))
    }
}

/// The exact sums on the identity from the running sums every upload
/// keeps over its `n` rows, when they were kept for every row.
pub fn exact(stats: &WalrStats, k: usize, n: u64, grid: &WalrGrid) -> Option<Fixed> {
    let sums = stats.exact_sums(k)?;
    Some(grid.exact(
        sums.iter().map(|&sum| sum as i128).collect(),
        stats.label_count,
        n,
    ))
}

/// Splits the noisy vector back into the result's two parts, with the
/// map it was made on (left out when it is the identity) and why it is
/// not the default, where a request without a map fell back.
pub fn result(
    mut noisy: Vec<f64>,
    intercept: bool,
    map: FeatureMap,
    fallback: Option<String>,
) -> WalrResult {
    let noisy_intercept = if intercept { noisy.pop() } else { None };
    WalrResult {
        noisy_dot: noisy,
        noisy_intercept,
        map: (map.name != WalrMap::None).then_some(map),
        map_fallback: fallback,
        noisy_rows: None,
        noisy_rows_std: None,
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
        let one = 1i128 << 40;
        let with = grid(&FeatureMap::identity(2), true).unwrap();
        assert_eq!(
            exact(&stats, 2, 2, &with).unwrap(),
            Fixed::normalised(vec![one / 2, one, one])
        );
        let without = grid(&FeatureMap::identity(2), false).unwrap();
        assert_eq!(
            exact(&stats, 2, 2, &without).unwrap(),
            Fixed::normalised(vec![one / 2, one])
        );
        stats.label_feature_units.clear();
        assert_eq!(exact(&stats, 2, 2, &with), None);
        let split = result(vec![0.1, 0.2, 0.3], true, FeatureMap::identity(2), None);
        assert_eq!(split.noisy_dot, vec![0.1, 0.2]);
        assert_eq!(split.noisy_intercept, Some(0.3));
        assert_eq!((split.map, split.map_fallback), (None, None));
        let centred = FeatureMap {
            name: WalrMap::Centre,
            ..FeatureMap::identity(1)
        };
        let split = result(vec![0.1], false, centred.clone(), None);
        assert_eq!(split.noisy_intercept, None);
        assert_eq!(split.map, Some(centred));
        // A fallback is said beside the identity it fell back to.
        let reason = walr_map::FALLBACK_WITHOUT_MOMENTS.to_owned();
        let fell = result(
            vec![0.1],
            false,
            FeatureMap::identity(1),
            Some(reason.clone()),
        );
        assert_eq!((fell.map, fell.map_fallback), (None, Some(reason)));
    }
}
