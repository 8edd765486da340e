//! The engine's files over a real SQLite store and a real directory.

use std::sync::Arc;

use futures_util::StreamExt;
use parquet::file::reader::{FileReader, SerializedFileReader};

use super::*;
use crate::domain::dataset::{DatasetRecord, FilePart, VersionFile, WalrStats};
use crate::domain::row::RowRecord;
use crate::ingest::{RowIds, fingerprint};
use crate::snapshots::Columns;
use crate::store::{NewDataset, SqliteStore, Store};

/// A real SQLite store and data directory in a temporary directory (the
/// snapshot tests use it too).
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) data: Arc<DataDir>,
}

pub(crate) async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("files.db").display()
    );
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await.expect("opens"));
    let data = Arc::new(DataDir::new(dir.path().join("data")));
    Fixture { dir, store, data }
}

pub(super) async fn dataset(fixture: &Fixture) -> DatasetRecord {
    created(fixture, serde_json::json!({"privacy_unit": "label"})).await
}

/// A dataset of unit `user` of at most `m` rows a person, `g` groups and
/// `r` rows per group.
pub(super) async fn people_dataset(fixture: &Fixture, [m, g, r]: [u32; 3]) -> DatasetRecord {
    let unit = serde_json::json!({
        "privacy_unit": "user", "user_column": "person", "max_rows_per_user": m,
        "max_groups_per_user": g, "max_rows_per_group_per_user": r,
    });
    created(fixture, unit).await
}

async fn created(fixture: &Fixture, unit: serde_json::Value) -> DatasetRecord {
    let mut request = serde_json::json!({
        "name": "files",
        "features": [{"name": "f", "min": 0, "max": 1}, {"name": "g", "min": 0, "max": 1}],
        "label": "y",
        "measures": [{"name": "spend", "min": 0, "max": 100}],
        "dimensions": [{"name": "device", "values": ["web", "app"]}],
        "budget": {"epsilon": 1, "delta": 1e-6}
    });
    if let (Some(request), Some(unit)) = (request.as_object_mut(), unit.as_object()) {
        request.extend(unit.clone());
    }
    let request: dpgate_api_types::CreateDataset =
        serde_json::from_value(request).expect("a valid request");
    let record = DatasetRecord::new(&request, "2026-11-27T00:00:00Z".to_owned()).expect("valid");
    fixture
        .store
        .create_dataset(&NewDataset {
            record: record.clone(),
            actor: "admin".to_owned(),
        })
        .await
        .expect("created");
    record
}

fn row(i: usize) -> RowRecord {
    RowRecord {
        line: i as u64 + 2,
        row_id: format!("r{i}"),
        label: u8::from(i.is_multiple_of(3)),
        features: [(i % 7) as f32 / 7.0, (i % 11) as f32 / 11.0]
            .iter()
            .flat_map(|value| value.to_le_bytes())
            .collect(),
        measures: ((i % 100) as f64).to_le_bytes().to_vec(),
        dimensions: ((i % 2) as u32).to_le_bytes().to_vec(),
        user: 0,
    }
}

/// Row `i` of a dataset of people: a third of the first 6 000 rows are
/// one person's, the rest of those a hundred and one others', each with
/// rows on both devices; from row 6 000 on, two rows a person.
fn people_row(i: usize) -> RowRecord {
    let person = match i {
        6_000.. => (i / 2) as i128,
        _ if i.is_multiple_of(3) => -7,
        _ => (i % 101) as i128 + (1 << 100),
    };
    RowRecord {
        user: person,
        ..row(i)
    }
}

/// Uploads rows `from..to` and commits them.
pub(super) async fn append(
    fixture: &Fixture,
    record: &DatasetRecord,
    from: usize,
    to: usize,
) -> DatasetRecord {
    let mut upload = Upload::begin(fixture.store.as_ref(), fixture.data.clone(), record)
        .await
        .expect("begins");
    let of = if record.schema.users.is_some() {
        people_row
    } else {
        row
    };
    let rows: Vec<RowRecord> = (from..to).map(of).collect();
    for batch in rows.chunks(5_000) {
        upload.insert(batch.to_vec()).await.expect("written");
    }
    upload
        .commit((to - from) as u64, &WalrStats::empty(2))
        .await
        .expect("committed")
}

/// A fixture holding one upload of rows `0..rows`: its record and its
/// manifest, outcomes included.
pub(super) async fn uploaded(rows: usize) -> (Fixture, DatasetRecord, Vec<VersionFile>) {
    let fixture = fixture().await;
    let record = append(&fixture, &dataset(&fixture).await, 0, rows).await;
    let files = fixture
        .store
        .version_files(record.id, record.n_rows, true)
        .await
        .unwrap();
    (fixture, record, files)
}

