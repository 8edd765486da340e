//! A run as an Arrow record batch, and back: how rows travel through the
//! engine's plans. A row's features are one fixed-size list, which Arrow
//! lays out row-major, as a run does (features of none are left out
//! rather than sent as a list of size 0); each dimension's codes and each
//! measure's values are a column of their own.

use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float64Type, UInt8Type, UInt32Type};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, Decimal128Array, FixedSizeListArray, Float32Array,
    Float64Array, RecordBatch, RecordBatchOptions, StringArray, UInt8Array, UInt32Array,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::{Columns, Shape, Touched};
use crate::domain::dataset::ROW_ID;

pub const FEATURES: &str = "features";
pub const LABEL: &str = "label";
pub const USER: &str = "user";

/// A person's fingerprint's type: Arrow's 128-bit integers are its
/// decimals, here of scale 0 (hashes, only ever compared).
pub const USER_TYPE: DataType = DataType::Decimal128(38, 0);

/// The name of dimension `j`'s column.
pub fn dimension(j: usize) -> String {
    format!("dimension.{j}")
}

/// The name of measure `j`'s column.
fn measure(j: usize) -> String {
    format!("measure.{j}")
}

fn list(size: usize, item: DataType) -> DataType {
    DataType::FixedSizeList(
        Arc::new(Field::new("item", item, false)),
        i32::try_from(size).unwrap_or(i32::MAX),
    )
}

/// The columns of a batch of `shape`, with the outcomes or not: a run
/// without ids sends none.
pub fn batch_schema(shape: Shape, outcomes: bool) -> SchemaRef {
    let mut fields = Vec::new();
    if shape.ids {
        fields.push(Field::new(ROW_ID, DataType::Utf8, false));
    }
    if shape.features > 0 {
        let features = list(shape.features, DataType::Float32);
        fields.push(Field::new(FEATURES, features, false));
    }
    for j in 0..shape.dimensions {
        fields.push(Field::new(dimension(j), DataType::UInt32, false));
    }
    if outcomes {
        if shape.labels {
            fields.push(Field::new(LABEL, DataType::UInt8, false));
        }
        for j in 0..shape.measures {
            fields.push(Field::new(measure(j), DataType::Float64, false));
        }
        if shape.users {
            fields.push(Field::new(USER, USER_TYPE, false));
        }
    }
    Arc::new(Schema::new(fields))
}

fn listed(size: usize, values: ArrayRef) -> Result<ArrayRef, String> {
    let field = Arc::new(Field::new("item", values.data_type().clone(), false));
    let size = i32::try_from(size).map_err(|_| "a vector too long for Arrow".to_owned())?;
    FixedSizeListArray::try_new(field, size, values, None)
        .map(|array| Arc::new(array) as ArrayRef)
        .map_err(|error| error.to_string())
}

/// The values of a column of a batch, shared.
fn column<T: ArrowPrimitiveType>(
    batch: &RecordBatch,
    name: &str,
) -> Result<ScalarBuffer<T::Native>, String> {
    batch
        .column_by_name(name)
        .and_then(|column| column.as_primitive_opt::<T>())
        .map(|column| column.values().clone())
        .ok_or_else(|| format!("a batch without its {name}"))
}

