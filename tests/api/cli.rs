//! The CLI's contract: `dpgate token` prints only the token; the signing key
//! is created beside the SQLite database on first use and reused.

use std::process::Command;

use dpgate_client::types::{Problem, ReleaseRequest};

use dpgate::domain::auth::{Keys, Role};

fn dpgate(database_url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dpgate"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .env_remove("DPGATE_JWT_SECRET")
        .env_remove("DPGATE_KEY_FILE")
        .output()
        .expect("the dpgate binary runs")
}

#[test]
fn token_prints_only_a_token_signed_with_the_key_beside_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("data.db").display());
    let output = dpgate(
        &url,
        &[
            "token",
            "--role",
            "analyst",
            "--sub",
            "ana",
            "--datasets",
            "8a2c4e0a-7b6f-4a1e-9d43-0c3e7c1f2b11",
            "--ttl",
            "2h",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    let key = std::fs::read_to_string(dir.path().join("data.key")).unwrap();
    let claims = Keys::from_secret(&key)
        .unwrap()
        .verify(stdout.trim())
        .unwrap();
    assert_eq!((claims.role, claims.sub.as_str()), (Role::Analyst, "ana"));
    assert_eq!(claims.exp - claims.iat, 7200);

    // The same key signs the next token.
    let again = dpgate(&url, &["token", "--role", "admin", "--sub", "root"]);
    let token = String::from_utf8(again.stdout).unwrap();
    assert!(
        Keys::from_secret(&key)
            .unwrap()
            .verify(token.trim())
            .is_ok()
    );

    let bad = dpgate(
        &url,
        &["token", "--role", "admin", "--sub", "root", "--ttl", "soon"],
    );
    assert!(!bad.status.success());
    assert!(bad.stdout.is_empty());
}

#[test]
fn migrate_creates_the_database_and_openapi_prints_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("fresh.db").display());
    let output = dpgate(&url, &["migrate"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(dir.path().join("fresh.db").exists());
    let spec = dpgate(&url, &["openapi"]);
    assert_eq!(
        String::from_utf8(spec.stdout).unwrap(),
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap()
    );
    let unknown = dpgate("mysql://nope", &["migrate"]);
    assert!(!unknown.status.success());
}

#[test]
fn an_unknown_engine_or_one_this_build_lacks_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("data.db").display());
    let mut cases = vec![(
        "spark://cluster:7077",
        "`embedded` or `ballista://HOST:PORT`",
    )];
    if cfg!(not(feature = "ballista")) {
        cases.push(("ballista://127.0.0.1:50050", "built without Ballista"));
    }
    for (engine, says) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_dpgate"))
            .args(["serve", "--addr", "127.0.0.1:0"])
            .env("DATABASE_URL", &url)
            .env("DPGATE_ENGINE", engine)
            .env("DPGATE_JWT_SECRET", crate::helpers::SECRET)
            .output()
            .expect("the dpgate binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{engine}: {stderr}");
        assert!(stderr.contains(says), "{engine}: {stderr}");
    }
}

