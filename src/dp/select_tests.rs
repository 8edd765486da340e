use super::*;
use crate::dp::reference::assert_close;
use crate::dp::statistics::{FALSE_FAILURE_RATE, chi_square_p_value};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

fn epsilon(value: f64) -> Epsilon {
    Epsilon::new(value).unwrap()
}

fn laplace_scale(draw: Option<Draw>) -> u64 {
    match draw {
        Some(Draw::NoisyMin(scale)) => scale,
        other => panic!("not a Laplace draw: {other:?}"),
    }
}

fn rate(selector: &Selector) -> Rate {
    match selector.draw {
        Draw::Exponential(rate) => rate,
        other => panic!("not an exponential draw: {other:?}"),
    }
}

/// How often each of `len` indices came out of 200,000 selections. The χ²
/// tests below fail a correct selector with probability
/// `FALSE_FAILURE_RATE` (10⁻⁶) over seeds; their negative controls, the
/// same test on the bounds that are only valid for monotone scores, must
/// fail it.
fn counts(len: usize, mut select: impl FnMut() -> usize) -> Vec<u64> {
    let mut counts = vec![0; len];
    for _ in 0..200_000 {
        counts[select()] += 1;
    }
    counts
}

/// P[Z ≥ x] for the discrete Laplace with r = e^{−1/t}: Σ_{z ≥ x} of the
/// pmf (1 − r)/(1 + r)·r^|z| is r^x/(1 + r) for x ≥ 1, and the rest by
/// symmetry.
fn at_least(x: i128, r: f64) -> f64 {
    if x >= 1 {
        r.powf(x as f64) / (1.0 + r)
    } else {
        1.0 - r.powf((1 - x) as f64) / (1.0 + r)
    }
}

/// The exact winner probabilities of report-noisy-min with discrete
/// Laplace noise of `scale`, the lowest index winning ties: i wins with
/// noise z iff every earlier rival's noisy point is above n_i + z and every
/// later one's at least n_i + z. The sum over z stops where the winner's
/// noise has less than 10⁻¹⁷ of its mass left beyond the spread of points.
fn noisy_min_probabilities(points: &[i128], scale: u64) -> Vec<f64> {
    let t = scale as f64;
    let r = (-1.0 / t).exp();
    let pmf = |z: i128| -(-1.0 / t).exp_m1() / (1.0 + r) * r.powf(z.unsigned_abs() as f64);
    let spread = points.iter().max().unwrap() - points.iter().min().unwrap();
    let reach = (40.0 * t).ceil() as i128 + spread;
    (0..points.len())
        .map(|winner| {
            (-reach..=reach)
                .map(|z| {
                    let value = points[winner] + z;
                    let rivals: f64 = points
                        .iter()
                        .enumerate()
                        .filter(|&(rival, _)| rival != winner)
                        .map(|(rival, &point)| {
                            at_least(value - point + i128::from(rival < winner), r)
                        })
                        .product();
                    pmf(z) * rivals
                })
                .sum()
        })
        .collect()
}

/// P(i) ∝ exp(−λ·n_i), in floats (the weights are relative to the minimum).
fn exponential_probabilities(points: &[i128], rate: Rate) -> Vec<f64> {
    let lambda = rate.numerator as f64 / rate.denominator as f64;
    let low = *points.iter().min().unwrap();
    let weights: Vec<f64> = points
        .iter()
        .map(|&point| (-lambda * (point - low) as f64).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|weight| weight / total).collect()
}

/// The largest ln P(i)/P′(i) over i, either way round.
fn worst_log_ratio(p: &[f64], q: &[f64]) -> f64 {
    p.iter()
        .zip(q)
        .map(|(a, b)| (a / b).ln().abs())
        .fold(0.0, f64::max)
}

/// Neighbouring points: `target` Δ′ worse (higher), every rival Δ′ better,
/// the worst case of the winner-threshold argument; or random moves of at
/// most Δ′.
fn neighbour(
    points: &[i128],
    shift: i128,
    target: Option<usize>,
    rng: &mut ChaCha8Rng,
) -> Vec<i128> {
    points
        .iter()
        .enumerate()
        .map(|(index, &point)| match target {
            Some(target) if index == target => point + shift,
            Some(_) => point - shift,
            None => point + rng.random_range(-shift..=shift),
        })
        .collect()
}

