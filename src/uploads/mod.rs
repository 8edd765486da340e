//! Uploads: rows of a request body parsed and written out as a dataset's
//! next version, or Parquet files registered in place, read and checked
//! before the dataset is locked. One transaction each: any bad row stores
//! nothing.

pub mod background;
mod read;
mod warm;

use std::sync::Arc;

use bytes::Bytes;
use dpgate_api_types::{IngestReport, LineError, Source};
use futures_util::stream::BoxStream;

use crate::domain::dataset::{DatasetRecord, WalrStats};
use crate::engine::{self, Located, SourceError, Upload};
use crate::ingest::{self, FileRows, Format, RowIds};
use crate::snapshots::{Builder, Columns, Snapshots};
use crate::store::{NewDataset, Store, StoreError};
pub use read::read_rows;
use read::refuse;
use warm::keep_warm;

/// A request body's bytes as they arrive (an error ends it).
pub type ByteStream = BoxStream<'static, Result<Bytes, String>>;

/// Why an upload stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("uploads are limited to {0} bytes")]
    TooLarge(u64),
    /// The body or the files could not be read.
    #[error("{0}")]
    Malformed(String),
    #[error("{0}")]
    Invalid(String),
    /// A source outside the operator's roots.
    #[error("{0}")]
    Forbidden(String),
    /// Rows that are not rows of the schema, by line and (of a source) file.
    #[error("{detail}")]
    BadLines {
        detail: String,
        lines: Vec<LineError>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<SourceError> for UploadError {
    fn from(error: SourceError) -> Self {
        match error {
            SourceError::Forbidden(detail) => UploadError::Forbidden(detail),
            SourceError::Invalid(detail) => UploadError::Invalid(detail),
        }
    }
}

/// The files of `source`, located under the operator's roots.
pub async fn locate(snapshots: &Snapshots, source: &Source) -> Result<Vec<Located>, UploadError> {
    Ok(snapshots.data().locate(&source.uri).await?)
}

/// Where an upload's rows come from.
pub enum Rows {
    /// A request body, written out as the new version's files.
    Body {
        format: Format,
        body: ByteStream,
        limit: u64,
    },
    /// Parquet files registered in place: read and checked, not copied.
    Source(Vec<Located>),
}

/// What reading the rows came to.
pub struct Read {
    summary: ingest::Summary,
    /// Of a source: where its rows are, and its files' hashes.
    files: FileRows,
    hashes: read::Hashes,
    /// Of rows read without the upload's session (a source's, read before
    /// the dataset is locked): their ids, to check under the lock.
    ids: Option<RowIds>,
    /// The version they follow and the rows as a block, if the new version
    /// is to be held in memory.
    pub added: Option<(Arc<Columns>, Builder)>,
}

impl Read {
    /// Rows read.
    pub fn rows(&self) -> u64 {
        self.summary.rows
    }

    /// Refuses the rows whose id the version `session` follows already
    /// has, if they were read without it.
    async fn check_ids(&mut self, session: &mut Upload) -> Result<(), UploadError> {
        match self.ids.take() {
            Some(ids) => refuse(session.stored(ids).await?, &self.files, "source"),
            None => Ok(()),
        }
    }
}

/// The upload of `rows` into `dataset`, in its `ingest` span (the
/// parser's thread included).
pub async fn ingest(
    store: &dyn Store,
    snapshots: &Arc<Snapshots>,
    dataset: DatasetRecord,
    rows: Rows,
) -> Result<IngestReport, UploadError> {
    let (read, record) = if matches!(rows, Rows::Source(_)) {
        // Read before the dataset is locked: a registration takes minutes,
        // which the lock would keep every debit of the store (SQLite) or of
        // the dataset (Postgres) waiting for.
        let mut read = read_rows(snapshots, &dataset, rows, None).await?;
        let record = commit_source(begin(store, snapshots, &dataset).await?, &mut read).await?;
        (read, record)
    } else {
        let mut session = begin(store, snapshots, &dataset).await?;
        let read = read_rows(snapshots, &dataset, rows, Some(&mut session)).await?;
        let record = session
            .commit(read.summary.rows, &stats_of(&read.summary)?)
            .await?;
        (read, record)
    };
    let rows = read.rows();
    finish_upload(snapshots, &dataset, &record, rows, read.added).await;
    Ok(IngestReport {
        rows_added: rows,
        n_rows: record.n_rows,
    })
}

/// An upload's session: the dataset locked, its version current.
pub async fn begin(
    store: &dyn Store,
    snapshots: &Snapshots,
    dataset: &DatasetRecord,
) -> Result<Upload, UploadError> {
    Ok(Upload::begin(store, snapshots.data().clone(), dataset).await?)
}

/// Records a source's files, read and checked, as the version `session`
/// makes, once no row's id is already the dataset's.
pub async fn commit_source(
    mut session: Upload,
    read: &mut Read,
) -> Result<DatasetRecord, UploadError> {
    read.check_ids(&mut session).await?;
    let rows = read.summary.rows;
    if read.files.counts().iter().sum::<u64>() != rows {
        return Err(UploadError::Invalid(
            "the files' footers do not count the rows they hold".to_owned(),
        ));
    }
    let files = engine::manifest(
        &read.hashes.located,
        read.files.counts(),
        &read.hashes.hashes,
        session.version(),
    )
    .await
    .map_err(UploadError::from)?;
    Ok(session
        .commit_registered(rows, &stats_of(&read.summary)?, &files)
        .await?)
}

/// The sums of an upload that had no bad row.
fn stats_of(summary: &ingest::Summary) -> Result<WalrStats, UploadError> {
    // The parser returns sums exactly when it found no bad line.
    summary
        .stats
        .clone()
        .ok_or_else(|| UploadError::Internal(anyhow::anyhow!("an upload without sums")))
}

/// Stores a new dataset's record (and its ledger's opening entry).
pub async fn create(
    store: &dyn Store,
    record: &DatasetRecord,
    actor: String,
) -> Result<(), StoreError> {
    store
        .create_dataset(&NewDataset {
            record: record.clone(),
            actor,
        })
        .await?;
    tracing::info!(dataset = %record.id, "dataset created");
    Ok(())
}

/// Creates `record` with the files of `located` as its first version. The
/// rows are read and checked before the dataset exists, so that a bad one
/// leaves nothing behind.
pub async fn register(
    store: &dyn Store,
    snapshots: &Arc<Snapshots>,
    record: DatasetRecord,
    actor: String,
    located: Vec<Located>,
) -> Result<DatasetRecord, UploadError> {
    let mut read = read_rows(snapshots, &record, Rows::Source(located), None).await?;
    create(store, &record, actor).await?;
    let registered = commit_source(begin(store, snapshots, &record).await?, &mut read).await?;
    let rows = read.rows();
    finish_upload(snapshots, &record, &registered, rows, read.added).await;
    Ok(registered)
}

/// Ends an upload that made `record` from `dataset` with `rows` more rows:
/// holds the new version if it was kept as it was read.
pub async fn finish_upload(
    snapshots: &Arc<Snapshots>,
    dataset: &DatasetRecord,
    record: &DatasetRecord,
    rows: u64,
    added: Option<(Arc<Columns>, Builder)>,
) {
    // The version just committed is the base plus these rows only if no
    // other upload committed since the base was read.
    if let Some((base, added)) = added
        && record.n_rows == dataset.n_rows + rows
    {
        keep_warm(snapshots, record, base, added).await;
    }
    metrics::counter!("dpgate_ingested_rows_total").increment(rows);
    tracing::info!(dataset = %record.id, rows, "rows ingested");
}
