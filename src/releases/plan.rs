//! Planning a release against one snapshot of a dataset: its exact answer,
//! its sensitivity, the mechanism and privacy loss to debit, and the draw
//! that makes the released numbers after the debit.

use dpgate_api_types as api;

use super::aggregate::{self, Calibration, Norm, Query};
use super::model::{self, Design, DesignBuilder, ObjectivePlan};
use super::scan::scan;
use super::supplied::Supplied;
use super::{ReleaseError, walr};
use crate::dataset::DatasetRecord;
use crate::dp::{self, Delta, Epsilon, Mechanism, OsNoise, PrivacyLoss, erm};
use crate::store::Store;

/// Makes the released numbers once the debit has committed.
type Draw = Box<dyn FnOnce(&mut OsNoise) -> Result<api::ReleaseResult, String> + Send>;

/// What a release costs and how noisy it is: everything its response says
/// except the released numbers.
pub struct Price {
    /// What the ledger records; `None` when everything released is public
    /// under the privacy unit (nothing is spent).
    pub loss: Option<PrivacyLoss>,
    /// The declared sensitivity (before lattice rounding).
    pub sensitivity: f64,
    /// The std of the noise on each released number.
    pub sigma: f64,
    pub noise: api::NoiseDetails,
    pub n: u64,
}

impl Price {
    /// The price of numbers that are all public: nothing.
    fn free(n: u64) -> Price {
        Price {
            loss: None,
            sensitivity: 0.0,
            sigma: 0.0,
            noise: api::NoiseDetails {
                mechanism: "none".to_owned(),
                scale: 0.0,
                grid: 0.0,
                accounted_sensitivity: 0.0,
                sigma_classic: None,
            },
            n,
        }
    }

    fn of(mechanism: &Mechanism, sensitivity: f64, n: u64) -> Price {
        Price {
            loss: Some(mechanism.loss().clone()),
            sensitivity,
            sigma: mechanism.noise_std(),
            noise: details(mechanism),
            n,
        }
    }
}

/// A release planned against one snapshot of the dataset.
pub struct Plan {
    pub price: Price,
    pub draw: Draw,
}

/// The parameters of a release's knobs, as checked by [`super::release`].
pub struct Knobs {
    pub epsilon: Epsilon,
    pub delta: Delta,
    pub max_groups: usize,
    /// A dry run: the price is all that is needed, so no rows are read
    /// and no model is fitted.
    pub price_only: bool,
}

fn invalid(error: dp::DpError) -> ReleaseError {
    ReleaseError::Invalid(error.to_string())
}

fn details(mechanism: &Mechanism) -> api::NoiseDetails {
    api::NoiseDetails {
        mechanism: mechanism.name().to_owned(),
        scale: mechanism.noise_scale(),
        grid: mechanism.grid(),
        accounted_sensitivity: mechanism.accounted_sensitivity(),
        sigma_classic: None,
    }
}

impl Plan {
    /// A plan made for its price alone (a dry run): its draw is never
    /// called.
    fn priced(price: Price) -> Plan {
        Plan {
            price,
            draw: Box::new(|_| Err("a dry run has no result".to_owned())),
        }
    }

    /// `mechanism`'s noise on `exact`, then `shape` into the result.
    fn noised(
        mechanism: Mechanism,
        sensitivity: f64,
        n: u64,
        exact: Vec<f64>,
        shape: impl FnOnce(Vec<f64>) -> api::ReleaseResult + Send + 'static,
    ) -> Plan {
        Plan {
            price: Price::of(&mechanism, sensitivity, n),
            draw: Box::new(move |rng| {
                let noisy = mechanism
                    .release(&exact, rng)
                    .map_err(|error| error.to_string())?;
                if noisy.iter().any(|value| !value.is_finite()) {
                    return Err("a released value is not finite".to_owned());
                }
                Ok(shape(noisy))
            }),
        }
    }
}

