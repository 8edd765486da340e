//! `release frank-wolfe`: linear regression by DP Frank-Wolfe on an L1
//! ball, over the dataset and any source datasets.

use std::io::Write;

use clap::{Args, ValueEnum};
use dpgate_api_types::{
    DebiasParams, FrankWolfeParams, FrankWolfeResult, ReleaseParams, Selection,
};
use uuid::Uuid;

use super::{Kind, Spend};
use crate::Client;

#[derive(Debug, Args)]
pub struct FrankWolfeArgs {
    #[command(flatten)]
    pub spend: Spend,
    /// `label` or `measure:NAME`.
    #[arg(long)]
    pub target: String,
    /// r, the L1 radius, in model units (features and target in [−1, 1]).
    #[arg(long)]
    pub radius: f64,
    /// T, the number of steps.
    #[arg(long, default_value_t = 50)]
    pub steps: u32,
    #[arg(long, value_enum, default_value = "laplace")]
    pub selection: SelectionArg,
    /// A source dataset whose rows join the fit (repeatable).
    #[arg(long = "source")]
    pub sources: Vec<Uuid>,
    #[arg(long)]
    pub no_intercept: bool,
    /// h: add a target-only debias stage of this L1 radius.
    #[arg(long)]
    pub debias_radius: Option<f64>,
    #[arg(long, default_value_t = 20, requires = "debias_radius")]
    pub debias_steps: u32,
    /// The share of ε (and δ) the debias stage spends.
    #[arg(long, default_value_t = 0.5, requires = "debias_radius")]
    pub debias_share: f64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SelectionArg {
    Laplace,
    Exponential,
}

impl Kind for FrankWolfeArgs {
    fn spend(&self) -> &Spend {
        &self.spend
    }

    async fn params(&self, _client: &Client) -> anyhow::Result<ReleaseParams> {
        Ok(ReleaseParams::FrankWolfe(FrankWolfeParams {
            target: self.target.clone(),
            radius: self.radius,
            steps: self.steps,
            fit_intercept: !self.no_intercept,
            selection: match self.selection {
                SelectionArg::Laplace => Selection::Laplace,
                SelectionArg::Exponential => Selection::Exponential,
            },
            sources: self.sources.clone(),
            debias: self.debias_radius.map(|radius| DebiasParams {
                radius,
                steps: self.debias_steps,
                epsilon_share: self.debias_share,
            }),
        }))
    }
}

pub(super) fn print(result: &FrankWolfeResult, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
    let rows = result
        .stage
        .n
        .map_or_else(|| "the rows (N private)".to_owned(), |n| format!("N = {n}"));
    writeln!(
        out,
        "{} steps over {rows} ({} sources), ε₀ = {} per step, selection scale {:.6e}",
        result.stage.steps,
        result.sources.len(),
        result.stage.step_epsilon,
        result.stage.selection_scale
    )?;
    if let Some(debias) = &result.debias {
        writeln!(
            out,
            "debias: {} steps on the target, radius {}, ε = {}",
            debias.steps, debias.radius, debias.epsilon
        )?;
    }
    writeln!(
        out,
        "{} ≈ intercept + weights · x\nweights: {:?}\nintercept: {}",
        result.target, result.weights, result.intercept
    )?;
    Ok(())
}
