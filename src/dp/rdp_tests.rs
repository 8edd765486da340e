use super::*;
use crate::dp::reference::{self, assert_close};
use proptest::prelude::*;

fn at(curve: &RdpCurve, alpha: f64) -> f64 {
    let index = ORDERS
        .iter()
        .position(|&order| order == alpha)
        .expect("the reference only uses orders of the grid");
    curve.bounds()[index]
}

#[test]
fn the_order_grid_is_the_one_the_reference_was_computed_on() {
    assert_eq!(reference::load().orders, ORDERS.to_vec());
    assert!(ORDERS.windows(2).all(|pair| pair[0] < pair[1]));
}

#[test]
fn conversions_to_epsilon_match_the_reference() {
    for case in reference::load().rdp_to_epsilon {
        let curve = RdpCurve(case.rdp.clone().try_into().expect("one bound per order"));
        assert_close(curve.epsilon(case.delta), case.epsilon, 1e-9, &case.name);
    }
}

#[test]
fn gaussian_curves_match_dp_accounting() {
    let reference = reference::load();
    let expected = |name: &str| {
        reference
            .dp_accounting
            .iter()
            .find(|case| case.name == name)
            .map(|case| (case.delta, case.epsilon))
            .expect("named case exists")
    };
    let (delta, epsilon) = expected("gaussian_nm1_x1");
    assert_close(
        RdpCurve::gaussian(1.0).epsilon(delta),
        epsilon,
        1e-9,
        "σ/Δ = 1, once",
    );
    let (delta, epsilon) = expected("gaussian_nm4_x50");
    let curve = RdpCurve::gaussian(0.25).repeated(50);
    assert_close(curve.epsilon(delta), epsilon, 1e-9, "σ/Δ = 4, fifty times");
    // dp_accounting's Laplace is the continuous one; ours runs on a lattice
    // 2^23 units per scale, where the two agree to about 1e-7.
    let (delta, epsilon) = expected("laplace_nm2_x10");
    let scale = f64::from(1u32 << 23);
    let curve = RdpCurve::discrete_laplace(scale / 2.0, scale).repeated(10);
    assert_close(curve.epsilon(delta), epsilon, 1e-6, "b/Δ = 2, ten times");
}

#[test]
fn discrete_laplace_curve_matches_direct_summation() {
    for point in reference::load().discrete_laplace_rdp {
        let curve = RdpCurve::discrete_laplace(f64::from(point.shift), point.scale);
        let what = format!(
            "α={}, scale={}, shift={}",
            point.alpha, point.scale, point.shift
        );
        assert_close(at(&curve, point.alpha), point.rdp, 1e-9, &what);
    }
}

#[test]
fn discrete_laplace_on_a_fine_lattice_is_mironovs_laplace_curve() {
    let scale = f64::from(1u32 << 23);
    for point in reference::load().laplace_rdp {
        let curve = RdpCurve::discrete_laplace(point.epsilon * scale, scale);
        let what = format!("α={}, ε={}", point.alpha, point.epsilon);
        assert_close(at(&curve, point.alpha), point.rdp, 1e-6, &what);
    }
}

#[test]
fn a_unit_shift_of_the_discrete_laplace_is_randomized_response() {
    // Only the values ±1/scale occur as privacy loss, so the two coincide.
    for scale in [1.0, 3.0, 10.0] {
        let laplace = RdpCurve::discrete_laplace(1.0, scale);
        let response = RdpCurve::pure(1.0 / scale);
        for (a, b) in laplace.bounds().iter().zip(response.bounds()) {
            assert_close(*a, *b, 1e-9, "unit shift");
        }
    }
}

#[test]
fn pure_epsilon_curve_is_randomized_response() {
    for point in reference::load().pure_dp_rdp {
        let curve = RdpCurve::pure(point.epsilon);
        let what = format!("α={}, ε={}", point.alpha, point.epsilon);
        assert_close(at(&curve, point.alpha), point.rdp, 1e-9, &what);
    }
}

#[test]
fn bounded_range_curve_is_the_smaller_of_the_pure_and_the_zcdp_bound() {
    // (ε, α, R): randomized response's bound (capped at ε) where it is the
    // smaller, α·ε²/8 where that is (randomized response values from
    // make_reference.randomized_response_rdp, 50 digits).
    for (epsilon, alpha, expected) in [
        (0.1, 2.0, 0.0025),
        (0.1, 1024.0, 0.09937009124137482),
        (1.0, 1.5, 0.1875),
        (1.0, 4.0, 0.5),
        (1.0, 16.0, 0.9791158874987874),
        (4.0, 1.25, 2.5),
        (4.0, 2.0, 3.981856216275668),
        (4.0, 16384.0, 3.9999988921486955),
    ] {
        let curve = RdpCurve::bounded_range(epsilon);
        let what = format!("α={alpha}, ε={epsilon}");
        assert_close(at(&curve, alpha), expected, 1e-9, &what);
    }
}

#[test]
fn the_empty_curve_converts_to_almost_nothing() {
    // The conversion's slack at δ = 1e-6 is ln(α)-sized over α − 1: tiny.
    assert!(RdpCurve::zero().epsilon(1e-6) < 1e-3);
}

proptest! {
    #[test]
    fn every_curve_grows_with_the_order(mu in 1e-3f64..10.0, epsilon in 1e-3f64..20.0, scale in 1.0f64..1e7, shift_ratio in 1e-3f64..10.0) {
        for curve in [
            RdpCurve::gaussian(mu),
            RdpCurve::pure(epsilon),
            RdpCurve::bounded_range(epsilon),
            RdpCurve::discrete_laplace((shift_ratio * scale).round().max(1.0), scale),
        ] {
            prop_assert!(curve.bounds().windows(2).all(|pair| pair[0] <= pair[1] * (1.0 + 1e-12)));
        }
    }

    #[test]
    fn discrete_laplace_is_superadditive_in_the_shift(a in 1u32..200, b in 1u32..200, scale in 1.0f64..100.0) {
        // Splitting an L1 shift across coordinates never costs more than
        // putting it on one: what lets one coordinate bound the vector.
        let whole = RdpCurve::discrete_laplace(f64::from(a + b), scale);
        let mut parts = RdpCurve::discrete_laplace(f64::from(a), scale);
        parts.add(&RdpCurve::discrete_laplace(f64::from(b), scale));
        for (joint, split) in whole.bounds().iter().zip(parts.bounds()) {
            prop_assert!(*joint >= split * (1.0 - 1e-9), "{joint} < {split}");
        }
    }

    #[test]
    fn bounded_range_never_costs_more_than_pure(epsilon in 1e-4f64..50.0) {
        let pure = RdpCurve::pure(epsilon);
        let bounded = RdpCurve::bounded_range(epsilon);
        for (alpha, (b, p)) in ORDERS.iter().zip(bounded.bounds().iter().zip(pure.bounds())) {
            prop_assert!(b <= p);
            prop_assert!(*b <= alpha * epsilon * epsilon / 8.0);
        }
    }

    #[test]
    fn pure_curve_never_exceeds_epsilon_nor_the_gaussian_like_bound(epsilon in 1e-4f64..50.0) {
        let curve = RdpCurve::pure(epsilon);
        for (alpha, bound) in ORDERS.iter().zip(curve.bounds()) {
            prop_assert!(*bound <= epsilon);
            // Bun & Steinke 2016, Proposition 3.3: ε-DP implies ε²/2-zCDP.
            prop_assert!(*bound <= alpha * epsilon * epsilon / 2.0 * (1.0 + 1e-9));
        }
    }
}
