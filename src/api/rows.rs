//! `POST /v1/datasets/{id}/rows`: streamed uploads, one transaction each.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use dpgate_api_types::{
    ARROW_STREAM, CSV, IngestReport, LineError, NDJSON, PARQUET, Problem, RegisterRows,
    Registration, Source,
};
use futures_util::StreamExt;
use tracing::Instrument;

use super::body::media_type;
use super::datasets::load_visible;
use super::extract::Admin;
use super::registrations;
use crate::app::AppState;
use crate::dataset::WalrStats;
use crate::dataset::{ChunkHashes, DatasetRecord};
use crate::engine::{self, Located, SourceError, Upload};
use crate::error::ApiError;
use crate::ingest::{self, ChannelReader, FileRows, Format, RowIds, RowRecord};
use crate::snapshots::{Builder, Columns, Shape, Snapshots};

/// The rows a request brings: its body in the format its media type
/// names, or (`application/json`) the Parquet files of the source it
/// names, located under the operator's roots.
async fn rows_of(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Rows, ApiError> {
    let media = media_type(
        headers,
        &[
            CSV,
            NDJSON,
            "application/ndjson",
            "application/jsonl",
            ARROW_STREAM,
            PARQUET,
            JSON,
        ],
        &format!(
            "upload rows as {CSV}, {NDJSON}, {ARROW_STREAM} or {PARQUET}, or name a source as \
             {JSON}"
        ),
    )?;
    let format = match media.essence_str() {
        CSV => Format::Csv,
        ARROW_STREAM => Format::ArrowStream,
        PARQUET => Format::Parquet,
        JSON => {
            let limit = state.limits.body_bytes;
            let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
                ApiError::PayloadTooLarge(format!("JSON bodies are limited to {limit} bytes"))
            })?;
            let request: RegisterRows = super::body::parse(&bytes)?;
            return located(state, &request.source).await.map(Rows::Source);
        }
        _ => Format::Ndjson,
    };
    let limit = state.limits.ingest_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large(limit));
    }
    Ok(Rows::Body {
        format,
        body,
        limit,
    })
}

/// The files of `source`.
pub(super) async fn located(state: &AppState, source: &Source) -> Result<Vec<Located>, ApiError> {
    state
        .snapshots
        .data()
        .locate(&source.uri)
        .await
        .map_err(source_error)
}

pub(super) fn source_error(error: SourceError) -> ApiError {
    match error {
        SourceError::Forbidden(detail) => ApiError::Forbidden(detail),
        SourceError::Invalid(detail) => ApiError::Invalid(detail),
    }
}

const JSON: &str = "application/json";

fn too_large(limit: u64) -> ApiError {
    ApiError::PayloadTooLarge(format!("uploads are limited to {limit} bytes"))
}

/// Feeds the body to the parser, counting bytes against the limit.
async fn pump(
    body: Body,
    chunks: tokio::sync::mpsc::Sender<Bytes>,
    limit: u64,
) -> Result<(), ApiError> {
    let mut stream = body.into_data_stream();
    let mut total: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|error| ApiError::Malformed(format!("reading the body: {error}")))?;
        total += chunk.len() as u64;
        if total > limit {
            return Err(too_large(limit));
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
) -> Result<(), ApiError> {
    while let Some(batch) = batches.recv().await {
        if let Some(session) = session.as_deref_mut()
            && write
        {
            session.insert(batch).await?;
        }
    }
    Ok(())
}

/// The snapshot an upload to `dataset` extends, if it is in memory (or
/// the dataset is empty): then the upload's rows are kept as they are
/// parsed, and the new version is held without reading it back.
fn warm_base(snapshots: &Snapshots, dataset: &DatasetRecord) -> Option<Arc<Columns>> {
    if dataset.n_rows == 0 {
        return Some(Arc::new(Columns::empty(Shape::of(&dataset.schema), true)));
    }
    snapshots.held(dataset.id, dataset.n_rows)
}

fn keep_rows(builder: &mut Builder, batch: &[RowRecord]) -> Result<(), String> {
    for row in batch {
        builder.push(
            &row.row_id,
            row.label,
            &row.features,
            &row.measures,
            &row.dimensions,
        )?;
    }
    Ok(())
}

/// Holds the version `record` just committed: `base` followed by the
/// upload's rows, as they are stored.
async fn keep_warm(
    snapshots: &Arc<Snapshots>,
    record: &DatasetRecord,
    base: Arc<Columns>,
    added: Builder,
) {
    let (snapshots, id, version) = (snapshots.clone(), record.id, record.n_rows);
    let kept = tokio::task::spawn_blocking(move || {
        let added = added.finish();
        let next = if base.is_empty() {
            added
        } else {
            base.joined(&added)?
        };
        snapshots.keep(id, version, next);
        Ok::<_, String>(())
    })
    .await;
    if let Ok(Err(error)) | Err(error) = kept.map_err(|error| error.to_string()) {
        tracing::warn!(dataset = %id, %error, "the new version was not kept in memory");
    }
}