pub(super) async fn read(
    fixture: &Fixture,
    record: &DatasetRecord,
    outcomes: bool,
    block_rows: usize,
) -> Vec<Result<Columns, crate::store::StoreError>> {
    let files = fixture
        .store
        .version_files(record.id, record.n_rows, outcomes)
        .await
        .expect("the manifest");
    stream(
        fixture.data.clone(),
        files,
        record.schema.clone(),
        Needed::all(outcomes),
        block_rows,
    )
    .collect()
    .await
}

fn metadata(fixture: &Fixture, file: &VersionFile) -> parquet::file::metadata::ParquetMetaData {
    let opened = std::fs::File::open(fixture.data.root().unwrap().join(&file.path)).expect("opens");
    SerializedFileReader::new(opened)
        .expect("a Parquet file")
        .metadata()
        .clone()
}

/// Nothing derived from a label's or a measure's value is in the outcomes
/// file's metadata; the public inputs keep Parquet's statistics.
#[tokio::test]
async fn outcomes_are_written_without_statistics_indexes_or_filters() {
    let (fixture, _, files) = uploaded(70_000).await;
    let parts: Vec<FilePart> = files.iter().map(|file| file.part).collect();
    assert_eq!(parts, [FilePart::Inputs, FilePart::Outcomes]);
    let outcomes = metadata(&fixture, &files[1]);
    assert!(outcomes.column_index().is_none() && outcomes.offset_index().is_none());
    // Two row groups, cut by row count alone.
    let groups: Vec<i64> = outcomes.row_groups().iter().map(|g| g.num_rows()).collect();
    assert_eq!(groups, [65_536, 4_464]);
    for group in outcomes.row_groups() {
        for column in group.columns() {
            assert!(column.statistics().is_none(), "{:?}", column.column_path());
            assert!(column.bloom_filter_offset().is_none());
            assert!(column.dictionary_page_offset().is_none());
            assert_eq!(
                column.compression(),
                parquet::basic::Compression::UNCOMPRESSED
            );
        }
    }
    let inputs = metadata(&fixture, &files[0]);
    assert!(inputs.row_groups()[0].column(1).statistics().is_some());
    let names: Vec<&str> = outcomes
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|column| column.name())
        .collect();
    assert_eq!(names, ["y", "spend"]);
    assert_eq!(
        files[0].bytes,
        std::fs::metadata(fixture.data.root().unwrap().join(&files[0].path))
            .unwrap()
            .len()
    );
}

/// Versions read back in stored order, re-cut into blocks of any size
/// across files; a version reads only its own rows; a pass without the
/// outcomes never opens an outcomes file.
#[tokio::test]
async fn versions_read_back_in_order_and_inputs_alone_open_no_outcomes() {
    let fixture = fixture().await;
    let first = append(&fixture, &dataset(&fixture).await, 0, 1_000).await;
    let second = append(&fixture, &first, 1_000, 1_700).await;
    fixture.data.take_outcome_opens();
    let blocks: Vec<Columns> = read(&fixture, &second, false, 300)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(fixture.data.take_outcome_opens(), 0);
    assert_eq!(blocks.len(), 6);
    assert!(blocks[..5].iter().all(|block| block.len() == 300));
    assert_eq!(blocks[5].len(), 200);
    assert!(blocks.iter().all(|block| !block.has_outcomes()));
    assert_eq!(blocks[3].id(100), "r1000");

    let whole = read(&fixture, &second, true, 1_700).await;
    assert_eq!(fixture.data.take_outcome_opens(), 2);
    let whole = whole.into_iter().next().unwrap().unwrap();
    for i in [0, 999, 1_000, 1_699] {
        let (stored, expected) = (whole.row(i), row(i));
        assert_eq!(stored.id, expected.row_id);
        assert_eq!(stored.label, expected.label);
        assert_eq!(stored.features[1].to_le_bytes(), expected.features[4..8]);
        assert_eq!(stored.measures[0].to_le_bytes()[..], expected.measures[..]);
        assert_eq!(stored.dimensions[0], (i % 2) as u32);
    }
    let older = read(&fixture, &first, true, 5_000).await;
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].as_ref().unwrap().len(), 1_000);
}

