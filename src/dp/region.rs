//! One row's vector put on a public fixed-point grid, inside a public
//! region whose bounds hold exactly: the summand of every exact vector sum
//! (WALR's Σ yᵢ·φ(xᵢ), the learners' clipped gradients).
//!
//! A vector v is put on the grid of a public `scale` s coordinate by
//! coordinate, uⱼ = round(vⱼ/s·2^40) ([`super::fixed::FRACTION_BITS`]),
//! then forced into the region in integer space:
//!
//! 1. every uⱼ is clamped to [loⱼ, hiⱼ], the public box on the grid;
//! 2. with a ball of radius r (units), u is shrunk towards 0 when its
//!    norm exceeds r: uⱼ ← trunc(uⱼ·f), f = min(1, r(1 − 2⁻³⁰)/‖u‖), and
//!    ‖u‖² ≤ r² is then checked exactly in integers (u ← 0 if not, which
//!    the margin makes unreachable: trunc only shrinks, and the float norm
//!    is within 2⁻⁴⁰ of the exact one for fewer than 2²⁴ coordinates).
//!
//! Every step runs for every row, whatever its values (a clamp, a multiply
//! by f = 1, a select), so a row's time does not show where it lies.
//!
//! Because the box and the ball hold exactly, the bounds a sensitivity
//! proof needs are integers computed from public facts, never a float
//! argument: for any two vectors u, u′ of the region
//! ‖u‖² ≤ [`Region::reach_squared`] and ‖u − u′‖² ≤
//! [`Region::diameter_squared`]. For two vectors whose real values differ
//! by at most D (a label flip moving a gradient along its row),
//! [`Region::line_units`] bounds ‖u − u′‖ by D/s·2^40 plus a public
//! rounding term of at most 6√k + 2⁻²⁸·r + 1 units.
//!
//! Summands are i64 (bounds are at most 2^51 units), sums i128: 2^76 rows
//! before a sum could overflow ([`SnappedSums`] adds in i64 words and
//! carries them into the i128 sums before a word could overflow).

use super::DpError;
use super::constant_time::ROUNDER;
use super::fixed::{FRACTION_BITS, ceil_sqrt};

/// The largest bound, in units, of a box side or a ball's radius: every
/// value on the grid is then an exact integer as a float, and within the
/// reach of [`round_within`]'s rounding by addition.
const MAX_BOUND_UNITS: f64 = (1u64 << 51) as f64;

/// Most coordinates a region has: the float norm of a vector on it is then
/// within 2⁻⁴⁰ of the exact one, which the ball's margin covers.
pub const MAX_DIMS: usize = 1 << 24;

/// The ball's margin: vectors are shrunk to (1 − 2⁻³⁰)·r.
const BALL_MARGIN: f64 = 1.0 - 1.0 / (1u64 << 30) as f64;

/// A public region on the grid of a public scale.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Region {
    /// Units per unit of the quantity: 2^40/s.
    per_unit: f64,
    /// The box, in units: integers, exact as floats (at most 2^51).
    lo: Vec<f64>,
    hi: Vec<f64>,
    ball: Option<Ball>,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
struct Ball {
    radius: i64,
    /// Where a vector outside the ball is shrunk to, in units.
    shrink_to: f64,
}

