//! Parquet files registered in place, read as one upload: their rows in
//! file order, checked as a Parquet body's are, each bad row named by its
//! file and its row number in it.

use arrow_schema::ArrowError;
use dpgate_api_types::LineError;
use futures_util::StreamExt;
use parquet::arrow::ProjectionMask;
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;

use super::row::RowBuilder;
use super::{BATCH_ROWS, RowRecord, Summary, arrow_format};
use crate::domain::dataset::Schema;

/// One file of a source: its name in errors, and its footer as read
/// (or why it could not be).
pub struct SourceFile<R> {
    pub name: String,
    pub parquet: Result<ParquetRecordBatchStreamBuilder<R>, ParquetError>,
}

/// A whole file's problem, reported as its row 1.
fn refused(name: &str, reason: String) -> Summary {
    Summary {
        errors: vec![LineError {
            line: 1,
            reason,
            file: Some(name.to_owned()),
        }],
        ..Summary::default()
    }
}

/// Where the rows of a source's files are: each file's name and the rows
/// before it, in file order.
#[derive(Debug, Default)]
pub struct FileRows {
    starts: Vec<(u64, String)>,
    counts: Vec<u64>,
}

impl FileRows {
    /// Each file's row count, as its footer records it.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The file and the row number in it of the row numbered `line`
    /// across all the files.
    fn find(&self, line: u64) -> Option<(u64, &str)> {
        let at = self.starts.partition_point(|(before, _)| *before < line);
        let (before, name) = self.starts.get(at.checked_sub(1)?)?;
        Some((line - before, name))
    }

    /// Names the file of an error whose line numbers the rows across all
    /// the files, and numbers it within that file.
    pub fn locate(&self, error: &mut LineError) {
        if error.file.is_some() {
            return;
        }
        if let Some((line, name)) = self.find(error.line) {
            error.line = line;
            error.file = Some(name.to_owned());
        }
    }

    /// The row numbered `line` across all the files, as an error names it.
    fn name(&self, line: u64) -> String {
        match self.find(line) {
            Some((line, name)) => format!("row {line} of {name}"),
            None => format!("row {line}"),
        }
    }
}

/// Reads `files` as one upload (their row ids unique across all of them),
/// handing batches of valid rows to `sink`, rows numbered across the
/// files (see [`FileRows::locate`]). Only the schema's columns are read.
/// On a blocking thread of the runtime, which fetches the files' bytes.
pub fn parse_files<R: AsyncFileReader + Unpin + Send + 'static>(
    files: Vec<SourceFile<R>>,
    schema: &Schema,
    sink: impl FnMut(Vec<RowRecord>) -> bool,
) -> std::io::Result<(Summary, FileRows)> {
    let rows = RowBuilder::new(schema);
    let mut readers = Vec::with_capacity(files.len());
    let mut located = FileRows::default();
    let mut total = 0u64;
    let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
    for SourceFile { name, parquet } in files {
        let builder = match parquet {
            Ok(builder) => builder,
            Err(error) => {
                let reason = format!("the file is not Parquet: {error}");
                return Ok((refused(&name, reason), located));
            }
        };
        if let Some(missing) = rows
            .names
            .iter()
            .find(|column| builder.schema().field_with_name(column).is_err())
        {
            let reason = format!("the file has no column {missing:?}");
            return Ok((refused(&name, reason), located));
        }
        let count = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        let mask = ProjectionMask::columns(builder.parquet_schema(), rows.names.iter().copied());
        let reader = match builder
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()
        {
            Ok(reader) => reader,
            Err(error) => {
                let reason = format!("the file cannot be read: {error}");
                return Ok((refused(&name, reason), located));
            }
        };
        let runtime = runtime.clone();
        let mut reader = reader;
        readers.push(std::iter::from_fn(move || {
            runtime
                .block_on(reader.next())
                .map(|batch| batch.map_err(ArrowError::from))
        }));
        located.starts.push((total, name));
        located.counts.push(count);
        total += count;
    }
    let summary = arrow_format::run(
        Ok::<_, ArrowError>(readers.into_iter().flatten()),
        "the file cannot be read as Parquet",
        &rows,
        usize::try_from(total).unwrap_or(0),
        &|line| located.name(line),
        sink,
    )?;
    Ok((summary, located))
}
