//! Operability: request ids on every answer, problem documents naming
//! them, a server that waits its turn instead of refusing, and a client
//! that a hung server cannot hang.

use std::time::Duration;

use dpgate::api::Limits;
use dpgate_client::types::Problem;
use dpgate_client::{Client, Timeouts};
use reqwest::{Method, StatusCode};

use crate::helpers::{backends, spawn_app, spawn_app_with};

#[tokio::test]
async fn every_answer_carries_a_request_id_and_problems_name_it() {
    let app = spawn_app(backends()[0]).await;
    let plain = app.raw(Method::GET, "/healthz").send().await.unwrap();
    let made = plain.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&made).is_ok(), "{made}");
    let other = app.raw(Method::GET, "/healthz").send().await.unwrap();
    assert_ne!(other.headers()["x-request-id"].to_str().unwrap(), made);

    let refused = app
        .raw(Method::GET, "/v1/datasets")
        .header("x-request-id", "caller-7")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(refused.headers()["x-request-id"], "caller-7");
    let problem: Problem = refused.json().await.unwrap();
    assert_eq!(problem.request_id.as_deref(), Some("caller-7"));
    assert_eq!(problem.status, 401);
    app.finish().await;
}

#[tokio::test]
async fn requests_beyond_the_concurrency_limit_wait_their_turn() {
    let limits = Limits {
        max_concurrent: 1,
        ..Limits::default()
    };
    let app = spawn_app_with(backends()[0], limits).await;
    let answers =
        futures_util::future::join_all((0..8).map(|_| app.raw(Method::GET, "/healthz").send()))
            .await;
    for answer in answers {
        assert_eq!(answer.unwrap().status(), StatusCode::OK);
    }
    app.finish().await;
}

#[tokio::test]
async fn a_hung_server_does_not_hang_the_client() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let hung = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let timeouts = Timeouts {
        connect: Duration::from_millis(200),
        request: Duration::from_millis(200),
    };
    let client = Client::with_timeouts(&format!("http://{address}"), None, timeouts);
    // Four tries of 0.2 s and the backoff between them end well inside
    // this guard, which only turns a hang into a failure.
    let outcome = tokio::time::timeout(Duration::from_secs(60), client.datasets()).await;
    let error = outcome.expect("the client gave up by itself").unwrap_err();
    assert!(format!("{error:?}").contains("TimedOut"), "{error:?}");
    hung.abort();
}