impl Region {
    /// The region of vectors with vⱼ ∈ [`lo`ⱼ, `hi`ⱼ] and, with a
    /// `radius`, ‖v‖ ≤ radius, on the grid of `scale` (one `scale` is 2^40
    /// units). Each box must hold 0, since a vector outside the ball is
    /// shrunk towards it.
    pub fn new(scale: f64, lo: &[f64], hi: &[f64], radius: Option<f64>) -> Result<Region, DpError> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(DpError::InvalidSensitivity(scale));
        }
        if lo.is_empty() {
            return Err(DpError::NoCoordinates);
        }
        if lo.len() != hi.len() || lo.len() > MAX_DIMS {
            return Err(DpError::InvalidRegion(
                "a box side per coordinate, at most 2^24",
            ));
        }
        let per_unit = 2f64.powi(FRACTION_BITS) / scale;
        let on_grid = |value: f64| -> Result<f64, DpError> {
            let units = (value * per_unit).round();
            if units.is_nan() || units.abs() > MAX_BOUND_UNITS {
                return Err(DpError::InvalidRegion(
                    "bounds must be finite and at most 2^11 scales",
                ));
            }
            Ok(units)
        };
        let lo: Vec<f64> = lo.iter().map(|&v| on_grid(v)).collect::<Result<_, _>>()?;
        let hi: Vec<f64> = hi.iter().map(|&v| on_grid(v)).collect::<Result<_, _>>()?;
        if lo
            .iter()
            .zip(&hi)
            .any(|(&lo, &hi)| !(lo <= 0.0 && 0.0 <= hi))
        {
            return Err(DpError::InvalidRegion("every box must hold 0"));
        }
        let ball = match radius {
            None => None,
            Some(radius) => {
                let radius = on_grid(radius)? as i64;
                if radius <= 0 {
                    return Err(DpError::InvalidRegion("a ball's radius must be positive"));
                }
                Some(Ball {
                    radius,
                    shrink_to: radius as f64 * BALL_MARGIN,
                })
            }
        };
        Ok(Region {
            per_unit,
            lo,
            hi,
            ball,
        })
    }

    pub fn dims(&self) -> usize {
        self.lo.len()
    }

    /// What one unit is worth in the quantity: s·2^−40.
    pub fn unit(&self) -> f64 {
        self.per_unit.recip()
    }

    /// Exact sums of vectors snapped onto this region, from 0.
    pub fn sums(&self) -> SnappedSums<'_> {
        let largest = self.side_bounds().max().unwrap_or(0).max(1);
        SnappedSums {
            region: self,
            words: vec![0; self.dims()],
            units: vec![0; self.dims()],
            rows: 0,
            carry_every: i64::MAX.unsigned_abs() / largest,
            sums: vec![0; self.dims()],
        }
    }

    /// `v` on the grid, inside the region, into `out` (both of
    /// [`Region::dims`] values). A NaN coordinate becomes 0; halves round
    /// to even.
    pub fn snap(&self, v: &[f64], out: &mut [i64]) {
        let mut norm_squared = 0.0;
        for (((out, &v), &lo), &hi) in out.iter_mut().zip(v).zip(&self.lo).zip(&self.hi) {
            let units = round_within(v * self.per_unit, lo, hi);
            norm_squared += (units as f64) * (units as f64);
            *out = units;
        }
        let Some(ball) = self.ball else { return };
        // ∞ for the zero vector (R/0), whose factor is then 1.
        let factor = (ball.shrink_to / norm_squared.sqrt()).min(1.0);
        let mut exact = 0u128;
        for out in out.iter_mut() {
            // Integers up to 2^52 are exact as floats, and trunc(u·1) = u.
            *out = (*out as f64 * factor).trunc() as i64;
            exact += u128::from(out.unsigned_abs()).pow(2);
        }
        let kept = i64::from(exact <= u128::from(ball.radius.unsigned_abs()).pow(2));
        for out in out.iter_mut() {
            *out *= kept;
        }
    }

    /// The largest ‖u‖² of any u in the region, exactly:
    /// min(Σ max(loⱼ², hiⱼ²), r²).
    pub fn reach_squared(&self) -> u128 {
        let corner = self
            .lo
            .iter()
            .zip(&self.hi)
            .map(|(&lo, &hi)| u128::from(units(lo).max(units(hi))).pow(2))
            .sum::<u128>();
        self.ball.map_or(corner, |ball| {
            corner.min(u128::from(ball.radius.unsigned_abs()).pow(2))
        })
    }

    /// The largest ‖u − u′‖² of any u, u′ in the region, exactly:
    /// min(Σ (hiⱼ − loⱼ)², 4r²).
    pub fn diameter_squared(&self) -> u128 {
        let diagonal = self
            .lo
            .iter()
            .zip(&self.hi)
            .map(|(&lo, &hi)| u128::from(units(lo) + units(hi)).pow(2))
            .sum::<u128>();
        self.ball.map_or(diagonal, |ball| {
            diagonal.min(4 * u128::from(ball.radius.unsigned_abs()).pow(2))
        })
    }

    /// A bound, in units, on ‖snap(v) − snap(v′)‖ for any v, v′ whose
    /// exact values a = v/s·2^40, a′ lie in the region and differ by at
    /// most `distance`/s·2^40, for a region within 2^41 units whose
    /// vectors are computed to 2⁻⁴² relative (2^10 ulps; far more than a
    /// clipped gradient's d + 4 roundings). One side, q = snap(v):
    ///
    /// - the computed value is within ½ unit of a, rounding adds ½, and the
    ///   clamp onto an interval holding aⱼ does not move it further from
    ///   aⱼ: |q₀ⱼ − aⱼ| ≤ 1, ‖q₀ − a‖ ≤ √k;
    /// - with a ball: if q₀ is shrunk, ‖q₀‖ ≤ ‖a‖ + √k ≤ r + √k and it
    ///   lands at (1 − 2⁻³⁰)·r up to the float norm's 2⁻⁴⁰, a move of at
    ///   most √k + 2⁻²⁹·r; trunc moves each coordinate by less than 1, √k.
    ///
    /// So ‖q − a‖ ≤ √k without a ball, 3√k + 2⁻²⁹·r with one, and
    /// ‖q − q′‖ ≤ distance/s·2^40 + 2√k (6√k + 2⁻²⁸·r with a ball),
    /// plus 1 for the float products here, capped at the diameter.
    pub fn line_units(&self, distance: f64) -> f64 {
        let root = (self.dims() as f64).sqrt();
        let rounding = match self.ball {
            Some(ball) => 6.0 * root + ball.radius as f64 / (1u64 << 28) as f64,
            None => 2.0 * root,
        } + 1.0;
        let moved = (distance * self.per_unit).next_up() + rounding;
        moved.next_up().min(ceil_sqrt(self.diameter_squared()))
    }

    /// The widest side of the box, in units: how far one coordinate of a
    /// vector of the region can move, exactly.
    pub fn side_units(&self) -> u64 {
        self.lo
            .iter()
            .zip(&self.hi)
            .map(|(&lo, &hi)| units(lo) + units(hi))
            .max()
            .unwrap_or(0)
    }

    /// |loⱼ| and |hiⱼ| of every coordinate, in units.
    fn side_bounds(&self) -> impl Iterator<Item = u64> + '_ {
        self.lo.iter().chain(&self.hi).map(|&bound| units(bound))
    }

    /// A bound, in units, on how far one coordinate of snap(v) and
    /// snap(v′) can be apart when that coordinate's exact values differ by
    /// at most `distance`, for a region without a ball (a ball couples the
    /// coordinates): each side is within ½ + ½ unit of its exact value
    /// (as in [`Region::line_units`]), so distance/s·2^40 + 2, plus 1 for
    /// the float product here, capped at the widest side.
    pub fn coordinate_units(&self, distance: f64) -> f64 {
        let moved = (distance * self.per_unit).next_up() + 3.0;
        moved.next_up().min(self.side_units() as f64)
    }
}

