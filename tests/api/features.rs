//! The Arrow IPC feature export (`Accept: application/vnd.apache.arrow.stream`):
//! the same rows and values as the CSV export, in record batches of at most
//! 65,536 rows, under the same refusals.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_ipc::reader::StreamReader;
use arrow_schema::{DataType, Field, Schema};
use dpgate::api::Limits;
use dpgate::domain::auth::Role;
use dpgate_client::types::{ARROW_STREAM, ProblemType};
use dpgate_client::{Client, ClientError, UploadFormat};
use reqwest::StatusCode;
use rstest::rstest;
use uuid::Uuid;

use crate::helpers::{
    Backend, TestApp, ads_dataset, ads_rows, backends, spawn_app, spawn_app_with, unavailable,
};

/// More rows than one record batch (and than one streamed block).
const ROWS: usize = 65_536 + 4_464;

/// Two features on very different ranges.
const BOUNDS: [(f64, f64); 2] = [(0.0, 1.0), (-5.0, 1e6)];

fn dataset_request(name: &str, unit: &str) -> serde_json::Value {
    serde_json::json!({
        "name": name, "privacy_unit": unit,
        "features": [
            {"name": "share", "min": BOUNDS[0].0, "max": BOUNDS[0].1},
            {"name": "spend", "min": BOUNDS[1].0, "max": BOUNDS[1].1},
        ],
        "label": "y",
        "budget": {"epsilon": 1, "delta": 1e-6}, "accountant": "basic"
    })
}

/// `ROWS` rows with values at full f64 precision, ids in no particular
/// order, the ends of both ranges included.
fn rows() -> String {
    let mut csv = String::from("row_id,y,share,spend\n");
    for index in 0..ROWS {
        // A fixed permutation of 0..ROWS, so that ids do not arrive sorted.
        let id = (index * 48_271) % ROWS;
        let u = ((index as f64) * 0.618_033_988_749_895).fract();
        let share = if index == 0 { 1.0 } else { u };
        let spend = match index {
            0 => BOUNDS[1].0,
            1 => BOUNDS[1].1,
            _ => BOUNDS[1].0 + (1.0 - u) * (BOUNDS[1].1 - BOUNDS[1].0),
        };
        csv.push_str(&format!("id-{id},{},{share},{spend}\n", index % 2));
    }
    csv
}

/// The stream's schema and batches.
fn read_arrow(bytes: &[u8]) -> (Arc<Schema>, Vec<arrow_array::RecordBatch>) {
    let reader = StreamReader::try_new(bytes, None).unwrap();
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().unwrap();
    (schema, batches)
}

/// The CSV export: its header and rows.
async fn read_csv(client: &Client, id: Uuid) -> (Vec<String>, Vec<(String, Vec<f64>)>) {
    let text = String::from_utf8(client.features_csv(id, |_| {}).await.unwrap()).unwrap();
    let mut lines = text.lines();
    let header = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let rows = lines
        .map(|line| {
            let mut fields = line.split(',');
            let id = fields.next().unwrap().to_owned();
            (id, fields.map(|field| field.parse().unwrap()).collect())
        })
        .collect();
    (header, rows)
}

/// The Arrow export equals the CSV export row for row, whether the
/// snapshot is held in memory (one block, cut into batches) or streamed
/// from its files (blocks of 65,536 rows, a batch each).
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn the_arrow_export_round_trips_to_the_csv_export(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    for cache_bytes in [Limits::default().cache_bytes, 0] {
        let limits = Limits {
            cache_bytes,
            ..Limits::default()
        };
        let app = spawn_app_with(backend, limits).await;
        let dataset = app.dataset(dataset_request("ranges", "label")).await;
        app.admin
            .upload_rows(dataset.id, UploadFormat::Csv, rows())
            .await
            .unwrap();
        let ana = app.analyst("ana", &[dataset.id]);
        let response = app
            .raw(
                reqwest::Method::GET,
                &format!("/v1/datasets/{}/features", dataset.id),
            )
            .bearer_auth(app.token(Role::Analyst, "ana", &[dataset.id]))
            .header("accept", ARROW_STREAM)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], ARROW_STREAM);
        let (schema, batches) = read_arrow(&response.bytes().await.unwrap());
        let expected = Schema::new(vec![
            Field::new("row_id", DataType::Utf8, false),
            Field::new("share", DataType::Float32, false),
            Field::new("spend", DataType::Float32, false),
        ]);
        assert_eq!(*schema, expected);
        let sizes: Vec<usize> = batches.iter().map(|batch| batch.num_rows()).collect();
        assert_eq!(sizes, [65_536, ROWS - 65_536], "cache {cache_bytes}");

        let (header, csv) = read_csv(&ana, dataset.id).await;
        assert_eq!(header, ["row_id", "share", "spend"]);
        assert_eq!(csv.len(), ROWS);
        let mut rows = csv.iter();
        for batch in &batches {
            let ids = batch.column(0).as_string::<i32>();
            let columns: Vec<&[f32]> = (1..=2)
                .map(|j| &batch.column(j).as_primitive::<Float32Type>().values()[..])
                .collect();
            for (row, id) in ids.iter().enumerate() {
                let (csv_id, csv_values) = rows.next().unwrap();
                assert_eq!(id, Some(csv_id.as_str()));
                for (j, &(min, max)) in BOUNDS.iter().enumerate() {
                    // The CSV rounds the stored value to a decimal
                    // place no coarser than (max − min)·ε_f32, moving
                    // it by at most half that; the Arrow value is the
                    // nearest f32, at most |value|·ε_f32/2 away.
                    let bound =
                        ((max - min) + min.abs().max(max.abs())) * f64::from(f32::EPSILON) / 2.0;
                    let arrow = f64::from(columns[j][row]);
                    assert!(
                        (arrow - csv_values[j]).abs() <= bound,
                        "{id:?} column {j}: Arrow {arrow}, CSV {}, bound {bound}",
                        csv_values[j]
                    );
                }
            }
        }
        assert!(rows.next().is_none());
        app.finish().await;
    }
}

