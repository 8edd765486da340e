//! Data registered in place: a directory of Parquet files under the
//! operator's roots becomes a version without being copied, bad rows are
//! refused by file and row with nothing registered, a source outside the
//! roots is forbidden, and a file changed after registration is refused
//! before the debit from its metadata, or (its metadata forged back) fails
//! the paid release rather than being computed on.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt8Array};
use dpgate::api::Limits;
use dpgate::domain::auth::Role;
use dpgate_client::UploadFormat;
use dpgate_client::types::{
    AggregateMechanism, AggregateParams, Problem, ProblemType, ReleaseParams, ReleaseRequest,
    Source,
};
use reqwest::{Method, StatusCode};
use rstest::rstest;

use crate::helpers::{
    Backend, TestApp, ads_dataset, ads_rows, spawn_app, spawn_app_with, unavailable,
};
use crate::typed_uploads::{batch, parquet_file, stored};

/// Writes rows `from..from + count` as the Parquet file `dir/name`.
pub(crate) fn write(dir: &Path, name: &str, from: usize, count: usize) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), plain_parquet(&batch(from, count, |_| {}))).unwrap();
}

/// Writes 10 good rows as `dir/a.parquet`, then `dir/b.parquet`, whose
/// third row has the label 2.
pub(crate) fn with_a_bad_label(dir: &Path) {
    write(dir, "a.parquet", 0, 10);
    let bad_label = batch(10, 5, |columns| {
        columns[1] = (
            "converted",
            Arc::new(UInt8Array::from(vec![0, 1, 2, 0, 1])) as ArrayRef,
        );
    });
    std::fs::write(dir.join("b.parquet"), parquet_file(&[bad_label])).unwrap();
}

/// A Parquet file without dictionaries: files of as many rows of the same
/// types are the same size, whatever their values.
pub(crate) fn plain_parquet(batch: &RecordBatch) -> Vec<u8> {
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_dictionary_enabled(false)
        .build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(Vec::new(), batch.schema(), Some(properties)).unwrap();
    writer.write(batch).unwrap();
    writer.into_inner().unwrap()
}

pub(crate) fn source(dir: &Path) -> Source {
    Source {
        uri: url::Url::from_file_path(dir).unwrap().to_string(),
    }
}

/// [`ads_dataset`] registering `dir` in place.
pub(crate) fn registering(name: &str, dir: &Path) -> serde_json::Value {
    let mut request = ads_dataset(name, "label", "basic", 5.0);
    request["source"] = serde_json::json!({ "uri": source(dir).uri });
    request
}