/// |`bound`| in units: a bound of the box is an integer of at most 2^51,
/// exact as a float, and lo ≤ 0 ≤ hi, so the sides' widths are sums.
fn units(bound: f64) -> u64 {
    bound.abs() as u64
}

/// round(`x`) (halves to even) clamped to [`lo`, `hi`], exactly as
/// `x.round_ties_even().clamp(lo, hi)`; NaN is 0. Clamping first gives
/// the same integer (rounding is monotone and keeps the integer bounds)
/// and leaves |x| ≤ 2^51, where adding 1.5·2^52 rounds x into the low
/// bits of a float in [2^52, 2^53], whose bits then differ from 1.5·2^52's
/// by round(x). Additions, comparisons and selects only, so that a loop of
/// these runs on vector registers: x86-64's baseline has no vector
/// float → i64 conversion, and a WALR pass spent a quarter of its time
/// converting one coordinate at a time.
#[inline]
fn round_within(x: f64, lo: f64, hi: f64) -> i64 {
    let x = if lo > x { lo } else { x };
    let x = if x > hi { hi } else { x };
    let x = if x.is_nan() { 0.0 } else { x };
    (x + ROUNDER).to_bits() as i64 - ROUNDER.to_bits() as i64
}

/// Exact sums of vectors snapped onto a region ([`Region::snap`]), each
/// added with a weight of 0 or 1 ([`SnappedSums::add`]). A row's units go
/// into i64 words, which are carried into the i128 sums every
/// `carry_every` rows, before they could overflow: a word then holds at
/// most `carry_every` summands of at most the largest bound each.
pub struct SnappedSums<'r> {
    region: &'r Region,
    words: Vec<i64>,
    /// Scratch space for a row shrunk onto the ball.
    units: Vec<i64>,
    rows: u64,
    carry_every: u64,
    sums: Vec<i128>,
}

impl SnappedSums<'_> {
    /// Adds snap(`v`) if `weight` (a row's label, masked in, so that no
    /// branch reads it). Without a ball the coordinates are snapped
    /// independently, in one loop with the adding.
    pub fn add(&mut self, v: &[f64], weight: bool) {
        let mask = -i64::from(weight);
        let region = self.region;
        if region.ball.is_some() {
            region.snap(v, &mut self.units);
            for (word, &units) in self.words.iter_mut().zip(&self.units) {
                *word += units & mask;
            }
        } else {
            let bounds = region.lo.iter().zip(&region.hi);
            for ((word, &v), (&lo, &hi)) in self.words.iter_mut().zip(v).zip(bounds) {
                *word += round_within(v * region.per_unit, lo, hi) & mask;
            }
        }
        self.rows += 1;
        if self.rows == self.carry_every {
            self.carry();
        }
    }

    fn carry(&mut self) {
        for (sum, word) in self.sums.iter_mut().zip(&mut self.words) {
            *sum += i128::from(std::mem::take(word));
        }
        self.rows = 0;
    }

    /// Σ weightᵢ·snap(vᵢ), exactly.
    pub fn finish(mut self) -> Vec<i128> {
        self.carry();
        self.sums
    }

    /// Σ weightᵢ·snap(vᵢ) so far, exactly, into `out`, and the sums back
    /// at 0: for sums taken group by group on one scratch space.
    pub fn take(&mut self, out: &mut [i128]) {
        self.carry();
        for (out, sum) in out.iter_mut().zip(&mut self.sums) {
            *out = std::mem::take(sum);
        }
    }
}

#[cfg(test)]
#[path = "region_tests.rs"]
mod tests;
