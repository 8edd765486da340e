//! `model/output-perturbation` under privacy unit `user`: N is private, so
//! the kept rows are counted with noise first (N̂), the loss is normalised
//! by max(N̂, N), and the weights' noise is sized for
//! Δ = 2m/(λN̂) + 2γ/λ ([`crate::dp::erm_people`], with the proof). The
//! count and the model share the release's budget (1/100 to the count);
//! what each costs is fixed before the debit, and only the weights' noise
//! scale waits for N̂. `"lambda": "auto"` chooses λ after the count, by
//! the same excess-risk rule as under `row` with N̂/m rows.

use async_trait::async_trait;
use dpgate_api_types as api;

use super::counting::laplace_count;
use super::model::{self, weight_bound};
use super::ridge::{self, OUTPUT};
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::contribution::ContributionBounds;
use crate::dp::contribution::MAX_ROWS;
use crate::dp::erm::SOLVE_TOLERANCE;
use crate::dp::erm_people::{self, Multipliers};
use crate::dp::{Delta, DpError, Epsilon, Mechanism, PrivacyLoss};
use crate::releases::plan::{most_rows, noise};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

/// λ as requested: the analyst's, or chosen once N̂ is out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Choice {
    Fixed(f64),
    Auto,
}

/// The two parts' noise: the count's mechanism, fixed now, and what sizes
/// the weights' noise once Δ is known.
#[derive(Debug, Clone)]
enum Budget {
    /// Laplace on the count, norm-Gamma of this ε on the weights.
    Pure { count: Mechanism, model: Epsilon },
    /// Gaussian of these multipliers on both.
    Gaussian { count: Mechanism, model: f64 },
}

impl Budget {
    fn new(epsilon: Epsilon, delta: Delta, rows_per_user: u32) -> Result<Budget, DpError> {
        if delta == Delta::ZERO {
            let (count, model) = laplace_count(epsilon, rows_per_user)?;
            return Ok(Budget::Pure { count, model });
        }
        let multipliers = Multipliers::new(epsilon, delta)?;
        Ok(Budget::Gaussian {
            count: Mechanism::gaussian_multiplier(
                multipliers.count,
                f64::from(rows_per_user),
                1,
                MAX_ROWS as f64,
            )?,
            model: multipliers.model,
        })
    }

    fn count(&self) -> &Mechanism {
        match self {
            Budget::Pure { count, .. } | Budget::Gaussian { count, .. } => count,
        }
    }

    /// The weights' noise for a fit of `sensitivity` on `dims` weights
    /// within `range`.
    fn model(&self, sensitivity: f64, dims: usize, range: f64) -> Result<Mechanism, DpError> {
        match *self {
            Budget::Pure { model, .. } => Mechanism::norm_gamma(model, sensitivity, dims, range),
            Budget::Gaussian { model, .. } => {
                Mechanism::gaussian_multiplier(model, sensitivity, dims, range)
            }
        }
    }

    /// What the ledger records: the count, then the weights, whose loss
    /// depends on their multiplier or ε alone, not on Δ.
    fn loss(&self) -> PrivacyLoss {
        let model = match *self {
            Budget::Pure { model, .. } => PrivacyLoss::PureEpsilon {
                epsilon: model.value(),
            },
            Budget::Gaussian { model, .. } => PrivacyLoss::Gaussian {
                sensitivity: 1.0,
                sigma: model,
            },
        };
        PrivacyLoss::Sequence {
            parts: vec![self.count().loss().clone(), model],
        }
    }

    /// The weights' noise at λ once the count has come out as N̂, if the
    /// certified solver and the lattice can release it for every dataset
    /// a fit can hold (up to [`most_fitted`] kept rows).
    fn at(
        &self,
        normaliser: f64,
        rows_per_user: u32,
        lambda: f64,
        dims: usize,
    ) -> Result<Mechanism, String> {
        model::check_lambda(lambda)?;
        model::certifiable(dims, most_fitted(dims), lambda, 0.0)?;
        let sensitivity =
            erm_people::output_sensitivity(normaliser, rows_per_user, lambda, SOLVE_TOLERANCE)
                .map_err(|error| error.to_string())?;
        self.model(sensitivity, dims, weight_bound(lambda, 0.0))
            .map_err(|error| error.to_string())
    }
}

/// The most rows a fit of `dims` columns may hold ([`model::MAX_VALUES`]):
/// a public bound on the kept rows, since a snapshot whose stored rows
/// exceed it is not fitted at all.
pub fn most_fitted(dims: usize) -> u64 {
    model::MAX_VALUES / dims as u64
}