/// POSTs `body` to `path` as the admin.
async fn post(app: &TestApp, path: &str, body: &serde_json::Value) -> reqwest::Response {
    app.raw(Method::POST, path)
        .bearer_auth(app.token(Role::Admin, "admin", &[]))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// A server that holds nothing in memory: every release reads the files.
async fn streaming(backend: Backend) -> TestApp {
    let limits = Limits {
        cache_bytes: 0,
        ..Limits::default()
    };
    spawn_app_with(backend, limits).await
}

async fn problem(response: reqwest::Response, status: StatusCode) -> Problem {
    assert_eq!(response.status(), status);
    response.json().await.unwrap()
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_parquet_directory_is_registered_in_place_and_reads_as_the_same_rows_uploaded(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let uploaded = app.dataset(ads_dataset("csv", "label", "basic", 5.0)).await;
    app.admin
        .upload_rows(uploaded.id, UploadFormat::Csv, ads_rows(0, 3_500))
        .await
        .unwrap();
    let first = app.sources().join("first");
    // Name order, not creation order, is row order.
    write(&first, "b.parquet", 1_000, 2_000);
    write(&first, "a.parquet", 0, 1_000);
    std::fs::write(first.join("notes.txt"), "not a Parquet file, not read").unwrap();
    let registered = app.dataset(registering("registered", &first)).await;
    assert_eq!(registered.n_rows, Some(3_000));

    // With dictionaries this time (Parquet's default): text columns are
    // read as Arrow dictionaries either way, from dictionary or plain pages.
    let more = app.sources().join("more");
    std::fs::create_dir_all(&more).unwrap();
    std::fs::write(
        more.join("c.parquet"),
        parquet_file(&[batch(3_000, 500, |_| {})]),
    )
    .unwrap();
    let report = app
        .admin
        .register_rows(registered.id, &source(&more))
        .await
        .unwrap();
    assert_eq!((report.rows_added, report.n_rows), (500, 3_500));

    // The manifest points at the files where they are; nothing was copied.
    let files = app
        .store
        .version_files(registered.id, 3_500, true)
        .await
        .unwrap();
    assert_eq!(files.len(), 6);
    assert!(files.iter().all(|file| file.path.starts_with("file:///")));
    assert!(
        !app.snapshots
            .data()
            .root()
            .unwrap()
            .join(registered.id.to_string())
            .exists()
    );

    assert_eq!(
        stored(&app, registered.id).await,
        stored(&app, uploaded.id).await
    );
    let analyst = app.analyst("ana", &[registered.id]);
    let released = analyst
        .release(
            registered.id,
            &ReleaseRequest::walr(1.0, 1e-7),
            &Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(released.release.n, Some(3_500));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_rows_of_a_source_are_named_by_file_and_row_and_nothing_is_registered(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let sources = app.sources();

    let labels = sources.join("labels");
    with_a_bad_label(&labels);
    let refused = problem(
        post(&app, "/v1/datasets", &registering("labels", &labels)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(refused.kind(), Some(ProblemType::InvalidInput));
    assert_eq!(refused.errors.len(), 1, "{refused:?}");
    assert_eq!(refused.errors[0].file.as_deref(), Some("b.parquet"));
    assert_eq!(refused.errors[0].line, 3);
    assert!(refused.errors[0].reason.contains("not 0 or 1"));

    // A row id repeated in a later file is that file's row.
    let twice = sources.join("twice");
    write(&twice, "a.parquet", 0, 10);
    write(&twice, "b.parquet", 7, 5);
    let refused = problem(
        post(&app, "/v1/datasets", &registering("twice", &twice)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(refused.errors[0].file.as_deref(), Some("b.parquet"));
    assert_eq!(refused.errors[0].line, 1);
    assert_eq!(
        refused.errors[0].reason,
        "row_id repeats the row_id of row 8 of a.parquet"
    );

    let missing = sources.join("missing");
    let no_campaign = RecordBatch::try_from_iter(vec![(
        "row_id",
        Arc::new(StringArray::from(vec!["r1"])) as ArrayRef,
    )])
    .unwrap();
    std::fs::create_dir_all(&missing).unwrap();
    std::fs::write(missing.join("a.parquet"), parquet_file(&[no_campaign])).unwrap();
    let refused = problem(
        post(&app, "/v1/datasets", &registering("missing", &missing)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(refused.errors[0].file.as_deref(), Some("a.parquet"));
    assert!(refused.errors[0].reason.contains("has no column"));

    let garbage = sources.join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("a.parquet"), b"PAR1 and nothing else").unwrap();
    let refused = problem(
        post(&app, "/v1/datasets", &registering("garbage", &garbage)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(refused.errors[0].reason.contains("not Parquet"));

    let empty = sources.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let refused = problem(
        post(&app, "/v1/datasets", &registering("empty", &empty)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(
        refused.detail.contains("no *.parquet file"),
        "{}",
        refused.detail
    );

    let absent = sources.join("absent");
    let refused = problem(
        post(&app, "/v1/datasets", &registering("absent", &absent)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert!(refused.detail.contains("source.uri"), "{}", refused.detail);

    let mut http = ads_dataset("http", "label", "basic", 5.0);
    http["source"] = serde_json::json!({"uri": "http://host/prefix/"});
    problem(
        post(&app, "/v1/datasets", &http).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;

    // None of those created a dataset.
    assert!(app.admin.datasets().await.unwrap().is_empty());

    // Appending: a row id the dataset already has is refused by file and
    // row, and the version stays.
    let good = sources.join("good");
    write(&good, "a.parquet", 0, 10);
    let dataset = app.dataset(registering("good", &good)).await;
    let again = sources.join("again");
    write(&again, "a.parquet", 100, 4);
    write(&again, "b.parquet", 5, 2);
    let refused = problem(
        post(
            &app,
            &format!("/v1/datasets/{}/rows", dataset.id),
            &serde_json::json!({"source": source(&again)}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(refused.errors[0].file.as_deref(), Some("b.parquet"));
    assert_eq!(refused.errors[0].line, 1);
    assert!(refused.errors[0].reason.contains("already stored"));
    assert_eq!(
        app.admin.dataset(dataset.id).await.unwrap().n_rows,
        Some(10)
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_source_outside_the_operators_roots_is_forbidden(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "a.parquet", 0, 10);
    let refused = problem(
        post(
            &app,
            "/v1/datasets",
            &registering("outside", outside.path()),
        )
        .await,
        StatusCode::FORBIDDEN,
    )
    .await;
    assert!(
        refused.detail.contains("DPGATE_DATA_ROOTS"),
        "{}",
        refused.detail
    );
    // An object store's prefix the operator did not list.
    let mut s3 = ads_dataset("s3", "label", "basic", 5.0);
    s3["source"] = serde_json::json!({"uri": "s3://bucket/prefix/"});
    problem(post(&app, "/v1/datasets", &s3).await, StatusCode::FORBIDDEN).await;

    // `..` and links are resolved before the check.
    let dotted = app.sources().join("..").join("elsewhere");
    std::fs::create_dir_all(&dotted).unwrap();
    write(&dotted, "a.parquet", 0, 10);
    problem(
        post(&app, "/v1/datasets", &registering("dotted", &dotted)).await,
        StatusCode::FORBIDDEN,
    )
    .await;
    let linked = app.sources().join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::os::unix::fs::symlink(outside.path().join("a.parquet"), linked.join("a.parquet")).unwrap();
    problem(
        post(&app, "/v1/datasets", &registering("linked", &linked)).await,
        StatusCode::FORBIDDEN,
    )
    .await;
    assert!(app.admin.datasets().await.unwrap().is_empty());

    // An analyst may not register at all.
    let inside = app.sources().join("inside");
    write(&inside, "a.parquet", 0, 10);
    let dataset = app.dataset(registering("inside", &inside)).await;
    let analyst = app.token(Role::Analyst, "ana", &[dataset.id]);
    let refused = app
        .raw(Method::POST, &format!("/v1/datasets/{}/rows", dataset.id))
        .bearer_auth(analyst)
        .json(&serde_json::json!({"source": source(&inside)}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_registered_file_changed_afterwards_is_never_computed_on(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = streaming(backend).await;
    let dir = app.sources().join("campaign");
    write(&dir, "a.parquet", 0, 200);
    let file = dir.join("a.parquet");
    let dataset = app.dataset(registering("campaign", &dir)).await;
    let token = app.token(Role::Analyst, "ana", &[dataset.id]);
    let release = |key: &'static str| {
        app.raw(
            Method::POST,
            &format!("/v1/datasets/{}/releases", dataset.id),
        )
        .bearer_auth(&token)
        .header("idempotency-key", key)
        .json(&serde_json::json!({
            "kind": "aggregate", "epsilon": 1.0, "delta": 1e-7, "statistics": ["sum:value"]
        }))
        .send()
    };
    assert_eq!(release("fine").await.unwrap().status(), StatusCode::CREATED);
    let spent = || async {
        app.admin
            .dataset(dataset.id)
            .await
            .unwrap()
            .spent
            .epsilon_basic
    };
    assert_eq!(spent().await, 1.0);
    app.snapshots.take_reads();

    // Touched: refused before the debit from its metadata, nothing spent,
    // no outcome read.
    let registered_at = std::fs::metadata(&file).unwrap().modified().unwrap();
    let opened = std::fs::File::options().write(true).open(&file).unwrap();
    opened
        .set_modified(SystemTime::now() + Duration::from_secs(60))
        .unwrap();
    let refused = problem(release("touched").await.unwrap(), StatusCode::CONFLICT).await;
    assert!(
        refused.detail.contains("modified after it was registered"),
        "{}",
        refused.detail
    );
    assert_eq!(spent().await, 1.0);
    assert_eq!(app.snapshots.take_reads().outcome_files, 0);

    // Rewritten in place with its size and time forged back: the debit
    // stands, the release fails and says so on every retry.
    let forged = plain_parquet(&batch(0, 200, |columns| {
        columns[1] = (
            "converted",
            Arc::new(UInt8Array::from_iter_values((0..200).map(|_| 1))) as ArrayRef,
        );
    }));
    assert_eq!(
        forged.len() as u64,
        std::fs::metadata(&file).unwrap().len(),
        "same-size files"
    );
    std::fs::write(&file, &forged).unwrap();
    opened.set_modified(registered_at).unwrap();
    for _ in 0..2 {
        let failed = problem(
            release("forged").await.unwrap(),
            StatusCode::INTERNAL_SERVER_ERROR,
        )
        .await;
        assert_eq!(failed.kind(), Some(ProblemType::ReleaseFailed));
    }
    assert_eq!(spent().await, 2.0);

    // Removed: refused before the debit.
    std::fs::remove_file(&file).unwrap();
    problem(release("removed").await.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(spent().await, 2.0);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn with_the_budget_spent_a_release_over_registered_files_opens_no_outcome(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = streaming(backend).await;
    let dir = app.sources().join("spent");
    write(&dir, "a.parquet", 0, 100);
    write(&dir, "b.parquet", 100, 100);
    let dataset = app.dataset(registering("spent", &dir)).await;
    let analyst = app.analyst("ana", &[dataset.id]);
    // A sum of a measure: it reads the outcomes.
    let request = ReleaseRequest {
        epsilon: Some(5.0),
        delta: Some(1e-7),
        params: ReleaseParams::Aggregate(AggregateParams {
            statistics: vec!["sum:value".to_owned()],
            group_by: vec!["campaign".to_owned()],
            mechanism: AggregateMechanism::Gaussian,
            target_std: None,
        }),
    };
    analyst
        .release(dataset.id, &request, &Default::default())
        .await
        .unwrap();
    assert!(app.snapshots.take_reads().outcome_files > 0);
    let refused = analyst
        .release(dataset.id, &request, &Default::default())
        .await
        .unwrap_err();
    assert_eq!(refused.problem_type(), Some(ProblemType::BudgetExhausted));
    assert_eq!(app.snapshots.take_reads().outcome_files, 0);
    app.finish().await;
}