/// A file whose size changed is refused before it is read; one whose
/// bytes changed (same size) ends the stream with an error, never with
/// its last block.
#[tokio::test]
async fn a_changed_file_is_never_read_to_the_end() {
    let (fixture, record, files) = uploaded(2_000).await;
    let outcomes = fixture.data.root().unwrap().join(&files[1].path);
    let original = std::fs::read(&outcomes).unwrap();

    let mut flipped = original.clone();
    // The lowest bit of a measure's mantissa (labels take the first
    // 2,000 × 4 bytes): the file still parses and holds valid rows.
    flipped[9_001] ^= 0x01;
    std::fs::write(&outcomes, &flipped).unwrap();
    let read_back = read(&fixture, &record, true, 500).await;
    let last = read_back.last().expect("an item");
    assert!(
        matches!(last, Err(crate::store::StoreError::Changed(detail)) if detail.contains("hash is not the manifest's")),
        "{last:?}"
    );
    // Inputs alone are untouched, and still read.
    assert!(
        read(&fixture, &record, false, 500)
            .await
            .iter()
            .all(Result::is_ok)
    );

    let mut longer = original.clone();
    longer.push(0);
    std::fs::write(&outcomes, &longer).unwrap();
    let read_back = read(&fixture, &record, true, 500).await;
    assert_eq!(read_back.len(), 1);
    assert!(
        matches!(&read_back[0], Err(crate::store::StoreError::Changed(detail)) if detail.contains("bytes"))
    );

    std::fs::remove_file(&outcomes).unwrap();
    let read_back = read(&fixture, &record, true, 500).await;
    assert!(matches!(
        &read_back[..],
        [Err(crate::store::StoreError::Changed(detail))] if detail.contains("No such file")
    ));
}

/// Flips one bit in the middle of `column`'s first chunk of `file`.
fn flip_chunk(fixture: &Fixture, file: &VersionFile, column: usize) {
    let (start, length) = metadata(fixture, file)
        .row_group(0)
        .column(column)
        .byte_range();
    let path = fixture.data.root().unwrap().join(&file.path);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(start + length / 2) as usize] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
}

fn changed(items: &[Result<Columns, crate::store::StoreError>], why: &str) -> bool {
    matches!(items.last(), Some(Err(crate::store::StoreError::Changed(detail))) if detail.contains(why))
}

/// The blocks of `needed`'s columns of `files`, `block_rows` at most each.
async fn streamed(
    fixture: &Fixture,
    record: &DatasetRecord,
    files: &[VersionFile],
    needed: Needed,
    block_rows: usize,
) -> Vec<Result<Columns, crate::store::StoreError>> {
    stream(
        fixture.data.clone(),
        files.to_vec(),
        record.schema.clone(),
        needed,
        block_rows,
    )
    .collect()
    .await
}

/// A read of the measures without the labels (an aggregate of counts and
/// means) never decodes the labels: a changed label chunk fails a read of
/// the labels and not one of the measures alone, whose blocks are each a
/// batch of the file, with every row's measure and dimension.
#[tokio::test]
async fn a_read_of_the_measures_alone_decodes_no_label() {
    let (fixture, record, files) = uploaded(2_000).await;
    // The outcomes file: y, spend; y's chunk.
    flip_chunk(&fixture, &files[1], 0);
    let measures_only = Needed {
        labels: false,
        features: false,
        ids: false,
        ..Needed::all(true)
    };
    let read_with = |needed| streamed(&fixture, &record, &files, needed, 700);
    let blocks: Vec<Columns> = read_with(measures_only)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("no label is read");
    assert!(blocks.iter().all(|block| block.len() <= 700));
    let shape = blocks[0].shape();
    assert_eq!(
        (shape.labels, shape.measures, shape.features),
        (false, 1, 0)
    );
    let spend: Vec<f64> = blocks.iter().flat_map(|b| b.measure(0).to_vec()).collect();
    let device: Vec<u32> = blocks
        .iter()
        .flat_map(|b| b.dimension(0).to_vec())
        .collect();
    assert_eq!(
        spend,
        (0..2_000).map(|i| (i % 100) as f64).collect::<Vec<_>>()
    );
    assert_eq!(
        device,
        (0..2_000).map(|i| (i % 2) as u32).collect::<Vec<_>>()
    );
    let with_labels = read_with(Needed {
        labels: true,
        ..measures_only
    })
    .await;
    assert!(
        changed(
            &with_labels,
            "a column chunk's BLAKE3 hash is not the manifest's"
        ),
        "{with_labels:?}"
    );
}