#[test]
fn noisy_min_picks_with_the_exact_probabilities_and_the_monotone_scale_is_rejected() {
    // Δ′ = 2 lattice units at ε₀ = 1: t = ⌈2Δ′/ε₀⌉ = 4, against the
    // monotone bound's ⌈Δ′/ε₀⌉ = 2. Points 2 and 4 tie, and the tie-break
    // shows: index 2 wins more often than index 4.
    let points = [0, 3, 1, 5, 1, 4];
    let scale = laplace_scale(calibrated(SelectionRule::Laplace, 2, epsilon(1.0)));
    assert_eq!(scale, 4);
    let expected = noisy_min_probabilities(&points, scale);
    assert!((expected.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    assert!(expected[2] > expected[4] * 1.05, "{expected:?}");

    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let observed = counts(points.len(), || noisy_min(&points, scale, &mut rng));
    let p = chi_square_p_value(&observed, &expected);
    assert!(
        p > FALSE_FAILURE_RATE,
        "p = {p:e}: {observed:?} against {expected:?}"
    );

    let mut rng = ChaCha8Rng::seed_from_u64(32);
    let monotone = counts(points.len(), || noisy_min(&points, 2, &mut rng));
    let p = chi_square_p_value(&monotone, &expected);
    assert!(
        p < FALSE_FAILURE_RATE,
        "the monotone scale passed: p = {p:e}"
    );
}

#[test]
fn the_exponential_mechanism_picks_with_the_exact_probabilities_and_double_the_rate_is_rejected() {
    // τ ≈ 2Δ/ε₀ = 2: every index keeps a fair share.
    let selector = Selector::new(SelectionRule::Exponential, epsilon(1.0), 1.0, 8.0).unwrap();
    let scores = [0.0, 1.5, 0.7, 3.1, -0.4, 2.2];
    let points = selector.lattice.snap(&scores).unwrap();
    let rate = rate(&selector);
    let expected = exponential_probabilities(&points, rate);

    let mut rng = ChaCha8Rng::seed_from_u64(33);
    let observed = counts(scores.len(), || selector.select(&scores, &mut rng).unwrap());
    let p = chi_square_p_value(&observed, &expected);
    assert!(
        p > FALSE_FAILURE_RATE,
        "p = {p:e}: {observed:?} against {expected:?}"
    );

    // exp(ε·u/Δ), the monotone reading, is twice the rate.
    let doubled = Rate {
        numerator: 2 * rate.numerator,
        ..rate
    };
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    let monotone = counts(scores.len(), || exponential(&points, doubled, &mut rng).0);
    let p = chi_square_p_value(&monotone, &expected);
    assert!(p < FALSE_FAILURE_RATE, "twice the rate passed: p = {p:e}");
}

#[test]
fn scales_are_two_delta_prime_over_epsilon_on_the_chosen_lattice() {
    // Δ = 1 on scores up to 100: γ = 2^−20 (rounding adds 2^−20·Δ), so
    // Δ′ = 2^20 + 1 units.
    let laplace = Selector::new(SelectionRule::Laplace, epsilon(0.0325), 1.0, 100.0).unwrap();
    assert_eq!(laplace.grid(), 2f64.powi(-20));
    assert_eq!(laplace.accounted_sensitivity(), 1.0 + 2f64.powi(-20));
    // t = ⌈2·(2^20 + 1)/0.0325⌉ = ⌈64527815.38⌉.
    assert_eq!(laplace.scale(), 64_527_816.0 * 2f64.powi(-20));
    assert_close(laplace.scale(), 61.538_52, 1e-6, "b at ε₀ = 0.0325");
    assert_eq!(laplace.loss(), PrivacyLoss::PureEpsilon { epsilon: 0.0325 });

    let exponential =
        Selector::new(SelectionRule::Exponential, epsilon(0.0624), 1.0, 100.0).unwrap();
    assert_eq!(exponential.grid(), 2f64.powi(-20));
    // τ = 2·(2^20 + 1)/0.0624 · 2^−20 = 655360625/20447232, exactly.
    assert_close(
        exponential.scale(),
        655_360_625.0 / 20_447_232.0,
        1e-15,
        "τ",
    );
    assert_close(exponential.scale(), 32.051_31, 1e-6, "τ at ε₀ = 0.0624");
    assert_eq!(
        exponential.loss(),
        PrivacyLoss::BoundedRange { epsilon: 0.0624 }
    );

    // Frank-Wolfe at r = 1, N = 400: Δ = 2r(r + 1)/N = 0.01, scores within
    // r(r + 1) = 2. γ = 2^−27 ≤ 2^−20·Δ < 2^−26, Δ′ = ⌊0.01·2^27⌋ + 1.
    let small = Selector::new(SelectionRule::Laplace, epsilon(0.0325), 0.01, 2.0).unwrap();
    assert_eq!(small.grid(), 2f64.powi(-27));
    assert_eq!(small.accounted_sensitivity(), 1_342_178.0 * 2f64.powi(-27));
    assert_eq!(small.scale(), 82_595_570.0 * 2f64.powi(-27));
    assert!(small.accounted_sensitivity() <= 0.01 * (1.0 + 2f64.powi(-20)));
}

#[test]
fn neighbouring_selections_stay_within_e_to_the_epsilon() {
    let mut rng = ChaCha8Rng::seed_from_u64(35);
    let bound = |epsilon: f64| epsilon + 1e-9;

    // Laplace, in lattice units (the scale on a real lattice is 2^23 units
    // or more, too many to sum over): Δ′ of 1 to 4 units, points within a
    // few scales of each other so every probability is summed to 10⁻¹².
    let mut monotone_worst: f64 = 0.0;
    for pair in 0..240 {
        let shift = rng.random_range(1..=4u128);
        let each = [0.25, 0.5, 1.0, 2.0][pair % 4];
        let scale = laplace_scale(calibrated(SelectionRule::Laplace, shift, epsilon(each)));
        let len = rng.random_range(2..=6usize);
        let spread = 3 * i128::from(scale);
        let points: Vec<i128> = (0..len).map(|_| rng.random_range(0..=spread)).collect();
        let target = (pair % 2 == 0).then(|| rng.random_range(0..len));
        let moved = neighbour(&points, shift as i128, target, &mut rng);
        let ours = worst_log_ratio(
            &noisy_min_probabilities(&points, scale),
            &noisy_min_probabilities(&moved, scale),
        );
        assert!(
            ours <= bound(each),
            "{points:?} → {moved:?}, t = {scale}: {ours}"
        );
        if target.is_some() {
            let monotone = (shift as f64 / each).ceil() as u64;
            let loss = worst_log_ratio(
                &noisy_min_probabilities(&points, monotone),
                &noisy_min_probabilities(&moved, monotone),
            );
            monotone_worst = monotone_worst.max(loss / each);
        }
    }
    assert!(
        monotone_worst > 1.2,
        "the monotone scale kept every pair within e^ε₀ (worst {monotone_worst}·ε₀)"
    );

    // Exponential, on the selector's own lattice and rate: scores move by
    // at most Δ as floats, their points by at most Δ′ (checked), and the
    // closed form bounds the rest.
    let mut doubled_worst: f64 = 0.0;
    for pair in 0..300 {
        let sensitivity = 10f64.powf(rng.random_range(-4.0..2.0));
        let each = rng.random_range(0.01..3.0);
        let range = sensitivity * rng.random_range(1.0..200.0);
        let selector = Selector::new(
            SelectionRule::Exponential,
            epsilon(each),
            sensitivity,
            range,
        )
        .unwrap();
        let each = selector.epsilon.value();
        let len = rng.random_range(2..=8usize);
        let scores: Vec<f64> = (0..len).map(|_| rng.random_range(-range..=range)).collect();
        let target = (pair % 2 == 0).then(|| rng.random_range(0..len));
        let moved: Vec<f64> = scores
            .iter()
            .enumerate()
            .map(|(index, &score)| {
                let step = match target {
                    Some(target) if index == target => sensitivity,
                    Some(_) => -sensitivity,
                    None => rng.random_range(-sensitivity..=sensitivity),
                };
                (score + step).clamp(-range, range)
            })
            .collect();
        let points = selector.lattice.snap(&scores).unwrap();
        let moved = selector.lattice.snap(&moved).unwrap();
        for (a, b) in points.iter().zip(&moved) {
            assert!(a.abs_diff(*b) <= selector.shift, "{a} → {b}");
        }
        let rate = rate(&selector);
        let ours = worst_log_ratio(
            &exponential_probabilities(&points, rate),
            &exponential_probabilities(&moved, rate),
        );
        assert!(
            ours <= bound(each),
            "Δ = {sensitivity}, ε₀ = {each}: {ours}"
        );
        let doubled = Rate {
            numerator: 2 * rate.numerator,
            ..rate
        };
        let loss = worst_log_ratio(
            &exponential_probabilities(&points, doubled),
            &exponential_probabilities(&moved, doubled),
        );
        doubled_worst = doubled_worst.max(loss / each);
    }
    assert!(
        doubled_worst > 1.5,
        "twice the rate kept every pair within e^ε₀ (worst {doubled_worst}·ε₀)"
    );
}

#[test]
fn rounding_can_add_a_whole_unit_and_delta_prime_covers_it() {
    // −γ/2 rounds to −1 and 1 − γ/2 to 1/γ, half away from zero: Δ = 1
    // apart as scores, 1/γ + 1 = Δ′ apart on the lattice.
    let selector = Selector::new(SelectionRule::Laplace, epsilon(1.0), 1.0, 4.0).unwrap();
    let half = selector.grid() / 2.0;
    let points = selector.lattice.snap(&[-half, 1.0 - half]).unwrap();
    assert_eq!(points, [-1, (1.0 / selector.grid()) as i128]);
    assert_eq!(points[0].abs_diff(points[1]), selector.shift);
}

#[test]
fn ties_go_to_the_lowest_index() {
    assert_eq!(lowest_argmin([3, 1, 1, 2]), 1);
    assert_eq!(lowest_argmin([-5, -5]), 0);
    assert_eq!(lowest_argmin([2, 2, 2, 1, 1]), 3);
    assert_eq!(lowest_argmin([7]), 0);
    assert_eq!(lowest_argmin([i128::MAX, i128::MIN, i128::MIN]), 1);
}

#[test]
fn scores_at_the_edge_of_the_range_select_without_overflow() {
    // ε₀ = 10⁶, the largest a request may name, on the widest range the
    // lattice holds: indices near 2^61, the exponential numerator near
    // 2^112, and the overflow checks of the test profile watching.
    let range = 5e5;
    let mut rng = ChaCha8Rng::seed_from_u64(36);
    for rule in [SelectionRule::Laplace, SelectionRule::Exponential] {
        let selector = Selector::new(rule, epsilon(Epsilon::MAX), 1.0, range).unwrap();
        assert!(range / selector.grid() > 2f64.powi(60));
        let scores = [range, -range, range, 0.0];
        for _ in 0..50 {
            assert_eq!(selector.select(&scores, &mut rng), Ok(1), "{rule:?}");
        }
    }
    let wider = Selector::new(SelectionRule::Laplace, epsilon(Epsilon::MAX), 1.0, 2e6);
    assert!(matches!(wider, Err(DpError::RangeTooWide { .. })));
}

#[test]
fn bad_parameters_and_scores_are_refused() {
    let selector = |rule, each: Epsilon, sensitivity, range| {
        Selector::new(rule, each, sensitivity, range).map(|_| ())
    };
    for rule in [SelectionRule::Laplace, SelectionRule::Exponential] {
        assert!(matches!(
            selector(rule, Epsilon::ZERO, 1.0, 1.0),
            Err(DpError::InvalidEpsilon { .. })
        ));
        for sensitivity in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                selector(rule, epsilon(1.0), sensitivity, 1.0).map_err(|e| e.to_string()),
                Err(DpError::InvalidSensitivity(sensitivity).to_string())
            );
        }
        for range in [-1.0, f64::NAN, f64::INFINITY, 1e300] {
            assert!(matches!(
                selector(rule, epsilon(1.0), 1.0, range),
                Err(DpError::RangeTooWide { .. })
            ));
        }
        // A lattice coarse enough for 2^44·Δ would round off more than
        // 2^−20 of Δ; so would one coarse enough for ε₀ = 10⁻⁹'s noise.
        for (each, range) in [(0.01, 2e13), (1e-9, 1.0)] {
            assert!(matches!(
                selector(rule, epsilon(each), 1.0, range),
                Err(DpError::RangeTooWide { .. })
            ));
        }
        // 2Δ/ε₀ overflows.
        assert_eq!(
            selector(rule, epsilon(1.0), 1e308, 1.0),
            Err(DpError::InvalidSensitivity(1e308))
        );

        let ok = Selector::new(rule, epsilon(1.0), 1.0, 10.0).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(37);
        let mut select = |scores: &[f64]| ok.select(scores, &mut rng);
        assert_eq!(select(&[]), Err(DpError::NoCoordinates));
        assert_eq!(select(&[0.0, f64::NAN]), Err(DpError::NonFiniteValue(1)));
        assert_eq!(
            select(&[f64::NEG_INFINITY, 0.0]),
            Err(DpError::NonFiniteValue(0))
        );
        assert_eq!(
            select(&[0.0, 1.0, -10.5]),
            Err(DpError::OutsideRange {
                index: 2,
                range: 10.0
            })
        );
        assert!(select(&[10.0, -10.0]).is_ok());
    }
}

