//! `"lambda": {"select": [λ₁, …, λ_m]}`: every candidate trained
//! privately, the best picked privately, one release.
//!
//! The rows are split by index alone: every tenth row (index ≡ 9 mod 10)
//! is held out, the rest train. A neighbour (one row replaced, or one
//! label changed, in place) touches one part only, so the release costs
//! the most either part costs (`PrivacyLoss::Parallel`):
//!
//! - **training rows**: the m candidates, each output or objective
//!   perturbation at N_train, compose to the request's ε (⌊ε/m⌋ each, in
//!   ledger units; with δ > 0, Gaussian output noise whose m draws compose
//!   exactly to the request's (ε, δ)). Only the picked one leaves the
//!   server, but all m count.
//! - **held-out rows**: report-noisy-max (here noisy-min) over each
//!   candidate's count of misclassified held-out rows, at the request's ε.
//!   Given the m models (fixed inputs for a held-out row), one held-out
//!   row moves every count by at most 1, in either direction: the Laplace
//!   selector of `crate::dp::select` with Δ = 1 is ε-DP.
//!
//! Everything priced here (the split's sizes, each candidate's noise, the
//! floor checks at N_train) is a function of N, k, ε, δ and the
//! candidates: nothing is read before the debit, and no candidate can fail
//! a certified fit after it.

use async_trait::async_trait;
use dpgate_api_types as api;
use ndarray::{Array2, Axis};

use super::model::{self, Design, ObjectivePlan, fit_on};
use super::ridge::Learner;
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::{
    Delta, DpError, Epsilon, Mechanism, OsNoise, PrivacyLoss, SelectionRule, Selector, erm,
};
use crate::releases::{Failure, Knobs, ModelError, Planned, Price, ReleaseError, Snapshot, pacing};

/// One row in this many is held out to score the candidates.
pub const HOLDOUT_STRIDE: u64 = 10;

/// Whether the row at `index` (snapshot order) is held out.
pub fn held_out(index: usize) -> bool {
    index as u64 % HOLDOUT_STRIDE == HOLDOUT_STRIDE - 1
}

/// How a candidate is trained and noised.
#[derive(Debug, Clone)]
enum Trainer {
    Output(Mechanism),
    Objective(ObjectivePlan),
}

#[derive(Debug, Clone)]
struct Candidate {
    lambda: f64,
    trainer: Trainer,
    /// What training this one candidate costs.
    loss: PrivacyLoss,
}

impl Candidate {
    fn plan(
        learner: Learner,
        lambda: f64,
        knobs: &Knobs,
        (share, count): (Epsilon, u32),
        rows: u64,
        dims: usize,
    ) -> Result<Candidate, String> {
        model::check_lambda(lambda)?;
        let refused = |error: DpError| format!("λ = {lambda}: {error}");
        let (trainer, loss) = match learner {
            Learner::Output => {
                model::certifiable(dims, rows, lambda, 0.0)?;
                let mechanism = if knobs.delta == Delta::ZERO {
                    model::output_mechanism(share, Delta::ZERO, rows, lambda, dims)
                } else {
                    let sensitivity = erm::output_sensitivity(rows, lambda, erm::SOLVE_TOLERANCE)
                        .map_err(refused)?;
                    Mechanism::gaussian_steps(
                        knobs.epsilon,
                        knobs.delta,
                        sensitivity,
                        dims,
                        count,
                        model::weight_bound(lambda, 0.0),
                    )
                };
                let mechanism = mechanism.map_err(refused)?;
                let loss = match mechanism.loss() {
                    PrivacyLoss::Composition { each, .. } => (**each).clone(),
                    one => one.clone(),
                };
                (Trainer::Output(mechanism), loss)
            }
            Learner::Objective => {
                let plan = ObjectivePlan::new(share, rows, lambda, dims).map_err(refused)?;
                let whole = lambda + plan.params.extra_regulariser;
                model::certifiable(dims, rows, whole, plan.params.linear_bound)?;
                let loss = PrivacyLoss::PureEpsilon {
                    epsilon: share.value(),
                };
                (Trainer::Objective(plan), loss)
            }
        };
        Ok(Candidate {
            lambda,
            trainer,
            loss,
        })
    }

