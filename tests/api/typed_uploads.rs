//! Uploads as Arrow IPC streams and Parquet files: the same rows as CSV
//! store the same version; bad rows are refused by row number with
//! nothing stored; a body that is not what it says is 422.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt8Array};
use arrow_schema::DataType;
use dpgate::domain::auth::Role;
use dpgate::snapshots::Columns;
use dpgate_client::types::{Problem, ReleaseRequest};
use dpgate_client::{ReleaseOptions, UploadFormat};
use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use rstest::rstest;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app, unavailable};

/// Rows `from..from + count` of [`ads_rows`] as one record batch; `edit`
/// may change a column before the batch is made.
pub(crate) fn batch(
    from: usize,
    count: usize,
    edit: impl FnOnce(&mut Vec<(&str, ArrayRef)>),
) -> RecordBatch {
    let rows = from..from + count;
    let mut columns: Vec<(&str, ArrayRef)> = vec![
        (
            "row_id",
            Arc::new(StringArray::from_iter_values(
                rows.clone().map(|i| format!("r{i}")),
            )),
        ),
        (
            "converted",
            Arc::new(UInt8Array::from_iter_values(
                rows.clone().map(|i| u8::from(i % 3 == 0)),
            )),
        ),
        (
            "f0",
            Arc::new(Float64Array::from_iter_values(
                rows.clone().map(|i| (i % 10) as f64 / 10.0),
            )),
        ),
        // An integer column where the schema has a number: accepted.
        (
            "f1",
            Arc::new(Int64Array::from_iter_values(
                rows.clone().map(|i| (i % 7) as i64 - 3),
            )),
        ),
        (
            "value",
            Arc::new(Float64Array::from_iter_values(
                rows.clone().map(|i| (i % 150) as f64),
            )),
        ),
        (
            "campaign",
            Arc::new(StringArray::from_iter_values(
                rows.map(|i| if i % 2 == 0 { "a" } else { "b" }),
            )),
        ),
    ];
    edit(&mut columns);
    RecordBatch::try_from_iter(columns).unwrap()
}

fn arrow_stream(batches: &[RecordBatch]) -> Vec<u8> {
    let mut writer =
        arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &batches[0].schema()).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.into_inner().unwrap()
}

pub(crate) fn parquet_file(batches: &[RecordBatch]) -> Vec<u8> {
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(Vec::new(), batches[0].schema(), None).unwrap();
    for batch in batches {
        writer.write(batch).unwrap();
    }
    writer.into_inner().unwrap()
}

