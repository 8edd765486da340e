//! The release kinds, one module each: how each is priced from public
//! facts, what it checks against the public columns, and how it computes
//! its exact answer and noise once paid for.

pub mod aggregate;
pub mod model;
mod objective;
mod output;
pub mod supplied;
pub mod walr;

use std::sync::Arc;

use dpgate_api_types as api;

use super::{Knobs, Planned, ReleaseError};
use crate::dataset::DatasetRecord;
use supplied::Supplied;

/// A release request's parameters, checked as far as they can be without
/// the dataset; supplied feature vectors are parsed once, here.
pub enum Kind {
    Walr {
        intercept: bool,
    },
    Supplied {
        intercept: bool,
        rows: Arc<Supplied>,
    },
    Aggregate {
        statistics: Vec<String>,
        group_by: Vec<String>,
        mechanism: api::AggregateMechanism,
    },
    OutputPerturbation {
        lambda: f64,
        fit_intercept: bool,
    },
    ObjectivePerturbation {
        lambda: f64,
        fit_intercept: bool,
    },
}

impl Kind {
    /// Takes the request's parameters apart.
    pub fn parse(params: api::ReleaseParams) -> Result<Self, ReleaseError> {
        Ok(match params {
            api::ReleaseParams::Walr(api::WalrParams {
                intercept,
                features: None,
            }) => Kind::Walr { intercept },
            api::ReleaseParams::Walr(api::WalrParams {
                intercept,
                features: Some(rows),
            }) => Kind::Supplied {
                intercept,
                rows: Arc::new(Supplied::parse(rows).map_err(ReleaseError::Invalid)?),
            },
            api::ReleaseParams::Aggregate(api::AggregateParams {
                statistics,
                group_by,
                mechanism,
            }) => Kind::Aggregate {
                statistics,
                group_by,
                mechanism,
            },
            api::ReleaseParams::OutputPerturbation(api::OutputPerturbationParams {
                lambda,
                fit_intercept,
            }) => Kind::OutputPerturbation {
                lambda,
                fit_intercept,
            },
            api::ReleaseParams::ObjectivePerturbation(api::ObjectivePerturbationParams {
                lambda,
                fit_intercept,
            }) => Kind::ObjectivePerturbation {
                lambda,
                fit_intercept,
            },
        })
    }

    /// Prices the release on `dataset` from public facts alone.
    pub fn plan(
        &self,
        dataset: &DatasetRecord,
        knobs: &Knobs,
    ) -> Result<Box<dyn Planned>, ReleaseError> {
        match self {
            Kind::Walr { intercept } => walr::plan(dataset, *intercept, knobs),
            Kind::Supplied { intercept, rows } => {
                supplied::plan(dataset, rows.clone(), *intercept, knobs)
            }
            Kind::Aggregate {
                statistics,
                group_by,
                mechanism,
            } => aggregate::plan(dataset, statistics, group_by, *mechanism, knobs),
            Kind::OutputPerturbation {
                lambda,
                fit_intercept,
            } => output::plan(dataset, *lambda, *fit_intercept, knobs),
            Kind::ObjectivePerturbation {
                lambda,
                fit_intercept,
            } => objective::plan(dataset, *lambda, *fit_intercept, knobs),
        }
    }
}
