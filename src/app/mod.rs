//! Serving: the API and the metrics on their listeners until a signal,
//! then the releases already debited finish.

mod keys;

pub use keys::{KeySource, keys};

use tokio::net::TcpListener;

use crate::api::AppState;

/// Serves the API on `listener` (and the metrics on `metrics`, if given)
/// until ctrl-c or SIGTERM, then lets the releases already debited finish.
pub async fn serve(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    state: AppState,
) -> anyhow::Result<()> {
    let tasks = state.tasks.clone();
    if let Some(metrics) = metrics {
        let router = crate::api::metrics_router(state.clone());
        tokio::spawn(async move {
            if let Err(error) = axum::serve(metrics, router).await {
                tracing::error!(%error, "the metrics listener stopped");
            }
        });
    }
    axum::serve(listener, crate::api::router(state))
        .with_graceful_shutdown(shutdown())
        .await?;
    tasks.close();
    tasks.wait().await;
    Ok(())
}

async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = interrupt => {},
            _ = terminate.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    tracing::info!("shutting down");
}
