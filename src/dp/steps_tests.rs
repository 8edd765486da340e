use super::*;
use crate::dp::analytic_sigma;
use crate::dp::reference::{self, assert_close};
use proptest::prelude::*;

/// Pure ε₀-DP steps (Frank-Wolfe's Laplace selection).
fn pure(each: Epsilon) -> Result<PrivacyLoss, DpError> {
    Ok(PrivacyLoss::PureEpsilon {
        epsilon: each.value(),
    })
}

/// ε₀-bounded-range steps (Frank-Wolfe's exponential selection).
fn bounded_range(each: Epsilon) -> Result<PrivacyLoss, DpError> {
    Ok(PrivacyLoss::BoundedRange {
        epsilon: each.value(),
    })
}

/// Gaussian steps, each calibrated to (ε₀, δ) on a unit sensitivity (a
/// gradient call).
fn gaussian(delta: Delta) -> impl Fn(Epsilon) -> Result<PrivacyLoss, DpError> {
    move |each| {
        Ok(PrivacyLoss::Gaussian {
            sensitivity: 1.0,
            sigma: analytic_sigma(each.value(), delta.value(), 1.0)?,
        })
    }
}

fn per_step(epsilon: f64, delta: f64, steps: u32, loss: &str) -> Epsilon {
    let (epsilon, delta) = (Epsilon::new(epsilon).unwrap(), Delta::new(delta).unwrap());
    match loss {
        "pure" => per_step_epsilon(epsilon, delta, steps, pure),
        "bounded_range" => per_step_epsilon(epsilon, delta, steps, bounded_range),
        _ => per_step_epsilon(epsilon, delta, steps, gaussian(delta)),
    }
    .unwrap()
}

#[test]
fn per_step_epsilons_match_the_independent_reference() {
    // The reference is exact; ours is the same value rounded down to the
    // ledger's 10⁻⁹ grid, so within 2·10⁻⁹ below it (and the Gaussian's
    // analytic σ, bisected to 10⁻¹⁴, moves it by less than that).
    for point in reference::learners().per_step {
        let what = format!(
            "{} steps of {} at ε = {}, δ = {}",
            point.steps, point.loss, point.epsilon, point.delta
        );
        let ours = per_step(point.epsilon, point.delta, point.steps, &point.loss).value();
        assert!(
            ours <= point.per_step + 1e-12 && ours >= point.per_step - 2e-9,
            "{what}: {ours} against {}",
            point.per_step
        );
    }
    // LEARNERS.md's figures: Frank-Wolfe's Laplace and exponential
    // selections at T = 50, and the per-call ε of 10, 100 and 1,000
    // gradient calls.
    assert_close(per_step(1.0, 1e-6, 50, "pure").value(), 0.0325, 2e-3, "FW");
    let exponential = per_step(1.0, 1e-6, 50, "bounded_range").value();
    assert_close(exponential, 0.0624, 2e-3, "FW, exponential");
    for (steps, expected) in [(10, 0.291), (100, 0.0850), (1000, 0.0246)] {
        let ours = per_step(1.0, 1e-6, steps, "gaussian").value();
        assert_close(ours, expected, 2e-3, &format!("{steps} gradient calls"));
    }
}

#[test]
fn without_delta_each_step_gets_its_share_rounded_down() {
    let epsilon = Epsilon::new(1.0).unwrap();
    let share = per_step_epsilon(epsilon, Delta::ZERO, 3, pure).unwrap();
    assert_eq!(share, Epsilon::from_units(333_333_333));
    assert!(matches!(
        per_step_epsilon(Epsilon::from_units(2), Delta::ZERO, 3, pure),
        Err(DpError::BelowResolution { .. })
    ));
    assert!(matches!(
        per_step_epsilon(epsilon, Delta::ZERO, 0, pure),
        Err(DpError::NoSteps)
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The answer fits, one unit more does not, and it is never below the
    /// basic share: the ledger never spends more than the release claims,
    /// and never less than it could.
    #[test]
    fn the_answer_is_the_largest_that_fits(
        units in 1_000_000u64..20_000_000_000,
        steps in 1u32..500,
        delta_exponent in 3i32..15,
        kind in 0u8..3,
    ) {
        let epsilon = Epsilon::from_units(units);
        let delta = Delta::new(10f64.powi(-delta_exponent)).unwrap();
        let each = |candidate: Epsilon| match kind {
            0 => gaussian(delta)(candidate),
            1 => bounded_range(candidate),
            _ => pure(candidate),
        };
        let found = per_step_epsilon(epsilon, delta, steps, each).unwrap();
        prop_assert!(found.units() >= units / u64::from(steps));
        prop_assert!(cost(found, delta, steps, each(found).unwrap()) <= epsilon);
        if found < epsilon {
            let above = Epsilon::from_units(found.units() + 1);
            prop_assert!(cost(above, delta, steps, each(above).unwrap()) > epsilon);
        }
    }
}
