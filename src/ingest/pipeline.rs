//! Parsing on every core. The calling thread reads the body and cuts it
//! into chunks of whole records ([`Split`]); worker threads turn each chunk
//! into rows ([`ParseChunk`]); the calling thread hands each chunk's rows to
//! the [`Collector`] in the order the chunks were cut, then what ended the
//! chunk (the body's end, a line too long, a read error), so the collector
//! sees what one thread reading line by line would have seen.
//!
//! A fixed number of chunks is in flight at a time (their buffers then
//! reused), each at most [`ChunkSize::bytes`] of the body and one record
//! more: memory stays bounded by the schema and the number of cores, and a
//! sink that blocks holds the reading back. A chunk ends after a number of
//! records or bytes of the body, never where the body's pieces happened to
//! end, though nothing but speed depends on where chunks end.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError};

use dpgate_api_types::LineError;

use super::collector::{Collector, Parsed, ParsedRow};
use super::row::RowBuilder;
use super::{RowRecord, Summary};

/// Most workers of one upload: beyond a few, the calling thread's share
/// (reading the body, the row id check, the sums, the sink) is the limit.
const MAX_WORKERS: usize = 8;
/// Chunks cut ahead per worker: enough that a worker finds the next one
/// waiting while the calling thread is busy with the sink.
const CHUNKS_PER_WORKER: usize = 3;

/// Where the body is cut.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkSize {
    /// Most records in a chunk.
    pub(super) records: usize,
    /// Bytes of the body after which a chunk takes no more records.
    pub(super) bytes: usize,
}

/// How an upload is cut and spread over threads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pipeline {
    pub(super) chunk: ChunkSize,
    /// Threads turning chunks into rows, besides the calling thread (at
    /// least one).
    pub(super) workers: usize,
}

/// Consecutive records of the body, as the reading thread cut them.
#[derive(Default)]
pub(super) struct Chunk {
    /// CSV: the records' fields, unquoted, one after another; NDJSON: the
    /// lines.
    pub(super) bytes: Vec<u8>,
    /// CSV: where each field ends in `bytes`.
    pub(super) field_ends: Vec<usize>,
    pub(super) records: Vec<Record>,
}

impl Chunk {
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.field_ends.clear();
        self.records.clear();
    }
}

/// One record of a chunk.
pub(super) struct Record {
    /// Where it starts in the upload.
    pub(super) line: u64,
    /// CSV: where its fields end in `field_ends`; NDJSON: where its line
    /// ends in `bytes`.
    pub(super) end: usize,
}

/// What came after a chunk's last record.
pub(super) enum End {
    /// More records.
    More,
    /// The end of the body.
    Body,
    /// A line longer than a row can need: the upload ends there.
    TooLong(LineError),
    /// Reading the body failed.
    Failed(io::Error),
}

/// The reading half of a format: the body cut into chunks.
pub(super) trait Split {
    /// Reads the next records into `chunk` (cleared first), as many as
    /// `size` allows, and says what came after them.
    fn fill(&mut self, chunk: &mut Chunk, size: ChunkSize) -> End;
}

/// The workers' half of a format: a chunk's records into rows.
pub(super) trait ParseChunk: Sync {
    /// Calls `each` with every record's line and its row (or why not), in
    /// order. A record that is no row at all (a blank NDJSON line) is left
    /// out.
    fn parse(
        &self,
        chunk: &Chunk,
        rows: &RowBuilder,
        each: &mut dyn FnMut(u64, Result<RowRecord, String>),
    );
}

/// A chunk for a worker, and where its rows go.
struct Job {
    chunk: Chunk,
    done: SyncSender<Done>,
}

/// A chunk's rows, and the chunk for its buffers.
struct Done {
    chunk: Chunk,
    rows: Vec<Parsed>,
}

