//! `release dp-gd`: logistic regression by DP gradient descent on the
//! server, optionally from a warm start.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use dpgate_api_types::{DpGdParams, DpGdResult, Iterate, ReleaseParams, WarmStart};
use uuid::Uuid;

use super::{Kind, Spend};
use crate::Client;
use crate::model_file::ModelFile;

#[derive(Debug, Args)]
pub struct DpGdArgs {
    #[command(flatten)]
    pub spend: Spend,
    /// T, the number of steps.
    #[arg(long, default_value_t = 100)]
    pub steps: u32,
    /// α, in the space of the features scaled into [0, 1].
    #[arg(long, default_value_t = 1.0)]
    pub learning_rate: f64,
    /// C, the L2 bound on each row's gradient.
    #[arg(long, default_value_t = 1.0)]
    pub clip: f64,
    /// λ of a ridge term (λ/2)‖θ‖².
    #[arg(long, default_value_t = 0.0)]
    pub lambda: f64,
    #[arg(long)]
    pub no_intercept: bool,
    /// Start from this model file (trained on public data, with the
    /// dataset's feature names) instead of from zero.
    #[arg(long)]
    pub theta0: Option<PathBuf>,
    /// Project every iterate onto ‖θ‖₂ ≤ R.
    #[arg(long)]
    pub radius: Option<f64>,
    /// Release the last iterate or the mean of all.
    #[arg(long, value_enum, default_value = "last")]
    pub output: Output,
    /// Also save the model as a model file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    Last,
    Average,
}

impl Kind for DpGdArgs {
    fn spend(&self) -> &Spend {
        &self.spend
    }

    fn model_out(&self) -> Option<&Path> {
        self.out.as_deref()
    }

    async fn params(&self, client: &Client) -> anyhow::Result<ReleaseParams> {
        let theta0 = match &self.theta0 {
            Some(path) => Some(warm_start(client, self.spend.dataset, path).await?),
            None => None,
        };
        Ok(ReleaseParams::DpGd(DpGdParams {
            steps: self.steps,
            learning_rate: self.learning_rate,
            clip: self.clip,
            lambda: self.lambda,
            fit_intercept: !self.no_intercept,
            theta0,
            radius: self.radius,
            output: match self.output {
                Output::Last => Iterate::Last,
                Output::Average => Iterate::Average,
            },
        }))
    }
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

pub(super) fn print(result: &DpGdResult, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    writeln!(
        out,
        "{} steps, σ = {:.6e} per step ({:.3} × the step's sensitivity){}",
        result.steps,
        result.sigma,
        result.noise_multiplier,
        if result.warm_start {
            ", from the warm start"
        } else {
            ""
        }
    )?;
    Ok(())
}
