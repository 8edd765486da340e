//! Arrow IPC stream and Parquet bodies: record batches whose columns are
//! named as the schema's. Their values are typed, so nothing is parsed:
//! each row is checked and encoded by the same [`RowBuilder`] as a CSV
//! line, and its `line` is its row number in the body, from 1.

use std::io::Read;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Decimal128Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Decimal128Array, Float32Array, Float64Array, RecordBatch, StringArray,
    UInt8Array, UInt32Array,
};
use arrow_schema::{ArrowError, DataType};
use dpgate_api_types::{Dimension, LineError};

use super::collector::{Collector, Naming, ParsedRow};
use super::row::{
    Cell, RowBuilder, clamped, clamped_all, code, feature, measure, row_id, scaled, user_id,
};
use super::{RowRecord, Summary};
use crate::domain::dataset::{ROW_ID, Schema};

/// `value` of column `name` if it is finite.
fn finite(name: &str, value: f64) -> Result<f64, String> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(format!("{name} = {value} is not finite"))
    }
}

/// Every value of a float column without nulls, as f64: what the typed
/// columns of a registered file usually are, read by a tight loop instead
/// of value by value through [`Typed`].
fn floats(array: &dyn Array) -> Option<std::borrow::Cow<'_, [f64]>> {
    if array.null_count() > 0 {
        return None;
    }
    match array.data_type() {
        DataType::Float64 => Some(array.as_primitive::<Float64Type>().values().as_ref().into()),
        DataType::Float32 => Some(
            array
                .as_primitive::<Float32Type>()
                .values()
                .iter()
                .map(|&value| f64::from(value))
                .collect::<Vec<f64>>()
                .into(),
        ),
        _ => None,
    }
}

/// Every label of a column of integers or booleans without nulls, each 0
/// or 1, in one loop; `None` otherwise, for the value-by-value path to
/// name the first that is not.
fn labels_at_once(array: &dyn Array) -> Option<Vec<u8>> {
    fn zero_one<T: ArrowPrimitiveType>(array: &dyn Array) -> Option<Vec<u8>>
    where
        T::Native: Into<i128>,
    {
        let values = array.as_primitive_opt::<T>()?.values();
        let valid = values
            .iter()
            .fold(true, |all, &value| all & matches!(value.into(), 0 | 1));
        valid.then(|| {
            values
                .iter()
                .map(|&value| u8::from(value.into() == 1))
                .collect()
        })
    }
    if array.null_count() > 0 {
        return None;
    }
    match array.data_type() {
        DataType::Boolean => Some(array.as_boolean().values().iter().map(u8::from).collect()),
        DataType::Int8 => zero_one::<Int8Type>(array),
        DataType::Int16 => zero_one::<Int16Type>(array),
        DataType::Int32 => zero_one::<Int32Type>(array),
        DataType::Int64 => zero_one::<Int64Type>(array),
        DataType::UInt8 => zero_one::<UInt8Type>(array),
        DataType::UInt16 => zero_one::<UInt16Type>(array),
        DataType::UInt32 => zero_one::<UInt32Type>(array),
        DataType::UInt64 => zero_one::<UInt64Type>(array),
        _ => None,
    }
}

/// A value of at most 8 bytes as its length and its bytes in a word: two
/// values are equal when their keys are. Declared values are short as a
/// rule, and comparing words instead of strings (a call to `memcmp`
/// each) took most of an aggregate's time matching its dimensions.
fn short_key(bytes: &[u8]) -> Option<(usize, u64)> {
    (bytes.len() <= 8).then(|| {
        let word = bytes
            .iter()
            .rev()
            .fold(0u64, |word, &byte| (word << 8) | u64::from(byte));
        (bytes.len(), word)
    })
}

