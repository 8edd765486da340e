use super::*;
use proptest::prelude::*;

/// The plain formula, with the C library's `exp`.
fn reference(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

#[test]
fn exp_bounded_is_within_two_ulp_of_the_library_over_its_whole_range() {
    let mut x = -LOGISTIC_CLAMP;
    while x <= LOGISTIC_CLAMP {
        let (ours, library) = (exp_bounded(x), x.exp());
        let ulp = library * f64::EPSILON;
        assert!(
            (ours - library).abs() <= 2.0 * ulp,
            "x = {x}: {ours} vs {library}"
        );
        x += 0.0137;
    }
    assert_eq!(exp_bounded(0.0), 1.0);
    // A negligible r (here: all of x) leaves exactly 1, with no subnormal
    // on the way.
    assert_eq!(exp_bounded(1e-300), 1.0);
    assert_eq!(exp_bounded(-1e-19), 1.0);
}

#[test]
fn logistic_matches_the_formula_and_saturates_past_the_clamp() {
    for z in [0.0, 1e-300, -1e-300, 0.5, -3.0, 17.25, -39.9, 39.9] {
        let (ours, plain) = (logistic(z), reference(z));
        assert!(
            (ours - plain).abs() <= 4.0 * plain * f64::EPSILON,
            "z = {z}"
        );
    }
    assert_eq!(logistic(0.0), 0.5);
    assert_eq!(logistic(40.0), 1.0);
    assert_eq!(logistic(720.0), 1.0);
    assert_eq!(logistic(f64::MAX), 1.0);
    // Beyond −40 it stays at σ(−40) ≈ 4.25·10⁻¹⁸ where the formula falls
    // towards 0: an absolute error below 4.3·10⁻¹⁸.
    let floor = logistic(-40.0);
    assert!((floor - reference(-40.0)).abs() <= 4.0 * floor * f64::EPSILON);
    assert!(floor < 4.3e-18);
    assert_eq!(logistic(-720.0), floor);
    assert_eq!(logistic(-f64::MAX), floor);
}

#[test]
fn tiny_weights_are_flushed_and_the_rest_kept() {
    assert_eq!(FLUSH_BELOW, 2f64.powi(-600));
    assert_eq!(flush_tiny(1e-300), 0.0);
    assert_eq!(flush_tiny(-1e-200), 0.0);
    assert_eq!(flush_tiny(f64::MIN_POSITIVE / 4.0), 0.0);
    assert_eq!(flush_tiny(FLUSH_BELOW), FLUSH_BELOW);
    assert_eq!(flush_tiny(-3.5), -3.5);
    // The smallest flushed-to weight times the smallest f32 feature is
    // still a normal f64.
    let product = FLUSH_BELOW * f64::from(f32::from_bits(1));
    assert!(product.is_normal(), "{product:e}");
}

proptest! {
    #[test]
    fn logistic_is_within_bounds_and_close_to_the_formula(z in -1e3f64..1e3) {
        let ours = logistic(z);
        prop_assert!((0.0..=1.0).contains(&ours));
        prop_assert!((ours - reference(z)).abs() <= 4.3e-18 + 4.0 * ours * f64::EPSILON);
    }
}
