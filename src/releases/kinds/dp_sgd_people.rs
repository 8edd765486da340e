//! `model/dp-sgd` under privacy unit `user`: batches of people, each
//! person's summed gradient clipped.
//!
//! Under `row` an epoch cuts a shuffle of the N rows into batches of b; a
//! neighbour replaces one row, which lies in one batch. Under `user` a
//! neighbour adds or removes a person, and a shuffle of the people cut
//! into runs would move every other person's batch with them. So each
//! epoch puts every person, all their kept rows, into one of B batches
//! drawn uniformly and independently of everyone else (from the OS
//! CSPRNG): the partition of the people is fixed without looking at any
//! other person, a person meets one batch an epoch, and an epoch costs one
//! step's ε by parallel composition (adaptivity included), E epochs
//! E·ε_e. Each batch releases the exact sum of its people's clipped totals
//! ([`Grid::per_person`]), which one person moves by at most the region's
//! reach ([`Grid::added`]), with norm-Gamma noise of that sensitivity.
//!
//! N is private, and with it how many batches b rows make: the kept rows
//! are counted first with Laplace noise at 1/100 of ε
//! ([`laplace_count`]), and B = ⌈N̂/b⌉ (capped to the steps and noise a
//! release may draw) and each step's divisor N̂/B (a batch's rows on
//! average) are post-processing of N̂. The ledger records the count and the
//! E epochs; the number of steps, E·B, is public once N̂ is.

use async_trait::async_trait;
use dpgate_api_types::{self as api, DpSgdParams};
use rand::RngExt;

use super::counting::laplace_count;
use super::dp_sgd::{self, MAX_NOISE, MAX_STEPS, Sgd};
use super::gradients::{FeatureMap, Grid, Identity, LogisticLabels, people_runs};
use super::iterative::{learned, require_signal};
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::contribution::ContributionBounds;
use crate::dp::contribution::MAX_ROWS;
use crate::dp::fixed::Fixed;
use crate::dp::{DpError, Epsilon, Mechanism, OsNoise, PrivacyLoss, erm_people, per_step_epsilon};
use crate::releases::pacing::StepNoise;
use crate::releases::plan::{most_rows, noise};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};
use crate::snapshots::Columns;

/// A DP-SGD release over people, priced.
struct PeopleSgd {
    price: Price,
    count: Mechanism,
    mechanism: Mechanism,
    grid: Grid,
    sgd: Sgd,
    /// The projection's seed and k′, as under `row`.
    projection: Option<(u64, usize)>,
    schema: Schema,
    epoch_epsilon: Epsilon,
}

/// Prices the release: the count, then E epochs of one norm-Gamma step
/// each, on a grid of people clipped to C.
pub fn plan(
    dataset: &DatasetRecord,
    bounds: &ContributionBounds,
    params: &DpSgdParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    let invalid = |error: DpError| ReleaseError::Invalid(error.to_string());
    let k = dataset.schema.k();
    if !(1..=MAX_ROWS).contains(&params.batch_size) {
        return Err(ReleaseError::Invalid(format!(
            "batch_size must be from 1 to {MAX_ROWS} (got {})",
            params.batch_size
        )));
    }
    dp_sgd::check_settings(params, k)?;
    let projected = params.projection.is_some();
    require_signal(
        dataset,
        params.fit_intercept || projected,
        "nothing to learn",
    )?;
    let (count, rest) = laplace_count(knobs.epsilon, bounds.rows).map_err(invalid)?;
    let epoch_epsilon = per_step_epsilon(rest, knobs.delta, params.epochs, |each| {
        Ok(PrivacyLoss::PureEpsilon {
            epsilon: each.value(),
        })
    })
    .map_err(invalid)?;
    let dims = dp_sgd::mapped(params, k) + usize::from(params.fit_intercept);
    // A logistic residual is at most 1; projected features are not bounded.
    let grid =
        Grid::per_person(params.clip, 1.0, dims, !projected, bounds.rows).map_err(invalid)?;
    let sensitivity = grid.added();
    let most = most_rows(dataset);
    let mechanism = Mechanism::norm_gamma(epoch_epsilon, sensitivity, dims, grid.range(most))
        .map_err(invalid)?;
    let unit = grid.clip();
    let mut price = Price::of_sums(&mechanism, sensitivity * unit, most, unit);
    let epochs = match params.epochs {
        1 => mechanism.loss().clone(),
        count => PrivacyLoss::Composition {
            count,
            each: Box::new(mechanism.loss().clone()),
        },
    };
    price.loss = Some(PrivacyLoss::Sequence {
        parts: vec![count.loss().clone(), epochs],
    });
    let projection = dp_sgd::projection_seed(params);
    Ok(Box::new(PeopleSgd {
        price,
        count,
        mechanism,
        grid,
        sgd: dp_sgd::sgd(params),
        projection,
        schema: dataset.schema.clone(),
        epoch_epsilon,
    }))
}

