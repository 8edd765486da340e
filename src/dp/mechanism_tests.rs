use super::*;
use crate::dp::gaussian_delta;
use crate::dp::statistics::{FALSE_FAILURE_RATE, kolmogorov_smirnov_p_value};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use statrs::distribution::{ContinuousCDF, Gamma, Laplace, Normal};

fn epsilon(value: f64) -> Epsilon {
    Epsilon::new(value).unwrap()
}

fn delta(value: f64) -> Delta {
    Delta::new(value).unwrap()
}

fn all_three(dims: usize) -> [Mechanism; 3] {
    [
        Mechanism::gaussian(epsilon(1.0), delta(1e-6), 1.0, dims, 4.0).unwrap(),
        Mechanism::laplace(epsilon(1.0), 1.0, dims, 4.0).unwrap(),
        Mechanism::norm_gamma(epsilon(1.0), 1.0, dims, 4.0).unwrap(),
    ]
}

#[test]
fn calibration_is_deterministic_so_a_dry_run_prices_the_release_exactly() {
    for dims in [1, 33, 1000] {
        assert_eq!(all_three(dims), all_three(dims));
    }
}

#[test]
fn gaussian_sigma_meets_delta_at_the_rounded_sensitivity_and_stays_tight() {
    for (e, d, sensitivity, dims) in [
        (1.0, 1e-6, 1.0, 1),
        (0.1, 1e-9, 1e-6, 33),
        (8.0, 1e-5, 3.0, 10_000),
    ] {
        let mechanism =
            Mechanism::gaussian(epsilon(e), delta(d), sensitivity, dims, sensitivity).unwrap();
        let PrivacyLoss::Gaussian {
            sensitivity: rounded,
            sigma,
        } = *mechanism.loss()
        else {
            panic!("a Gaussian mechanism records a Gaussian loss");
        };
        let grid = mechanism.grid();
        assert!(rounded >= sensitivity + grid * (dims as f64).sqrt());
        assert!(
            rounded <= sensitivity * (1.0 + 2e-6),
            "rounding costs {rounded}/{sensitivity}"
        );
        assert!(gaussian_delta(rounded / sigma, e) <= d);
        let ideal = analytic_sigma(e, d, sensitivity).unwrap();
        assert!(sigma / ideal - 1.0 < 3e-6, "σ = {sigma}, ideal {ideal}");
        assert!(sigma / grid >= f64::from(1u32 << 23));
        assert_eq!(mechanism.noise_std(), sigma);
    }
}

#[test]
fn pure_mechanisms_spend_at_most_their_epsilon_at_the_rounded_sensitivity() {
    for dims in [1, 16, 1_000_000] {
        let laplace = Mechanism::laplace(epsilon(0.5), 2.0, dims, 2.0).unwrap();
        let PrivacyLoss::Laplace {
            sensitivity,
            scale,
            grid,
        } = *laplace.loss()
        else {
            panic!("Laplace loss");
        };
        assert!(sensitivity >= 2.0 + grid * dims as f64);
        assert!(sensitivity <= 2.0 * (1.0 + 2e-6));
        assert!(sensitivity / scale <= 0.5);
        assert_eq!(scale, laplace.noise_scale());

        let norm_gamma = Mechanism::norm_gamma(epsilon(0.5), 2.0, dims, 2.0).unwrap();
        assert_eq!(
            *norm_gamma.loss(),
            PrivacyLoss::PureEpsilon { epsilon: 0.5 }
        );
        let rounded = 2.0 + norm_gamma.grid() * (dims as f64).sqrt();
        assert!(rounded / norm_gamma.noise_scale() <= 0.5);
        assert!(norm_gamma.noise_scale() <= 4.0 * (1.0 + 2e-6));
    }
}

