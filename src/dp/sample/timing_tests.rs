//! What a sampler's running time can reveal about the noise it draws
//! (docs/privacy-core.md, "Timing").
//!
//! The samplers are exact, so their loops run as long as the draw needs:
//! the work grows with the magnitude of the noise. These tests count the
//! random 32-bit words each draw consumes and check, against expected word
//! counts derived from the code, exactly how that work depends on the noise:
//!
//! - A Bernoulli(e⁻¹) trial (`bernoulli_exp_fraction(1, 1)`) costs `c₊`
//!   words on average when it succeeds and `c₋` when it fails (computed by
//!   [`fraction_words`]; c₊ ≈ 5.68, c₋ ≈ 4.73).
//! - Discrete Laplace of scale t: ⌊|y|/t⌋ successful trials, one failed
//!   one, and a fraction step whose cost depends only on |y| mod t, so
//!   E[words | y] = K + c₋ + c₊·⌊|y|/t⌋ + h(|y| mod t, t), and every draw
//!   consumes at least 5 + 3⌊|y|/t⌋ words.
//! - Discrete Gaussian of σ (t = σ + 1): the rejected Laplace proposals are
//!   independent of the value returned (rejection sampling); the accepted
//!   proposal costs its Laplace draw plus j = ⌊(|y|t − σ²)²/(2σ²t²)⌋ more
//!   successful trials and a final fraction step: at least 6 + 3(m + j)
//!   words, m = ⌊|y|/t⌋.
//! - Norm-Gamma: the exponentials whose sum is the norm S = ‖Z‖/Θ cost
//!   β = (e² − 1)/2 ≈ 3.19 words per unit of their integer parts; the
//!   normals (the direction) and the rounding are independent of S.
//!
//! Each statistical assertion has false-failure rate 10⁻⁶ for a random seed
//! (Pearson's χ²; or, for a model of the mean, two tests at 5·10⁻⁷ each:
//! bin means with ≥ 1000 samples compared with the fullest bin's, normal
//! approximation, Bonferroni over the bins; and a least-squares trend with
//! a robust standard error). Each comes with negative controls that must
//! fail: the same model with the per-unit cost set to 0 ("the work does not
//! depend on the noise"), 0.5× and 1.5× its value.

use std::convert::Infallible;
use std::time::Instant;

use num_integer::Integer;
use rand::rngs::ChaCha8Rng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng, TryRng};
use statrs::distribution::{ChiSquared, ContinuousCDF, Normal};

use super::cks20::bernoulli_exp;
use super::{OsNoise, discrete_gaussian, discrete_laplace, norm_gamma_lattice};
use crate::dp::statistics::FALSE_FAILURE_RATE;
use crate::dp::{Delta, Epsilon, Mechanism};

/// The noise scale of the benchmarks: 2^23 to 2^24 lattice points, as the
/// mechanisms use.
const SCALE: u32 = (1 << 23) + 12_345;

/// A generator that counts the 32-bit words asked of it.
struct Counting<R> {
    inner: R,
    words: u64,
}

impl<R> Counting<R> {
    fn new(inner: R) -> Self {
        Counting { inner, words: 0 }
    }
}

impl<R: Rng> TryRng for Counting<R> {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        self.words += 1;
        Ok(self.inner.next_u32())
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        self.words += 2;
        Ok(self.inner.next_u64())
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Infallible> {
        self.words += dest.len().div_ceil(4) as u64;
        self.inner.fill_bytes(dest);
        Ok(())
    }
}

/// Expected words of `uniform_below(bound)`: ⌈bits/32⌉ words per try and
/// 2^bits/bound tries.
fn uniform_words(bound: u128) -> f64 {
    let bits = 128 - bound.leading_zeros();
    f64::from(bits.div_ceil(32)) * 2f64.powi(bits as i32) / bound as f64
}

/// For `bernoulli_exp_fraction(p, q)`, 0 ≤ p ≤ q: (P[true], E[words | true],
/// E[words | false]). The k-th step draws Bernoulli(p/(qk)) by
/// `uniform_below(qk / gcd(p, qk))`, whose number of tries is independent
/// of its outcome; the first failure at step k returns k odd.
fn fraction_words(p: u128, q: u128) -> (f64, f64, f64) {
    let (mut reach, mut spent) = (1.0, 0.0);
    let (mut p_true, mut on_true, mut p_false, mut on_false) = (0.0, 0.0, 0.0, 0.0);
    for k in 1..=40u128 {
        let qk = q * k;
        spent += uniform_words(qk / p.gcd(&qk));
        let success = p as f64 / qk as f64;
        let stop = reach * (1.0 - success);
        if k % 2 == 1 {
            p_true += stop;
            on_true += stop * spent;
        } else {
            p_false += stop;
            on_false += stop * spent;
        }
        reach *= success;
        if reach < 1e-15 {
            break;
        }
    }
    (p_true, on_true / p_true, on_false / p_false)
}

