//! Privacy unit `user`: datasets of people with many rows each. Creation
//! with the user column and the contribution bounds, what the view shows
//! to whom, uploads that store each row's person (as a keyed fingerprint,
//! the same whatever the upload's format), aggregates, WALR, output
//! perturbation, DP-GD and gradients
//! over at most m rows a person, and the releases the unit does not offer
//! yet refused before anything is spent.

use std::sync::Arc;

use arrow_array::{ArrayRef, StringArray};
use dpgate::api::Limits;
use dpgate::domain::auth::Role;
use dpgate::dp::erm::{self, Neighbours};
use dpgate::dp::erm_people::{self, Multipliers};
use dpgate::dp::{Delta, Epsilon};
use dpgate_client::UploadFormat;
use dpgate_client::types::{
    AggregateGroup, ContributionBounds, DpGdResult, GradientCall, GradientResult, ModelResult,
    PrivacyUnit, Release, ReleaseRequest, ReleaseResult,
};
use reqwest::{Method, StatusCode};
use rstest::rstest;

use crate::bad_input::{expect, snapshot};
use crate::helpers::{Backend, TestApp, ads_rows, dry_run, spawn_app, unavailable};
use crate::typed_uploads::{batch, parquet_file, stored};

/// [`crate::helpers::ads_dataset`] under unit `user`, people named by
/// `person`, with `extra` fields merged in.
fn people(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut request = crate::helpers::ads_dataset(name, "user", "rdp", 5.0);
    request["user_column"] = "person".into();
    request["max_rows_per_user"] = 5.into();
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        request[key] = value;
    }
    request
}