#[test]
fn releases_lie_on_the_lattice_and_sub_lattice_differences_leave_no_trace() {
    let values = [0.123456789, -3.5, 1e-3, 0.0];
    for mechanism in all_three(values.len()) {
        let grid = mechanism.grid();
        let release = |values: &[f64]| {
            mechanism
                .release(values, &mut ChaCha8Rng::seed_from_u64(99))
                .unwrap()
        };
        let base = release(&values);
        for value in &base {
            assert_eq!((value / grid).fract(), 0.0, "{value} is off the lattice");
        }
        // Inputs that round to the same lattice point give bit-identical
        // releases: nothing below the lattice reaches the output.
        let nudged: Vec<f64> = values.iter().map(|v| v + grid / 4.0).collect();
        assert_eq!(release(&nudged), base);
        // One lattice step in the input moves the output by exactly one step.
        let stepped: Vec<f64> = values.iter().map(|v| v + grid).collect();
        let moved: Vec<f64> = release(&stepped)
            .iter()
            .zip(&base)
            .map(|(after, before)| (after - before) / grid)
            .collect();
        assert_eq!(moved, vec![1.0; values.len()]);
    }
}

/// KS p-values of the released noise against `cdf` at the calibrated scale
/// and at 0.7× and 1.3× that scale (deliberately wrong samplers).
fn noise_fits(noise: &[f64], cdf: impl Fn(f64) -> f64) -> [f64; 3] {
    [1.0, 1.0 / 0.7, 1.0 / 1.3].map(|factor| {
        let mut scaled: Vec<f64> = noise.iter().map(|x| x * factor).collect();
        kolmogorov_smirnov_p_value(&mut scaled, &cdf)
    })
}

fn released_noise(mechanism: &Mechanism, releases: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let zeros = vec![0.0; mechanism.dims()];
    (0..releases)
        .map(|_| mechanism.release(&zeros, &mut rng).unwrap())
        .collect()
}

#[test]
fn gaussian_and_laplace_releases_have_the_calibrated_spread() {
    let [gaussian, laplace, _] = all_three(4);
    let normal = Normal::new(0.0, gaussian.noise_scale()).unwrap();
    let laplace_law = Laplace::new(0.0, laplace.noise_scale()).unwrap();
    for (mechanism, cdf) in [
        (&gaussian, &(|x| normal.cdf(x)) as &dyn Fn(f64) -> f64),
        (&laplace, &|x| laplace_law.cdf(x)),
    ] {
        let noise: Vec<f64> = released_noise(mechanism, 25_000, 5).concat();
        let [right, narrow, wide] = noise_fits(&noise, cdf);
        assert!(right > FALSE_FAILURE_RATE, "{mechanism:?}: p = {right:e}");
        assert!(
            narrow < FALSE_FAILURE_RATE && wide < FALSE_FAILURE_RATE,
            "{narrow:e} {wide:e}"
        );
        // The sample variance against the reported per-coordinate std.
        let variance = noise.iter().map(|x| x * x).sum::<f64>() / noise.len() as f64;
        let ratio = variance / mechanism.noise_std().powi(2);
        assert!((ratio - 1.0).abs() < 0.03, "variance ratio {ratio}");
    }
}

#[test]
fn norm_gamma_releases_have_a_gamma_norm_and_the_reported_spread() {
    let [_, _, norm_gamma] = all_three(8);
    let theta = norm_gamma.noise_scale();
    let gamma = Gamma::new(8.0, 1.0 / theta).unwrap();
    let releases = released_noise(&norm_gamma, 10_000, 6);
    let norms: Vec<f64> = releases
        .iter()
        .map(|noise| noise.iter().map(|x| x * x).sum::<f64>().sqrt())
        .collect();
    let [right, narrow, wide] = noise_fits(&norms, |x| gamma.cdf(x));
    assert!(right > FALSE_FAILURE_RATE, "p = {right:e}");
    assert!(
        narrow < FALSE_FAILURE_RATE && wide < FALSE_FAILURE_RATE,
        "{narrow:e} {wide:e}"
    );
    let coordinates = releases.concat();
    let variance = coordinates.iter().map(|x| x * x).sum::<f64>() / coordinates.len() as f64;
    let ratio = variance / norm_gamma.noise_std().powi(2);
    assert!((ratio - 1.0).abs() < 0.05, "variance ratio {ratio}");
}