/// The release, priced.
struct PeopleOutput {
    price: Price,
    budget: Budget,
    rows_per_user: u32,
    choice: Choice,
    schema: Schema,
    fit_intercept: bool,
}

/// Prices the release: the count's noise and the weights' ε or
/// multiplier; a fixed λ must be releasable whatever N̂ comes out.
pub fn plan(
    dataset: &DatasetRecord,
    bounds: &ContributionBounds,
    choice: Choice,
    fit_intercept: bool,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    let invalid = |error: String| ReleaseError::Invalid(error);
    let k = dataset.schema.k();
    model::check_shape(k, 1, fit_intercept).map_err(invalid)?;
    let dims = model::columns(k, fit_intercept);
    let rows_per_user = bounds.rows;
    let budget = Budget::new(knobs.epsilon, knobs.delta, rows_per_user)
        .map_err(|error| invalid(error.to_string()))?;
    // Refused now, not after the debit, if N̂ could come out where λ
    // cannot be released: the extremes are the widest noise and the
    // finest lattice.
    for normaliser in [1.0, MAX_ROWS as f64] {
        match choice {
            Choice::Fixed(lambda) => budget
                .at(normaliser, rows_per_user, lambda, dims)
                .map(drop)
                .map_err(invalid)?,
            Choice::Auto => auto(&budget, normaliser, rows_per_user, dims)
                .map(drop)
                .ok_or_else(|| {
                    invalid(format!(
                        "no λ up to 100 can be certified or noised for {dims} model dimensions \
                         and {rows_per_user} rows per user at this ε; raise ε"
                    ))
                })?,
        }
    }
    // The weights' noise in units of Δ, which N̂ fixes only after the debit.
    let unit = budget
        .model(1.0, dims, 1.0)
        .map_err(|error| invalid(error.to_string()))?;
    let mut price = Price::of(&unit, 1.0, most_rows(dataset));
    price.loss = Some(budget.loss());
    if let Choice::Fixed(lambda) = choice {
        price.noise.lambda = Some(lambda);
    }
    Ok(Box::new(PeopleOutput {
        price,
        budget,
        rows_per_user,
        choice,
        schema: dataset.schema.clone(),
        fit_intercept,
    }))
}

/// What `"auto"` chooses at N̂ for a pure-ε release of `epsilon`
/// (objective perturbation's ceiling, as under unit `row`).
pub fn auto_pure(
    epsilon: Epsilon,
    normaliser: f64,
    rows_per_user: u32,
    dims: usize,
) -> Option<f64> {
    let budget = Budget::new(epsilon, Delta::ZERO, rows_per_user).ok()?;
    auto(&budget, normaliser, rows_per_user, dims)
}

/// λ of [`ridge::grid`] with the least excess-risk bound at N̂ (the
/// largest on a tie), as `auto` under unit `row` at N = N̂/m.
fn auto(budget: &Budget, normaliser: f64, rows_per_user: u32, dims: usize) -> Option<f64> {
    ridge::least_risk_by(|lambda| {
        let mechanism = budget.at(normaliser, rows_per_user, lambda, dims).ok()?;
        Some(OUTPUT.bias(lambda, dims) + dims as f64 * mechanism.noise_std().powi(2))
    })
}

#[async_trait]
impl Planned for PeopleOutput {
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
        let noisy_rows = noise(self.budget.count().clone(), vec![rows as f64]).await?[0];
        let normaliser = erm_people::normaliser(noisy_rows);
        let lambda = match self.choice {
            Choice::Fixed(lambda) => lambda,
            // Some λ was releasable at both extremes of N̂ when priced.
            Choice::Auto => auto(&self.budget, normaliser, self.rows_per_user, dims)
                .ok_or_else(|| Failure::Corrupt(format!("no λ to release at N̂ = {normaliser}")))?,
        };
        let mechanism = self
            .budget
            .at(normaliser, self.rows_per_user, lambda, dims)
            .map_err(Failure::Corrupt)?;
        let weights = if rows == 0 {
            // No row: J̃ is the ridge alone, minimised at 0.
            vec![0.0; dims]
        } else {
            let solver = erm_people::solver_lambda(lambda, normaliser, rows);
            tokio::task::spawn_blocking(move || model::solve(&design, solver, None, None))
                .await??
                .to_vec()
        };
        let released = noise(mechanism.clone(), weights).await?;
        let mut result = model::result(
            &released,
            &self.schema,
            self.fit_intercept,
            lambda,
            &mechanism,
            None,
        );
        result.noisy_rows = Some(noisy_rows);
        Ok(api::ReleaseResult::Model(result))
    }
}