/// The issue-28 case: k = 8192 scores, one of them 50 temperatures below
/// the rest, so a proposal is accepted with probability ≈ 1/k. Not one of
/// 2,000 selections may take more proposals than the allowance for one
/// (P ≤ 2^−40 each, so a correct sampler fails this with probability
/// ≤ 2000·2^−40 ≈ 2·10⁻⁹), nor all of them more than the allowance for
/// 2,000 in a row; and they take about k each, so the test can fail.
#[test]
fn one_strong_score_among_8192_never_takes_more_proposals_than_the_allowance() {
    let k = 8192;
    let selections = 2_000;
    let selector = Selector::new(SelectionRule::Exponential, epsilon(1.0), 1.0, 200.0).unwrap();
    let mut scores = vec![50.0 * selector.scale(); k];
    scores[k / 2] = 0.0;
    let mut rng = ChaCha8Rng::seed_from_u64(28);
    let (one, many) = (selector.allowance(k, 1), selector.allowance(k, selections));
    let mut total = 0;
    for _ in 0..selections {
        let (index, proposals) = selector.select_counted(&scores, &mut rng).unwrap();
        assert_eq!(index, k / 2);
        assert!(proposals <= one, "{proposals} proposals, allowance {one}");
        total += proposals;
    }
    assert!(total <= many, "{total} proposals, allowance {many}");
    let mean = total as f64 / selections as f64;
    // Geometric with p = 1/k: the mean of 2,000 has a relative spread of
    // 2.2 %, so ±10 % is 4.5 spreads.
    assert!(
        (0.9 * k as f64..1.1 * k as f64).contains(&mean),
        "mean {mean}"
    );
}