/// [`ads_rows`] with a `person` column: row i belongs to person i mod 7.
fn people_rows(from: usize, count: usize) -> String {
    let csv = ads_rows(from, count);
    let mut lines = csv.lines();
    let mut out = format!("{},person\n", lines.next().unwrap());
    for (i, line) in (from..).zip(lines) {
        out.push_str(&format!("{line},p{}\n", i % 7));
    }
    out
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_user_dataset_shows_its_bounds_and_hides_n_from_analysts(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app
        .dataset(people(
            "people",
            serde_json::json!({"max_rows_per_group_per_user": 2}),
        ))
        .await;
    assert_eq!(dataset.privacy_unit, PrivacyUnit::User);
    assert_eq!(dataset.user_column.as_deref(), Some("person"));
    // The groups bound defaults to the rows bound.
    assert_eq!(
        dataset.contribution_bounds,
        Some(ContributionBounds {
            max_rows_per_user: 5,
            max_groups_per_user: 5,
            max_rows_per_group_per_user: 2,
        })
    );
    // The ledger's opening entry records the unit's public terms, never
    // the bounding's key.
    let ledger = app.admin.ledger(dataset.id).await.unwrap();
    let opened = ledger[0].details.clone().unwrap();
    assert_eq!(opened["privacy_unit"], "user");
    assert_eq!(opened["user_column"], "person");
    assert_eq!(
        opened["contribution_bounds"]["max_rows_per_group_per_user"],
        2
    );
    assert!(!opened.to_string().contains("key"), "{opened}");
    let report = app
        .admin
        .upload_rows(dataset.id, UploadFormat::Csv, people_rows(0, 50))
        .await
        .unwrap();
    assert_eq!((report.rows_added, report.n_rows), (50, 50));
    // N is private under unit `user`: an admin sees it, an analyst not.
    let admin_view = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(admin_view.n_rows, Some(50));
    let analyst = app.analyst("ana", &[dataset.id]);
    let analyst_view = analyst.dataset(dataset.id).await.unwrap();
    assert_eq!(analyst_view.n_rows, None);
    assert_eq!(
        analyst_view.contribution_bounds,
        admin_view.contribution_bounds
    );
    let listed = analyst.datasets().await.unwrap();
    assert_eq!(listed[0].n_rows, None);
    let raw: serde_json::Value = app
        .raw(Method::GET, &format!("/v1/datasets/{}", dataset.id))
        .bearer_auth(app.token(Role::Analyst, "ana", &[dataset.id]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(raw.get("n_rows").is_none(), "{raw}");
    assert_eq!(raw["privacy_unit"], "user");
    // The other units still show N to everyone.
    let labelled = app
        .dataset(crate::helpers::ads_dataset("ads", "label", "rdp", 5.0))
        .await;
    let view = app
        .analyst("ana", &[labelled.id])
        .dataset(labelled.id)
        .await
        .unwrap();
    assert_eq!((view.n_rows, view.contribution_bounds), (Some(0), None));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_user_datasets_are_refused_and_nothing_is_created(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let admin = app.token(Role::Admin, "admin", &[]);
    let without = |key: &str| {
        let mut request = people("p", serde_json::json!({}));
        request.as_object_mut().unwrap().remove(key);
        request
    };
    let mut row_unit = crate::helpers::ads_dataset("p", "row", "rdp", 5.0);
    row_unit["user_column"] = "person".into();
    let mut row_bounds = crate::helpers::ads_dataset("p", "label", "rdp", 5.0);
    row_bounds["max_rows_per_user"] = 3.into();
    let cases = [
        (
            "no user column",
            without("user_column"),
            "needs a user_column",
        ),
        (
            "no bound",
            without("max_rows_per_user"),
            "needs a user_column and max_rows_per_user",
        ),
        (
            "zero rows",
            people("p", serde_json::json!({"max_rows_per_user": 0})),
            "contribution bounds",
        ),
        (
            "groups above rows",
            people("p", serde_json::json!({"max_groups_per_user": 6})),
            "contribution bounds",
        ),
        (
            "rows per group above rows",
            people("p", serde_json::json!({"max_rows_per_group_per_user": 9})),
            "contribution bounds",
        ),
        (
            "too many rows",
            people("p", serde_json::json!({"max_rows_per_user": 1_000_001})),
            "contribution bounds",
        ),
        (
            "a feature's name",
            people("p", serde_json::json!({"user_column": "f0"})),
            "used twice",
        ),
        (
            "row_id",
            people("p", serde_json::json!({"user_column": "row_id"})),
            "used twice",
        ),
        ("unit row", row_unit, "for privacy unit \"user\" only"),
        ("unit label", row_bounds, "for privacy unit \"user\" only"),
    ];
    for (case, request, reason) in cases {
        let response = app
            .raw(Method::POST, "/v1/datasets")
            .bearer_auth(&admin)
            .json(&request)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{case}"
        );
        let problem: serde_json::Value = response.json().await.unwrap();
        assert_eq!(problem["type"], "/problems/invalid-input", "{case}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(reason), "{case}: {detail}");
    }
    assert!(app.admin.datasets().await.unwrap().is_empty());
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn every_upload_format_stores_the_same_people_and_a_restart_reads_them_back(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let mut app = spawn_app(backend).await;
    let rows = 3_000;
    let person = |i: usize| format!("p{}", i % 7);
    let with_people = |from: usize| {
        batch(from, rows, |columns: &mut Vec<(&str, ArrayRef)>| {
            let people = StringArray::from_iter_values((from..from + rows).map(person));
            columns.push(("person", Arc::new(people)));
        })
    };
    let csv = app.dataset(people("csv", serde_json::json!({}))).await;
    let ndjson = app.dataset(people("ndjson", serde_json::json!({}))).await;
    let parquet = app.dataset(people("parquet", serde_json::json!({}))).await;
    app.admin
        .upload_rows(csv.id, UploadFormat::Csv, people_rows(0, rows))
        .await
        .unwrap();
    let lines: String = (0..rows)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({
                    "row_id": format!("r{i}"), "converted": u8::from(i % 3 == 0),
                    "f0": (i % 10) as f64 / 10.0, "f1": (i % 7) as f64 - 3.0,
                    "value": i % 150, "campaign": if i % 2 == 0 { "a" } else { "b" },
                    "person": person(i),
                })
            )
        })
        .collect();
    app.admin
        .upload_rows(ndjson.id, UploadFormat::Ndjson, lines)
        .await
        .unwrap();
    app.admin
        .upload_rows(
            parquet.id,
            UploadFormat::Parquet,
            parquet_file(&[with_people(0)]),
        )
        .await
        .unwrap();
    let from_csv = people_of(&app, csv.id).await;
    assert_eq!(from_csv.len(), rows);
    // A person's rows share one fingerprint, and different people differ.
    assert_eq!(from_csv[0], from_csv[7]);
    assert_ne!(from_csv[0], from_csv[1]);
    let distinct: std::collections::BTreeSet<i128> = from_csv.iter().copied().collect();
    assert_eq!(distinct.len(), 7);
    // Each dataset has its own key: the same ids, other fingerprints.
    let from_ndjson = people_of(&app, ndjson.id).await;
    let from_parquet = people_of(&app, parquet.id).await;
    assert_eq!(from_ndjson.len(), rows);
    assert_eq!(from_parquet.len(), rows);
    assert_ne!(from_ndjson[0], from_csv[0]);
    let same_people = |a: &[i128], b: &[i128]| {
        (0..rows).all(|i| {
            (0..rows)
                .step_by(97)
                .all(|j| (a[i] == a[j]) == (b[i] == b[j]))
        })
    };
    assert!(same_people(&from_csv, &from_ndjson));
    assert!(same_people(&from_csv, &from_parquet));
    // After a restart, the files give the same people back.
    app.restart(Limits::default()).await;
    assert_eq!(people_of(&app, csv.id).await, from_csv);
    // A row without its person, or with an empty one, is refused by line.
    let before = snapshot(&app, csv.id).await;
    let path = format!("/v1/datasets/{}/rows", csv.id);
    let admin = app.token(Role::Admin, "admin", &[]);
    let upload = |body: String| {
        app.raw(Method::POST, &path)
            .bearer_auth(&admin)
            .header("content-type", "text/csv")
            .body(body)
    };
    expect(
        upload(ads_rows(5_000, 3)),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-input",
        "no person column",
    )
    .await;
    let empty = people_rows(5_000, 3).replace(",p2\n", ",\n");
    expect(
        upload(empty),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-input",
        "an empty person",
    )
    .await;
    assert_eq!(snapshot(&app, csv.id).await, before);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn files_registered_in_place_give_their_people_on_every_read(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    // Nothing held in memory: every release reads the operator's files,
    // fingerprinting their people as it reads them.
    let limits = Limits {
        cache_bytes: 0,
        ..Limits::default()
    };
    let app = crate::helpers::spawn_app_with(backend, limits).await;
    let rows = 3_000;
    let person = |i: usize| format!("p{}", i % 7);
    let dir = app.sources().join("people");
    std::fs::create_dir_all(&dir).unwrap();
    let with_people = batch(0, rows, |columns: &mut Vec<(&str, ArrayRef)>| {
        let people = StringArray::from_iter_values((0..rows).map(person));
        columns.push(("person", Arc::new(people)));
    });
    std::fs::write(dir.join("a.parquet"), parquet_file(&[with_people])).unwrap();
    let uri = crate::registration::source(&dir).uri;
    let registered = app
        .dataset(people(
            "registered",
            serde_json::json!({"source": {"uri": uri}}),
        ))
        .await;
    assert_eq!(registered.n_rows, Some(rows as u64));
    let uploaded = app.dataset(people("uploaded", serde_json::json!({}))).await;
    app.admin
        .upload_rows(uploaded.id, UploadFormat::Csv, people_rows(0, rows))
        .await
        .unwrap();
    // The same people as the upload's (under the dataset's own key).
    let (read, sent) = (
        people_of(&app, registered.id).await,
        people_of(&app, uploaded.id).await,
    );
    assert_eq!(read.len(), rows);
    assert!((0..rows).all(|i| (read[i] == read[i % 7]) && (read[i] == read[0]) == (i % 7 == 0)));
    assert_ne!(read[0], sent[0]);
    // A release over the files reads at most 5 rows of each of the 7.
    let analyst = app.analyst("ana", &[registered.id]);
    let count: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "aggregate", "epsilon": 1.0, "delta": 1e-6, "statistics": ["count"],
    }))
    .unwrap();
    let result = groups(&analyst, registered.id, &count).await;
    assert!(near(result[0].value, result[0].std, 35.0), "{result:?}");
    // Files without the person column are refused, and nothing is made.
    let bare = app.sources().join("bare");
    crate::registration::write(&bare, "a.parquet", 0, 10);
    let uri = crate::registration::source(&bare).uri;
    let response = app
        .raw(Method::POST, "/v1/datasets")
        .bearer_auth(app.token(Role::Admin, "admin", &[]))
        .json(&people("bare", serde_json::json!({"source": {"uri": uri}})))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: serde_json::Value = response.json().await.unwrap();
    assert!(problem.to_string().contains("person"), "{problem}");
    assert_eq!(app.admin.datasets().await.unwrap().len(), 2);
    app.finish().await;
}

