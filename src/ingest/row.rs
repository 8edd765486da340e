//! One row's cells validated against the schema and encoded as a
//! [`RowRecord`]. Everything here looks at one row alone, so workers build
//! rows of different chunks at once; the checks across rows (a row id seen
//! before) and the sums are the collector's.

use std::collections::HashMap;

use serde_json::Value;

use super::arrow_format::Typed;
use dpgate_api_types::{BoundedColumn, Dimension};

use super::{MAX_ROW_ID_LEN, RowRecord, scale};
use crate::domain::dataset::{ROW_ID, Schema};

/// Where each column's cell sits in [`RowBuilder::build`]'s order: `row_id`,
/// the label, then features, measures and dimensions in schema order, then
/// the user column under unit `user`.
const ROW_ID_AT: usize = 0;
const LABEL_AT: usize = 1;
const FIRST_FEATURE_AT: usize = 2;

/// Validates and encodes one row's values, given by column in schema order.
pub(super) struct RowBuilder<'a> {
    pub(super) schema: &'a Schema,
    /// Every column's name, in [`RowBuilder::build`]'s order.
    pub(super) names: Vec<&'a str>,
    /// The position of each name in `names`.
    pub(super) columns: HashMap<&'a str, usize>,
}

/// A raw cell: CSV text, a JSON value, or a typed Arrow value.
#[derive(Clone, Copy)]
pub(super) enum Cell<'a> {
    Text(&'a str),
    Json(&'a Value),
    Typed(Typed<'a>),
}

impl<'a> Cell<'a> {
    /// A finite number: CSV text that parses as one, or a JSON number.
    pub(super) fn number(self, name: &str) -> Result<f64, String> {
        let value = match self {
            Cell::Text(text) => text
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("{name} = {text:?} is not a number"))?,
            Cell::Json(Value::Number(number)) => number
                .as_f64()
                .ok_or_else(|| format!("{name} = {number} is not a number"))?,
            Cell::Json(value) => {
                return Err(format!("{name} = {value} is not a number (a JSON number)"));
            }
            Cell::Typed(typed) => return typed.number(name),
        };
        if value.is_finite() {
            Ok(value)
        } else {
            Err(format!("{name} = {value} is not finite"))
        }
    }

    /// Text: a CSV field, or a JSON string.
    pub(super) fn text(self, name: &str) -> Result<&'a str, String> {
        match self {
            Cell::Text(text) => Ok(text),
            Cell::Json(Value::String(text)) => Ok(text),
            Cell::Json(value) => Err(format!("{name} = {value} is not a JSON string")),
            Cell::Typed(typed) => typed.text(name),
        }
    }

    /// A 0/1 label: CSV text `0` or `1`, or the JSON number `0` or `1`
    /// written as an integer.
    pub(super) fn label(self, name: &str) -> Result<u8, String> {
        match self {
            Cell::Text(text) => match text.trim() {
                "0" => Ok(0),
                "1" => Ok(1),
                other => Err(format!("label {name} = {other:?} is not 0 or 1")),
            },
            Cell::Json(value) => match value.as_u64() {
                Some(0) => Ok(0),
                Some(1) => Ok(1),
                _ => Err(format!(
                    "label {name} = {value} is not the JSON number 0 or 1"
                )),
            },
            Cell::Typed(typed) => typed.label(name),
        }
    }
}

impl<'a> RowBuilder<'a> {
    pub(super) fn new(schema: &'a Schema) -> Self {
        let names: Vec<&str> = [ROW_ID, schema.label.as_str()]
            .into_iter()
            .chain(
                schema
                    .features
                    .iter()
                    .chain(&schema.measures)
                    .map(|column| column.name.as_str()),
            )
            .chain(schema.dimensions.iter().map(|d| d.name.as_str()))
            .chain(schema.users.iter().map(|users| users.column.as_str()))
            .collect();
        let columns = names
            .iter()
            .enumerate()
            .map(|(at, &name)| (name, at))
            .collect();
        RowBuilder {
            schema,
            names,
            columns,
        }
    }

