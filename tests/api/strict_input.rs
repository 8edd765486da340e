//! Input the schema does not allow is refused as the schema says, before
//! anything is stored or spent: objects where objects are specified, the
//! caller's role before the body, UTF-8 only, no content encodings, page
//! bounds the store can hold, keys of visible ASCII.

use dpgate::domain::auth::Role;
use reqwest::{Method, StatusCode};
use rstest::rstest;

use crate::bad_input::{expect, snapshot};
use crate::helpers::{Backend, ads_dataset, ads_rows, spawn_app, unavailable};
use dpgate_client::UploadFormat;

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn arrays_where_objects_are_specified_are_refused(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    let before = snapshot(&app, dataset.id).await;
    let admin = app.token(Role::Admin, "root", &[]);
    let json = |method: Method, path: &str, body: String| {
        app.raw(method, path)
            .bearer_auth(&admin)
            .header("content-type", "application/json")
            .body(body)
    };
    let mut create = ads_dataset("swapped", "label", "rdp", 5.0);
    create["budget"] = serde_json::json!([1e-6, 5]);
    let cases = [
        (Method::POST, "/v1/datasets".to_owned(), create.to_string()),
        (
            Method::POST,
            "/v1/datasets".to_owned(),
            r#"{"name": "cols", "privacy_unit": "row", "label": "y",
                "features": [["f0", 0, 1]], "budget": {"epsilon": 1, "delta": 1e-6}}"#
                .to_owned(),
        ),
        (
            Method::POST,
            "/v1/datasets".to_owned(),
            format!("[{create}]"),
        ),
        (
            Method::PATCH,
            format!("/v1/datasets/{}/budget", dataset.id),
            r#"{"budget": [2000, 1e-3]}"#.to_owned(),
        ),
        (
            Method::PATCH,
            format!("/v1/datasets/{}/budget", dataset.id),
            r#"{"caps": {"ana": [500, 1e-4]}}"#.to_owned(),
        ),
        (
            Method::PATCH,
            format!("/v1/datasets/{}/budget", dataset.id),
            r#"[{"epsilon": 3000, "delta": 1e-3}]"#.to_owned(),
        ),
    ];
    for (method, path, body) in cases {
        let case = format!("{method} {path} {body}");
        expect(
            json(method, &path, body),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            &case,
        )
        .await;
    }
    assert_eq!(snapshot(&app, dataset.id).await, before);
    assert_eq!(
        app.admin.dataset(dataset.id).await.unwrap().budget.epsilon,
        5.0
    );
    // An empty change is a no-op: 200, no ledger event.
    let empty = json(
        Method::PATCH,
        &format!("/v1/datasets/{}/budget", dataset.id),
        "{}".to_owned(),
    );
    assert_eq!(empty.send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(snapshot(&app, dataset.id).await, before);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn requests_are_refused_as_the_schema_and_the_problem_types_say(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 5.0)).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 20))
        .await
        .unwrap();
    let before = snapshot(&app, dataset.id).await;
    let id = dataset.id;
    let analyst = app.token(Role::Analyst, "ana", &[id]);
    let admin = app.token(Role::Admin, "root", &[]);
    let releases = format!("/v1/datasets/{id}/releases");
    let walr = r#"{"kind": "walr", "epsilon": 0.5, "delta": 1e-7}"#;

    // 401 names the scheme it wants.
    let anonymous = app.raw(Method::GET, "/v1/datasets").send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        anonymous.headers()["www-authenticate"],
        "Bearer realm=\"dpgate\""
    );

    // The role is checked before the body is read: an analyst's ill-typed
    // admin request is 403, an admin's ill-typed release request 403.
    let ill_typed = app
        .raw(Method::POST, "/v1/datasets")
        .bearer_auth(&analyst)
        .header("content-type", "application/json")
        .body(r#"{"name": 5}"#);
    expect(
        ill_typed,
        StatusCode::FORBIDDEN,
        "forbidden",
        "analyst creates",
    )
    .await;
    let admin_release = app
        .raw(Method::POST, &releases)
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body("{");
    expect(
        admin_release,
        StatusCode::FORBIDDEN,
        "forbidden",
        "admin releases",
    )
    .await;

    let post_as = |media: &'static str, body: &'static str| {
        app.raw(Method::POST, &releases)
            .bearer_auth(&analyst)
            .header("content-type", media)
            .body(body)
    };
    let post = |body| post_as("application/json", body);
    // Bodies: an encoding the server would not decode, a charset other than
    // UTF-8, bytes that are not JSON, JSON of the wrong shape.
    let cases = [
        (
            post(walr).header("content-encoding", "gzip"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "gzip",
        ),
        (
            post_as("application/json; charset=utf-16le", walr),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "utf-16",
        ),
        (
            post("{\"kind\": "),
            StatusCode::BAD_REQUEST,
            "invalid-input",
            "not JSON",
        ),
        (
            post("[1, 2]"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "array",
        ),
        (
            post(r#"{"kind": "walr", "epsilon": 0.5, "delta": 1e-7, "features": []}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "empty supplied features",
        ),
        (
            post(r#"{"kind": "walr", "epsilon": 0.5, "delta": 1e-7, "epsilon": 1}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "a field twice",
        ),
        (
            post(walr).header("idempotency-key", "a b"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "key with a space",
        ),
        (
            post(r#"{"kind": "walr", "epsilon": 5e-10, "delta": 1e-7}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "ε below the ledger's unit",
        ),
        (
            post(r#"{"kind": "walr", "epsilon": 0.5, "delta": 5e-31}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "δ below the ledger's unit",
        ),
    ];
    for (request, status, slug, case) in cases {
        expect(request, status, slug, case).await;
    }
    // Pages the store can hold.
    for query in ["limit=0", "limit=1001", "after=9223372036854775808"] {
        for path in ["ledger", "releases"] {
            let request = app
                .raw(Method::GET, &format!("/v1/datasets/{id}/{path}?{query}"))
                .bearer_auth(&admin);
            expect(
                request,
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-input",
                query,
            )
            .await;
        }
    }
    // NDJSON that is not UTF-8 is a bad line, as in CSV.
    let upload = app
        .raw(Method::POST, &format!("/v1/datasets/{id}/rows"))
        .bearer_auth(&admin)
        .header("content-type", "application/x-ndjson")
        .body(b"{\"row_id\": \"x\xff\"}\n".to_vec());
    expect(
        upload,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-input",
        "ndjson",
    )
    .await;
    assert_eq!(snapshot(&app, dataset.id).await, before);
    app.finish().await;
}