/// Each stored row's person (its fingerprint), in stored order.
async fn people_of(app: &TestApp, dataset: uuid::Uuid) -> Vec<i128> {
    let blocks = stored(app, dataset).await;
    blocks
        .iter()
        .flat_map(|block| block.users().to_vec())
        .collect()
}

/// The groups of a paid aggregate release of `request` on `dataset`; the
/// release does not say its N.
async fn groups(
    analyst: &dpgate_client::Client,
    dataset: uuid::Uuid,
    request: &ReleaseRequest,
) -> Vec<AggregateGroup> {
    let release = analyst
        .release(dataset, request, &Default::default())
        .await
        .unwrap()
        .release;
    assert_eq!(release.n, None);
    match release.result {
        Some(ReleaseResult::Aggregate(result)) => result.groups,
        other => panic!("an aggregate: {other:?}"),
    }
}

/// A server on `backend` (`None` if it is unavailable) with seven people
/// of about 29 rows each, of unit `user` with 5 rows a person read (35
/// rows).
async fn seven_people(backend: Backend) -> Option<(TestApp, dpgate_client::types::Dataset)> {
    if unavailable(backend) {
        return None;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(people("people", serde_json::json!({}))).await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, people_rows(0, 200))
        .await
        .unwrap();
    Some((app, dataset))
}

