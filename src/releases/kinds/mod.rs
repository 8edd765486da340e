//! The release kinds, one module each: how each is priced from public
//! facts, what it checks against the public columns, and how it computes
//! its exact answer and noise once paid for.

pub mod aggregate;
pub mod counting;
pub mod dp_gd;
pub mod dp_sgd;
mod dp_sgd_people;
pub mod frank_wolfe;
pub mod gradient;
pub mod gradients;
mod iterative;
mod lambda_select;
pub mod model;
mod objective;
mod objective_people;
mod output;
mod output_people;
pub mod projection;
pub mod ridge;
pub mod supplied;
#[cfg(test)]
mod test_rows;
pub mod walr;
pub mod walr_map;

use std::sync::Arc;

use dpgate_api_types as api;

use super::{Knobs, Planned, ReleaseError};
use crate::domain::dataset::DatasetRecord;
use ridge::Learner;
use supplied::Supplied;

/// Every summed pass a release runs: what a plan sent to a cluster's
/// executors may carry.
pub fn passes() -> crate::engine::Passes {
    crate::engine::Passes::default()
        .with::<walr_map::MappedSums>()
        .with::<supplied::Join>()
        .with::<aggregate::Tallying>()
        .with::<gradients::Gradients<gradients::Logistic>>()
        .with::<gradients::Gradients<gradient::Fit>>()
        .with::<frank_wolfe::Terms>()
        .with::<counting::Counting>()
}

/// `fresh` summed over `parts` as a cluster would (see
/// [`crate::engine::summed_in_parts`]), read back as one of [`passes`].
#[cfg(test)]
pub(crate) fn summed_in_parts<S: crate::engine::Summed>(
    fresh: &S,
    parts: &[crate::snapshots::Columns],
) -> S {
    crate::engine::summed_in_parts(&passes(), fresh, parts)
}

/// A release request's parameters, checked as far as they can be without
/// the dataset: supplied feature vectors are parsed once, here, and every
/// other kind is priced from its parameters as they came.
pub enum Kind {
    Supplied {
        params: api::WalrParams,
        rows: Arc<Supplied>,
    },
    Requested(api::ReleaseParams),
}

impl Kind {
    /// Takes the request's parameters apart.
    pub fn parse(params: api::ReleaseParams) -> Result<Self, ReleaseError> {
        Ok(match params {
            api::ReleaseParams::Walr(
                mut params @ api::WalrParams {
                    features: Some(_), ..
                },
            ) => {
                let rows = params.features.take().unwrap_or_default();
                Kind::Supplied {
                    params,
                    rows: Arc::new(Supplied::parse(rows).map_err(ReleaseError::Invalid)?),
                }
            }
            params => Kind::Requested(params),
        })
    }

    /// The other datasets whose rows the release reads (and which it
    /// debits), checked against the release's own `dataset`.
    pub fn sources(&self, dataset: uuid::Uuid) -> Result<&[uuid::Uuid], ReleaseError> {
        let sources = match self {
            Kind::Requested(params) => params.sources(),
            Kind::Supplied { .. } => &[],
        };
        frank_wolfe::check_sources(sources, dataset)?;
        Ok(sources)
    }

    /// Prices the release on `dataset` (reading `sources` too) from public
    /// facts alone.
    pub fn plan(
        &self,
        dataset: &DatasetRecord,
        sources: &[DatasetRecord],
        knobs: &Knobs,
    ) -> Result<Box<dyn Planned>, ReleaseError> {
        use api::ReleaseParams as Params;
        match self {
            Kind::Supplied { params, rows } => supplied::plan(dataset, rows.clone(), params, knobs),
            Kind::Requested(Params::Walr(walr)) => walr::plan(dataset, walr, knobs),
            Kind::Requested(Params::Aggregate(aggregate)) => {
                aggregate::plan(dataset, aggregate, knobs)
            }
            Kind::Requested(Params::OutputPerturbation(model)) => ridge::plan(
                Learner::Output,
                dataset,
                &model.lambda,
                model.fit_intercept,
                knobs,
            ),
            Kind::Requested(Params::ObjectivePerturbation(model)) => ridge::plan(
                Learner::Objective,
                dataset,
                &model.lambda,
                model.fit_intercept,
                knobs,
            ),
            Kind::Requested(Params::DpGd(params)) => dp_gd::plan(dataset, params, knobs),
            Kind::Requested(Params::DpSgd(params)) => dp_sgd::plan(dataset, params, knobs),
            Kind::Requested(Params::FrankWolfe(params)) => {
                frank_wolfe::plan(dataset, sources, params, knobs)
            }
            Kind::Requested(Params::Gradient(params)) => gradient::plan(dataset, params, knobs),
        }
    }
}
