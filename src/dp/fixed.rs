//! Exact sums over private rows on a public fixed-point grid.
//!
//! A float sum is not a function of the multiset it adds: its rounding
//! depends on the order, and its error grows with the magnitude of the sum.
//! Two neighbouring datasets can therefore give computed sums further apart
//! than the sensitivity a proof allows for exact ones (ten million values
//! near 10⁹ whose span is 1.1 sum to ~10¹⁶, where a double's ulp is 2: the
//! computed sums of two neighbours differ by up to twice the span).
//!
//! Here every summand x of a quantity is first put on the quantity's own
//! public grid: it becomes the integer round(x/s · 2^[`FRACTION_BITS`]),
//! with s > 0 a public scale (an aggregate takes the quantity's own
//! sensitivity). The map is monotone (a float division by s > 0, an exact
//! scaling by a power of two and a rounding are each monotone), so values
//! in [lo, hi] become integers in [u(lo), u(hi)], and the bounds a
//! sensitivity proof needs are those integers, computed from public facts.
//! The integers are added in i128, which is exact and does not depend on
//! the order; overflow is ruled out before anything is read
//! ([`Grid::holds`]). The sum, read as units · 2^−[`FRACTION_BITS`], is the
//! normalised quantity Σx/s up to the rounding of each summand (at most
//! half a unit each, on the quantity's side: the sensitivity is computed
//! from the rounded bounds, so the rounding is public).
//!
//! [`super::Mechanism::release_fixed`] snaps such a sum to its noise
//! lattice in integer arithmetic, so no float ever holds the exact sum.

use super::DpError;

/// Bits of a grid unit below the scale: a value s (the scale itself) is
/// 2^40 units, so rounding moves a summand by at most 2^−41·s, and 10⁹
/// rows move a sum by at most 5·10⁻⁴·s.
pub const FRACTION_BITS: i32 = 40;

/// The largest magnitude of an exact sum: i128 holds it with room for the
/// addition that could take it further.
const MAX_UNITS: f64 = (1u128 << 126) as f64;

/// The public grid of one summed quantity.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Grid {
    scale: f64,
}

impl Grid {
    /// The grid of a quantity whose values are counted in units of
    /// `scale`·2^−[`FRACTION_BITS`].
    pub fn new(scale: f64) -> Result<Grid, DpError> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(DpError::InvalidSensitivity(scale));
        }
        Ok(Grid { scale })
    }

    pub fn scale(self) -> f64 {
        self.scale
    }

    /// x on the grid: round(x/s · 2^40), monotone non-decreasing in x.
    /// A float beyond i128 saturates, which keeps it monotone; callers
    /// check with [`Grid::holds`] that their bounds stay far inside.
    pub fn units(self, x: f64) -> i128 {
        ((x / self.scale) * 2f64.powi(FRACTION_BITS)).round() as i128
    }

    /// [`Grid::units`] for a value whose units are known, from public
    /// bounds, to lie within ±2^62: the same number, by a one-instruction
    /// conversion instead of the i128 one (a library call).
    pub fn units_within_i64(self, x: f64) -> i128 {
        i128::from(self.units_i64(x))
    }

    /// [`Grid::units_within_i64`] as an i64.
    pub fn units_i64(self, x: f64) -> i64 {
        round_to_i64((x / self.scale) * 2f64.powi(FRACTION_BITS))
    }

    /// Whether `count` summands each at most `largest` units in magnitude
    /// sum within i128 without overflow, with room to spare: a public
    /// check made before any row is read.
    pub fn holds(count: u64, largest: u128) -> bool {
        (count as f64) * (largest as f64) < MAX_UNITS
    }
}

/// `y.round() as i64` (halves away from zero, saturating, NaN to 0) for
/// every f64, without `round`, which baseline x86-64 has only as a library
/// call (9% of an aggregate's CPU): truncate, then step away from zero
/// when the rest is at least ½. The rest `y − trunc(y)` is exact (for
/// |y| ≥ 1 the two are within a factor of 2; below, trunc(y) is 0), and
/// for |y| ≥ 2⁵² it is 0, as y is an integer. Saturated ends stay where
/// `as` puts them, NaN's rest compares false.
fn round_to_i64(y: f64) -> i64 {
    let whole = y as i64;
    let rest = y - whole as f64;
    whole
        .saturating_add(i64::from(rest >= 0.5))
        .saturating_sub(i64::from(rest <= -0.5))
}

/// Exact values: `units[i]` · 2^`exponent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    pub units: Vec<i128>,
    pub exponent: i32,
}

impl Fixed {
    /// Sums on grids of [`FRACTION_BITS`]: their values are the normalised
    /// quantities Σx/s.
    pub fn normalised(units: Vec<i128>) -> Fixed {
        Fixed {
            units,
            exponent: -FRACTION_BITS,
        }
    }
}

