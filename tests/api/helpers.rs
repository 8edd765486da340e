//! `spawn_app`: a real server on a random port over a fresh database (an
//! SQLite file, or a new Postgres database when `TEST_POSTGRES_URL` is set),
//! and the typed client that talks to it.

use std::io::Write;
use std::sync::{Arc, Once};
use std::time::Duration;

use dpgate::api::{AppState, Limits};
use dpgate::domain::auth::{Keys, Role};
use dpgate::engine::DataDir;
use dpgate::snapshots::Snapshots;
use dpgate::store::{self, Store};
use dpgate_client::types::{CreateDataset, Dataset};
use dpgate_client::{Client, ReleaseOptions};
use uuid::Uuid;

/// The signing secret of every test server.
pub const SECRET: &str = "test-secret-of-at-least-thirty-two-bytes";

/// A database backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

fn postgres_url() -> Option<String> {
    std::env::var("TEST_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// The backends to run every test against: SQLite always, Postgres when
/// `TEST_POSTGRES_URL` is set. Says so loudly (past the test harness's
/// output capture) when Postgres is skipped.
pub fn backends() -> Vec<Backend> {
    static WARN: Once = Once::new();
    match postgres_url() {
        Some(_) => vec![Backend::Sqlite, Backend::Postgres],
        None => {
            WARN.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "\n*** POSTGRES TESTS SKIPPED: TEST_POSTGRES_URL is not set; \
                     only SQLite is tested ***\n"
                );
            });
            vec![Backend::Sqlite]
        }
    }
}

/// Whether a test case on `backend` must be skipped: Postgres without
/// `TEST_POSTGRES_URL` (said loudly, once).
pub fn unavailable(backend: Backend) -> bool {
    !backends().contains(&backend)
}

/// A running test server.
pub struct TestApp {
    pub backend: Backend,
    pub address: String,
    pub database_url: String,
    pub store: Arc<dyn Store>,
    /// The server's snapshots in memory.
    pub snapshots: Arc<Snapshots>,
    pub keys: Keys,
    /// A client with an admin token.
    pub admin: Client,
    server: tokio::task::JoinHandle<()>,
    postgres_database: Option<String>,
    _dir: tempfile::TempDir,
}

/// The one directory a test server lets data be registered in place from.
fn sources(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let sources = dir.path().join("sources");
    std::fs::create_dir_all(&sources).expect("the sources directory");
    sources
}

async fn fresh_database(backend: Backend, dir: &tempfile::TempDir) -> (String, Option<String>) {
    match backend {
        Backend::Sqlite => (
            format!("sqlite://{}", dir.path().join("dpgate.db").display()),
            None,
        ),
        Backend::Postgres => {
            let base = postgres_url().expect("only chosen when TEST_POSTGRES_URL is set");
            let name = format!("dpgate_test_{}", Uuid::new_v4().simple());
            let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&base)
                .await
                .expect("TEST_POSTGRES_URL accepts connections");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await
                .expect("the test user may create databases");
            let (prefix, rest) = base.rsplit_once('/').expect("a URL with a database path");
            let query = rest
                .split_once('?')
                .map_or(String::new(), |(_, q)| format!("?{q}"));
            (format!("{prefix}/{name}{query}"), Some(name))
        }
    }
}

/// Starts a server on 127.0.0.1:0 over a fresh database of `backend`.
pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, Limits::default()).await
}

/// [`spawn_app`] with other request limits.
pub async fn spawn_app_with(backend: Backend, limits: Limits) -> TestApp {
    spawn_app_over(backend, limits, |store| store).await
}

/// Where a dataset's snapshots are read from: held in memory (the default
/// cache), or streamed from the files every pass (no cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    Held,
    Streamed,
}

impl Cache {
    /// The cache's size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            Cache::Held => Limits::default().cache_bytes,
            Cache::Streamed => 0,
        }
    }
}

/// The app on `backend` holding at most `cache_bytes` of snapshots.
pub async fn spawn_app_caching(backend: Backend, cache_bytes: u64) -> TestApp {
    let limits = Limits {
        cache_bytes,
        ..Limits::default()
    };
    spawn_app_with(backend, limits).await
}

/// [`spawn_app_with`] serving through `wrap` of the real store (a
/// decorator that counts its calls, say).
pub async fn spawn_app_over(
    backend: Backend,
    limits: Limits,
    wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
) -> TestApp {
    spawn(backend, limits, SECRET, wrap, None).await
}

/// [`spawn_app_with`] over the data directory `data` (an object store's,
/// say) instead of a temporary one.
pub async fn spawn_app_on(backend: Backend, limits: Limits, data: DataDir) -> TestApp {
    spawn(backend, limits, SECRET, |store| store, Some(data)).await
}

/// [`spawn_app`] signing with its own `secret`: a server of another
/// operator, whose tokens no other test server accepts.
pub async fn spawn_app_keyed(backend: Backend, secret: &str) -> TestApp {
    spawn(backend, Limits::default(), secret, |store| store, None).await
}

