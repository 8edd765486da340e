use proptest::prelude::*;

use super::*;

const ONE: i64 = 1 << 40;

fn norm_squared(units: &[i64]) -> u128 {
    units
        .iter()
        .map(|&u| u128::from(u.unsigned_abs()).pow(2))
        .sum()
}

fn distance(a: &[i64], b: &[i64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&a, &b)| ((a - b) as f64).powi(2))
        .sum::<f64>()
        .sqrt()
}

fn snapped(region: &Region, v: &[f64]) -> Vec<i64> {
    let mut out = vec![0; region.dims()];
    region.snap(v, &mut out);
    out
}

#[test]
fn a_unit_box_puts_its_scale_at_two_to_the_forty() {
    let region = Region::new(1.0, &[0.0; 2], &[1.0; 2], None).unwrap();
    assert_eq!(snapped(&region, &[0.5, 1.0]), vec![ONE / 2, ONE]);
    // Outside the box: clamped, exactly.
    assert_eq!(snapped(&region, &[-3.0, 7.5]), vec![0, ONE]);
    assert_eq!(snapped(&region, &[f64::NAN, f64::INFINITY]), vec![0, ONE]);
    assert_eq!(region.reach_squared(), 2 * (1u128 << 80));
    assert_eq!(region.diameter_squared(), 2 * (1u128 << 80));
    assert_eq!(region.unit(), 2f64.powi(-40));
    let halves = Region::new(2.0, &[-1.0], &[1.0], None).unwrap();
    assert_eq!(snapped(&halves, &[1.0]), vec![ONE / 2]);
    assert_eq!(halves.diameter_squared(), 1u128 << 80);
}

#[test]
fn a_ball_caps_reach_and_diameter_and_shrinks_vectors_onto_it() {
    let region = Region::new(1.0, &[-1.0; 4], &[1.0; 4], Some(1.0)).unwrap();
    assert_eq!(region.reach_squared(), 1u128 << 80);
    assert_eq!(region.diameter_squared(), 4 * (1u128 << 80));
    let out = snapped(&region, &[1.0, 1.0, -1.0, 1.0]);
    assert!(norm_squared(&out) <= 1u128 << 80);
    // Shrunk along its own direction, to (1 − 2⁻³⁰)·r or just below.
    assert_eq!(out[0], out[1]);
    assert_eq!(out[2], -out[0]);
    assert!(out[0] >= ONE / 2 - ONE / (1 << 29));
    assert_eq!(snapped(&region, &[0.0; 4]), vec![0; 4]);
    // Inside the ball nothing moves.
    assert_eq!(
        snapped(&region, &[0.5, 0.0, 0.0, -0.25]),
        vec![ONE / 2, 0, 0, -ONE / 4]
    );
}

#[test]
fn regions_that_cannot_be_held_exactly_are_refused() {
    let refused = |result: Result<Region, DpError>| {
        assert!(
            matches!(
                result,
                Err(DpError::InvalidRegion(_)
                    | DpError::InvalidSensitivity(_)
                    | DpError::NoCoordinates)
            ),
            "{result:?}"
        );
    };
    refused(Region::new(0.0, &[0.0], &[1.0], None));
    refused(Region::new(f64::NAN, &[0.0], &[1.0], None));
    refused(Region::new(1.0, &[], &[], None));
    refused(Region::new(1.0, &[0.0], &[1.0, 1.0], None));
    refused(Region::new(1.0, &[0.5], &[1.0], None));
    refused(Region::new(1.0, &[0.0], &[f64::INFINITY], None));
    refused(Region::new(1.0, &[0.0], &[2049.0], None));
    refused(Region::new(1.0, &[0.0], &[1.0], Some(0.0)));
    refused(Region::new(1.0, &[0.0], &[1.0], Some(f64::NAN)));
}

/// Σ weightᵢ·snap(vᵢ), one row at a time in i128.
fn summed_one_by_one(region: &Region, rows: &[(Vec<f64>, bool)]) -> Vec<i128> {
    let mut sum = vec![0i128; region.dims()];
    for (row, weight) in rows {
        for (sum, units) in sum.iter_mut().zip(snapped(region, row)) {
            *sum += i128::from(units) * i128::from(*weight);
        }
    }
    sum
}

fn summed(region: &Region, rows: &[(Vec<f64>, bool)]) -> Vec<i128> {
    let mut sums = region.sums();
    for (row, weight) in rows {
        sums.add(row, *weight);
    }
    sums.finish()
}

#[test]
fn sums_of_snapped_rows_are_the_snapped_rows_summed_in_any_order() {
    let rows: Vec<(Vec<f64>, bool)> = (0..5000)
        .map(|i| {
            let t = f64::from(i);
            let row = vec![(t * 0.37).sin(), (t * 1.3).cos(), (t * 0.011).sin() * 0.9];
            (row, i % 3 != 0)
        })
        .collect();
    let reversed: Vec<_> = rows.iter().rev().cloned().collect();
    for ball in [Some(0.7), None] {
        let region = Region::new(0.7, &[-1.0; 3], &[1.0; 3], ball).unwrap();
        let sum = summed(&region, &rows);
        assert_eq!(sum, summed_one_by_one(&region, &rows));
        assert_eq!(sum, summed(&region, &reversed));
        assert_ne!(sum, vec![0; 3]);
    }
    let region = Region::new(1.0, &[-1.0; 3], &[1.0; 3], None).unwrap();
    assert_eq!(summed(&region, &[(vec![0.5; 3], false)]), vec![0; 3]);
}

