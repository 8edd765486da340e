//! Evaluation metrics for binary classifiers.
//!
//! Conventions shared by every function here:
//! - predictions are `&[f64]`: probabilities of the positive class in
//!   `[0, 1]` (for [`auc`], any scores whose order matters);
//! - labels are `&[u8]`: `0` is negative, any other value (normally `1`) is
//!   positive. Note that the fitting code in [`crate::logistic`] takes labels
//!   as ±1 `f64` instead, the form its objective is written in;
//! - predictions and labels must have the same length (else a panic: it is a
//!   programming error, not a data condition);
//! - averages over no data are NaN (0/0), not a made-up number.

/// Decision threshold conventionally used with [`accuracy`].
pub const DEFAULT_THRESHOLD: f64 = 0.5;

/// Area under the ROC curve: the probability that a random positive scores
/// above a random negative, ties counting one half (the Mann–Whitney U
/// statistic with average ranks, divided by `n₊·n₋`). O(N log N).
///
/// `None` if either class is absent (the AUC is undefined) or a score is NaN.
///
/// # Panics
/// If `scores.len() != labels.len()`.
#[must_use]
pub fn auc(scores: &[f64], labels: &[u8]) -> Option<f64> {
    assert_same_length(scores.len(), labels.len());
    if scores.iter().any(|s| s.is_nan()) {
        return None;
    }
    let mut pairs: Vec<(f64, bool)> = scores
        .iter()
        .zip(labels)
        .map(|(&s, &l)| (s, l != 0))
        .collect();
    pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));

    // Walk tie groups upwards. Twice U is an integer, so count it exactly:
    // each positive beats every negative below its group (2 each) and ties
    // with every negative inside it (1 each).
    let mut twice_u: u128 = 0;
    let mut negatives_below: u128 = 0;
    let mut positives: u128 = 0;
    let mut start = 0;
    while start < pairs.len() {
        let score = pairs[start].0;
        // `==` (not total order) so that −0.0 and +0.0 form one group.
        let end = start + pairs[start..].iter().take_while(|p| p.0 == score).count();
        let group_positives = pairs[start..end].iter().filter(|p| p.1).count() as u128;
        let group_negatives = (end - start) as u128 - group_positives;
        twice_u += group_positives * (2 * negatives_below + group_negatives);
        negatives_below += group_negatives;
        positives += group_positives;
        start = end;
    }
    let negatives = negatives_below;
    if positives == 0 || negatives == 0 {
        return None;
    }
    Some(twice_u as f64 / (2 * positives * negatives) as f64)
}

/// Probabilities are clipped to `[ε, 1 − ε]` with this ε before taking logs,
/// so a single confident mistake costs ≈ 34.5 nats instead of infinity.
pub const LOG_LOSS_EPSILON: f64 = 1e-15;

/// Mean negative log-likelihood (cross-entropy, natural log) of the labels,
/// with probabilities clipped to `[1e-15, 1 − 1e-15]`. NaN if empty.
///
/// # Panics
/// If `probabilities.len() != labels.len()`.
#[must_use]
pub fn log_loss(probabilities: &[f64], labels: &[u8]) -> f64 {
    assert_same_length(probabilities.len(), labels.len());
    let total: f64 = probabilities
        .iter()
        .zip(labels)
        .map(|(&p, &l)| {
            let p = p.clamp(LOG_LOSS_EPSILON, 1.0 - LOG_LOSS_EPSILON);
            if l != 0 { -p.ln() } else { -(1.0 - p).ln() }
        })
        .sum();
    total / probabilities.len() as f64
}

/// Fraction of rows classified correctly when predicting positive iff
/// `probability ≥ threshold` (normally [`DEFAULT_THRESHOLD`]). NaN if empty.
///
/// # Panics
/// If `probabilities.len() != labels.len()`.
#[must_use]
pub fn accuracy(probabilities: &[f64], labels: &[u8], threshold: f64) -> f64 {
    assert_same_length(probabilities.len(), labels.len());
    let correct = probabilities
        .iter()
        .zip(labels)
        .filter(|&(&p, &l)| (p >= threshold) == (l != 0))
        .count();
    correct as f64 / probabilities.len() as f64
}

/// One bin of a reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibrationBin {
    /// Inclusive lower edge.
    pub lower: f64,
    /// Upper edge: exclusive, except that the last bin includes 1.
    pub upper: f64,
    /// Rows whose probability falls in the bin (never 0: empty bins are left out).
    pub count: usize,
    /// Mean predicted probability of those rows.
    pub mean_predicted: f64,
    /// Fraction of those rows that are positive.
    pub observed_rate: f64,
}

