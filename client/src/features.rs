//! Feature tables as the trainer reads them: `row_id` plus numeric columns
//! from an Arrow IPC stream or CSV (the server's `GET /features`, or the
//! analyst's own CSV file), and the affine scaling between their raw units
//! and the [0, 1] space the release and the trainer work in.

use std::collections::HashSet;
use std::io::Read;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_schema::{ArrowError, DataType};
use dpgate_api_types::BoundedColumn;
use ndarray::Array2;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

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
    #[error("Arrow IPC: {0}")]
    Arrow(#[from] ArrowError),
    #[error("the header must start with `row_id` and name at least one feature")]
    Header,
    #[error("column {name:?} {reason}")]
    Column { name: String, reason: String },
    #[error("the header names column {0:?} twice")]
    DuplicateColumn(String),
    #[error("line {line}: {reason}")]
    Line { line: u64, reason: String },
    #[error("row {row:?}: {name} = {value} is not a finite number")]
    NotFinite {
        row: String,
        name: String,
        value: f32,
    },
    #[error("row id {0:?} appears twice")]
    DuplicateRow(String),
    #[error("no rows")]
    Empty,
    #[error("the features are {names:?}, the schema declares {declared:?}")]
    Names {
        names: Vec<String>,
        declared: Vec<String>,
    },
}

/// The feature names of a header `row_id,<name>,…`.
fn feature_names<'h>(
    mut header: impl Iterator<Item = &'h str>,
) -> Result<Vec<String>, FeatureError> {
    if header.next() != Some(ROW_ID) {
        return Err(FeatureError::Header);
    }
    let names: Vec<String> = header.map(str::to_owned).collect();
    if names.is_empty() {
        return Err(FeatureError::Header);
    }
    let mut unique = HashSet::new();
    if let Some(name) = names.iter().find(|name| !unique.insert(name.as_str())) {
        return Err(FeatureError::DuplicateColumn(name.clone()));
    }
    Ok(names)
}

impl FeatureTable {
    /// Reads CSV with a header `row_id,<name>,…` and finite numbers.
    ///
    /// # Errors
    /// A malformed header, line, value, or repeated row id.
    pub fn from_csv(reader: impl Read) -> Result<Self, FeatureError> {
        let mut csv = csv::Reader::from_reader(reader);
        let names = feature_names(csv.headers()?.iter())?;
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

    /// Reads the analyst's own feature file ([`FeatureTable::from_csv`]).
    ///
    /// # Errors
    /// An unreadable file, or as `from_csv`, named with the path.
    pub fn from_csv_file(path: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        let file = std::fs::File::open(path).with_context(|| path.display().to_string())?;
        Self::from_csv(std::io::BufReader::new(file)).with_context(|| path.display().to_string())
    }

    /// Reads an Arrow IPC stream as `GET /features` sends it: a `row_id`
    /// column (Utf8), then one Float32 column per feature, without nulls,
    /// every value finite. The values are widened to f64 as they are
    /// copied, a row at a time, into the row-major matrix.
    ///
    /// # Errors
    /// An unreadable stream, columns other than those, a null or non-finite
    /// value, a repeated row id, or no rows.
    pub fn from_arrow(reader: impl Read) -> Result<Self, FeatureError> {
        let stream = StreamReader::try_new_buffered(reader, None)?;
        let schema = stream.schema();
        let names = feature_names(schema.fields().iter().map(|field| field.name().as_str()))?;
        // The batches are decoded first so that the matrix is allocated
        // once at its final size: growing it by doubling touches twice its
        // memory, and fresh pages cost more than the copy.
        let batches = stream.collect::<Result<Vec<_>, _>>()?;
        let rows = batches.iter().map(RecordBatch::num_rows).sum::<usize>();
        let mut row_ids = Vec::with_capacity(rows);
        let mut values = Vec::with_capacity(rows * names.len());
        for batch in &batches {
            append_batch(batch, &names, &mut row_ids, &mut values)?;
        }
        if row_ids.is_empty() {
            return Err(FeatureError::Empty);
        }
        let mut seen = HashSet::with_capacity(row_ids.len());
        if let Some(id) = row_ids.iter().find(|id| !seen.insert(id.as_str())) {
            return Err(FeatureError::DuplicateRow(id.clone()));
        }
        let x = Array2::from_shape_vec((row_ids.len(), names.len()), values)
            .map_err(|_| FeatureError::Header)?;
        Ok(FeatureTable { row_ids, names, x })
    }

    /// Checks that the columns are the `declared` features, in order.
    ///
    /// # Errors
    /// [`FeatureError::Names`] if they are not.
    pub fn expect_names(&self, declared: &[BoundedColumn]) -> Result<(), FeatureError> {
        if self
            .names
            .iter()
            .eq(declared.iter().map(|column| &column.name))
        {
            return Ok(());
        }
        Err(FeatureError::Names {
            names: self.names.clone(),
            declared: declared.iter().map(|column| column.name.clone()).collect(),
        })
    }
}

/// Column `index` of `batch`, named `name`, as the array type of `wanted`
/// (`cast`), without nulls.
fn column<'b, T: ?Sized>(
    batch: &'b RecordBatch,
    index: usize,
    name: &str,
    wanted: DataType,
    cast: impl FnOnce(&'b dyn Array) -> Option<&'b T>,
) -> Result<&'b T, FeatureError> {
    let refuse = |reason: String| FeatureError::Column {
        name: name.to_owned(),
        reason,
    };
    let column = batch.column(index).as_ref();
    if column.null_count() > 0 {
        return Err(refuse(format!("has {} null values", column.null_count())));
    }
    cast(column).ok_or_else(|| refuse(format!("is {}, not {wanted}", column.data_type())))
}