/// E[words | success] and E[words | failure] of a Bernoulli(e⁻¹) trial.
fn trial_words() -> (f64, f64) {
    let (probability, success, failure) = fraction_words(1, 1);
    assert!((probability - (-1f64).exp()).abs() < 1e-14);
    (success, failure)
}

/// Mean and variance of the values.
fn mean_variance(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance)
}

/// Bins with fewer samples are left out of [`mean_shift`].
const MIN_BIN: usize = 1000;

/// The two-sided normal threshold for `comparisons` tests sharing the
/// false-failure rate `rate` (Bonferroni).
fn z_threshold(rate: f64, comparisons: usize) -> f64 {
    Normal::standard().inverse_cdf(1.0 - rate / (2.0 * comparisons as f64))
}

/// Whether the bins share one mean: the largest |z| of each bin's mean
/// against the fullest bin's (bins of at least [`MIN_BIN`] samples), the
/// number of comparisons, and a summary (bin: count × mean) for messages.
fn mean_shift(bins: &[Vec<f64>]) -> (f64, usize, String) {
    let stats: Vec<(usize, usize, f64, f64)> = bins
        .iter()
        .enumerate()
        .filter(|(_, values)| values.len() >= MIN_BIN)
        .map(|(index, values)| {
            let (mean, variance) = mean_variance(values);
            (index, values.len(), mean, variance)
        })
        .collect();
    assert!(stats.len() >= 2, "at least two bins of {MIN_BIN} samples");
    let &(_, n0, m0, v0) = stats
        .iter()
        .max_by_key(|(_, count, _, _)| *count)
        .expect("non-empty");
    let max_z = stats
        .iter()
        .map(|&(_, n, m, v)| (m - m0).abs() / (v / n as f64 + v0 / n0 as f64).sqrt())
        .filter(|z| z.is_finite())
        .fold(0.0, f64::max);
    let summary = stats
        .iter()
        .map(|(index, count, mean, _)| format!("{index}: {count}×{mean:.3}"))
        .collect::<Vec<_>>()
        .join(", ");
    (max_z, stats.len() - 1, summary)
}

/// |z| of the least-squares slope of r on x, with the
/// heteroscedasticity-robust (White) standard error: 0 in expectation when
/// E[r | x] is constant.
fn trend((x, r): (&[f64], &[f64])) -> f64 {
    let n = x.len() as f64;
    let (x_mean, r_mean) = (x.iter().sum::<f64>() / n, r.iter().sum::<f64>() / n);
    let spread: f64 = x.iter().map(|x| (x - x_mean).powi(2)).sum();
    let slope = x
        .iter()
        .zip(r)
        .map(|(x, r)| (x - x_mean) * (r - r_mean))
        .sum::<f64>()
        / spread;
    let variance = x
        .iter()
        .zip(r)
        .map(|(x, r)| {
            let error = r - r_mean - slope * (x - x_mean);
            ((x - x_mean) * error).powi(2)
        })
        .sum::<f64>()
        / spread.powi(2);
    (slope / variance.sqrt()).abs()
}

/// Draws for a model test: each one's band, the noise magnitude in the
/// model's units, and its words minus the model.
#[derive(Default)]
struct Residuals {
    bands: Vec<Vec<f64>>,
    magnitudes: Vec<f64>,
    words: Vec<f64>,
}

impl Residuals {
    fn new(bands: usize) -> Self {
        Residuals {
            bands: vec![Vec::new(); bands],
            ..Residuals::default()
        }
    }

    fn push(&mut self, band: usize, magnitude: f64, words: f64) {
        let last = self.bands.len() - 1;
        self.bands[band.min(last)].push(words);
        self.magnitudes.push(magnitude);
        self.words.push(words);
    }

    /// Whether the residuals look mean-independent of the noise: no bin
    /// mean differs from the fullest bin's, and no linear trend in the
    /// magnitude. Each test has half of [`FALSE_FAILURE_RATE`]. Also a
    /// summary for messages.
    fn flat(&self) -> (bool, String) {
        let (bins_z, comparisons, summary) = mean_shift(&self.bands);
        let trend_z = trend((&self.magnitudes, &self.words));
        let bins_limit = z_threshold(FALSE_FAILURE_RATE / 2.0, comparisons);
        let trend_limit = z_threshold(FALSE_FAILURE_RATE / 2.0, 1);
        let flat = bins_z < bins_limit && trend_z < trend_limit;
        let summary = format!(
            "bins |z| = {bins_z:.2} (limit {bins_limit:.2}), trend |z| = {trend_z:.2} \
             (limit {trend_limit:.2}); {summary}"
        );
        (flat, summary)
    }
}

/// Asserts the residuals (words minus the model at the true per-unit cost)
/// are flat in the noise, and that the model at each wrong per-unit cost
/// (0, 0.5× and 1.5×) is rejected.
fn assert_model_fits(what: &str, residuals: impl Fn(f64) -> Residuals) {
    let (flat, summary) = residuals(1.0).flat();
    assert!(flat, "{what}: {summary}");
    for factor in [0.0, 0.5, 1.5] {
        let (flat, summary) = residuals(factor).flat();
        assert!(!flat, "{what}, per-unit cost ×{factor} passed: {summary}");
    }
}

