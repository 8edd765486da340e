//! Files in an object store, against moto's S3 server: a data directory
//! in a bucket (uploads written there as objects, releases computed on
//! them, the sweep), and data registered in place from a bucket's prefix
//! (refused outside the operator's prefixes, and refused before the debit
//! once an object changed).

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, UInt8Array};
use dpgate::api::Limits;
use dpgate::domain::auth::Role;
use dpgate::engine::{self, DataDir, Root};
use dpgate_client::UploadFormat;
use dpgate_client::types::ReleaseRequest;
use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use reqwest::{Method, StatusCode};
use rstest::rstest;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app_on, unavailable};
use crate::registration::plain_parquet;
use crate::typed_uploads::{batch, stored};

const BUCKET: &str = "dpgate";

/// A moto S3 server on a free port, stopped when dropped.
pub struct Moto {
    server: std::process::Child,
    pub endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// The `AWS_*` settings of a client of `endpoint` (moto takes any keys).
pub fn s3_settings(endpoint: &str) -> [(&'static str, String); 5] {
    [
        ("AWS_ENDPOINT", endpoint.to_owned()),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("AWS_ACCESS_KEY_ID", "moto".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "moto".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ]
}

/// Starts moto's S3 server with bucket [`BUCKET`], or says loudly that the
/// test is skipped when `moto_server` is not installed (`pip install
/// 'moto[server]'`); where `DPGATE_REQUIRE_MOTO` is set (CI), its absence
/// fails the test instead.
pub async fn moto() -> Option<Moto> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let started = std::process::Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let server = match started {
        Ok(server) => server,
        Err(error) => {
            assert!(
                std::env::var_os("DPGATE_REQUIRE_MOTO").is_none(),
                "DPGATE_REQUIRE_MOTO is set but moto_server does not start: {error}"
            );
            eprintln!(
                "\n*** OBJECT STORE TESTS SKIPPED: moto_server does not start ({error}) ***\n"
            );
            return None;
        }
    };
    let moto = Moto {
        server,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::new();
    for _ in 0..300 {
        let created = http.put(format!("{}/{BUCKET}", moto.endpoint)).send().await;
        if created.is_ok_and(|response| response.status().is_success()) {
            return Some(moto);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("moto_server did not come up on port {port}");
}

impl Moto {
    /// A client of the bucket.
    pub fn bucket(&self) -> Arc<dyn ObjectStore> {
        let builder = s3_settings(&self.endpoint).into_iter().fold(
            AmazonS3Builder::new().with_bucket_name(BUCKET),
            |builder, (key, value)| {
                builder.with_config(key.to_ascii_lowercase().parse().unwrap(), value)
            },
        );
        Arc::new(builder.build().unwrap())
    }

    /// A data directory at `s3://dpgate/data/` that lets data be
    /// registered from `s3://dpgate/sources/`.
    fn data_dir(&self) -> DataDir {
        DataDir::at(&format!("s3://{BUCKET}/data"))
            .unwrap()
            .with_store(
                &url::Url::parse(&format!("s3://{BUCKET}")).unwrap(),
                self.bucket(),
            )
            .with_roots(vec![
                Root::parse(&format!("s3://{BUCKET}/sources")).unwrap(),
            ])
    }
}

/// The objects under `prefix`, by path.
pub async fn listed(bucket: &dyn ObjectStore, prefix: &str) -> Vec<String> {
    let mut paths: Vec<String> = bucket
        .list(Some(&ObjectPath::from(prefix)))
        .map(|meta| meta.unwrap().location.to_string())
        .collect()
        .await;
    paths.sort();
    paths
}

/// Puts rows `from..from + count` as the Parquet object `path`.
async fn put_rows(bucket: &dyn ObjectStore, path: &str, from: usize, count: usize) {
    let bytes = plain_parquet(&batch(from, count, |_| {}));
    bucket
        .put(&ObjectPath::from(path), PutPayload::from(bytes))
        .await
        .unwrap();
}

fn registering(name: &str, uri: &str) -> serde_json::Value {
    let mut request = ads_dataset(name, "label", "basic", 5.0);
    request["source"] = serde_json::json!({ "uri": uri });
    request
}

async fn create(app: &TestApp, request: &serde_json::Value) -> reqwest::Response {
    app.raw(Method::POST, "/v1/datasets")
        .bearer_auth(app.token(Role::Admin, "admin", &[]))
        .json(request)
        .send()
        .await
        .unwrap()
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_in_a_bucket_holds_uploads_and_registered_prefixes(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let Some(moto) = moto().await else {
        return;
    };
    let bucket = moto.bucket();
    // No snapshot is held: every release reads the objects.
    let limits = Limits {
        cache_bytes: 0,
        ..Limits::default()
    };
    let app = spawn_app_on(backend, limits, moto.data_dir()).await;

    // An upload is written as two objects under the dataset's folder.
    let uploaded = app.dataset(ads_dataset("csv", "label", "basic", 5.0)).await;
    app.admin
        .upload_rows(uploaded.id, UploadFormat::Csv, ads_rows(0, 2_000))
        .await
        .unwrap();
    let written = listed(bucket.as_ref(), "data").await;
    assert_eq!(written.len(), 2, "{written:?}");
    assert!(
        written
            .iter()
            .all(|path| path.starts_with(&format!("data/{}/", uploaded.id)))
    );

    // A prefix of Parquet objects is registered in place, in name order.
    put_rows(bucket.as_ref(), "sources/set/b.parquet", 1_200, 800).await;
    put_rows(bucket.as_ref(), "sources/set/a.parquet", 0, 1_200).await;
    bucket
        .put(
            &ObjectPath::from("sources/set/notes.txt"),
            PutPayload::from_static(b"not read"),
        )
        .await
        .unwrap();
    let created = create(
        &app,
        &registering("registered", &format!("s3://{BUCKET}/sources/set/")),
    )
    .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let registered: dpgate_client::types::Dataset = created.json().await.unwrap();
    assert_eq!(registered.n_rows, Some(2_000));
    let files = app
        .store
        .version_files(registered.id, 2_000, true)
        .await
        .unwrap();
    assert_eq!(files.len(), 4);
    assert!(
        files.iter().all(|file| {
            file.path.starts_with("s3://dpgate/sources/set/") && file.etag.is_some()
        })
    );
    // Nothing of it was copied.
    assert_eq!(listed(bucket.as_ref(), "data").await, written);

    // Both read back as the same rows, and releases are computed on them.
    assert_eq!(
        stored(&app, registered.id).await,
        stored(&app, uploaded.id).await
    );
    for dataset in [uploaded.id, registered.id] {
        let released = app
            .analyst("ana", &[dataset])
            .release(
                dataset,
                &ReleaseRequest::walr(1.0, 1e-7),
                &Default::default(),
            )
            .await
            .unwrap();
        assert_eq!(released.release.n, Some(2_000));
    }

    // A prefix the operator did not list is forbidden.
    put_rows(bucket.as_ref(), "elsewhere/a.parquet", 0, 10).await;
    let outside = create(
        &app,
        &registering("outside", &format!("s3://{BUCKET}/elsewhere/")),
    )
    .await;
    assert_eq!(outside.status(), StatusCode::FORBIDDEN);
    let outside = create(
        &app,
        &registering("dotted", &format!("s3://{BUCKET}/sources/../elsewhere/")),
    )
    .await;
    assert_eq!(outside.status(), StatusCode::FORBIDDEN);

    // An object replaced after registration (same size, new entity tag)
    // is refused before the debit: nothing spent.
    let spent = || async {
        app.admin
            .dataset(registered.id)
            .await
            .unwrap()
            .spent
            .epsilon_basic
    };
    assert_eq!(spent().await, 1.0);
    let forged = plain_parquet(&batch(0, 1_200, |columns| {
        columns[1] = (
            "converted",
            Arc::new(UInt8Array::from_iter_values((0..1_200).map(|_| 1))) as ArrayRef,
        );
    }));
    bucket
        .put(
            &ObjectPath::from("sources/set/a.parquet"),
            PutPayload::from(forged),
        )
        .await
        .unwrap();
    let refused = app
        .raw(
            Method::POST,
            &format!("/v1/datasets/{}/releases", registered.id),
        )
        .bearer_auth(app.token(Role::Analyst, "ana", &[registered.id]))
        .json(&serde_json::json!({"kind": "walr", "epsilon": 1.0, "delta": 1e-7}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    let refused: dpgate_client::types::Problem = refused.json().await.unwrap();
    assert!(
        refused.detail.contains("modified after it was registered"),
        "{}",
        refused.detail
    );
    assert_eq!(spent().await, 1.0);

    // The sweep removes an unrecorded object of dpgate's naming and
    // nothing else.
    let stray = format!(
        "data/{}/{:020}-0123456789ab-outcomes.parquet",
        uploaded.id, 7
    );
    bucket
        .put(
            &ObjectPath::from(stray.as_str()),
            PutPayload::from_static(b"PAR1"),
        )
        .await
        .unwrap();
    let removed = engine::sweep(app.store.as_ref(), app.snapshots.data(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(listed(bucket.as_ref(), "data").await, written);
    app.finish().await;
}
