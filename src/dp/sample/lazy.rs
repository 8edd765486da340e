//! Exact exponential and normal deviates as lazily refined real numbers.
//!
//! A [`LazyUniform`] is a uniform real in [0, 1) of which only the leading
//! 32-bit digits a computation has asked for were ever drawn. The samplers
//! below (von Neumann's exponential, Karney's normal) decide everything by
//! comparing such numbers, which draws digits until the first difference.
//! Their accept decisions therefore depend only on digits already drawn: the
//! undrawn digits of the result stay independent and uniform, and filling
//! them in on demand yields a draw from exactly the target distribution, to
//! any precision a later computation needs (Karney 2016, §2).
//!
//! # Citations
//! - J. von Neumann. Various Techniques Used in Connection with Random
//!   Digits. NBS Applied Math. Series 12, 1951.
//! - C. F. F. Karney. Sampling Exactly from the Normal Distribution. ACM
//!   TOMS 42(1), 2016 (Algorithm N; ported from RandomLib's ExactNormal and
//!   ExactExponential, MIT licence).

use num_bigint::{BigInt, BigUint};
use rand::Rng;

/// A uniform real in [0, 1) whose digits (base 2³², most significant first)
/// are drawn on demand.
#[derive(Debug, Default)]
pub(super) struct LazyUniform {
    digits: Vec<u32>,
}

impl LazyUniform {
    fn digit<R: Rng + ?Sized>(&mut self, index: usize, rng: &mut R) -> u32 {
        while self.digits.len() <= index {
            self.digits.push(rng.next_u32());
        }
        self.digits[index]
    }

    /// Whether self < other, drawing digits of both until they differ (the
    /// two are equal with probability 0).
    fn less_than<R: Rng + ?Sized>(&mut self, other: &mut LazyUniform, rng: &mut R) -> bool {
        let mut index = 0;
        loop {
            let (mine, theirs) = (self.digit(index, rng), other.digit(index, rng));
            if mine != theirs {
                return mine < theirs;
            }
            index += 1;
        }
    }
}

/// A real number ±(integer + fraction) whose fraction is a [`LazyUniform`].
#[derive(Debug)]
pub(super) struct LazyReal {
    negative: bool,
    integer: u64,
    fraction: LazyUniform,
}

impl LazyReal {
    /// The interval [lo, hi] holding the value, in units of 2^−(32·words):
    /// the drawn digits are extended to `words` and the rest may be anything.
    pub(super) fn bounds<R: Rng + ?Sized>(
        &mut self,
        words: usize,
        rng: &mut R,
    ) -> (BigInt, BigInt) {
        let mut low = BigUint::from(self.integer);
        for index in 0..words {
            low = (low << 32u32) + self.fraction.digit(index, rng);
        }
        let low = BigInt::from(low);
        let high = &low + 1u8;
        if self.negative {
            (-high, -low)
        } else {
            (low, high)
        }
    }

    /// The value rounded to double precision (64 drawn fraction bits, so
    /// the rounding is the only error).
    pub(super) fn approximate<R: Rng + ?Sized>(&mut self, rng: &mut R) -> f64 {
        let fraction = f64::from(self.fraction.digit(0, rng)) / 2f64.powi(32)
            + f64::from(self.fraction.digit(1, rng)) / 2f64.powi(64);
        let magnitude = self.integer as f64 + fraction;
        if self.negative { -magnitude } else { magnitude }
    }
}

/// True with probability e^{−p}: von Neumann's method, counting the length
/// of a decreasing run p > w > v > w′ > …; the run ends at an even length
/// with probability Σ_{n even} (pⁿ/n! − pⁿ⁺¹/(n+1)!) = e^{−p}.
fn exp_fraction<R: Rng + ?Sized>(p: &mut LazyUniform, rng: &mut R) -> bool {
    let mut w = LazyUniform::default();
    if !w.less_than(p, rng) {
        return true;
    }
    loop {
        let mut v = LazyUniform::default();
        if !v.less_than(&mut w, rng) {
            return false;
        }
        w = LazyUniform::default();
        if !w.less_than(&mut v, rng) {
            return true;
        }
    }
}

/// An exact draw from Exp(1): the fraction by rejection with
/// [`exp_fraction`], the integer part as the number of rejections.
pub(super) fn exact_exponential<R: Rng + ?Sized>(rng: &mut R) -> LazyReal {
    let mut integer = 0;
    loop {
        let mut fraction = LazyUniform::default();
        if exp_fraction(&mut fraction, rng) {
            return LazyReal {
                negative: false,
                integer,
                fraction,
            };
        }
        integer += 1;
    }
}