/// Every code of a string column without nulls whose values are all
/// declared, in one loop; `None` otherwise, for the value-by-value path
/// to name the first that is not. A dictionary's values are matched once
/// each, and its rows by their keys.
pub(super) fn codes_at_once(dimension: &Dimension, array: &dyn Array) -> Option<Vec<u32>> {
    if array.null_count() > 0 {
        return None;
    }
    if let Some(dictionary) = array.as_any_dictionary_opt() {
        // Each dictionary value's code, u32::MAX where it is not declared
        // (a dimension has at most 100,000 values): a row's code is then one
        // lookup, and one pass over the codes finds any undeclared.
        let known: Vec<u32> = codes_of(dimension, dictionary.values().as_ref())?
            .into_iter()
            .map(|code| code.unwrap_or(u32::MAX))
            .collect();
        let code = |key: usize| known.get(key).copied().unwrap_or(u32::MAX);
        // Parquet's readers key their dictionaries by i32: read in place.
        let codes: Vec<u32> = match array.as_dictionary_opt::<Int32Type>() {
            Some(keyed) => keyed
                .keys()
                .values()
                .iter()
                .map(|&key| usize::try_from(key).map_or(u32::MAX, code))
                .collect(),
            None => dictionary.normalized_keys().into_iter().map(code).collect(),
        };
        return codes.iter().all(|&code| code != u32::MAX).then_some(codes);
    }
    codes_of(dimension, array)?.into_iter().collect()
}

/// The code of each value of a string column (`None` where a value is
/// null or not declared); `None` for a column of another type.
fn codes_of(dimension: &Dimension, array: &dyn Array) -> Option<Vec<Option<u32>>> {
    let keys: Option<Vec<(usize, u64)>> = dimension
        .values
        .iter()
        .map(|known| short_key(known.as_bytes()))
        .collect();
    let code = |value: Option<&str>| {
        let value = value?;
        let index = match &keys {
            // A longer value is none of them.
            Some(keys) => {
                let key = short_key(value.as_bytes())?;
                keys.iter().position(|known| *known == key)?
            }
            None => dimension.values.iter().position(|known| known == value)?,
        };
        u32::try_from(index).ok()
    };
    match array.data_type() {
        DataType::Utf8 => Some(array.as_string::<i32>().iter().map(code).collect()),
        DataType::LargeUtf8 => Some(array.as_string::<i64>().iter().map(code).collect()),
        DataType::Utf8View => Some(array.as_string_view().iter().map(code).collect()),
        _ => None,
    }
}

/// A dictionary column as its values, row by row (Parquet's text columns
/// are read as dictionaries, and an Arrow body may send a categorical
/// column as one), for the value-by-value path; any other as it is.
pub(super) fn plain(array: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    match array.data_type() {
        DataType::Dictionary(_, values) => arrow::compute::cast(array, values),
        _ => Ok(Arc::clone(array)),
    }
}

/// A value of a typed column: a number, text or a 0/1 label as Arrow holds
/// it.
#[derive(Clone, Copy)]
pub(super) struct Typed<'a> {
    array: &'a dyn Array,
    row: usize,
}

impl<'a> Typed<'a> {
    fn null(&self, name: &str) -> Result<(), String> {
        if self.array.is_null(self.row) {
            Err(format!("{name} is null"))
        } else {
            Ok(())
        }
    }