/// A read checks the column chunks it decodes, and only those: a changed
/// feature fails a read of the features and not one without them; a
/// changed footer fails every read.
#[tokio::test]
async fn a_read_checks_exactly_the_chunks_it_decodes() {
    let (fixture, record, files) = uploaded(2_000).await;
    let inputs = &files[0];
    // row_id, f, g, device: f's chunk.
    flip_chunk(&fixture, inputs, 1);
    let without_features = Needed {
        features: false,
        ..Needed::all(true)
    };
    let read_with = |needed| streamed(&fixture, &record, &files, needed, 500);
    let read_back = read_with(without_features).await;
    assert!(read_back.iter().all(Result::is_ok));
    assert_eq!(
        read_back.iter().flatten().map(Columns::len).sum::<usize>(),
        2_000
    );
    let read_back = read_with(Needed::all(true)).await;
    assert!(
        changed(
            &read_back,
            "a column chunk's BLAKE3 hash is not the manifest's"
        ),
        "{read_back:?}"
    );

    // A file recorded before its parts were hashed is checked whole.
    let mut legacy = files.clone();
    legacy[0].chunks = None;
    let read_back = streamed(&fixture, &record, &legacy, without_features, 500).await;
    assert!(
        changed(&read_back, "its SHA-256 is not the manifest's"),
        "{read_back:?}"
    );

    // The footer: the last byte of its metadata, before length and magic.
    let path = fixture.data.root().unwrap().join(&files[1].path);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 9;
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let read_back = read_with(without_features).await;
    assert!(
        changed(&read_back, "its footer's BLAKE3 hash is not the manifest's"),
        "{read_back:?}"
    );
}

/// The hashes a writer records as its bytes stream out are those a
/// registration computes reading the file back: every column chunk, in
/// file order, then the footer.
#[tokio::test]
async fn written_and_registered_files_are_hashed_alike() {
    let (fixture, _, files) = uploaded(150_000).await;
    let runtime = tokio::runtime::Handle::current();
    for file in files {
        let object = fixture.data.object_of(&file).unwrap();
        let data = metadata(&fixture, &file);
        let runtime = runtime.clone();
        let bytes = file.bytes;
        let (sha256, chunks) =
            tokio::task::spawn_blocking(move || object.hashes(&runtime, bytes).unwrap())
                .await
                .unwrap();
        assert_eq!(sha256, file.sha256);
        assert_eq!(Some(&chunks), file.chunks.as_ref());
        // Three row groups of every column, and the footer.
        assert!(data.num_row_groups() == 3);
        let columns = data.row_group(0).num_columns();
        assert_eq!(chunks.count(), Some(3 * columns + 1));
    }
}

/// An upload dropped before its commit, or refused at it, leaves no file.
#[tokio::test]
async fn an_abandoned_upload_leaves_no_file() {
    let fixture = fixture().await;
    let record = dataset(&fixture).await;
    let mut upload = Upload::begin(fixture.store.as_ref(), fixture.data.clone(), &record)
        .await
        .unwrap();
    upload.insert((0..10).map(row).collect()).await.unwrap();
    let folder = fixture.data.root().unwrap().join(record.id.to_string());
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 2);
    drop(upload);
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 0);
    let record = append(&fixture, &record, 0, 10).await;
    let mut upload = Upload::begin(fixture.store.as_ref(), fixture.data.clone(), &record)
        .await
        .unwrap();
    let mut ids = RowIds::default();
    ids.push(fingerprint("r10"), 1);
    ids.push(fingerprint("r3"), 2);
    let found = upload.stored(ids).await.unwrap();
    let found: Vec<(u64, &str)> = found
        .iter()
        .map(|error| (error.line, error.reason.as_str()))
        .collect();
    assert_eq!(found, [(2, "row_id is already stored")]);
    upload.insert(vec![row(10)]).await.unwrap();
    drop(upload);
    assert_eq!(std::fs::read_dir(&folder).unwrap().count(), 2);
    drop(fixture.dir);
}

#[test]
fn the_default_directory_sits_beside_the_sqlite_file() {
    let cases = [
        ("sqlite://dpgate.db", "dpgate.db-data"),
        (
            "sqlite:///var/lib/dpgate/main.db?mode=rwc",
            "/var/lib/dpgate/main.db-data",
        ),
        ("sqlite:data.db", "data.db-data"),
        ("sqlite::memory:", "dpgate-data"),
        ("postgres://db/dpgate", "dpgate-data"),
    ];
    for (url, expected) in cases {
        assert_eq!(DataDir::default_for(url), expected, "{url}");
    }
}

