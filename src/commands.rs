//! What each CLI command does.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use uuid::Uuid;

use crate::app::{self, AppState, Limits};
use crate::auth::Role;
use crate::config::{Command, Database, LedgerCommand, Serve, Token, redact_url};
use crate::ledger;
use crate::store::{self, Store};

/// Ledger entries read per page when verifying.
const VERIFY_PAGE: u32 = 1000;

/// Runs a command; the exit code is non-zero if it failed (or, for
/// `ledger verify`, if a ledger is broken).
pub async fn run(database: Database, command: Command) -> anyhow::Result<bool> {
    if let Command::Openapi = command {
        print!("{}", openapi_yaml()?);
        return Ok(true);
    }
    let store = store::connect(&database.database_url)
        .await
        .with_context(|| format!("opening {}", redact_url(&database.database_url)))?;
    match command {
        Command::Serve(serve) => serve_command(&database, store, serve).await.map(|()| true),
        Command::Migrate => {
            println!("migrated {}", redact_url(&database.database_url));
            Ok(true)
        }
        Command::Token(token) => {
            let keys = app::keys(
                &database.key_source(),
                &database.database_url,
                store.as_ref(),
            )
            .await?;
            println!("{}", mint(&keys, &token)?);
            Ok(true)
        }
        Command::Revoke { jti } => {
            store.revoke(&jti, &crate::clock::timestamp()?).await?;
            eprintln!("revoked {jti}");
            Ok(true)
        }
        Command::Ledger {
            command: LedgerCommand::Verify { dataset },
        } => verify(store.as_ref(), dataset).await,
        Command::Openapi => Ok(true),
    }
}

/// The OpenAPI document as YAML (what `openapi.yaml` holds).
pub fn openapi_yaml() -> anyhow::Result<String> {
    Ok(crate::api::openapi().to_yaml()?)
}

fn mint(keys: &crate::auth::Keys, token: &Token) -> anyhow::Result<String> {
    if token.role == Role::Admin && !token.datasets.is_empty() {
        anyhow::bail!("--datasets is for analyst tokens; admins see every dataset");
    }
    keys.mint(token.role, &token.sub, &token.datasets, token.ttl)
}

async fn serve_command(
    database: &Database,
    store: Arc<dyn Store>,
    serve: Serve,
) -> anyhow::Result<()> {
    let keys = app::keys(
        &database.key_source(),
        &database.database_url,
        store.as_ref(),
    )
    .await?;
    if !serve.no_admin_token {
        let token = keys.mint(Role::Admin, "admin", &[], Duration::from_secs(24 * 3600))?;
        eprintln!(
            "admin token (valid 24h; mint more with `dpgate token --role admin --sub NAME`):"
        );
        eprintln!("{token}");
    }
    let limits = Limits {
        body_bytes: serve.max_body_bytes,
        release_bytes: serve.max_release_bytes,
        ingest_bytes: serve.max_ingest_bytes,
        max_groups: serve.max_groups,
        request_timeout: serve.request_timeout,
        cache_bytes: serve.cache_bytes,
    };
    let listener = tokio::net::TcpListener::bind(serve.addr)
        .await
        .with_context(|| format!("binding {}", serve.addr))?;
    let metrics = match serve.metrics_addr {
        Some(addr) => {
            let metrics = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the metrics address {addr}"))?;
            tracing::info!(addr = %metrics.local_addr()?, "metrics listening");
            Some(metrics)
        }
        None => None,
    };
    tracing::info!(
        addr = %listener.local_addr()?,
        database = %redact_url(&database.database_url),
        "dpgate listening"
    );
    app::serve(listener, metrics, AppState::new(store, keys, limits)).await
}

/// Walks every (or one) dataset's ledger; prints a line per dataset.
async fn verify(store: &dyn Store, only: Option<Uuid>) -> anyhow::Result<bool> {
    let datasets = store.datasets().await?;
    let datasets: Vec<_> = datasets
        .into_iter()
        .filter(|dataset| only.is_none_or(|id| id == dataset.id))
        .collect();
    if let (Some(id), true) = (only, datasets.is_empty()) {
        anyhow::bail!("no dataset {id}");
    }
    let mut intact = true;
    let mut out = std::io::stdout().lock();
    for dataset in datasets {
        let mut entries = Vec::new();
        let mut after = None;
        loop {
            let page = store.ledger(dataset.id, after, VERIFY_PAGE).await?;
            after = page.last().map(|entry| entry.seq);
            let done = page.len() < VERIFY_PAGE as usize;
            entries.extend(page);
            if done {
                break;
            }
        }
        let verdict = match ledger::verify(&dataset.id, &entries) {
            Err(error) => Err(error.to_string()),
            Ok(recomputed) if recomputed != dataset.composition => Err(
                "the chain is intact but the dataset's running composition disagrees with it"
                    .to_owned(),
            ),
            Ok(_) => Ok(()),
        };
        match verdict {
            Ok(()) => writeln!(out, "ok      {} ({} entries)", dataset.id, entries.len())?,
            Err(reason) => {
                intact = false;
                writeln!(out, "BROKEN  {}: {reason}", dataset.id)?;
            }
        }
    }
    Ok(intact)
}