/// Appends a batch of [`FeatureTable::from_arrow`]'s stream: its row ids,
/// and its values row after row; refuses columns of other types, nulls and
/// non-finite values.
fn append_batch(
    batch: &RecordBatch,
    names: &[String],
    row_ids: &mut Vec<String>,
    values: &mut Vec<f64>,
) -> Result<(), FeatureError> {
    let ids = column(batch, 0, ROW_ID, DataType::Utf8, |array| {
        array.as_string_opt::<i32>()
    })?;
    let columns = names
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let array = column(batch, j + 1, name, DataType::Float32, |array| {
                array.as_primitive_opt::<Float32Type>()
            })?;
            Ok(&array.values()[..])
        })
        .collect::<Result<Vec<&[f32]>, FeatureError>>()?;
    // The first non-finite value in row order.
    let bad = (columns.iter().enumerate())
        .filter_map(|(j, values)| Some((values.iter().position(|v| !v.is_finite())?, j)))
        .min();
    if let Some((row, j)) = bad {
        return Err(FeatureError::NotFinite {
            row: ids.value(row).to_owned(),
            name: names[j].clone(),
            value: columns[j][row],
        });
    }
    row_ids.extend(ids.iter().flatten().map(str::to_owned));
    // Row by row, reading every column in step: the reads and the writes
    // both run through memory in order.
    for row in 0..batch.num_rows() {
        values.extend(columns.iter().map(|column| f64::from(column[row])));
    }
    Ok(())
}

