//! `release model`: ridge logistic regression made private by output or
//! objective perturbation on the server.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use dpgate_api_types::{
    Lambda, ObjectivePerturbationParams, OutputPerturbationParams, ReleaseParams,
};

use super::{Kind, Spend};
use crate::Client;

#[derive(Debug, Args)]
pub struct ModelArgs {
    #[command(flatten)]
    pub spend: Spend,
    #[arg(long, value_enum, default_value = "output")]
    pub learner: Learner,
    /// The L2 regularisation strength λ: `auto` (chosen by the server
    /// from N, d, ε and δ), a number, or `select:λ₁,λ₂,…` (the best of
    /// the candidates, privately selected, for the same ε).
    #[arg(long, default_value = "auto")]
    pub lambda: Lambda,
    #[arg(long)]
    pub no_intercept: bool,
    /// Also save the model as a model file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Learner {
    /// Output perturbation (norm-Gamma, or Gaussian with --delta).
    Output,
    /// Objective perturbation (pure ε).
    Objective,
}

impl Kind for ModelArgs {
    fn spend(&self) -> &Spend {
        &self.spend
    }

    fn model_out(&self) -> Option<&Path> {
        self.out.as_deref()
    }

    async fn params(&self, _client: &Client) -> anyhow::Result<ReleaseParams> {
        let (lambda, fit_intercept) = (self.lambda.clone(), !self.no_intercept);
        Ok(match self.learner {
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
        })
    }
}
