//! Training on a release's feature map φ(x) = (v(x), a): the trainer fits
//! θ on rows with an implicit intercept column of 1, so it gets the rows
//! v(x) and the release's intercept term divided by a, which makes the
//! trained intercept the logit's additive constant.

use dpgate_api_types::FeatureMap;
use ndarray::Array2;
use rayon::prelude::*;

use crate::trainer::NoisyDot;

/// v(x) of every scaled row x, where they are (as [`crate::features::Scaling::scale`]
/// scales them), row by row on all cores.
pub fn map_rows(map: &FeatureMap, scaled: Array2<f64>) -> Array2<f64> {
    let mut rows = if scaled.is_standard_layout() {
        scaled
    } else {
        scaled.as_standard_layout().into_owned()
    };
    let width = rows.ncols().max(1);
    let values = rows
        .as_slice_mut()
        .expect("BUG: an array in standard layout is one slice");
    values.par_chunks_mut(width).for_each_init(
        || vec![0.0; width],
        |x, row| {
            x.copy_from_slice(row);
            map.apply(x, row);
        },
    );
    rows
}

/// The release's (1/N)·Σ yᵢ·(v(xᵢ), a) + noise as what the trainer's
/// rows (v(x), 1) need: the intercept term over a.
pub fn noisy_dot(map: &FeatureMap, noisy_dot: &[f64], noisy_intercept: Option<f64>) -> NoisyDot {
    NoisyDot {
        dot: noisy_dot.to_vec(),
        intercept: noisy_intercept.map(|b| b / map.intercept_weight),
    }
}

#[cfg(test)]
mod tests {
    use dpgate_api_types::WalrMap;
    use ndarray::ShapeBuilder;

    use super::*;

    #[test]
    fn rows_are_mapped_one_by_one_and_the_intercept_term_unweighted() {
        let map = FeatureMap {
            name: WalrMap::Auto,
            centre: vec![0.5, 0.25],
            radius: Some(0.5),
            intercept_weight: 0.125,
        };
        let scaled = ndarray::array![[0.5, 0.25], [0.75, 0.25], [1.0, 1.0]];
        let mapped = map_rows(&map, scaled.clone());
        for (row, mapped) in scaled.rows().into_iter().zip(mapped.rows()) {
            let mut v = [0.0; 2];
            map.apply(row.as_slice().unwrap(), &mut v);
            assert_eq!(mapped.to_vec(), v);
        }
        assert_eq!(mapped.row(1).to_vec(), [0.25, 0.0]);
        // A column-major matrix is mapped by rows all the same.
        let mut column_major = Array2::zeros((3, 2).f());
        column_major.assign(&scaled);
        assert!(!column_major.is_standard_layout());
        assert_eq!(map_rows(&map, column_major), mapped);
        let noisy = noisy_dot(&map, &[0.1, -0.2], Some(0.05));
        assert_eq!(noisy.dot, [0.1, -0.2]);
        assert_eq!(noisy.intercept, Some(0.4));
        assert_eq!(noisy_dot(&map, &[0.1, -0.2], None).intercept, None);
    }
}