#[test]
fn discrete_laplace_words_grow_by_one_successful_trial_per_scale() {
    let (per_success, on_failure) = trial_words();
    let t = u64::from(SCALE);
    let mut rng = Counting::new(ChaCha8Rng::seed_from_u64(31));
    // (⌊|y|/t⌋, words − the part of the model that does not grow).
    let draws: Vec<(u64, f64)> = (0..300_000)
        .map(|_| {
            let before = rng.words;
            let y = discrete_laplace(t, &mut rng).unsigned_abs();
            let words = rng.words - before;
            let units = (y / u128::from(t)) as u64;
            // Exact: the sign, u and its fraction step take a word each, a
            // success at least three (steps 1–3), the failure two.
            assert!(words >= 5 + 3 * units, "{words} words for |y|/t = {units}");
            let fraction = fraction_words(y % u128::from(t), u128::from(t)).1;
            (units, words as f64 - on_failure - fraction)
        })
        .collect();
    assert_model_fits("discrete Laplace", |factor| {
        let per_unit = factor * per_success;
        let mut residuals = Residuals::new(6);
        for &(units, words) in &draws {
            let units = units as f64;
            residuals.push(units as usize, units, words - per_unit * units);
        }
        residuals
    });
}

/// One discrete Gaussian draw replayed proposal by proposal.
struct GaussianDraw {
    value: i128,
    proposals: u32,
    rejected_words: u64,
    accepted_words: u64,
    /// Wall time of the rejected proposals and of the accepted one.
    rejected_nanos: f64,
    accepted_nanos: f64,
}

/// `discrete_gaussian`'s loop, counting proposals and the words of the
/// rejected ones and of the accepted one. The tests check that it draws
/// the same values from the same words as the real sampler.
fn replay_gaussian<R: Rng>(sigma: u32, rng: &mut Counting<R>) -> GaussianDraw {
    let s = u128::from(sigma);
    let t = s + 1;
    let s_squared = s * s;
    let denominator = 2 * s_squared * t * t;
    let (start, started) = (rng.words, Instant::now());
    let mut proposals = 0;
    loop {
        let (before, proposed) = (rng.words, Instant::now());
        proposals += 1;
        let y = discrete_laplace(u64::from(sigma) + 1, rng);
        let n = (y.unsigned_abs() * t).abs_diff(s_squared);
        let n_squared = n.checked_mul(n).expect("|y| < 2^40 σ");
        if bernoulli_exp(n_squared, denominator, rng) {
            return GaussianDraw {
                value: y,
                proposals,
                rejected_words: before - start,
                accepted_words: rng.words - before,
                rejected_nanos: (proposed - started).as_nanos() as f64,
                accepted_nanos: proposed.elapsed().as_nanos() as f64,
            };
        }
    }
}

/// For an accepted value y of the discrete Gaussian of σ: the Laplace
/// proposal's whole units m = ⌊|y|/t⌋, the acceptance step's whole trials
/// j = ⌊(|y|t − σ²)²/(2σ²t²)⌋, and the mean words of the two fraction
/// steps (of the proposal, given |y| mod t; of the acceptance, given the
/// remainder of the exponent).
fn gaussian_units(sigma: u32, y: i128) -> (u128, u128, f64) {
    let s = u128::from(sigma);
    let t = s + 1;
    let denominator = 2 * s * s * t * t;
    let y = y.unsigned_abs();
    let n = (y * t).abs_diff(s * s);
    let exponent = n * n;
    let fractions =
        fraction_words(y % t, t).1 + fraction_words(exponent % denominator, denominator).1;
    (y / t, exponent / denominator, fractions)
}

/// Pearson's χ² test of independence on a contingency table.
fn independence_p_value(table: &[Vec<u64>]) -> f64 {
    let total: u64 = table.iter().flatten().sum();
    let rows: Vec<f64> = table
        .iter()
        .map(|row| row.iter().sum::<u64>() as f64)
        .collect();
    let columns: Vec<f64> = (0..table[0].len())
        .map(|column| table.iter().map(|row| row[column]).sum::<u64>() as f64)
        .collect();
    let mut statistic = 0.0;
    for (row, &row_total) in table.iter().zip(&rows) {
        for (&count, &column_total) in row.iter().zip(&columns) {
            let expected = row_total * column_total / total as f64;
            assert!(expected >= 5.0, "cell with only {expected} expected");
            statistic += (count as f64 - expected).powi(2) / expected;
        }
    }
    let freedom = ((rows.len() - 1) * (columns.len() - 1)) as f64;
    ChiSquared::new(freedom)
        .expect("a 2×2 table at least")
        .sf(statistic)
}

