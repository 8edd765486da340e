//! Privacy parameters held as exact integers.
//!
//! Basic composition adds ε and δ. Adding binary floats drifts (0.1 + 0.1 +
//! … ten times is 0.9999999999999999), which would let a ledger refuse a
//! release that fits or admit one that does not. So ε is kept in integer
//! units of 10⁻⁹ and δ in integer units of 10⁻³⁰, converted from the decimal
//! the caller wrote: ten releases of ε = 0.1 spend exactly 1.0.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::DpError;

/// Converts `value` to an integer count of `10^-scale` units, reading the
/// shortest decimal that round-trips to `value` (what the caller typed), and
/// rounding half up below the resolution. `None` if it does not fit a `u128`.
fn decimal_units(value: f64, scale: u32) -> Option<u128> {
    let text = format!("{value:e}");
    let (mantissa, exponent) = text.split_once('e')?;
    let exponent: i32 = exponent.parse().ok()?;
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
    let fraction_len = i32::try_from(fraction.len()).ok()?;
    let shift = exponent - fraction_len + i32::try_from(scale).ok()?;
    if shift >= 0 {
        digits.checked_mul(10u128.checked_pow(shift.unsigned_abs())?)
    } else {
        match 10u128.checked_pow(shift.unsigned_abs()) {
            Some(divisor) => Some(digits / divisor + u128::from(digits % divisor >= divisor / 2)),
            None => Some(0),
        }
    }
}

/// A privacy-loss parameter ε ≥ 0, exact to 10⁻⁹. Serialised as its
/// integer units.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epsilon(u64);

impl Epsilon {
    /// Units per 1.0 of ε.
    pub const UNITS_PER_ONE: u64 = 1_000_000_000;
    /// The largest ε any budget or release may name.
    pub const MAX: f64 = 1_000_000.0;
    /// No privacy loss.
    pub const ZERO: Epsilon = Epsilon(0);

    /// Parses a caller's ε: finite, > 0, at most [`Self::MAX`], and at least
    /// 10⁻⁹ (the ledger's unit; the API's schema says the same).
    pub fn new(value: f64) -> Result<Self, DpError> {
        if !value.is_finite() || value <= 0.0 || value > Self::MAX {
            return Err(DpError::InvalidEpsilon {
                value,
                max: Self::MAX,
            });
        }
        if value < 1e-9 {
            return Err(DpError::BelowResolution {
                name: "epsilon",
                value,
                resolution: 1e-9,
            });
        }
        let units = decimal_units(value, 9)
            .and_then(|units| u64::try_from(units).ok())
            .ok_or(DpError::InvalidEpsilon {
                value,
                max: Self::MAX,
            })?;
        if units == 0 {
            return Err(DpError::BelowResolution {
                name: "epsilon",
                value,
                resolution: 1e-9,
            });
        }
        Ok(Epsilon(units))
    }

    /// The smallest ε on the 10⁻⁹ grid that is ≥ `value`, for reporting a
    /// computed privacy loss: rounding never flatters the ledger. A relative
    /// margin of 10⁻¹² absorbs the floating-point error of the computation
    /// that produced `value`. Non-finite or huge values saturate.
    pub fn ceil(value: f64) -> Self {
        if value.is_nan() || value >= u64::MAX as f64 / 1e9 {
            return Epsilon(u64::MAX);
        }
        if value <= 0.0 {
            return Epsilon::ZERO;
        }
        // The cast saturates and the value is checked to be in range above.
        Epsilon((value * (1.0 + 1e-12) * 1e9).ceil() as u64)
    }

    /// Builds an ε from its integer units (as stored in a ledger).
    pub const fn from_units(units: u64) -> Self {
        Epsilon(units)
    }

    /// The integer number of 10⁻⁹ units.
    pub const fn units(self) -> u64 {
        self.0
    }