/// Plans `request` on `dataset`; `None` if rows arrived while it was read
/// (plan again on a fresh snapshot).
pub async fn plan(
    store: &dyn Store,
    dataset: &DatasetRecord,
    request: &api::ReleaseRequest,
    knobs: &Knobs,
) -> Result<Option<Plan>, ReleaseError> {
    match request {
        api::ReleaseRequest::Walr {
            intercept,
            features,
            ..
        } if !features.is_empty() => {
            supplied_plan(store, dataset, features, *intercept, knobs).await
        }
        api::ReleaseRequest::Walr { intercept, .. } => {
            walr_plan(dataset, *intercept, knobs).map(Some)
        }
        api::ReleaseRequest::Aggregate {
            statistics,
            group_by,
            mechanism,
            ..
        } => aggregate_plan(store, dataset, statistics, group_by, *mechanism, knobs).await,
        api::ReleaseRequest::OutputPerturbation {
            lambda,
            fit_intercept,
            ..
        } => output_plan(store, dataset, *lambda, *fit_intercept, knobs).await,
        api::ReleaseRequest::ObjectivePerturbation {
            lambda,
            fit_intercept,
            ..
        } => objective_plan(store, dataset, *lambda, *fit_intercept, knobs).await,
    }
}

fn check_walr(dataset: &DatasetRecord, knobs: &Knobs) -> Result<(), ReleaseError> {
    if knobs.delta == Delta::ZERO {
        return Err(ReleaseError::Invalid(
            "walr needs a delta in (0, 1): it uses the Gaussian mechanism".to_owned(),
        ));
    }
    if dataset.n_rows == 0 {
        return Err(ReleaseError::Invalid(
            "the dataset has no rows yet".to_owned(),
        ));
    }
    Ok(())
}

fn walr_plan(
    dataset: &DatasetRecord,
    intercept: bool,
    knobs: &Knobs,
) -> Result<Plan, ReleaseError> {
    check_walr(dataset, knobs)?;
    let exact = walr::exact(&dataset.stats, dataset.n_rows, intercept);
    let sensitivity = walr::sensitivity(
        dataset.privacy_unit,
        dataset.schema.k(),
        dataset.stats.max_norm_squared,
        dataset.n_rows,
        intercept,
    );
    if sensitivity == 0.0 {
        return Err(ReleaseError::Invalid(
            "every feature vector is zero and the intercept is off: nothing to release".to_owned(),
        ));
    }
    let mechanism = Mechanism::gaussian(knobs.epsilon, knobs.delta, sensitivity, exact.len())
        .map_err(invalid)?;
    Ok(Plan::noised(
        mechanism,
        sensitivity,
        dataset.n_rows,
        exact,
        move |noisy| api::ReleaseResult::Walr(walr::result(noisy, intercept)),
    ))
}

/// WALR over the analyst's own vectors. Unknown row ids are refused even
/// on a dry run, so that a dry run refuses exactly when the release would.
async fn supplied_plan(
    store: &dyn Store,
    dataset: &DatasetRecord,
    rows: &[api::SuppliedRow],
    intercept: bool,
    knobs: &Knobs,
) -> Result<Option<Plan>, ReleaseError> {
    if dataset.privacy_unit == api::PrivacyUnit::Row {
        return Err(ReleaseError::Invalid(
            "supplied features need the privacy unit `label`: under `row`, which row ids exist \
             is private"
                .to_owned(),
        ));
    }
    check_walr(dataset, knobs)?;
    let supplied = Supplied::parse(rows).map_err(ReleaseError::Invalid)?;
    let sensitivity = supplied.sensitivity(intercept);
    if sensitivity == 0.0 {
        return Err(ReleaseError::Invalid(
            "every supplied vector is zero and the intercept is off: nothing to release".to_owned(),
        ));
    }
    let mechanism = Mechanism::gaussian(
        knobs.epsilon,
        knobs.delta,
        sensitivity,
        supplied.dims(intercept),
    )
    .map_err(invalid)?;
    let mut join = supplied.join();
    if !scan(store, dataset, |row| {
        join.add(row);
        Ok(())
    })
    .await?
    {
        return Ok(None);
    }
    let exact = join.exact(intercept).map_err(ReleaseError::Invalid)?;
    let n = rows.len() as u64;
    if knobs.price_only {
        return Ok(Some(Plan::priced(Price::of(&mechanism, sensitivity, n))));
    }
    Ok(Some(Plan::noised(
        mechanism,
        sensitivity,
        n,
        exact,
        move |noisy| api::ReleaseResult::Walr(walr::result(noisy, intercept)),
    )))
}

