//! Feature tables as the trainer reads them: `row_id` plus numeric columns
//! from CSV (the server's `GET /features`, or the analyst's own file), and
//! the affine scaling between their raw units and the [0, 1] space the
//! release and the trainer work in.

use std::collections::HashSet;
use std::io::Read;

use dpgate_api_types::BoundedColumn;
use ndarray::Array2;

/// The name of the row id column.
pub const ROW_ID: &str = "row_id";

/// Rows of named numeric features, in raw units.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureTable {
    pub row_ids: Vec<String>,
    pub names: Vec<String>,
    /// rows × names.
    pub x: Array2<f64>,
}

/// Why a feature file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FeatureError {
    #[error("CSV: {0}")]
    Csv(#[from] csv::Error),
    #[error("the header must start with `row_id` and name at least one feature")]
    Header,
    #[error("the header names column {0:?} twice")]
    DuplicateColumn(String),
    #[error("line {line}: {reason}")]
    Line { line: u64, reason: String },
    #[error("row id {0:?} appears twice")]
    DuplicateRow(String),
    #[error("no rows")]
    Empty,
}

impl FeatureTable {
    /// Reads CSV with a header `row_id,<name>,…` and finite numbers.
    ///
    /// # Errors
    /// A malformed header, line, value, or repeated row id.
    pub fn from_csv(reader: impl Read) -> Result<Self, FeatureError> {
        let mut csv = csv::Reader::from_reader(reader);
        let header = csv.headers()?.clone();
        let mut columns = header.iter();
        if columns.next() != Some(ROW_ID) || header.len() < 2 {
            return Err(FeatureError::Header);
        }
        let names: Vec<String> = columns.map(str::to_owned).collect();
        let mut unique = HashSet::new();
        if let Some(name) = names.iter().find(|name| !unique.insert(name.as_str())) {
            return Err(FeatureError::DuplicateColumn(name.clone()));
        }
        let mut row_ids = Vec::new();
        let mut values = Vec::new();
        let mut seen = HashSet::new();
        for record in csv.records() {
            let record = record?;
            let line = record.position().map_or(0, csv::Position::line);
            let id = record.get(0).unwrap_or_default().to_owned();
            if !seen.insert(id.clone()) {
                return Err(FeatureError::DuplicateRow(id));
            }
            for (name, field) in names.iter().zip(record.iter().skip(1)) {
                match field.trim().parse::<f64>() {
                    Ok(value) if value.is_finite() => values.push(value),
                    _ => {
                        return Err(FeatureError::Line {
                            line,
                            reason: format!("{name} = {field:?} is not a finite number"),
                        });
                    }
                }
            }
            row_ids.push(id);
        }
        if row_ids.is_empty() {
            return Err(FeatureError::Empty);
        }
        let x = Array2::from_shape_vec((row_ids.len(), names.len()), values)
            .map_err(|_| FeatureError::Header)?;
        Ok(FeatureTable { row_ids, names, x })
    }
}

/// The map x ↦ (x − min)/(max − min) per column, and back.
#[derive(Debug, Clone, PartialEq)]
pub struct Scaling {
    pub min: Vec<f64>,
    pub max: Vec<f64>,
}

impl Scaling {
    /// The bounds the dataset declares (what the server scaled by).
    pub fn declared(features: &[BoundedColumn]) -> Self {
        Scaling {
            min: features.iter().map(|column| column.min).collect(),
            max: features.iter().map(|column| column.max).collect(),
        }
    }

    /// Each column's observed range (for the analyst's own features).
    pub fn observed(table: &FeatureTable) -> Self {
        let fold = |pick: fn(f64, f64) -> f64, start: f64| -> Vec<f64> {
            table
                .x
                .columns()
                .into_iter()
                .map(|column| column.iter().copied().fold(start, pick))
                .collect()
        };
        Scaling {
            min: fold(f64::min, f64::INFINITY),
            max: fold(f64::max, f64::NEG_INFINITY),
        }
    }

    /// The raw rows in [0, 1] (clamped; a constant column becomes 0).
    pub fn scale(&self, raw: &Array2<f64>) -> Array2<f64> {
        let mut scaled = raw.clone();
        for (j, mut column) in scaled.columns_mut().into_iter().enumerate() {
            let (low, range) = (self.min[j], self.max[j] - self.min[j]);
            column.mapv_inplace(|value| {
                if range > 0.0 {
                    ((value - low) / range).clamp(0.0, 1.0)
                } else {
                    0.0
                }
            });
        }
        scaled
    }

    /// Weights and intercept over scaled features as weights and intercept
    /// over raw ones: wᵀ·scale(x) + b = w′ᵀx + b′.
    pub fn unfold(&self, weights: &[f64], intercept: f64) -> (Vec<f64>, f64) {
        dpgate_learn::unscale(weights, intercept, &self.min, &self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_read_and_refuse_what_they_should() {
        let table = FeatureTable::from_csv("row_id,a,b\nr1,0.5,3\nr2,1,-2\n".as_bytes()).unwrap();
        assert_eq!(table.row_ids, ["r1", "r2"]);
        assert_eq!(table.names, ["a", "b"]);
        assert_eq!(table.x, ndarray::array![[0.5, 3.0], [1.0, -2.0]]);
        let cases = [
            ("id,a\nr1,1\n", "header"),
            ("row_id\nr1\n", "header"),
            ("row_id,a,a\nr1,1,2\n", "twice"),
            ("row_id,a\nr1,x\n", "line 2: a = \"x\""),
            ("row_id,a\nr1,NaN\n", "not a finite number"),
            ("row_id,a\nr1,1\nr1,2\n", "\"r1\" appears twice"),
            ("row_id,a\nr1,1,2\n", "CSV"),
            ("row_id,a\n", "no rows"),
        ];
        for (text, reason) in cases {
            let error = FeatureTable::from_csv(text.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }

    #[test]
    fn scaling_round_trips_through_the_weights() {
        let table =
            FeatureTable::from_csv("row_id,a,b,c\nr1,2,10,7\nr2,4,-10,7\nr3,3,0,7\n".as_bytes())
                .unwrap();
        let scaling = Scaling::observed(&table);
        assert_eq!(
            (scaling.min.clone(), scaling.max.clone()),
            (vec![2.0, -10.0, 7.0], vec![4.0, 10.0, 7.0])
        );
        let scaled = scaling.scale(&table.x);
        assert_eq!(scaled.row(2).to_vec(), vec![0.5, 0.5, 0.0]);
        let (weights, intercept) = ([1.5, -0.25, 9.0], 0.3);
        let (raw, raw_intercept) = scaling.unfold(&weights, intercept);
        for (x, s) in table.x.rows().into_iter().zip(scaled.rows()) {
            let scaled_logit: f64 =
                s.iter().zip(&weights).map(|(x, w)| x * w).sum::<f64>() + intercept;
            let raw_logit: f64 =
                x.iter().zip(&raw).map(|(x, w)| x * w).sum::<f64>() + raw_intercept;
            assert!((scaled_logit - raw_logit).abs() < 1e-12);
        }
        let declared = Scaling::declared(&[BoundedColumn {
            name: "f".to_owned(),
            min: -5.0,
            max: 5.0,
        }]);
        assert_eq!(
            declared.scale(&ndarray::array![[0.0], [7.0]]),
            ndarray::array![[0.5], [1.0]]
        );
    }
}
