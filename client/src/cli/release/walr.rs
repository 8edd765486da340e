//! `release walr`: the WALR noisy dot product, over the stored features or
//! the analyst's own.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use dpgate_api_types::{ReleaseParams, WalrMap, WalrParams, WalrResult};

use super::{Kind, Spend};
use crate::Client;
use crate::features::FeatureTable;
use crate::walr_training::Rows;

#[derive(Debug, Args)]
pub struct WalrArgs {
    #[command(flatten)]
    pub spend: Spend,
    /// Leave out the intercept's label term.
    #[arg(long)]
    pub no_intercept: bool,
    /// Your own features (CSV: row_id, then numeric columns), scaled
    /// into [0, 1] by each column's range and sent with the release.
    #[arg(long)]
    pub features: Option<PathBuf>,
    /// The public feature map φ the labels are summed against. Default:
    /// the server's, `auto` (or, for a dataset without the features'
    /// public moments, `none`, with the reason).
    #[arg(long, value_enum)]
    pub map: Option<MapArg>,
    /// Instead of --epsilon: the largest noise std to accept on each
    /// released number; the server spends the least ε that meets it.
    #[arg(long, group = "price")]
    pub target_sigma: Option<f64>,
}

impl Kind for WalrArgs {
    fn spend(&self) -> &Spend {
        &self.spend
    }

    async fn params(&self, _client: &Client) -> anyhow::Result<ReleaseParams> {
        let features = match &self.features {
            Some(path) => Some(Rows::supplied(FeatureTable::from_csv_file(path)?).1),
            None => None,
        };
        Ok(ReleaseParams::Walr(WalrParams {
            intercept: !self.no_intercept,
            features,
            map: self.map.map(Into::into),
            target_sigma: self.target_sigma,
        }))
    }
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

pub(super) fn print(result: &WalrResult, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
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
    if let Some(reason) = &result.map_fallback {
        writeln!(out, "map: {reason}")?;
    }
    writeln!(out, "noisy_dot: {:?}", result.noisy_dot)?;
    if let Some(intercept) = result.noisy_intercept {
        writeln!(out, "noisy_intercept: {intercept}")?;
    }
    Ok(())
}