    fn integer(&self) -> Option<i128> {
        let (array, row) = (self.array, self.row);
        Some(match array.data_type() {
            DataType::Int8 => array.as_primitive::<Int8Type>().value(row).into(),
            DataType::Int16 => array.as_primitive::<Int16Type>().value(row).into(),
            DataType::Int32 => array.as_primitive::<Int32Type>().value(row).into(),
            DataType::Int64 => array.as_primitive::<Int64Type>().value(row).into(),
            DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).into(),
            DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row).into(),
            DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row).into(),
            DataType::UInt64 => array.as_primitive::<UInt64Type>().value(row).into(),
            _ => return None,
        })
    }

    /// A float or integer column's value.
    pub(super) fn number(&self, name: &str) -> Result<f64, String> {
        self.null(name)?;
        let value = match self.array.data_type() {
            DataType::Float64 => self.array.as_primitive::<Float64Type>().value(self.row),
            DataType::Float32 => self
                .array
                .as_primitive::<Float32Type>()
                .value(self.row)
                .into(),
            other => match self.integer() {
                // Integers beyond 2⁵³ round, as they would as JSON numbers.
                Some(value) => value as f64,
                None => return Err(format!("{name} is a column of {other}, not of numbers")),
            },
        };
        finite(name, value)
    }

    /// A string column's value.
    pub(super) fn text(&self, name: &str) -> Result<&'a str, String> {
        self.null(name)?;
        let (array, row) = (self.array, self.row);
        match array.data_type() {
            DataType::Utf8 => Ok(array.as_string::<i32>().value(row)),
            DataType::LargeUtf8 => Ok(array.as_string::<i64>().value(row)),
            DataType::Utf8View => Ok(array.as_string_view().value(row)),
            other => Err(format!("{name} is a column of {other}, not of strings")),
        }
    }

    /// An integer 0 or 1, or a boolean.
    pub(super) fn label(&self, name: &str) -> Result<u8, String> {
        self.null(name)?;
        if *self.array.data_type() == DataType::Boolean {
            return Ok(u8::from(self.array.as_boolean().value(self.row)));
        }
        match self.integer() {
            Some(0) => Ok(0),
            Some(1) => Ok(1),
            Some(other) => Err(format!("label {name} = {other} is not 0 or 1")),
            None => Err(format!(
                "label {name} is a column of {}, not of integers or booleans",
                self.array.data_type()
            )),
        }
    }
}

/// Data that is not what it should be (`unfit` says what, such as "the
/// body is not a Parquet file"): a bad row where it stops making sense
/// (422, like a CSV body without its header). A body reaches the reader
/// through a channel that ends, never fails, so an I/O error here is a
/// stream cut short, not a failure to read the body.
fn unreadable(error: ArrowError, unfit: &str, line: u64) -> LineError {
    LineError::new(line, format!("{unfit}: {error}"))
}

/// Reads the batches of `opened` (`unfit` says what they are if they
/// cannot be read) until they end, the sink stops or too many rows are
/// bad.
pub(super) fn run<I: Iterator<Item = Result<RecordBatch, ArrowError>>>(
    opened: Result<I, ArrowError>,
    unfit: &str,
    rows: &RowBuilder,
    expected: usize,
    naming: Naming<'_>,
    sink: impl FnMut(Vec<RowRecord>) -> bool,
) -> std::io::Result<Summary> {
    let mut collector = Collector::new(sink, rows.schema.k(), expected, naming);
    let batches = match opened {
        Ok(batches) => batches,
        Err(error) => {
            collector.error(unreadable(error, unfit, 1));
            return Ok(collector.finish());
        }
    };
    let mut line = 0u64;
    for batch in batches {
        let batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                collector.error(unreadable(error, unfit, line + 1));
                return Ok(collector.finish());
            }
        };
        if let Some(missing) = rows
            .names
            .iter()
            .find(|name| batch.column_by_name(name).is_none())
        {
            collector.error(LineError {
                line: line + 1,
                reason: format!("the body has no column {missing:?}"),
                file: None,
            });
            return Ok(collector.finish());
        }
        // A batch whose every value is good is checked and encoded a column
        // at a time; one with a bad value goes row by row below, to name
        // each bad row as a CSV upload's would be.
        let stored = stored_columns(&batch, rows.schema).ok();
        if let Some(records) = stored
            .as_ref()
            .and_then(|stored| records(stored, rows.schema, line))
        {
            for record in records {
                line += 1;
                collector.push(Ok(ParsedRow::of(record)));
                if !collector.more() {
                    return Ok(collector.finish());
                }
            }
            continue;
        }
        let decoded: Result<Vec<ArrayRef>, ArrowError> = rows
            .names
            .iter()
            .filter_map(|name| batch.column_by_name(name).map(plain))
            .collect();
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(error) => {
                collector.error(unreadable(error, unfit, line + 1));
                return Ok(collector.finish());
            }
        };
        let columns: Vec<&dyn Array> = decoded.iter().map(AsRef::as_ref).collect();
        for row in 0..batch.num_rows() {
            line += 1;
            let built = rows.build(line, |at| {
                let array = *columns.get(at)?;
                Some(Cell::Typed(Typed { array, row }))
            });
            collector.push(match built {
                Ok(record) => Ok(ParsedRow::of(record)),
                Err(reason) => Err(LineError::new(line, reason)),
            });
            if !collector.more() {
                return Ok(collector.finish());
            }
        }
    }
    Ok(collector.finish())
}