/// Reliability diagram with `bins` equal-width bins over `[0, 1]`.
///
/// Bin `i` covers `[i/bins, (i+1)/bins)`, the last one also `1`.
/// Probabilities outside `[0, 1]` go to the nearest end bin; NaN
/// probabilities are skipped. Empty bins are omitted, so every returned bin
/// has meaningful means; returned bins are in increasing order.
/// `bins == 0` yields no bins.
///
/// # Panics
/// If `probabilities.len() != labels.len()`.
#[must_use]
pub fn calibration(probabilities: &[f64], labels: &[u8], bins: usize) -> Vec<CalibrationBin> {
    assert_same_length(probabilities.len(), labels.len());
    if bins == 0 {
        return Vec::new();
    }
    let mut counts = vec![0usize; bins];
    let mut predicted_sums = vec![0.0f64; bins];
    let mut positives = vec![0usize; bins];
    for (&p, &l) in probabilities.iter().zip(labels) {
        if p.is_nan() {
            continue;
        }
        // Float-to-int `as` saturates, and negatives become 0.
        let index = ((p * bins as f64).floor() as usize).min(bins - 1);
        counts[index] += 1;
        predicted_sums[index] += p;
        positives[index] += usize::from(l != 0);
    }
    (0..bins)
        .filter(|&i| counts[i] > 0)
        .map(|i| CalibrationBin {
            lower: i as f64 / bins as f64,
            upper: (i + 1) as f64 / bins as f64,
            count: counts[i],
            mean_predicted: predicted_sums[i] / counts[i] as f64,
            observed_rate: positives[i] as f64 / counts[i] as f64,
        })
        .collect()
}

/// Expected calibration error: the count-weighted mean over bins of
/// `|mean_predicted − observed_rate|`. NaN if the bins hold no rows.
#[must_use]
pub fn expected_calibration_error(bins: &[CalibrationBin]) -> f64 {
    let total: usize = bins.iter().map(|b| b.count).sum();
    let weighted: f64 = bins
        .iter()
        .map(|b| b.count as f64 * (b.mean_predicted - b.observed_rate).abs())
        .sum();
    weighted / total as f64
}