/// A contingency table of `pairs` (row, column), both capped.
fn table(
    pairs: impl Iterator<Item = (usize, usize)>,
    rows: usize,
    columns: usize,
) -> Vec<Vec<u64>> {
    let mut counts = vec![vec![0u64; columns]; rows];
    for (row, column) in pairs {
        counts[row.min(rows - 1)][column.min(columns - 1)] += 1;
    }
    counts
}

#[test]
fn discrete_gaussian_rejections_are_independent_of_the_value_but_the_accepted_proposal_is_not() {
    let (per_success, on_failure) = trial_words();
    for (sigma, seed) in [(3u32, 41u64), (SCALE, 42)] {
        let mut real = Counting::new(ChaCha8Rng::seed_from_u64(seed));
        let mut replayed = Counting::new(ChaCha8Rng::seed_from_u64(seed));
        let draws: Vec<GaussianDraw> = (0..300_000)
            .map(|_| {
                let value = discrete_gaussian(sigma, &mut real);
                let draw = replay_gaussian(sigma, &mut replayed);
                // The replay is the sampler: same values from the same words.
                assert_eq!((draw.value, replayed.words), (value, real.words));
                draw
            })
            .collect();
        // ⌊|y|/σ⌋: 0, 1, ≥ 2.
        let band =
            |draw: &GaussianDraw| ((draw.value.unsigned_abs() / u128::from(sigma)) as usize).min(2);
        let total = |draw: &GaussianDraw| draw.rejected_words + draw.accepted_words;

        // The number of proposals (1, 2, ≥ 3) is independent of the band.
        let proposals = table(
            draws
                .iter()
                .map(|draw| (draw.proposals as usize - 1, band(draw))),
            3,
            3,
        );
        let p = independence_p_value(&proposals);
        assert!(
            p > FALSE_FAILURE_RATE,
            "σ = {sigma}: proposals depend on |y|, p = {p:e}: {proposals:?}"
        );
        // Negative control: the total words (in quartiles) are not.
        let mut sorted: Vec<u64> = draws.iter().map(total).collect();
        sorted.sort_unstable();
        let quartiles: Vec<u64> = (1..4).map(|q| sorted[q * sorted.len() / 4]).collect();
        let words = table(
            draws.iter().map(|draw| {
                let quartile = quartiles.partition_point(|&edge| edge <= total(draw));
                (quartile, band(draw))
            }),
            4,
            3,
        );
        let p = independence_p_value(&words);
        assert!(
            p < FALSE_FAILURE_RATE,
            "σ = {sigma}: total words look independent of |y|, p = {p:e}: {words:?}"
        );

        // The rejected proposals' words have one mean in every band.
        let mut rejected = vec![Vec::new(); 3];
        for draw in &draws {
            rejected[band(draw)].push(draw.rejected_words as f64);
        }
        let (z, comparisons, summary) = mean_shift(&rejected);
        let limit = z_threshold(FALSE_FAILURE_RATE, comparisons);
        assert!(
            z < limit,
            "σ = {sigma}: rejected work depends on |y|: |z| = {z:.2}; {summary}"
        );

        // The accepted proposal: at least 6 + 3(m + j) words (its Laplace
        // draw's bound, j successes of three words, a fraction step), and
        // c₊·(m + j) + c₋ + its two fraction steps + a constant in mean.
        let accepted: Vec<(usize, f64, f64)> = draws
            .iter()
            .map(|draw| {
                let (m, j, fractions) = gaussian_units(sigma, draw.value);
                assert!(u128::from(draw.accepted_words) >= 6 + 3 * (m + j));
                let words = draw.accepted_words as f64 - on_failure - fractions;
                (band(draw), (m + j) as f64, words)
            })
            .collect();
        assert_model_fits(&format!("discrete Gaussian σ = {sigma}"), |factor| {
            let per_unit = factor * per_success;
            let mut residuals = Residuals::new(3);
            for &(band, units, words) in &accepted {
                residuals.push(band, units, words - per_unit * units);
            }
            residuals
        });
    }
}

/// Mean words of `exact_exponential` per unit of its integer part: a
/// rejected fraction step (a von Neumann run of odd length n, n + 1
/// comparisons) draws one word for its uniform p and one per comparison,
/// 1 + E[n + 1 | odd] = 1 + (e² − 3)/2 = (e² − 1)/2 (up to ties of two
/// 32-bit digits, probability 2⁻³² per comparison).
fn exponential_words_per_unit() -> f64 {
    (1f64.exp().powi(2) - 1.0) / 2.0
}

/// Mean words of the accepted fraction step of `exact_exponential` whose
/// fraction is x: one for p and one per comparison, the run having even
/// length n with probability xⁿ/n! − xⁿ⁺¹/(n+1)!; given acceptance
/// (probability e^{−x}) that is 1 + e^x·cosh x − x = (e^{2x} + 3)/2 − x.
fn accepted_fraction_words(x: f64) -> f64 {
    ((2.0 * x).exp() + 3.0) / 2.0 - x
}

