//! The command line. Every setting also reads its environment variable
//! (DESIGN §8); a flag overrides the variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand};
use uuid::Uuid;

use crate::api::Limits;
use crate::app::KeySource;
use crate::domain::auth::Role;

/// dpgate: labelled data in, only differentially private releases out.
#[derive(Debug, Parser)]
#[command(name = "dpgate", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub database: Database,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the data and the signing key live.
#[derive(Args)]
pub struct Database {
    /// `sqlite://FILE` (created if missing) or `postgres://…`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://dpgate.db",
        global = true
    )]
    pub database_url: String,
    /// The token signing secret (at least 32 bytes).
    #[arg(long, env = "DPGATE_JWT_SECRET", hide_env_values = true, global = true)]
    pub jwt_secret: Option<String>,
    /// A file holding the signing secret (created if missing).
    #[arg(long, env = "DPGATE_KEY_FILE", global = true)]
    pub key_file: Option<PathBuf>,
    /// Where datasets' Parquet files live: a directory, or an object
    /// store's (`s3://bucket/prefix`, configured by the `AWS_*`
    /// variables). Default: beside the SQLite file, `FILE-data/`; with
    /// Postgres, `dpgate-data/` here. Replicas of one database share it.
    #[arg(long, env = "DPGATE_DATA_DIR", global = true)]
    pub data_dir: Option<String>,
    /// Directories (paths, or object store prefixes `s3://bucket/prefix`)
    /// whose Parquet files may be registered in place (`source.uri`),
    /// comma-separated; none by default, which turns registration off.
    #[arg(long, env = "DPGATE_DATA_ROOTS", value_delimiter = ',', global = true)]
    pub data_roots: Vec<String>,
}

impl Database {
    /// The data directory, set or defaulted.
    pub fn data_dir(&self) -> String {
        self.data_dir
            .clone()
            .unwrap_or_else(|| crate::engine::DataDir::default_for(&self.database_url))
    }

    pub fn key_source(&self) -> KeySource {
        KeySource {
            secret: self.jwt_secret.clone(),
            file: self.key_file.clone(),
        }
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Database")
            .field("database_url", &redact_url(&self.database_url))
            .field(
                "jwt_secret",
                &self.jwt_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("key_file", &self.key_file)
            .field("data_dir", &self.data_dir)
            .field("data_roots", &self.data_roots)
            .finish()
    }
}

/// A database URL with any password replaced.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:<redacted>{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service (migrating first).
    Serve(Serve),
    /// Apply the database migrations and exit.
    Migrate,
    /// Mint a token; prints only the token on stdout.
    Token(Token),
    /// Revoke a token by its `jti` claim.
    Revoke {
        /// The token's `jti`.
        jti: String,
    },
    /// Audit the budget ledger.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
    /// Print the OpenAPI document (YAML) of the API.
    Openapi,
    /// Measure a lower bound on each release kind's ε through the real
    /// release code, on scratch datasets (never the database); exits
    /// non-zero if any bound exceeds the ε claimed (docs/audit.md).
    Audit(Audit),
    /// Run a Ballista scheduler for `DPGATE_ENGINE=ballista://…` replicas
    /// (builds with `--features ballista`).
    Scheduler(Scheduler),
    /// Run a Ballista executor: it reads the data directory's files and
    /// runs the passes the scheduler hands it (builds with
    /// `--features ballista`).
    Executor(Executor),
}

#[derive(Debug, Args)]
pub struct Scheduler {
    /// Address to listen on (gRPC).
    #[arg(long, default_value = "127.0.0.1:50050")]
    pub bind: SocketAddr,
}

#[derive(Debug, Args)]
pub struct Executor {
    /// The scheduler's HOST:PORT.
    #[arg(long)]
    pub scheduler: String,
    /// Address to listen on for Arrow Flight (results and shuffles); the
    /// next port is its gRPC one.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub bind: SocketAddr,
    /// The host name the scheduler and replicas reach it by, if not the
    /// bound address.
    #[arg(long)]
    pub external_host: Option<String>,
    /// Passes it runs at once (default: its cores).
    #[arg(long)]
    pub cores: Option<usize>,
}

