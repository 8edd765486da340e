//! Budget administration end to end: raising totals, capping analysts (also
//! under concurrency), listing releases, exporting label-free features.

use std::collections::BTreeMap;

use dpgate::domain::auth::Role;
use dpgate_client::types::{
    Budget, BudgetChange, LedgerEvent, ProblemType, ReleaseParams, ReleaseRequest, ReleaseSummary,
    WalrParams,
};
use dpgate_client::{Client, ClientError, ReleaseOptions, UploadFormat};
use reqwest::{Method, StatusCode};
use rstest::rstest;
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, spawn_app, unavailable};

fn walr(epsilon: f64) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(epsilon),
        delta: Some(1e-8),
        params: ReleaseParams::Walr(WalrParams {
            intercept: true,
            features: None,
            ..WalrParams::default()
        }),
    }
}

fn caps(entries: &[(&str, Option<f64>)]) -> BudgetChange {
    BudgetChange {
        budget: None,
        caps: entries
            .iter()
            .map(|&(analyst, cap)| {
                let cap = cap.map(|epsilon| Budget {
                    epsilon,
                    delta: 1e-6,
                });
                (analyst.to_owned(), cap)
            })
            .collect::<BTreeMap<_, _>>(),
    }
}

fn total(epsilon: f64) -> BudgetChange {
    BudgetChange {
        budget: Some(Budget {
            epsilon,
            delta: 1e-6,
        }),
        caps: BTreeMap::new(),
    }
}

async fn release(client: &Client, id: Uuid, epsilon: f64) -> Result<Uuid, ClientError> {
    let options = ReleaseOptions::default();
    let release = client.release(id, &walr(epsilon), &options).await?.release;
    Ok(release.id.expect("a made release has an id"))
}