/// 8-point Gauss–Legendre nodes and weights on [−1, 1].
const GAUSS_LEGENDRE: [(f64, f64); 8] = [
    (-0.960_289_856_497_536_3, 0.101_228_536_290_376_3),
    (-0.796_666_477_413_626_7, 0.222_381_034_453_374_5),
    (-0.525_532_409_916_329, 0.313_706_645_877_887_3),
    (-0.183_434_642_495_649_8, 0.362_683_783_378_362),
    (0.183_434_642_495_649_8, 0.362_683_783_378_362),
    (0.525_532_409_916_329, 0.313_706_645_877_887_3),
    (0.796_666_477_413_626_7, 0.222_381_034_453_374_5),
    (0.960_289_856_497_536_3, 0.101_228_536_290_376_3),
];

/// E[words of the k exponentials | their sum is s], with `per_unit` words
/// per unit of each integer part: given the sum, each Eᵢ is s·B with
/// B ~ Beta(1, k − 1), so the integer parts contribute
/// per_unit·k·Σ_{n=1}^{⌊s⌋} (1 − n/s)^{k−1} and the accepted fraction steps
/// k·E[accepted_fraction_words(frac(sB))] (integrated piecewise).
fn exponential_words(dims: usize, s: f64, per_unit: f64) -> f64 {
    if dims == 1 {
        return per_unit * s.floor() + accepted_fraction_words(s.fract());
    }
    let k = dims as f64;
    let whole: f64 = (1..=s.floor() as u64)
        .map(|n| (1.0 - n as f64 / s).powf(k - 1.0))
        .sum();
    let mut fraction = 0.0;
    let mut n = 0.0;
    while n < s {
        let width = (s - n).min(1.0);
        for (node, weight) in GAUSS_LEGENDRE {
            let x = width * (node + 1.0) / 2.0;
            let density = (k - 1.0) * (1.0 - (n + x) / s).powf(k - 2.0) / s;
            fraction += weight * width / 2.0 * accepted_fraction_words(x) * density;
        }
        n += 1.0;
    }
    k * (per_unit * whole + fraction)
}

#[test]
fn norm_gamma_words_grow_with_the_norm_through_the_exponentials() {
    const THETA: u64 = 1 << 23;
    let per_unit = exponential_words_per_unit();
    // (k, draws, seed, the lowest band edge, band width, bands).
    for (dims, count, seed, low, width, bands) in [
        (1usize, 100_000, 51u64, 0.0, 1.0, 6usize),
        (4, 50_000, 52, 1.0, 1.0, 10),
        (64, 20_000, 53, 52.0, 4.0, 8),
    ] {
        let mut rng = Counting::new(ChaCha8Rng::seed_from_u64(seed));
        // (‖W‖/Θ, words).
        let draws: Vec<(f64, f64)> = (0..count)
            .map(|_| {
                let before = rng.words;
                let w = norm_gamma_lattice(dims, THETA, &mut rng);
                let norm = w.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                (norm / THETA as f64, (rng.words - before) as f64)
            })
            .collect();
        let band = |s: f64| (((s - low) / width).floor().max(-1.0) + 1.0) as usize;
        assert_model_fits(&format!("norm-Gamma k = {dims}"), |factor| {
            let mut residuals = Residuals::new(bands);
            for &(s, words) in &draws {
                residuals.push(
                    band(s),
                    s,
                    words - exponential_words(dims, s, factor * per_unit),
                );
            }
            residuals
        });
    }
}

/// Least squares r ≈ a + b·x: the slope b and R².
fn least_squares(x: &[f64], r: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let (x_mean, r_mean) = (x.iter().sum::<f64>() / n, r.iter().sum::<f64>() / n);
    let sxx: f64 = x.iter().map(|x| (x - x_mean).powi(2)).sum();
    let srr: f64 = r.iter().map(|r| (r - r_mean).powi(2)).sum();
    let sxr: f64 = x
        .iter()
        .zip(r)
        .map(|(x, r)| (x - x_mean) * (r - r_mean))
        .sum();
    (sxr / sxx, sxr * sxr / (sxx * srr))
}

/// The wall time of `f` in nanoseconds, and its value.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed().as_nanos() as f64)
}

/// Draws slower than this many medians are left out of per-band means and
/// fits (the count is printed): a single draw that long was interrupted
/// (preemption) or refilled `OsNoise`'s 4 KiB buffer from the OS, which
/// happens once per 1024 words and costs about 9 µs.
const OUTLIER: f64 = 10.0;

/// The pairs whose time is at most [`OUTLIER`] medians, and how many were
/// left out.
fn without_outliers(units: &[f64], nanos: &[f64]) -> (Vec<f64>, Vec<f64>, usize) {
    let mut sorted = nanos.to_vec();
    sorted.sort_by(f64::total_cmp);
    let cap = OUTLIER * sorted[sorted.len() / 2];
    let (kept_units, kept_nanos): (Vec<f64>, Vec<f64>) = units
        .iter()
        .zip(nanos)
        .filter(|&(_, &time)| time <= cap)
        .map(|(&unit, &time)| (unit, time))
        .unzip();
    let dropped = nanos.len() - kept_nanos.len();
    (kept_units, kept_nanos, dropped)
}

