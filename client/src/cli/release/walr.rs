//! `release walr`: the WALR noisy dot product, over the stored features or
//! the analyst's own.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use dpgate_api_types::{ReleaseParams, SuppliedRow, WalrMap, WalrParams, WalrResult};

use super::{Kind, Spend};
use crate::Client;
use crate::features::{FeatureTable, Scaling};

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
    /// The public feature map φ the labels are summed against.
    /// Default: the server's, `auto` (or, for a dataset without the
    /// features' public moments, `none`, with the reason).
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
            Some(path) => Some(supplied(path)?.2),
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

/// The analyst's own feature file, scaled into [0, 1] by its observed
/// ranges (the table's `x` holds the scaled rows), as supplied rows, with
/// its scaling.
pub fn supplied(path: &Path) -> anyhow::Result<(FeatureTable, Scaling, Vec<SuppliedRow>)> {
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
    writeln!(out, "noisy_dot: {:?}", result.noisy_dot)?;
    if let Some(intercept) = result.noisy_intercept {
        writeln!(out, "noisy_intercept: {intercept}")?;
    }
    Ok(())
}
