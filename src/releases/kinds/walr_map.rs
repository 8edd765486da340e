//! The public feature maps of WALR releases: which φ a request gets, the
//! sensitivity of (1/N)·Σ yᵢ·φ(xᵢ) under each privacy unit, and the pass
//! that computes it once paid for.
//!
//! φ(x) = (v(x), a), v(x) = shrink_R(x − c) ([`FeatureMap`]). What
//! φ may depend on is what the unit leaves public: under `label` the
//! features (through their running moments, and for supplied vectors the
//! vectors themselves), under `row` the schema alone. Never a label.
//!
//! Sensitivity (L2) of the mean, with the intercept's coordinate a (drop
//! it without the intercept); [`WalrGrid`] proves the same bounds for the
//! exact integer sums the release is made from. Let reach = max ‖v(x)‖ and diameter = max ‖v(x) − v(x′)‖
//! over the box [0, 1]ᵏ ([`FeatureMap::box_reach`], `box_diameter`):
//! - unit `label`: flipping yᵢ moves the sum by φ(xᵢ)/N, so
//!   Δ = √(a² + reach²)/N (for the identity, the stored maxᵢ‖xᵢ‖ instead of
//!   the box's, as the WALR design has it);
//! - unit `row`: replacing (y, x) by (y′, x′) moves it by
//!   (y′φ(x′) − yφ(x))/N: by (v(x′) − v(x), 0)/N when both labels are 1,
//!   by ±φ(·)/N when one is, so Δ = max(diameter, √(a² + reach²))/N. For
//!   the identity that is √(k + 1)/N; centring alone leaves the diameter
//!   √k, so only a shrink radius below √k/2 brings it down.

use dpgate_api_types::{FeatureMap, PrivacyUnit, WalrMap};

use crate::domain::dataset::Unit;
use crate::dp::DpError;
use crate::dp::fixed::{FRACTION_BITS, Fixed, ceil_sqrt};
use crate::dp::region::{Region, SnappedSums};
use crate::engine::{Needed, Summed};
use crate::snapshots::Columns;
use crate::snapshots::Pass;

/// The moments of public features: per-feature mean and variance.
#[derive(Debug, Clone, PartialEq)]
pub struct Moments {
    pub mean: Vec<f64>,
    pub variance: Vec<f64>,
}

impl Moments {
    /// From Σ x and Σ x² over `n` rows; `None` when the sums were not kept.
    pub fn of_sums(sums: &[f64], squares: &[f64], n: f64, k: usize) -> Option<Moments> {
        if sums.len() != k || squares.len() != k || n < 1.0 {
            return None;
        }
        let mean: Vec<f64> = sums.iter().map(|sum| sum / n).collect();
        let variance = squares
            .iter()
            .zip(&mean)
            .map(|(square, mean)| (square / n - mean * mean).max(0.0))
            .collect();
        Some(Moments { mean, variance })
    }
}

/// The shrink radius of `auto`, as a multiple of the root-mean-square norm
/// of the centred features (docs/walr-map.md has the sweep
/// it was chosen from).
pub const RADIUS_OF_RMS: f64 = 1.0;
/// The intercept's coordinate a of `auto`, as a multiple of the radius.
pub const INTERCEPT_OF_RADIUS: f64 = 0.25;
/// `auto` keeps its shrink only when the release's noise per coordinate,
/// σ·√k, is at least this share of the radius: below it the noise costs
/// less accuracy than the shrink's bias (docs/walr-map.md).
pub const SHRINK_FROM: f64 = 0.003;

/// The map of a request that names none.
pub const DEFAULT: WalrMap = WalrMap::Auto;

/// Why a request that named no map is not on [`DEFAULT`]: under `label`
/// on rows stored before the features' moments were kept (which `centre`
/// needs as much as `auto`).
pub const FALLBACK_WITHOUT_MOMENTS: &str = "the default map auto needs the features' public \
     moments, which this dataset's rows predate: released on map none; upload the rows again \
     into a new dataset to get auto";

/// The map a release is made on, and why it is not the map the request
/// left to the default, if it is not.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    pub map: FeatureMap,
    /// Set only when the request named no map and [`DEFAULT`] could not be
    /// had: the sentence the result's `map_fallback` carries.
    pub fallback: Option<String>,
}