/// The values of a fixed-size list column of a batch, row-major.
fn values<'b, T: 'static + Array>(batch: &'b RecordBatch, name: &str) -> Result<&'b T, String> {
    batch
        .column_by_name(name)
        .and_then(|column| column.as_any().downcast_ref::<FixedSizeListArray>())
        .and_then(|list| list.values().as_any().downcast_ref::<T>())
        .ok_or_else(|| format!("a batch without its {name}"))
}

impl Columns {
    /// The run as a batch of [`batch_schema`], its buffers moved, not
    /// copied (but for the ids' ends, as Arrow's 32-bit offsets).
    pub fn into_batch(self) -> Result<RecordBatch, String> {
        let shape = self.shape;
        let mut columns: Vec<ArrayRef> = Vec::new();
        if shape.ids {
            let offsets = std::iter::once(Ok(0))
                .chain(self.id_ends.iter().map(|&end| i32::try_from(end)))
                .collect::<Result<Vec<i32>, _>>()
                .map_err(|_| "a block of ids too long for Arrow".to_owned())?;
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            let ids = StringArray::try_new(offsets, Buffer::from_vec(self.ids.into_bytes()), None)
                .map_err(|error| error.to_string())?;
            columns.push(Arc::new(ids));
        }
        if shape.features > 0 {
            let values = Float32Array::new(self.features, None);
            columns.push(listed(shape.features, Arc::new(values))?);
        }
        for codes in self.dimensions {
            columns.push(Arc::new(UInt32Array::new(codes, None)));
        }
        if self.outcomes {
            if shape.labels {
                columns.push(Arc::new(UInt8Array::new(self.labels, None)));
            }
            for values in self.measures {
                columns.push(Arc::new(Float64Array::new(values, None)));
            }
            if shape.users {
                let users = Decimal128Array::new(self.users, None).with_data_type(USER_TYPE);
                columns.push(Arc::new(users));
            }
        }
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        RecordBatch::try_new_with_options(batch_schema(shape, self.outcomes), columns, &options)
            .map_err(|error| error.to_string())
    }

    /// The rows of `batch`, a batch of [`batch_schema`]`(shape, outcomes)`:
    /// its values' buffers shared, not copied (the ids are).
    pub fn from_batch(
        shape: Shape,
        outcomes: bool,
        batch: &RecordBatch,
    ) -> Result<Columns, String> {
        let rows = batch.num_rows();
        let mut built = Columns::builder(shape, outcomes, 0);
        if shape.ids {
            let ids = batch
                .column_by_name(ROW_ID)
                .and_then(|column| column.as_any().downcast_ref::<StringArray>())
                .ok_or("a batch without its row ids")?;
            if ids.null_count() > 0 {
                return Err("a batch with a null row id".to_owned());
            }
            let ids: Vec<&str> = (0..rows).map(|row| ids.value(row)).collect();
            built.append_ids(&ids)?;
        } else {
            built.append_empty_ids(rows);
        }
        let sized = |what: &str, values: usize, width: usize| match values == rows * width {
            true => Ok(()),
            false => Err(format!(
                "{rows} rows with {values} {what}, not {}",
                rows * width
            )),
        };
        let features = match shape.features {
            0 => Vec::new().into(),
            _ => values::<Float32Array>(batch, FEATURES)?.values().clone(),
        };
        sized("features", features.len(), shape.features)?;
        let dimensions = (0..shape.dimensions)
            .map(|j| column::<UInt32Type>(batch, &dimension(j)))
            .collect::<Result<Vec<_>, _>>()?;
        let (mut labels, mut measures) = (Vec::new().into(), Vec::new());
        if outcomes && shape.labels {
            labels = column::<UInt8Type>(batch, LABEL)?;
            if labels.iter().any(|&label| label > 1) {
                return Err("a stored label is neither 0 nor 1".to_owned());
            }
        }
        if outcomes {
            measures = (0..shape.measures)
                .map(|j| column::<Float64Type>(batch, &measure(j)))
                .collect::<Result<Vec<_>, _>>()?;
        }
        let users = match outcomes && shape.users {
            true => column::<Decimal128Type>(batch, USER)?,
            false => Vec::new().into(),
        };
        sized("users", users.len(), usize::from(outcomes && shape.users))?;
        let columns = Columns {
            shape,
            outcomes,
            rows,
            ids: built.ids,
            id_ends: built.id_ends,
            labels,
            features,
            measures,
            dimensions,
            users,
            index: OnceLock::new(),
            touched: Touched::default(),
        };
        Ok(columns)
    }
}
