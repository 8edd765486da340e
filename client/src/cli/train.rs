//! `dpgate-client train`: features (downloaded, or the analyst's own file),
//! one WALR release, then label-blind training into a model file: on the
//! scaled rows, or on v(x) of the release's feature map when it has one.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{ArgGroup, Args, ValueEnum};
use dpgate_api_types::{
    Release, ReleaseParams, ReleaseRequest, ReleaseResult, SuppliedRow, WalrParams, WalrResult,
};
use ndarray::Array2;
use serde::Serialize;
use uuid::Uuid;

use super::release::supplied;
use super::{MapArg, print_json, progress, shown, spinner};
use crate::features::{FeatureTable, Scaling};
use crate::mapped;
use crate::model_file::{ModelFile, ModelMap, Training};
use crate::trainer::{self, NoisyDot, TrainerConfig};
use crate::{Client, ReleaseOptions};

#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("price").required(true)))]
pub struct TrainArgs {
    #[arg(long)]
    pub dataset: Uuid,
    /// The WALR release's ε.
    #[arg(long, group = "price")]
    pub epsilon: Option<f64>,
    /// Instead of --epsilon: the largest noise std to accept on each
    /// released number; the server spends the least ε that meets it.
    #[arg(long, group = "price")]
    pub target_sigma: Option<f64>,
    /// The WALR release's δ (WALR is Gaussian: δ > 0).
    #[arg(long, required_unless_present = "release")]
    pub delta: Option<f64>,
    /// The release's public feature map φ; the model is trained on it and
    /// keeps it.
    /// Default: the server's, `auto` (or, for a dataset without the
    /// features' public moments, `none`, with the reason).
    #[arg(long, value_enum)]
    pub map: Option<MapArg>,
    /// Train from a release made earlier (by id) instead of a new one:
    /// nothing more is spent, and the model is trained on its map.
    #[arg(long, group = "price", conflicts_with_all = ["delta", "idempotency_key", "map"])]
    pub release: Option<Uuid>,
    /// Your own features (CSV: row_id, then numeric columns), supplied to
    /// the release; default: the dataset's features from the server.
    #[arg(long)]
    pub features: Option<PathBuf>,
    /// How to download the dataset's features from the server.
    #[arg(long, value_enum, default_value_t = FeaturesFormat::Arrow, conflicts_with = "features")]
    pub features_format: FeaturesFormat,
    /// Where to write the model file.
    #[arg(long)]
    pub out: PathBuf,
    /// Most passes over the rows; default: as many as make 10,000
    /// minibatch steps (11 at 1,000,000 rows, 1,000 at 10,000).
    #[arg(long)]
    pub epochs: Option<usize>,
    #[arg(long, default_value_t = TrainerConfig::default().batch_size)]
    pub batch_size: usize,
    /// Default: 1/L from the data's curvature bound.
    #[arg(long)]
    pub learning_rate: Option<f64>,
    /// The step at epoch e is lr / (1 + decay·e).
    #[arg(long, default_value_t = TrainerConfig::default().decay)]
    pub decay: f64,
    /// L2 regularisation (l2/2)·‖θ‖².
    #[arg(long, default_value_t = TrainerConfig::default().l2)]
    pub l2: f64,
    /// Stop once an epoch moves θ by less than this (relative).
    #[arg(long, default_value_t = TrainerConfig::default().tolerance)]
    pub tolerance: f64,
    /// Seeds the minibatch shuffles.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Reuse a key to get the same release back on a retry.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

/// The formats of the server's feature export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FeaturesFormat {
    /// An Arrow IPC stream: f32 values, about a third of the CSV's bytes
    /// and read without parsing text.
    Arrow,
    /// CSV text.
    Csv,
}

impl TrainArgs {
    fn config(&self) -> TrainerConfig {
        TrainerConfig {
            epochs: self.epochs,
            batch_size: self.batch_size,
            learning_rate: self.learning_rate,
            decay: self.decay,
            l2: self.l2,
            tolerance: self.tolerance,
            seed: self.seed,
        }
    }
}