/// Whether `value` is within six of its `std` of `exact`: a false
/// failure has probability below 2·10⁻⁹ for Gaussian noise.
fn near(value: f64, std: f64, exact: f64) -> bool {
    (value - exact).abs() <= 6.0 * std
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn aggregates_and_walr_under_unit_user_read_at_most_m_rows_a_person(
    #[case] backend: Backend,
) {
    let Some((mut app, dataset)) = seven_people(backend).await else {
        return;
    };
    let analyst = app.analyst("ana", &[dataset.id]);
    let count: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "aggregate", "epsilon": 1.0, "delta": 1e-6,
        "statistics": ["count", "mean:value"],
    }))
    .unwrap();
    let release = analyst
        .release(dataset.id, &count, &Default::default())
        .await
        .unwrap()
        .release;
    // N is private: the release does not say it, its count is noised,
    // with the sensitivity of one person's 5 rows (each quantity
    // normalised by its own: √2 for two).
    assert_eq!(release.n, None);
    let sqrt_2 = std::f64::consts::SQRT_2;
    assert!((release.sensitivity - sqrt_2).abs() < sqrt_2 * 1e-9);
    let Some(ReleaseResult::Aggregate(result)) = &release.result else {
        panic!("an aggregate: {release:?}");
    };
    let counted = &result.groups[0];
    assert_eq!(counted.statistic, "count");
    assert!(counted.std > 0.0 && !counted.exact);
    assert!(near(counted.value, counted.std, 35.0), "{counted:?}");
    let mean = &result.groups[1];
    assert!((0.0..=100.0).contains(&mean.value), "{mean:?}");
    // Grouped: at most 5 rows a person in all, in any cell.
    let grouped: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "aggregate", "epsilon": 1.0, "delta": 1e-6,
        "statistics": ["count"], "group_by": ["campaign"],
    }))
    .unwrap();
    let result = groups(&analyst, dataset.id, &grouped).await;
    let total: f64 = result.iter().map(|group| group.value).sum();
    let std = result[0].std * sqrt_2;
    assert!(near(total, std, 35.0), "{result:?}");
    // WALR releases the noisy count with the sums and divides by it.
    let walr: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "walr", "epsilon": 1.0, "delta": 1e-6,
    }))
    .unwrap();
    let raw: serde_json::Value = app
        .raw(
            Method::POST,
            &format!("/v1/datasets/{}/releases", dataset.id),
        )
        .bearer_auth(app.token(Role::Analyst, "ana", &[dataset.id]))
        .json(&walr)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(raw.get("n").is_none(), "{raw}");
    let rows = raw["result"]["noisy_rows"].as_f64().expect("a noisy count");
    let rows_std = raw["result"]["noisy_rows_std"].as_f64().unwrap();
    assert!(rows_std > 0.0, "{raw}");
    assert!(near(rows, rows_std, 35.0), "{raw}");
    assert_eq!(raw["result"]["noisy_dot"].as_array().unwrap().len(), 2);
    // A noise target on a mean over the private N is refused, before any
    // debit.
    let before = snapshot(&app, dataset.id).await;
    let targeted: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "walr", "delta": 1e-6, "target_sigma": 0.01,
    }))
    .unwrap();
    let error = analyst
        .release(dataset.id, &targeted, &Default::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("target_sigma"), "{error}");
    // The features are not public under unit `user`.
    assert!(analyst.features_csv(dataset.id, |_| {}).await.is_err());
    assert_eq!(snapshot(&app, dataset.id).await, before);
    // Streamed from the files, the engine bounds the same rows.
    app.restart(Limits {
        cache_bytes: 0,
        ..Limits::default()
    })
    .await;
    let analyst = app.analyst("ana", &[dataset.id]);
    let result = groups(&analyst, dataset.id, &count).await;
    assert!(near(result[0].value, result[0].std, 35.0), "{result:?}");
    app.finish().await;
}

