//! A model file against labelled data: AUC, log loss, accuracy and
//! calibration.

use std::io::Read;

use dpgate_learn::{accuracy, auc, calibration, expected_calibration_error, log_loss};
use serde::Serialize;

use crate::model_file::ModelFile;
use crate::predict::{FeatureColumns, column, line};

/// Calibration bins reported.
const BINS: usize = 10;

/// How well a model predicts labelled rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub rows: usize,
    pub positive_rate: f64,
    /// `None` when only one class is present.
    pub auc: Option<f64>,
    pub log_loss: f64,
    /// At threshold 0.5.
    pub accuracy: f64,
    pub expected_calibration_error: f64,
    pub calibration: Vec<Bin>,
}

/// One reliability-diagram bin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bin {
    pub lower: f64,
    pub upper: f64,
    pub count: usize,
    pub mean_predicted: f64,
    pub observed_rate: f64,
}

/// Scores `model` on CSV rows that hold its features (by name, any order,
/// other columns ignored) and the 0/1 `label` column.
///
/// # Errors
/// Missing columns, bad values, or no rows.
pub fn evaluate(model: &ModelFile, data: impl Read, label: &str) -> anyhow::Result<Evaluation> {
    let mut csv = csv::Reader::from_reader(data);
    let header = csv.headers()?.clone();
    let label_at = column(&header, label)?;
    let columns = FeatureColumns::find(model, &header)?;
    let mut probabilities = Vec::new();
    let mut labels = Vec::new();
    let mut row = Vec::with_capacity(model.weights.len());
    for record in csv.records() {
        let record = record?;
        let value = match record.get(label_at).unwrap_or_default().trim() {
            "0" => 0,
            "1" => 1,
            other => anyhow::bail!("line {}: label {other:?} is not 0 or 1", line(&record)),
        };
        columns.read(&record, &mut row)?;
        probabilities.push(model.predict(&row));
        labels.push(value);
    }
    anyhow::ensure!(!labels.is_empty(), "the data has no rows");
    let bins = calibration(&probabilities, &labels, BINS);
    Ok(Evaluation {
        rows: labels.len(),
        positive_rate: labels.iter().map(|&l| f64::from(l)).sum::<f64>() / labels.len() as f64,
        auc: auc(&probabilities, &labels),
        log_loss: log_loss(&probabilities, &labels),
        accuracy: accuracy(&probabilities, &labels, 0.5),
        expected_calibration_error: expected_calibration_error(&bins),
        calibration: bins
            .iter()
            .map(|bin| Bin {
                lower: bin.lower,
                upper: bin.upper,
                count: bin.count,
                mean_predicted: bin.mean_predicted,
                observed_rate: bin.observed_rate,
            })
            .collect(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::features::Scaling;
    use crate::model_file::ModelMap;
    use dpgate_api_types::{FeatureMap, WalrMap};
    use uuid::Uuid;

    /// σ(2a − b − 0.5) over features a, b.
    pub(crate) fn model() -> ModelFile {
        ModelFile {
            weights: vec![2.0, -1.0],
            intercept: -0.5,
            feature_names: vec!["a".to_owned(), "b".to_owned()],
            label: "y".to_owned(),
            dataset_id: Uuid::nil(),
            release_id: Uuid::nil(),
            kind: "walr".to_owned(),
            epsilon: 1.0,
            delta: 1e-6,
            training: None,
            map: None,
        }
    }

    #[test]
    fn it_scores_rows_by_column_name() {
        // Columns in another order, with an extra one.
        let data = "b,extra,y,a\n0,x,1,1\n1,x,0,0\n0,x,0,0.1\n1,x,1,0.9\n";
        let evaluation = evaluate(&model(), data.as_bytes(), "y").unwrap();
        assert_eq!(evaluation.rows, 4);
        assert_eq!(evaluation.positive_rate, 0.5);
        // Logits 1.5, −1.5, −0.3, 0.3: the positives score highest.
        assert_eq!(evaluation.auc, Some(1.0));
        assert_eq!(evaluation.accuracy, 1.0);
        let p = [1.5f64, -1.5, -0.3, 0.3].map(dpgate_learn::sigmoid);
        let want = -(p[0].ln() + (1.0 - p[1]).ln() + (1.0 - p[2]).ln() + p[3].ln()) / 4.0;
        assert!((evaluation.log_loss - want).abs() < 1e-12);
        assert_eq!(
            evaluation
                .calibration
                .iter()
                .map(|b| b.count)
                .sum::<usize>(),
            4
        );
    }

    #[test]
    fn a_mapped_model_scores_rows_through_its_map() {
        // a ∈ [−1, 1] and b ∈ [0, 1] scaled, centred on 0.5 and shrunk onto
        // the ball of radius 0.6: v = ((a + 1)/2 − 0.5, b − 0.5) until
        // ‖v‖ > 0.6.
        let mapped = ModelFile {
            map: Some(ModelMap {
                scaling: Scaling {
                    min: vec![-1.0, 0.0],
                    max: vec![1.0, 1.0],
                },
                feature_map: FeatureMap {
                    name: WalrMap::Auto,
                    centre: vec![0.5, 0.5],
                    radius: Some(0.6),
                    intercept_weight: 0.25,
                },
            }),
            ..model()
        };
        let data = "b,extra,y,a\n0,x,1,1\n1,x,0,0\n0,x,0,0.1\n1,x,1,0.9\n";
        let evaluation = evaluate(&mapped, data.as_bytes(), "y").unwrap();
        // Logits 2·v₁ − v₂ − 0.5, the first and last rows shrunk: the last
        // positive now scores below the second negative (the raw weights
        // rank both positives first, as above).
        let (first, last) = (0.6 / 0.5f64.sqrt(), 0.6 / 0.4525f64.sqrt());
        let logits = [1.5 * first - 0.5, -1.0, 0.1, 0.4 * last - 0.5];
        assert_eq!(evaluation.auc, Some(0.75));
        assert_eq!(evaluation.accuracy, 0.5);
        let p = logits.map(dpgate_learn::sigmoid);
        let want = -(p[0].ln() + (1.0 - p[1]).ln() + (1.0 - p[2]).ln() + p[3].ln()) / 4.0;
        assert!(
            (evaluation.log_loss - want).abs() < 1e-12,
            "{} vs {want}",
            evaluation.log_loss
        );
    }

    #[test]
    fn bad_data_is_refused() {
        for (data, reason) in [
            ("a,y\n1,1\n", "no column \"b\""),
            ("a,b\n1,1\n", "no column \"y\""),
            ("a,b,y\n1,1,2\n", "label \"2\""),
            ("a,b,y\n1,z,1\n", "\"z\" is not a finite number"),
            ("a,b,y\n", "no rows"),
        ] {
            let error = evaluate(&model(), data.as_bytes(), "y")
                .unwrap_err()
                .to_string();
            assert!(error.contains(reason), "{data:?}: {error}");
        }
    }
}
