//! What each CLI command does.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use uuid::Uuid;

use crate::api::{AppState, Limits};
use crate::app;
use crate::config::{Command, Database, ExportFormat, LedgerCommand, Serve, Token, redact_url};
use crate::domain::auth::Role;
use crate::domain::ledger::export::{self, Format};
use crate::domain::ledger::{ChainBreak, Follow};
use crate::engine::{self, DataDir};
use crate::ledger;
use crate::store::{self, Store};

/// Runs a command; the exit code is non-zero if it failed (or, for
/// `ledger verify`, if a ledger is broken).
pub async fn run(database: Database, command: Command) -> anyhow::Result<bool> {
    let command = match command {
        Command::Scheduler(scheduler) => {
            return cluster::scheduler(&database, scheduler)
                .await
                .map(|()| true);
        }
        Command::Executor(executor) => {
            return cluster::executor(&database, executor).await.map(|()| true);
        }
        command => command,
    };
    match &command {
        Command::Openapi => {
            print!("{}", openapi_yaml()?);
            return Ok(true);
        }
        Command::Audit(audit) => {
            return crate::audit::command::run(audit.settings(), &audit.output()).await;
        }
        Command::Ledger {
            command: LedgerCommand::Verify {
                file: Some(file), ..
            },
        } => return verify_export(file),
        _ => {}
    }
    let store = store::connect(&database.database_url)
        .await
        .with_context(|| format!("opening {}", redact_url(&database.database_url)))?;
    match command {
        Command::Serve(serve) => serve_command(&database, store, serve).await.map(|()| true),
        Command::Migrate => {
            open_data(&database, store.as_ref()).await?;
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
            store
                .revoke(&jti, &crate::domain::clock::timestamp()?)
                .await?;
            eprintln!("revoked {jti}");
            Ok(true)
        }
        Command::Ledger {
            command: LedgerCommand::Verify { dataset, .. },
        } => verify(store.as_ref(), dataset).await,
        Command::Ledger {
            command:
                LedgerCommand::Export {
                    dataset,
                    format,
                    out,
                },
        } => export(store.as_ref(), dataset, format, out.as_deref())
            .await
            .map(|()| true),
        Command::Openapi | Command::Audit(_) | Command::Scheduler(_) | Command::Executor(_) => {
            Ok(true)
        }
    }
}

/// The OpenAPI document as YAML (what `openapi.yaml` holds).
pub fn openapi_yaml() -> anyhow::Result<String> {
    Ok(crate::api::openapi().to_yaml()?)
}

fn mint(keys: &crate::domain::auth::Keys, token: &Token) -> anyhow::Result<String> {
    if token.role == Role::Admin && !token.datasets.is_empty() {
        anyhow::bail!("--datasets is for analyst tokens; admins see every dataset");
    }
    keys.mint(token.role, &token.sub, &token.datasets, token.ttl)
}

/// The data directory, created if missing, with any uploads the database
/// still holds as blocks written out into it, and files no manifest
/// records (a day old or more) removed from it.
async fn open_data(database: &Database, store: &dyn Store) -> anyhow::Result<Arc<DataDir>> {
    let location = database.data_dir();
    let roots = database
        .data_roots
        .iter()
        .map(|root| engine::Root::parse(root))
        .collect::<Result<Vec<_>, _>>()
        .context("DPGATE_DATA_ROOTS")?;
    let data = DataDir::at(&location).context("DPGATE_DATA_DIR")?;
    if let Some(root) = data.root() {
        std::fs::create_dir_all(root)
            .with_context(|| format!("creating the data directory {}", root.display()))?;
    }
    let data = Arc::new(data.with_roots(roots));
    engine::blocks_to_files(store, &data)
        .await
        .context("writing stored blocks out as files")?;
    engine::sweep(store, &data, engine::GRACE)
        .await
        .context("removing files no manifest records")?;
    Ok(data)
}

async fn serve_command(
    database: &Database,
    store: Arc<dyn Store>,
    serve: Serve,
) -> anyhow::Result<()> {
    let data = open_data(database, store.as_ref()).await?;
    let engine = cluster::engine(&serve.engine, &data)?;
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
        engine_timeout: serve.engine_timeout,
        max_concurrent: serve.max_concurrent_requests,
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
        data = %data.location(),
        "dpgate listening"
    );
    let state = AppState::with_engine(store, data, keys, limits, engine);
    app::serve(listener, metrics, state).await
}

/// The engine `DPGATE_ENGINE` names, and the Ballista commands: with
/// `--features ballista`, or an error saying so.
mod cluster {
    use std::sync::Arc;

    use crate::config::{Database, Executor, Scheduler};
    use crate::engine::{DataDir, Engine};

    #[cfg(not(feature = "ballista"))]
    const WITHOUT: &str =
        "this dpgate was built without Ballista (cargo build --features ballista)";