async fn spawn(
    backend: Backend,
    limits: Limits,
    secret: &str,
    wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
    data: Option<DataDir>,
) -> TestApp {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (database_url, postgres_database) = fresh_database(backend, &dir).await;
    let store = wrap(
        store::connect(&database_url)
            .await
            .expect("the database opens"),
    );
    let keys = Keys::from_secret(secret).expect("a long enough secret");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let address = format!("http://{}", listener.local_addr().expect("bound"));
    let data = Arc::new(data.unwrap_or_else(|| {
        DataDir::new(dir.path().join("data")).with_roots(vec![sources(&dir).into()])
    }));
    let state = AppState::new(store.clone(), data, keys.clone(), limits);
    let snapshots = state.snapshots.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, dpgate::api::router(state))
            .await
            .expect("the server runs");
    });
    let admin_token = keys
        .mint(Role::Admin, "admin", &[], Duration::from_secs(3600))
        .expect("minting works");
    TestApp {
        backend,
        admin: Client::new(&address, Some(admin_token)),
        address,
        database_url,
        store,
        snapshots,
        keys,
        server,
        postgres_database,
        _dir: dir,
    }
}

impl TestApp {
    /// A token for `sub` with `role` and grants.
    pub fn token(&self, role: Role, sub: &str, datasets: &[Uuid]) -> String {
        self.keys
            .mint(role, sub, datasets, Duration::from_secs(3600))
            .expect("minting works")
    }

    /// A client for an analyst granted `datasets`.
    pub fn analyst(&self, sub: &str, datasets: &[Uuid]) -> Client {
        self.admin
            .with_token(&self.token(Role::Analyst, sub, datasets))
    }

    /// A second server over the same database and data directory, with a
    /// connection pool, snapshots and files handle of its own: another
    /// replica. Its address; it serves until the test's runtime ends.
    pub async fn replica(&self) -> String {
        let store = store::connect(&self.database_url)
            .await
            .expect("the database opens");
        let data = Arc::new(
            DataDir::new(self.snapshots.data().root().expect("local").to_path_buf())
                .with_roots(vec![sources(&self._dir).into()]),
        );
        let state = AppState::new(store, data, self.keys.clone(), Limits::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let address = format!("http://{}", listener.local_addr().expect("bound"));
        tokio::spawn(async move {
            axum::serve(listener, dpgate::api::router(state))
                .await
                .expect("the replica runs");
        });
        address
    }

    /// The directory under which the server registers data in place
    /// (its one `DPGATE_DATA_ROOTS` entry), made if missing.
    pub fn sources(&self) -> std::path::PathBuf {
        sources(&self._dir)
    }

    /// A raw HTTP request to the server.
    pub fn raw(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new().request(method, format!("{}{path}", self.address))
    }

    /// Creates a dataset from JSON.
    pub async fn dataset(&self, request: serde_json::Value) -> Dataset {
        let request: CreateDataset = serde_json::from_value(request).expect("a creation request");
        self.admin.create_dataset(&request).await.expect("created")
    }

    /// Stops the server and drops its Postgres database.
    pub async fn finish(self) {
        self.server.abort();
        if let (Some(name), Some(base)) = (&self.postgres_database, postgres_url())
            && let Ok(mut admin) = <sqlx::PgConnection as sqlx::Connection>::connect(&base).await
        {
            let drop_database = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            let _ = sqlx::query(sqlx::AssertSqlSafe(drop_database))
                .execute(&mut admin)
                .await;
        }
    }
}

/// The dataset of DESIGN §8 (k = 1 plus a measure and a dimension).
pub fn ads_dataset(name: &str, unit: &str, accountant: &str, epsilon: f64) -> serde_json::Value {
    serde_json::json!({
        "name": name, "privacy_unit": unit,
        "features": [{"name": "f0", "min": 0, "max": 1}, {"name": "f1", "min": -5, "max": 5}],
        "label": "converted",
        "measures": [{"name": "value", "min": 0, "max": 100}],
        "dimensions": [{"name": "campaign", "values": ["a", "b"]}],
        "budget": {"epsilon": epsilon, "delta": 1e-6},
        "accountant": accountant
    })
}

/// CSV rows for [`ads_dataset`]: row i has f0 = (i mod 10)/10.
pub fn ads_rows(from: usize, count: usize) -> String {
    let mut csv = String::from("row_id,converted,f0,f1,value,campaign\n");
    for index in from..from + count {
        let label = u8::from(index % 3 == 0);
        let f0 = (index % 10) as f64 / 10.0;
        let f1 = (index % 7) as f64 - 3.0;
        let campaign = if index % 2 == 0 { "a" } else { "b" };
        csv.push_str(&format!(
            "r{index},{label},{f0},{f1},{},{campaign}\n",
            index % 150
        ));
    }
    csv
}

impl TestApp {
    /// Stops the server and starts another over the same store and keys
    /// with `limits`: a restart, which holds no snapshot in memory until a
    /// release loads one. Clients made before it talk to the old address.
    pub async fn restart(&mut self, limits: Limits) {
        self.server.abort();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        self.address = format!("http://{}", listener.local_addr().expect("bound"));
        let state = AppState::new(
            self.store.clone(),
            self.snapshots.data().clone(),
            self.keys.clone(),
            limits,
        );
        self.snapshots = state.snapshots.clone();
        self.server = tokio::spawn(async move {
            axum::serve(listener, dpgate::api::router(state))
                .await
                .expect("the server runs");
        });
        let admin_token = self.token(Role::Admin, "admin", &[]);
        self.admin = Client::new(&self.address, Some(admin_token));
    }
}

/// Options that price a release without making it.
pub fn dry_run() -> ReleaseOptions {
    ReleaseOptions {
        dry_run: true,
        ..ReleaseOptions::default()
    }
}
