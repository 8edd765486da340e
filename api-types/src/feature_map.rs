//! The public feature map φ of a WALR release: one definition, applied by
//! the server to make the release and by every client to train on it and
//! predict with it, so that all three see the same φ(x) bit for bit.
//!
//! φ(x) = (v(x), a) for a row x ∈ [0, 1]ᵏ (scaled by the schema's bounds),
//! with v(x) = shrink_R(x − c) and shrink_R(u) = u·min(1, R/‖u‖): a centre
//! c, an optional shrink radius R and the intercept's coordinate a. The
//! identity map (c = 0, no radius, a = 1) is the release of the WALR
//! design.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Which feature map a `walr` release is made on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WalrMap {
    /// (1, x): the WALR design's release.
    #[default]
    None,
    /// (1, x − c): c the public mean of the features under unit `label`,
    /// the middle of the declared bounds under unit `row`.
    Centre,
    /// Centred and shrunk to a public radius, with the intercept's
    /// coordinate weighted (see docs/walr-map.md): chosen from public
    /// facts only, never from labels, and under unit `row` from the schema
    /// alone. What a request that names no map gets, where it can be had.
    Auto,
}

impl WalrMap {
    pub fn is_none(&self) -> bool {
        *self == WalrMap::None
    }
}

/// A feature map exactly as a release applied it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeatureMap {
    /// The map asked for.
    pub name: WalrMap,
    /// c, one per feature, in the scaled space [0, 1]ᵏ.
    pub centre: Vec<f64>,
    /// R: v is shrunk onto the ball of this radius; absent, not shrunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radius: Option<f64>,
    /// a: the intercept's coordinate of φ(x) (the release's
    /// `noisy_intercept` is (1/N)·Σ yᵢ·a + noise).
    pub intercept_weight: f64,
}

/// Why a feature map cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MapError {
    #[error("the map has {centre} centres for {k} features")]
    Dimension { centre: usize, k: usize },
    #[error("the map's {0} must be finite (and the radius and intercept weight positive)")]
    NotFinite(&'static str),
}

impl FeatureMap {
    /// The identity: φ(x) = (x, 1).
    pub fn identity(k: usize) -> Self {
        FeatureMap {
            name: WalrMap::None,
            centre: vec![0.0; k],
            radius: None,
            intercept_weight: 1.0,
        }
    }

    /// The number of features it maps.
    pub fn k(&self) -> usize {
        self.centre.len()
    }

    /// Checks that it can be applied to rows of `k` features.
    ///
    /// # Errors
    /// Wrong lengths, or values that are not finite.
    pub fn check(&self, k: usize) -> Result<(), MapError> {
        if self.centre.len() != k {
            return Err(MapError::Dimension {
                centre: self.centre.len(),
                k,
            });
        }
        if !self.centre.iter().all(|c| c.is_finite()) {
            return Err(MapError::NotFinite("centre"));
        }
        if self.radius.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err(MapError::NotFinite("radius"));
        }
        if !(self.intercept_weight.is_finite() && self.intercept_weight > 0.0) {
            return Err(MapError::NotFinite("intercept weight"));
        }
        Ok(())
    }

    /// v(x) into `out` (both of length k): centred, then shrunk.
    pub fn apply(&self, x: &[f64], out: &mut [f64]) {
        let mut norm_squared = 0.0;
        for ((out, &x), &c) in out.iter_mut().zip(x).zip(&self.centre) {
            *out = x - c;
            norm_squared += *out * *out;
        }
        // Every row is scaled, by 1 inside the ball (R/0 = ∞ at the
        // centre), so that a row's time does not count the rows outside a
        // caller's radius (under unit `row`, private).
        if let Some(radius) = self.radius {
            let shrink = (radius / norm_squared.sqrt()).min(1.0);
            for out in out.iter_mut() {
                *out *= shrink;
            }
        }
    }

    /// The largest ‖v(x)‖ over the whole box [0, 1]ᵏ: every corner's
    /// coordinates are as far from c as the box allows, capped at R.
    pub fn box_reach(&self) -> f64 {
        let corner: f64 = self
            .centre
            .iter()
            .map(|&c| c.max(1.0 - c).powi(2))
            .sum::<f64>()
            .sqrt();
        self.radius.map_or(corner, |radius| corner.min(radius))
    }

    /// The largest ‖v(x) − v(x′)‖ over the box: its diagonal √k, and at
    /// most 2R when shrunk.
    pub fn box_diameter(&self) -> f64 {
        let diagonal = (self.k() as f64).sqrt();
        self.radius
            .map_or(diagonal, |radius| diagonal.min(2.0 * radius))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_changes_nothing() {
        let map = FeatureMap::identity(3);
        let mut out = [0.0; 3];
        map.apply(&[0.25, 1.0, 0.0], &mut out);
        assert_eq!(out, [0.25, 1.0, 0.0]);
        assert_eq!(map.box_reach(), 3f64.sqrt());
        assert_eq!(map.box_diameter(), 3f64.sqrt());
    }

    #[test]
    fn rows_are_centred_and_shrunk_onto_the_ball() {
        let map = FeatureMap {
            name: WalrMap::Auto,
            centre: vec![0.25, 0.5],
            radius: Some(0.5),
            intercept_weight: 0.25,
        };
        let mut out = [0.0; 2];
        map.apply(&[0.5, 0.75], &mut out);
        assert_eq!(out, [0.25, 0.25]);
        // (1, 1) centres to (0.75, 0.5), of norm √0.8125 > 0.5: shrunk to 0.5.
        map.apply(&[1.0, 1.0], &mut out);
        let norm = (out[0] * out[0] + out[1] * out[1]).sqrt();
        assert!((norm - 0.5).abs() < 1e-15, "{out:?}");
        assert!((out[0] / out[1] - 1.5).abs() < 1e-12);
        assert_eq!(map.box_reach(), 0.5);
        assert_eq!(map.box_diameter(), 1.0);
    }

    #[test]
    fn bad_maps_are_refused() {
        let mut map = FeatureMap::identity(2);
        assert_eq!(map.check(2), Ok(()));
        assert!(matches!(map.check(3), Err(MapError::Dimension { .. })));
        map.radius = Some(0.0);
        assert_eq!(map.check(2), Err(MapError::NotFinite("radius")));
        map.radius = None;
        map.centre[1] = f64::NAN;
        assert_eq!(map.check(2), Err(MapError::NotFinite("centre")));
    }
}
