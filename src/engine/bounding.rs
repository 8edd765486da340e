//! Unit `user` in the engine: a person's rows bounded by windows over the
//! user column, before a summed pass adds them up. The scan gives every
//! row its keyed rank ([`ranked`]); [`bound`] keeps what
//! [`crate::dp::contribution::keep`] (or, for a pass grouped by some
//! dimensions, [`crate::dp::contribution::keep_grouped`]) keeps:
//!
//! 1. grouped (when `g` or `r` binds):
//!    `ROW_NUMBER() OVER (PARTITION BY user, cell ORDER BY rank, row_id) ≤ r`
//!    and `DENSE_RANK() OVER (PARTITION BY user ORDER BY first, first_id) ≤ g`,
//!    where `first` and `first_id` are the rank and id of the cell's first
//!    row (`FIRST_VALUE` over the cell's window);
//! 2. of those rows,
//!    `ROW_NUMBER() OVER (PARTITION BY user ORDER BY rank, row_id) ≤ m`.
//!
//! Every window is a function of one person's rows and the key, so the rows
//! kept are the same however the engine partitions, orders and spreads the
//! rows (DataFusion repartitions by the window's keys before it runs one),
//! and the pass's exact sums over them are the in-memory path's.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use datafusion::common::Result;
use datafusion::functions_window::expr_fn::{dense_rank, first_value, row_number};
use datafusion::logical_expr::{ExprFunctionExt, SortExpr};
use datafusion::prelude::{DataFrame, Expr, col, lit};

use crate::domain::dataset::{ROW_ID, Users};
use crate::dp::contribution::ContributionBounds;
use crate::snapshots::{USER, dimension};

/// The column of each row's keyed rank in a scan of a dataset of unit
/// `user` read with its ids and people.
pub const RANK: &str = "rank";

/// `batch`'s schema with the rank column after its own.
pub fn with_rank(batch: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = batch.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(RANK, DataType::UInt64, false));
    Arc::new(ArrowSchema::new(fields))
}

/// `batch` (with its row ids) and each row's rank under `users`' key.
pub fn ranked(batch: RecordBatch, users: &Users, schema: SchemaRef) -> Result<RecordBatch, String> {
    let ids = batch
        .column_by_name(ROW_ID)
        .and_then(|ids| ids.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| "a batch to rank without its row ids".to_owned())?;
    let ranks: UInt64Array = ids
        .iter()
        .map(|id| Some(users.key.row_rank(id.unwrap_or_default().as_bytes()).0))
        .collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns.push(Arc::new(ranks));
    RecordBatch::try_new(schema, columns).map_err(|error| error.to_string())
}

/// The rows of `frame` a pass under `bounds` reads, with the columns they
/// had: the dimensions `grouped_by` name its cells.
pub fn bound(
    frame: DataFrame,
    bounds: ContributionBounds,
    grouped_by: &[usize],
) -> Result<DataFrame> {
    let columns: Vec<Expr> = frame
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    let in_rank_order =
        || -> Vec<SortExpr> { vec![col(RANK).sort(true, false), col(ROW_ID).sort(true, false)] };
    let person = || vec![col(USER)];
    let mut frame = frame;
    let per_cell = bounds.groups < bounds.rows || bounds.rows_per_group < bounds.rows;
    if !grouped_by.is_empty() && per_cell {
        let cell: Vec<Expr> = person()
            .into_iter()
            .chain(grouped_by.iter().map(|&j| col(dimension(j))))
            .collect();
        let in_cell = |value: Expr| {
            value
                .partition_by(cell.clone())
                .order_by(in_rank_order())
                .build()
        };
        frame = frame.window(vec![
            in_cell(row_number())?.alias(NTH_OF_CELL),
            in_cell(first_value(col(RANK)))?.alias(FIRST),
            in_cell(first_value(col(ROW_ID)))?.alias(FIRST_ID),
        ])?;
        let cell_order = dense_rank()
            .partition_by(person())
            .order_by(vec![
                col(FIRST).sort(true, false),
                col(FIRST_ID).sort(true, false),
            ])
            .build()?
            .alias(CELL_OF_USER);
        frame = frame.window(vec![cell_order])?.filter(
            col(NTH_OF_CELL)
                .lt_eq(lit(u64::from(bounds.rows_per_group)))
                .and(col(CELL_OF_USER).lt_eq(lit(u64::from(bounds.groups)))),
        )?;
    }
    let nth_of_user = row_number()
        .partition_by(person())
        .order_by(in_rank_order())
        .build()?
        .alias(NTH_OF_USER);
    frame
        .window(vec![nth_of_user])?
        .filter(col(NTH_OF_USER).lt_eq(lit(u64::from(bounds.rows))))?
        .select(columns)
}

/// The windows' columns, dropped before the pass.
const NTH_OF_CELL: &str = "dpgate_nth_of_cell";
const FIRST: &str = "dpgate_first";
const FIRST_ID: &str = "dpgate_first_id";
const CELL_OF_USER: &str = "dpgate_cell_of_user";
const NTH_OF_USER: &str = "dpgate_nth_of_user";