/// A port nothing listens on (bound and released; another process could
/// take it meanwhile, which would fail this test loudly, not wrongly).
pub(crate) fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `dpgate serve` over `database` on a free port (and metrics on
/// `metrics`), stderr piped; returns once it answers `/healthz`.
pub(crate) async fn serve(
    database: &str,
    metrics: Option<std::net::SocketAddr>,
    env: &[(&str, String)],
) -> (tokio::process::Child, std::net::SocketAddr) {
    let api = free_port();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dpgate"));
    command
        .arg("serve")
        .env("DATABASE_URL", database)
        .env("DPGATE_ADDR", api.to_string())
        .env("DPGATE_NO_ADMIN_TOKEN", "1")
        .env("DPGATE_JWT_SECRET", crate::helpers::SECRET)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(metrics) = metrics {
        command.env("DPGATE_METRICS_ADDR", metrics.to_string());
    }
    command.envs(env.iter().map(|(key, value)| (key, value)));
    let server = command.spawn().expect("dpgate serve starts");
    for _ in 0..200 {
        let health = reqwest::get(format!("http://{api}/healthz")).await;
        if health.is_ok_and(|r| r.status().is_success()) {
            return (server, api);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the server did not come up");
}

/// A client of the server at `api` with a token minted from the test
/// secret.
pub(crate) fn client_of(
    api: std::net::SocketAddr,
    role: Role,
    datasets: &[uuid::Uuid],
) -> dpgate_client::Client {
    let keys = Keys::from_secret(crate::helpers::SECRET).unwrap();
    let token = keys
        .mint(role, "ana", datasets, std::time::Duration::from_secs(60))
        .unwrap();
    dpgate_client::Client::new(&format!("http://{api}"), Some(token))
}

/// A dataset of `rows` of [`crate::helpers::ads_rows`] on the server.
pub(crate) async fn seeded(
    admin: &dpgate_client::Client,
    accountant: &str,
    rows: usize,
) -> uuid::Uuid {
    let request = crate::helpers::ads_dataset("served", "label", accountant, 1.0);
    let dataset = admin
        .create_dataset(&serde_json::from_value(request).unwrap())
        .await
        .unwrap()
        .id;
    let csv = crate::helpers::ads_rows(0, rows);
    admin
        .upload_rows(dataset, dpgate_client::UploadFormat::Csv, csv)
        .await
        .unwrap();
    dataset
}

#[tokio::test]
async fn metrics_are_served_only_on_their_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("served.db").display());
    let metrics = free_port();
    let (server, api) = serve(&url, Some(metrics), &[]).await;
    let http = reqwest::Client::new();
    let get = |address: std::net::SocketAddr, path: &str| {
        http.get(format!("http://{address}{path}")).send()
    };
    // Not on the API's address, to anyone.
    let public = get(api, "/metrics").await.unwrap();
    assert_eq!(public.status(), reqwest::StatusCode::NOT_FOUND);
    // A granted, a replayed, a priced and a refused release.
    let admin = client_of(api, Role::Admin, &[]);
    let dataset = seeded(&admin, "basic", 50).await;
    let analyst = client_of(api, Role::Analyst, &[dataset]);
    let walr = ReleaseRequest::walr(0.75, 1e-7);
    let keyed = dpgate_client::ReleaseOptions {
        idempotency_key: Some("once".to_owned()),
        dry_run: false,
    };
    analyst.release(dataset, &walr, &keyed).await.unwrap();
    analyst.release(dataset, &walr, &keyed).await.unwrap();
    let dry = dpgate_client::ReleaseOptions {
        dry_run: true,
        ..Default::default()
    };
    let small = ReleaseRequest::walr(0.1, 1e-7);
    analyst.release(dataset, &small, &dry).await.unwrap();
    assert!(
        analyst
            .release(dataset, &walr, &Default::default())
            .await
            .is_err()
    );
    // On its own address, and nothing else there.
    let private = get(metrics, "/metrics").await.unwrap();
    assert_eq!(private.status(), reqwest::StatusCode::OK);
    let text = private.text().await.unwrap();
    assert!(text.contains("dpgate_http_requests_total"), "{text}");
    for line in [
        "dpgate_release_requests_total{kind=\"walr\",outcome=\"granted\"} 1".to_owned(),
        "dpgate_release_requests_total{kind=\"walr\",outcome=\"replayed\"} 1".to_owned(),
        "dpgate_release_requests_total{kind=\"walr\",outcome=\"priced\"} 1".to_owned(),
        "dpgate_release_requests_total{kind=\"walr\",outcome=\"refused\"} 1".to_owned(),
        format!("dpgate_dataset_epsilon_spent{{dataset=\"{dataset}\"}} 0.75"),
        format!("dpgate_dataset_epsilon_remaining{{dataset=\"{dataset}\"}} 0.25"),
        // One debit: the refusal came at pre-admission, before any lock.
        "dpgate_debit_seconds_count 1".to_owned(),
    ] {
        assert!(
            text.lines().any(|metric| metric == line),
            "{line} in:\n{text}"
        );
    }
    let other = get(metrics, "/healthz").await.unwrap();
    assert_eq!(other.status(), reqwest::StatusCode::NOT_FOUND);
    // A caller's request id comes back, in the problem document too, and
    // is in the request's log line.
    let traced = http
        .get(format!("http://{api}/no/such/route"))
        .header("x-request-id", "trace-me-42")
        .send()
        .await
        .unwrap();
    assert_eq!(traced.headers()["x-request-id"], "trace-me-42");
    let problem: Problem = traced.json().await.unwrap();
    assert_eq!(problem.request_id.as_deref(), Some("trace-me-42"));
    let mut server = server;
    server.kill().await.unwrap();
    let output = server.wait_with_output().await.unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        !log.contains("admin token"),
        "DPGATE_NO_ADMIN_TOKEN=1: {log}"
    );
    // stderr is a pipe here, not a terminal: one JSON object a line.
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|line| line["span"]["request_id"] == "trace-me-42"
                && line["fields"]["status"] == 404),
        "{log}"
    );
}