async fn aggregate_plan(
    store: &dyn Store,
    dataset: &DatasetRecord,
    statistics: &[String],
    group_by: &[String],
    kind: api::AggregateMechanism,
    knobs: &Knobs,
) -> Result<Option<Plan>, ReleaseError> {
    let norm = match (kind, knobs.delta == Delta::ZERO) {
        (api::AggregateMechanism::Gaussian, false) => Norm::L2,
        (api::AggregateMechanism::Laplace, true) => Norm::L1,
        (api::AggregateMechanism::Gaussian, true) => {
            return Err(ReleaseError::Invalid(
                "the gaussian mechanism needs a delta in (0, 1); use \"mechanism\": \"laplace\" \
                 for pure ε"
                    .to_owned(),
            ));
        }
        (api::AggregateMechanism::Laplace, false) => {
            return Err(ReleaseError::Invalid(
                "the laplace mechanism is pure ε: omit delta or set it to 0".to_owned(),
            ));
        }
    };
    if dataset.n_rows == 0 {
        return Err(ReleaseError::Invalid(
            "the dataset has no rows yet".to_owned(),
        ));
    }
    let schema = &dataset.schema;
    let query = Query::parse(schema, statistics, group_by, knobs.max_groups)
        .map_err(ReleaseError::Invalid)?;
    let calibration = Calibration::new(&query, dataset.privacy_unit, schema, norm);
    let mechanism = if calibration.public() {
        None
    } else {
        let dims = query.cells() * calibration.private_quantities();
        let sensitivity = calibration.sensitivity;
        Some(
            match norm {
                Norm::L2 => Mechanism::gaussian(knobs.epsilon, knobs.delta, sensitivity, dims),
                Norm::L1 => Mechanism::laplace(knobs.epsilon, sensitivity, dims),
            }
            .map_err(invalid)?,
        )
    };
    if knobs.price_only {
        let price = mechanism.as_ref().map_or_else(
            || Price::free(dataset.n_rows),
            |mechanism| Price::of(mechanism, calibration.sensitivity, dataset.n_rows),
        );
        return Ok(Some(Plan::priced(price)));
    }
    let mut tally = query.tally();
    if !scan(store, dataset, |row| tally.add(&query, row)).await? {
        return Ok(None);
    }
    let schema = schema.clone();
    let Some(mechanism) = mechanism else {
        let groups = aggregate::groups(&query, &schema, &calibration, &tally, &[], 0.0);
        return Ok(Some(Plan {
            price: Price::free(dataset.n_rows),
            draw: Box::new(move |_| {
                Ok(api::ReleaseResult::Aggregate(api::AggregateResult {
                    groups,
                }))
            }),
        }));
    };
    let exact = calibration.private_values(&tally);
    let noise_std = mechanism.noise_std();
    Ok(Some(Plan::noised(
        mechanism,
        calibration.sensitivity,
        dataset.n_rows,
        exact,
        move |noisy| {
            api::ReleaseResult::Aggregate(api::AggregateResult {
                groups: aggregate::groups(&query, &schema, &calibration, &tally, &noisy, noise_std),
            })
        },
    )))
}

/// The training set of a model, or `None` if rows arrived during the scan.
async fn design(
    store: &dyn Store,
    dataset: &DatasetRecord,
    fit_intercept: bool,
) -> Result<Option<Design>, ReleaseError> {
    let mut builder = DesignBuilder::new(dataset.schema.k(), dataset.n_rows, fit_intercept);
    if !scan(store, dataset, |row| {
        builder.push_row(row);
        Ok(())
    })
    .await?
    {
        return Ok(None);
    }
    builder.build().map(Some).map_err(ReleaseError::Internal)
}