/// The rows of `stored` (a batch of [`stored_columns`] holding every
/// column of `schema`), numbered after `line`; `None` if a column is
/// missing or not of its stored type.
fn records<'b>(
    stored: &'b RecordBatch,
    schema: &'b Schema,
    line: u64,
) -> Option<impl Iterator<Item = RowRecord> + 'b> {
    fn values<'c, T: ArrowPrimitiveType>(
        stored: &'c RecordBatch,
        name: &str,
    ) -> Option<&'c [T::Native]> {
        Some(
            stored
                .column_by_name(name)?
                .as_primitive_opt::<T>()?
                .values(),
        )
    }
    fn all<'c, T: ArrowPrimitiveType>(
        stored: &'c RecordBatch,
        names: impl Iterator<Item = &'c str>,
    ) -> Option<Vec<&'c [T::Native]>> {
        names.map(|name| values::<T>(stored, name)).collect()
    }
    let ids = stored.column_by_name(ROW_ID)?.as_string_opt::<i32>()?;
    let labels = values::<UInt8Type>(stored, &schema.label)?;
    let names = |columns: &'b [dpgate_api_types::BoundedColumn]| {
        columns.iter().map(|column| column.name.as_str())
    };
    let features = all::<Float32Type>(stored, names(&schema.features))?;
    let measures = all::<Float64Type>(stored, names(&schema.measures))?;
    let dimensions = all::<UInt32Type>(
        stored,
        schema
            .dimensions
            .iter()
            .map(|dimension| dimension.name.as_str()),
    )?;
    let users = match &schema.users {
        Some(users) => Some(values::<Decimal128Type>(stored, &users.column)?),
        None => None,
    };
    fn bytes<T: Copy, const N: usize>(
        columns: &[&[T]],
        row: usize,
        le: impl Fn(T) -> [u8; N],
    ) -> Vec<u8> {
        columns.iter().flat_map(|column| le(column[row])).collect()
    }
    Some((0..stored.num_rows()).map(move |row| RowRecord {
        line: line + 1 + row as u64,
        row_id: ids.value(row).to_owned(),
        label: labels[row],
        features: bytes(&features, row, f32::to_le_bytes),
        measures: bytes(&measures, row, f64::to_le_bytes),
        dimensions: bytes(&dimensions, row, u32::to_le_bytes),
        user: users.map_or(0, |users| users[row]),
    }))
}

/// An Arrow IPC stream's batches.
pub(super) fn stream_batches(
    reader: impl Read,
) -> Result<impl Iterator<Item = Result<RecordBatch, ArrowError>>, ArrowError> {
    arrow_ipc::reader::StreamReader::try_new(std::io::BufReader::new(reader), None)
}

/// A Parquet file's batches: the body is written to a temporary file
/// first (its footer, at the end, says where everything is), bounded by
/// the upload limit the caller enforces.
pub(super) fn parquet_batches(
    mut reader: impl Read,
) -> std::io::Result<Result<impl Iterator<Item = Result<RecordBatch, ArrowError>>, ArrowError>> {
    let mut file = tempfile::tempfile()?;
    std::io::copy(&mut reader, &mut file)?;
    Ok(
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|builder| builder.with_batch_size(super::BATCH_ROWS).build())
            .map_err(|error| ArrowError::ExternalError(Box::new(error))),
    )
}

