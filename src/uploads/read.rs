//! Reading an upload's rows: the body pumped to the parser on a thread of
//! its own, or a source's files read and hashed at once, the rows stored
//! through the upload's session as they come, and bad rows refused.

use std::sync::Arc;

use bytes::Bytes;
use dpgate_api_types::LineError;
use futures_util::StreamExt;

use super::warm::{Keeper, warm_base};
use super::{ByteStream, Read, Rows, UploadError};
use crate::domain::dataset::{ChunkHashes, DatasetRecord};
use crate::domain::row::RowRecord;
use crate::engine::{Located, Upload};
use crate::ingest::{self, ChannelReader, FileRows};
use crate::snapshots::{Columns, Shape, Snapshots};

/// A source's files and their hashes, computed while their rows are read.
#[derive(Default)]
pub(super) struct Hashes {
    pub(super) located: Vec<Located>,
    pub(super) hashes: Vec<(String, ChunkHashes)>,
}

/// Reads and checks `rows` for `dataset` (whose `n_rows` is the version
/// they follow), storing them through `session` (a body's) or checking
/// their ids against it (a source's); bad rows are the error.
pub async fn read_rows(
    snapshots: &Arc<Snapshots>,
    dataset: &DatasetRecord,
    rows: Rows,
    mut session: Option<&mut Upload>,
) -> Result<Read, UploadError> {
    let (batch_sender, mut batches) = tokio::sync::mpsc::channel::<Vec<RowRecord>>(2);
    let schema = dataset.schema.clone();
    let span = tracing::Span::current();
    let base = warm_base(snapshots, dataset);
    let shape = Shape::of(&schema);
    let mut keeper = Keeper {
        added: base.is_some().then(|| Columns::builder(shape, true, 0)),
        snapshots: snapshots.clone(),
        shape,
        version: dataset.n_rows,
        batches: batch_sender,
    };
    let (chunk_sender, chunks) = tokio::sync::mpsc::channel::<Bytes>(16);
    let write = matches!(rows, Rows::Body { .. });
    let (body, hashing, parser) = match rows {
        Rows::Body {
            format,
            body,
            limit,
        } => {
            let parser = tokio::task::spawn_blocking(move || {
                let _entered = span.enter();
                let summary = ingest::parse(format, ChannelReader::new(chunks), &schema, |batch| {
                    keeper.take(batch)
                });
                (
                    summary.map(|summary| (summary, FileRows::default())),
                    keeper.added,
                )
            });
            (Some((body, limit)), None, parser)
        }
        Rows::Source(located) => {
            let files = located.clone();
            let parser = tokio::task::spawn_blocking(move || {
                let _entered = span.enter();
                // A dimension is matched once per dictionary value, not per row.
                let dimensions: Vec<&str> =
                    schema.dimensions.iter().map(|d| d.name.as_str()).collect();
                let opened = files.iter().map(|file| file.open(&dimensions)).collect();
                let parsed = ingest::parse_files(opened, &schema, |batch| keeper.take(batch));
                (parsed, keeper.added)
            });
            // The files are hashed on the other core while they are read.
            let hashing = tokio::task::spawn_blocking(move || {
                let runtime = tokio::runtime::Handle::current();
                let hashes: Result<Vec<_>, _> =
                    located.iter().map(|file| file.hashes(&runtime)).collect();
                hashes.map(|hashes| Hashes { located, hashes })
            });
            (None, Some(hashing), parser)
        }
    };
    let pumped = async {
        match body {
            Some((body, limit)) => pump(body, chunk_sender, limit).await,
            None => Ok(()),
        }
    };
    let (pumped, stored) = tokio::join!(
        pumped,
        store_batches(session.as_deref_mut(), &mut batches, write),
    );
    let (parsed, added) = parser
        .await
        .map_err(|error| UploadError::Internal(anyhow::anyhow!("the parser failed: {error}")))?;
    let (mut summary, files) =
        parsed.map_err(|error| UploadError::Malformed(format!("reading the rows: {error}")))?;
    pumped?;
    stored?;
    let what = if write { "upload" } else { "source" };
    let lines = std::mem::take(&mut summary.errors);
    let mut ids = Some(std::mem::take(&mut summary.ids));
    refuse(lines, &files, what)?;
    if let Some(session) = session {
        let ids = ids.take().expect("the ids are there until checked");
        refuse(session.stored(ids).await?, &files, what)?;
    }
    let hashes = match hashing {
        Some(hashing) => hashing
            .await
            .map_err(|error| UploadError::Internal(anyhow::anyhow!("hashing failed: {error}")))??,
        None => Hashes::default(),
    };
    Ok(Read {
        summary,
        files,
        hashes,
        ids,
        added: base.zip(added),
    })
}

/// Feeds the body to the parser, counting bytes against the limit.
async fn pump(
    body: ByteStream,
    chunks: tokio::sync::mpsc::Sender<Bytes>,
    limit: u64,
) -> Result<(), UploadError> {
    let mut body = body;
    let mut total: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|error| UploadError::Malformed(format!("reading the body: {error}")))?;
        total += chunk.len() as u64;
        if total > limit {
            return Err(UploadError::TooLarge(limit));
        }
        if chunks.send(chunk).await.is_err() {
            // The parser stopped early (bad lines); it reports why.
            break;
        }
    }
    Ok(())
}

/// Stores batches as they come (or, of files registered in place, only
/// takes them). Without a session (a dataset not yet created) they are
/// only read.
async fn store_batches(
    mut session: Option<&mut Upload>,
    batches: &mut tokio::sync::mpsc::Receiver<Vec<RowRecord>>,
    write: bool,
) -> Result<(), UploadError> {
    while let Some(batch) = batches.recv().await {
        if let Some(session) = session.as_deref_mut()
            && write
        {
            session.insert(batch).await?;
        }
    }
    Ok(())
}

/// Refuses the rows `lines` names, if any, by line and (of a source) file.
pub(super) fn refuse(
    mut lines: Vec<LineError>,
    files: &FileRows,
    what: &str,
) -> Result<(), UploadError> {
    if lines.is_empty() {
        return Ok(());
    }
    for line in &mut lines {
        files.locate(line);
    }
    Err(UploadError::BadLines {
        detail: format!(
            "the {what} has bad rows (the first {} are listed); nothing was stored",
            lines.len()
        ),
        lines,
    })
}
