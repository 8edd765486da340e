//! The CLI's contract: `dpgate token` prints only the token; the signing key
//! is created beside the SQLite database on first use and reused.

use std::process::Command;

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
