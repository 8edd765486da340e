//! `model/objective-perturbation` under privacy unit `user`: the kept rows
//! are counted with noise first (N̂), then CMS11's objective is solved
//! with the loss divided by max(N̂, N) and b by N̂, b sized for a person
//! of up to m rows ([`crate::dp::erm_people`], with the proof). Pure ε:
//! the count takes 1/100 of it, the output noise 1/100 of the rest.
//!
//! N̂ is rounded down onto a grid of 2^{1/16} steps before it normalises
//! anything, so that every normaliser a release can use is checked before
//! the debit, and raised to the smallest of them from which the certified
//! solver and the output lattice hold at every larger one (a small N̂ makes
//! b/N̂ and with it the weights' range too large for the noise that covers
//! the solver's γ): a public floor, from ε, m, d and λ alone. A request
//! that cannot be released even at N̂ = 2³⁶ is refused before the debit.

use async_trait::async_trait;
use dpgate_api_types as api;

use super::counting::laplace_count;
use super::model::{self, ObjectivePlan};
use super::output_people::{self, Choice, most_fitted};
use super::ridge;
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::contribution::{ContributionBounds, MAX_ROWS};
use crate::dp::erm::Neighbours;
use crate::dp::erm_people;
use crate::dp::{Epsilon, Mechanism, OsNoise, PrivacyLoss};
use crate::releases::plan::{most_rows, noise};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// Grid steps per doubling of N̂: rounding down loses under 4.3 % of it.
const STEPS_PER_DOUBLING: u32 = 16;

/// Every normaliser a release can use: 2^{j/16} from 1 to 2³⁶.
fn normalisers() -> impl DoubleEndedIterator<Item = f64> {
    let last = STEPS_PER_DOUBLING * MAX_ROWS.ilog2();
    (0..=last).map(|step| 2f64.powf(f64::from(step) / f64::from(STEPS_PER_DOUBLING)))
}

/// The noisy count as the fit is normalised by: clamped to [1, 2³⁶]
/// ([`erm_people::normaliser`]), rounded down onto [`normalisers`], and
/// raised to `floor`.
pub fn on_grid(noisy_rows: f64, floor: f64) -> f64 {
    let clamped = erm_people::normaliser(noisy_rows);
    normalisers()
        .take_while(|&normaliser| normaliser <= clamped)
        .last()
        .unwrap_or(1.0)
        .max(floor)
}

/// The smallest of [`normalisers`] from which every larger one can be
/// released at `lambda`, and the plan there; why not at 2³⁶ if none can.
fn releasable_from(
    epsilon: Epsilon,
    rows_per_user: u32,
    lambda: f64,
    dims: usize,
) -> Result<(f64, ObjectivePlan), String> {
    let (mut lowest, mut refusal) = (None, String::new());
    for normaliser in normalisers().rev() {
        match at(epsilon, normaliser, rows_per_user, lambda, dims) {
            Ok(plan) => lowest = Some((normaliser, plan)),
            Err(error) => {
                refusal = error;
                break;
            }
        }
    }
    lowest.ok_or_else(|| format!("{refusal} (with {rows_per_user} rows per user)"))
}

/// The largest λ `"auto"` can choose ([`ridge::grid`]): its floor
/// ([`releasable_from`]) is the lowest of any λ's, since a larger λ only
/// lowers the solver's floor on λ, b's scale and the weights' range.
const LARGEST_AUTO: f64 = 1e2;

/// The plan at `normaliser` and `lambda`, if the certified solver can fit
/// it for every dataset a fit can hold and the lattice can noise it.
fn at(
    epsilon: Epsilon,
    normaliser: f64,
    rows_per_user: u32,
    lambda: f64,
    dims: usize,
) -> Result<ObjectivePlan, String> {
    model::check_lambda(lambda)?;
    let neighbours = Neighbours::People {
        normaliser,
        rows_per_user,
    };
    let plan = ObjectivePlan::between(epsilon, neighbours, lambda, dims)
        .map_err(|error| error.to_string())?;
    model::certifiable(
        dims,
        most_fitted(dims),
        plan.whole_lambda(),
        plan.params.linear_bound,
    )?;
    Ok(plan)
}

/// The release, priced.
struct PeopleObjective {
    price: Price,
    count: Mechanism,
    /// The request's ε, and what is left of it after the count.
    requested: Epsilon,
    epsilon: Epsilon,
    /// The smallest normaliser the fit uses ([`releasable_from`]).
    floor: f64,
    rows_per_user: u32,
    choice: Choice,
    schema: Schema,
    fit_intercept: bool,
}

