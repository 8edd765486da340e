//! `release aggregate`: counts, sums and means, optionally grouped.

use std::io::Write;

use clap::{Args, ValueEnum};
use dpgate_api_types::{AggregateMechanism, AggregateParams, AggregateResult, ReleaseParams};

use super::{Kind, Spend};
use crate::Client;

#[derive(Debug, Args)]
pub struct AggregateArgs {
    #[command(flatten)]
    pub spend: Spend,
    /// Instead of --epsilon: the largest noise std to accept on each
    /// value; the server spends the least ε that meets it.
    #[arg(long, group = "price")]
    pub target_std: Option<f64>,
    /// E.g. count,sum:value,mean:converted.
    #[arg(long, value_delimiter = ',', required = true)]
    pub statistics: Vec<String>,
    /// Declared dimensions, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub group_by: Vec<String>,
    #[arg(long, value_enum, default_value = "gaussian")]
    pub mechanism: Mechanism,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Mechanism {
    Gaussian,
    Laplace,
}

impl Kind for AggregateArgs {
    fn spend(&self) -> &Spend {
        &self.spend
    }

    async fn params(&self, _client: &Client) -> anyhow::Result<ReleaseParams> {
        Ok(ReleaseParams::Aggregate(AggregateParams {
            statistics: self.statistics.clone(),
            group_by: self.group_by.clone(),
            mechanism: match self.mechanism {
                Mechanism::Gaussian => AggregateMechanism::Gaussian,
                Mechanism::Laplace => AggregateMechanism::Laplace,
            },
            target_std: self.target_std,
        }))
    }
}

pub(super) fn print(result: &AggregateResult, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
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
    Ok(())
}