fn assert_same_length(predictions: usize, labels: usize) {
    assert_eq!(
        predictions, labels,
        "predictions and labels differ in length"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// O(N²) definition of AUC, to check the sort-based version against.
    fn auc_by_pairs(scores: &[f64], labels: &[u8]) -> f64 {
        let mut wins = 0.0;
        let mut pairs = 0.0;
        for (i, &si) in scores.iter().enumerate() {
            for (j, &sj) in scores.iter().enumerate() {
                if labels[i] == 1 && labels[j] == 0 {
                    pairs += 1.0;
                    if si > sj {
                        wins += 1.0;
                    } else if si == sj {
                        wins += 0.5;
                    }
                }
            }
        }
        wins / pairs
    }

    #[test]
    fn auc_hand_examples() {
        assert_eq!(auc(&[0.1, 0.4, 0.35, 0.8], &[0, 0, 1, 1]), Some(0.75));
        assert_eq!(auc(&[0.5, 0.5, 0.5, 0.5], &[0, 1, 0, 1]), Some(0.5));
        assert_eq!(auc(&[0.1, 0.2, 0.3], &[0, 0, 1]), Some(1.0));
        assert_eq!(auc(&[0.1, 0.2, 0.3], &[1, 1, 0]), Some(0.0));
        // One tie across classes: pairs (0.3+, 0.3−) = ½, (0.3+, 0.1−) = 1.
        assert_eq!(auc(&[0.1, 0.3, 0.3], &[0, 0, 1]), Some(0.75));
        // −0.0 and +0.0 are the same score.
        assert_eq!(auc(&[-0.0, 0.0], &[0, 1]), Some(0.5));
        // Labels other than 0 count as positive.
        assert_eq!(auc(&[0.1, 0.9], &[0, 7]), Some(1.0));
    }

    #[test]
    fn auc_undefined_cases() {
        assert_eq!(auc(&[0.1, 0.2], &[1, 1]), None);
        assert_eq!(auc(&[0.1, 0.2], &[0, 0]), None);
        assert_eq!(auc(&[], &[]), None);
        assert_eq!(auc(&[0.1, f64::NAN], &[0, 1]), None);
    }

    #[test]
    fn auc_matches_pairwise_definition_with_many_ties() {
        let mut state = 12345u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        let scores: Vec<f64> = (0..500).map(|_| (next() % 20) as f64 / 20.0).collect();
        let labels: Vec<u8> = scores
            .iter()
            .map(|&s| u8::from((next() % 100) as f64 / 100.0 < s))
            .collect();
        let fast = auc(&scores, &labels).unwrap();
        let slow = auc_by_pairs(&scores, &labels);
        assert!((fast - slow).abs() < 1e-12, "{fast} vs {slow}");
    }

    #[test]
    #[should_panic(expected = "differ in length")]
    fn length_mismatch_panics() {
        let _ = auc(&[0.1, 0.2], &[1]);
    }

    #[test]
    fn log_loss_hand_examples() {
        let got = log_loss(&[0.9, 0.2, 0.5], &[1, 0, 1]);
        let expected = -(0.9f64.ln() + 0.8f64.ln() + 0.5f64.ln()) / 3.0;
        assert!((got - expected).abs() < 1e-15);
        // Clipping: a certain mistake costs −ln(1e-15), not infinity.
        // (1 − (1 − 1e-15) is 1.11e-15 in f64, hence the loose tolerance.)
        let clipped = log_loss(&[0.0, 1.0], &[1, 0]);
        assert!((clipped - -(1e-15f64).ln()).abs() < 0.1, "{clipped}");
        assert!(log_loss(&[1.0, 0.0], &[1, 0]) < 1e-14);
        assert!(log_loss(&[], &[]).is_nan());
    }

    #[test]
    fn accuracy_hand_examples() {
        let p = [0.9, 0.2, 0.5, 0.49, 0.7];
        let y = [1, 0, 1, 1, 0];
        assert_eq!(accuracy(&p, &y, DEFAULT_THRESHOLD), 0.6);
        // At 0.8 only 0.9 is called positive: right on rows 0, 1 and 4.
        assert_eq!(accuracy(&p, &y, 0.8), 0.6);
        assert_eq!(accuracy(&p, &y, 0.0), 0.6);
        assert_eq!(accuracy(&p, &y, 0.95), 0.4);
        assert!(accuracy(&[], &[], 0.5).is_nan());
    }

    #[test]
    fn calibration_and_ece_hand_example() {
        // Four bins of width 0.25.
        let p = [0.1, 0.2, 0.3, 0.9, 0.95, 1.0, 0.6];
        let y = [0, 1, 1, 1, 1, 0, 1];
        let bins = calibration(&p, &y, 4);
        let expected = [
            // [0, 0.25): 0.1, 0.2 → mean 0.15, rate 1/2
            (0.0, 0.25, 2, 0.15, 0.5),
            // [0.25, 0.5): 0.3 → rate 1
            (0.25, 0.5, 1, 0.3, 1.0),
            // [0.5, 0.75): 0.6 → rate 1
            (0.5, 0.75, 1, 0.6, 1.0),
            // [0.75, 1]: 0.9, 0.95, 1.0 → mean 0.95, rate 2/3
            (0.75, 1.0, 3, 0.95, 2.0 / 3.0),
        ];
        assert_eq!(bins.len(), expected.len());
        for (bin, &(lower, upper, count, mean, rate)) in bins.iter().zip(&expected) {
            assert_eq!((bin.lower, bin.upper, bin.count), (lower, upper, count));
            assert!((bin.mean_predicted - mean).abs() < 1e-15, "{bin:?}");
            assert!((bin.observed_rate - rate).abs() < 1e-15, "{bin:?}");
        }
        // ECE = (2·0.35 + 1·0.7 + 1·0.4 + 3·(0.95 − 2/3)) / 7 = 2.65 / 7
        let ece = expected_calibration_error(&bins);
        assert!((ece - 2.65 / 7.0).abs() < 1e-15, "{ece}");
    }

    #[test]
    fn calibration_edges() {
        // Empty bins are omitted; out-of-range values go to the end bins;
        // NaN is skipped.
        let bins = calibration(&[-0.5, 0.05, 1.5, f64::NAN], &[0, 0, 1, 1], 10);
        assert_eq!(bins.len(), 2);
        assert_eq!((bins[0].lower, bins[0].count), (0.0, 2));
        assert_eq!((bins[1].upper, bins[1].count), (1.0, 1));
        assert!(calibration(&[0.5], &[1], 0).is_empty());
        assert!(expected_calibration_error(&[]).is_nan());
        // Perfectly calibrated.
        let bins = calibration(&[0.5, 0.5], &[0, 1], 2);
        assert_eq!(expected_calibration_error(&bins), 0.0);
    }
}