/// A batch of typed columns named as `schema`'s (any of them: a file read
/// with some columns only) in the encoding dpgate's own files have: row
/// ids as UTF-8, the label as 0/1 bytes, features scaled into [0, 1] as
/// f32, measures clamped as f64, dimensions as the indices of their
/// declared values, the user column (unit `user`) as its ids' keyed
/// fingerprints in a 128-bit integer column ([`user_fingerprints`]). Every value is checked as an upload's would be; the
/// first that fails is the error, with its row number from 1.
pub fn stored_columns(batch: &RecordBatch, schema: &Schema) -> Result<RecordBatch, String> {
    fn cell(array: &dyn Array, row: usize) -> Cell<'_> {
        Cell::Typed(Typed { array, row })
    }
    // Every row's value, or the first row's error.
    let rows = batch.num_rows();
    fn each<T>(rows: usize, value: impl Fn(usize) -> Result<T, String>) -> Result<Vec<T>, String> {
        (0..rows)
            .map(|row| value(row).map_err(|reason| format!("row {}: {reason}", row + 1)))
            .collect()
    }
    let mut columns: Vec<(&str, ArrayRef)> = Vec::with_capacity(batch.num_columns());
    let fields = batch.schema();
    for (field, column) in fields.fields().iter().zip(batch.columns()) {
        let name = field.name().as_str();
        let array = column.as_ref();
        let stored: ArrayRef = if name == ROW_ID {
            Arc::new(StringArray::from(each(rows, |row| {
                row_id(cell(array, row))
            })?))
        } else if name == schema.label {
            Arc::new(UInt8Array::from(match labels_at_once(array) {
                Some(labels) => labels,
                None => each(rows, |row| cell(array, row).label(name))?,
            }))
        } else if let Some(column) = schema.features.iter().find(|c| c.name == name) {
            let values = floats(array);
            let fast = values
                .as_deref()
                .and_then(|values| super::scale_all(values, column.min, column.max));
            Arc::new(Float32Array::from(match (fast, values) {
                (Some(scaled), _) => scaled,
                (None, Some(values)) => {
                    each(rows, |row| scaled(column, finite(name, values[row])?))?
                }
                (None, None) => each(rows, |row| feature(column, cell(array, row)))?,
            }))
        } else if let Some(column) = schema.measures.iter().find(|c| c.name == name) {
            let values = floats(array);
            let fast = values
                .as_deref()
                .and_then(|values| clamped_all(column, values));
            Arc::new(Float64Array::from(match (fast, values) {
                (Some(clamped), _) => clamped,
                (None, Some(values)) => {
                    each(rows, |row| Ok(clamped(column, finite(name, values[row])?)))?
                }
                (None, None) => each(rows, |row| measure(column, cell(array, row)))?,
            }))
        } else if let Some(dimension) = schema.dimensions.iter().find(|d| d.name == name) {
            Arc::new(UInt32Array::from(match codes_at_once(dimension, array) {
                Some(codes) => codes,
                None => {
                    let plain = plain(column).map_err(|error| error.to_string())?;
                    each(rows, |row| code(dimension, cell(plain.as_ref(), row)))?
                }
            }))
        } else if let Some(users) = schema.users.as_ref().filter(|users| users.column == name) {
            let fingerprints = match column.as_primitive_opt::<Decimal128Type>() {
                // dpgate's own file: fingerprints already.
                Some(stored) => stored.values().to_vec(),
                None => {
                    let plain = plain(column).map_err(|error| error.to_string())?;
                    each(rows, |row| {
                        user_id(&users.column, cell(plain.as_ref(), row))
                            .map(|id| users.key.user_fingerprint(id))
                    })?
                }
            };
            user_fingerprints(fingerprints)?
        } else {
            continue;
        };
        columns.push((name, stored));
    }
    RecordBatch::try_from_iter(columns).map_err(|error| error.to_string())
}

/// Users' fingerprints as a column: Arrow's 128-bit integers are its
/// decimals, here of scale 0 (the values are hashes, never read as
/// numbers: only compared).
pub fn user_fingerprints(fingerprints: Vec<i128>) -> Result<ArrayRef, String> {
    Decimal128Array::new(fingerprints.into(), None)
        .with_precision_and_scale(38, 0)
        .map(|array| Arc::new(array) as ArrayRef)
        .map_err(|error| error.to_string())
}