    /// The value as a float, for calibration and display.
    pub fn value(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Exact sum; saturates instead of wrapping.
    pub fn saturating_add(self, other: Epsilon) -> Epsilon {
        Epsilon(self.0.saturating_add(other.0))
    }

    /// Exact difference, floored at zero.
    pub fn saturating_sub(self, other: Epsilon) -> Epsilon {
        Epsilon(self.0.saturating_sub(other.0))
    }
}

/// A privacy-loss parameter 0 ≤ δ < 1, exact to 10⁻³⁰.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Delta(u128);

impl Delta {
    /// Units per 1.0 of δ.
    pub const UNITS_PER_ONE: u128 = 10u128.pow(30);
    /// δ = 0: a pure ε-DP release.
    pub const ZERO: Delta = Delta(0);

    /// Parses a caller's δ in [0, 1); 0 means pure ε-DP. A positive δ must
    /// be at least 10⁻³⁰, the ledger's unit.
    pub fn new(value: f64) -> Result<Self, DpError> {
        let invalid = DpError::InvalidDelta {
            value,
            range: "[0, 1)",
        };
        if !value.is_finite() || !(0.0..1.0).contains(&value) {
            return Err(invalid);
        }
        if value == 0.0 {
            return Ok(Delta::ZERO);
        }
        if value < 1e-30 {
            return Err(DpError::BelowResolution {
                name: "delta",
                value,
                resolution: 1e-30,
            });
        }
        let units = decimal_units(value, 30).ok_or(invalid)?;
        if units == 0 {
            return Err(DpError::BelowResolution {
                name: "delta",
                value,
                resolution: 1e-30,
            });
        }
        if units >= Self::UNITS_PER_ONE {
            return Err(DpError::InvalidDelta {
                value,
                range: "[0, 1)",
            });
        }
        Ok(Delta(units))
    }

    /// Parses a δ that must be strictly positive (a budget, or a release that
    /// uses the Gaussian mechanism).
    pub fn positive(value: f64) -> Result<Self, DpError> {
        match Self::new(value)? {
            Delta::ZERO => Err(DpError::InvalidDelta {
                value,
                range: "(0, 1)",
            }),
            delta => Ok(delta),
        }
    }

    /// Builds a δ from its integer units (as stored in a ledger).
    pub const fn from_units(units: u128) -> Self {
        Delta(units)
    }

    /// The integer number of 10⁻³⁰ units.
    pub const fn units(self) -> u128 {
        self.0
    }

    /// The value as a float, for calibration and display: the double
    /// nearest to units·10⁻³⁰ (Rust parses decimals correctly rounded; a
    /// float division would round twice).
    pub fn value(self) -> f64 {
        format!("{}e-30", self.0)
            .parse()
            .expect("an integer with an exponent is a valid float literal")
    }

    /// Exact sum; saturates instead of wrapping.
    pub fn saturating_add(self, other: Delta) -> Delta {
        Delta(self.0.saturating_add(other.0))
    }