/// Prints count, median and mean time per band of `units` (capped), and
/// the least-squares cost per unit, interruptions left out if `trim`.
fn print_bands(what: &str, units: &[f64], nanos: &[f64], bands: usize, trim: bool) {
    let (units, nanos, dropped) = if trim {
        without_outliers(units, nanos)
    } else {
        (units.to_vec(), nanos.to_vec(), 0)
    };
    let mut grouped = vec![Vec::new(); bands];
    for (&unit, &time) in units.iter().zip(&nanos) {
        grouped[(unit as usize).min(bands - 1)].push(time);
    }
    println!("{what} ({dropped} slow draws left out)");
    for (band, times) in grouped.iter_mut().enumerate() {
        if times.is_empty() {
            continue;
        }
        times.sort_by(f64::total_cmp);
        let (mean, variance) = mean_variance(times);
        let median = times[times.len() / 2];
        println!(
            "  {band:>2}{}: {:>8} draws, median {median:>7.0} ns, mean {mean:>7.0} ± {:>4.0} ns",
            if band == bands - 1 { "+" } else { " " },
            times.len(),
            (variance / times.len() as f64).sqrt()
        );
    }
    let (slope, r2) = least_squares(&units, &nanos);
    println!("  least squares: {slope:.1} ns per unit, R² = {r2:.3}");
}

/// Prints the spread of a sample of times, and how much of its variance
/// `units` explains, with and without the interruptions.
fn print_spread(what: &str, units: Option<&[f64]>, nanos: &[f64]) {
    let mut sorted = nanos.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize] / 1000.0;
    let (mean, variance) = mean_variance(&sorted);
    println!(
        "{what}: {} runs, mean {:.2} µs, std {:.2} µs, p50 {:.2}, p90 {:.2}, p99 {:.2}, \
         p99.9 {:.2}, p99.99 {:.2}, max {:.2} µs",
        sorted.len(),
        mean / 1000.0,
        variance.sqrt() / 1000.0,
        at(0.5),
        at(0.9),
        at(0.99),
        at(0.999),
        at(0.9999),
        at(1.0)
    );
    let median = sorted[sorted.len() / 2];
    let above = |factor: f64| {
        let count = sorted.partition_point(|&time| time <= factor * median);
        (sorted.len() - count) as f64 / sorted.len() as f64
    };
    println!(
        "  share above 2× the median {:.1e}, 4× {:.1e}, 10× {:.1e}",
        above(2.0),
        above(4.0),
        above(10.0)
    );
    let Some(units) = units else {
        return;
    };
    let (slope, r2) = least_squares(units, nanos);
    let (kept_units, kept_nanos, dropped) = without_outliers(units, nanos);
    let (kept_slope, kept_r2) = least_squares(&kept_units, &kept_nanos);
    let (_, kept_variance) = mean_variance(&kept_nanos);
    println!(
        "  all runs: {slope:.1} ns per unit, R² = {r2:.3}; without {dropped} slow ones: \
         std {:.2} µs, {kept_slope:.1} ns per unit, R² = {kept_r2:.3}",
        kept_variance.sqrt() / 1000.0
    );
}

/// Plug-in estimate of the mutual information, in bits, between `labels`
/// and the time cut into `bins` quantile bins; and the same for the labels
/// shuffled, which is the estimator's bias when there is nothing to learn.
fn mutual_information(labels: &[usize], nanos: &[f64], bins: usize) -> (f64, f64) {
    let mut sorted = nanos.to_vec();
    sorted.sort_by(f64::total_cmp);
    let edges: Vec<f64> = (1..bins)
        .map(|bin| sorted[bin * sorted.len() / bins])
        .collect();
    let estimate = |labels: &[usize]| {
        let rows = labels.iter().max().map_or(1, |max| max + 1);
        let mut joint = vec![vec![0.0f64; bins]; rows];
        for (&label, &time) in labels.iter().zip(nanos) {
            joint[label][edges.partition_point(|&edge| edge <= time)] += 1.0;
        }
        let n = labels.len() as f64;
        let row_sums: Vec<f64> = joint.iter().map(|row| row.iter().sum()).collect();
        let column_sums: Vec<f64> = (0..bins)
            .map(|column| joint.iter().map(|row| row[column]).sum())
            .collect();
        let mut bits = 0.0;
        for (row, row_sum) in joint.iter().zip(&row_sums) {
            for (&count, column_sum) in row.iter().zip(&column_sums) {
                if count > 0.0 {
                    bits += count / n * (count * n / (row_sum * column_sum)).log2();
                }
            }
        }
        bits
    };
    let mut shuffled = labels.to_vec();
    shuffled.shuffle(&mut ChaCha8Rng::seed_from_u64(99));
    (estimate(labels), estimate(&shuffled))
}