    pub fn engine(setting: &str, data: &Arc<DataDir>) -> anyhow::Result<Engine> {
        if setting == "embedded" {
            return Ok(Engine::default());
        }
        if !setting.starts_with("ballista://") {
            anyhow::bail!("DPGATE_ENGINE {setting:?}: `embedded` or `ballista://HOST:PORT`");
        }
        #[cfg(feature = "ballista")]
        return crate::engine::Cluster::new(setting, codec(data.clone()))
            .map(Engine::ballista)
            .map_err(|error| anyhow::anyhow!("DPGATE_ENGINE: {error}"));
        #[cfg(not(feature = "ballista"))]
        {
            let _ = data;
            anyhow::bail!("DPGATE_ENGINE {setting:?}: {WITHOUT}")
        }
    }

    #[cfg(feature = "ballista")]
    fn codec(data: Arc<DataDir>) -> Arc<crate::engine::Codec> {
        crate::engine::Codec::new(data, crate::releases::kinds::passes())
    }

    /// The data directory a scheduler or executor reads plans' files
    /// from: the replicas'.
    #[cfg(feature = "ballista")]
    fn data(database: &Database) -> anyhow::Result<Arc<DataDir>> {
        use anyhow::Context;
        Ok(Arc::new(
            DataDir::at(&database.data_dir()).context("DPGATE_DATA_DIR")?,
        ))
    }

    pub async fn scheduler(database: &Database, scheduler: Scheduler) -> anyhow::Result<()> {
        #[cfg(feature = "ballista")]
        {
            tracing::info!(bind = %scheduler.bind, "Ballista scheduler listening");
            crate::engine::scheduler(scheduler.bind, codec(data(database)?)).await
        }
        #[cfg(not(feature = "ballista"))]
        {
            let _ = (database, scheduler);
            anyhow::bail!(WITHOUT)
        }
    }

    pub async fn executor(database: &Database, executor: Executor) -> anyhow::Result<()> {
        #[cfg(feature = "ballista")]
        {
            let data = data(database)?;
            tracing::info!(
                bind = %executor.bind,
                scheduler = %executor.scheduler,
                data = %data.location(),
                "Ballista executor starting"
            );
            crate::engine::executor(
                &executor.scheduler,
                executor.bind,
                executor.external_host,
                executor.cores,
                codec(data),
            )
            .await
        }
        #[cfg(not(feature = "ballista"))]
        {
            let _ = (database, executor);
            anyhow::bail!(WITHOUT)
        }
    }
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
        let verdict = ledger::verify(store, &dataset).await?;
        intact &= report(
            &mut out,
            dataset.id,
            verdict.entries,
            verdict.broken.as_ref(),
        )?;
    }
    Ok(intact)
}

/// One line of a verification: `ok` or `BROKEN` with the reason.
fn report(
    out: &mut impl Write,
    dataset: Uuid,
    entries: u64,
    broken: Option<&ChainBreak>,
) -> anyhow::Result<bool> {
    match broken {
        None => writeln!(out, "ok      {dataset} ({entries} entries)")?,
        Some(broken) => writeln!(out, "BROKEN  {dataset}: {broken}")?,
    }
    Ok(broken.is_none())
}

/// Checks an NDJSON audit export offline.
fn verify_export(file: &Path) -> anyhow::Result<bool> {
    let reader = std::fs::File::open(file)
        .with_context(|| format!("opening the export {}", file.display()))?;
    let audit = export::audit(std::io::BufReader::new(reader))
        .with_context(|| format!("reading the export {}", file.display()))?;
    report(
        &mut std::io::stdout().lock(),
        audit.dataset,
        audit.entries,
        audit.broken.as_ref(),
    )
}

/// Writes `dataset`'s whole ledger in `format` to `out` (or stdout).
async fn export(
    store: &dyn Store,
    dataset: Uuid,
    format: ExportFormat,
    out: Option<&Path>,
) -> anyhow::Result<()> {
    store
        .dataset(dataset)
        .await?
        .with_context(|| format!("no dataset {dataset}"))?;
    let format = match format {
        ExportFormat::Ndjson => Format::Ndjson,
        ExportFormat::Csv => Format::Csv,
    };
    let mut writer: Box<dyn Write> = match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    writer.write_all(format.header().as_bytes())?;
    let mut follow = Follow::default();
    let mut failed = None;
    ledger::walk(store, dataset, None, |entry| {
        let written = export::line(format, entry, dataset, follow.take(entry))
            .and_then(|line| Ok(writer.write_all(line.as_bytes())?));
        failed = written.err();
        failed.is_none()
    })
    .await?;
    if let Some(error) = failed {
        return Err(error);
    }
    writer.flush()?;
    Ok(())
}