#[derive(Debug, Args)]
pub struct Audit {
    /// A release kind as the API names it (`walr`, `aggregate`,
    /// `model/dp-gd`, …); repeatable; every kind without it.
    #[arg(long = "kind", value_name = "KIND")]
    pub kinds: Vec<String>,
    /// A privacy unit; repeatable; every unit without it.
    #[arg(long = "unit", value_name = "UNIT", value_enum)]
    pub units: Vec<Unit>,
    /// The ε every release is made at.
    #[arg(long, default_value_t = 1.0)]
    pub epsilon: f64,
    /// The δ of the kinds that take one (pure ε kinds are audited at 0).
    #[arg(long, default_value_t = 1e-5)]
    pub delta: f64,
    /// Releases on each of the two neighbouring datasets, per case.
    #[arg(long, default_value_t = 100_000)]
    pub trials: u64,
    /// Seeds the datasets' rows besides the canary (the noise always
    /// comes from the OS).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Of every lower bound: a correct release whose canary reaches its
    /// sensitivity still fails with probability up to 1 − this.
    #[arg(long, default_value_t = crate::audit::DEFAULT_CONFIDENCE)]
    pub confidence: f64,
    /// Print one JSON document, `{"results": [...]}`, instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write a Markdown report to this file.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

impl Audit {
    /// The cases and their parameters.
    pub fn settings(&self) -> crate::audit::Settings {
        crate::audit::Settings {
            kinds: self.kinds.clone(),
            units: self.units.iter().map(|&unit| unit.into()).collect(),
            epsilon: self.epsilon,
            delta: self.delta,
            trials: self.trials,
            seed: self.seed,
            confidence: self.confidence,
        }
    }

    /// Where the findings go.
    pub fn output(&self) -> crate::audit::command::Output {
        crate::audit::command::Output {
            json: self.json,
            report: self.report.clone(),
        }
    }
}

/// A privacy unit, as `--unit` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Unit {
    Label,
    Row,
    User,
}

impl From<Unit> for dpgate_api_types::PrivacyUnit {
    fn from(unit: Unit) -> Self {
        match unit {
            Unit::Label => dpgate_api_types::PrivacyUnit::Label,
            Unit::Row => dpgate_api_types::PrivacyUnit::Row,
            Unit::User => dpgate_api_types::PrivacyUnit::User,
        }
    }
}

#[derive(Debug, Args)]
pub struct Serve {
    /// Address to listen on.
    #[arg(long, env = "DPGATE_ADDR", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Largest JSON body, in bytes.
    #[arg(long, env = "DPGATE_MAX_BODY_BYTES", default_value_t = Limits::default().body_bytes)]
    pub max_body_bytes: usize,
    /// Largest release request, in bytes (a `walr` release may carry the
    /// analyst's own feature vectors).
    #[arg(long, env = "DPGATE_MAX_RELEASE_BYTES", default_value_t = Limits::default().release_bytes)]
    pub max_release_bytes: usize,
    /// Largest row upload, in bytes.
    #[arg(long, env = "DPGATE_MAX_INGEST_BYTES", default_value_t = Limits::default().ingest_bytes)]
    pub max_ingest_bytes: u64,
    /// Most groups (combinations of declared dimension values) one
    /// aggregate release may cover.
    #[arg(long, env = "DPGATE_MAX_GROUPS", default_value_t = Limits::default().max_groups)]
    pub max_groups: usize,
    /// How long a request may take before it is answered 503 `timeout`.
    /// A release already debited carries on, and a retry with its
    /// Idempotency-Key gets it. 90s, 5m …
    #[arg(long, env = "DPGATE_REQUEST_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Most requests handled at once; more wait their turn (within the
    /// request timeout).
    #[arg(long, env = "DPGATE_MAX_CONCURRENT_REQUESTS", default_value_t = Limits::default().max_concurrent)]
    pub max_concurrent_requests: usize,
    /// Most bytes of dataset snapshots (rows as columns) held in memory;
    /// least recently used ones are dropped first, and a dataset larger
    /// than this is streamed from its files on every pass. 0 holds
    /// none.
    #[arg(long, env = "DPGATE_CACHE_BYTES", default_value_t = crate::snapshots::DEFAULT_CACHE_BYTES)]
    pub cache_bytes: u64,
    /// How long the engine may take over one pass over a dataset's files
    /// before the release fails (after its debit, so it is recorded as
    /// failed and a retry with its Idempotency-Key gets that failure).
    #[arg(long, env = "DPGATE_ENGINE_TIMEOUT", default_value = "1h", value_parser = humantime::parse_duration)]
    pub engine_timeout: Duration,
    /// What runs passes over datasets' files: `embedded` (this process,
    /// on its cores) or `ballista://HOST:PORT`, a Ballista scheduler
    /// (`dpgate scheduler`) whose executors (`dpgate executor`) share this
    /// data directory; builds with `--features ballista`.
    #[arg(long, env = "DPGATE_ENGINE", default_value = "embedded")]
    pub engine: String,
    /// Serve Prometheus metrics at `/metrics` on this address, a listener
    /// of its own (off unless set). Per-route latencies are a side channel:
    /// keep this address off the network analysts reach.
    #[arg(long, env = "DPGATE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Do not mint and print an admin token at start (the variable accepts
    /// 1/0, true/false, yes/no, on/off).
    #[arg(long, env = "DPGATE_NO_ADMIN_TOKEN", action = ArgAction::SetTrue, value_parser = BoolishValueParser::new())]
    pub no_admin_token: bool,
}

