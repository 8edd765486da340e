//! `model/output-perturbation`: the exact L2-regularised fit, released with
//! noise of sensitivity 2/(Nλ) + 2γ/λ ([`crate::dp::erm`]).

use async_trait::async_trait;
use dpgate_api_types as api;

use super::model::{self, fit_on};
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::{Mechanism, erm};
use crate::releases::plan::noise;
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// An output-perturbation release, priced.
struct OutputPerturbation {
    price: Price,
    mechanism: Mechanism,
    schema: Schema,
    lambda: f64,
    fit_intercept: bool,
}

/// Prices the release from N, k and λ.
pub fn plan(
    dataset: &DatasetRecord,
    lambda: f64,
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    let (k, n) = (dataset.schema.k(), dataset.n_rows);
    model::check(lambda, k, n, fit_intercept).map_err(ReleaseError::Invalid)?;
    let invalid = |error: crate::dp::DpError| ReleaseError::Invalid(error.to_string());
    let dims = k + usize::from(fit_intercept);
    model::certifiable(dims, n, lambda, 0.0).map_err(ReleaseError::Invalid)?;
    let mechanism =
        model::output_mechanism(knobs.epsilon, knobs.delta, n, lambda, dims).map_err(invalid)?;
    let sensitivity = erm::output_sensitivity(n, lambda, erm::SOLVE_TOLERANCE).map_err(invalid)?;
    let mut price = Price::of(&mechanism, sensitivity, n);
    price.noise.lambda = Some(lambda);
    Ok(Box::new(OutputPerturbation {
        price,
        mechanism,
        schema: dataset.schema.clone(),
        lambda,
        fit_intercept,
    }))
}

#[async_trait]
impl Planned for OutputPerturbation {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let lambda = self.lambda;
        let weights = fit_on(&snapshot, self.fit_intercept, move |design| {
            model::solve(design, lambda, None, None).map(|weights| weights.to_vec())
        })
        .await?;
        let noisy = noise(self.mechanism.clone(), weights).await?;
        Ok(api::ReleaseResult::Model(model::result(
            &noisy,
            &self.schema,
            self.fit_intercept,
            self.lambda,
            &self.mechanism,
            None,
        )))
    }
}