async fn status_of(app: &TestApp, id: Uuid, token: &str, body: &str, media: &str) -> StatusCode {
    app.raw(Method::PATCH, &format!("/v1/datasets/{id}/budget"))
        .bearer_auth(token)
        .header("content-type", media)
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
        .status()
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn admins_raise_totals_and_cap_analysts_and_every_change_is_a_ledger_event(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "basic", 1.0)).await;
    let id = dataset.id;
    app.admin
        .upload_rows(id, UploadFormat::Csv, ads_rows(0, 50))
        .await
        .unwrap();
    let ana = app.analyst("ana", &[id]);
    let bob = app.analyst("bob", &[id]);
    release(&ana, id, 0.75).await.unwrap();
    // The total can not fall below what is spent; nothing is written.
    let lowered = app.admin.change_budget(id, &total(0.5)).await.unwrap_err();
    assert_eq!(
        lowered.problem_type(),
        Some(ProblemType::Conflict),
        "{backend:?}"
    );
    assert_eq!(app.admin.ledger(id).await.unwrap().len(), 2);
    let exhausted = release(&bob, id, 0.5).await.unwrap_err();
    assert_eq!(exhausted.problem_type(), Some(ProblemType::BudgetExhausted));
    // Raise it and cap ana at 1.0 (she has spent 0.75).
    let raised = app
        .admin
        .change_budget(
            id,
            &BudgetChange {
                budget: Some(Budget {
                    epsilon: 4.0,
                    delta: 1e-6,
                }),
                ..caps(&[("ana", Some(1.0))])
            },
        )
        .await
        .unwrap();
    assert_eq!(raised.budget.epsilon, 4.0);
    assert_eq!(raised.remaining.epsilon, 3.25);
    let ana_view = raised.analysts.iter().find(|a| a.analyst == "ana").unwrap();
    assert_eq!(ana_view.cap.as_ref().map(|c| c.epsilon), Some(1.0));
    assert_eq!(ana_view.spent.epsilon_basic, 0.75);
    // Her cap binds before the total: a dry run already says so.
    let options = ReleaseOptions {
        dry_run: true,
        ..ReleaseOptions::default()
    };
    let capped = ana.release(id, &walr(0.5), &options).await.unwrap_err();
    assert_eq!(capped.problem_type(), Some(ProblemType::BudgetExhausted));
    assert!(capped.to_string().contains("cap"), "{capped}");
    assert_eq!(
        release(&ana, id, 0.5).await.unwrap_err().problem_type(),
        Some(ProblemType::BudgetExhausted)
    );
    release(&ana, id, 0.25).await.unwrap();
    release(&bob, id, 2.0).await.unwrap();
    // An analyst sees only its own spending; an admin every analyst's.
    let own = ana.dataset(id).await.unwrap();
    assert_eq!(own.analysts.len(), 1);
    assert_eq!(own.analysts[0].analyst, "ana");
    assert_eq!(own.analysts[0].spent.epsilon_basic, 1.0);
    let all = app.admin.dataset(id).await.unwrap();
    let names: Vec<&str> = all.analysts.iter().map(|a| a.analyst.as_str()).collect();
    assert_eq!(names, ["ana", "bob"]);
    // Removing the cap frees her up to the total.
    app.admin
        .change_budget(id, &caps(&[("ana", None)]))
        .await
        .unwrap();
    release(&ana, id, 0.5).await.unwrap();
    // The ledger: open, release, budget, cap, 3 releases, cap, release.
    let ledger = app.admin.ledger(id).await.unwrap();
    let events: Vec<LedgerEvent> = ledger.iter().map(|e| e.event).collect();
    use LedgerEvent::{Budget as B, Cap as C, Open as O, Release as R};
    assert_eq!(events, [O, R, B, C, R, R, C, R], "{backend:?}");
    assert!(
        ledger
            .iter()
            .filter(|e| e.event != R && e.event != O)
            .all(|e| e.actor == "admin")
    );
    assert_eq!(
        ledger[2].details,
        Some(json!({"from": {"epsilon": 1.0, "delta": 1e-6},
                    "to": {"epsilon": 4.0, "delta": 1e-6}}))
    );
    assert_eq!(
        ledger[3].details,
        Some(json!({"analyst": "ana", "cap": {"epsilon": 1.0, "delta": 1e-6}}))
    );
    assert_eq!(
        ledger[6].details,
        Some(json!({"analyst": "ana", "cap": null}))
    );
    assert_eq!((ledger[2].epsilon, ledger[6].epsilon), (4.0, 0.0));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn bad_budget_changes_are_refused_and_change_nothing(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 1.0)).await;
    let id = dataset.id;
    let admin = app.token(Role::Admin, "root", &[]);
    let analyst = app.token(Role::Analyst, "ana", &[id]);
    let json_media = "application/json";
    let good = r#"{"budget": {"epsilon": 2, "delta": 1e-6}}"#;
    assert_eq!(
        status_of(&app, id, &analyst, good, json_media).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status_of(&app, id, "not-a-token", good, json_media).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status_of(&app, id, &admin, good, "text/plain").await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(
        status_of(&app, Uuid::new_v4(), &admin, good, json_media).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        status_of(&app, id, &admin, "not json", json_media).await,
        StatusCode::BAD_REQUEST
    );
    for bad in [
        r#"{"budget": {"epsilon": 0, "delta": 1e-6}}"#,
        r#"{"budget": {"epsilon": 2, "delta": 1}}"#,
        r#"{"budget": {"epsilon": "2", "delta": 1e-6}}"#,
        r#"{"caps": {"": {"epsilon": 1, "delta": 1e-6}}}"#,
        r#"{"caps": {"ana": {"epsilon": -1, "delta": 1e-6}}}"#,
        r#"{"caps": {"ana": 5}}"#,
        r#"{"budget": {"epsilon": 2, "delta": 1e-6}, "unknown": 1}"#,
    ] {
        let response = app
            .raw(Method::PATCH, &format!("/v1/datasets/{id}/budget"))
            .bearer_auth(&admin)
            .header("content-type", json_media)
            .body(bad)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{bad}"
        );
    }
    let view = app.admin.dataset(id).await.unwrap();
    assert_eq!((view.budget.epsilon, view.analysts.len()), (1.0, 0));
    assert_eq!(app.admin.ledger(id).await.unwrap().len(), 1, "{backend:?}");
    app.finish().await;
}

