//! Weights fitted on features scaled into [0, 1] by declared or observed
//! bounds, expressed over the raw features instead.

/// With xⱼ = (rawⱼ − minⱼ)/(maxⱼ − minⱼ), returns (a, c) such that
/// Σⱼ wⱼ·xⱼ + b = Σⱼ aⱼ·rawⱼ + c. A column with max ≤ min scales to the
/// constant 0, so its raw weight is 0.
#[must_use]
pub fn unscale(weights: &[f64], intercept: f64, min: &[f64], max: &[f64]) -> (Vec<f64>, f64) {
    let mut raw_intercept = intercept;
    let raw = weights
        .iter()
        .zip(min.iter().zip(max))
        .map(|(&weight, (&low, &high))| {
            let range = high - low;
            if range > 0.0 {
                raw_intercept -= weight * low / range;
                weight / range
            } else {
                0.0
            }
        })
        .collect();
    (raw, raw_intercept)
}

/// The inverse of [`unscale`]: with xⱼ = (rawⱼ − minⱼ)/(maxⱼ − minⱼ),
/// returns (w, b) such that Σⱼ aⱼ·rawⱼ + c = Σⱼ wⱼ·xⱼ + b for every raw row
/// in the bounds. A column with max ≤ min is the constant minⱼ, so its term
/// goes into b.
#[must_use]
pub fn rescale(raw: &[f64], raw_intercept: f64, min: &[f64], max: &[f64]) -> (Vec<f64>, f64) {
    let mut intercept = raw_intercept;
    let weights = raw
        .iter()
        .zip(min.iter().zip(max))
        .map(|(&weight, (&low, &high))| {
            intercept += weight * low;
            let range = high - low;
            if range > 0.0 { weight * range } else { 0.0 }
        })
        .collect();
    (weights, intercept)
}

#[cfg(test)]
mod tests {
    use super::{rescale, unscale};

    #[test]
    fn rescaling_undoes_unscaling() {
        let (min, max) = ([2.0, -10.0, 0.5], [4.0, 10.0, 0.75]);
        let (weights, intercept) = ([1.5, -0.25, 9.0], 0.3);
        let (raw, raw_intercept) = unscale(&weights, intercept, &min, &max);
        let (back, back_intercept) = rescale(&raw, raw_intercept, &min, &max);
        for (a, b) in back.iter().zip(weights) {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
        assert!((back_intercept - intercept).abs() < 1e-12);
        // A constant column's raw term is folded into the intercept.
        let (scaled, b) = rescale(&[2.0], 1.0, &[3.0], &[3.0]);
        assert_eq!((scaled, b), (vec![0.0], 7.0));
    }

    #[test]
    fn raw_weights_give_the_scaled_logits() {
        let (min, max) = ([2.0, -10.0, 7.0], [4.0, 10.0, 7.0]);
        let (weights, intercept) = ([1.5, -0.25, 9.0], 0.3);
        let (raw, raw_intercept) = unscale(&weights, intercept, &min, &max);
        assert_eq!(raw[2], 0.0);
        for row in [[2.0, 10.0, 7.0], [4.0, -10.0, 7.0], [3.0, 0.0, 7.0]] {
            let scaled: f64 = (0..3)
                .map(|j| {
                    let range = max[j] - min[j];
                    let x = if range > 0.0 {
                        (row[j] - min[j]) / range
                    } else {
                        0.0
                    };
                    weights[j] * x
                })
                .sum::<f64>()
                + intercept;
            let unscaled: f64 =
                row.iter().zip(&raw).map(|(x, a)| x * a).sum::<f64>() + raw_intercept;
            assert!((scaled - unscaled).abs() < 1e-12, "{scaled} vs {unscaled}");
        }
    }
}