/// The map a request gets: the one it names (made or refused, never
/// replaced), or without one [`DEFAULT`], falling back to the identity
/// where the default needs moments the dataset does not have.
///
/// Privacy: the choice, the fallback included, reads only public facts:
/// the unit, k, whether the dataset kept its features' moments (fixed by
/// when its rows were stored) and, under `label`, those moments, which
/// that unit leaves public. Never a label, and under `row` nothing of
/// the rows at all ([`fit`]).
///
/// # Errors
/// A named map that needs moments the dataset does not have.
pub fn choose(
    asked: Option<WalrMap>,
    unit: PrivacyUnit,
    k: usize,
    moments: Option<&Moments>,
) -> Result<Chosen, String> {
    let Some(asked) = asked else {
        return Ok(match fit(DEFAULT, unit, k, moments) {
            Ok(map) => Chosen {
                map,
                fallback: None,
            },
            Err(NeedsMoments) => Chosen {
                map: FeatureMap::identity(k),
                fallback: Some(FALLBACK_WITHOUT_MOMENTS.to_owned()),
            },
        });
    };
    let map = fit(asked, unit, k, moments).map_err(|NeedsMoments| {
        format!(
            "map {asked:?} needs the features' moments, which this dataset's rows predate: \
             upload them again into a new dataset, or use map \"none\""
        )
        .to_lowercase()
    })?;
    Ok(Chosen {
        map,
        fallback: None,
    })
}

/// A map that needs the features' moments, under `label` on a dataset
/// that did not keep them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedsMoments;

/// `asked`, fitted to the public facts. `moments` are the public
/// features' moments (unit `label` only; ignored under `row`).
///
/// # Errors
/// [`NeedsMoments`]: `centre` or `auto` under `label` without moments.
pub fn fit(
    asked: WalrMap,
    unit: PrivacyUnit,
    k: usize,
    moments: Option<&Moments>,
) -> Result<FeatureMap, NeedsMoments> {
    let mut map = FeatureMap::identity(k);
    map.name = asked;
    if asked == WalrMap::None {
        return Ok(map);
    }
    match unit {
        // Features are private: a uniform spread over the box is the only
        // shape the schema states, so centre its middle, with its RMS
        // radius √(k/12).
        PrivacyUnit::Row | PrivacyUnit::User => {
            map.centre = vec![0.5; k];
            if asked == WalrMap::Auto {
                let rms = (k as f64 / 12.0).sqrt();
                fit_radius(&mut map, rms);
            }
        }
        PrivacyUnit::Label => {
            let moments = moments.ok_or(NeedsMoments)?;
            map.centre.clone_from(&moments.mean);
            if asked == WalrMap::Auto {
                let rms = moments.variance.iter().sum::<f64>().sqrt();
                fit_radius(&mut map, rms);
            }
        }
    }
    Ok(map)
}

/// `map` as `auto` releases it at noise std `sigma` (what the shrunk map
/// costs): unshrunk, with a = 1 as `centre`, where the noise is too small
/// for the shrink to pay ([`SHRINK_FROM`]).
pub fn settle(map: FeatureMap, sigma: f64) -> FeatureMap {
    match map.radius {
        Some(radius) if sigma * (map.k() as f64).sqrt() < SHRINK_FROM * radius => FeatureMap {
            radius: None,
            intercept_weight: 1.0,
            ..map
        },
        _ => map,
    }
}

/// Shrinks onto [`RADIUS_OF_RMS`]·rms with a = [`INTERCEPT_OF_RADIUS`]·R;
/// features that do not vary leave the map unshrunk.
fn fit_radius(map: &mut FeatureMap, rms: f64) {
    if rms > 0.0 {
        let radius = RADIUS_OF_RMS * rms;
        map.radius = Some(radius);
        map.intercept_weight = INTERCEPT_OF_RADIUS * radius;
    }
}

/// WALR's sums on the fixed-point grid: each row's v(xᵢ) goes onto the
/// [`Region`] of scale 1 with the box [−cⱼ, 1 − cⱼ] (where x ∈ [0, 1]ᵏ
/// puts v before any shrink) and, when shrunk, the ball R, whose bounds
/// hold exactly in integers; the intercept's coordinate a is the public
/// integer A = round(a·2⁴⁰). The release is (1/N) times the exact sums
/// Σ yᵢ·(uᵢ, A), summed in i128 with the label multiplied in (no branch
/// reads it): the same integers however the rows are split.
///
/// # Sensitivity of the exact sums (units·2⁻⁴⁰)
///
/// With reach² a bound on ‖uᵢ‖² and the region's exact diameter²:
/// - unit `label`: flipping yᵢ adds or removes (uᵢ, A): √(reach² + A²);
/// - unit `row`: replacing (y, u) by (y′, u′) moves the sums by
///   (u′ − u, 0) when both labels are 1, by ±(u, A) when one is:
///   √max(diameter², reach² + A²).
///
/// reach² is the region's exact [`Region::reach_squared`], except for the
/// identity under `label`, where the WALR design takes the stored
/// maxᵢ‖xᵢ‖² (public there): uᵢ is xᵢ·2⁴⁰ rounded per coordinate (x·2⁴⁰
/// is exact for a float x), so ‖uᵢ‖ ≤ ‖xᵢ‖·2⁴⁰ + √k/2, with ‖xᵢ‖² at most
/// the computed maximum times 1 + k·2⁻⁵² ([`WalrGrid::norm_bound_squared`]).
/// Every other bound is an integer computed from public facts.
///
/// Under unit `user` N is private, so the release also counts the rows it
/// reads: every row adds the public integer W to one more coordinate
/// ([`WalrGrid::counted`]), and the released mean is the noisy sums over
/// the noisy count. A person adds or removes at most m rows (the
/// contribution bound, [`crate::dp::contribution`]), each moving the sums
/// by (yᵢ·uᵢ, yᵢ·A, W), of norm at most √(reach² + A² + W²), so by the
/// triangle inequality the sums move by at most m·√(reach² + A² + W²).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WalrGrid {
    region: Region,
    /// A, or 0 without the intercept.
    intercept: i64,
    /// W, the count's units per row, or 0 where N is public.
    count: u64,
}

