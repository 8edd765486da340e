//! The solver's passes over the rows: J(w), its gradient and the weighted
//! Gram matrix of its Hessian, any of them in one pass, the rows split into
//! blocks on all cores.

use std::ops::Range;

use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, ArrayView1, ArrayView2, s};

/// Rows per block. The loss and gradient are summed per block and the
/// blocks added in order, so they are the same floats on any number of
/// cores; a block's f32 Hessian product is accumulated in f32 over these
/// rows at most, then added into f64, which bounds its rounding at about
/// 2⁻²⁴ times the block's length relative to the entries.
pub(crate) const BLOCK_ROWS: usize = 2_048;

/// How a Hessian pass multiplies: Newton's phase tolerates an approximate
/// Hessian (its steps are checked by a line search and a certificate),
/// and a single-precision product is about twice as fast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precision {
    Single,
    Double,
}

/// What one pass sums over the rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted {
    pub loss: bool,
    pub gradient: bool,
    pub hessian: Option<Precision>,
}

/// A pass's sums: `Σᵢ log(1 + exp(−yᵢ mᵢ))`, `Σᵢ −yᵢ σ(−yᵢ mᵢ) xᵢ` and
/// `Σᵢ dᵢ xᵢxᵢᵀ` with `mᵢ = wᵀxᵢ` and `dᵢ = σ(mᵢ)σ(−mᵢ)`, those not wanted
/// zero (the gradient then empty, the Hessian `None`).
#[derive(Debug)]
pub(crate) struct Sums {
    pub loss: f64,
    pub gradient: Array1<f64>,
    pub hessian: Option<Array2<f64>>,
}

/// ln(1 + x) for x in [0, 1], within a few ulps: ln(u)·x/(u − 1) for
/// u = fl(1 + x), whose rounding the quotient cancels (Goldberg, "What
/// every computer scientist should know about floating-point arithmetic",
/// 1991, Theorem 4). The library's `ln` is about twice as fast as its
/// `ln_1p`, and the loss takes one a row.
fn ln_1p(x: f64) -> f64 {
    let u = 1.0 + x;
    if u == 1.0 { x } else { u.ln() * x / (u - 1.0) }
}

/// One core's part of a pass: its blocks' losses and gradients, in block
/// order, and its Hessian sum.
struct Part {
    blocks: Vec<(f64, Array1<f64>)>,
    hessian: Option<Array2<f64>>,
    /// Reused by each block: the rows' curvatures, and the rows (f32 only)
    /// and the rows scaled by their curvature as the product reads them.
    curvatures: Vec<f64>,
    plain: Array2<f32>,
    scaled_single: Array2<f32>,
    scaled_double: Array2<f64>,
    product: Array2<f32>,
}

impl Part {
    fn new(k: usize, wanted: Wanted) -> Part {
        let rows = |precision| match wanted.hessian {
            Some(wanted) if wanted == precision => BLOCK_ROWS,
            _ => 0,
        };
        let (single, double) = (rows(Precision::Single), rows(Precision::Double));
        Part {
            blocks: Vec::new(),
            hessian: wanted.hessian.map(|_| Array2::zeros((k, k))),
            curvatures: Vec::with_capacity(BLOCK_ROWS),
            plain: Array2::zeros((single, k)),
            scaled_single: Array2::zeros((single, k)),
            scaled_double: Array2::zeros((double, k)),
            product: Array2::zeros((if single > 0 { k } else { 0 }, k)),
        }
    }