/// The Arrow media type wins wherever it is listed; NDJSON and CSV are
/// chosen as before.
#[tokio::test]
async fn the_accept_header_chooses_the_format() {
    let app = spawn_app(backends()[0]).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 1.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 3))
        .await
        .unwrap();
    let token = app.token(Role::Analyst, "ana", &[dataset.id]);
    let cases = [
        (
            Some("application/x-ndjson, application/vnd.apache.arrow.stream;q=0.9"),
            ARROW_STREAM,
        ),
        (
            Some("text/csv, application/vnd.apache.arrow.stream"),
            ARROW_STREAM,
        ),
        (Some("application/x-ndjson"), "application/x-ndjson"),
        (Some("text/csv"), "text/csv; charset=utf-8"),
        (Some("*/*"), "text/csv; charset=utf-8"),
        (None, "text/csv; charset=utf-8"),
    ];
    for (accept, media) in cases {
        let mut request = app
            .raw(
                reqwest::Method::GET,
                &format!("/v1/datasets/{}/features", dataset.id),
            )
            .bearer_auth(&token);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], media, "{accept:?}");
    }
    app.finish().await;
}

async fn arrow_refusal(app: &TestApp, token: &str, id: Uuid) -> (StatusCode, serde_json::Value) {
    let response = app
        .raw(reqwest::Method::GET, &format!("/v1/datasets/{id}/features"))
        .bearer_auth(token)
        .header("accept", ARROW_STREAM)
        .send()
        .await
        .unwrap();
    let status = response.status();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    (status, response.json().await.unwrap())
}

/// Under unit `row` the features stay private in every format; a dataset
/// not granted is forbidden; an empty dataset is a valid stream of no rows.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn arrow_exports_are_refused_as_csv_ones_are_and_may_be_empty(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let private = app.dataset(dataset_request("private", "row")).await;
    let empty = app.dataset(dataset_request("empty", "label")).await;
    app.admin
        .upload_rows(private.id, UploadFormat::Csv, rows())
        .await
        .unwrap();
    let granted = app.token(Role::Analyst, "ana", &[private.id, empty.id]);
    let (status, problem) = arrow_refusal(&app, &granted, private.id).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("features-not-public"),
        "{problem}"
    );
    let stranger = app.token(Role::Analyst, "eve", &[private.id]);
    let (status, problem) = arrow_refusal(&app, &stranger, empty.id).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        problem["type"].as_str().unwrap().ends_with("forbidden"),
        "{problem}"
    );
    // The typed client says the same.
    let refused = app
        .analyst("eve", &[private.id])
        .features_arrow(empty.id, |_| {})
        .await
        .unwrap_err();
    assert_eq!(refused.problem_type(), Some(ProblemType::Forbidden));

    let bytes = app
        .analyst("ana", &[empty.id])
        .features_arrow(empty.id, |_| {})
        .await
        .unwrap();
    let (schema, batches) = read_arrow(&bytes);
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["row_id", "share", "spend"]);
    assert!(batches.is_empty(), "{batches:?}");
    app.finish().await;
}

/// A dataset file changed after it was written (same size, one byte
/// flipped): the response is cut off, in Arrow as in CSV, rather than
/// ending as a table computed on the changed file. Whether the 200's head
/// left before the fault depends on when hyper flushed it, so a client sees
/// either a request that failed or a 200 whose body fails; never a whole
/// body.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_file_changed_after_it_was_written_cuts_the_export_off(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let limits = Limits {
        cache_bytes: 0,
        ..Limits::default()
    };
    let app = spawn_app_with(backend, limits).await;
    let dataset = app.dataset(dataset_request("ranges", "label")).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, rows())
        .await
        .unwrap();
    let files = app
        .store
        .version_files(dataset.id, ROWS as u64, false)
        .await
        .unwrap();
    let path = app.snapshots.data().root().unwrap().join(&files[0].path);
    let mut bytes = std::fs::read(&path).unwrap();
    // A byte of the first column's data, past the 4-byte magic.
    bytes[8] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let token = app.token(Role::Analyst, "ana", &[dataset.id]);
    for accept in [ARROW_STREAM, "text/csv"] {
        let sent = app
            .raw(
                reqwest::Method::GET,
                &format!("/v1/datasets/{}/features", dataset.id),
            )
            .bearer_auth(&token)
            .header("accept", accept)
            .send()
            .await;
        match sent {
            Ok(response) => {
                assert_eq!(response.status(), StatusCode::OK);
                assert!(response.bytes().await.is_err(), "{backend:?} {accept}");
            }
            Err(error) => assert!(error.is_request(), "{backend:?} {accept}: {error}"),
        }
    }
    let download = app
        .analyst("ana", &[dataset.id])
        .features_arrow(dataset.id, |_| {})
        .await;
    assert!(
        matches!(download, Err(ClientError::Http(_))),
        "{:?}",
        download.map(|bytes| bytes.len())
    );
    app.finish().await;
}
