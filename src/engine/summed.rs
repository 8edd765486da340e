//! Passes whose answer is a fixed list of exact integer sums, run by
//! DataFusion as an aggregate function: each partition of the rows sums
//! its own part and the parts are added. Integer addition does not depend
//! on its order, so the answer is bit-identical however the rows are split
//! (threads, partitions, files, their order, executors, retries), and the
//! sensitivity proven for the exact sums holds for the computed ones.
//!
//! A pass before any row is its settings, all public: it is written out
//! (`SumsOf::encode`) when a plan goes to other machines, and read back
//! there by the kind it names ([`Passes`]).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef, SchemaRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Needed;
use crate::snapshots::{Columns, Pass, Shape};

/// A pass whose state is a fixed number of exact sums: a part over some
/// rows is absorbed into another by adding its sums. Its settings are
/// public and travel with a plan (serde).
pub trait Summed: Pass + Clone + Sync + Serialize + DeserializeOwned {
    /// Names the pass's type among those a plan may carry ([`Passes`]).
    const KIND: &'static str;

    /// The columns it reads: it is handed blocks of these alone, and the
    /// others are never decoded (a pass reading no label nor measure opens
    /// no outcomes file). Every column unless a pass says otherwise.
    fn needs(&self) -> Needed {
        Needed::all(true)
    }

    /// The dimensions whose cells it sums apart. Under unit `user` a
    /// person's rows are then also bounded per cell (at most
    /// `max_groups_per_user` cells, `max_rows_per_group_per_user` rows in
    /// each); none unless a pass says otherwise.
    fn grouped_by(&self) -> Vec<usize> {
        Vec::new()
    }

    /// The sums so far, always as many.
    fn sums(&self) -> Vec<i128>;

    /// Adds another part's [`Summed::sums`].
    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String>;

    /// For a pass over people (unit `user`, a learner clipping each
    /// person's total): the pass that sums one person's rows, whose sums
    /// [`Summed::add_person`] takes. The engine then sums each person's
    /// rows apart with it and hands the pass the people one by one; a
    /// block it visits holds each person's rows together. `None` (the
    /// default) for a pass over rows.
    fn of_person(&self) -> Option<Self> {
        None
    }

    /// Adds one person: the sums of [`Summed::of_person`]'s pass over that
    /// person's rows alone.
    fn add_person(&mut self, rows: &[i128]) -> Result<(), String> {
        let _ = rows;
        Err(format!("a {} pass sums rows, not people", Self::KIND))
    }
}

/// A [`Summed`] pass before any row, whatever its type: what the engine's
/// aggregate function starts each partition's part from.
pub trait Prototype: Send + Sync + 'static {
    /// A part of the pass over batches of `schema`.
    fn part(&self, schema: SchemaRef, shape: Shape, outcomes: bool) -> Box<dyn Accumulator>;

    /// A part of the pass over people, each given as the sums of its
    /// [`Summed::of_person`] pass over their rows.
    fn people_part(&self) -> Box<dyn Accumulator>;

    /// How many sums it holds.
    fn width(&self) -> usize;

    /// Its [`Summed::KIND`].
    #[cfg(any(feature = "ballista", test))]
    fn kind(&self) -> &'static str;

    /// Its settings, as [`Passes`] reads them back.
    #[cfg(any(feature = "ballista", test))]
    fn settings(&self) -> Result<Vec<u8>, String>;
}

impl<S: Summed> Prototype for S {
    fn part(&self, schema: SchemaRef, shape: Shape, outcomes: bool) -> Box<dyn Accumulator> {
        Box::new(Summing {
            width: self.width(),
            pass: self.clone(),
            input: Input::Rows {
                schema,
                shape,
                outcomes,
            },
        })
    }

    fn people_part(&self) -> Box<dyn Accumulator> {
        Box::new(Summing {
            width: self.width(),
            pass: self.clone(),
            input: Input::People,
        })
    }

    fn width(&self) -> usize {
        self.sums().len()
    }

    #[cfg(any(feature = "ballista", test))]
    fn kind(&self) -> &'static str {
        S::KIND
    }

    #[cfg(any(feature = "ballista", test))]
    fn settings(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(self).map_err(|error| format!("a {} pass: {error}", S::KIND))
    }
}

/// Reads a pass's `Prototype::settings` back.
type Read = fn(&[u8]) -> Result<Arc<dyn Prototype>, String>;

fn read<S: Summed>(settings: &[u8]) -> Result<Arc<dyn Prototype>, String> {
    serde_json::from_slice::<S>(settings)
        .map(|pass| Arc::new(pass) as Arc<dyn Prototype>)
        .map_err(|error| format!("a {} pass: {error}", S::KIND))
}

/// The kinds of pass a plan read from another machine may carry.
#[derive(Default)]
pub struct Passes(Vec<(&'static str, Read)>);

impl Passes {
    /// These, and passes of type `S`.
    pub fn with<S: Summed>(mut self) -> Passes {
        self.0.push((S::KIND, read::<S>));
        self
    }

    #[cfg(any(feature = "ballista", test))]
    fn read(&self, kind: &str, settings: &[u8]) -> Result<Arc<dyn Prototype>, String> {
        let (_, read) = self
            .0
            .iter()
            .find(|(known, _)| *known == kind)
            .ok_or_else(|| format!("no pass of kind {kind:?}"))?;
        read(settings)
    }
}

impl fmt::Debug for Passes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(kind, _)| kind))
            .finish()
    }
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
/// ([`encode`]d).
pub struct SumsOf {
    name: String,
    signature: Signature,
    prototype: Arc<dyn Prototype>,
    schema: SchemaRef,
    shape: Shape,
    outcomes: bool,
    /// Whether it sums people, each the [`encode`]d sums of a person's
    /// rows ([`Summed::add_person`]), rather than rows.
    people: bool,
}

