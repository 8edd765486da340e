//! The ledger: paging, append-only storage, and `dpgate ledger verify`
//! catching an edited entry.

use std::process::Command;

use dpgate::domain::auth::Role;
use dpgate_client::UploadFormat;
use dpgate_client::types::{LedgerVerification, PrivacyProfile, ReleaseRequest};
use reqwest::StatusCode;
use rstest::rstest;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app, unavailable};

async fn make_releases(app: &TestApp, count: usize) -> uuid::Uuid {
    let dataset = app
        .dataset(ads_dataset("ledgered", "label", "rdp", 100.0))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 20))
        .await
        .unwrap();
    make_releases_on(app, dataset.id, count).await;
    dataset.id
}

/// `count` WALR releases at ε = 0.2, δ = 10⁻⁹ by "ana".
async fn make_releases_on(app: &TestApp, dataset: uuid::Uuid, count: usize) {
    let analyst = app.analyst("ana", &[dataset]);
    for _ in 0..count {
        let request = ReleaseRequest::walr(0.2, 1e-9);
        analyst
            .release(dataset, &request, &Default::default())
            .await
            .unwrap();
    }
}

fn verify(app: &TestApp, dataset: Option<uuid::Uuid>) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dpgate"));
    command
        .args(["ledger", "verify"])
        .env("DATABASE_URL", &app.database_url);
    if let Some(dataset) = dataset {
        command.args(["--dataset", &dataset.to_string()]);
    }
    let output = command.output().expect("the dpgate binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// Runs `sql` on the test database directly, as an intruder with database
/// access would.
async fn tamper(app: &TestApp, sql: &str) -> Result<(), sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(sql.to_owned());
    match app.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&app.database_url).await?;
            sqlx::query(sql).execute(&pool).await.map(drop)
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&app.database_url).await?;
            sqlx::query(sql).execute(&pool).await.map(drop)
        }
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn the_ledger_pages_oldest_first(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = make_releases(&app, 4).await;
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = app
            .admin
            .ledger_page(dataset, after, Some(2))
            .await
            .unwrap();
        seen.extend(page.entries.iter().map(|entry| entry.seq));
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn ledger_verify_passes_intact_ledgers_and_catches_an_edited_entry(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = make_releases(&app, 3).await;
    let untouched = app
        .dataset(ads_dataset("untouched", "row", "basic", 1.0))
        .await;
    let (ok, out) = verify(&app, None);
    assert!(ok, "{backend:?}: {out}");
    assert_eq!(
        out.lines().filter(|line| line.starts_with("ok")).count(),
        2,
        "{out}"
    );

    let edit = "UPDATE ledger SET epsilon = 1 WHERE seq = 2";
    let refused = tamper(&app, edit).await.unwrap_err();
    assert!(refused.to_string().contains("append-only"), "{refused}");

    let drop_trigger = match backend {
        Backend::Sqlite => "DROP TRIGGER ledger_is_append_only_on_update",
        Backend::Postgres => "DROP TRIGGER ledger_is_append_only ON ledger",
    };
    tamper(&app, drop_trigger).await.unwrap();
    tamper(&app, edit).await.unwrap();
    let (ok, out) = verify(&app, None);
    assert!(!ok, "{backend:?}: the edit went unnoticed: {out}");
    assert!(
        out.contains(&format!("BROKEN  {dataset}: ledger entry 2")),
        "{out}"
    );
    assert!(verify(&app, Some(untouched.id)).0);
    assert!(!verify(&app, Some(dataset)).0);
    app.finish().await;
}

/// The API's ledger export of `dataset` in `format`, as text.
async fn export(app: &TestApp, dataset: uuid::Uuid, format: &str) -> (String, String) {
    let response = app
        .raw(
            reqwest::Method::GET,
            &format!("/v1/datasets/{dataset}/ledger?format={format}"),
        )
        .bearer_auth(app.token(Role::Admin, "admin", &[]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (kind, response.text().await.unwrap())
}

/// `dpgate ledger …` on the test database; success and stdout.
fn dpgate(app: &TestApp, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_dpgate"))
        .arg("ledger")
        .args(args)
        .env("DATABASE_URL", &app.database_url)
        .output()
        .expect("the dpgate binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn entries_carry_what_was_spent_and_allowed_after_them_and_exports_verify_offline(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = make_releases(&app, 3).await;
    let change = serde_json::json!({"budget": {"epsilon": 200, "delta": 1e-5}});
    app.admin
        .change_budget(dataset, &serde_json::from_value(change).unwrap())
        .await
        .unwrap();
    make_releases_on(&app, dataset, 1).await;
    let view = app.admin.dataset(dataset).await.unwrap();
    let entries = app
        .admin
        .ledger_page(dataset, None, None)
        .await
        .unwrap()
        .entries;
    assert_eq!(entries.len(), 6);
    let spent: Vec<f64> = entries
        .iter()
        .map(|entry| entry.spent_after.unwrap().epsilon_basic)
        .collect();
    assert_eq!(spent, [0.0, 0.2, 0.4, 0.6, 0.6, 0.8]);
    let last = entries.last().unwrap();
    assert_eq!(last.spent_after.unwrap(), view.spent);
    assert_eq!(last.dataset_id, dataset);
    let budgets: Vec<f64> = entries
        .iter()
        .map(|entry| entry.budget_after.unwrap().epsilon)
        .collect();
    assert_eq!(budgets, [100.0, 100.0, 100.0, 100.0, 200.0, 200.0]);
    // A page after the start carries the same figures.
    let later = app
        .admin
        .ledger_page(dataset, Some(3), Some(2))
        .await
        .unwrap()
        .entries;
    assert_eq!(later, entries[4..6]);

    // The audit export: every entry once, in order, verifiable offline;
    // the CLI writes the same bytes.
    let (kind, ndjson) = export(&app, dataset, "ndjson").await;
    assert_eq!(kind, "application/x-ndjson");
    assert_eq!(ndjson.lines().count(), 6);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.ndjson");
    let (ok, out) = dpgate(
        &app,
        &[
            "export",
            "--dataset",
            &dataset.to_string(),
            "--out",
            file.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), ndjson);
    let (ok, out) = dpgate(&app, &["verify", "--file", file.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert_eq!(out, format!("ok      {dataset} (6 entries)\n"));
    // Edits to the export: a figure, an entry's ε, a dropped line.
    let lines: Vec<&str> = ndjson.lines().collect();
    for (case, edited, seq) in [
        (
            "spent",
            lines[3].replace("\"epsilon_basic\":0.6", "\"epsilon_basic\":0.5"),
            3,
        ),
        (
            "units",
            lines[2].replace("\"epsilon_units\":200000000", "\"epsilon_units\":100000000"),
            2,
        ),
    ] {
        let mut copy: Vec<String> = lines.iter().map(|line| (*line).to_owned()).collect();
        assert_ne!(copy[seq], edited, "{case}: the edit applies");
        copy[seq] = edited;
        std::fs::write(&file, copy.join("\n")).unwrap();
        let (ok, out) = dpgate(&app, &["verify", "--file", file.to_str().unwrap()]);
        assert!(!ok, "{case}: {out}");
        assert!(
            out.starts_with(&format!("BROKEN  {dataset}: ledger entry {seq}")),
            "{case}: {out}"
        );
    }
    let mut dropped = lines.clone();
    dropped.remove(2);
    std::fs::write(&file, dropped.join("\n")).unwrap();
    let (ok, out) = dpgate(&app, &["verify", "--file", file.to_str().unwrap()]);
    assert!(
        !ok && out.contains("ledger entry 3: sequence number"),
        "{out}"
    );

    let (kind, csv) = export(&app, dataset, "csv").await;
    assert_eq!(kind, "text/csv; charset=utf-8");
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    assert_eq!(reader.headers().unwrap().len(), 20);
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 6);
    assert_eq!(&records[5][14], view.spent.epsilon.to_string());
    assert_eq!(&records[1][1], "release");
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn the_verify_route_reports_an_intact_chain_and_where_it_breaks(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = make_releases(&app, 3).await;
    let post = |token: String| {
        app.raw(
            reqwest::Method::POST,
            &format!("/v1/datasets/{dataset}/ledger/verify"),
        )
        .bearer_auth(token)
    };
    let verdict = app.admin.verify_ledger(dataset).await.unwrap();
    assert_eq!(
        verdict,
        LedgerVerification {
            intact: true,
            entries: 4,
            broken: None
        }
    );
    let analyst = post(app.token(Role::Analyst, "ana", &[dataset]))
        .send()
        .await
        .unwrap();
    assert_eq!(analyst.status(), StatusCode::FORBIDDEN);
    let drop_trigger = match backend {
        Backend::Sqlite => "DROP TRIGGER ledger_is_append_only_on_update",
        Backend::Postgres => "DROP TRIGGER ledger_is_append_only ON ledger",
    };
    tamper(&app, drop_trigger).await.unwrap();
    tamper(&app, "UPDATE ledger SET actor = 'mallory' WHERE seq = 2")
        .await
        .unwrap();
    let verdict = app.admin.verify_ledger(dataset).await.unwrap();
    assert!(!verdict.intact);
    assert_eq!(verdict.entries, 3);
    let broken = verdict.broken.unwrap();
    assert_eq!(broken.seq, 2);
    assert!(broken.reason.contains("hash"), "{}", broken.reason);
    // Bad export requests.
    for query in ["format=xml", "format=ndjson&limit=5", "format=csv&after=1"] {
        let response = app
            .raw(
                reqwest::Method::GET,
                &format!("/v1/datasets/{dataset}/ledger?{query}"),
            )
            .bearer_auth(app.token(Role::Admin, "admin", &[]))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}"
        );
    }
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn the_privacy_profile_passes_through_spent_for_admins_and_analysts(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = make_releases(&app, 3).await;
    let view = app.admin.dataset(dataset).await.unwrap();
    let get = |token: String, query: &str| {
        app.raw(
            reqwest::Method::GET,
            &format!("/v1/datasets/{dataset}/privacy-profile?{query}"),
        )
        .bearer_auth(token)
        .send()
    };
    let admin = app.token(Role::Admin, "admin", &[]);
    let budget_delta = view.budget.delta;
    let query = format!("deltas=1e-12,{budget_delta},0.1,0");
    let profile: PrivacyProfile = get(admin.clone(), &query)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(profile.releases, 3);
    assert_eq!(profile.analyst, None);
    let epsilons: Vec<Option<f64>> = profile.points.iter().map(|p| p.epsilon).collect();
    assert_eq!(epsilons[1], Some(view.spent.epsilon));
    assert!(epsilons[0].unwrap() > epsilons[1].unwrap());
    assert!(epsilons[2].unwrap() <= epsilons[1].unwrap());
    // Gaussian releases claim no finite ε at δ = 0.
    assert_eq!(epsilons[3], None);
    // Ana made them all: her profile is the ledger's; bob's is empty.
    let ana = app.token(Role::Analyst, "ana", &[dataset]);
    let hers: PrivacyProfile = get(ana.clone(), &query)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (hers.analyst.as_deref(), &hers.points),
        (Some("ana"), &profile.points)
    );
    let bob: PrivacyProfile = get(admin.clone(), &format!("{query}&analyst=bob"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bob.releases, 0);
    assert!(bob.points.iter().all(|point| point.epsilon == Some(0.0)));
    for (token, query, status) in [
        (ana.clone(), "analyst=bob", StatusCode::FORBIDDEN),
        (
            app.token(Role::Analyst, "ana", &[]),
            "",
            StatusCode::FORBIDDEN,
        ),
        (admin.clone(), "deltas=1", StatusCode::UNPROCESSABLE_ENTITY),
        (
            admin.clone(),
            "deltas=abc",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            admin.clone(),
            "deltas=-1e-6",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (admin.clone(), "deltas=", StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let response = get(token, query).await.unwrap();
        assert_eq!(response.status(), status, "{query}");
    }
    let many = vec!["1e-6"; 201].join(",");
    let response = get(admin.clone(), &format!("deltas={many}")).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // Under basic composition: nothing below the summed δ.
    let basic = app
        .dataset(ads_dataset("basic", "label", "basic", 10.0))
        .await;
    app.admin
        .upload_rows(basic.id, UploadFormat::Csv, ads_rows(0, 20))
        .await
        .unwrap();
    make_releases_on(&app, basic.id, 2).await;
    let profile = app
        .admin
        .privacy_profile(basic.id, &[1e-9, 2e-9, 1e-3])
        .await
        .unwrap();
    let epsilons: Vec<Option<f64>> = profile.points.iter().map(|p| p.epsilon).collect();
    assert_eq!(epsilons, [None, Some(0.4), Some(0.4)]);
    app.finish().await;
}
