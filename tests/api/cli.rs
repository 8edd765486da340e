//! The CLI's contract: `dpgate token` prints only the token; the signing key
//! is created beside the SQLite database on first use and reused.

use std::process::Command;

use dpgate_client::types::{Problem, ReleaseRequest};

use dpgate::auth::{Keys, Role};

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

/// A port nothing listens on (bound and released; another process could
/// take it meanwhile, which would fail this test loudly, not wrongly).
fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test]
async fn metrics_are_served_only_on_their_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("served.db").display());
    let (api, metrics) = (free_port(), free_port());
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_dpgate"))
        .arg("serve")
        .env("DATABASE_URL", &url)
        .env("DPGATE_ADDR", api.to_string())
        .env("DPGATE_METRICS_ADDR", metrics.to_string())
        .env("DPGATE_NO_ADMIN_TOKEN", "1")
        .env("DPGATE_JWT_SECRET", crate::helpers::SECRET)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("dpgate serve starts");
    let http = reqwest::Client::new();
    let get = |address: std::net::SocketAddr, path: &str| {
        http.get(format!("http://{address}{path}")).send()
    };
    let mut up = false;
    for _ in 0..200 {
        if get(api, "/healthz")
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(up, "the server did not come up");
    // Not on the API's address, to anyone.
    let public = get(api, "/metrics").await.unwrap();
    assert_eq!(public.status(), reqwest::StatusCode::NOT_FOUND);
    // A granted, a replayed, a priced and a refused release.
    let keys = Keys::from_secret(crate::helpers::SECRET).unwrap();
    let mint = |role, datasets: &[uuid::Uuid]| {
        keys.mint(role, "ana", datasets, std::time::Duration::from_secs(60))
            .unwrap()
    };
    let admin = dpgate_client::Client::new(&format!("http://{api}"), Some(mint(Role::Admin, &[])));
    let request = crate::helpers::ads_dataset("metered", "label", "basic", 1.0);
    let dataset = admin
        .create_dataset(&serde_json::from_value(request).unwrap())
        .await
        .unwrap()
        .id;
    let rows = crate::helpers::ads_rows(0, 50);
    admin
        .upload_rows(dataset, dpgate_client::UploadFormat::Csv, rows)
        .await
        .unwrap();
    let analyst = admin.with_token(&mint(Role::Analyst, &[dataset]));
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
