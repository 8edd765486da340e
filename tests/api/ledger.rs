//! The ledger: paging, append-only storage, and `dpgate ledger verify`
//! catching an edited entry.

use std::process::Command;

use dpgate_client::UploadFormat;
use dpgate_client::types::ReleaseRequest;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, backends, spawn_app};

async fn make_releases(app: &TestApp, count: usize) -> uuid::Uuid {
    let dataset = app
        .dataset(ads_dataset("ledgered", "label", "rdp", 100.0))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 20))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[dataset.id]);
    for _ in 0..count {
        let request = ReleaseRequest::walr(0.2, 1e-9);
        analyst
            .release(dataset.id, &request, &Default::default())
            .await
            .unwrap();
    }
    dataset.id
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

#[tokio::test]
async fn the_ledger_pages_oldest_first() {
    for backend in backends() {
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
}

#[tokio::test]
async fn ledger_verify_passes_intact_ledgers_and_catches_an_edited_entry() {
    for backend in backends() {
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
}