/// SIGTERM while a release is being made: the server takes no new
/// requests, answers the one in flight (a DP-GD of 2,000 steps over
/// 20,000 rows, about a second), and exits cleanly with the release stored
/// and its ledger intact.
#[tokio::test]
async fn a_terminated_server_finishes_the_release_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("served.db").display());
    let (mut server, api) = serve(&url, None, &[]).await;
    let admin = client_of(api, Role::Admin, &[]);
    let dataset = seeded(&admin, "rdp", 20_000).await;
    let analyst = client_of(api, Role::Analyst, &[dataset]);
    let request: ReleaseRequest = serde_json::from_value(serde_json::json!({
        "kind": "model/dp-gd", "epsilon": 1, "delta": 1e-6, "steps": 2000
    }))
    .unwrap();
    let pending = tokio::spawn(async move {
        analyst
            .release(dataset, &request, &Default::default())
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    if pending.is_finished() {
        eprintln!("*** the release finished before the signal: shutdown was not tested ***");
    }
    let pid = server.id().unwrap().to_string();
    let signalled = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(signalled.success());
    let released = pending
        .await
        .unwrap()
        .expect("the release in flight is answered");
    assert_eq!(released.release.kind, "model/dp-gd");
    let exit = server.wait().await.unwrap();
    assert!(exit.success(), "{exit:?}");
    let verified = dpgate(&url, &["ledger", "verify"]);
    assert!(verified.status.success());
    let out = String::from_utf8_lossy(&verified.stdout);
    assert_eq!(out, format!("ok      {dataset} (2 entries)\n"));
}

/// `DPGATE_DATA_DIR` may name a bucket, its client configured by the
/// usual `AWS_*` variables: uploads are written there as objects and
/// releases read them.
#[tokio::test]
async fn the_data_directory_may_be_a_bucket_configured_by_aws_variables() {
    let Some(moto) = crate::buckets::moto().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("served.db").display());
    let mut env: Vec<(&str, String)> = crate::buckets::s3_settings(&moto.endpoint).into();
    env.push(("DPGATE_DATA_DIR", "s3://dpgate/served".to_owned()));
    let (server, api) = serve(&url, None, &env).await;
    let admin = client_of(api, Role::Admin, &[]);
    let dataset = seeded(&admin, "basic", 50).await;
    let objects = crate::buckets::listed(moto.bucket().as_ref(), "served").await;
    assert_eq!(objects.len(), 2, "{objects:?}");
    assert!(!dir.path().join("served.db-data").exists());
    let released = client_of(api, Role::Analyst, &[dataset])
        .release(
            dataset,
            &dpgate_client::types::ReleaseRequest::walr(1.0, 1e-7),
            &Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(released.release.n, Some(50));
    drop(server);
}