/// Analysts race against their caps while an admin raises the total: no
/// analyst ever spends beyond its cap, nor the dataset beyond its budget.
#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_analysts_never_exceed_their_caps_while_the_total_moves(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    const ANALYSTS: usize = 4;
    const TRIES: usize = 8;
    for repetition in 0..5 {
        let app = spawn_app(backend).await;
        let accountant = if repetition % 2 == 0 { "basic" } else { "rdp" };
        let dataset = app
            .dataset(ads_dataset("race", "label", accountant, 1.0))
            .await;
        let id = dataset.id;
        app.admin
            .upload_rows(id, UploadFormat::Csv, ads_rows(0, 40))
            .await
            .unwrap();
        let names: Vec<String> = (0..ANALYSTS).map(|i| format!("analyst-{i}")).collect();
        let cap_list: Vec<(&str, Option<f64>)> = names
            .iter()
            .map(|name| (name.as_str(), Some(0.5)))
            .collect();
        app.admin.change_budget(id, &caps(&cap_list)).await.unwrap();
        // Each analyst asks for 8 × 0.125 = twice its cap; together
        // they ask for 4, twice the total the admin raises to.
        let mut tasks = Vec::new();
        for name in &names {
            for _ in 0..TRIES {
                let client = app.analyst(name, &[id]);
                let name = name.clone();
                tasks.push(tokio::spawn(async move {
                    (name, release(&client, id, 0.125).await)
                }));
            }
        }
        let admin = app.admin.clone();
        let raise = tokio::spawn(async move { admin.change_budget(id, &total(2.0)).await });
        let mut made: BTreeMap<String, usize> = BTreeMap::new();
        for task in tasks {
            let (name, outcome) = task.await.unwrap();
            match outcome {
                Ok(_) => *made.entry(name).or_default() += 1,
                Err(error) => assert_eq!(
                    error.problem_type(),
                    Some(ProblemType::BudgetExhausted),
                    "{backend:?}: {error}"
                ),
            }
        }
        raise.await.unwrap().unwrap();
        let view = app.admin.dataset(id).await.unwrap();
        assert!(view.spent.epsilon <= 2.0, "{backend:?}: {:?}", view.spent);
        for analyst in &view.analysts {
            let cap = analyst.cap.as_ref().unwrap();
            assert!(
                analyst.spent.epsilon <= cap.epsilon,
                "{backend:?} {accountant}: {analyst:?}"
            );
            // Basic composition: 0.5 / 0.125 = 4 releases at most.
            if accountant == "basic" {
                assert!(made.get(&analyst.analyst).copied().unwrap_or(0) <= 4);
            }
        }
        let debited = app
            .admin
            .ledger(id)
            .await
            .unwrap()
            .iter()
            .filter(|entry| entry.event == LedgerEvent::Release)
            .count();
        assert_eq!(debited, made.values().sum::<usize>(), "{backend:?}");
        app.finish().await;
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn analysts_list_their_own_releases_and_admins_all_of_them(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", 10.0))
        .await;
    let id = dataset.id;
    app.admin
        .upload_rows(id, UploadFormat::Csv, ads_rows(0, 30))
        .await
        .unwrap();
    let ana = app.analyst("ana", &[id]);
    let bob = app.analyst("bob", &[id]);
    let mut ana_ids = Vec::new();
    let mut bob_ids = Vec::new();
    for round in 0..3 {
        ana_ids.push(release(&ana, id, 0.5).await.unwrap());
        if round < 2 {
            bob_ids.push(release(&bob, id, 0.25).await.unwrap());
        }
    }
    let ids = |list: &[ReleaseSummary]| list.iter().map(|r| r.id).collect::<Vec<_>>();
    let own = ana.releases_page(id, None, None, None).await.unwrap();
    assert_eq!(ids(&own.releases), ana_ids);
    assert!(
        own.releases
            .iter()
            .all(|r| r.analyst == "ana" && r.epsilon == 0.5)
    );
    assert_eq!(own.releases[0].kind, "walr");
    // An analyst asking for another's releases still gets only its own.
    let sneaky = ana
        .releases_page(id, Some("bob"), None, None)
        .await
        .unwrap();
    assert_eq!(ids(&sneaky.releases), ana_ids);
    let only_bob = app
        .admin
        .releases_page(id, Some("bob"), None, None)
        .await
        .unwrap();
    assert_eq!(ids(&only_bob.releases), bob_ids);
    // Admins page through all five, oldest first.
    let first = app
        .admin
        .releases_page(id, None, None, Some(3))
        .await
        .unwrap();
    assert_eq!(first.releases.len(), 3);
    let after = first.next_after.expect("a second page");
    let second = app
        .admin
        .releases_page(id, None, Some(after), Some(3))
        .await
        .unwrap();
    assert_eq!(second.next_after, None);
    let all: Vec<Uuid> = ids(&first.releases)
        .into_iter()
        .chain(ids(&second.releases))
        .collect();
    let interleaved = [ana_ids[0], bob_ids[0], ana_ids[1], bob_ids[1], ana_ids[2]];
    assert_eq!(all, interleaved, "{backend:?}");
    let seqs: Vec<u64> = first
        .releases
        .iter()
        .chain(&second.releases)
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    // Without a grant, or with a bad page parameter: refused.
    let stranger = app.analyst("eve", &[]);
    let forbidden = stranger
        .releases_page(id, None, None, None)
        .await
        .unwrap_err();
    assert_eq!(forbidden.problem_type(), Some(ProblemType::Forbidden));
    let bad_limit = app
        .admin
        .releases_page(id, None, None, Some(0))
        .await
        .unwrap_err();
    assert_eq!(bad_limit.problem_type(), Some(ProblemType::InvalidInput));
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn label_unit_datasets_export_their_features_without_labels(#[case] backend: Backend) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let labelled = app.dataset(ads_dataset("ads", "label", "rdp", 1.0)).await;
    let rows = app.dataset(ads_dataset("rows", "row", "rdp", 1.0)).await;
    for dataset in [&labelled, &rows] {
        app.admin
            .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 12))
            .await
            .unwrap();
    }
    let ana = app.analyst("ana", &[labelled.id, rows.id]);
    let csv = String::from_utf8(ana.features_csv(labelled.id, |_| {}).await.unwrap()).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 13);
    assert_eq!(lines[0], "row_id,f0,f1");
    // Rows in the order they were uploaded, raw units, no label.
    assert_eq!(lines[1], "r0,0,-3");
    assert_eq!(lines[2], "r1,0.1,-2");
    assert!(lines.iter().all(|line| !line.contains("converted")));
    let ids: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split(',').next().unwrap())
        .collect();
    let uploaded: Vec<String> = (0..12).map(|i| format!("r{i}")).collect();
    assert_eq!(ids, uploaded);
    // NDJSON on request: one object per row.
    let token = app.token(Role::Analyst, "ana", &[labelled.id, rows.id]);
    let ndjson = app
        .raw(
            Method::GET,
            &format!("/v1/datasets/{}/features", labelled.id),
        )
        .bearer_auth(&token)
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(ndjson.status(), StatusCode::OK);
    assert_eq!(ndjson.headers()["content-type"], "application/x-ndjson");
    let text = ndjson.text().await.unwrap();
    let objects: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(objects.len(), 12);
    assert_eq!(objects[0], json!({"row_id": "r0", "f0": 0.0, "f1": -3.0}));
    // Under unit row the features are private.
    let refused = ana.features_csv(rows.id, |_| {}).await.unwrap_err();
    assert_eq!(
        refused.problem_type(),
        Some(ProblemType::FeaturesNotPublic),
        "{backend:?}"
    );
    let stranger = app.analyst("eve", &[rows.id]);
    let forbidden = stranger
        .features_csv(labelled.id, |_| {})
        .await
        .unwrap_err();
    assert_eq!(forbidden.problem_type(), Some(ProblemType::Forbidden));
    // Analysts learn nothing about datasets they are not granted (403);
    // admins get 404 for one that does not exist.
    let hidden = ana.features_csv(Uuid::new_v4(), |_| {}).await.unwrap_err();
    assert_eq!(hidden.problem_type(), Some(ProblemType::Forbidden));
    let missing = app
        .admin
        .features_csv(Uuid::new_v4(), |_| {})
        .await
        .unwrap_err();
    assert_eq!(missing.problem_type(), Some(ProblemType::NotFound));
    let anonymous = app
        .raw(
            Method::GET,
            &format!("/v1/datasets/{}/features", labelled.id),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    app.finish().await;
}