impl Fixed {
    /// The values as floats, each rounded once: for reading them, never
    /// for releasing them (a release snaps the exact values).
    pub fn to_f64(&self) -> Vec<f64> {
        let scale = 2f64.powi(self.exponent);
        self.units
            .iter()
            .map(|&units| units as f64 * scale)
            .collect()
    }
}

/// A non-negative integer as a float no smaller than it.
pub fn ceil_f64(value: u128) -> f64 {
    let float = value as f64;
    // Floats at this size are integers: the cast back is exact unless it
    // saturates, which only a value at u128::MAX reaches.
    if (float as u128) < value {
        float.next_up()
    } else {
        float
    }
}

/// √value, never below the exact root.
pub fn ceil_sqrt(value: u128) -> f64 {
    ceil_f64(value).sqrt().next_up()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_grid_counts_its_scale_as_two_to_the_forty_units() {
        let grid = Grid::new(1.1).unwrap();
        assert_eq!(grid.units(1.1), 1 << 40);
        assert_eq!(grid.units(0.0), 0);
        assert_eq!(grid.units(-1.1), -(1 << 40));
        assert_eq!(Grid::new(2.0).unwrap().units(1.0), 1 << 39);
        for scale in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Grid::new(scale),
                Err(DpError::InvalidSensitivity(_))
            ));
        }
    }

    #[test]
    fn sums_of_units_are_the_same_in_any_order() {
        // Values near 10⁹ with a span of 1.1: float sums of them depend on
        // the order; the units' sums do not.
        let grid = Grid::new(1.1).unwrap();
        let values: Vec<f64> = (0..10_000).map(|i| 1e9 + f64::from(i % 11) * 0.1).collect();
        let forward: i128 = values.iter().map(|&x| grid.units(x)).sum();
        let backward: i128 = values.iter().rev().map(|&x| grid.units(x)).sum();
        assert_eq!(forward, backward);
    }

    #[test]
    fn rounding_by_truncation_is_round_at_every_half_and_the_ends() {
        let mut values = vec![
            0.0,
            -0.0,
            0.49999999999999994,
            -0.49999999999999994,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            9.223372036854775e18,
            -9.223372036854775e18,
            2f64.powi(52) + 1.0,
        ];
        for exponent in -1..63 {
            let power = 2f64.powi(exponent);
            for y in [
                power,
                power + 0.5,
                power - 0.5,
                power.next_up(),
                power.next_down(),
            ] {
                values.extend([y, -y]);
            }
        }
        for y in values {
            assert_eq!(round_to_i64(y), y.round() as i64, "{y:e}");
        }
    }

    #[test]
    fn overflow_is_ruled_out_from_the_count_and_the_largest_summand() {
        assert!(Grid::holds(1 << 40, 1 << 80));
        assert!(!Grid::holds(1 << 50, 1 << 80));
        assert!(Grid::holds(0, u128::MAX));
    }

    #[test]
    fn ceilings_are_never_below_the_exact_value() {
        let odd = (1u128 << 80) + 1;
        assert!(ceil_f64(odd) > (1u128 << 80) as f64);
        assert_eq!(ceil_f64(1 << 80), (1u128 << 80) as f64);
        assert_eq!(ceil_sqrt(4), 2f64.next_up());
        assert!(ceil_sqrt(odd) > 2f64.powi(40));
    }

    proptest! {
        #[test]
        fn units_are_monotone(a in -1e15f64..1e15, b in -1e15f64..1e15, scale in 1e-9f64..1e9) {
            let grid = Grid::new(scale).unwrap();
            let (low, high) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(grid.units(low) <= grid.units(high));
        }

        #[test]
        fn the_i64_conversion_gives_the_same_units_within_its_range(x in -1e6f64..1e6, scale in 1e-3f64..1e3) {
            let grid = Grid::new(scale).unwrap();
            prop_assume!(grid.units(x).unsigned_abs() < 1 << 62);
            prop_assert_eq!(grid.units_within_i64(x), grid.units(x));
        }

        #[test]
        fn rounding_by_truncation_is_round_for_any_float(bits in any::<u64>()) {
            let y = f64::from_bits(bits);
            prop_assert_eq!(round_to_i64(y), y.round() as i64);
        }

        #[test]
        fn a_unit_is_within_half_a_unit_of_the_scaled_value(x in -1e6f64..1e6, scale in 1e-3f64..1e3) {
            let grid = Grid::new(scale).unwrap();
            let exact = x / scale * 2f64.powi(FRACTION_BITS);
            prop_assert!((grid.units(x) as f64 - exact).abs() <= 0.5 + exact.abs() * f64::EPSILON);
        }
    }
}