#[test]
fn bad_inputs_are_refused_with_reasons() {
    let [gaussian, ..] = all_three(2);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    assert_eq!(
        gaussian.release(&[1.0], &mut rng),
        Err(DpError::DimensionMismatch {
            expected: 2,
            actual: 1
        })
    );
    assert_eq!(
        gaussian.release(&[1.0, f64::NAN], &mut rng),
        Err(DpError::NonFiniteValue(1))
    );
    assert_eq!(
        gaussian.release(&[1e300, 0.0], &mut rng),
        Err(DpError::ValueOutOfRange(0))
    );
    assert_eq!(
        Mechanism::gaussian(epsilon(1.0), delta(1e-6), 1.0, 0, 1.0),
        Err(DpError::NoCoordinates)
    );
    assert!(matches!(
        Mechanism::gaussian(epsilon(1.0), Delta::ZERO, 1.0, 3, 1.0),
        Err(DpError::InvalidDelta { .. })
    ));
    for sensitivity in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(Mechanism::laplace(epsilon(1.0), sensitivity, 3, 1.0).is_err());
        assert!(Mechanism::norm_gamma(epsilon(1.0), sensitivity, 3, 1.0).is_err());
        assert!(Mechanism::gaussian(epsilon(1.0), delta(1e-6), sensitivity, 3, 1.0).is_err());
    }
}

