//! `model/objective-perturbation`: CMS11 Algorithm 2, with output noise
//! that covers the inexact solve ([`crate::dp::erm`]). Pure ε only.

use async_trait::async_trait;
use dpgate_api_types as api;

use super::model::{self, ObjectivePlan, fit_on};
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::PrivacyLoss;
use crate::releases::plan::noise;
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// The L2 sensitivity of objective perturbation's perturbed term: the
/// gradient of one example's loss has norm at most 1, so replacing it moves
/// the sum by at most 2 (CMS11).
const OBJECTIVE_SENSITIVITY: f64 = 2.0;

/// An objective-perturbation release, priced.
struct ObjectivePerturbation {
    price: Price,
    plan: ObjectivePlan,
    schema: Schema,
    fit_intercept: bool,
}

/// Prices the release from ε, N, k and λ.
pub fn plan(
    dataset: &DatasetRecord,
    lambda: f64,
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    knobs.pure("model/objective-perturbation")?;
    let (k, n) = (dataset.schema.k(), dataset.n_rows);
    model::check(lambda, k, n, fit_intercept).map_err(ReleaseError::Invalid)?;
    let dims = k + usize::from(fit_intercept);
    let plan = ObjectivePlan::new(knobs.epsilon, n, lambda, dims)
        .map_err(|error| ReleaseError::Invalid(error.to_string()))?;
    model::certifiable(
        dims,
        n,
        lambda + plan.params.extra_regulariser,
        plan.params.linear_bound,
    )
    .map_err(ReleaseError::Invalid)?;
    let b_scale = plan.params.b_scale;
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
            grid: plan.output.grid(),
            accounted_sensitivity: OBJECTIVE_SENSITIVITY,
            sigma_classic: None,
            lambda: Some(lambda),
        },
        n,
        epsilon: None,
    };
    Ok(Box::new(ObjectivePerturbation {
        price,
        plan,
        schema: dataset.schema.clone(),
        fit_intercept,
    }))
}

#[async_trait]
impl Planned for ObjectivePerturbation {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let plan = self.plan.clone();
        let solved = fit_on(&snapshot, self.fit_intercept, move |design| {
            plan.solve_held(design).map(|weights| weights.to_vec())
        })
        .await?;
        let weights = noise(self.plan.output.clone(), solved).await?;
        Ok(api::ReleaseResult::Model(model::result(
            &weights,
            &self.schema,
            self.fit_intercept,
            self.plan.lambda,
            &self.plan.output,
            Some(&self.plan.params),
        )))
    }
}
