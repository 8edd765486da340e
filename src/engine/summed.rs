//! Passes whose answer is a fixed list of exact integer sums, run by
//! DataFusion as an aggregate function: each partition of the rows sums
//! its own part and the parts are added. Integer addition does not depend
//! on its order, so the answer is bit-identical however the rows are split
//! (threads, partitions, files, their order, executors, retries), and the
//! sensitivity proven for the exact sums holds for the computed ones.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef, SchemaRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

use crate::snapshots::{Columns, Pass, Shape};

/// A pass whose state is a fixed number of exact sums: a part over some
/// rows is absorbed into another by adding its sums.
pub trait Summed: Pass + Clone + Sync {
    /// Whether it reads the features: a pass that does not is handed
    /// blocks of no features, and their columns are never decoded.
    const READS_FEATURES: bool = true;

    /// Whether it reads the row ids: a pass that does not is handed rows
    /// whose ids are empty, and the `row_id` column is never read.
    const READS_IDS: bool = true;

    /// The sums so far, always as many.
    fn sums(&self) -> Vec<i128>;

    /// Adds another part's [`Summed::sums`].
    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String>;
}

/// Adds `part` to `total`, sum by sum: a part of another length is
/// refused.
pub fn add_exact(total: &mut [i128], part: &[i128]) -> Result<(), String> {
    if part.len() != total.len() {
        return Err(format!("{} sums for {}", part.len(), total.len()));
    }
    for (sum, value) in total.iter_mut().zip(part) {
        *sum += value;
    }
    Ok(())
}

/// Sums as bytes: 16 little-endian bytes each.
pub fn encode(sums: &[i128]) -> Vec<u8> {
    sums.iter().flat_map(|sum| sum.to_le_bytes()).collect()
}

/// The sums of [`encode`]'s bytes.
pub fn decode(bytes: &[u8]) -> Result<Vec<i128>, String> {
    if !bytes.len().is_multiple_of(16) {
        return Err(format!("{} bytes are not a list of sums", bytes.len()));
    }
    Ok(bytes
        .chunks_exact(16)
        .map(|word| {
            let mut sum = [0; 16];
            sum.copy_from_slice(word);
            i128::from_le_bytes(sum)
        })
        .collect())
}

fn failed(detail: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(detail.into())
}

/// A [`Summed`] pass as an aggregate function of a batch's columns (those
/// of [`crate::snapshots::batch_schema`]), answering its sums
/// ([`encode`]d). `prototype` is the pass before any row.
pub struct SumsOf<S> {
    name: String,
    signature: Signature,
    prototype: S,
    schema: SchemaRef,
    shape: Shape,
    outcomes: bool,
}

impl<S: Summed> SumsOf<S> {
    /// `name` must differ from every other function of the plan's session.
    pub fn new(name: String, prototype: S, shape: Shape, outcomes: bool) -> Self {
        SumsOf {
            name,
            signature: Signature::variadic_any(Volatility::Immutable),
            prototype,
            schema: crate::snapshots::batch_schema(shape, outcomes),
            shape,
            outcomes,
        }
    }
}

impl<S> fmt::Debug for SumsOf<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SumsOf").field("name", &self.name).finish()
    }
}

/// Functions are told apart by name (one per pass of a plan).
impl<S> PartialEq for SumsOf<S> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<S> Eq for SumsOf<S> {}

impl<S> Hash for SumsOf<S> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl<S: Summed> AggregateUDFImpl for SumsOf<S> {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(Summing {
            width: self.prototype.sums().len(),
            pass: self.prototype.clone(),
            schema: self.schema.clone(),
            shape: self.shape,
            outcomes: self.outcomes,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[sums]", args.name),
            DataType::Binary,
            true,
        ))])
    }
}

/// One partition's part of a [`SumsOf`].
struct Summing<S> {
    pass: S,
    /// How many sums the pass holds (DataFusion asks the size often).
    width: usize,
    schema: SchemaRef,
    shape: Shape,
    outcomes: bool,
}

impl<S> fmt::Debug for Summing<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Summing").finish_non_exhaustive()
    }
}

impl<S: Summed> Accumulator for Summing<S> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let batch = RecordBatch::try_new(self.schema.clone(), values.to_vec())?;
        let block = Columns::from_batch(self.shape, self.outcomes, &batch).map_err(failed)?;
        self.pass.visit(&block).map_err(failed)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Binary(Some(encode(&self.pass.sums()))))
    }

    fn size(&self) -> usize {
        size_of::<Self>() + 16 * self.width
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let parts = states
            .first()
            .and_then(|column| column.as_any().downcast_ref::<BinaryArray>())
            .ok_or_else(|| failed("a part of sums that is not bytes"))?;
        for part in parts.iter().flatten() {
            let sums = decode(part).map_err(failed)?;
            self.pass.add_sums(&sums).map_err(failed)?;
        }
        Ok(())
    }
}

/// `fresh` (a pass before any row) over `parts`, as the engine runs it:
/// each part summed by a pass of its own, its sums encoded, decoded and
/// added to the answer, last part first.
#[cfg(test)]
pub(crate) fn summed_in_parts<S: Summed>(fresh: &S, parts: &[Columns]) -> S {
    let mut answer = fresh.clone();
    for part in parts.iter().rev() {
        let mut summed = fresh.clone();
        summed.visit(part).expect("visits");
        let sums = decode(&encode(&summed.sums())).expect("decodes");
        answer.add_sums(&sums).expect("adds");
    }
    answer
}