/// Prices the release: the count's Laplace noise and the rest of ε; λ
/// (fixed, or the largest `auto` may pick) must be releasable from some
/// normaliser on ([`releasable_from`]).
pub fn plan(
    dataset: &DatasetRecord,
    bounds: &ContributionBounds,
    choice: Choice,
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    knobs.pure("model/objective-perturbation")?;
    let invalid = |error: String| ReleaseError::Invalid(error);
    let k = dataset.schema.k();
    model::check_shape(k, 1, fit_intercept).map_err(invalid)?;
    let dims = model::columns(k, fit_intercept);
    let rows_per_user = bounds.rows;
    let (count, epsilon) =
        laplace_count(knobs.epsilon, rows_per_user).map_err(|error| invalid(error.to_string()))?;
    let checked = match choice {
        Choice::Fixed(lambda) => lambda,
        Choice::Auto => LARGEST_AUTO,
    };
    let (floor, at_floor) =
        releasable_from(epsilon, rows_per_user, checked, dims).map_err(invalid)?;
    Ok(Box::new(PeopleObjective {
        price: price(
            &count,
            &at_floor,
            epsilon,
            rows_per_user,
            most_rows(dataset),
            choice,
        ),
        count,
        requested: knobs.epsilon,
        epsilon,
        floor,
        rows_per_user,
        choice,
        schema: dataset.schema.clone(),
        fit_intercept,
    }))
}

/// What a dry run reports before N̂ and λ are known: b's shift 2m and
/// the largest scale b can have, 4m/ε_p (ε′ ≥ ε_p/2 at every N̂ and λ),
/// on the output lattice at the floor.
fn price(
    count: &Mechanism,
    at_floor: &ObjectivePlan,
    rest: Epsilon,
    rows_per_user: u32,
    n: u64,
    choice: Choice,
) -> Price {
    let params = &at_floor.params;
    let shift = 2.0 * f64::from(rows_per_user);
    let scale = 2.0 * shift / params.epsilon_objective;
    let dims = at_floor.output.dims();
    Price {
        loss: Some(PrivacyLoss::Sequence {
            parts: vec![
                count.loss().clone(),
                PrivacyLoss::PureEpsilon {
                    epsilon: rest.value(),
                },
            ],
        }),
        sensitivity: shift,
        // b's norm is Gamma(d, scale): each coordinate's std √(d + 1)·scale.
        sigma: ((dims + 1) as f64).sqrt() * scale,
        noise: api::NoiseDetails {
            mechanism: "objective_perturbation".to_owned(),
            scale,
            grid: at_floor.output.grid(),
            accounted_sensitivity: shift,
            sigma_classic: None,
            lambda: match choice {
                Choice::Fixed(lambda) => Some(lambda),
                Choice::Auto => None,
            },
        },
        n,
        epsilon: None,
    }
}

/// λ of [`ridge::grid`] with the least excess-risk bound at N̂, never
/// above output perturbation's choice there where that is releasable too
/// (as under unit `row`, [`ridge::auto`]).
fn auto(requested: Epsilon, rest: Epsilon, normaliser: f64, m: u32, dims: usize) -> Option<f64> {
    let own = ridge::least_risk_by(|lambda| {
        let plan = at(rest, normaliser, m, lambda, dims).ok()?;
        Some(ridge::objective_risk(&plan, normaliser, dims))
    })?;
    match output_people::auto_pure(requested, normaliser, m, dims) {
        Some(output) if output < own && at(rest, normaliser, m, output, dims).is_ok() => {
            Some(output)
        }
        _ => Some(own),
    }
}

#[async_trait]
impl Planned for PeopleObjective {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let dims = model::columns(self.schema.k(), self.fit_intercept);
        // The fit copies every kept row; the stored rows bound them.
        if snapshot.dataset().n_rows > most_fitted(dims) {
            return Err(Failure::Unheld);
        }
        let design = model::design(&snapshot, self.fit_intercept).await?;
        let rows = design.y.len();
        let noisy_rows = noise(self.count.clone(), vec![rows as f64]).await?[0];
        let normaliser = on_grid(noisy_rows, self.floor);
        let m = self.rows_per_user;
        let lambda = match self.choice {
            Choice::Fixed(lambda) => lambda,
            Choice::Auto => auto(self.requested, self.epsilon, normaliser, m, dims)
                .ok_or_else(|| Failure::Corrupt(format!("no λ to release at N̂ = {normaliser}")))?,
        };
        let plan = at(self.epsilon, normaliser, m, lambda, dims).map_err(Failure::Corrupt)?;
        let solver = plan.clone();
        let solved = tokio::task::spawn_blocking(move || {
            if rows == 0 {
                // −b/(N̂Λ): no solve, so no time that depends on b.
                solver.solve_perturbed(&design, &mut OsNoise::new())
            } else {
                solver.solve_held(&design)
            }
        })
        .await??;
        let weights = noise(plan.output.clone(), solved.to_vec()).await?;
        let mut result = model::result(
            &weights,
            &self.schema,
            self.fit_intercept,
            lambda,
            &plan.output,
            Some(&plan.params),
        );
        result.noisy_rows = Some(noisy_rows);
        if let Some(details) = result.objective.as_mut() {
            details.normaliser = Some(normaliser);
        }
        Ok(api::ReleaseResult::Model(result))
    }
}

#[cfg(test)]
#[path = "objective_people_tests.rs"]
mod tests;
