//! `release dp-sgd`: logistic regression by DP-SGD on the server,
//! optionally on public random projections of the features.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use dpgate_api_types::{DpSgdParams, DpSgdResult, ProjectionParams, ReleaseParams, Seed};

use super::{Kind, Spend};
use crate::Client;

#[derive(Debug, Args)]
pub struct DpSgdArgs {
    #[command(flatten)]
    pub spend: Spend,
    /// b, rows per batch.
    #[arg(long, default_value_t = 256)]
    pub batch_size: u64,
    /// E, passes over the data (each costs ε/E).
    #[arg(long, default_value_t = 1)]
    pub epochs: u32,
    /// η₀ of the step size η₀/√t, in the space of the features scaled
    /// into [0, 1].
    #[arg(long, default_value_t = 1.0)]
    pub learning_rate: f64,
    /// C, the L2 bound on each row's gradient.
    #[arg(long, default_value_t = 1.0)]
    pub clip: f64,
    /// λ of a ridge term (λ/2)‖θ‖².
    #[arg(long, default_value_t = 1e-4)]
    pub lambda: f64,
    #[arg(long)]
    pub no_intercept: bool,
    /// Train on this many public random projections of the features.
    #[arg(long)]
    pub projection_dims: Option<usize>,
    /// The projection's seed (the server picks one without it).
    #[arg(long, requires = "projection_dims")]
    pub projection_seed: Option<u64>,
    /// Also save the model as a model file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl Kind for DpSgdArgs {
    fn spend(&self) -> &Spend {
        &self.spend
    }

    fn model_out(&self) -> Option<&Path> {
        self.out.as_deref()
    }

    async fn params(&self, _client: &Client) -> anyhow::Result<ReleaseParams> {
        Ok(ReleaseParams::DpSgd(DpSgdParams {
            batch_size: self.batch_size,
            learning_rate: self.learning_rate,
            lambda: self.lambda,
            clip: self.clip,
            epochs: self.epochs,
            fit_intercept: !self.no_intercept,
            projection: self.projection_dims.map(|dims| ProjectionParams {
                dims,
                seed: self.projection_seed.map(Seed),
            }),
        }))
    }
}

pub(super) fn print(result: &DpSgdResult, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    writeln!(
        out,
        "{} steps ({} epochs of batches of {}), ε = {} per epoch, noise norm scale {:.6e}{}",
        result.steps,
        result.epochs,
        result.batch_size,
        result.epoch_epsilon,
        result.noise_scale,
        result
            .projection
            .as_ref()
            .map_or_else(String::new, |p| format!(
                ", on {} projections (seed {})",
                p.dims, p.seed.0
            ))
    )?;
    Ok(())
}
