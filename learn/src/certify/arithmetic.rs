//! The error-free and error-bounded floating-point steps the certificate
//! is built from (see the module above for each one's bound).

use ndarray::Array1;

use super::*;

/// γₙ = nu/(1 − nu), or +∞ once nu ≥ ½ (no bound claimed there).
pub(super) fn gamma(n: f64) -> f64 {
    let nu = n * UNIT_ROUNDOFF;
    if nu < 0.5 {
        nu / (1.0 - nu)
    } else {
        f64::INFINITY
    }
}

/// K = ⌈k/8⌉ + 4: the most roundings a product goes through in
/// [`lane_dot`].
pub(super) fn margin_depth(k: usize) -> f64 {
    (k.div_ceil(LANES) + 4) as f64
}

/// (fl(Σ xⱼwⱼ), fl(Σ |xⱼwⱼ|)) in 8 lanes, each summed in order, then added
/// as a balanced tree: every product sees at most ⌈k/8⌉ + 4 roundings.
#[inline]
pub(super) fn lane_dot(x: &[f64], w: &[f64]) -> (f64, f64) {
    let mut sum = [0.0f64; LANES];
    let mut abs = [0.0f64; LANES];
    let xs = x.chunks_exact(LANES);
    let ws = w.chunks_exact(LANES);
    let (x_tail, w_tail) = (xs.remainder(), ws.remainder());
    for (xc, wc) in xs.zip(ws) {
        for (((s, a), &xv), &wv) in sum.iter_mut().zip(abs.iter_mut()).zip(xc).zip(wc) {
            let p = xv * wv;
            *s += p;
            *a += p.abs();
        }
    }
    for (((s, a), &xv), &wv) in sum.iter_mut().zip(abs.iter_mut()).zip(x_tail).zip(w_tail) {
        let p = xv * wv;
        *s += p;
        *a += p.abs();
    }
    (tree(&sum), tree(&abs))
}

pub(super) fn tree(v: &[f64; LANES]) -> f64 {
    ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
}

/// Knuth's TwoSum: s + e = a + b exactly, s = fl(a + b).
#[inline]
pub(super) fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bv = s - a;
    (s, (a - (s - bv)) + (b - bv))
}

/// A block's Sum2 of the gradient's terms (running sums and their
/// compensations) and the rows' part of Ê, by coordinate.
pub(super) struct BlockSums {
    pub(super) sum: Vec<f64>,
    pub(super) compensation: Vec<f64>,
    pub(super) error: Vec<f64>,
}

impl BlockSums {
    pub(super) fn new(k: usize) -> BlockSums {
        BlockSums {
            sum: vec![0.0; k],
            compensation: vec![0.0; k],
            error: vec![0.0; k],
        }
    }
}

/// ‖v‖₂ in floating point.
pub(super) fn norm(v: &Array1<f64>) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}