async fn output_plan(
    store: &dyn Store,
    dataset: &DatasetRecord,
    lambda: f64,
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Option<Plan>, ReleaseError> {
    let (k, n) = (dataset.schema.k(), dataset.n_rows);
    model::check(lambda, k, n, fit_intercept).map_err(ReleaseError::Invalid)?;
    let dims = k + usize::from(fit_intercept);
    let mechanism =
        model::output_mechanism(knobs.epsilon, knobs.delta, n, lambda, dims).map_err(invalid)?;
    let sensitivity = erm::output_sensitivity(n, lambda, erm::SOLVE_TOLERANCE).map_err(invalid)?;
    if knobs.price_only {
        return Ok(Some(Plan::priced(Price::of(&mechanism, sensitivity, n))));
    }
    let Some(design) = design(store, dataset, fit_intercept).await? else {
        return Ok(None);
    };
    let span = tracing::Span::current();
    let weights = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        model::solve(&design, lambda, None)
    })
    .await
    .map_err(|error| ReleaseError::Internal(format!("the fit task failed: {error}")))?
    .map_err(|error| ReleaseError::Internal(error.to_string()))?;
    let schema = dataset.schema.clone();
    let noise = mechanism.clone();
    Ok(Some(Plan::noised(
        mechanism,
        sensitivity,
        n,
        weights.to_vec(),
        move |noisy| {
            api::ReleaseResult::Model(model::result(
                &noisy,
                &schema,
                fit_intercept,
                lambda,
                &noise,
                None,
            ))
        },
    )))
}

/// The L2 sensitivity of objective perturbation's perturbed term: the
/// gradient of one example's loss has norm at most 1, so replacing it moves
/// the sum by at most 2 (CMS11).
const OBJECTIVE_SENSITIVITY: f64 = 2.0;

async fn objective_plan(
    store: &dyn Store,
    dataset: &DatasetRecord,
    lambda: f64,
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Option<Plan>, ReleaseError> {
    if knobs.delta != Delta::ZERO {
        return Err(ReleaseError::Invalid(
            "model/objective-perturbation is pure ε-DP: omit delta or set it to 0".to_owned(),
        ));
    }
    let (k, n) = (dataset.schema.k(), dataset.n_rows);
    model::check(lambda, k, n, fit_intercept).map_err(ReleaseError::Invalid)?;
    let dims = k + usize::from(fit_intercept);
    let objective = ObjectivePlan::new(knobs.epsilon.value(), n, lambda, dims).map_err(invalid)?;
    let b_scale = objective.params.b_scale;
    let price = Price {
        loss: Some(PrivacyLoss::PureEpsilon {
            epsilon: knobs.epsilon.value(),
        }),
        sensitivity: OBJECTIVE_SENSITIVITY,
        // b's norm is Gamma(d, 2/ε′): each coordinate has std √(d + 1)·2/ε′.
        sigma: ((dims + 1) as f64).sqrt() * b_scale,
        noise: api::NoiseDetails {
            mechanism: "objective_perturbation".to_owned(),
            scale: b_scale,
            grid: objective.output.grid(),
            accounted_sensitivity: OBJECTIVE_SENSITIVITY,
            sigma_classic: None,
        },
        n,
    };
    if knobs.price_only {
        return Ok(Some(Plan::priced(price)));
    }
    let Some(design) = design(store, dataset, fit_intercept).await? else {
        return Ok(None);
    };
    let schema = dataset.schema.clone();
    Ok(Some(Plan {
        price,
        draw: Box::new(move |rng| {
            let weights = objective
                .run(&design, rng)
                .map_err(|error| error.to_string())?;
            Ok(api::ReleaseResult::Model(model::result(
                &weights,
                &schema,
                fit_intercept,
                lambda,
                &objective.output,
                Some(&objective.params),
            )))
        }),
    }))
}