    /// The noise on the released weights.
    fn output(&self) -> &Mechanism {
        match &self.trainer {
            Trainer::Output(mechanism) => mechanism,
            Trainer::Objective(plan) => &plan.output,
        }
    }

    /// The private weights (scaled space), on a blocking thread.
    fn train(&self, design: &Design) -> Result<Vec<f64>, ModelError> {
        let exact = match &self.trainer {
            Trainer::Output(_) => model::solve(design, self.lambda, None, None)?,
            Trainer::Objective(plan) => plan.solve_held(design)?,
        };
        let output = self.output();
        Ok(pacing::paced(pacing::budget(output), || {
            output.release(&exact.to_vec(), &mut OsNoise::new())
        })?)
    }
}

/// A selection among candidates, priced.
struct LambdaSelect {
    price: Price,
    candidates: Vec<Candidate>,
    selector: Selector,
    schema: Schema,
    fit_intercept: bool,
    candidate_epsilon: f64,
    selection_epsilon: f64,
    rows: (u64, u64),
}

/// Prices the selection from N, k, ε, δ and the candidates.
pub fn plan(
    learner: Learner,
    dataset: &DatasetRecord,
    candidates: &[f64],
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    Ok(Box::new(priced(
        learner,
        dataset,
        candidates,
        fit_intercept,
        knobs,
    )?))
}

fn priced(
    learner: Learner,
    dataset: &DatasetRecord,
    candidates: &[f64],
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<LambdaSelect, ReleaseError> {
    let invalid = ReleaseError::Invalid;
    if learner == Learner::Objective {
        knobs.pure("model/objective-perturbation")?;
    }
    let count = candidates.len();
    if !(api::MIN_CANDIDATES..=api::MAX_CANDIDATES).contains(&count) {
        return Err(invalid(format!(
            "lambda.select names {} to {} candidates (got {count})",
            api::MIN_CANDIDATES,
            api::MAX_CANDIDATES
        )));
    }
    let mut sorted = candidates.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(invalid("lambda.select's candidates must differ".to_owned()));
    }
    let (k, n) = (dataset.schema.k(), dataset.n_rows);
    model::check_shape(k, n, fit_intercept).map_err(invalid)?;
    let holdout = n / HOLDOUT_STRIDE;
    if holdout == 0 {
        return Err(invalid(format!(
            "a selection holds out every {HOLDOUT_STRIDE}th row: it needs at least \
             {HOLDOUT_STRIDE} rows (the dataset has {n})"
        )));
    }
    let training = n - holdout;
    let dims = model::columns(k, fit_intercept);
    // Exact: at most MAX_CANDIDATES candidates.
    let count = count as u32;
    let share = Epsilon::from_units(knobs.epsilon.units() / u64::from(count));
    let smallest = match learner {
        Learner::Output => 1,
        Learner::Objective => 2,
    };
    if knobs.delta == Delta::ZERO && share.units() < smallest {
        return Err(invalid(format!(
            "ε = {} is too small to split among {count} candidates",
            knobs.epsilon.value()
        )));
    }
    let planned = candidates
        .iter()
        .map(|&lambda| Candidate::plan(learner, lambda, knobs, (share, count), training, dims))
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    let selector = Selector::new(SelectionRule::Laplace, knobs.epsilon, 1.0, holdout as f64)
        .map_err(|error| invalid(error.to_string()))?;
    let loss = PrivacyLoss::Parallel {
        parts: vec![
            PrivacyLoss::Sequence {
                parts: planned
                    .iter()
                    .map(|candidate| candidate.loss.clone())
                    .collect(),
            },
            selector.loss(),
        ],
    };
    let price = Price {
        loss: Some(loss),
        sensitivity: 1.0,
        sigma: std::f64::consts::SQRT_2 * selector.scale(),
        noise: api::NoiseDetails {
            mechanism: "report_noisy_max".to_owned(),
            scale: selector.scale(),
            grid: selector.grid(),
            accounted_sensitivity: selector.accounted_sensitivity(),
            sigma_classic: None,
            lambda: None,
        },
        n,
        epsilon: None,
    };
    Ok(LambdaSelect {
        price,
        candidates: planned,
        selector,
        schema: dataset.schema.clone(),
        fit_intercept,
        candidate_epsilon: if knobs.delta == Delta::ZERO {
            share.value()
        } else {
            0.0
        },
        selection_epsilon: knobs.epsilon.value(),
        rows: (training, holdout),
    })
}

