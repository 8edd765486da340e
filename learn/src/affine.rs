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

#[cfg(test)]
mod tests {
    use super::unscale;

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