/// What `train --json` prints.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    model: &'a ModelFile,
    out: String,
    remaining_epsilon: f64,
}

/// The training rows, scaled, with what to call and how to unscale them.
struct Rows {
    row_ids: Vec<String>,
    names: Vec<String>,
    scaled: Array2<f64>,
    scaling: Scaling,
}

async fn server_rows(
    client: &Client,
    dataset: Uuid,
    format: FeaturesFormat,
    json: bool,
) -> anyhow::Result<Rows> {
    let view = client.dataset(dataset).await?;
    let bar = progress(json, None, "{spinner} features: {binary_bytes} {elapsed}");
    let received = |received| bar.set_position(received);
    let bytes = match format {
        FeaturesFormat::Arrow => client.features_arrow(dataset, received).await,
        FeaturesFormat::Csv => client.features_csv(dataset, received).await,
    };
    bar.finish_and_clear();
    let bytes = bytes?;
    let table = match format {
        FeaturesFormat::Arrow => FeatureTable::from_arrow(&bytes[..]),
        FeaturesFormat::Csv => FeatureTable::from_csv(&bytes[..]),
    }
    .and_then(|table| table.expect_names(&view.features).map(|()| table))
    .context("the server's features")?;
    let scaling = Scaling::declared(&view.features);
    Ok(Rows {
        scaled: scaling.scale(table.x),
        row_ids: table.row_ids,
        names: table.names,
        scaling,
    })
}

pub(super) async fn train(
    client: &Client,
    args: &TrainArgs,
    json: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let dataset = client.dataset(args.dataset).await?;
    // Features first: nothing is spent if they can not be had.
    let (rows, supplied_rows) = rows_of(client, args, json).await?;
    let release = walr_release(client, args, supplied_rows, json).await?;
    let (noisy, map) = fit_inputs(&release, &rows)?;
    let config = args.config();
    let bar = progress(
        json,
        Some(config.planned_epochs(rows.row_ids.len()) as u64),
        "epoch {pos}/{len} {wide_bar} {msg} {elapsed}",
    );
    let epoch_bar = bar.clone();
    let scaled = rows.scaled;
    let feature_map = map.as_ref().map(|map| map.feature_map.clone());
    let trained = tokio::task::spawn_blocking(move || {
        let x = match &feature_map {
            Some(feature_map) => mapped::map_rows(feature_map, scaled),
            None => scaled,
        };
        trainer::train(x.view(), &noisy, &config, |report| {
            epoch_bar.set_position(report.epoch as u64);
            epoch_bar.set_message(format!("loss {:.5} Δθ {:.2e}", report.loss, report.change));
        })
    })
    .await??;
    bar.finish_and_clear();
    let intercept = trained.intercept.unwrap_or_default();
    // A map's shrink is not affine: its weights stay on v(x), with the map.
    let (weights, intercept) = match &map {
        Some(_) => (trained.weights, intercept),
        None => rows.scaling.unfold(&trained.weights, intercept),
    };
    let model = ModelFile {
        weights,
        intercept,
        feature_names: rows.names,
        label: dataset.label,
        dataset_id: dataset.id,
        release_id: release
            .id
            .context("the server returned a release without an id")?,
        kind: release.kind.clone(),
        epsilon: release.epsilon,
        delta: release.delta,
        training: Some(Training {
            rows: rows.row_ids.len(),
            epochs: trained.epochs.len(),
            converged: trained.converged,
            batch_size: args.batch_size,
            learning_rate: trained.learning_rate,
            decay: args.decay,
            l2: args.l2,
            seed: args.seed,
            final_loss: trained.epochs.last().map_or(f64::NAN, |e| e.loss),
            supplied_features: args.features.is_some(),
        }),
        map,
    };
    model.save(&args.out)?;
    if json {
        return print_json(
            out,
            &Summary {
                model: &model,
                out: args.out.display().to_string(),
                remaining_epsilon: release.remaining.epsilon,
            },
        );
    }
    print_trained(out, &model, &release, &args.out)
}