/// True with probability e^{−1/2} (Karney's ExpProbH).
fn exp_half<R: Rng + ?Sized>(rng: &mut R) -> bool {
    let mut p = LazyUniform::default();
    if p.digit(0, rng) >> 31 == 1 {
        return true;
    }
    loop {
        let mut q = LazyUniform::default();
        if !q.less_than(&mut p, rng) {
            return false;
        }
        p = LazyUniform::default();
        if !p.less_than(&mut q, rng) {
            return true;
        }
    }
}

/// True with probability e^{−n/2}.
fn exp_halves<R: Rng + ?Sized>(n: u64, rng: &mut R) -> bool {
    (0..n).all(|_| exp_half(rng))
}

/// The number of successes before the first failure of Bernoulli(e^{−1/2}).
fn count_exp_halves<R: Rng + ?Sized>(rng: &mut R) -> u64 {
    let mut count = 0;
    while exp_half(rng) {
        count += 1;
    }
    count
}

fn coin<R: Rng + ?Sized>(rng: &mut R) -> bool {
    rng.next_u32() & 1 == 1
}

/// 1 with probability 2k/(2k+2), 0 (meaning "succeed with probability x")
/// with probability 1/(2k+2), −1 with probability 1/(2k+2): the exact
/// comparison of a uniform u with (2k)/(2k+2) and (2k+1)/(2k+2), 15 bits at
/// a time (Karney's Choose).
fn choose<R: Rng + ?Sized>(k: u64, rng: &mut R) -> i8 {
    let m = 2 * k as i128 + 2;
    let (mut below, mut above) = (m - 2, m - 1);
    loop {
        let digit = i128::from(rng.next_u32() & 0x7fff) * m;
        below = ((below << 15) - digit).max(0);
        if below >= m {
            return 1;
        }
        above = ((above << 15) - digit).min(m);
        if above <= 0 {
            return -1;
        }
        if below == 0 && above == m {
            return 0;
        }
    }
}

/// An exact draw from N(0, 1): Karney 2016, Algorithm N.
///
/// The integer part k ≥ 0 is chosen with probability ∝ e^{−k²/2}, the
/// fraction x from e^{−x(2k+x)/2} by k + 1 rounds of a von Neumann-style
/// comparison run that needs only comparisons of uniforms, and the sign by
/// a fair coin.
pub(super) fn exact_normal<R: Rng + ?Sized>(rng: &mut R) -> LazyReal {
    loop {
        let k = count_exp_halves(rng);
        if !exp_halves(k * k.saturating_sub(1), rng) {
            continue;
        }
        let mut x = LazyUniform::default();
        let mut accepted = true;
        for _ in 0..=k {
            accepted = fraction_round(k, &mut x, rng);
            if !accepted {
                break;
            }
        }
        if accepted {
            return LazyReal {
                negative: coin(rng),
                integer: k,
                fraction: x,
            };
        }
    }
}

/// One of the k + 1 rounds of Algorithm N's step for the fraction x: true
/// with probability e^{−x(2k+x)/(2(k+1))}, by a run of comparisons whose
/// parity decides.
fn fraction_round<R: Rng + ?Sized>(k: u64, x: &mut LazyUniform, rng: &mut R) -> bool {
    let mut p = LazyUniform::default();
    let mut even = true;
    let mut first = true;
    loop {
        let mut q = LazyUniform::default();
        if first {
            // Succeed with probability (x + 2k)/(2k + 2), then test q < x.
            match choose(k, rng) {
                -1 => break,
                1 => {
                    if !q.less_than(x, rng) {
                        break;
                    }
                }
                _ => {
                    // x > max(q, p) for a fresh p.
                    p = LazyUniform::default();
                    if !(q.less_than(x, rng) && p.less_than(x, rng)) {
                        break;
                    }
                }
            }
        } else {
            if k == 0 && coin(rng) {
                break;
            }
            if !q.less_than(&mut p, rng) {
                break;
            }
            let y = if k == 0 { 0 } else { choose(k, rng) };
            if y < 0 {
                break;
            }
            if y == 0 {
                p = LazyUniform::default();
                if !p.less_than(x, rng) {
                    break;
                }
            }
        }
        p = q;
        even = !even;
        first = false;
    }
    even
}

#[cfg(test)]
#[path = "lazy_tests.rs"]
mod tests;