/// B = ⌈N̂/b⌉ batches an epoch, at least 1 and at most what keeps E·B
/// within [`MAX_STEPS`] and E·B·d within [`MAX_NOISE`].
pub fn batches(normaliser: f64, sgd: &Sgd, dims: usize) -> u64 {
    let epochs = u64::from(sgd.epochs);
    let most = (MAX_STEPS / epochs).min(MAX_NOISE / (epochs * dims as u64));
    let wanted = (normaliser / sgd.batch_size as f64).ceil() as u64;
    wanted.clamp(1, most.max(1))
}

impl Sgd {
    /// E epochs over the people of `columns` (each person's rows
    /// together), from θ = 0: `assign` puts every person in one of
    /// `batches` batches each epoch, and each batch's exact sum of its
    /// people's clipped totals on `grid` is released by `release`
    /// (step t, sum); step t moves θ by −(η₀/√t)·(λθ + C′·ŝ/r), r =
    /// `rows_per_batch`. The last iterate, intercept first.
    pub fn run_people(
        &self,
        columns: &Columns,
        map: &impl FeatureMap,
        grid: &Grid,
        (batches, rows_per_batch): (usize, f64),
        mut assign: impl FnMut(&mut [usize]),
        mut release: impl FnMut(u64, &Fixed) -> Result<Vec<f64>, DpError>,
    ) -> Result<Vec<f64>, Failure> {
        let people = people_runs(columns.users()).map_err(Failure::Corrupt)?;
        let mut theta = vec![0.0; map.dims() + usize::from(self.fit_intercept)];
        let (mut batch_of, mut members) = (vec![0; people.len()], vec![Vec::new(); batches]);
        let loss = LogisticLabels(columns.labels());
        let mut step = 0u64;
        for _ in 0..self.epochs {
            assign(&mut batch_of);
            members.iter_mut().for_each(Vec::clear);
            for (run, &batch) in people.iter().zip(&batch_of) {
                members[batch].push(run.clone());
            }
            for batch in &members {
                let exact = grid
                    .sum_people(columns, batch, map, &loss, &theta, self.fit_intercept)
                    .map_err(Failure::Corrupt)?;
                let released = release(step, &Fixed::normalised(exact))?;
                step += 1;
                self.descend(&mut theta, &released, step, rows_per_batch / grid.clip());
            }
        }
        Ok(theta)
    }
}

#[async_trait]
impl Planned for PeopleSgd {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let PeopleSgd {
            count,
            mechanism,
            grid,
            sgd,
            projection,
            schema,
            epoch_epsilon,
            ..
        } = *self;
        let columns = snapshot.columns().await?.ok_or(Failure::Unheld)?;
        let noisy_rows = noise(count, vec![columns.len() as f64]).await?[0];
        let normaliser = erm_people::normaliser(noisy_rows);
        let features = schema.k();
        let dims = projection.map_or(features, |(_, dims)| dims) + usize::from(sgd.fit_intercept);
        let batches = batches(normaliser, &sgd, dims);
        let steps = batches * u64::from(sgd.epochs);
        let noise_scale = mechanism.noise_scale() * grid.clip();
        let projection = dp_sgd::projected(projection, features).await?;
        let (ran, map) = (sgd.clone(), projection.clone());
        let theta = learned(move || {
            let mut noise = StepNoise::new(&mechanism, steps);
            let mut rng = OsNoise::new();
            // The cast is exact: batches ≤ MAX_STEPS.
            let shape = (batches as usize, normaliser / batches as f64);
            let assign = |batch_of: &mut [usize]| {
                for batch in batch_of {
                    *batch = rng.random_range(0..shape.0);
                }
            };
            let release = |_, exact: &Fixed| {
                let drawn = noise.next().ok_or(DpError::NoSteps)?;
                mechanism.add_fixed(exact, &drawn)
            };
            match &map {
                Some(projection) => {
                    ran.run_people(&columns, projection, &grid, shape, assign, release)
                }
                None => {
                    let identity = Identity(columns.shape().features);
                    ran.run_people(&columns, &identity, &grid, shape, assign, release)
                }
            }
        })
        .await?;
        let mut result = dp_sgd::result(
            &theta,
            &sgd,
            projection.as_ref(),
            &schema,
            steps,
            epoch_epsilon,
            noise_scale,
        );
        result.noisy_rows = Some(noisy_rows);
        Ok(api::ReleaseResult::DpSgd(result))
    }
}

#[cfg(test)]
#[path = "dp_sgd_people_tests.rs"]
mod tests;
