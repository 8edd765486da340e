//! The `dpgate-client` command line: datasets, releases, label-blind
//! training, evaluation and the ledger. Text for people by default; `--json`
//! prints one JSON document for scripts and hides the progress bars.

mod lasso;
mod release;
mod train;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use dpgate_api_types::Release;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use uuid::Uuid;

use crate::model_file::ModelFile;
use crate::walr_training::shown;
use crate::{Client, Timeouts};

pub use crate::walr_training::FeaturesFormat;
pub use lasso::LassoArgs;
pub use release::{MapArg, ReleaseKind};
pub use train::TrainArgs;

/// Talks to a dpgate server.
#[derive(Debug, Parser)]
#[command(name = "dpgate-client", version, about)]
pub struct Cli {
    /// The server's base URL.
    #[arg(
        long,
        env = "DPGATE_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// A bearer token (an admin mints one with `dpgate token`).
    #[arg(long, env = "DPGATE_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Print one JSON document for scripts, and no progress bars.
    #[arg(long, global = true)]
    pub json: bool,
    /// How long to wait for a connection to a server (10s, 1m …).
    #[arg(long, env = "DPGATE_CONNECT_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration, global = true)]
    pub connect_timeout: std::time::Duration,
    /// How long to wait for each try of a request (a hung server must not
    /// hang the client); above the server's own request timeout.
    #[arg(long, env = "DPGATE_TIMEOUT", default_value = "330s", value_parser = humantime::parse_duration, global = true)]
    pub timeout: std::time::Duration,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The datasets you may see, with their budgets.
    Datasets,
    /// Make a release (or price it with --dry-run).
    Release {
        #[command(subcommand)]
        kind: ReleaseKind,
    },
    /// Train logistic regression label-blind from a WALR release.
    Train(TrainArgs),
    /// Train L1-regularised logistic regression by distributed ISTA over
    /// datasets on one server or several, each spending (ε, δ) once on a
    /// pre-paid session of gradient calls.
    TrainLasso(LassoArgs),
    /// Score a model file on labelled CSV data.
    Evaluate {
        /// A model file from `train` or `release model --out`.
        #[arg(long)]
        model: PathBuf,
        /// CSV with the model's feature columns and the label column.
        #[arg(long)]
        data: PathBuf,
        /// The label column (default: the one the model was trained for).
        #[arg(long)]
        label: Option<String>,
    },
    /// Score rows with a model file (through its feature map, if it has
    /// one): CSV with `row_id` (when the data has it), `probability` and
    /// `predicted`.
    Predict {
        /// A model file from `train` or `release model --out`.
        #[arg(long)]
        model: PathBuf,
        /// CSV with the model's feature columns (by name, any order).
        #[arg(long)]
        data: PathBuf,
        /// Where to write the scores (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// A dataset's ledger (admins).
    Ledger {
        #[arg(long)]
        dataset: Uuid,
    },
}

/// Runs a parsed command line, writing its answer to `out`.
///
/// # Errors
/// Whatever failed, with context; a server's problem document is kept as
/// the source ([`crate::ClientError::Problem`]).
pub async fn run(cli: Cli, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let timeouts = Timeouts {
        connect: cli.connect_timeout,
        request: cli.timeout,
    };
    let client = Client::with_timeouts(&cli.url, cli.token.clone(), timeouts);
    match cli.command {
        Command::Datasets => {
            let datasets = client.datasets().await?;
            if cli.json {
                return print_json(out, &datasets);
            }
            for dataset in datasets {
                writeln!(
                    out,
                    "{}  {:<20} {:>10} rows  unit {:<5}  spent ε {:.4} of {} (δ {:e})",
                    dataset.id,
                    dataset.name,
                    // Private under unit `user` (an analyst is not told).
                    dataset
                        .n_rows
                        .map_or_else(|| "private".to_owned(), |n| n.to_string()),
                    serde_json::to_value(dataset.privacy_unit)?
                        .as_str()
                        .unwrap_or_default(),
                    dataset.spent.epsilon,
                    dataset.budget.epsilon,
                    dataset.budget.delta,
                )?;
            }
            Ok(())
        }
        Command::Release { kind } => release::release(&client, kind, cli.json, out).await,
        Command::Train(args) => train::train(&client, &args, cli.json, out).await,
        Command::TrainLasso(args) => {
            let home = Client::with_timeouts(&cli.url, cli.token.clone(), timeouts);
            lasso::train_lasso(&home, timeouts, &args, cli.json, out).await
        }
        Command::Evaluate { model, data, label } => {
            let model = ModelFile::load(&model)?;
            let label = label.unwrap_or_else(|| model.label.clone());
            let file = std::fs::File::open(&data).with_context(|| data.display().to_string())?;
            let evaluation =
                crate::evaluate::evaluate(&model, std::io::BufReader::new(file), &label)?;
            if cli.json {
                return print_json(out, &evaluation);
            }
            let auc = evaluation
                .auc
                .map_or("n/a".to_owned(), |auc| format!("{auc:.4}"));
            writeln!(
                out,
                "{} rows ({:.1}% positive): AUC {auc}, log loss {:.4}, accuracy {:.4}, \
                 expected calibration error {:.4}",
                evaluation.rows,
                100.0 * evaluation.positive_rate,
                evaluation.log_loss,
                evaluation.accuracy,
                evaluation.expected_calibration_error,
            )?;
            writeln!(out, "calibration:  predicted  observed  rows")?;
            for bin in &evaluation.calibration {
                writeln!(
                    out,
                    "  [{:.1}, {:.1})   {:.4}    {:.4}  {}",
                    bin.lower, bin.upper, bin.mean_predicted, bin.observed_rate, bin.count
                )?;
            }
            Ok(())
        }
        Command::Predict {
            model,
            data,
            out: to,
        } => predict(&model, &data, to.as_deref(), cli.json, out),
        Command::Ledger { dataset } => {
            let entries = client.ledger(dataset).await?;
            if cli.json {
                return print_json(out, &entries);
            }
            for entry in entries {
                writeln!(
                    out,
                    "{:>6}  {:<8} {:<16} ε {:<10} δ {:<10e} {}  {}",
                    entry.seq,
                    serde_json::to_value(entry.event)?
                        .as_str()
                        .unwrap_or_default(),
                    entry.actor,
                    entry.epsilon,
                    entry.delta,
                    entry
                        .release_id
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                    entry.created_at,
                )?;
            }
            Ok(())
        }
    }
}

/// `predict`: scores into `to`, or onto `out` when no file is named.
fn predict(
    model: &Path,
    data: &Path,
    to: Option<&Path>,
    json: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let model = ModelFile::load(model)?;
    let file = std::fs::File::open(data).with_context(|| data.display().to_string())?;
    let data = std::io::BufReader::new(file);
    let Some(path) = to else {
        crate::predict::predict(&model, data, out)?;
        return Ok(());
    };
    let file = std::fs::File::create(path).with_context(|| path.display().to_string())?;
    let rows = crate::predict::predict(&model, data, std::io::BufWriter::new(file))?;
    if json {
        return print_json(out, &serde_json::json!({ "rows": rows, "out": path }));
    }
    writeln!(out, "scored {rows} rows into {}", path.display())?;
    Ok(())
}

fn print_json(out: &mut (dyn Write + Send), value: &impl Serialize) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// The price lines every release prints.
fn describe(out: &mut (dyn Write + Send), release: &Release) -> anyhow::Result<()> {
    let verb = if release.dry_run {
        "would spend"
    } else {
        "spent"
    };
    writeln!(
        out,
        "{} release {} ({}): {verb} ε = {}, δ = {:e}; noise {} with σ = {:.6e} per number, \
         sensitivity {:.6e}, N = {}",
        release.kind,
        shown(release),
        release.analyst,
        release.epsilon,
        release.delta,
        release.noise.mechanism,
        release.sigma,
        release.sensitivity,
        release.n.map_or("private".to_owned(), |n| n.to_string()),
    )?;
    writeln!(
        out,
        "dataset spent ε = {:.6} (basic {:.6}); remaining ε = {:.6}, δ = {:e}",
        release.spent.epsilon,
        release.spent.epsilon_basic,
        release.remaining.epsilon,
        release.remaining.delta,
    )?;
    Ok(())
}

fn spinner(hidden: bool, message: &'static str) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(message);
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A bar over `len` steps, or bytes when `len` is `None`.
fn progress(hidden: bool, len: Option<u64>, template: &str) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = len.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}
