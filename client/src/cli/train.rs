//! `dpgate-client train`: features (downloaded, or the analyst's own file),
//! one WALR release, then label-blind training into a model file: on the
//! scaled rows, or on v(x) of the release's feature map when it has one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use clap::{ArgGroup, Args};
use dpgate_api_types::{Release, ReleaseResult};
use indicatif::ProgressBar;
use serde::Serialize;
use uuid::Uuid;

use super::{MapArg, print_json, progress, shown, spinner};
use crate::Client;
use crate::features::FeatureTable;
use crate::model_file::ModelFile;
use crate::trainer::{EpochReport, TrainerConfig};
use crate::walr_training::{self, FeaturesFormat, TrainPlan, TrainProgress};

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
    /// keeps it. Default: the server's, `auto` (or, for a dataset without
    /// the features' public moments, `none`, with the reason).
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

impl TrainArgs {
    fn plan(&self) -> TrainPlan {
        TrainPlan {
            dataset: self.dataset,
            epsilon: self.epsilon,
            target_sigma: self.target_sigma,
            delta: self.delta,
            map: self.map.map(Into::into),
            release: self.release,
            idempotency_key: self.idempotency_key.clone(),
            features_format: self.features_format,
            config: TrainerConfig {
                epochs: self.epochs,
                batch_size: self.batch_size,
                learning_rate: self.learning_rate,
                decay: self.decay,
                l2: self.l2,
                tolerance: self.tolerance,
                seed: self.seed,
            },
        }
    }
}

/// What `train --json` prints.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    model: &'a ModelFile,
    out: String,
    remaining_epsilon: f64,
    /// Why the release is not on the default map `auto`.
    #[serde(skip_serializing_if = "Option::is_none")]
    map_fallback: Option<&'a str>,
}

pub(super) async fn train(
    client: &Client,
    args: &TrainArgs,
    json: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<()> {
    let supplied = match &args.features {
        Some(path) => Some(FeatureTable::from_csv_file(path)?),
        None => None,
    };
    let progress = Arc::new(Bars::new(json));
    let trained = walr_training::train(client, &args.plan(), supplied, progress).await?;
    trained.model.save(&args.out)?;
    if json {
        return print_json(
            out,
            &Summary {
                model: &trained.model,
                out: args.out.display().to_string(),
                remaining_epsilon: trained.release.remaining.epsilon,
                map_fallback: walr_fallback(&trained.release),
            },
        );
    }
    print_trained(out, &trained.model, &trained.release, &args.out)
}

/// Why the release is on another map than the default, if it is.
fn walr_fallback(release: &Release) -> Option<&str> {
    match &release.result {
        Some(ReleaseResult::Walr(result)) => result.map_fallback.as_deref(),
        _ => None,
    }
}

/// The progress bars of a training run, hidden under `--json`.
struct Bars {
    hidden: bool,
    features: ProgressBar,
    releasing: Mutex<Option<ProgressBar>>,
    epochs: Mutex<Option<ProgressBar>>,
}

impl Bars {
    fn new(hidden: bool) -> Self {
        Bars {
            hidden,
            features: progress(hidden, None, "{spinner} features: {binary_bytes} {elapsed}"),
            releasing: Mutex::new(None),
            epochs: Mutex::new(None),
        }
    }
}

impl TrainProgress for Bars {
    fn features(&self, received: u64) {
        self.features.set_position(received);
    }

    fn releasing(&self, waiting: bool) {
        self.features.finish_and_clear();
        let mut bar = self
            .releasing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match (waiting, bar.take()) {
            (true, _) => *bar = Some(spinner(self.hidden, "releasing the noisy dot product")),
            (false, Some(spinner)) => spinner.finish_and_clear(),
            (false, None) => {}
        }
    }

    fn training(&self, epochs: usize) {
        let bar = progress(
            self.hidden,
            Some(epochs as u64),
            "epoch {pos}/{len} {wide_bar} {msg} {elapsed}",
        );
        *self.epochs.lock().unwrap_or_else(PoisonError::into_inner) = Some(bar);
    }

    fn epoch(&self, report: &EpochReport) {
        if let Some(bar) = &*self.epochs.lock().unwrap_or_else(PoisonError::into_inner) {
            bar.set_position(report.epoch as u64);
            bar.set_message(format!("loss {:.5} Δθ {:.2e}", report.loss, report.change));
        }
    }

    fn done(&self) {
        if let Some(bar) = self
            .epochs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            bar.finish_and_clear();
        }
    }
}

/// The line a person reads once the model is written.
fn print_trained(
    out: &mut (dyn Write + Send),
    model: &ModelFile,
    release: &Release,
    path: &Path,
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
    if let Some(reason) = walr_fallback(release) {
        writeln!(out, "map: {reason}")?;
    }
    Ok(())
}