impl WalrGrid {
    pub fn new(map: &FeatureMap, intercept: bool) -> Result<WalrGrid, DpError> {
        let lo: Vec<f64> = map.centre.iter().map(|&c| -c).collect();
        let hi: Vec<f64> = map.centre.iter().map(|&c| 1.0 - c).collect();
        let region = Region::new(1.0, &lo, &hi, map.radius)?;
        let units = (map.intercept_weight * 2f64.powi(FRACTION_BITS)).round();
        if !(units.is_finite() && units < 2f64.powi(52)) {
            return Err(DpError::InvalidRegion(
                "the intercept's weight is too large",
            ));
        }
        Ok(WalrGrid {
            region,
            intercept: if intercept { units as i64 } else { 0 },
            count: 0,
        })
    }

    /// The grid with the rows' count as one more coordinate (unit `user`),
    /// of W² = ⌈(reach² + A²)/d⌉ units² per row for d sums: about one
    /// coordinate's share of a row's norm, so that the count costs a
    /// factor √(1 + 1/d) in noise while its relative error, σ/(W·N), stays
    /// that of one coordinate of the mean.
    pub fn counted(self) -> WalrGrid {
        let per_row = self.region.reach_squared() + self.intercept_squared();
        let dims = self.dims() as u128;
        let count = ceil_sqrt(per_row.div_ceil(dims)) as u64;
        WalrGrid { count, ..self }
    }

    fn intercept_squared(&self) -> u128 {
        u128::from(self.intercept.unsigned_abs()).pow(2)
    }

    /// The released coordinates: k, the intercept's and the count's.
    pub fn dims(&self) -> usize {
        self.region.dims() + usize::from(self.intercept != 0) + usize::from(self.count != 0)
    }

    /// What one row adds to the count's coordinate, normalised (0 where
    /// there is none): the released count divided by it is the noisy N.
    pub fn count_weight(&self) -> f64 {
        self.count as f64 * 2f64.powi(-FRACTION_BITS)
    }

    /// The bound on ‖uᵢ‖² of the region: every row's.
    pub fn reach_squared(&self) -> u128 {
        self.region.reach_squared()
    }

    /// A bound on ‖uᵢ‖² from the largest computed ‖xᵢ‖² of features in
    /// [0, 1]ᵏ on the identity (the type docs), at most the region's.
    pub fn norm_bound_squared(&self, max_norm_squared: f64) -> u128 {
        let k = self.region.dims() as f64;
        let norm = (max_norm_squared * (1.0 + k * f64::EPSILON))
            .sqrt()
            .next_up();
        let units = (norm * 2f64.powi(FRACTION_BITS) + k.sqrt() / 2.0)
            .next_up()
            .ceil();
        // A float cast saturates: a bound beyond u128 is still a bound.
        let units = units as u128;
        units.saturating_mul(units).min(self.region.reach_squared())
    }

    /// The L2 sensitivity of the normalised sums (the type docs), for rows
    /// with ‖uᵢ‖² ≤ `reach_squared`.
    pub fn sensitivity(&self, unit: Unit, reach_squared: u128) -> f64 {
        let dropped = crate::mutants::active(crate::mutants::Mutant::InterceptDropped);
        let a = if dropped { 0 } else { self.intercept };
        let flipped = reach_squared + u128::from(a.unsigned_abs()).pow(2);
        let worst = match unit {
            Unit::Label => flipped,
            Unit::Row => flipped.max(self.region.diameter_squared()),
            Unit::User(bounds) => {
                let m = u128::from(bounds.rows);
                (flipped + u128::from(self.count).pow(2)).saturating_mul(m * m)
            }
        };
        ceil_sqrt(worst) * 2f64.powi(-FRACTION_BITS)
    }

