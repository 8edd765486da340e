//! A dpgate server in the figures' own process, over a fresh SQLite file
//! in a temporary directory, and clients of it.

use std::sync::Arc;
use std::time::Duration;

use dpgate::api::{AppState, Limits};
use dpgate::domain::auth::{Keys, Role};
use dpgate::engine::DataDir;
use dpgate_client::Client;

/// A server over a fresh SQLite file: its address, an admin client, the
/// keys to mint analysts' tokens, and the directory to keep alive.
pub async fn serve() -> (String, Client, Keys, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("figures.db").display());
    let store = dpgate::store::connect(&url).await.unwrap();
    let keys = Keys::from_secret("figures-secret-of-at-least-thirty-two-bytes").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let data = Arc::new(DataDir::new(dir.path().join("data")));
    let state = AppState::new(store, data, keys.clone(), Limits::default());
    tokio::spawn(async move {
        axum::serve(listener, dpgate::api::router(state))
            .await
            .unwrap()
    });
    let token = keys
        .mint(Role::Admin, "admin", &[], Duration::from_secs(86_400))
        .unwrap();
    let admin = Client::new(&address, Some(token));
    (address, admin, keys, dir)
}

/// An analyst's client for `dataset`.
pub fn analyst(address: &str, keys: &Keys, dataset: uuid::Uuid) -> Client {
    let token = keys
        .mint(
            Role::Analyst,
            "ana",
            &[dataset],
            Duration::from_secs(86_400),
        )
        .unwrap();
    Client::new(address, Some(token))
}