/// Appends rows (CSV with a header, NDJSON, an Arrow IPC stream or a
/// Parquet file) to a dataset, or registers Parquet files in place as its
/// next version (a JSON body naming their `source`; with `Prefer:
/// respond-async`, in the background). The whole upload is one
/// transaction: any bad row stores nothing.
#[utoipa::path(
    post,
    path = "/v1/datasets/{id}/rows",
    operation_id = "uploadRows",
    tag = "datasets",
    request_body(
        description = "CSV with a header naming `row_id`, the label, every feature, measure and dimension; NDJSON objects with the same keys; or an Arrow IPC stream or a Parquet file with columns of those names (numbers: any float or integer type; `row_id` and dimensions: strings; the label: an integer 0 or 1, or a boolean). In Arrow and Parquet a bad row's `line` is its row number, from 1. Or, as JSON, a `source` of Parquet files to register in place (a bad row names its `file`).",
        content((String = "text/csv"), (String = "application/x-ndjson"), (String = "application/vnd.apache.arrow.stream"), (String = "application/vnd.apache.parquet"), (RegisterRows = "application/json")),
    ),
    params(("id" = Uuid, Path, description = "Dataset id"), ("Prefer" = Option<String>, Header, description = "`respond-async` (RFC 7240): with a `source`, register it in the background and answer `202 Accepted` at once; with a body of rows, the preference is ignored")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Stored", body = IngestReport),
        (status = 202, description = "Registering in the background (`Prefer: respond-async`): the registration, at its `Location`", body = Registration, headers(("Location" = String, description = "`/v1/registrations/{id}`"), ("Preference-Applied" = String, description = "`respond-async`"))),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin, or a source outside the operator's `DPGATE_DATA_ROOTS`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such dataset", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "The body could not be read", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Over the upload limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not CSV or NDJSON in UTF-8, an Arrow IPC stream or a Parquet file; or a Content-Encoding", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad rows, by line number (a line longer than a row of the schema can need ends the upload) and, of a source, file; a source that is not a readable Parquet file or directory; nothing stored", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`timeout`: the upload took too long and was rolled back", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn upload(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let dataset = load_visible(&state, &caller, &id).await?;
    let rows = rows_of(&state, &headers, body).await?;
    let span = tracing::info_span!("ingest", dataset = %dataset.id);
    if matches!(rows, Rows::Source(_)) && registrations::respond_async(&headers) {
        let id = dataset.id;
        let work = ingest_into(state.clone(), dataset, rows).instrument(span);
        return registrations::start(&state, id, &caller.sub, work).await;
    }
    let report = ingest_into(state, dataset, rows).instrument(span).await?;
    Ok(Json(report).into_response())
}

/// Where an upload's rows come from.
pub(super) enum Rows {
    /// A request body, written out as the new version's files.
    Body {
        format: Format,
        body: Body,
        limit: u64,
    },
    /// Parquet files registered in place: read and checked, not copied.
    Source(Vec<Located>),
}

/// What reading the rows came to.
pub(super) struct Read {
    summary: ingest::Summary,
    /// Of a source: where its rows are, and its files' hashes.
    files: FileRows,
    hashes: Hashes,
    /// Of rows read without the upload's session (a source's, read before
    /// the dataset is locked): their ids, to check under the lock.
    ids: Option<RowIds>,
    /// The version they follow and the rows as a block, if the new version
    /// is to be held in memory.
    pub(super) added: Option<(Arc<Columns>, Builder)>,
}

impl Read {
    /// Rows read.
    pub(super) fn rows(&self) -> u64 {
        self.summary.rows
    }

    /// Refuses the rows whose id the version `session` follows already
    /// has, if they were read without it.
    async fn check_ids(&mut self, session: &mut Upload) -> Result<(), ApiError> {
        match self.ids.take() {
            Some(ids) => refuse(session.stored(ids).await?, &self.files, "source"),
            None => Ok(()),
        }
    }
}

/// Passes the parsed rows on to the store, keeping them as a block too
/// while the new version may be held in memory.
struct Keeper {
    added: Option<Builder>,
    snapshots: Arc<Snapshots>,
    shape: Shape,
    version: u64,
    batches: tokio::sync::mpsc::Sender<Vec<RowRecord>>,
}

impl Keeper {
    fn take(&mut self, batch: Vec<RowRecord>) -> bool {
        if let Some(builder) = &mut self.added {
            let rows = self.version + (builder.len() + batch.len()) as u64;
            if !self.snapshots.fits(self.shape, rows) || keep_rows(builder, &batch).is_err() {
                self.added = None;
            }
        }
        self.batches.blocking_send(batch).is_ok()
    }
}