    /// The largest magnitude a normalised sum over `n` rows can take.
    pub fn range(&self, n: u64) -> f64 {
        let largest = (self.region.side_units())
            .max(self.intercept.unsigned_abs())
            .max(self.count);
        (n as f64 * largest as f64).next_up() * 2f64.powi(-FRACTION_BITS)
    }

    /// Exact sums of u(φ(x)) over rows, from 0 ([`WalrGrid::add`]).
    pub fn sums(&self) -> SnappedSums<'_> {
        self.region.sums()
    }

    /// Adds `label`·u(φ(`x`)) into `sums` (`v` is scratch space of k
    /// values).
    pub fn add(
        &self,
        map: &FeatureMap,
        (x, label): (&[f64], u8),
        v: &mut [f64],
        sums: &mut SnappedSums,
    ) {
        map.apply(x, v);
        sums.add(v, label != 0);
    }

    /// u(φ(`x`)) into `units` (`v` is scratch space of k values).
    pub fn units(&self, map: &FeatureMap, x: &[f64], v: &mut [f64], units: &mut [i64]) {
        map.apply(x, v);
        self.region.snap(v, units);
    }

    /// The exact sums Σ yᵢ·uᵢ and, with the intercept, `labels`·A and,
    /// counted, `rows`·W.
    pub fn exact(&self, mut sums: Vec<i128>, labels: u64, rows: u64) -> Fixed {
        if self.intercept != 0 {
            sums.push(i128::from(labels) * i128::from(self.intercept));
        }
        if self.count != 0 {
            sums.push(i128::from(rows) * i128::from(self.count));
        }
        Fixed::normalised(sums)
    }
}

/// Σ yᵢ·u(xᵢ) and Σ yᵢ over a snapshot's rows, exactly on [`WalrGrid`]:
/// a pass run only once the release is paid for.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct MappedSums {
    map: FeatureMap,
    grid: WalrGrid,
    sums: Vec<i128>,
    labels: u64,
    rows: u64,
}

impl MappedSums {
    pub fn new(map: FeatureMap, grid: WalrGrid) -> Self {
        MappedSums {
            sums: vec![0; map.k()],
            map,
            grid,
            labels: 0,
            rows: 0,
        }
    }

    /// The exact sums ([`WalrGrid::exact`]).
    pub fn exact(self) -> Fixed {
        self.grid.exact(self.sums, self.labels, self.rows)
    }

    /// Adds another part's sums, count of labels and of rows.
    fn absorb(&mut self, sums: &[i128], labels: u64, rows: u64) {
        for (sum, part) in self.sums.iter_mut().zip(sums) {
            *sum += part;
        }
        self.labels += labels;
        self.rows += rows;
    }

    /// Adds Σ yᵢ·u(xᵢ), Σ yᵢ and the count over rows given as (label,
    /// features).
    pub fn add_rows<'a>(&mut self, rows: impl Iterator<Item = (u8, &'a [f32])>) {
        let k = self.map.k();
        let (mut x, mut v) = (vec![0.0; k], vec![0.0; k]);
        let mut sums = self.grid.sums();
        let (mut labels, mut count) = (0, 0);
        for (label, features) in rows {
            for (x, &value) in x.iter_mut().zip(features) {
                *x = f64::from(value);
            }
            self.grid.add(&self.map, (&x, label), &mut v, &mut sums);
            labels += u64::from(label);
            count += 1;
        }
        let sums = sums.finish();
        self.absorb(&sums, labels, count);
    }
}

impl Pass for MappedSums {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let labels = block.labels();
        let parts = block.chunks(|rows| {
            let mut part = MappedSums::new(self.map.clone(), self.grid.clone());
            part.add_rows(rows.map(|row| (labels[row], block.features(row))));
            (part.sums, part.labels, part.rows)
        });
        for (sums, labels, rows) in parts {
            self.absorb(&sums, labels, rows);
        }
        Ok(())
    }
}

/// The sums, then Σ yᵢ, then the count of rows.
impl Summed for MappedSums {
    const KIND: &'static str = "walr";

    fn needs(&self) -> Needed {
        Needed::features_and(false)
    }

    fn sums(&self) -> Vec<i128> {
        let mut sums = self.sums.clone();
        sums.push(i128::from(self.labels));
        sums.push(i128::from(self.rows));
        sums
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        let [sums @ .., labels, rows] = sums else {
            return Err("no sums to add".to_owned());
        };
        if sums.len() != self.sums.len() {
            return Err(format!("{} sums for {}", sums.len(), self.sums.len()));
        }
        let count = |value: i128| u64::try_from(value).map_err(|_| "a negative count");
        self.absorb(sums, count(*labels)?, count(*rows)?);
        Ok(())
    }
}

#[cfg(test)]
#[path = "walr_map_tests.rs"]
mod tests;