#[test]
fn every_value_within_the_range_snaps_and_a_range_too_wide_is_refused_up_front() {
    // Sums up to 10¹² at ε = 0.01 and sensitivity 1: the lattice the
    // inflation alone would choose (2^−22) would index them beyond 2^61,
    // so it is made one step coarser, and still resolves the noise.
    let range = 1e12;
    let mechanism = Mechanism::laplace(epsilon(0.01), 1.0, 2, range).unwrap();
    assert_eq!(mechanism.grid(), 2f64.powi(-21));
    assert!(range / mechanism.grid() < 2f64.powi(61));
    assert!(mechanism.noise_scale() / mechanism.grid() >= 2f64.powi(23));
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    assert!(mechanism.release(&[range, -range], &mut rng).is_ok());
    // The coarser lattice is paid for in the accounted sensitivity.
    let PrivacyLoss::Laplace { sensitivity, .. } = *mechanism.loss() else {
        panic!("Laplace loss");
    };
    assert!(sensitivity >= 1.0 + 2.0 * mechanism.grid());
    // 2^61 lattice points per value and 2^23 per noise scale cannot both
    // hold once the range exceeds the noise by 2^38.
    for range in [2f64.powi(45), f64::INFINITY, f64::NAN, -1.0] {
        assert!(
            matches!(
                Mechanism::gaussian(epsilon(1.0), delta(1e-6), 1.0, 1, range),
                Err(DpError::RangeTooWide { .. })
            ),
            "{range}"
        );
    }
    assert!(Mechanism::norm_gamma(epsilon(1.0), 1.0, 1, 2f64.powi(36)).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_gaussian_calibration_meets_its_guarantee(
        e in 1e-3f64..20.0, d in 1e-12f64..1e-2, sensitivity in 1e-9f64..1e3, dims in 1usize..100_000,
    ) {
        let mechanism = Mechanism::gaussian(epsilon(e), delta(d), sensitivity, dims, sensitivity).unwrap();
        let (e, d) = (epsilon(e).value(), delta(d).value());
        let PrivacyLoss::Gaussian { sensitivity: rounded, sigma } = *mechanism.loss() else {
            panic!("Gaussian loss");
        };
        prop_assert!(rounded >= sensitivity + mechanism.grid() * (dims as f64).sqrt());
        prop_assert!(gaussian_delta(rounded / sigma, e) <= d);
    }

    #[test]
    fn every_pure_calibration_meets_its_epsilon(e in 1e-3f64..20.0, sensitivity in 1e-9f64..1e3, dims in 1usize..100_000) {
        let e_value = epsilon(e).value();
        let laplace = Mechanism::laplace(epsilon(e), sensitivity, dims, sensitivity).unwrap();
        prop_assert!((sensitivity + laplace.grid() * dims as f64) / laplace.noise_scale() <= e_value);
        let norm_gamma = Mechanism::norm_gamma(epsilon(e), sensitivity, dims, sensitivity).unwrap();
        let rounded = sensitivity + norm_gamma.grid() * (dims as f64).sqrt();
        prop_assert!(rounded / norm_gamma.noise_scale() <= e_value);
    }
}

/// The steps, sensitivity Δ′ and σ a T-step Gaussian mechanism records.
fn composed_steps(mechanism: &Mechanism) -> (u32, f64, f64) {
    let PrivacyLoss::Composition { count, ref each } = *mechanism.loss() else {
        panic!("T steps record a composition");
    };
    let PrivacyLoss::Gaussian { sensitivity, sigma } = **each else {
        panic!("of Gaussian steps");
    };
    (count, sensitivity, sigma)
}

#[test]
fn gaussian_steps_compose_to_their_epsilon_with_each_steps_rounding_counted() {
    use crate::dp::{Accountant, Budget, Charge, Composition};
    for (e, d, sensitivity, dims, steps) in [
        (1.0, 1e-6, 0.01, 33, 100u32),
        (0.1, 1e-9, 2e-4, 5, 10_000),
        (8.0, 1e-5, 1.0, 1, 2),
    ] {
        let mechanism =
            Mechanism::gaussian_steps(epsilon(e), delta(d), sensitivity, dims, steps, 1.0).unwrap();
        let (count, rounded, sigma) = composed_steps(&mechanism);
        assert_eq!(count, steps);
        let grid = mechanism.grid();
        let root_dims = (dims as f64).sqrt();
        assert!(rounded >= sensitivity + grid * root_dims);
        assert!(rounded <= (sensitivity + grid * root_dims) * (1.0 + 1e-12));
        // The lattice is as fine as 2^−20 of Δ per axis, or as the
        // sampler's 2^30 points per σ allow (σ/Δ = 6,000 in the second case).
        assert!(grid <= (sensitivity / root_dims / 2f64.powi(20)).max(sigma / 2f64.powi(29)));
        assert!(sigma / grid >= f64::from(1u32 << 23));
        assert_eq!(mechanism.noise_std(), sigma);
        // T steps at σ are one Gaussian of μ = √T·Δ′/σ, which meets (ε, δ).
        let mu = f64::from(steps).sqrt() * rounded / sigma;
        assert!(gaussian_delta(mu, e) <= d, "μ = {mu}");
        // σ exceeds √T·σ_analytic(Δ′) by no more than the rounding up to
        // whole lattice units (2^−23 of σ).
        let ideal = f64::from(steps).sqrt() * analytic_sigma(e, d, rounded).unwrap();
        assert!(sigma / ideal - 1.0 < 2e-7, "σ = {sigma}, ideal {ideal}");
        // On a fresh ledger whose δ is the release's, the tight accountant
        // reports the release's ε, less what σ's rounding up saves.
        let charge = Charge {
            epsilon: epsilon(e),
            delta: delta(d),
            loss: mechanism.loss().clone(),
        };
        let budget = Budget {
            epsilon: epsilon(e),
            delta: Delta::positive(d).unwrap(),
        };
        let spent = Composition::of([&charge]).spent(Accountant::Rdp, &budget);
        assert!(spent.epsilon <= epsilon(e), "{spent:?}");
        assert!(spent.epsilon.value() >= e * (1.0 - 1e-5), "{spent:?}");
    }
}

#[test]
fn one_gaussian_step_is_the_gaussian_mechanism_and_none_is_refused() {
    assert_eq!(
        Mechanism::gaussian_steps(epsilon(1.0), delta(1e-6), 1.0, 3, 1, 1.0),
        Mechanism::gaussian(epsilon(1.0), delta(1e-6), 1.0, 3, 1.0)
    );
    assert_eq!(
        Mechanism::gaussian_steps(epsilon(1.0), delta(1e-6), 1.0, 3, 0, 1.0),
        Err(DpError::NoSteps)
    );
}

#[test]
fn pricing_t_steps_as_one_gaussian_on_root_t_delta_would_undercount_the_rounding() {
    // The same T steps priced as one release of sensitivity √T·Δ add the
    // lattice's γ√d once; the steps round T times, so their true μ is
    // larger than that price says whenever the lattice is coarse enough
    // to matter. The per-step price covers it.
    let (e, d, dims, steps) = (1.0, 1e-6, 1_000_000, 10_000u32);
    let sensitivity = 1e-3;
    let per_step =
        Mechanism::gaussian_steps(epsilon(e), delta(d), sensitivity, dims, steps, 1.0).unwrap();
    let once = Mechanism::gaussian(
        epsilon(e),
        delta(d),
        f64::from(steps).sqrt() * sensitivity,
        dims,
        1.0,
    )
    .unwrap();
    let root = f64::from(steps).sqrt();
    // What T steps of `once`'s σ, each rounding on its lattice, really cost.
    let true_mu = root * (sensitivity + once.grid() * (dims as f64).sqrt()) / once.noise_std();
    assert!(gaussian_delta(true_mu, e) > d, "μ = {true_mu}");
    let (_, rounded, sigma) = composed_steps(&per_step);
    assert!(gaussian_delta(root * rounded / sigma, e) <= d);
}

/// A lattice of spacing 2^exponent, for testing its snaps.
fn lattice(exponent: i32) -> Lattice {
    Lattice { exponent }
}

#[test]
fn exact_values_snap_as_their_floats_do_where_a_float_holds_them() {
    for exponent in [-50, -40, -30, -3, 0, 5] {
        let grid = lattice(exponent);
        let units: Vec<i128> = vec![0, 1, -1, 3, -3, 1 << 20, -(1 << 20), 123_456_789, -7];
        let values = Fixed {
            units: units.clone(),
            exponent: -40,
        };
        let floats: Vec<f64> = units.iter().map(|&u| u as f64 * 2f64.powi(-40)).collect();
        let exact = grid.snap_fixed(&values).unwrap();
        let rounded = grid.snap(&floats).unwrap();
        for ((&e, &r), &f) in exact.iter().zip(&rounded).zip(&floats) {
            // Both are a nearest point; they differ only on exact ties,
            // which the float path rounds away from zero and the exact one
            // up.
            let tie = (f / grid.spacing()).fract().abs() == 0.5;
            assert!(
                e == r || (tie && e == r + 1),
                "{exponent}: {f} → {e} vs {r}"
            );
        }
    }
}

#[test]
fn exact_values_too_large_for_a_float_snap_to_their_nearest_point() {
    // 2^100 + 3.5·2^40 units of 2^−40 is 2^60 + 3.5: on a lattice of
    // spacing 2^20 that is 2^40 + 3.5·2^−20 steps, nearest to 2^40 (a
    // float of 2^60 + 3.5 would already have lost the 3.5).
    let grid = lattice(20);
    let units = (1i128 << 100) + (3 << 40) + (1 << 39);
    let snapped = grid
        .snap_fixed(&Fixed {
            units: vec![units, -units, units + (1 << 59)],
            exponent: -40,
        })
        .unwrap();
    // −units is −2^40 − 3·2^−20 − 2^−21 steps: nearest is −2^40.
    assert_eq!(snapped, vec![1 << 40, -(1 << 40), (1 << 40) + 1]);
    // A sum whose float loses its last unit still snaps by its units:
    // the float of 2^60 + 1 is 2^60.
    let fine = lattice(-40);
    let odd = (1i128 << 60) + 1;
    assert_eq!(
        fine.snap_fixed(&Fixed {
            units: vec![odd],
            exponent: -40
        }),
        Ok(vec![odd])
    );
    assert_eq!(fine.snap(&[odd as f64 * 2f64.powi(-40)]), Ok(vec![1 << 60]));
}

#[test]
fn exact_values_beyond_the_lattice_are_refused() {
    let values = |units: i128, exponent| Fixed {
        units: vec![0, units],
        exponent,
    };
    let grid = lattice(0);
    assert_eq!(
        grid.snap_fixed(&values(1 << 62, 0)),
        Err(DpError::ValueOutOfRange(1))
    );
    assert_eq!(
        grid.snap_fixed(&values((1 << 62) - 1, 0)).unwrap()[1],
        (1 << 62) - 1
    );
    assert_eq!(
        grid.snap_fixed(&values(1, 62)),
        Err(DpError::ValueOutOfRange(1))
    );
    assert_eq!(
        grid.snap_fixed(&values(i128::MIN, -200)),
        Err(DpError::ValueOutOfRange(1))
    );
    // Far below the spacing: every value is nearest to 0.
    assert_eq!(
        grid.snap_fixed(&values((1 << 125) - 1, -200)),
        Ok(vec![0, 0])
    );
}

proptest! {
    /// Two exact values at most Δ apart snap to points at most Δ/γ + 1
    /// apart: the rounding the lattice's inflated sensitivity pays for.
    #[test]
    fn neighbouring_exact_values_snap_within_the_inflated_sensitivity(
        base in -(1i128 << 100)..(1i128 << 100),
        gap in 0i128..(1i128 << 90),
        exponent in -40i32..=60,
    ) {
        // Spacings of 2^−40 (the grid's own unit) to 2^60, each value
        // within its lattice's indices.
        let base = base >> (-exponent).max(0);
        let gap = gap >> (-exponent).max(0);
        let grid = lattice(exponent);
        let points = grid
            .snap_fixed(&Fixed { units: vec![base, base + gap], exponent: -40 })
            .unwrap();
        let steps = gap as f64 * 2f64.powi(-40 - exponent);
        prop_assert!(points[0] <= points[1]);
        prop_assert!(((points[1] - points[0]) as f64) <= steps + 1.0);
    }
}

#[test]
fn a_release_of_exact_values_is_noised_like_one_of_floats() {
    let mechanism = Mechanism::gaussian(epsilon(1.0), delta(1e-6), 1.0, 2, 1e6).unwrap();
    let values = Fixed {
        units: vec![3 << 40, -(5 << 40)],
        exponent: -40,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut twin = ChaCha8Rng::seed_from_u64(5);
    assert_eq!(
        mechanism.release_fixed(&values, &mut rng).unwrap(),
        mechanism.release(&[3.0, -5.0], &mut twin).unwrap()
    );
    assert_eq!(
        mechanism.release_fixed(
            &Fixed {
                units: vec![1],
                exponent: 0
            },
            &mut rng
        ),
        Err(DpError::DimensionMismatch {
            expected: 2,
            actual: 1
        })
    );
}

#[test]
fn a_gaussian_of_given_multiplier_costs_at_most_one_of_mu_one_over_z() {
    for (z, sensitivity, dims, range) in [
        (5.0, 0.01, 17, 40.0),
        (48.0, 3.0, 1, 6.9e10),
        (0.7, 2e-9, 100, 1e-3),
    ] {
        let mechanism = Mechanism::gaussian_multiplier(z, sensitivity, dims, range).unwrap();
        let PrivacyLoss::Gaussian {
            sensitivity: rounded,
            sigma,
        } = mechanism.loss().clone()
        else {
            panic!("{:?}", mechanism.loss());
        };
        assert!(rounded >= sensitivity + mechanism.grid() * (dims as f64).sqrt());
        assert!(rounded <= sensitivity * (1.0 + 1e-5), "{rounded}");
        assert!(sigma >= z * rounded, "σ {sigma} < z·Δ′");
        assert!(sigma <= z * rounded * (1.0 + 1e-6), "σ {sigma}");
        assert_eq!(mechanism.noise_std(), sigma);
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(
            Mechanism::gaussian_multiplier(bad, 1.0, 3, 1.0).is_err(),
            "{bad}"
        );
    }
    assert!(Mechanism::gaussian_multiplier(3.0, 0.0, 3, 1.0).is_err());
    assert!(matches!(
        Mechanism::gaussian_multiplier(3.0, 1e-12, 3, 1e30),
        Err(DpError::RangeTooWide { .. })
    ));
}