/// The allowance is what its bound says: (1 − 1/k)^K ≤ 2^−40 < (1 − 1/k)^(K−1)
/// for one selection (≈ k·ln 2^40 for large k; 40 at k = 2), a Chernoff bound that still meets η
/// for T in a row at a few times √T above the worst mean kT, exactly k·T
/// Laplace draws, and never more than one proposal when k = 1.
#[test]
fn the_allowance_covers_the_geometric_tail_at_the_worst_rate() {
    let exponential = Selector::new(SelectionRule::Exponential, epsilon(1.0), 1.0, 8.0).unwrap();
    let laplace = Selector::new(SelectionRule::Laplace, epsilon(1.0), 1.0, 8.0).unwrap();
    for k in [2u64, 66, 8192, 1 << 20] {
        let one = exponential.allowance(k as usize, 1);
        let tail = |draws: u64| draws as f64 * (-1.0 / k as f64).ln_1p();
        assert!(
            tail(one) <= OVERRUN.ln() && tail(one - 1) > OVERRUN.ln(),
            "k = {k}"
        );
        // −ln(1 − 1/k) = 1/k + 1/(2k²) + …: K ≈ k·ln(1/η) once k is large.
        let approximate = k as f64 * (1.0 / OVERRUN).ln();
        if k >= 66 {
            assert!(
                (one as f64 / approximate - 1.0).abs() < 0.02,
                "k = {k}: {one}"
            );
        }
        for steps in [10u32, 1000, 10_000] {
            let many = exponential.allowance(k as usize, steps) as f64;
            let mean = (k * u64::from(steps)) as f64;
            // The std of T geometrics of rate 1/k is k·√(T(1 − 1/k)): the
            // allowance sits between √(2 ln(1/η)) and twice that above the mean.
            let std = k as f64 * (f64::from(steps) * (1.0 - 1.0 / k as f64)).sqrt();
            let spread = (2.0 * (1.0 / OVERRUN).ln()).sqrt() * std;
            assert!(many > mean + spread, "k = {k}, T = {steps}");
            assert!(
                many < mean + 2.0 * spread + 2.0 * approximate,
                "k = {k}, T = {steps}"
            );
        }
        assert_eq!(laplace.allowance(k as usize, 7), 7 * k);
    }
    assert_eq!(exponential.allowance(1, 5), 5);
}