/// The map x ↦ (x − min)/(max − min) per column, and back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

    /// The raw rows in [0, 1] (clamped; a constant column becomes 0),
    /// scaled where they are: a matrix of a million rows is a quarter of a
    /// gigabyte, and a fresh copy of it costs more in page faults than the
    /// arithmetic. Row by row, on all cores.
    pub fn scale(&self, raw: Array2<f64>) -> Array2<f64> {
        let mut scaled = if raw.is_standard_layout() {
            raw
        } else {
            raw.as_standard_layout().into_owned()
        };
        let width = self.min.len().max(1);
        let values = scaled
            .as_slice_mut()
            .expect("BUG: an array in standard layout is one slice");
        values
            .par_chunks_mut(width)
            .for_each(|row| self.scale_row(row));
        scaled
    }

    /// One raw row in [0, 1], where it is, as [`Scaling::scale`] scales
    /// each: a model file's prediction must scale exactly as its training
    /// did.
    pub fn scale_row(&self, row: &mut [f64]) {
        for ((value, &low), &high) in row.iter_mut().zip(&self.min).zip(&self.max) {
            let range = high - low;
            *value = if range > 0.0 {
                ((*value - low) / range).clamp(0.0, 1.0)
            } else {
                0.0
            };
        }
    }

    /// Weights and intercept over scaled features as weights and intercept
    /// over raw ones: wᵀ·scale(x) + b = w′ᵀx + b′.
    pub fn unfold(&self, weights: &[f64], intercept: f64) -> (Vec<f64>, f64) {
        dpgate_learn::unscale(weights, intercept, &self.min, &self.max)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float32Array, Float64Array, StringArray};
    use arrow_ipc::writer::StreamWriter;
    use arrow_schema::{Field, Schema};

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

    /// An Arrow IPC stream of `batches`, each a row_id column and columns
    /// named as in `fields` (`(name, type, nullable)`).
    fn arrow_stream(fields: &[(&str, DataType, bool)], batches: &[Vec<ArrayRef>]) -> Vec<u8> {
        let schema = Arc::new(Schema::new(
            fields
                .iter()
                .map(|(name, kind, nullable)| Field::new(*name, kind.clone(), *nullable))
                .collect::<Vec<_>>(),
        ));
        let mut writer = StreamWriter::try_new(Vec::new(), &schema).unwrap();
        for columns in batches {
            let batch = RecordBatch::try_new(schema.clone(), columns.clone()).unwrap();
            writer.write(&batch).unwrap();
        }
        writer.into_inner().unwrap()
    }

    fn ids(ids: &[&str]) -> ArrayRef {
        Arc::new(StringArray::from(ids.to_vec()))
    }

    fn f32s(values: &[f32]) -> ArrayRef {
        Arc::new(Float32Array::from(values.to_vec()))
    }

    const SCHEMA: [(&str, DataType, bool); 3] = [
        ("row_id", DataType::Utf8, false),
        ("a", DataType::Float32, false),
        ("b", DataType::Float32, false),
    ];

    #[test]
    fn arrow_streams_read_into_tables_across_batches() {
        let stream = arrow_stream(
            &SCHEMA,
            &[
                vec![ids(&["r2", "r1"]), f32s(&[0.5, 1.0]), f32s(&[3.0, -2.0])],
                vec![ids(&[]), f32s(&[]), f32s(&[])],
                vec![ids(&["r0"]), f32s(&[0.1]), f32s(&[1e6])],
            ],
        );
        let table = FeatureTable::from_arrow(&stream[..]).unwrap();
        assert_eq!(table.row_ids, ["r2", "r1", "r0"]);
        assert_eq!(table.names, ["a", "b"]);
        // f32 widened exactly: 0.1f32, not 0.1.
        let expected = ndarray::array![[0.5, 3.0], [1.0, -2.0], [f64::from(0.1f32), 1e6]];
        assert_eq!(table.x, expected);
        let declared = |names: &[&str]| -> Vec<BoundedColumn> {
            names
                .iter()
                .map(|name| BoundedColumn {
                    name: (*name).to_owned(),
                    min: 0.0,
                    max: 1.0,
                })
                .collect()
        };
        table.expect_names(&declared(&["a", "b"])).unwrap();
        for wrong in [&["b", "a"][..], &["a"], &["a", "b", "c"], &["a", "B"]] {
            let error = table.expect_names(&declared(wrong)).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("the features are [\"a\", \"b\"], the schema declares"),
                "{error}"
            );
        }
    }

    #[test]
    fn bad_arrow_streams_are_refused_with_the_reason() {
        let good = || vec![ids(&["r1", "r2"]), f32s(&[0.5, 1.0]), f32s(&[3.0, -2.0])];
        let renamed = |first: &'static str, second: &'static str| {
            [
                (first, DataType::Utf8, false),
                (second, DataType::Float32, false),
                ("b", DataType::Float32, false),
            ]
        };
        let float64: ArrayRef = Arc::new(Float64Array::from(vec![0.5, 1.0]));
        let null: ArrayRef = Arc::new(Float32Array::from(vec![Some(0.5), None]));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (arrow_stream(&renamed("id", "a"), &[good()]), "header"),
            (
                arrow_stream(&renamed("row_id", "b"), &[good()]),
                "\"b\" twice",
            ),
            (arrow_stream(&SCHEMA[..1], &[vec![ids(&["r1"])]]), "header"),
            (
                arrow_stream(
                    &[
                        ("row_id", DataType::Utf8, false),
                        ("a", DataType::Float64, false),
                        ("b", DataType::Float32, false),
                    ],
                    &[vec![ids(&["r1", "r2"]), float64, f32s(&[3.0, -2.0])]],
                ),
                "column \"a\" is Float64, not Float32",
            ),
            (
                arrow_stream(
                    &[
                        ("row_id", DataType::Utf8, false),
                        ("a", DataType::Float32, true),
                        ("b", DataType::Float32, false),
                    ],
                    &[vec![ids(&["r1", "r2"]), null, f32s(&[3.0, -2.0])]],
                ),
                "column \"a\" has 1 null values",
            ),
            (
                arrow_stream(
                    &SCHEMA,
                    &[vec![
                        ids(&["r1", "r2"]),
                        f32s(&[0.5, f32::INFINITY]),
                        f32s(&[f32::NAN, 1.0]),
                    ]],
                ),
                "row \"r1\": b = NaN is not a finite number",
            ),
            (
                arrow_stream(
                    &SCHEMA,
                    &[
                        good(),
                        vec![ids(&["r3", "r1"]), f32s(&[0.0, 0.0]), f32s(&[0.0, 0.0])],
                    ],
                ),
                "row id \"r1\" appears twice",
            ),
            (arrow_stream(&SCHEMA, &[]), "no rows"),
            (b"row_id,a,b\nr1,0.5,3\n".to_vec(), "Arrow IPC"),
            (Vec::new(), "Arrow IPC"),
        ];
        for (stream, reason) in cases {
            let error = FeatureTable::from_arrow(&stream[..])
                .unwrap_err()
                .to_string();
            assert!(error.contains(reason), "{reason}: {error}");
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
        let scaled = scaling.scale(table.x.clone());
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
            declared.scale(ndarray::array![[0.0], [7.0]]),
            ndarray::array![[0.5], [1.0]]
        );
    }
}
