//! Registrations in the background (`Prefer: respond-async`): answered
//! `202 Accepted` at once, they end as the synchronous call would have
//! (the rows added, or the problem with bad rows by file and row and
//! nothing registered), readable at their `Location`; a preference the
//! request cannot honour is ignored.

use std::time::Duration;

use dpgate::domain::auth::Role;
use dpgate_api_types::{Dataset, Registration, RegistrationState};
use dpgate_client::types::{IngestReport, Problem, ProblemType};
use reqwest::{Method, StatusCode};
use rstest::rstest;
use uuid::Uuid;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app, unavailable};
use crate::registration::{registering, source, with_a_bad_label, write};

const POLL: Duration = Duration::from_millis(20);

/// POSTs `body` to `path` as the admin, preferring `prefer`.
async fn post(
    app: &TestApp,
    path: &str,
    prefer: &str,
    body: &serde_json::Value,
) -> reqwest::Response {
    app.raw(Method::POST, path)
        .bearer_auth(app.token(Role::Admin, "admin", &[]))
        .header("prefer", prefer)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The registration a `202 Accepted` answers, checked against its headers.
async fn accepted(response: reqwest::Response) -> Registration {
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let headers = response.headers().clone();
    let registration: Registration = response.json().await.unwrap();
    assert_eq!(
        headers["location"].to_str().unwrap(),
        format!("/v1/registrations/{}", registration.id)
    );
    assert_eq!(headers["preference-applied"], "respond-async");
    assert_eq!(registration.state, RegistrationState::Running);
    assert_eq!(
        (
            registration.finished_at.as_ref(),
            registration.report,
            registration.problem.as_ref()
        ),
        (None, None, None)
    );
    registration
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_registration_in_the_background_is_accepted_at_once_and_ends_as_the_synchronous_call(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let first = app.sources().join("first");
    write(&first, "a.parquet", 0, 1_000);
    write(&first, "b.parquet", 1_000, 2_000);
    // Other preferences beside it, any case.
    let created = accepted(
        post(
            &app,
            "/v1/datasets",
            "wait=10, Respond-Async",
            &registering("background", &first),
        )
        .await,
    )
    .await;
    let report = app.admin.registered(created.id, POLL).await.unwrap();
    assert_eq!(
        report,
        IngestReport {
            rows_added: 3_000,
            n_rows: 3_000
        }
    );
    let dataset: Dataset = app.admin.dataset(created.dataset_id).await.unwrap();
    assert_eq!(
        (dataset.name.as_str(), dataset.n_rows),
        ("background", Some(3_000))
    );
    let done = app.admin.registration(created.id).await.unwrap();
    assert_eq!(done.state, RegistrationState::Done);
    assert_eq!(
        (done.id, done.dataset_id, done.report),
        (created.id, created.dataset_id, Some(report))
    );
    assert_eq!(done.created_at, created.created_at);
    assert!(done.finished_at.unwrap() >= done.created_at);

    // A version appended in the background, through the client.
    let more = app.sources().join("more");
    write(&more, "c.parquet", 3_000, 500);
    let appending = app
        .admin
        .register_rows_in_background(dataset.id, &source(&more))
        .await
        .unwrap();
    assert_eq!(appending.dataset_id, dataset.id);
    let report = app.admin.registered(appending.id, POLL).await.unwrap();
    assert_eq!(
        report,
        IngestReport {
            rows_added: 500,
            n_rows: 3_500
        }
    );

    // The same rows again: each repeats a row id, refused by file and row.
    let again = app
        .admin
        .register_rows_in_background(dataset.id, &source(&more))
        .await
        .unwrap();
    let refused = app.admin.registered(again.id, POLL).await.unwrap_err();
    let dpgate_client::ClientError::Problem(problem) = refused else {
        panic!("{refused:?}");
    };
    assert_eq!(
        (problem.status, problem.kind()),
        (422, Some(ProblemType::InvalidInput))
    );
    assert_eq!(problem.errors[0].file.as_deref(), Some("c.parquet"));
    assert_eq!(problem.errors[0].line, 1);
    assert_eq!(
        app.admin.dataset(dataset.id).await.unwrap().n_rows,
        Some(3_500)
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_registration_in_the_background_that_fails_creates_nothing_and_says_why(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let labels = app.sources().join("labels");
    with_a_bad_label(&labels);
    let request = serde_json::from_value(registering("labels", &labels)).unwrap();
    let failing = app
        .admin
        .create_dataset_in_background(&request)
        .await
        .unwrap();
    assert_eq!(failing.state, RegistrationState::Running);
    let failed = loop {
        let registration = app.admin.registration(failing.id).await.unwrap();
        if registration.state != RegistrationState::Running {
            break registration;
        }
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(failed.state, RegistrationState::Failed);
    assert!(failed.finished_at.is_some() && failed.report.is_none());
    let problem = failed.problem.unwrap();
    assert_eq!(
        (problem.status, problem.kind()),
        (422, Some(ProblemType::InvalidInput))
    );
    assert_eq!(problem.errors.len(), 1, "{problem:?}");
    assert_eq!(problem.errors[0].file.as_deref(), Some("b.parquet"));
    assert_eq!(problem.errors[0].line, 3);
    assert!(problem.errors[0].reason.contains("not 0 or 1"));
    // The dataset was never created.
    let missing = app.admin.dataset(failing.dataset_id).await.unwrap_err();
    assert_eq!(missing.problem_type(), Some(ProblemType::NotFound));
    assert!(app.admin.datasets().await.unwrap().is_empty());
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn what_cannot_run_in_the_background_is_answered_at_once(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    // Without a source, a dataset is created at once: the preference is
    // ignored.
    let response = post(
        &app,
        "/v1/datasets",
        "respond-async",
        &ads_dataset("plain", "label", "basic", 5.0),
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(response.headers().get("preference-applied").is_none());
    let plain: Dataset = response.json().await.unwrap();

    // So is an upload of rows in its body.
    let response = app
        .raw(Method::POST, &format!("/v1/datasets/{}/rows", plain.id))
        .bearer_auth(app.token(Role::Admin, "admin", &[]))
        .header("prefer", "respond-async")
        .header("content-type", dpgate_api_types::CSV)
        .body(ads_rows(0, 10))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let report: IngestReport = response.json().await.unwrap();
    assert_eq!(
        report,
        IngestReport {
            rows_added: 10,
            n_rows: 10
        }
    );

    // A taken name, a source outside the roots, a dataset that does not
    // exist: refused before anything runs, as without the preference.
    let files = app.sources().join("files");
    write(&files, "a.parquet", 10, 10);
    let taken = post(
        &app,
        "/v1/datasets",
        "respond-async",
        &registering("plain", &files),
    )
    .await;
    assert_eq!(taken.status(), StatusCode::CONFLICT);
    let taken: Problem = taken.json().await.unwrap();
    assert_eq!(taken.detail, "a dataset named \"plain\" exists");
    let mut outside = registering("outside", &files);
    outside["source"]["uri"] = serde_json::json!("file:///etc/");
    let outside = post(&app, "/v1/datasets", "respond-async", &outside).await;
    assert_eq!(outside.status(), StatusCode::FORBIDDEN);
    let body = serde_json::json!({ "source": source(&files) });
    let nowhere = post(
        &app,
        &format!("/v1/datasets/{}/rows", Uuid::now_v7()),
        "respond-async",
        &body,
    )
    .await;
    assert_eq!(nowhere.status(), StatusCode::NOT_FOUND);
    assert_eq!(app.admin.datasets().await.unwrap().len(), 1);

    // A taken name is found before the rows are read without the
    // preference too.
    let taken = post(&app, "/v1/datasets", "", &registering("plain", &files)).await;
    assert_eq!(taken.status(), StatusCode::CONFLICT);

    // Registrations are the admins'; one that does not exist is not found.
    let unknown = app.admin.registration(Uuid::now_v7()).await.unwrap_err();
    assert_eq!(unknown.problem_type(), Some(ProblemType::NotFound));
    let garbled = app
        .raw(Method::GET, "/v1/registrations/not-a-uuid")
        .bearer_auth(app.token(Role::Admin, "admin", &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(garbled.status(), StatusCode::NOT_FOUND);
    let registration = app
        .admin
        .register_rows_in_background(plain.id, &source(&files))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[plain.id]);
    let forbidden = analyst.registration(registration.id).await.unwrap_err();
    assert_eq!(forbidden.problem_type(), Some(ProblemType::Forbidden));
    let report = app.admin.registered(registration.id, POLL).await.unwrap();
    assert_eq!(
        report,
        IngestReport {
            rows_added: 10,
            n_rows: 20
        }
    );
    app.finish().await;
}