#[test]
fn words_are_carried_before_they_could_overflow() {
    // Every row at the bounds, 2^51 units: a word holds 4,095 of them.
    let region = Region::new(1.0, &[-2048.0; 2], &[2048.0; 2], None).unwrap();
    let rows = vec![(vec![2048.0, -2048.0], true); 10_000];
    let largest = 1i128 << 51;
    assert_eq!(
        summed(&region, &rows),
        vec![10_000 * largest, -10_000 * largest]
    );
}

/// What `round_within` must equal: rounding (halves to even), then the
/// clamp.
fn rounded_then_clamped(x: f64, lo: i64, hi: i64) -> i64 {
    x.round_ties_even().clamp(lo as f64, hi as f64) as i64
}

#[test]
fn rounding_within_bounds_is_rounding_halves_to_even_then_the_clamp() {
    let (lo, hi) = (-(1i64 << 51), 1i64 << 51);
    let halves = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999999999999994];
    let edges = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, -1e300];
    let bounds = [2f64.powi(51), -(2f64.powi(51)), 2f64.powi(51) - 0.5];
    for x in halves.into_iter().chain(edges).chain(bounds) {
        for (lo, hi) in [(lo, hi), (-3, 2), (0, 0), (-1, 0)] {
            assert_eq!(
                round_within(x, lo as f64, hi as f64),
                rounded_then_clamped(x, lo, hi),
                "{x} in [{lo}, {hi}]"
            );
        }
    }
    assert_eq!(round_within(2.5, -3.0, 3.0), 2);
    assert_eq!(round_within(-3.5, -9.0, 3.0), -4);
}

fn vectors(dims: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-2.0f64..2.0, dims)
}

proptest! {
    #[test]
    fn rounding_within_bounds_rounds_any_float(
        bits in any::<u64>(),
        whole in -(1i64 << 52)..(1i64 << 52),
        lo in -(1i64 << 51)..=0,
        hi in 0..=(1i64 << 51),
    ) {
        // Any float at all, and halves (whole/2) of every size on the grid.
        for x in [f64::from_bits(bits), whole as f64 / 2.0] {
            prop_assert_eq!(round_within(x, lo as f64, hi as f64), rounded_then_clamped(x, lo, hi));
        }
    }

    #[test]
    fn sums_of_snapped_rows_are_the_snapped_rows_summed(
        rows in prop::collection::vec((vectors(5), any::<bool>()), 0..50),
        radius in 0.05f64..3.0,
    ) {
        for ball in [None, Some(radius)] {
            let region = Region::new(0.3, &[-1.0; 5], &[0.5; 5], ball).unwrap();
            prop_assert_eq!(summed(&region, &rows), summed_one_by_one(&region, &rows));
        }
    }

    #[test]
    fn every_snapped_vector_lies_in_the_region(
        v in vectors(6),
        w in vectors(6),
        scale in 0.01f64..10.0,
        radius in 0.05f64..3.0,
    ) {
        let (lo, hi) = (vec![-1.0; 6], vec![0.5, 1.0, 1.0, 2.0, 0.25, 1.0]);
        for ball in [None, Some(radius)] {
            let region = Region::new(scale, &lo, &hi, ball).unwrap();
            let (a, b) = (snapped(&region, &v), snapped(&region, &w));
            for (&units, (&lo, &hi)) in a.iter().zip(region.lo.iter().zip(&region.hi)) {
                prop_assert!(lo <= units as f64 && units as f64 <= hi);
            }
            if let Some(ball) = region.ball {
                prop_assert!(norm_squared(&a) <= u128::from(ball.radius.unsigned_abs()).pow(2));
            }
            prop_assert!(norm_squared(&a) <= region.reach_squared());
            let gap: u128 = a.iter().zip(&b).map(|(&a, &b)| u128::from(a.abs_diff(b)).pow(2)).sum();
            prop_assert!(gap <= region.diameter_squared());
        }
    }

    #[test]
    fn vectors_close_in_value_land_within_the_line_bound(
        v in vectors(8),
        along in vectors(8),
        step in 0.0f64..1.0,
        clip in 0.1f64..2.0,
    ) {
        // A clipped gradient r·u at two residuals: how a label moves it.
        let clipped = |r: f64| -> Vec<f64> {
            let g: Vec<f64> = v.iter().zip(&along).map(|(&v, &a)| r * v + a * 0.1).collect();
            let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
            let factor = (clip / norm).min(1.0);
            g.into_iter().map(|x| x * factor).collect()
        };
        let region = Region::new(clip, &[-2.5; 8], &[2.5; 8], Some(clip)).unwrap();
        let (g, h) = (clipped(0.3), clipped(0.3 + step));
        let exact = g.iter().zip(&h).map(|(a, b)| (a - b).powi(2)).sum::<f64>().sqrt();
        let moved = distance(&snapped(&region, &g), &snapped(&region, &h));
        prop_assert!(moved <= region.line_units(exact), "{moved} > {}", region.line_units(exact));
        let open = Region::new(1.0, &[-2.5; 8], &[2.5; 8], None).unwrap();
        let moved = distance(&snapped(&open, &g), &snapped(&open, &h));
        prop_assert!(moved <= open.line_units(exact));
    }
}