/// Every stored row of the dataset's current version, outcomes included.
pub(crate) async fn stored(app: &TestApp, id: uuid::Uuid) -> Vec<Columns> {
    let record = app.store.dataset(id).await.unwrap().unwrap();
    app.snapshots
        .blocks(&record, true)
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn arrow_and_parquet_bodies_store_what_csv_stores(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let csv = app.dataset(ads_dataset("csv", "label", "rdp", 5.0)).await;
    let arrow = app.dataset(ads_dataset("arrow", "label", "rdp", 5.0)).await;
    let parquet = app
        .dataset(ads_dataset("parquet", "label", "rdp", 5.0))
        .await;
    app.admin
        .upload_rows(csv.id, UploadFormat::Csv, ads_rows(0, 3_000))
        .await
        .unwrap();
    // Several batches, so rows cross batch boundaries.
    let batches = [batch(0, 1_000, |_| {}), batch(1_000, 2_000, |_| {})];
    let report = app
        .admin
        .upload_rows(arrow.id, UploadFormat::ArrowStream, arrow_stream(&batches))
        .await
        .unwrap();
    assert_eq!((report.rows_added, report.n_rows), (3_000, 3_000));
    app.admin
        .upload_rows(parquet.id, UploadFormat::Parquet, parquet_file(&batches))
        .await
        .unwrap();
    // A text column may come as a dictionary (pandas' categorical).
    let categorical = app
        .dataset(ads_dataset("categorical", "label", "rdp", 5.0))
        .await;
    let as_dictionary = |from, count| {
        batch(from, count, |columns| {
            let keys = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
            columns[5].1 = arrow::compute::cast(&columns[5].1, &keys).unwrap();
        })
    };
    let dictionaries = [as_dictionary(0, 1_000), as_dictionary(1_000, 2_000)];
    app.admin
        .upload_rows(
            categorical.id,
            UploadFormat::ArrowStream,
            arrow_stream(&dictionaries),
        )
        .await
        .unwrap();
    let expected = stored(&app, csv.id).await;
    assert_eq!(stored(&app, arrow.id).await, expected, "{backend:?}");
    assert_eq!(stored(&app, parquet.id).await, expected, "{backend:?}");
    assert_eq!(stored(&app, categorical.id).await, expected, "{backend:?}");
    // The running sums are the same too: a release prices alike.
    for id in [arrow.id, parquet.id] {
        assert_eq!(
            app.admin.dataset(id).await.unwrap().n_rows,
            app.admin.dataset(csv.id).await.unwrap().n_rows
        );
    }
    let analyst = app.analyst("ana", &[parquet.id]);
    let released = analyst
        .release(
            parquet.id,
            &ReleaseRequest::walr(1.0, 1e-7),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(released.release.n, Some(3_000));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_typed_rows_are_refused_by_row_number_and_store_nothing(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("typed", "label", "rdp", 5.0)).await;
    let path = format!("/v1/datasets/{}/rows", dataset.id);
    let token = app.token(Role::Admin, "admin", &[]);
    let send = |media: &'static str, body: Vec<u8>| {
        app.raw(Method::POST, &path)
            .bearer_auth(&token)
            .header("content-type", media)
            .body(body)
            .send()
    };
    let replace = |name: &'static str, column: ArrayRef| {
        move |columns: &mut Vec<(&str, ArrayRef)>| {
            let at = columns
                .iter()
                .position(|(named, _)| *named == name)
                .unwrap();
            columns[at] = (name, column);
        }
    };
    let cases: Vec<(&str, RecordBatch, u64, &str)> = vec![
        (
            "a label of 2",
            batch(
                0,
                3,
                replace("converted", Arc::new(UInt8Array::from(vec![0, 2, 1]))),
            ),
            2,
            "not 0 or 1",
        ),
        (
            "a feature outside its bounds",
            batch(
                0,
                3,
                replace("f1", Arc::new(Float64Array::from(vec![0.0, 0.0, 9.0]))),
            ),
            3,
            "outside its declared bounds",
        ),
        (
            "a null feature",
            batch(
                0,
                2,
                replace("f0", Arc::new(Float64Array::from(vec![Some(0.5), None]))),
            ),
            2,
            "is null",
        ),
        (
            "text where a number belongs",
            batch(
                0,
                1,
                replace("f0", Arc::new(StringArray::from(vec!["0.5"]))),
            ),
            1,
            "not of numbers",
        ),
        (
            "an undeclared dimension value",
            batch(
                0,
                2,
                replace("campaign", Arc::new(StringArray::from(vec!["a", "z"]))),
            ),
            2,
            "not a declared value",
        ),
        (
            "a missing column",
            batch(0, 2, |columns| {
                columns.retain(|(name, _)| *name != "value");
            }),
            1,
            "no column \"value\"",
        ),
        (
            "a row id twice",
            batch(
                0,
                2,
                replace("row_id", Arc::new(StringArray::from(vec!["r1", "r1"]))),
            ),
            2,
            "repeats the row_id of row 1",
        ),
    ];
    for (case, rows, line, reason) in cases {
        for (media, body) in [
            (
                "application/vnd.apache.arrow.stream",
                arrow_stream(std::slice::from_ref(&rows)),
            ),
            (
                "application/vnd.apache.parquet",
                parquet_file(std::slice::from_ref(&rows)),
            ),
        ] {
            let response = send(media, body).await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{case} {media}"
            );
            let problem: Problem = response.json().await.unwrap();
            let first = problem.errors.first().expect("the bad rows");
            assert_eq!(first.line, line, "{case} {media}: {problem:?}");
            assert!(first.reason.contains(reason), "{case} {media}: {first:?}");
        }
    }
    for (media, what) in [
        (
            "application/vnd.apache.arrow.stream",
            "not an Arrow IPC stream",
        ),
        ("application/vnd.apache.parquet", "not a Parquet file"),
    ] {
        for body in [&b""[..], b"not a columnar body"] {
            let response = send(media, body.to_vec()).await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "{media}"
            );
            let problem: Problem = response.json().await.unwrap();
            let first = problem.errors.first().expect("why");
            assert!(first.reason.contains(what), "{media}: {problem:?}");
        }
    }
    let view = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(view.n_rows, Some(0), "{backend:?}: nothing stored");
    let files = app
        .store
        .version_files(dataset.id, u64::MAX, true)
        .await
        .unwrap();
    assert!(files.is_empty(), "{files:?}");
    app.finish().await;
}
