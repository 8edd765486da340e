//! Per-row arithmetic whose running time does not depend on its argument.
//!
//! A caller who chooses θ for a gradient chooses every row's prediction
//! θᵀuᵢ. If the time of a row's arithmetic depended on that value, the
//! time of the whole pass would count the rows on one side of a caller's
//! half-space: under unit `row` an un-noised count of private rows, one
//! per call. Two float paths do: the C library's `exp` leaves its fast
//! path for |x| ≳ 708 (overflow and underflow handling, 3–4× slower
//! per row, measured) and for tiny |x|, and x86 takes a microcode assist
//! on subnormal operands and results. So the logistic here is a fixed
//! sequence of additions, multiplications, one division and bit moves, on
//! an argument clamped to ±[`LOGISTIC_CLAMP`]; and a caller's weights
//! below [`FLUSH_BELOW`] are flushed to zero, so no product or sum of a
//! row's prediction is subnormal.
//!
//! `benches/dp.rs` (`logistic_pass`) times a pass at z = 0, ±720 and at a
//! tiny θ: the same time within noise.

/// |z| beyond which the logistic is 0 or 1 to within e^−40 ≈ 4·10⁻¹⁸:
/// below half an ulp of 1, so σ(z) rounds to exactly 1.0 for z ≥ 40, and
/// to within 4.3·10⁻¹⁸ of 0 for z ≤ −40, where a gradient's clipped
/// residual changes by less than that.
pub const LOGISTIC_CLAMP: f64 = 40.0;

/// 2^−600. A weight of at least this magnitude times a feature of at
/// least f32's smallest subnormal, 2^−149, is at least 2^−749, and sums of
/// such products are multiples of 2^−801 (each product is), so zero or
/// far above f64's smallest normal, 2^−1022.
pub const FLUSH_BELOW: f64 = f64::from_bits((1023 - 600) << 52);

/// `value`, or 0 if its magnitude is below [`FLUSH_BELOW`]: what a
/// caller's weight is before it meets a row. The weight is the caller's,
/// not private, so the branch shows nothing.
pub fn flush_tiny(value: f64) -> f64 {
    if value.abs() < FLUSH_BELOW {
        0.0
    } else {
        value
    }
}

/// 1/(1 + e^−z), to within 4 ulp for |z| ≤ 40 and 4.3·10⁻¹⁸ beyond, in
/// the same operations for every finite z.
pub fn logistic(z: f64) -> f64 {
    1.0 / (1.0 + exp_bounded((-z).clamp(-LOGISTIC_CLAMP, LOGISTIC_CLAMP)))
}

/// 1.5·2^52: adding it rounds a float of magnitude below 2^51 to the
/// nearest integer (ties to even) in its low bits, without a branch.
pub(super) const ROUNDER: f64 = 6755399441055744.0;

/// ln 2 split so that k·LN2_HIGH is exact for |k| < 2^11 (Cody & Waite
/// 1980; the split of fdlibm's e_exp.c).
const LN2_HIGH: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LOW: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);

/// 1/n! for n = 0 to 13: Taylor's series of e^r on |r| ≤ ln2/2 has
/// remainder below (ln2/2)^14/14! < 5·10⁻¹⁸, a 20th of an ulp.
const INVERSE_FACTORIALS: [f64; 14] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5_040.0,
    1.0 / 40_320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// 2^−60: below it e^r rounds to 1 whatever r is, and r² would be
/// subnormal, so r is taken as 0.
const NEGLIGIBLE: f64 = f64::from_bits((1023 - 60) << 52);

/// e^x for |x| ≤ 40: x = k·ln2 + r with k = round(x/ln2) and |r| ≤ ln2/2,
/// e^r by Estrin's scheme (pairs in r, then r², then r⁴: a third of
/// Horner's chain of dependent operations), 2^k written into the exponent
/// bits (k ∈ [−58, 58], so the result is a normal float).
fn exp_bounded(x: f64) -> f64 {
    let c = INVERSE_FACTORIALS;
    let k = (x * std::f64::consts::LOG2_E + ROUNDER) - ROUNDER;
    let r = (x - k * LN2_HIGH) - k * LN2_LOW;
    // A multiplication by 0 or 1, not a branch.
    let r = r * f64::from(u8::from(r.abs() >= NEGLIGIBLE));
    let (r2, pairs): (f64, [f64; 7]) =
        (r * r, std::array::from_fn(|j| c[2 * j] + c[2 * j + 1] * r));
    let r4 = r2 * r2;
    let low = pairs[0] + pairs[1] * r2;
    let middle = pairs[2] + pairs[3] * r2;
    let high = pairs[4] + pairs[5] * r2;
    let series = low + r4 * (middle + r4 * (high + r4 * pairs[6]));
    let power = f64::from_bits(((k as i64 + 1023) as u64) << 52);
    series * power
}

#[cfg(test)]
#[path = "constant_time_tests.rs"]
mod tests;