/// A [`SumsOf`] as it travels with a plan.
#[cfg(any(feature = "ballista", test))]
#[derive(Serialize, serde::Deserialize)]
struct Portable {
    kind: String,
    shape: Shape,
    outcomes: bool,
    people: bool,
    /// The pass's [`Prototype::settings`].
    settings: String,
}

impl SumsOf {
    /// `prototype` is the pass before any row; `name` must differ from
    /// every other function of the plan's session.
    pub fn new(name: String, prototype: Arc<dyn Prototype>, shape: Shape, outcomes: bool) -> Self {
        SumsOf {
            name,
            signature: Signature::variadic_any(Volatility::Immutable),
            prototype,
            schema: crate::snapshots::batch_schema(shape, outcomes),
            shape,
            outcomes,
            people: false,
        }
    }

    /// The function of a column of people's sums (those of the pass's
    /// [`Summed::of_person`] over each person's rows) adding them up.
    pub fn of_people(name: String, prototype: Arc<dyn Prototype>) -> Self {
        SumsOf {
            people: true,
            ..SumsOf::new(name, prototype, Shape::default(), false)
        }
    }
}

#[cfg(any(feature = "ballista", test))]
impl SumsOf {
    /// The function as bytes, for [`SumsOf::decode`] on another machine.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let portable = Portable {
            kind: self.prototype.kind().to_owned(),
            shape: self.shape,
            outcomes: self.outcomes,
            people: self.people,
            settings: String::from_utf8(self.prototype.settings().map_err(failed)?)
                .map_err(|error| failed(error.to_string()))?,
        };
        serde_json::to_vec(&portable).map_err(|error| failed(error.to_string()))
    }

    /// The function named `name` that [`SumsOf::encode`] wrote as
    /// `bytes`, its pass one of `passes`.
    pub fn decode(name: &str, bytes: &[u8], passes: &Passes) -> Result<SumsOf> {
        let portable: Portable =
            serde_json::from_slice(bytes).map_err(|error| failed(error.to_string()))?;
        let prototype = passes
            .read(&portable.kind, portable.settings.as_bytes())
            .map_err(failed)?;
        Ok(SumsOf {
            people: portable.people,
            ..SumsOf::new(
                name.to_owned(),
                prototype,
                portable.shape,
                portable.outcomes,
            )
        })
    }
}

impl fmt::Debug for SumsOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SumsOf").field("name", &self.name).finish()
    }
}

/// Functions are told apart by name (one per pass of a plan).
impl PartialEq for SumsOf {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for SumsOf {}

impl Hash for SumsOf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl AggregateUDFImpl for SumsOf {
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
        Ok(match self.people {
            true => self.prototype.people_part(),
            false => self
                .prototype
                .part(self.schema.clone(), self.shape, self.outcomes),
        })
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
    input: Input,
}

/// What a part is handed.
enum Input {
    /// Batches of rows of `schema`, read as blocks of `shape`.
    Rows {
        schema: SchemaRef,
        shape: Shape,
        outcomes: bool,
    },
    /// A column of people's sums ([`Summed::add_person`]).
    People,
}

impl<S> fmt::Debug for Summing<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Summing").finish_non_exhaustive()
    }
}

impl<S: Summed> Accumulator for Summing<S> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        match &self.input {
            Input::Rows {
                schema,
                shape,
                outcomes,
            } => {
                let batch = RecordBatch::try_new(schema.clone(), values.to_vec())?;
                let block = Columns::from_batch(*shape, *outcomes, &batch).map_err(failed)?;
                self.pass.visit(&block).map_err(failed)
            }
            Input::People => each_sums(values, |person| self.pass.add_person(person)),
        }
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
        each_sums(states, |sums| self.pass.add_sums(sums))
    }
}

/// `add` of every non-null list of sums in the first of `columns`, a
/// column of [`encode`]d sums.
fn each_sums(
    columns: &[ArrayRef],
    mut add: impl FnMut(&[i128]) -> Result<(), String>,
) -> Result<()> {
    let parts = columns
        .first()
        .and_then(|column| column.as_any().downcast_ref::<BinaryArray>())
        .ok_or_else(|| failed("a part of sums that is not bytes"))?;
    for part in parts.iter().flatten() {
        add(&decode(part).map_err(failed)?).map_err(failed)?;
    }
    Ok(())
}

/// `fresh` (a pass before any row) over `parts`, as the engine runs it on
/// a cluster: the pass written out and read back as a release's pass (so
/// it must be one of `passes`), each part summed
/// by a pass of its own, its sums encoded, decoded and added to the
/// answer, last part first.
#[cfg(test)]
pub(crate) fn summed_in_parts<S: Summed>(passes: &Passes, fresh: &S, parts: &[Columns]) -> S {
    let settings = fresh.settings().expect("writes");
    passes.read(S::KIND, &settings).expect("a release's pass");
    let fresh: S = serde_json::from_slice(&settings).expect("reads");
    let mut answer = fresh.clone();
    for part in parts.iter().rev() {
        let mut summed = fresh.clone();
        summed.visit(part).expect("visits");
        let sums = decode(&encode(&summed.sums())).expect("decodes");
        answer.add_sums(&sums).expect("adds");
    }
    answer
}