/// Sources are located only under the roots, only as `file://` (or
/// `s3://`) URIs, and a directory's Parquet files only, in name order.
#[tokio::test]
async fn sources_are_located_under_the_roots_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("set")).unwrap();
    for name in ["b.parquet", "a.parquet", "notes.txt"] {
        std::fs::write(root.join("set").join(name), name).unwrap();
    }
    std::fs::create_dir_all(root.join("set").join("nested.parquet")).unwrap();
    let uri = |path: &std::path::Path| url::Url::from_file_path(path).unwrap().to_string();

    let closed = DataDir::new(dir.path().join("data"));
    assert!(matches!(
        closed.locate(&uri(&root.join("set"))).await,
        Err(SourceError::Forbidden(detail)) if detail.contains("DPGATE_DATA_ROOTS")
    ));

    let open = DataDir::new(dir.path().join("data")).with_roots(vec![root.clone().into()]);
    let files = open.locate(&uri(&root.join("set"))).await.unwrap();
    let names: Vec<&str> = files.iter().map(|file| file.name.as_str()).collect();
    assert_eq!(names, ["a.parquet", "b.parquet"]);
    assert_eq!(files[0].stamp.bytes, "a.parquet".len() as u64);
    assert!(files[0].stamp.etag.is_some());

    let one = open
        .locate(&uri(&root.join("set").join("b.parquet")))
        .await
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].name, "b.parquet");

    for refused in [
        "http://host/prefix/",
        "not a uri",
        &uri(&root.join("absent")),
    ] {
        assert!(
            matches!(open.locate(refused).await, Err(SourceError::Invalid(_))),
            "{refused}"
        );
    }
    for outside in [uri(dir.path()), "s3://bucket/prefix/".to_owned()] {
        assert!(
            matches!(open.locate(&outside).await, Err(SourceError::Forbidden(_))),
            "{outside}"
        );
    }
}

/// The manifest lists each registered file as inputs and outcomes, and
/// refuses one that changed since it was located.
#[tokio::test]
async fn a_registered_manifest_pins_each_files_metadata() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.parquet"), "one").unwrap();
    let data =
        DataDir::new(dir.path().join("data")).with_roots(vec![dir.path().to_path_buf().into()]);
    let located = data
        .locate(url::Url::from_file_path(dir.path()).unwrap().as_ref())
        .await
        .unwrap();
    let hashes = [(
        "hash".to_owned(),
        crate::domain::dataset::ChunkHashes {
            footer_bytes: 8,
            blake3: [0; 32].into(),
        },
    )];
    let records = manifest(&located, &[3], &hashes, 7).await.unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(
        records.iter().map(|file| file.part).collect::<Vec<_>>(),
        [FilePart::Inputs, FilePart::Outcomes]
    );
    assert!(records.iter().all(|file| file.registered()
        && file.chunks.as_ref() == Some(&hashes[0].1)
        && file.version == 7
        && file.rows == 3
        && file.path.starts_with("file:///")));
    assert!(unchanged(&data, &records).await.is_ok());

    std::fs::write(dir.path().join("a.parquet"), "two!").unwrap();
    assert!(matches!(
        manifest(&located, &[3], &hashes, 7).await,
        Err(SourceError::Invalid(detail)) if detail.contains("changed while")
    ));
    assert!(matches!(
        unchanged(&data, &records).await,
        Err(crate::store::StoreError::Changed(detail)) if detail.contains("bytes")
    ));
}

/// The sweep removes a file no manifest records once it is older than the
/// grace period, and nothing else: not a recorded file however old, not
/// an unrecorded one still young (an upload another replica is writing).
#[tokio::test]
async fn the_sweep_removes_old_unrecorded_files_alone() {
    let (fixture, record, files) = uploaded(2_000).await;
    let folder = fixture.data.root().unwrap().join(record.id.to_string());
    let two_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(48 * 3600);
    let age = |path: &std::path::Path| {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(two_days_ago)
            .unwrap();
    };
    let stray = |version: u64| folder.join(format!("{version:020}-0123456789ab-outcomes.parquet"));
    let (old, young) = (stray(0), stray(1));
    // Not a name dpgate gives its files: the operator's, however old.
    let foreign = folder.join("part-0.parquet");
    for stray in [&old, &young, &foreign] {
        std::fs::write(stray, b"PAR1").unwrap();
    }
    age(&old);
    age(&foreign);
    // dpgate's own files are named as the sweep knows them.
    assert!(files.iter().all(|file| {
        let name = file.path.rsplit('/').next().unwrap_or_default();
        super::sweep::dpgate_named(name)
    }));
    for file in &files {
        age(&fixture.data.root().unwrap().join(&file.path));
    }
    let removed = sweep(fixture.store.as_ref(), &fixture.data, GRACE)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert!(!old.exists() && young.exists() && foreign.exists());
    assert!(
        read(&fixture, &record, true, 500)
            .await
            .iter()
            .all(Result::is_ok)
    );
}