#[derive(Debug, Args)]
pub struct Token {
    #[arg(long, value_enum)]
    pub role: Role,
    /// The token's subject (who it is for).
    #[arg(long)]
    pub sub: String,
    /// The dataset ids an analyst may use, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub datasets: Vec<Uuid>,
    /// How long the token is valid: 90s, 30m, 24h, 7d …
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Check every ledger's hash chain and recompute its spending, or an
    /// audit export offline (--file, no database); exits non-zero on any
    /// break.
    Verify {
        /// Only this dataset.
        #[arg(long, conflicts_with = "file")]
        dataset: Option<Uuid>,
        /// An NDJSON export (`dpgate ledger export`, or the API's
        /// `ledger?format=ndjson`) to check instead of the database.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Write a dataset's whole ledger as an audit export.
    Export {
        #[arg(long)]
        dataset: Uuid,
        #[arg(long, value_enum, default_value_t = ExportFormat::Ndjson)]
        format: ExportFormat,
        /// Where to write it (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    Ndjson,
    Csv,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_parses_the_contract_names() {
        let cli = Cli::parse_from([
            "dpgate",
            "token",
            "--role",
            "analyst",
            "--sub",
            "ana",
            "--datasets",
            "8a2c4e0a-7b6f-4a1e-9d43-0c3e7c1f2b11,7d4f2b8e-2c1a-4f5e-8b3d-9a6c5e4f3d21",
            "--ttl",
            "2h",
        ]);
        let Command::Token(token) = cli.command else {
            panic!("a token command");
        };
        assert_eq!(token.role, Role::Analyst);
        assert_eq!(token.datasets.len(), 2);
        assert_eq!(token.ttl, Duration::from_secs(7200));
        assert!(Cli::try_parse_from(["dpgate", "token", "--role", "root", "--sub", "x"]).is_err());
        let cli = Cli::parse_from(["dpgate", "ledger", "verify"]);
        assert!(matches!(
            cli.command,
            Command::Ledger {
                command: LedgerCommand::Verify {
                    dataset: None,
                    file: None
                }
            }
        ));
    }

    #[test]
    #[expect(
        unsafe_code,
        reason = "clap reads the switch from the process environment, which only this test \
                  writes"
    )]
    fn switches_from_the_environment_accept_one_and_zero() {
        let parse = |value: &str| {
            // SAFETY: this test alone reads or writes this variable.
            unsafe { std::env::set_var("DPGATE_NO_ADMIN_TOKEN", value) };
            let cli = Cli::try_parse_from(["dpgate", "serve"]);
            unsafe { std::env::remove_var("DPGATE_NO_ADMIN_TOKEN") };
            match cli.map(|cli| cli.command) {
                Ok(Command::Serve(serve)) => Ok(serve.no_admin_token),
                Ok(other) => panic!("{other:?}"),
                Err(error) => Err(error.to_string()),
            }
        };
        assert_eq!(parse("1"), Ok(true));
        assert_eq!(parse("0"), Ok(false));
        assert_eq!(parse("true"), Ok(true));
        assert_eq!(parse("off"), Ok(false));
        assert!(parse("maybe").is_err());
        let cli = Cli::parse_from(["dpgate", "serve", "--request-timeout", "90s"]);
        let Command::Serve(serve) = cli.command else {
            panic!("serve");
        };
        assert_eq!(serve.request_timeout, Duration::from_secs(90));
        assert_eq!(serve.metrics_addr, None);
    }

    #[test]
    fn secrets_never_reach_debug_output() {
        let database = Database {
            database_url: "postgres://dp:hunter2@db:5432/dpgate".to_owned(),
            jwt_secret: Some("a-very-secret-signing-key-of-32-bytes".to_owned()),
            key_file: None,
            data_dir: None,
            data_roots: Vec::new(),
        };
        let shown = format!("{database:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("very-secret"),
            "{shown}"
        );
        assert!(shown.contains("postgres://dp:<redacted>@db:5432/dpgate"));
    }
}