/// The rows to train on: the analyst's own features (and the rows to send
/// with the release), or the server's.
async fn rows_of(
    client: &Client,
    args: &TrainArgs,
    json: bool,
) -> anyhow::Result<(Rows, Option<Vec<SuppliedRow>>)> {
    Ok(match &args.features {
        Some(path) => {
            let (table, scaling, supplied) = supplied(path)?;
            let rows = Rows {
                scaled: table.x,
                row_ids: table.row_ids,
                names: table.names,
                scaling,
            };
            (rows, Some(supplied))
        }
        None => (
            server_rows(client, args.dataset, args.features_format, json).await?,
            None,
        ),
    })
}

/// The WALR release to train from: the one `--release` names, or a new
/// one over `supplied` rows (the stored features without).
async fn walr_release(
    client: &Client,
    args: &TrainArgs,
    supplied: Option<Vec<SuppliedRow>>,
    json: bool,
) -> anyhow::Result<Release> {
    if let Some(id) = args.release {
        return Ok(client.get_release(args.dataset, id).await?);
    }
    let request = ReleaseRequest {
        epsilon: args.epsilon,
        delta: args.delta,
        params: ReleaseParams::Walr(WalrParams {
            features: supplied,
            map: args.map.map(Into::into),
            target_sigma: args.target_sigma,
            ..WalrParams::default()
        }),
    };
    let options = ReleaseOptions {
        idempotency_key: args.idempotency_key.clone(),
        dry_run: false,
    };
    let spinner = spinner(json, "releasing the noisy dot product");
    let released = client.release(args.dataset, &request, &options).await;
    spinner.finish_and_clear();
    Ok(released?.release)
}

/// The line a person reads once the model is written.
fn print_trained(
    out: &mut (dyn Write + Send),
    model: &ModelFile,
    release: &Release,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let training = model.training.as_ref();
    writeln!(
        out,
        "trained on {} rows{} for {} epochs ({}), final loss estimate {:.5}; release {} cost \
         ε = {}, δ = {:e}; model written to {}",
        training.map_or(0, |t| t.rows),
        match &model.map {
            Some(map) => format!(
                " on the release's map {}",
                serde_json::to_value(map.feature_map.name)?
                    .as_str()
                    .unwrap_or_default()
            ),
            None => String::new(),
        },
        training.map_or(0, |t| t.epochs),
        if training.is_some_and(|t| t.converged) {
            "converged"
        } else {
            "epoch limit"
        },
        training.map_or(f64::NAN, |t| t.final_loss),
        shown(release),
        release.epsilon,
        release.delta,
        path.display(),
    )?;
    Ok(())
}

/// What the trainer fits the rows to, and the map (if the release has one)
/// that the rows must go through first and the model file keeps.
fn fit_inputs(release: &Release, rows: &Rows) -> anyhow::Result<(NoisyDot, Option<ModelMap>)> {
    let result = walr_result(release, rows.row_ids.len())?;
    let Some(map) = &result.map else {
        let noisy = NoisyDot {
            dot: result.noisy_dot.clone(),
            intercept: result.noisy_intercept,
        };
        return Ok((noisy, None));
    };
    let k = rows.names.len();
    map.check(k).with_context(|| {
        format!(
            "the feature map of release {} does not fit the {k} features read",
            shown(release)
        )
    })?;
    let noisy = mapped::noisy_dot(map, &result.noisy_dot, result.noisy_intercept);
    let map = ModelMap {
        scaling: rows.scaling.clone(),
        feature_map: map.clone(),
    };
    Ok((noisy, Some(map)))
}

/// The release's WALR result, checked against the training rows.
fn walr_result(release: &Release, rows: usize) -> anyhow::Result<&WalrResult> {
    let Some(ReleaseResult::Walr(result)) = &release.result else {
        anyhow::bail!(
            "release {} is a {}, not a walr release",
            shown(release),
            release.kind
        );
    };
    anyhow::ensure!(
        release.n == rows as u64,
        "release {} covers {} rows but {rows} rows of features were read: the dataset changed \
         in between; read the features again and train with --release {}",
        shown(release),
        release.n,
        shown(release)
    );
    Ok(result)
}