impl Pipeline {
    /// Chunks of 1024 records or 1 MiB, a worker a core.
    pub(super) fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Pipeline {
            chunk: ChunkSize {
                records: 1024,
                bytes: 1 << 20,
            },
            workers: cores.min(MAX_WORKERS),
        }
    }

    /// Parses everything `split` reads with `format` into `sink`.
    pub(super) fn run(
        self,
        mut split: impl Split,
        format: &impl ParseChunk,
        rows: &RowBuilder,
        sink: impl FnMut(Vec<RowRecord>) -> bool,
    ) -> io::Result<Summary> {
        let naming = |line| format!("line {line}");
        let mut collector = Collector::new(sink, rows.schema.k(), 0, &naming);
        let stopped = AtomicBool::new(false);
        let (jobs, queue) = mpsc::channel();
        // Held by the workers alone, so that sending fails once all are gone.
        let queue = Arc::new(Mutex::new(queue));
        let workers = self.workers.max(1);
        std::thread::scope(|scope| {
            for _ in 0..workers {
                let (queue, stopped) = (queue.clone(), &stopped);
                std::thread::Builder::new()
                    .name("ingest".to_owned())
                    .spawn_scoped(scope, move || work(&queue, format, rows, stopped))?;
            }
            drop(queue);
            let most = CHUNKS_PER_WORKER * workers;
            let read = self.feed(&mut split, jobs, most, &mut collector);
            // Chunks still queued are wanted no more: the workers skip them.
            stopped.store(true, Ordering::Relaxed);
            read
        })?;
        Ok(collector.finish())
    }

    /// Cuts chunks for the workers and hands their rows to `collector` in
    /// order, at most `most` chunks at a time, until the body ends or the
    /// collector wants no more.
    fn feed<F: FnMut(Vec<RowRecord>) -> bool>(
        &self,
        split: &mut impl Split,
        jobs: Sender<Job>,
        most: usize,
        collector: &mut Collector<F>,
    ) -> io::Result<()> {
        let mut in_flight: VecDeque<(Receiver<Done>, End)> = VecDeque::with_capacity(most);
        let mut spare: Vec<Chunk> = Vec::with_capacity(most);
        let mut reading = true;
        loop {
            // Hand on every chunk already parsed; wait for the oldest only
            // when no more may be cut.
            loop {
                let wait = !reading || in_flight.len() == most;
                let Some((oldest, end)) = in_flight.pop_front() else {
                    break;
                };
                let received = if wait {
                    oldest.recv().map_err(|_| TryRecvError::Disconnected)
                } else {
                    oldest.try_recv()
                };
                let Done { chunk, rows } = match received {
                    Ok(done) => done,
                    Err(TryRecvError::Empty) => {
                        in_flight.push_front((oldest, end));
                        break;
                    }
                    // Only a worker that panicked drops a chunk: stop, and
                    // the scope passes the panic on.
                    Err(TryRecvError::Disconnected) => return Ok(()),
                };
                if !take(collector, rows, end)? {
                    return Ok(());
                }
                spare.push(chunk);
            }
            if !reading {
                return Ok(());
            }
            let mut chunk = spare.pop().unwrap_or_default();
            let end = split.fill(&mut chunk, self.chunk);
            reading = matches!(end, End::More);
            let (done, receiver) = mpsc::sync_channel(1);
            // Every worker gone: one panicked, and the scope passes it on.
            if jobs.send(Job { chunk, done }).is_err() {
                return Ok(());
            }
            in_flight.push_back((receiver, end));
        }
    }
}

/// Hands a chunk's rows to `collector` in order, then what ended it, as
/// far as the collector wants; false once it wants no more.
fn take<F: FnMut(Vec<RowRecord>) -> bool>(
    collector: &mut Collector<F>,
    rows: Vec<Parsed>,
    end: End,
) -> io::Result<bool> {
    for row in rows {
        if !collector.more() {
            return Ok(false);
        }
        collector.push(row);
    }
    if !collector.more() {
        return Ok(false);
    }
    match end {
        End::More => Ok(true),
        End::Body => Ok(false),
        End::TooLong(error) => {
            collector.error(error);
            Ok(false)
        }
        End::Failed(error) => Err(error),
    }
}

/// A worker: parses the chunks it is given until there are no more.
fn work(
    queue: &Mutex<Receiver<Job>>,
    format: &impl ParseChunk,
    rows: &RowBuilder,
    stopped: &AtomicBool,
) {
    loop {
        // The lock is held while waiting, so idle workers queue on it; no
        // thread panics holding it, so it is never poisoned.
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(Job { chunk, done }) = job else {
            return;
        };
        let mut parsed = Vec::with_capacity(chunk.records.len());
        if !stopped.load(Ordering::Relaxed) {
            format.parse(&chunk, rows, &mut |line, row| {
                parsed.push(match row {
                    Ok(record) => Ok(ParsedRow::of(record)),
                    Err(reason) => Err(LineError::new(line, reason)),
                });
            });
        }
        // Once the calling thread has stopped, nobody waits for the rows.
        let _ = done.send(Done {
            chunk,
            rows: parsed,
        });
    }
}