/// The DP-GD model of `request` on `dataset`, its release not saying N.
async fn descended(
    analyst: &dpgate_client::Client,
    dataset: uuid::Uuid,
    request: &ReleaseRequest,
) -> (f64, DpGdResult) {
    let release = analyst
        .release(dataset, request, &Default::default())
        .await
        .unwrap()
        .release;
    assert_eq!(release.n, None);
    match release.result {
        Some(ReleaseResult::DpGd(model)) => (release.sensitivity, model),
        other => panic!("a DP-GD model: {other:?}"),
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn dp_gd_under_unit_user_clips_each_persons_gradient_and_counts_the_rows_first(
    #[case] backend: Backend,
) {
    let Some((mut app, dataset)) = seven_people(backend).await else {
        return;
    };
    let analyst = app.analyst("ana", &[dataset.id]);
    let request: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "model/dp-gd", "epsilon": 1.0, "delta": 1e-6, "steps": 20, "clip": 0.5,
    }))
    .unwrap();
    // Priced from public facts alone: a dry run says what one person moves
    // a step's summed gradient by, the clip C′ = 0.5, and spends nothing.
    let before = snapshot(&app, dataset.id).await;
    let dry = analyst
        .release(dataset.id, &request, &dry_run())
        .await
        .unwrap()
        .release;
    assert_eq!(dry.n, None);
    assert!(
        (dry.sensitivity - 0.5).abs() < 0.5 * 1e-6,
        "{}",
        dry.sensitivity
    );
    assert_eq!(snapshot(&app, dataset.id).await, before);
    let (sensitivity, model) = descended(&analyst, dataset.id, &request).await;
    assert_eq!(sensitivity, dry.sensitivity);
    // The count released first: each row weighs a fifth of a step's reach,
    // so its noise, in rows, is 5·σ/C′ (σ on the summed gradient over it).
    let rows = model.noisy_rows.expect("a noisy count under unit user");
    let count_std = 5.0 * model.sigma * rows.max(1.0) / 0.5;
    assert!(near(rows, count_std, 35.0), "{model:?}");
    assert!(model.weights.iter().all(|weight| weight.is_finite()));
    // T steps and the count, composed: one Gaussian of noise multiplier σ/Δ
    // per release, √21 times one release's at ε = 1.
    assert!(model.noise_multiplier > 3.9 * 21f64.sqrt(), "{model:?}");
    assert!(model.noise_multiplier < 6.0 * 21f64.sqrt(), "{model:?}");
    // The engine sums each person's gradients apart over the files.
    app.restart(Limits {
        cache_bytes: 0,
        ..Limits::default()
    })
    .await;
    let analyst = app.analyst("ana", &[dataset.id]);
    let (_, streamed) = descended(&analyst, dataset.id, &request).await;
    let rows = streamed.noisy_rows.expect("a noisy count");
    assert!(near(rows, 5.0 * streamed.sigma * rows.max(1.0) / 0.5, 35.0));
    app.finish().await;
}

