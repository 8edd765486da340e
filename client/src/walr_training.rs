//! Label-blind training from a WALR release, as one flow that the CLI's
//! `train` and the Python package's `WalrClassifier` both run: the
//! features (the server's, or the analyst's own), one WALR release (or one
//! made earlier), then the trainer on the scaled rows or on v(x) of the
//! release's feature map, into a [`ModelFile`]. One flow, so that the same
//! plan and release give bit-identical weights wherever they are trained.

use std::sync::Arc;

use anyhow::Context;
use dpgate_api_types::{
    Dataset, Release, ReleaseParams, ReleaseRequest, ReleaseResult, SuppliedRow, WalrMap,
    WalrParams, WalrResult,
};
use ndarray::Array2;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::features::{FeatureTable, Scaling};
use crate::mapped;
use crate::model_file::{ModelFile, ModelMap, Training};
use crate::trainer::{self, EpochReport, NoisyDot, TrainerConfig};
use crate::{Client, ReleaseOptions};

/// What to train: the release to make (or the one made earlier) and how to
/// fit it. The JSON form (the Python package's) names the fields as the
/// API and the CLI's flags do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainPlan {
    pub dataset: Uuid,
    /// The WALR release's ε (or give `target_sigma`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f64>,
    /// The largest noise std to accept on each released number, in place
    /// of `epsilon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_sigma: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// The release's public feature map; absent, the server's default
    /// (`auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<WalrMap>,
    /// Train from this release instead of making one: nothing is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// How to download the dataset's features (when not supplied).
    #[serde(default)]
    pub features_format: FeaturesFormat,
    #[serde(default)]
    pub config: TrainerConfig,
}

/// The formats of the server's feature export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FeaturesFormat {
    /// An Arrow IPC stream: f32 values, about a third of the CSV's bytes
    /// and read without parsing text.
    #[default]
    Arrow,
    /// CSV text.
    Csv,
}

/// Where a training run is: every method is called from the task doing
/// the work, so an implementation only draws.
pub trait TrainProgress: Send + Sync {
    /// Bytes of the features received so far.
    fn features(&self, _received: u64) {}
    /// The release was asked for (`true`) or answered (`false`).
    fn releasing(&self, _waiting: bool) {}
    /// Training starts, for at most `epochs` epochs.
    fn training(&self, _epochs: usize) {}
    fn epoch(&self, _report: &EpochReport) {}
    /// Training ended.
    fn done(&self) {}
}

/// Draws nothing.
pub struct Quiet;

impl TrainProgress for Quiet {}

/// The training rows, scaled into [0, 1], with what to call them and how
/// to unscale them.
#[derive(Debug, Clone)]
pub struct Rows {
    pub row_ids: Vec<String>,
    pub names: Vec<String>,
    pub scaled: Array2<f64>,
    pub scaling: Scaling,
}

impl Rows {
    /// The analyst's own features, scaled by their observed ranges, and
    /// the rows to send with the release.
    pub fn supplied(mut table: FeatureTable) -> (Rows, Vec<SuppliedRow>) {
        let scaling = Scaling::observed(&table);
        table.x = scaling.scale(table.x);
        let sent = table
            .row_ids
            .iter()
            .zip(table.x.rows())
            .map(|(id, x)| SuppliedRow {
                row_id: id.clone(),
                x: x.to_vec(),
            })
            .collect();
        let rows = Rows {
            row_ids: table.row_ids,
            names: table.names,
            scaled: table.x,
            scaling,
        };
        (rows, sent)
    }
}

/// A trained model and the release it came from.
#[derive(Debug, Clone)]
pub struct Trained {
    pub model: ModelFile,
    pub release: Release,
}

/// Runs `plan`: the analyst's own features when `supplied` (raw units),
/// else the dataset's from the server; then the release and the fit.
/// Nothing is spent when the features cannot be had.
///
/// # Errors
/// A failed call (a server's problem document is kept as the source), a
/// release that does not fit the rows, or a trainer that fails.
pub async fn train(
    client: &Client,
    plan: &TrainPlan,
    supplied: Option<FeatureTable>,
    progress: Arc<dyn TrainProgress>,
) -> anyhow::Result<Trained> {
    let dataset = client.dataset(plan.dataset).await?;
    let (rows, sent) = match supplied {
        Some(table) => {
            let (rows, sent) = Rows::supplied(table);
            (rows, Some(sent))
        }
        None => (server_rows(client, &dataset, plan, &*progress).await?, None),
    };
    progress.releasing(true);
    let release = walr_release(client, plan, sent.clone()).await;
    progress.releasing(false);
    let release = release?;
    let model = fit(&dataset, &release, rows, plan, sent.is_some(), progress).await?;
    Ok(Trained { model, release })
}