    /// Exact difference, floored at zero.
    pub fn saturating_sub(self, other: Delta) -> Delta {
        Delta(self.0.saturating_sub(other.0))
    }
}

/// δ is serialised as the decimal string of its units: 10³⁰ does not fit a
/// JSON number that every reader keeps exact, nor a 64-bit SQL integer.
impl Serialize for Delta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for Delta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse()
            .map(Delta)
            .map_err(|_| serde::de::Error::custom(format!("bad delta units {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ten_tenths_of_epsilon_sum_to_exactly_one() {
        let tenth = Epsilon::new(0.1).unwrap();
        let total = (0..10).fold(Epsilon::ZERO, |sum, _| sum.saturating_add(tenth));
        assert_eq!(total, Epsilon::new(1.0).unwrap());
        assert_eq!(total.units(), 1_000_000_000);
        assert!(total.saturating_add(tenth) > Epsilon::new(1.0).unwrap());
    }

    #[test]
    fn deltas_are_read_as_the_decimal_the_caller_wrote() {
        assert_eq!(Delta::new(1e-6).unwrap().units(), 10u128.pow(24));
        assert_eq!(Delta::new(1e-12).unwrap().units(), 10u128.pow(18));
        assert_eq!(Delta::new(0.5).unwrap().units(), 5 * 10u128.pow(29));
        assert_eq!(Delta::new(1.234e-25).unwrap().units(), 123_400);
        assert_eq!(Delta::new(1e-30).unwrap().units(), 1);
        let millionth = Delta::new(1e-6).unwrap();
        let sum = (0..1_000_000).fold(Delta::ZERO, |sum, _| sum.saturating_add(millionth));
        assert_eq!(sum.units(), Delta::UNITS_PER_ONE);
    }

    #[test]
    fn epsilon_rounds_to_the_nearest_nano_unit() {
        assert_eq!(Epsilon::new(1.000000001).unwrap().units(), 1_000_000_001);
        assert_eq!(Epsilon::new(0.3333333333).unwrap().units(), 333_333_333);
        assert_eq!(Epsilon::new(0.0000000015).unwrap().units(), 2);
        assert_eq!(Epsilon::new(Epsilon::MAX).unwrap().units(), 10u64.pow(15));
    }

    #[test]
    fn bad_epsilons_are_refused_with_a_reason() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e7] {
            assert!(matches!(
                Epsilon::new(bad),
                Err(DpError::InvalidEpsilon { .. })
            ));
        }
        assert!(matches!(
            Epsilon::new(4e-10),
            Err(DpError::BelowResolution { .. })
        ));
    }

    #[test]
    fn bad_deltas_are_refused_with_a_reason() {
        for bad in [-1e-9, 1.0, 2.0, f64::NAN, f64::NEG_INFINITY] {
            assert!(matches!(Delta::new(bad), Err(DpError::InvalidDelta { .. })));
        }
        assert!(matches!(
            Delta::new(4e-31),
            Err(DpError::BelowResolution { .. })
        ));
        assert!(matches!(
            Delta::positive(0.0),
            Err(DpError::InvalidDelta { .. })
        ));
        assert_eq!(Delta::new(0.0), Ok(Delta::ZERO));
        // The largest double below one reads as 0.9999999999999999: still below one.
        let almost_one = Delta::new(1.0 - f64::EPSILON / 2.0).unwrap();
        assert_eq!(almost_one.units(), 9_999_999_999_999_999 * 10u128.pow(14));
    }

    #[test]
    fn epsilon_ceil_never_rounds_down() {
        assert_eq!(Epsilon::ceil(0.0), Epsilon::ZERO);
        assert_eq!(Epsilon::ceil(-3.0), Epsilon::ZERO);
        assert_eq!(Epsilon::ceil(1.0).units(), 1_000_000_001);
        assert_eq!(Epsilon::ceil(0.5e-9).units(), 1);
        assert_eq!(Epsilon::ceil(f64::NAN).units(), u64::MAX);
        assert_eq!(Epsilon::ceil(f64::INFINITY).units(), u64::MAX);
    }

    proptest! {
        #[test]
        fn epsilon_units_round_trip_through_their_float(units in 1u64..=10u64.pow(15)) {
            let epsilon = Epsilon::from_units(units);
            prop_assert_eq!(Epsilon::new(epsilon.value()).unwrap(), epsilon);
        }

        #[test]
        fn delta_with_fifteen_digits_round_trips(mantissa in 1u64..10u64.pow(15), exponent in 1i32..=15) {
            // mantissa · 10^-(15 + exponent) lies in (0, 1) and has at most 15 significant digits.
            let value: f64 = format!("{mantissa}e-{}", 15 + exponent).parse().unwrap();
            let delta = Delta::new(value).unwrap();
            let expected = u128::from(mantissa) * 10u128.pow((15 - exponent) as u32);
            prop_assert_eq!(delta.units(), expected);
            prop_assert_eq!(Delta::new(delta.value()).unwrap(), delta);
        }

        #[test]
        fn epsilon_ceil_is_an_upper_bound(value in 0.0f64..1e6) {
            prop_assert!(Epsilon::ceil(value).value() >= value);
        }
    }
}
