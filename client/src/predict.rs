//! A model file's predictions for rows of a CSV file: its feature columns
//! found by name (any order, other columns ignored), as `evaluate` reads
//! them, so that nobody re-implements a model's feature map to score a row.

use std::io::{Read, Write};

use csv::StringRecord;
use serde::Serialize;

use crate::features::ROW_ID;
use crate::model_file::ModelFile;

/// Where a model's features are in a CSV file's columns.
pub(crate) struct FeatureColumns {
    at: Vec<usize>,
}

impl FeatureColumns {
    /// The columns of `model`'s features in `header`.
    ///
    /// # Errors
    /// A feature with no column.
    pub(crate) fn find(model: &ModelFile, header: &StringRecord) -> anyhow::Result<Self> {
        let at = model
            .feature_names
            .iter()
            .map(|name| column(header, name))
            .collect::<anyhow::Result<_>>()?;
        Ok(FeatureColumns { at })
    }

    /// The features of `record` into `row`, in the model's order.
    ///
    /// # Errors
    /// A value that is not a finite number, with its line.
    pub(crate) fn read(&self, record: &StringRecord, row: &mut Vec<f64>) -> anyhow::Result<()> {
        row.clear();
        for &at in &self.at {
            let field = record.get(at).unwrap_or_default().trim();
            let value = field
                .parse::<f64>()
                .ok()
                .filter(|value| value.is_finite())
                .ok_or_else(|| {
                    anyhow::anyhow!("line {}: {field:?} is not a finite number", line(record))
                })?;
            row.push(value);
        }
        Ok(())
    }
}

/// The position of column `name`.
pub(crate) fn column(header: &StringRecord, name: &str) -> anyhow::Result<usize> {
    header
        .iter()
        .position(|column| column == name)
        .ok_or_else(|| anyhow::anyhow!("the data has no column {name:?}"))
}

/// A record's line in its file, for messages.
pub(crate) fn line(record: &StringRecord) -> u64 {
    record.position().map_or(0, csv::Position::line)
}

/// One scored row.
#[derive(Debug, Serialize)]
struct Scored<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    row_id: Option<&'a str>,
    /// σ(logit): the predicted probability of label 1.
    probability: f64,
    /// 1 when the probability is at least one half.
    predicted: u8,
}

/// Writes, for each row of `data`, its `row_id` (when the data has that
/// column), the model's `probability` of label 1 and the `predicted`
/// label, as CSV; returns how many rows were scored.
///
/// # Errors
/// A missing feature column, a bad value, or I/O.
pub fn predict(model: &ModelFile, data: impl Read, out: impl Write) -> anyhow::Result<usize> {
    let mut csv = csv::Reader::from_reader(data);
    let header = csv.headers()?.clone();
    let columns = FeatureColumns::find(model, &header)?;
    let row_id = column(&header, ROW_ID).ok();
    let mut writer = csv::Writer::from_writer(out);
    let mut row = Vec::with_capacity(model.weights.len());
    let mut scored = 0;
    for record in csv.records() {
        let record = record?;
        columns.read(&record, &mut row)?;
        let probability = model.predict(&row);
        writer.serialize(Scored {
            row_id: row_id.map(|at| record.get(at).unwrap_or_default()),
            probability,
            predicted: u8::from(probability >= 0.5),
        })?;
        scored += 1;
    }
    writer.flush()?;
    Ok(scored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::tests::model;

    #[test]
    fn rows_are_scored_by_column_name_with_their_ids() {
        let data = "b,row_id,a\n0,r1,1\n1,r2,0\n";
        let mut out = Vec::new();
        assert_eq!(predict(&model(), data.as_bytes(), &mut out).unwrap(), 2);
        let p = [1.5f64, -1.5].map(dpgate_learn::sigmoid);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "row_id,probability,predicted\nr1,{},1\nr2,{},0\n",
                p[0], p[1]
            )
        );
        // Without a row_id column, only the scores.
        let mut out = Vec::new();
        predict(&model(), "a,b\n1,0\n".as_bytes(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("probability,predicted\n{},1\n", p[0])
        );
    }

    #[test]
    fn bad_data_is_refused_with_its_line() {
        for (data, reason) in [
            ("a\n1\n", "no column \"b\""),
            ("a,b\n1,1\n1,x\n", "line 3: \"x\" is not a finite number"),
            ("a,b\n1,inf\n", "\"inf\" is not a finite number"),
        ] {
            let error = predict(&model(), data.as_bytes(), std::io::sink())
                .unwrap_err()
                .to_string();
            assert!(error.contains(reason), "{data:?}: {error}");
        }
    }
}
