//! The `dpgate-client` command line: datasets, releases, label-blind
//! training, evaluation and the ledger. Text for people by default; `--json`
//! prints one JSON document for scripts and hides the progress bars.

mod lasso;
mod train;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use dpgate_api_types::{
    AggregateMechanism, AggregateParams, DebiasParams, DpGdParams, DpSgdParams, FrankWolfeParams,
    Iterate, Lambda, ObjectivePerturbationParams, OutputPerturbationParams, ProjectionParams,
    Release, ReleaseParams, ReleaseRequest, ReleaseResult, Seed, Selection, SuppliedRow, WalrMap,
    WalrParams, WarmStart,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use uuid::Uuid;

use crate::features::{FeatureTable, Scaling};
use crate::model_file::ModelFile;
use crate::{Client, ReleaseOptions, Timeouts};

pub use lasso::LassoArgs;
pub use train::{FeaturesFormat, TrainArgs};

/// A release's id for people, or why it has none.
fn shown(release: &Release) -> String {
    release
        .id
        .map_or_else(|| "(not recorded)".to_owned(), |id| id.to_string())
}

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
    /// A dataset's ledger (admins).
    Ledger {
        #[arg(long)]
        dataset: Uuid,
    },
}

/// What every release asks. Its price is ε, or for the kinds that take one
/// a target noise (which joins the group `price`), never both.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("price").required(true)))]
pub struct Spend {
    #[arg(long)]
    pub dataset: Uuid,
    /// The release's ε (required unless the kind's target noise is given).
    #[arg(long, group = "price")]
    pub epsilon: Option<f64>,
    /// Omit for pure ε where the kind allows it.
    #[arg(long)]
    pub delta: Option<f64>,
    /// Price the release without spending anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Reuse a key to get the same release back (default: a fresh key, so
    /// that network retries never spend twice).
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

impl Spend {
    fn options(&self) -> ReleaseOptions {
        ReleaseOptions {
            idempotency_key: self.idempotency_key.clone(),
            dry_run: self.dry_run,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Learner {
    /// Output perturbation (norm-Gamma, or Gaussian with --delta).
    Output,
    /// Objective perturbation (pure ε).
    Objective,
}

/// The public feature maps φ of a WALR release (docs/walr-map.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MapArg {
    /// (x, 1): the WALR design's release.
    None,
    /// Centred on the features' public mean (the middle of their bounds
    /// under unit `row`).
    Centre,
    /// Centred, scaled and shrunk to a public radius, with the intercept's
    /// coordinate weighted.
    Auto,
}

impl From<MapArg> for WalrMap {
    fn from(map: MapArg) -> Self {
        match map {
            MapArg::None => WalrMap::None,
            MapArg::Centre => WalrMap::Centre,
            MapArg::Auto => WalrMap::Auto,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Mechanism {
    Gaussian,
    Laplace,
}

#[derive(Debug, Subcommand)]
pub enum ReleaseKind {
    /// The WALR noisy dot product.
    Walr {
        #[command(flatten)]
        spend: Spend,
        /// Leave out the intercept's label term.
        #[arg(long)]
        no_intercept: bool,
        /// Your own features (CSV: row_id, then numeric columns), scaled
        /// into [0, 1] by each column's range and sent with the release.
        #[arg(long)]
        features: Option<PathBuf>,
        /// The public feature map φ the labels are summed against.
        #[arg(long, value_enum, default_value = "none")]
        map: MapArg,
        /// Instead of --epsilon: the largest noise std to accept on each
        /// released number; the server spends the least ε that meets it.
        #[arg(long, group = "price")]
        target_sigma: Option<f64>,
    },
    /// Counts, sums and means, optionally grouped.
    Aggregate {
        #[command(flatten)]
        spend: Spend,
        /// Instead of --epsilon: the largest noise std to accept on each
        /// value; the server spends the least ε that meets it.
        #[arg(long, group = "price")]
        target_std: Option<f64>,
        /// E.g. count,sum:value,mean:converted.
        #[arg(long, value_delimiter = ',', required = true)]
        statistics: Vec<String>,
        /// Declared dimensions, comma-separated.
        #[arg(long, value_delimiter = ',')]
        group_by: Vec<String>,
        #[arg(long, value_enum, default_value = "gaussian")]
        mechanism: Mechanism,
    },
    /// A private logistic-regression model fitted on the server.
    Model {
        #[command(flatten)]
        spend: Spend,
        #[arg(long, value_enum, default_value = "output")]
        learner: Learner,
        /// The L2 regularisation strength λ: `auto` (chosen by the server
        /// from N, d, ε and δ), a number, or `select:λ₁,λ₂,…` (the best of
        /// the candidates, privately selected, for the same ε).
        #[arg(long, default_value = "auto")]
        lambda: Lambda,
        #[arg(long)]
        no_intercept: bool,
        /// Also save the model as a model file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Logistic regression by DP gradient descent on the server: clipped
    /// per-row gradients, Gaussian noise at every step.
    DpGd {
        #[command(flatten)]
        spend: Spend,
        /// T, the number of steps.
        #[arg(long, default_value_t = 100)]
        steps: u32,
        /// α, in the space of the features scaled into [0, 1].
        #[arg(long, default_value_t = 1.0)]
        learning_rate: f64,
        /// C, the L2 bound on each row's gradient.
        #[arg(long, default_value_t = 1.0)]
        clip: f64,
        /// λ of a ridge term (λ/2)‖θ‖².
        #[arg(long, default_value_t = 0.0)]
        lambda: f64,
        #[arg(long)]
        no_intercept: bool,
        /// Start from this model file (trained on public data, with the
        /// dataset's feature names) instead of from zero.
        #[arg(long)]
        theta0: Option<PathBuf>,
        /// Project every iterate onto ‖θ‖₂ ≤ R.
        #[arg(long)]
        radius: Option<f64>,
        /// Release the last iterate or the mean of all.
        #[arg(long, value_enum, default_value = "last")]
        output: Output,
        /// Also save the model as a model file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Logistic regression by DP-SGD on the server: disjoint batches, each
    /// batch's clipped gradient sum released with norm-Gamma noise; pure ε.
    DpSgd {
        #[command(flatten)]
        spend: Spend,
        /// b, rows per batch.
        #[arg(long, default_value_t = 256)]
        batch_size: u64,
        /// E, passes over the data (each costs ε/E).
        #[arg(long, default_value_t = 1)]
        epochs: u32,
        /// η₀ of the step size η₀/√t, in the space of the features scaled
        /// into [0, 1].
        #[arg(long, default_value_t = 1.0)]
        learning_rate: f64,
        /// C, the L2 bound on each row's gradient.
        #[arg(long, default_value_t = 1.0)]
        clip: f64,
        /// λ of a ridge term (λ/2)‖θ‖².
        #[arg(long, default_value_t = 1e-4)]
        lambda: f64,
        #[arg(long)]
        no_intercept: bool,
        /// Train on this many public random projections of the features.
        #[arg(long)]
        projection_dims: Option<usize>,
        /// The projection's seed (the server picks one without it).
        #[arg(long, requires = "projection_dims")]
        projection_seed: Option<u64>,
        /// Also save the model as a model file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Linear regression by DP Frank-Wolfe on an L1 ball, over the dataset
    /// and any source datasets (each of which is debited the same).
    FrankWolfe {
        #[command(flatten)]
        spend: Spend,
        /// `label` or `measure:NAME`.
        #[arg(long)]
        target: String,
        /// r, the L1 radius, in model units (features and target in [−1, 1]).
        #[arg(long)]
        radius: f64,
        /// T, the number of steps.
        #[arg(long, default_value_t = 50)]
        steps: u32,
        #[arg(long, value_enum, default_value = "laplace")]
        selection: SelectionArg,
        /// A source dataset whose rows join the fit (repeatable).
        #[arg(long = "source")]
        sources: Vec<Uuid>,
        #[arg(long)]
        no_intercept: bool,
        /// h: add a target-only debias stage of this L1 radius.
        #[arg(long)]
        debias_radius: Option<f64>,
        #[arg(long, default_value_t = 20, requires = "debias_radius")]
        debias_steps: u32,
        /// The share of ε (and δ) the debias stage spends.
        #[arg(long, default_value_t = 0.5, requires = "debias_radius")]
        debias_share: f64,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SelectionArg {
    Laplace,
    Exponential,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    Last,
    Average,
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
                    dataset.n_rows,
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
        Command::Release { kind } => release(&client, kind, cli.json, out).await,
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

fn print_json(out: &mut (dyn Write + Send), value: &impl Serialize) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// The analyst's own feature file, scaled into [0, 1] by its observed
/// ranges (the table's `x` holds the scaled rows), as supplied rows, with
/// its scaling.
fn supplied(path: &PathBuf) -> anyhow::Result<(FeatureTable, Scaling, Vec<SuppliedRow>)> {
    let file = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    let mut table = FeatureTable::from_csv(std::io::BufReader::new(file))
        .with_context(|| path.display().to_string())?;
    let scaling = Scaling::observed(&table);
    table.x = scaling.scale(table.x);
    let rows = table
        .row_ids
        .iter()
        .zip(table.x.rows())
        .map(|(id, x)| SuppliedRow {
            row_id: id.clone(),
            x: x.to_vec(),
        })
        .collect();
    Ok((table, scaling, rows))
}

async fn release(
    client: &Client,
    kind: ReleaseKind,
    json: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let (spend, request, model_out) = match kind {
        ReleaseKind::Walr {
            spend,
            no_intercept,
            features,
            map,
            target_sigma,
        } => {
            let features = match &features {
                Some(path) => Some(supplied(path)?.2),
                None => None,
            };
            let request = ReleaseRequest {
                epsilon: spend.epsilon,
                delta: spend.delta,
                params: ReleaseParams::Walr(WalrParams {
                    intercept: !no_intercept,
                    features,
                    map: map.into(),
                    target_sigma,
                }),
            };
            (spend, request, None)
        }
        ReleaseKind::Aggregate {
            spend,
            target_std,
            statistics,
            group_by,
            mechanism,
        } => {
            let request = ReleaseRequest {
                epsilon: spend.epsilon,
                delta: spend.delta,
                params: ReleaseParams::Aggregate(AggregateParams {
                    statistics,
                    group_by,
                    mechanism: match mechanism {
                        Mechanism::Gaussian => AggregateMechanism::Gaussian,
                        Mechanism::Laplace => AggregateMechanism::Laplace,
                    },
                    target_std,
                }),
            };
            (spend, request, None)
        }
        ReleaseKind::Model {
            spend,
            learner,
            lambda,
            no_intercept,
            out,
        } => {
            let fit_intercept = !no_intercept;
            let params = match learner {
                Learner::Output => ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    lambda,
                    fit_intercept,
                }),
                Learner::Objective => {
                    ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                        lambda,
                        fit_intercept,
                    })
                }
            };
            let request = ReleaseRequest {
                epsilon: spend.epsilon,
                delta: spend.delta,
                params,
            };
            (spend, request, out)
        }
        ReleaseKind::DpGd {
            spend,
            steps,
            learning_rate,
            clip,
            lambda,
            no_intercept,
            theta0,
            radius,
            output,
            out,
        } => {
            let theta0 = match &theta0 {
                Some(path) => Some(warm_start(client, spend.dataset, path).await?),
                None => None,
            };
            let request = ReleaseRequest {
                epsilon: spend.epsilon,
                delta: spend.delta,
                params: ReleaseParams::DpGd(DpGdParams {
                    steps,
                    learning_rate,
                    clip,
                    lambda,
                    fit_intercept: !no_intercept,
                    theta0,
                    radius,
                    output: match output {
                        Output::Last => Iterate::Last,
                        Output::Average => Iterate::Average,
                    },
                }),
            };
            (spend, request, out)
        }
        ReleaseKind::DpSgd {
            spend,
            batch_size,
            epochs,
            learning_rate,
            clip,
            lambda,
            no_intercept,
            projection_dims,
            projection_seed,
            out,
        } => {
            let request = ReleaseRequest {
                epsilon: spend.epsilon,
                delta: spend.delta,
                params: ReleaseParams::DpSgd(DpSgdParams {
                    batch_size,
                    learning_rate,
                    lambda,
                    clip,
                    epochs,
                    fit_intercept: !no_intercept,
                    projection: projection_dims.map(|dims| ProjectionParams {
                        dims,
                        seed: projection_seed.map(Seed),
                    }),
                }),
            };
            (spend, request, out)
        }
        ReleaseKind::FrankWolfe {
            spend,
            target,
            radius,
            steps,
            selection,
            sources,
            no_intercept,
            debias_radius,
            debias_steps,
            debias_share,
        } => {
            let request = ReleaseRequest {
                epsilon: spend.epsilon,
                delta: spend.delta,
                params: ReleaseParams::FrankWolfe(FrankWolfeParams {
                    target,
                    radius,
                    steps,
                    fit_intercept: !no_intercept,
                    selection: match selection {
                        SelectionArg::Laplace => Selection::Laplace,
                        SelectionArg::Exponential => Selection::Exponential,
                    },
                    sources,
                    debias: debias_radius.map(|radius| DebiasParams {
                        radius,
                        steps: debias_steps,
                        epsilon_share: debias_share,
                    }),
                }),
            };
            (spend, request, None)
        }
    };
    let spinner = spinner(json, "releasing");
    let released = client
        .release(spend.dataset, &request, &spend.options())
        .await;
    spinner.finish_and_clear();
    let release = released?.release;
    if let (Some(path), Some((weights, intercept))) = (
        &model_out,
        release.result.as_ref().and_then(ReleaseResult::model),
    ) {
        let dataset = client.dataset(spend.dataset).await?;
        ModelFile {
            weights: weights.to_vec(),
            intercept,
            feature_names: dataset.features.iter().map(|f| f.name.clone()).collect(),
            label: dataset.label,
            dataset_id: dataset.id,
            release_id: release
                .id
                .context("the server returned a release without an id")?,
            kind: release.kind.clone(),
            epsilon: release.epsilon,
            delta: release.delta,
            training: None,
            map: None,
        }
        .save(path)?;
    }
    if json {
        return print_json(out, &release);
    }
    describe(out, &release)?;
    match &release.result {
        Some(ReleaseResult::Walr(result)) => {
            if let Some(map) = &result.map {
                writeln!(
                    out,
                    "map {}: centre {:?}, radius {}, intercept weight {}",
                    serde_json::to_value(map.name)?.as_str().unwrap_or_default(),
                    map.centre,
                    map.radius
                        .map_or_else(|| "none".to_owned(), |r| r.to_string()),
                    map.intercept_weight
                )?;
            }
            writeln!(out, "noisy_dot: {:?}", result.noisy_dot)?;
            if let Some(intercept) = result.noisy_intercept {
                writeln!(out, "noisy_intercept: {intercept}")?;
            }
        }
        Some(ReleaseResult::Aggregate(result)) => {
            for group in &result.groups {
                let key: Vec<String> = group.key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let value = format!("{:.6}", group.value);
                let error = if group.exact {
                    "exact".to_owned()
                } else {
                    format!("± {:.6} (1 std)", group.std)
                };
                writeln!(
                    out,
                    "{:<30} {:<20} {value:>16} {error}",
                    key.join(","),
                    group.statistic
                )?;
            }
        }
        Some(
            result @ (ReleaseResult::Model(_) | ReleaseResult::DpGd(_) | ReleaseResult::DpSgd(_)),
        ) => {
            if let ReleaseResult::DpGd(gd) = result {
                writeln!(
                    out,
                    "{} steps, σ = {:.6e} per step ({:.3} × the step's sensitivity){}",
                    gd.steps,
                    gd.sigma,
                    gd.noise_multiplier,
                    if gd.warm_start {
                        ", from the warm start"
                    } else {
                        ""
                    }
                )?;
            }
            if let ReleaseResult::DpSgd(sgd) = result {
                writeln!(
                    out,
                    "{} steps ({} epochs of batches of {}), ε = {} per epoch, noise norm scale {:.6e}{}",
                    sgd.steps,
                    sgd.epochs,
                    sgd.batch_size,
                    sgd.epoch_epsilon,
                    sgd.noise_scale,
                    sgd.projection
                        .as_ref()
                        .map_or_else(String::new, |p| format!(
                            ", on {} projections (seed {})",
                            p.dims, p.seed.0
                        ))
                )?;
            }
            if let Some((weights, intercept)) = result.model() {
                writeln!(out, "weights: {weights:?}\nintercept: {intercept}")?;
            }
            if let Some(path) = &model_out {
                writeln!(out, "model file: {}", path.display())?;
            }
        }
        Some(ReleaseResult::FrankWolfe(fit)) => {
            writeln!(
                out,
                "{} steps over N = {} ({} sources), ε₀ = {} per step, selection scale {:.6e}",
                fit.stage.steps,
                fit.stage.n,
                fit.sources.len(),
                fit.stage.step_epsilon,
                fit.stage.selection_scale
            )?;
            if let Some(debias) = &fit.debias {
                writeln!(
                    out,
                    "debias: {} steps on the target, radius {}, ε = {}",
                    debias.steps, debias.radius, debias.epsilon
                )?;
            }
            writeln!(
                out,
                "{} ≈ intercept + weights · x\nweights: {:?}\nintercept: {}",
                fit.target, fit.weights, fit.intercept
            )?;
        }
        Some(ReleaseResult::Gradient(result)) => {
            writeln!(
                out,
                "{:?} loss on {}, C = {}, ε = {} per call, σ = {:.6e}",
                result.loss, result.target, result.clip, result.call_epsilon, result.sigma
            )?;
            if let Some(gradient) = &result.gradient {
                writeln!(out, "gradient (model space): {gradient:?}")?;
            }
            if let Some(session) = result.session {
                writeln!(out, "session of {} calls", session.calls)?;
            }
        }
        None => {}
    }
    Ok(())
}

/// A model file's weights as a warm start on `dataset`, whose features it
/// must name in the dataset's order.
async fn warm_start(
    client: &Client,
    dataset: Uuid,
    path: &std::path::Path,
) -> anyhow::Result<WarmStart> {
    let model = ModelFile::load(path)?;
    anyhow::ensure!(
        model.map.is_none(),
        "{}'s weights apply to a feature map's v(x), not to the features: it cannot be a \
         warm start",
        path.display()
    );
    let dataset = client.dataset(dataset).await?;
    let names: Vec<&str> = dataset.features.iter().map(|f| f.name.as_str()).collect();
    anyhow::ensure!(
        model.feature_names == names,
        "{} is a model of the features {:?}; the dataset has {:?}",
        path.display(),
        model.feature_names,
        names
    );
    Ok(WarmStart {
        weights: model.weights,
        intercept: model.intercept,
    })
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
        release.n,
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