    /// Builds a row from `cell(at)` for every column, `at` its position in
    /// `names`.
    pub(super) fn build<'c>(
        &self,
        line: u64,
        cell: impl Fn(usize) -> Option<Cell<'c>>,
    ) -> Result<RowRecord, String> {
        let schema = self.schema;
        let names = &self.names;
        let get = |at: usize| cell(at).ok_or_else(|| format!("column {:?} is missing", names[at]));
        let row_id = row_id(get(ROW_ID_AT)?)?;
        let label = get(LABEL_AT)?.label(&schema.label)?;
        let mut at = FIRST_FEATURE_AT;
        let mut features = Vec::with_capacity(4 * schema.k());
        for column in &schema.features {
            features.extend_from_slice(&feature(column, get(at)?)?.to_le_bytes());
            at += 1;
        }
        let mut measures = Vec::with_capacity(8 * schema.measures.len());
        for column in &schema.measures {
            measures.extend_from_slice(&measure(column, get(at)?)?.to_le_bytes());
            at += 1;
        }
        let mut dimensions = Vec::with_capacity(4 * schema.dimensions.len());
        for dimension in &schema.dimensions {
            dimensions.extend_from_slice(&code(dimension, get(at)?)?.to_le_bytes());
            at += 1;
        }
        let user = match &schema.users {
            Some(users) => users
                .key
                .user_fingerprint(user_id(&users.column, get(at)?)?),
            None => 0,
        };
        Ok(RowRecord {
            line,
            row_id: row_id.to_owned(),
            label,
            features,
            measures,
            dimensions,
            user,
        })
    }
}

/// A user id: text of 1 to [`MAX_ROW_ID_LEN`] bytes, as a row id.
pub(super) fn user_id<'c>(column: &str, cell: Cell<'c>) -> Result<&'c [u8], String> {
    let user = cell.text(column)?;
    if user.is_empty() || user.len() > MAX_ROW_ID_LEN {
        return Err(format!("{column} must be 1 to {MAX_ROW_ID_LEN} bytes"));
    }
    Ok(user.as_bytes())
}

/// A row id: text of 1 to [`MAX_ROW_ID_LEN`] bytes.
pub(super) fn row_id(cell: Cell<'_>) -> Result<&str, String> {
    let row_id = cell.text(ROW_ID)?;
    if row_id.is_empty() || row_id.len() > MAX_ROW_ID_LEN {
        return Err(format!("row_id must be 1 to {MAX_ROW_ID_LEN} bytes"));
    }
    Ok(row_id)
}

/// A feature's value, within its declared bounds, scaled as stored.
pub(super) fn feature(column: &BoundedColumn, cell: Cell<'_>) -> Result<f32, String> {
    scaled(column, cell.number(&column.name)?)
}

/// A feature's finite value, within its declared bounds, scaled as
/// stored.
pub(super) fn scaled(column: &BoundedColumn, value: f64) -> Result<f32, String> {
    if value < column.min || value > column.max {
        return Err(format!(
            "{} = {value} is outside its declared bounds [{}, {}]",
            column.name, column.min, column.max
        ));
    }
    scale(value, column.min, column.max).ok_or_else(|| {
        format!(
            "{} = {value} cannot be scaled by its bounds [{}, {}]",
            column.name, column.min, column.max
        )
    })
}

/// A measure's value, clamped to its declared bounds.
pub(super) fn measure(column: &BoundedColumn, cell: Cell<'_>) -> Result<f64, String> {
    Ok(clamped(column, cell.number(&column.name)?))
}

/// A measure's finite value, clamped to its declared bounds.
pub(super) fn clamped(column: &BoundedColumn, value: f64) -> f64 {
    if crate::mutants::active(crate::mutants::Mutant::ClampSkipped) {
        value
    } else {
        value.clamp(column.min, column.max)
    }
}

/// [`clamped`] for every value of a column, in one loop; `None` if one is
/// not finite, for the value-by-value path to name it.
pub(super) fn clamped_all(column: &BoundedColumn, values: &[f64]) -> Option<Vec<f64>> {
    let mut finite = true;
    let all = if crate::mutants::active(crate::mutants::Mutant::ClampSkipped) {
        finite = values.iter().all(|value| value.is_finite());
        values.to_vec()
    } else {
        values
            .iter()
            .map(|&value| {
                finite &= value.is_finite();
                value.clamp(column.min, column.max)
            })
            .collect()
    };
    finite.then_some(all)
}

/// A dimension's value as the index of its declared value.
pub(super) fn code(dimension: &Dimension, cell: Cell<'_>) -> Result<u32, String> {
    let value = cell.text(&dimension.name)?;
    let index = dimension
        .values
        .iter()
        .position(|known| known == value)
        .ok_or_else(|| format!("{} = {value:?} is not a declared value", dimension.name))?;
    u32::try_from(index).map_err(|_| format!("{} has too many values", dimension.name))
}
