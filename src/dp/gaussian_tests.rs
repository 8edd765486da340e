use super::*;
use crate::dp::reference::{self, assert_close};
use proptest::prelude::*;

#[test]
fn analytic_sigma_matches_the_independent_reference_to_1e_9() {
    for point in reference::load().analytic_gaussian {
        let sigma = analytic_sigma(point.epsilon, point.delta, point.sensitivity).unwrap();
        let what = format!(
            "σ(ε={}, δ={}, Δ={})",
            point.epsilon, point.delta, point.sensitivity
        );
        assert_close(sigma, point.sigma, 1e-9, &what);
        // Never below the true minimum: rounding errs towards more noise.
        assert!(sigma >= point.sigma * (1.0 - 1e-12), "{what} under-noises");
    }
}

#[test]
fn balle_and_wang_headline_point_is_3_73() {
    let sigma = analytic_sigma(1.0, 1e-5, 1.0).unwrap();
    assert!((3.7306 - 1e-4..3.7307).contains(&sigma), "σ = {sigma}");
}

#[test]
fn classic_sigma_matches_the_reference() {
    for point in reference::load().classic_gaussian {
        let sigma = classic_sigma(point.epsilon, point.delta, point.sensitivity).unwrap();
        assert_close(sigma, point.sigma, 1e-12, "classic σ");
    }
}

#[test]
fn gaussian_epsilon_matches_the_exact_profile() {
    for point in reference::load().gaussian_epsilon {
        let epsilon = gaussian_epsilon(point.mu, point.delta);
        let what = format!("ε(μ={}, δ={})", point.mu, point.delta);
        assert_close(epsilon, point.epsilon, 1e-9, &what);
        assert!(
            epsilon >= point.epsilon * (1.0 - 1e-12),
            "{what} rounds down"
        );
    }
}

#[test]
fn calibration_is_stable_at_extreme_parameters() {
    // ε = 50 would overflow a naive e^ε·Φ(·); δ = 1e-12 and ε = 1e-6 would
    // cancel catastrophically in a naive difference.
    for (epsilon, delta) in [(50.0, 1e-12), (1e-6, 1e-12), (1e-6, 0.5), (1000.0, 1e-30)] {
        let sigma = analytic_sigma(epsilon, delta, 1.0).unwrap();
        assert!(
            sigma.is_finite() && sigma > 0.0,
            "σ({epsilon}, {delta}) = {sigma}"
        );
        let achieved = gaussian_delta(1.0 / sigma, epsilon);
        assert!(
            achieved <= delta && achieved >= delta * (1.0 - 1e-6),
            "δ at the calibrated σ({epsilon}, {delta}) is {achieved:e}"
        );
    }
}

#[test]
fn gaussian_delta_is_zero_for_no_mechanism_and_one_for_no_noise() {
    assert_eq!(gaussian_delta(1e-12, 1.0), 0.0);
    assert!(gaussian_delta(1e6, 1.0) > 1.0 - 1e-12);
    assert_eq!(gaussian_epsilon(0.0, 1e-6), 0.0);
    assert_eq!(gaussian_epsilon(1.0, 0.0), f64::INFINITY);
    assert_eq!(gaussian_epsilon(f64::INFINITY, 1e-6), f64::INFINITY);
}

#[test]
fn bad_parameters_are_errors_not_panics_or_nans() {
    let bad_epsilons = [0.0, -1.0, f64::NAN, f64::INFINITY];
    for epsilon in bad_epsilons {
        assert!(matches!(
            analytic_sigma(epsilon, 1e-6, 1.0),
            Err(DpError::InvalidEpsilon { .. })
        ));
        assert!(classic_sigma(epsilon, 1e-6, 1.0).is_err());
    }
    for delta in [0.0, 1.0, -0.1, 1.5, f64::NAN] {
        assert!(matches!(
            analytic_sigma(1.0, delta, 1.0),
            Err(DpError::InvalidDelta { .. })
        ));
    }
    for sensitivity in [0.0, -2.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            analytic_sigma(1.0, 1e-6, sensitivity),
            Err(DpError::InvalidSensitivity(_))
        ));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sigma_falls_as_epsilon_grows(epsilon in 1e-3f64..40.0, factor in 1.001f64..5.0, delta in 1e-12f64..0.1) {
        let looser = analytic_sigma(epsilon * factor, delta, 1.0).unwrap();
        prop_assert!(looser < analytic_sigma(epsilon, delta, 1.0).unwrap());
    }

    #[test]
    fn sigma_falls_as_delta_grows(epsilon in 1e-3f64..40.0, delta in 1e-12f64..0.1, factor in 1.01f64..9.0) {
        let looser = analytic_sigma(epsilon, delta * factor, 1.0).unwrap();
        prop_assert!(looser < analytic_sigma(epsilon, delta, 1.0).unwrap());
    }

    #[test]
    fn sigma_rises_in_proportion_to_sensitivity(epsilon in 1e-3f64..40.0, delta in 1e-12f64..0.1, sensitivity in 1e-6f64..1e6) {
        let unit = analytic_sigma(epsilon, delta, 1.0).unwrap();
        let scaled = analytic_sigma(epsilon, delta, sensitivity).unwrap();
        prop_assert!((scaled / (unit * sensitivity) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn analytic_sigma_never_exceeds_classic_below_epsilon_one(epsilon in 1e-4f64..1.0, delta in 1e-15f64..0.5) {
        let analytic = analytic_sigma(epsilon, delta, 1.0).unwrap();
        prop_assert!(analytic <= classic_sigma(epsilon, delta, 1.0).unwrap());
    }

    #[test]
    fn calibrated_sigma_meets_delta_and_is_tight(epsilon in 1e-3f64..50.0, delta in 1e-15f64..0.5) {
        let sigma = analytic_sigma(epsilon, delta, 1.0).unwrap();
        prop_assert!(gaussian_delta(1.0 / sigma, epsilon) <= delta);
        prop_assert!(gaussian_delta(1.0 / (sigma * (1.0 - 1e-9)), epsilon) > delta);
    }

    #[test]
    fn epsilon_inverts_delta(mu in 1e-3f64..20.0, delta in 1e-15f64..0.5) {
        let epsilon = gaussian_epsilon(mu, delta);
        prop_assume!(epsilon > 0.0);
        prop_assert!(gaussian_delta(mu, epsilon) <= delta);
        prop_assert!(gaussian_delta(mu, epsilon * (1.0 - 1e-9)) > delta);
    }
}