    /// Adds the rows `rows`.
    fn add(
        &mut self,
        x: ArrayView2<'_, f64>,
        y: ArrayView1<'_, f64>,
        w: ArrayView1<'_, f64>,
        wanted: Wanted,
    ) {
        let mut gradient = Array1::<f64>::zeros(if wanted.gradient { x.ncols() } else { 0 });
        let mut loss = 0.0;
        self.curvatures.clear();
        for (row, &y) in x.outer_iter().zip(y) {
            let z = -y * row.dot(&w);
            // One exponential serves log(1 + e^z), σ(z) and σ(m)σ(−m), as
            // `log1p_exp` and `sigmoid` evaluate them.
            let e = (-z.abs()).exp();
            if wanted.loss {
                loss += z.max(0.0) + ln_1p(e);
            }
            if wanted.gradient {
                let sigma = if z >= 0.0 {
                    1.0 / (1.0 + e)
                } else {
                    e / (1.0 + e)
                };
                // d/dm log(1 + e^{−y m}) = −y σ(−y m)
                gradient.scaled_add(-y * sigma, &row);
            }
            if wanted.hessian.is_some() {
                // From the smaller factor σ(−|m|), which keeps full
                // relative precision where the other rounds to 1.
                let small = e / (1.0 + e);
                self.curvatures.push(small * (1.0 - small));
            }
        }
        self.blocks.push((loss, gradient));
        let Some(hessian) = self.hessian.as_mut() else {
            return;
        };
        let len = x.nrows();
        let curvatures = self.curvatures.iter();
        match wanted.hessian {
            Some(Precision::Single) => {
                let mut plain = self.plain.slice_mut(s![..len, ..]);
                let mut scaled = self.scaled_single.slice_mut(s![..len, ..]);
                for (((mut plain, mut scaled), row), &d) in plain
                    .outer_iter_mut()
                    .zip(scaled.outer_iter_mut())
                    .zip(x.outer_iter())
                    .zip(curvatures)
                {
                    plain.zip_mut_with(&row, |p, &v| *p = v as f32);
                    scaled.zip_mut_with(&row, |o, &v| *o = (d * v) as f32);
                }
                general_mat_mul(1.0, &plain.t(), &scaled, 0.0, &mut self.product);
                hessian.zip_mut_with(&self.product, |total, &value| *total += f64::from(value));
            }
            Some(Precision::Double) => {
                let mut scaled = self.scaled_double.slice_mut(s![..len, ..]);
                for ((mut out, row), &d) in
                    scaled.outer_iter_mut().zip(x.outer_iter()).zip(curvatures)
                {
                    out.zip_mut_with(&row, |o, &v| *o = d * v);
                }
                general_mat_mul(1.0, &x.t(), &scaled, 1.0, hessian);
            }
            None => {}
        }
    }
}

/// The rows of block `block` of `rows` rows.
pub(crate) fn block_range(block: usize, rows: usize) -> Range<usize> {
    block * BLOCK_ROWS..((block + 1) * BLOCK_ROWS).min(rows)
}