/// Prints what the time tells about `labels` (with their entropy, the
/// most it could tell).
fn print_information(what: &str, labels: &[usize], nanos: &[f64]) {
    let n = labels.len() as f64;
    let mut counts = vec![0.0f64; labels.iter().max().map_or(1, |max| max + 1)];
    for &label in labels {
        counts[label] += 1.0;
    }
    let entropy: f64 = counts
        .iter()
        .filter(|&&count| count > 0.0)
        .map(|&count| -count / n * (count / n).log2())
        .sum();
    for bins in [20, 100] {
        let (bits, bias) = mutual_information(labels, nanos, bins);
        println!(
            "  I({what}; time in {bins} quantile bins) = {bits:.4} bits (shuffled: {bias:.4}; \
             entropy of {what}: {entropy:.3} bits)"
        );
    }
}

/// Wall time against the noise, from the production randomness (`OsNoise`).
/// Not an assertion (timing depends on the machine): run with
/// `cargo test --release --lib dp::sample::timing -- --ignored --nocapture`
/// and read docs/privacy-core.md ("Timing") for the figures it gave.
#[test]
#[ignore = "a measurement: run in release mode with --ignored --nocapture"]
fn wall_time_against_the_noise() {
    let mut noise = OsNoise::new();
    let t = u64::from(SCALE);
    // Warm up caches and the CPU clock.
    for _ in 0..200_000 {
        discrete_laplace(t, &mut noise);
    }

    let (units, nanos): (Vec<f64>, Vec<f64>) = (0..2_000_000)
        .map(|_| {
            let (y, ns) = timed(|| discrete_laplace(t, &mut noise));
            ((y.unsigned_abs() / u128::from(t)) as f64, ns)
        })
        .unzip();
    print_bands(
        "discrete Laplace, t = SCALE, by ⌊|y|/t⌋",
        &units,
        &nanos,
        9,
        true,
    );
    let bands: Vec<usize> = units.iter().map(|&unit| (unit as usize).min(3)).collect();
    print_information("min(⌊|y|/t⌋, 3)", &bands, &nanos);

    // The first word of a fresh OsNoise reads 4 KiB from the OS.
    let refills: Vec<f64> = (0..100_000)
        .map(|_| {
            let mut fresh = OsNoise::new();
            timed(|| fresh.next_u32()).1
        })
        .collect();
    print_spread(
        "a 4 KiB refill from the OS (first word of an OsNoise)",
        None,
        &refills,
    );

    for (sigma, count) in [(SCALE, 1_000_000), (3, 1_000_000)] {
        let mut by_units = Vec::new();
        let mut by_sigma = Vec::new();
        let mut nanos = Vec::new();
        for _ in 0..count {
            let (y, ns) = timed(|| discrete_gaussian(sigma, &mut noise));
            let (m, j, _) = gaussian_units(sigma, y);
            by_units.push((m + j) as f64);
            by_sigma.push(y.unsigned_abs() as f64 / f64::from(sigma));
            nanos.push(ns);
        }
        print_bands(
            &format!("discrete Gaussian σ = {sigma}, by ⌊|y|/σ⌋"),
            &by_sigma,
            &nanos,
            6,
            true,
        );
        print_bands(
            &format!("discrete Gaussian σ = {sigma}, by m + j (trials of the accepted proposal)"),
            &by_units,
            &nanos,
            10,
            true,
        );
        print_spread(
            &format!("discrete Gaussian σ = {sigma}, against m + j"),
            Some(&by_units),
            &nanos,
        );
        let bands: Vec<usize> = by_sigma.iter().map(|&x| (x as usize).min(3)).collect();
        print_information("min(⌊|y|/σ⌋, 3)", &bands, &nanos);

        // Proposal by proposal (the replay adds two clock reads a proposal).
        let mut counting = Counting::new(OsNoise::new());
        let mut draws: Vec<GaussianDraw> = (0..count)
            .map(|_| replay_gaussian(sigma, &mut counting))
            .collect();
        let mut totals: Vec<f64> = draws
            .iter()
            .map(|draw| draw.rejected_nanos + draw.accepted_nanos)
            .collect();
        totals.sort_by(f64::total_cmp);
        let cap = OUTLIER * totals[totals.len() / 2];
        draws.retain(|draw| draw.rejected_nanos + draw.accepted_nanos <= cap);
        println!(
            "  replay σ = {sigma}: {} slow draws left out",
            count - draws.len()
        );
        let units: Vec<f64> = draws
            .iter()
            .map(|draw| {
                let (m, j, _) = gaussian_units(sigma, draw.value);
                (m + j) as f64
            })
            .collect();
        let accepted: Vec<f64> = draws.iter().map(|draw| draw.accepted_nanos).collect();
        let rejected: Vec<f64> = draws.iter().map(|draw| draw.rejected_nanos).collect();
        let total: Vec<f64> = accepted.iter().zip(&rejected).map(|(a, r)| a + r).collect();
        let proposals: Vec<f64> = draws.iter().map(|draw| f64::from(draw.proposals)).collect();
        print_bands(
            &format!("  replay σ = {sigma}: the accepted proposal alone, by m + j"),
            &units,
            &accepted,
            10,
            false,
        );
        let bands: Vec<f64> = draws
            .iter()
            .map(|draw| (draw.value.unsigned_abs() / u128::from(sigma)) as f64)
            .collect();
        print_bands(
            &format!("  replay σ = {sigma}: the rejected proposals alone, by ⌊|y|/σ⌋"),
            &bands,
            &rejected,
            5,
            false,
        );
        let share = |part: &[f64]| mean_variance(part).1 / mean_variance(&total).1;
        println!(
            "  replay σ = {sigma}: variance of the draw's time: rejected proposals {:.2}, \
             accepted {:.2}; R² on proposals {:.3}, on m + j {:.3}",
            share(&rejected),
            share(&accepted),
            least_squares(&proposals, &total).1,
            least_squares(&units, &total).1
        );
    }

    for (dims, count) in [(1usize, 300_000), (4, 100_000), (64, 10_000)] {
        const THETA: u64 = 1 << 23;
        let (norms, nanos): (Vec<f64>, Vec<f64>) = (0..count)
            .map(|_| {
                let (w, ns) = timed(|| norm_gamma_lattice(dims, THETA, &mut noise));
                let norm = w.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
                (norm / THETA as f64, ns)
            })
            .unzip();
        print_spread(
            &format!("norm-Gamma k = {dims}, against ‖W‖/Θ"),
            Some(&norms),
            &nanos,
        );
    }

    let values: Vec<f64> = (0..64).map(|i| f64::from(i) / 64.0).collect();
    let (epsilon, delta) = (Epsilon::new(1.0).expect("ε"), Delta::new(1e-6).expect("δ"));
    for (dims, count) in [(64usize, 100_000), (1, 1_000_000)] {
        for mechanism in [
            Mechanism::gaussian(epsilon, delta, 1e-3, dims, 1.0),
            Mechanism::laplace(epsilon, 1e-3, dims, 1.0),
            Mechanism::norm_gamma(epsilon, 1e-3, dims, 1.0),
        ] {
            let mechanism = mechanism.expect("a mechanism");
            let (name, grid) = (mechanism.name(), mechanism.grid());
            // σ, b or Θ in lattice units (an integer).
            let scale = mechanism.noise_scale() / grid;
            let values = &values[..dims];
            let points: Vec<f64> = values.iter().map(|v| (v / grid).round()).collect();
            // Σ|yᵢ|/scale (‖y‖/Θ for norm-Gamma), Σ(mᵢ + jᵢ), time.
            let mut magnitudes = Vec::new();
            let mut units = Vec::new();
            let mut nanos = Vec::new();
            for _ in 0..count {
                let mut noise = OsNoise::new();
                let (released, ns) = timed(|| mechanism.release(values, &mut noise));
                let noise: Vec<f64> = released
                    .expect("a release")
                    .iter()
                    .zip(&points)
                    .map(|(out, point)| out / grid - point)
                    .collect();
                magnitudes.push(if name == "norm_gamma" {
                    noise.iter().map(|y| y * y).sum::<f64>().sqrt() / scale
                } else {
                    noise.iter().map(|y| y.abs()).sum::<f64>() / scale
                });
                units.push(
                    noise
                        .iter()
                        .map(|&y| {
                            let (m, j, _) = gaussian_units(scale as u32, y as i128);
                            (m + j) as f64
                        })
                        .sum::<f64>(),
                );
                nanos.push(ns);
            }
            let magnitude = match name {
                "gaussian" => "Σ|yᵢ|/σ",
                "laplace" => "Σ|yᵢ|/b",
                _ => "‖y‖/Θ",
            };
            print_spread(
                &format!("{name} release, {dims} dims, scale {scale}, against {magnitude}"),
                Some(&magnitudes),
                &nanos,
            );
            if name == "gaussian" {
                print_spread("  the same, against Σ(mᵢ + jᵢ)", Some(&units), &nanos);
            }
            // The magnitude in ten bins of equal probability (for one
            // dimension, its integer part capped at 3).
            let labels: Vec<usize> = if dims == 1 {
                magnitudes.iter().map(|&x| (x as usize).min(3)).collect()
            } else {
                let mut sorted = magnitudes.clone();
                sorted.sort_by(f64::total_cmp);
                let edges: Vec<f64> = (1..10).map(|d| sorted[d * sorted.len() / 10]).collect();
                magnitudes
                    .iter()
                    .map(|&x| edges.partition_point(|&edge| edge <= x))
                    .collect()
            };
            let label = if dims == 1 {
                format!("min(⌊{magnitude}⌋, 3)")
            } else {
                format!("decile of {magnitude}")
            };
            print_information(&label, &labels, &nanos);
        }
    }
}