/// The upload of `rows` into `dataset`, in its `ingest` span (the
/// parser's thread included).
async fn ingest_into(
    state: AppState,
    dataset: DatasetRecord,
    rows: Rows,
) -> Result<IngestReport, ApiError> {
    let (read, record) = if matches!(rows, Rows::Source(_)) {
        // Read before the dataset is locked: a registration takes minutes,
        // which the lock would keep every debit of the store (SQLite) or of
        // the dataset (Postgres) waiting for.
        let mut read = read_rows(&state, &dataset, rows, None).await?;
        let record = commit_source(begin(&state, &dataset).await?, &mut read).await?;
        (read, record)
    } else {
        let mut session = begin(&state, &dataset).await?;
        let read = read_rows(&state, &dataset, rows, Some(&mut session)).await?;
        let record = session
            .commit(read.summary.rows, &stats_of(&read.summary)?)
            .await?;
        (read, record)
    };
    let rows = read.rows();
    finish_upload(&state, &dataset, &record, rows, read.added).await;
    Ok(IngestReport {
        rows_added: rows,
        n_rows: record.n_rows,
    })
}

/// An upload's session: the dataset locked, its version current.
pub(super) async fn begin(state: &AppState, dataset: &DatasetRecord) -> Result<Upload, ApiError> {
    Ok(Upload::begin(
        state.store.as_ref(),
        state.snapshots.data().clone(),
        dataset,
    )
    .await?)
}

/// Records a source's files, read and checked, as the version `session`
/// makes, once no row's id is already the dataset's.
pub(super) async fn commit_source(
    mut session: Upload,
    read: &mut Read,
) -> Result<DatasetRecord, ApiError> {
    read.check_ids(&mut session).await?;
    let rows = read.summary.rows;
    if read.files.counts().iter().sum::<u64>() != rows {
        return Err(ApiError::Invalid(
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
    .map_err(source_error)?;
    Ok(session
        .commit_registered(rows, &stats_of(&read.summary)?, &files)
        .await?)
}

/// The sums of an upload that had no bad row.
fn stats_of(summary: &ingest::Summary) -> Result<WalrStats, ApiError> {
    // The parser returns sums exactly when it found no bad line.
    summary
        .stats
        .clone()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("an upload without sums")))
}

/// A source's files and their hashes, computed while their rows are read.
#[derive(Default)]
struct Hashes {
    located: Vec<Located>,
    hashes: Vec<(String, ChunkHashes)>,
}

/// Reads and checks `rows` for `dataset` (whose `n_rows` is the version
/// they follow), storing them through `session` (a body's) or checking
/// their ids against it (a source's); bad rows are the error.
pub(super) async fn read_rows(
    state: &AppState,
    dataset: &DatasetRecord,
    rows: Rows,
    mut session: Option<&mut Upload>,
) -> Result<Read, ApiError> {
    let (batch_sender, mut batches) = tokio::sync::mpsc::channel::<Vec<RowRecord>>(2);
    let schema = dataset.schema.clone();
    let span = tracing::Span::current();
    let base = warm_base(&state.snapshots, dataset);
    let shape = Shape::of(&schema);
    let mut keeper = Keeper {
        added: base.is_some().then(|| Columns::builder(shape, true, 0)),
        snapshots: state.snapshots.clone(),
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
        .map_err(|error| ApiError::Internal(anyhow::anyhow!("the parser failed: {error}")))?;
    let (mut summary, files) =
        parsed.map_err(|error| ApiError::Malformed(format!("reading the rows: {error}")))?;
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
            .map_err(|error| ApiError::Internal(anyhow::anyhow!("hashing failed: {error}")))??,
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

/// Refuses the rows `lines` names, if any, by line and (of a source) file.
fn refuse(mut lines: Vec<LineError>, files: &FileRows, what: &str) -> Result<(), ApiError> {
    if lines.is_empty() {
        return Ok(());
    }
    for line in &mut lines {
        files.locate(line);
    }
    Err(ApiError::BadLines {
        detail: format!(
            "the {what} has bad rows (the first {} are listed); nothing was stored",
            lines.len()
        ),
        lines,
    })
}

/// Ends an upload that made `record` from `dataset` with `rows` more rows:
/// holds the new version if it was kept as it was read.
pub(super) async fn finish_upload(
    state: &AppState,
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
        keep_warm(&state.snapshots, record, base, added).await;
    }
    metrics::counter!("dpgate_ingested_rows_total").increment(rows);
    tracing::info!(dataset = %record.id, rows, "rows ingested");
}
