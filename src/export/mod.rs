//! The label-free feature matrix of a dataset whose features are public
//! (privacy unit `label`), streamed out as CSV, NDJSON or an Arrow IPC
//! stream in the units the features were uploaded in.

mod encode;

use std::sync::Arc;

use arrow_schema::ArrowError;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::{Either, ready};
use futures_util::stream::BoxStream;

use crate::domain::dataset::DatasetRecord;
use crate::snapshots::Snapshots;
use crate::store::StoreError;
use encode::Encoder;

/// A text format of the export.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Text {
    Csv,
    Ndjson,
}

/// The export's format.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Format {
    Text(Text),
    Arrow,
}

/// The export's chunks, in order.
pub type Pieces = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// Why an export could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot encode the export: {0}")]
    Encode(#[from] ArrowError),
}

/// The features of the snapshot of `dataset` in stored order, one chunk per
/// run of rows (see `Encoder::run_rows`): from the snapshot in memory if
/// it is held, else streamed from its inputs files (never
/// loaded: loading reads labels). Runs are encoded as the body is polled,
/// so the response holds one run at a time however large the block.
pub async fn features(
    snapshots: &Snapshots,
    dataset: DatasetRecord,
    format: Format,
) -> Result<Pieces, ExportError> {
    let blocks = match snapshots.held(dataset.id, dataset.n_rows) {
        Some(columns) => futures_util::stream::once(async move { Ok(columns) }).boxed(),
        None => snapshots
            .blocks(&dataset, false)
            .await?
            .map(|block| block.map(Arc::new))
            .boxed(),
    };
    let id = dataset.id;
    let (encoder, head) = Encoder::new(format, Arc::new(dataset.schema))?;
    let step = encoder.run_rows();
    let runs = blocks.flat_map(move |block| match block {
        Err(error) => Either::Left(futures_util::stream::once(ready(Err(error)))),
        Ok(block) => Either::Right(futures_util::stream::iter(
            (0..block.len())
                .step_by(step)
                .map(move |start| Ok((block.clone(), start..(start + step).min(block.len())))),
        )),
    });
    // `None` marks the end, for the tail.
    let pieces = runs
        .map(Some)
        .chain(futures_util::stream::once(ready(None)))
        .scan(encoder, move |encoder, run| {
            let piece = match run {
                Some(Ok((block, rows))) => encoder.run(&block, rows).map_err(anyhow::Error::from),
                Some(Err(error)) => Err(error.into()),
                None => encoder.tail().map_err(anyhow::Error::from),
            };
            ready(Some(piece.map(Bytes::from).map_err(|error| {
                tracing::error!(dataset = %id, error = %error, "feature export failed");
                std::io::Error::other(error.to_string())
            })))
        });
    let head = futures_util::stream::once(ready(Ok::<_, std::io::Error>(Bytes::from(head))));
    Ok(head.chain(pieces).boxed())
}