/// `run` over contiguous runs of `blocks` blocks, a run per core, the
/// answers in block order.
pub(crate) fn by_core<P: Send>(blocks: usize, run: impl Fn(Range<usize>) -> P + Sync) -> Vec<P> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(blocks)
        .max(1);
    if threads == 1 {
        return vec![run(0..blocks)];
    }
    let per_thread = blocks.div_ceil(threads);
    std::thread::scope(|scope| {
        let run = &run;
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let first = (thread * per_thread).min(blocks);
                scope.spawn(move || run(first..((thread + 1) * per_thread).min(blocks)))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(answer) => answer,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// The sums `wanted` at `w`, in one pass over the rows of `x` (labels
/// `y`), its blocks split between the cores in contiguous runs.
pub(crate) fn sums(
    x: ArrayView2<'_, f64>,
    y: ArrayView1<'_, f64>,
    w: ArrayView1<'_, f64>,
    wanted: Wanted,
) -> Sums {
    let (rows, k) = x.dim();
    let parts = by_core(rows.div_ceil(BLOCK_ROWS), |blocks| {
        let mut part = Part::new(k, wanted);
        for block in blocks {
            let range = block_range(block, rows);
            part.add(
                x.slice(s![range.clone(), ..]),
                y.slice(s![range]),
                w,
                wanted,
            );
        }
        part
    });
    let mut total = Sums {
        loss: 0.0,
        gradient: Array1::zeros(if wanted.gradient { k } else { 0 }),
        hessian: wanted.hessian.map(|_| Array2::zeros((k, k))),
    };
    for part in parts {
        for (loss, gradient) in part.blocks {
            total.loss += loss;
            if wanted.gradient {
                total.gradient += &gradient;
            }
        }
        if let (Some(sum), Some(hessian)) = (total.hessian.as_mut(), part.hessian) {
            *sum += &hessian;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::logistic_data;
    use crate::{log1p_exp, sigmoid};

    #[test]
    fn ln_1p_is_within_a_few_ulps_of_the_library_s() {
        let mut x = 1.0f64;
        while x > 1e-300 {
            for value in [x, x * 0.7, x * 0.99] {
                let (ours, library) = (ln_1p(value), value.ln_1p());
                assert!(
                    (ours - library).abs() <= 4.0 * f64::EPSILON * library,
                    "{value:e}"
                );
            }
            x *= 0.5;
        }
        assert_eq!(ln_1p(0.0), 0.0);
    }

    fn data(rows: usize, k: usize) -> (Array2<f64>, Array1<f64>, Array1<f64>) {
        let data = logistic_data(rows, k, 5);
        let x = data.x / (k as f64).sqrt();
        let y = data
            .y
            .iter()
            .map(|&y| if y == 1 { 1.0 } else { -1.0 })
            .collect();
        let w = (0..k).map(|j| 0.5 - j as f64 / k as f64).collect();
        (x, y, w)
    }

    const ALL: Wanted = Wanted {
        loss: true,
        gradient: true,
        hessian: Some(Precision::Double),
    };

    #[test]
    fn the_sums_are_the_rows_summed() {
        let (x, y, w) = data(3 * BLOCK_ROWS + 101, 7);
        let sums = sums(x.view(), y.view(), w.view(), ALL);
        let mut loss = 0.0;
        let mut gradient = Array1::<f64>::zeros(7);
        let mut hessian = Array2::<f64>::zeros((7, 7));
        for (row, &y) in x.outer_iter().zip(&y) {
            let m = row.dot(&w);
            loss += log1p_exp(-y * m);
            gradient.scaled_add(-y * sigmoid(-y * m), &row);
            let d = sigmoid(m) * sigmoid(-m);
            let column = row.insert_axis(ndarray::Axis(1));
            hessian.scaled_add(d, &column.dot(&column.t()));
        }
        assert!((sums.loss - loss).abs() <= 1e-9 * loss);
        assert!((&sums.gradient - &gradient).iter().all(|d| d.abs() <= 1e-9));
        let ours = sums.hessian.expect("asked for");
        assert!((&ours - &hessian).iter().all(|d| d.abs() <= 1e-9));

        let alone = |wanted| super::sums(x.view(), y.view(), w.view(), wanted);
        let loss_only = alone(Wanted {
            gradient: false,
            hessian: None,
            ..ALL
        });
        assert_eq!((loss_only.loss, loss_only.gradient.len()), (sums.loss, 0));
        assert!(loss_only.hessian.is_none());
        let hessian_only = alone(Wanted {
            loss: false,
            gradient: false,
            ..ALL
        });
        assert_eq!((hessian_only.loss, hessian_only.hessian), (0.0, Some(ours)));
    }

    #[test]
    fn single_precision_is_within_its_rounding_of_double() {
        let (x, y, w) = data(5 * BLOCK_ROWS + 33, 9);
        let hessian = |precision| {
            let wanted = Wanted {
                hessian: Some(precision),
                ..ALL
            };
            sums(x.view(), y.view(), w.view(), wanted)
                .hessian
                .expect("asked for")
        };
        let (single, double) = (hessian(Precision::Single), hessian(Precision::Double));
        let scale = double.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (a, b) in single.iter().zip(&double) {
            // f32 products summed over at most BLOCK_ROWS rows: far within
            // 2⁻²⁴·2048 ≈ 1.2·10⁻⁴ of the largest entry.
            assert!((a - b).abs() <= 1e-5 * scale, "{a} vs {b}");
        }
        assert!(single.iter().zip(&double).any(|(a, b)| a != b));
    }
}