/// The training and held-out rows of `design`, by index.
fn split(design: &Design) -> (Design, Design) {
    let (held, kept): (Vec<usize>, Vec<usize>) = (0..design.y.len()).partition(|&i| held_out(i));
    let part = |rows: &[usize]| Design {
        x: design.x.select(Axis(0), rows),
        y: design.y.select(Axis(0), rows),
        fit_intercept: design.fit_intercept,
    };
    (part(&kept), part(&held))
}

/// Held-out rows the weights misclassify (a margin of 0 counts as wrong),
/// an exact integer.
fn errors(weights: &[f64], x: &Array2<f64>, y: &ndarray::Array1<f64>) -> u64 {
    let weights = ndarray::ArrayView1::from(weights);
    x.rows()
        .into_iter()
        .zip(y)
        .map(|(row, &label)| u64::from(label * row.dot(&weights) <= 0.0))
        .sum()
}

impl LambdaSelect {
    /// Trains every candidate, counts its held-out errors, and picks one
    /// (held to the selector's deadline): the pick and its weights.
    fn select(&self, design: &Design) -> Result<(usize, Vec<f64>), ModelError> {
        let (training, holdout) = split(design);
        let mut models = Vec::with_capacity(self.candidates.len());
        let mut counts = Vec::with_capacity(self.candidates.len());
        for candidate in &self.candidates {
            let weights = candidate.train(&training)?;
            counts.push(errors(&weights, &holdout.x, &holdout.y));
            models.push(weights);
        }
        let budget = pacing::budget_of_selections(&self.selector, counts.len(), 1);
        let chosen = pacing::paced(budget, || self.pick(&counts, &mut OsNoise::new()))?;
        Ok((chosen, models.swap_remove(chosen)))
    }

    /// The candidate with the fewest held-out errors once each count has
    /// its Laplace noise.
    fn pick<R: rand::Rng + ?Sized>(&self, errors: &[u64], rng: &mut R) -> Result<usize, DpError> {
        let scores: Vec<f64> = errors.iter().map(|&count| count as f64).collect();
        self.selector.select(&scores, rng)
    }
}

#[async_trait]
impl Planned for LambdaSelect {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let this = std::sync::Arc::new(*self);
        let selecting = this.clone();
        let (chosen, weights) = fit_on(&snapshot, this.fit_intercept, move |design| {
            selecting.select(design)
        })
        .await?;
        if weights.iter().any(|value| !value.is_finite()) {
            return Err(Failure::NonFinite);
        }
        let candidate = &this.candidates[chosen];
        let mut result = model::result(
            &weights,
            &this.schema,
            this.fit_intercept,
            candidate.lambda,
            candidate.output(),
            match &candidate.trainer {
                Trainer::Objective(plan) => Some(&plan.params),
                Trainer::Output(_) => None,
            },
        );
        result.selection = Some(api::LambdaSelection {
            candidates: this.candidates.iter().map(|c| c.lambda).collect(),
            chosen,
            candidate_epsilon: this.candidate_epsilon,
            selection_epsilon: this.selection_epsilon,
            selection_scale: this.selector.scale(),
            training_rows: this.rows.0,
            holdout_rows: this.rows.1,
        });
        Ok(api::ReleaseResult::Model(result))
    }
}

#[cfg(test)]
#[path = "lambda_select_tests.rs"]
mod tests;