async fn server_rows(
    client: &Client,
    dataset: &Dataset,
    plan: &TrainPlan,
    progress: &dyn TrainProgress,
) -> anyhow::Result<Rows> {
    let received = |bytes| progress.features(bytes);
    let bytes = match plan.features_format {
        FeaturesFormat::Arrow => client.features_arrow(dataset.id, received).await?,
        FeaturesFormat::Csv => client.features_csv(dataset.id, received).await?,
    };
    let table = match plan.features_format {
        FeaturesFormat::Arrow => FeatureTable::from_arrow(&bytes[..]),
        FeaturesFormat::Csv => FeatureTable::from_csv(&bytes[..]),
    }
    .and_then(|table| table.expect_names(&dataset.features).map(|()| table))
    .context("the server's features")?;
    let scaling = Scaling::declared(&dataset.features);
    Ok(Rows {
        scaled: scaling.scale(table.x),
        row_ids: table.row_ids,
        names: table.names,
        scaling,
    })
}

/// The WALR release to train from: the one the plan names, or a new one
/// over `supplied` rows (the stored features without).
async fn walr_release(
    client: &Client,
    plan: &TrainPlan,
    supplied: Option<Vec<SuppliedRow>>,
) -> anyhow::Result<Release> {
    if let Some(id) = plan.release {
        return Ok(client.get_release(plan.dataset, id).await?);
    }
    let request = ReleaseRequest {
        epsilon: plan.epsilon,
        delta: plan.delta,
        params: ReleaseParams::Walr(WalrParams {
            features: supplied,
            map: plan.map,
            target_sigma: plan.target_sigma,
            ..WalrParams::default()
        }),
    };
    let options = ReleaseOptions {
        idempotency_key: plan.idempotency_key.clone(),
        dry_run: false,
    };
    Ok(client
        .release(plan.dataset, &request, &options)
        .await?
        .release)
}

/// Fits `rows` to `release` into a model file of `dataset`.
async fn fit(
    dataset: &Dataset,
    release: &Release,
    rows: Rows,
    plan: &TrainPlan,
    supplied: bool,
    progress: Arc<dyn TrainProgress>,
) -> anyhow::Result<ModelFile> {
    let (noisy, map) = fit_inputs(release, &rows)?;
    let config = plan.config.clone();
    progress.training(config.planned_epochs(rows.row_ids.len()));
    let scaled = rows.scaled;
    let feature_map = map.as_ref().map(|map| map.feature_map.clone());
    let task_config = config.clone();
    let task_progress = progress.clone();
    let trained = tokio::task::spawn_blocking(move || {
        let x = match &feature_map {
            Some(feature_map) => mapped::map_rows(feature_map, scaled),
            None => scaled,
        };
        trainer::train(x.view(), &noisy, &task_config, |report| {
            task_progress.epoch(report);
        })
    })
    .await??;
    progress.done();
    let intercept = trained.intercept.unwrap_or_default();
    // A map's shrink is not affine: its weights stay on v(x), with the map.
    let (weights, intercept) = match &map {
        Some(_) => (trained.weights, intercept),
        None => rows.scaling.unfold(&trained.weights, intercept),
    };
    let rows_read = rows.row_ids.len();
    let model = ModelFile::of_weights(dataset, release, weights, intercept, rows.names)?;
    Ok(ModelFile {
        training: Some(Training {
            rows: rows_read,
            epochs: trained.epochs.len(),
            converged: trained.converged,
            batch_size: config.batch_size,
            learning_rate: trained.learning_rate,
            decay: config.decay,
            l2: config.l2,
            seed: config.seed,
            final_loss: trained.epochs.last().map_or(f64::NAN, |e| e.loss),
            supplied_features: supplied,
        }),
        map,
        ..model
    })
}

/// A release's id for people, or why it has none.
pub fn shown(release: &Release) -> String {
    release
        .id
        .map_or_else(|| "(not recorded)".to_owned(), |id| id.to_string())
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
    // A release that does not say its N (privacy unit `user`) is of a
    // dataset whose features are never exported.
    if let Some(n) = release.n {
        anyhow::ensure!(
            n == rows as u64,
            "release {} covers {n} rows but {rows} rows of features were read: the dataset \
             changed in between; read the features again and train with --release {}",
            shown(release),
            shown(release)
        );
    }
    Ok(result)
}
