//! Accuracy-first calibration: the ε that buys a target noise level.
//!
//! An analyst who knows the accuracy they need names the noise std instead
//! of ε; the ledger then charges the least ε, on its grid of 10⁻⁹, whose
//! mechanism is at least that accurate. The mechanism is built at each
//! candidate ε exactly as a release would build it, so the answer accounts
//! for everything that sets its std (the analytic calibration, the lattice).

use super::{DpError, Epsilon};

/// The smallest ε (in ledger units) at which `std_at(ε)` is at most
/// `target`: a bisection over the grid, so that `std_at` meets the target
/// at the answer and misses it one unit below (an ε at which the mechanism
/// cannot be built misses it). `std_at` falls as ε grows.
///
/// # Errors
/// [`DpError::UnreachableTarget`] when `target` is not a positive finite
/// number or even ε = [`Epsilon::MAX`] is noisier; the mechanism's own error
/// when it cannot be built at all.
pub fn smallest_epsilon(
    target: f64,
    std_at: impl Fn(Epsilon) -> Result<f64, DpError>,
) -> Result<Epsilon, DpError> {
    let most = Epsilon::new(Epsilon::MAX)?;
    let least = std_at(most)?;
    if !(target.is_finite() && target > 0.0 && least <= target) {
        return Err(DpError::UnreachableTarget {
            target,
            least,
            max: Epsilon::MAX,
        });
    }
    let meets = |units: u64| std_at(Epsilon::from_units(units)).is_ok_and(|std| std <= target);
    // Invariant: `low` misses (0 is no ε at all) and `high` meets.
    let (mut low, mut high) = (0, most.units());
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if meets(middle) {
            high = middle;
        } else {
            low = middle;
        }
    }
    Ok(Epsilon::from_units(high))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp::{Delta, Mechanism};
    use proptest::prelude::*;

    fn gaussian_std(epsilon: Epsilon, delta: f64, sensitivity: f64) -> Result<f64, DpError> {
        Mechanism::gaussian(epsilon, Delta::new(delta)?, sensitivity, 3, 1.0)
            .map(|mechanism| mechanism.noise_std())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The answer meets the target, and one ledger unit less would not.
        #[test]
        fn the_answer_is_the_boundary_on_the_ledger_grid(
            target in 1e-4f64..10.0,
            delta_exp in -12i32..-3,
            sensitivity in 1e-3f64..2.0,
        ) {
            let delta = 10f64.powi(delta_exp);
            let std_at = |epsilon| gaussian_std(epsilon, delta, sensitivity);
            let chosen = smallest_epsilon(target, std_at).unwrap();
            prop_assert!(std_at(chosen).unwrap() <= target);
            let below = Epsilon::from_units(chosen.units() - 1);
            prop_assert!(std_at(below).map_or(true, |std| std > target));
        }
    }

    #[test]
    fn a_known_calibration_comes_back() {
        // σ at ε = 0.5 exactly; asking for it buys ε = 0.5, or a few units
        // less where the calibration (solved to about 10⁻⁹ relative) gives
        // the same std: σ moves by 2·10⁻⁹ of itself per unit here.
        let std_at = |e| gaussian_std(e, 1e-6, 0.01);
        let std = std_at(Epsilon::new(0.5).unwrap()).unwrap();
        let chosen = smallest_epsilon(std, std_at).unwrap();
        assert!(chosen.units().abs_diff(500_000_000) <= 10, "{chosen:?}");
        assert!(std_at(chosen).unwrap() <= std);
    }

    #[test]
    fn unreachable_and_bad_targets_are_refused() {
        let std_at = |epsilon| gaussian_std(epsilon, 1e-6, 1.0);
        for target in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-12] {
            assert!(
                matches!(
                    smallest_epsilon(target, std_at),
                    Err(DpError::UnreachableTarget { .. })
                ),
                "{target}"
            );
        }
    }
}
