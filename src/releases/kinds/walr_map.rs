//! The public feature maps of WALR releases: which φ a request gets, the
//! sensitivity of (1/N)·Σ yᵢ·φ(xᵢ) under each privacy unit, and the pass
//! that computes it once paid for.
//!
//! φ(x) = (v(x), a), v(x) = shrink_R(x − c) ([`FeatureMap`]). What
//! φ may depend on is what the unit leaves public: under `label` the
//! features (through their running moments, and for supplied vectors the
//! vectors themselves), under `row` the schema alone. Never a label.
//!
//! Sensitivity (L2), with the intercept's coordinate a (drop it without
//! the intercept). Let reach = max ‖v(x)‖ and diameter = max ‖v(x) − v(x′)‖
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

use crate::releases::Pass;
use crate::snapshots::Columns;

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

/// The map a request gets. `moments` are the public features' moments
/// (unit `label` only; ignored under `row`).
///
/// # Errors
/// A map that needs moments the dataset does not have.
pub fn choose(
    asked: WalrMap,
    unit: PrivacyUnit,
    k: usize,
    moments: Option<&Moments>,
) -> Result<FeatureMap, String> {
    let mut map = FeatureMap::identity(k);
    map.name = asked;
    if asked == WalrMap::None {
        return Ok(map);
    }
    match unit {
        PrivacyUnit::Row => {
            // A uniform spread over the box is the only shape the schema
            // states: centre its middle, with its RMS radius √(k/12).
            map.centre = vec![0.5; k];
            if asked == WalrMap::Auto {
                let rms = (k as f64 / 12.0).sqrt();
                fit_radius(&mut map, rms);
            }
        }
        PrivacyUnit::Label => {
            let moments = moments.ok_or_else(|| {
                format!(
                    "map {asked:?} needs the features' moments, which this dataset's rows \
                     predate: upload them again into a new dataset, or use map \"none\""
                )
                .to_lowercase()
            })?;
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

/// The L2 sensitivity of (1/N)·Σ yᵢ·φ(xᵢ) (see the module docs);
/// `max_norm_squared` is the largest ‖xᵢ‖² (used for the identity under
/// `label`).
pub fn sensitivity(
    map: &FeatureMap,
    unit: PrivacyUnit,
    max_norm_squared: f64,
    n: u64,
    intercept: bool,
) -> f64 {
    let dropped = crate::mutants::active(crate::mutants::Mutant::InterceptDropped);
    let a = if intercept && !dropped {
        map.intercept_weight
    } else {
        0.0
    };
    let numerator = match unit {
        PrivacyUnit::Label if map.name == WalrMap::None => (max_norm_squared + a * a).sqrt(),
        PrivacyUnit::Label => map.box_reach().hypot(a),
        PrivacyUnit::Row => map.box_diameter().max(map.box_reach().hypot(a)),
    };
    numerator / n as f64
}

/// The largest |coordinate| of φ(x) over the box: what a mean of them may
/// reach, for the noise lattice.
pub fn range(map: &FeatureMap, intercept: bool) -> f64 {
    let widest = map
        .centre
        .iter()
        .map(|&c| c.max(1.0 - c))
        .fold(0.0, f64::max);
    let widest = map.radius.map_or(widest, |radius| widest.min(radius));
    if intercept {
        widest.max(map.intercept_weight)
    } else {
        widest
    }
}

/// Σ yᵢ·v(xᵢ), then Σ yᵢ·a, over a snapshot's rows: a pass run only once
/// the release is paid for. Every block is cut into the fixed chunks of
/// [`Columns::chunks`] and their sums added in order, so the answer does
/// not depend on the number of threads or on how the rows were streamed.
pub struct MappedSums {
    map: FeatureMap,
    sums: Vec<f64>,
    labels: f64,
}

impl MappedSums {
    pub fn new(map: FeatureMap) -> Self {
        MappedSums {
            sums: vec![0.0; map.k()],
            map,
            labels: 0.0,
        }
    }

    /// (1/N)·Σ yᵢ·v(xᵢ), then (1/N)·Σ yᵢ·a if `intercept`.
    pub fn mean(self, n: u64, intercept: bool) -> Vec<f64> {
        let n = n as f64;
        let mut values: Vec<f64> = self.sums.iter().map(|sum| sum / n).collect();
        if intercept {
            values.push(self.labels * self.map.intercept_weight / n);
        }
        values
    }

    /// Adds Σ yᵢ·v(xᵢ) and Σ yᵢ over rows given as (label, features).
    pub fn add_rows<'a>(&mut self, rows: impl Iterator<Item = (u8, &'a [f32])>) {
        let k = self.map.k();
        let (mut x, mut v) = (vec![0.0; k], vec![0.0; k]);
        for (label, features) in rows {
            let y = f64::from(label);
            for (x, &value) in x.iter_mut().zip(features) {
                *x = f64::from(value);
            }
            self.map.apply(&x, &mut v);
            for (sum, &v) in self.sums.iter_mut().zip(&v) {
                *sum += y * v;
            }
            self.labels += y;
        }
    }
}

impl Pass for MappedSums {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let labels = block.labels();
        let parts = block.chunks(|rows| {
            let mut part = MappedSums::new(self.map.clone());
            part.add_rows(rows.map(|row| (labels[row], block.features(row))));
            (part.sums, part.labels)
        });
        for (sums, labels) in parts {
            for (sum, part) in self.sums.iter_mut().zip(sums) {
                *sum += part;
            }
            self.labels += labels;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "walr_map_tests.rs"]
mod tests;