/// The gradient result of `request` on `dataset`, its release not saying
/// N, and the release's id.
async fn gradient(
    analyst: &dpgate_client::Client,
    dataset: uuid::Uuid,
    request: serde_json::Value,
) -> (uuid::Uuid, GradientResult) {
    let request: ReleaseRequest = serde_json::from_value(request).unwrap();
    let release = analyst
        .release(dataset, &request, &Default::default())
        .await
        .unwrap()
        .release;
    assert_eq!(release.n, None);
    match release.result {
        Some(ReleaseResult::Gradient(result)) => (release.id.unwrap(), result),
        other => panic!("a gradient: {other:?}"),
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn gradients_under_unit_user_count_first_and_a_session_reads_its_own_rows(
    #[case] backend: Backend,
) {
    let Some((mut app, dataset)) = seven_people(backend).await else {
        return;
    };
    let analyst = app.analyst("ana", &[dataset.id]);
    // One call: the count, then the gradient over it; N is not said.
    let (_, call) = gradient(
        &analyst,
        dataset.id,
        serde_json::json!({
            "kind": "gradient", "epsilon": 1.0, "delta": 1e-6, "clip": 0.5,
            "theta": [0.0, 0.0, 0.0],
        }),
    )
    .await;
    assert_eq!(call.n, None);
    let rows = call.noisy_rows.expect("a noisy count under unit user");
    // Each row weighs a fifth of the reach: the count's noise, in rows, is
    // 5·σ/C′ with σ on the gradient over max(N̂, 1).
    let count_std = |result: &GradientResult, rows: f64| 5.0 * result.sigma * rows.max(1.0) / 0.5;
    assert!(near(rows, count_std(&call, rows), 35.0), "{call:?}");
    assert!((call.sensitivity - 0.5).abs() < 0.5 * 1e-6, "{call:?}");
    assert_eq!(call.gradient.as_ref().map(Vec::len), Some(3));
    // A session: the count when it opens, each call over it.
    let (session, opened) = gradient(
        &analyst,
        dataset.id,
        serde_json::json!({
            "kind": "gradient", "epsilon": 1.0, "delta": 1e-6, "clip": 0.5, "calls": 3,
        }),
    )
    .await;
    let rows = opened.noisy_rows.expect("the session's noisy count");
    assert!(near(rows, count_std(&opened, rows), 35.0), "{opened:?}");
    let first = analyst
        .gradient_call(
            dataset.id,
            session,
            &GradientCall {
                call: 0,
                theta: vec![0.0; 3],
            },
        )
        .await
        .unwrap();
    assert_eq!((first.gradient.len(), first.remaining), (3, 2));
    // Rows added since are not read: the session's calls read the rows it
    // was debited at, recorded beside it (its response cannot say N), on
    // the engine's two-level pass too once the snapshot is not held.
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, people_rows(200, 50))
        .await
        .unwrap();
    app.restart(Limits {
        cache_bytes: 0,
        ..Limits::default()
    })
    .await;
    let analyst = app.analyst("ana", &[dataset.id]);
    let second = analyst
        .gradient_call(
            dataset.id,
            session,
            &GradientCall {
                call: 1,
                theta: vec![0.0; 3],
            },
        )
        .await
        .unwrap();
    assert_eq!((second.gradient.len(), second.remaining), (3, 1));
    let stored = app
        .store
        .release(dataset.id, session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.rows, Some(200));
    app.finish().await;
}

/// The release `request` makes on `dataset` (priced only, with
/// `options` a dry run), its response not saying N.
async fn made(
    analyst: &dpgate_client::Client,
    dataset: uuid::Uuid,
    request: serde_json::Value,
    options: &dpgate_client::ReleaseOptions,
) -> Release {
    let request: ReleaseRequest = serde_json::from_value(request).unwrap();
    let release = analyst
        .release(dataset, &request, options)
        .await
        .unwrap()
        .release;
    assert_eq!(release.n, None);
    release
}

/// Each request refused with an error saying its text, and nothing spent
/// on `dataset`.
async fn refused_unspent<const N: usize>(
    app: &TestApp,
    analyst: &dpgate_client::Client,
    dataset: uuid::Uuid,
    cases: [(serde_json::Value, &str); N],
) {
    let before = snapshot(app, dataset).await;
    for (request, says) in cases {
        let request: ReleaseRequest = serde_json::from_value(request).unwrap();
        let error = analyst
            .release(dataset, &request, &Default::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(says), "{error}");
    }
    assert_eq!(snapshot(app, dataset).await, before);
}

/// The model `kind` releases at ε = 1 on a new dataset of unit `user`
/// without rows: a noisy count and finite weights.
async fn on_no_rows(app: &TestApp, kind: &str) -> ModelResult {
    let empty = app.dataset(people("empty", serde_json::json!({}))).await;
    let analyst = app.analyst("ana", &[empty.id]);
    let model = perturbed(
        &analyst,
        empty.id,
        serde_json::json!({"kind": kind, "epsilon": 1.0}),
    )
    .await;
    assert!(model.noisy_rows.is_some());
    assert!(model.weights.iter().all(|weight| weight.is_finite()));
    model
}

/// The output- or objective-perturbation model of `request` on `dataset`.
async fn perturbed(
    analyst: &dpgate_client::Client,
    dataset: uuid::Uuid,
    request: serde_json::Value,
) -> ModelResult {
    match made(analyst, dataset, request, &Default::default())
        .await
        .result
    {
        Some(ReleaseResult::Model(model)) => model,
        other => panic!("a model: {other:?}"),
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn output_perturbation_under_unit_user_counts_first_and_sizes_its_noise_by_the_count(
    #[case] backend: Backend,
) {
    let Some((app, dataset)) = seven_people(backend).await else {
        return;
    };
    let analyst = app.analyst("ana", &[dataset.id]);
    // Priced before the count: the weights' noise in units of Δ, which N̂
    // fixes; nothing spent by a dry run.
    let fixed = serde_json::json!({
        "kind": "model/output-perturbation", "epsilon": 1.0, "delta": 1e-6, "lambda": 0.1,
    });
    let before = snapshot(&app, dataset.id).await;
    let dry = made(&analyst, dataset.id, fixed.clone(), &dry_run()).await;
    let multipliers =
        Multipliers::new(Epsilon::new(1.0).unwrap(), Delta::new(1e-6).unwrap()).unwrap();
    assert!((dry.sensitivity - 1.0).abs() < 1e-5, "{}", dry.sensitivity);
    assert!(dry.sigma >= multipliers.model && dry.sigma < multipliers.model * 1.0001);
    assert_eq!(snapshot(&app, dataset.id).await, before);
    // Seven people, at most five rows each: 35 rows kept, counted with the
    // count's Gaussian (multiplier z_c on a person's 5 rows).
    let model = perturbed(&analyst, dataset.id, fixed).await;
    let rows = model.noisy_rows.expect("a noisy count under unit user");
    assert!(
        near(rows, 5.0 * multipliers.count * 1.0001, 35.0),
        "{model:?}"
    );
    assert_eq!(model.noise_mechanism, "gaussian");
    assert_eq!(model.lambda, 0.1);
    // The weights' σ is z_w times Δ = 2m/(λN̂) + 2γ/λ at the released N̂.
    let normaliser = erm_people::normaliser(rows);
    let sensitivity = erm_people::output_sensitivity(normaliser, 5, 0.1, 1e-10).unwrap();
    let ratio = model.noise_scale / (multipliers.model * sensitivity);
    assert!((1.0..1.0001).contains(&ratio), "{ratio} {model:?}");
    assert!(model.weights.iter().all(|weight| weight.is_finite()));
    // Pure ε with λ chosen after the count: Laplace on the count,
    // norm-Gamma on the weights.
    let auto = perturbed(
        &analyst,
        dataset.id,
        serde_json::json!({"kind": "model/output-perturbation", "epsilon": 1.0}),
    )
    .await;
    assert_eq!(auto.noise_mechanism, "norm_gamma");
    assert!(auto.noisy_rows.is_some() && (1e-10..=1e2).contains(&auto.lambda));
    // Refused before anything is spent: λ's selection (it holds out rows
    // by index, not people), a λ below the solver's floor.
    refused_unspent(
        &app,
        &analyst,
        dataset.id,
        [
            (
                serde_json::json!({"kind": "model/output-perturbation", "epsilon": 1.0,
                "lambda": {"select": [0.01, 0.1]}}),
                "not people",
            ),
            (
                serde_json::json!({"kind": "model/output-perturbation", "epsilon": 1.0,
                "lambda": 1e-13}),
                "lambda must be",
            ),
        ],
    )
    .await;
    // On a dataset without rows (which is private under the unit) the
    // release is noise alone.
    on_no_rows(&app, "model/output-perturbation").await;
    app.finish().await;
}

/// The noisy count rounded down to a power of 2^{1/16} (clamped to at
/// least 1), as objective perturbation under `user` normalises by before
/// raising it to its floor.
fn on_grid(noisy_rows: f64) -> f64 {
    let clamped = erm_people::normaliser(noisy_rows);
    (0..=36 * 16)
        .map(|step| 2f64.powf(f64::from(step) / 16.0))
        .take_while(|&normaliser| normaliser <= clamped)
        .last()
        .unwrap()
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn objective_perturbation_under_unit_user_counts_first_and_sizes_b_for_a_person(
    #[case] backend: Backend,
) {
    let Some((app, dataset)) = seven_people(backend).await else {
        return;
    };
    let analyst = app.analyst("ana", &[dataset.id]);
    // Priced before the count: a person of m = 5 rows moves b by 2m.
    let fixed = serde_json::json!({
        "kind": "model/objective-perturbation", "epsilon": 1.0, "lambda": 0.1,
    });
    let before = snapshot(&app, dataset.id).await;
    let dry = made(&analyst, dataset.id, fixed.clone(), &dry_run()).await;
    assert_eq!(dry.sensitivity, 10.0);
    // b's largest scale, 4m/ε_p, with ε_p = 0.99·0.99 of ε.
    assert!(
        (dry.noise.scale - 20.0 / 0.9801).abs() < 1e-9,
        "{:?}",
        dry.noise
    );
    assert_eq!(snapshot(&app, dataset.id).await, before);
    // 35 rows kept, counted with Laplace noise of scale m/(ε/100) = 500:
    // 21 scales make a false failure less likely than 10⁻⁹.
    let model = perturbed(&analyst, dataset.id, fixed).await;
    let rows = model.noisy_rows.expect("a noisy count under unit user");
    assert!((rows - 35.0).abs() <= 21.0 * 500.0, "{model:?}");
    assert_eq!(
        (model.noise_mechanism.as_str(), model.lambda),
        ("norm_gamma", 0.1)
    );
    // CMS11's parameters at the rounded N̂ (or the request's floor, here
    // at most 2), from the 0.99 of ε left.
    let objective = model.objective.clone().expect("objective details");
    let normaliser = objective
        .normaliser
        .expect("the normaliser under unit user");
    assert!(normaliser == on_grid(rows) || (on_grid(rows) < normaliser && normaliser <= 2.0));
    let neighbours = Neighbours::People {
        normaliser,
        rows_per_user: 5,
    };
    let rest = Epsilon::new(0.99).unwrap();
    let expected = erm::objective_perturbation(rest, neighbours, 0.1, 1e-10, 1.0).unwrap();
    assert_eq!(objective.epsilon_prime, expected.epsilon_prime, "{model:?}");
    assert_eq!(objective.b_scale, expected.b_scale);
    assert_eq!(objective.extra_regulariser, expected.extra_regulariser);
    assert_eq!(objective.epsilon_output, 0.0099);
    assert!(model.weights.iter().all(|weight| weight.is_finite()));
    // λ chosen after the count.
    let auto = perturbed(
        &analyst,
        dataset.id,
        serde_json::json!({"kind": "model/objective-perturbation", "epsilon": 1.0}),
    )
    .await;
    assert!(auto.noisy_rows.is_some() && (1e-10..=1e2).contains(&auto.lambda));
    // Refused before anything is spent: δ, λ's selection, a λ the solver
    // cannot certify at some N̂.
    refused_unspent(
        &app,
        &analyst,
        dataset.id,
        [
            (
                serde_json::json!({"kind": "model/objective-perturbation", "epsilon": 1.0,
                "delta": 1e-6}),
                "pure ε-DP",
            ),
            (
                serde_json::json!({"kind": "model/objective-perturbation", "epsilon": 1.0,
                "lambda": {"select": [0.01, 0.1]}}),
                "not people",
            ),
            (
                serde_json::json!({"kind": "model/objective-perturbation", "epsilon": 1.0,
                "lambda": 1e-11}),
                "raise lambda",
            ),
        ],
    )
    .await;
    // Without rows the release is −b/(N̂Λ) and its output noise.
    let nothing = on_no_rows(&app, "model/objective-perturbation").await;
    assert!(nothing.objective.is_some());
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn dp_sgd_under_unit_user_counts_first_and_batches_people(#[case] backend: Backend) {
    let Some((app, dataset)) = seven_people(backend).await else {
        return;
    };
    let analyst = app.analyst("ana", &[dataset.id]);
    let request = serde_json::json!({
        "kind": "model/dp-sgd", "epsilon": 1.0, "batch_size": 10, "epochs": 2,
    });
    let before = snapshot(&app, dataset.id).await;
    let dry = made(&analyst, dataset.id, request.clone(), &dry_run()).await;
    assert_eq!(snapshot(&app, dataset.id).await, before);
    let release = made(&analyst, dataset.id, request, &Default::default()).await;
    assert_eq!(release.sensitivity, dry.sensitivity);
    let Some(ReleaseResult::DpSgd(model)) = release.result else {
        panic!("a DP-SGD model: {:?}", release.result);
    };
    // The count at ε/100 of Laplace noise, scale m/(ε/100) = 500 rows: 21
    // scales make a false failure less likely than 10⁻⁹.
    let rows = model.noisy_rows.expect("a noisy count under unit user");
    assert!((rows - 35.0).abs() <= 21.0 * 500.0, "{model:?}");
    // ⌈N̂/b⌉ batches an epoch, each epoch 0.99/2 of ε.
    let batches = (erm_people::normaliser(rows) / 10.0).ceil().max(1.0) as u64;
    assert_eq!(model.steps, 2 * batches, "{model:?}");
    assert_eq!(model.epoch_epsilon, 0.495);
    assert!(model.weights.iter().all(|weight| weight.is_finite()));
    // On a public projection too: its seed comes back, and one epoch.
    let projected = serde_json::json!({
        "kind": "model/dp-sgd", "epsilon": 1.0, "batch_size": 10,
        "projection": {"dims": 1, "seed": "7"},
    });
    let release = made(&analyst, dataset.id, projected, &Default::default()).await;
    let Some(ReleaseResult::DpSgd(model)) = release.result else {
        panic!("a DP-SGD model: {:?}", release.result);
    };
    let rows = model.noisy_rows.expect("a noisy count under unit user");
    let batches = (erm_people::normaliser(rows) / 10.0).ceil().max(1.0) as u64;
    assert_eq!(model.steps, batches, "{model:?}");
    assert_eq!(model.projection.map(|used| used.dims), Some(1));
    assert_eq!(
        model.projected_weights.map(|weights| weights.len()),
        Some(2)
    );
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn frank_wolfe_under_unit_user_scores_sums_that_a_person_moves_by_m_rows(
    #[case] backend: Backend,
) {
    let Some((app, dataset)) = seven_people(backend).await else {
        return;
    };
    let analyst = app.analyst("ana", &[dataset.id]);
    let request = serde_json::json!({
        "kind": "model/frank-wolfe", "epsilon": 1.0, "delta": 1e-6,
        "target": "label", "radius": 1.0, "steps": 10,
    });
    let before = snapshot(&app, dataset.id).await;
    let dry = made(&analyst, dataset.id, request.clone(), &dry_run()).await;
    // A person's 5 rows move a score, a sum over the rows, by at most
    // m·r·(r + 1) = 10; N is private, so scores are not divided by it.
    assert_eq!(dry.sensitivity, 10.0);
    assert_eq!(snapshot(&app, dataset.id).await, before);
    let release = made(&analyst, dataset.id, request, &Default::default()).await;
    assert_eq!(release.sensitivity, 10.0);
    let Some(ReleaseResult::FrankWolfe(model)) = release.result else {
        panic!("a Frank-Wolfe model: {:?}", release.result);
    };
    assert_eq!(model.stage.n, None);
    assert_eq!(model.stage.score_sensitivity, 10.0);
    let l1: f64 = model.model_weights.iter().map(|weight| weight.abs()).sum();
    assert!(l1 <= 1.0 + 1e-9, "{model:?}");
    // With a source of unit `row`: the larger of the two bounds (a
    // person's 5 rows against a replaced row's 2), the source's N said,
    // the stage's not.
    let source = app
        .dataset(crate::helpers::ads_dataset("rows", "row", "rdp", 5.0))
        .await;
    app.admin
        .upload_rows(source.id, UploadFormat::Csv, ads_rows(0, 100))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[dataset.id, source.id]);
    let joined = serde_json::json!({
        "kind": "model/frank-wolfe", "epsilon": 1.0, "delta": 1e-6,
        "target": "label", "radius": 1.0, "steps": 10, "sources": [source.id],
    });
    let release = made(&analyst, dataset.id, joined, &Default::default()).await;
    assert_eq!(release.sensitivity, 10.0);
    let Some(ReleaseResult::FrankWolfe(model)) = release.result else {
        panic!("a Frank-Wolfe model: {:?}", release.result);
    };
    assert_eq!(model.stage.n, None);
    assert_eq!(model.sources[0].n, Some(100));
    app.finish().await;
}
