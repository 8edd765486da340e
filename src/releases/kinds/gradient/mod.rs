//! `gradient`: the mean clipped gradient g = (1/N)·Σ clip_C(∇ℓᵢ(θ)) at
//! the analyst's θ, released with noise (LEARNERS.md §4): the building
//! block of a client-side learner such as distributed ISTA.
//!
//! Privacy holds for any θ, an adversarial one included, because clipping
//! bounds the sensitivity ([`dp_gd::clipped_sensitivity`]) of the exact
//! integer sum of the clipped gradients on the grid of C′ ([`Grid`]; the
//! mean is that sum times C′/N): unit `row`, 2·min(C, |r|max·√d)/C′, where
//! the logistic residual is at most 1 and the squared one is unbounded;
//! unit `label`, min(2C, |y₁ − y₀|·maxᵢ‖uᵢ‖)/C′ plus the grid's rounding
//! term, since an outcome moves the residual by |y₁ − y₀| (1 for the
//! logistic loss and for a measure scaled into [0, 1]); unit `user`, the
//! reach of one person's clipped total ([`Grid::per_person`]), 1, with N
//! released noisy as one more release of the same noise (with the call,
//! or when a session opens) and each gradient the noisy sum over it.
//!
//! One release is one call, or a **session** of T calls priced together:
//! σ is that of T composed steps ([`Mechanism::gaussian_steps`], or ε/T of
//! norm-Gamma) and the ledger records their composition once, so every
//! accountant gets the exact composition and a learner cannot run out of
//! budget half-way. Adaptive choices of θ are covered by adaptive
//! composition. The session's calls ([`Session`]) read the snapshot the
//! session was priced for.

mod session;

pub use session::Session;

use async_trait::async_trait;
use dpgate_api_types::{self as api, GradientLoss, GradientMechanism, GradientParams};

use super::counting::Counting;
use super::dp_gd::{self, Reach, Rows};
use super::gradients::{Gradients, Grid, Loss, Residual};
use super::iterative::{MAX_MAGNITUDE, check_work, require_signal, within};
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::constant_time::logistic;
use crate::dp::{self, Mechanism, PrivacyLoss, per_step_epsilon};
use crate::releases::plan::{most_rows, noise_fixed, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};
use crate::snapshots::Columns;

/// Most calls a session may hold.
pub const MAX_CALLS: u32 = 10_000;

/// How far a session's σ, priced again from its record, may be from the
/// one it was debited for: the float padding sessions opened before sums
/// were exact carried was below 10⁻⁴ of Δ.
const SESSION_TOLERANCE: f64 = 1e-3;

/// Where a row's y comes from, as the loss sees it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Target {
    /// y = y₀ for label 0, y₁ for label 1.
    Label { values: [f64; 2] },
    /// y = (m − min)/(max − min) of measure `index`.
    Measure { index: usize, min: f64, width: f64 },
}

/// A gradient query as requested: every setting public.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fit {
    pub loss: GradientLoss,
    pub target: Target,
    pub clip: f64,
    pub fit_intercept: bool,
}

impl Fit {
    /// d = k + the intercept.
    fn dims(&self, schema: &Schema) -> usize {
        schema.k() + usize::from(self.fit_intercept)
    }

    /// How far a residual reaches: the logistic one is at most 1, the
    /// squared one unbounded; an outcome moves it by |y₁ − y₀|.
    fn reach(&self) -> Reach {
        let shift = match self.target {
            Target::Label { values: [y0, y1] } => (y1 - y0).abs(),
            Target::Measure { .. } => 1.0,
        };
        let largest = match self.loss {
            GradientLoss::Logistic => 1.0,
            GradientLoss::Squared => f64::INFINITY,
        };
        Reach { largest, shift }
    }

    /// The grid its clipped gradients are summed on: under unit `user`
    /// (a schema with people) each person's summed gradient is clipped.
    pub fn grid(&self, schema: &Schema) -> Result<Grid, dp::DpError> {
        let (largest, dims) = (self.reach().largest, self.dims(schema));
        match &schema.users {
            Some(users) => Grid::per_person(self.clip, largest, dims, true, users.bounds.rows),
            None => Grid::new(self.clip, largest, dims, true),
        }
    }
}

/// The rows' residuals under the fit: a block's `Outcomes`.
impl Loss for Fit {
    const KIND: &'static str = "gradients/fit";

    fn on<'b>(&'b self, block: &'b Columns) -> impl Residual + 'b {
        Outcomes {
            fit: self,
            columns: block,
        }
    }

    fn of_measure(&self) -> bool {
        matches!(self.target, Target::Measure { .. })
    }
}

/// The rows' residuals under a [`Fit`]. Neither loss branches on a row's
/// values: y is y₀ + label·(y₁ − y₀), a measure is clamped.
struct Outcomes<'a> {
    fit: &'a Fit,
    columns: &'a Columns,
}

impl Residual for Outcomes<'_> {
    fn residual(&self, prediction: f64, row: usize) -> f64 {
        let y = match self.fit.target {
            Target::Label { values: [y0, y1] } => {
                y0 + f64::from(self.columns.labels()[row]) * (y1 - y0)
            }
            Target::Measure { index, min, width } => {
                ((self.columns.measure(index)[row] - min) / width).clamp(0.0, 1.0)
            }
        };
        match self.fit.loss {
            GradientLoss::Logistic => logistic(prediction) - y,
            GradientLoss::Squared => prediction - y,
        }
    }
}

/// The request's loss and target on `schema`.
fn fit(params: &GradientParams, schema: &Schema) -> Result<Fit, ReleaseError> {
    within("clip", params.clip, |c| c > 0.0 && c <= 1e3, "in (0, 1000]")?;
    let target = if params.target == "label" {
        let values = match (params.loss, params.label_values) {
            (GradientLoss::Squared, Some(values)) => values,
            (_, None) => [0.0, 1.0],
            (GradientLoss::Logistic, Some(_)) => {
                return Err(ReleaseError::Invalid(
                    "label_values is for the squared loss only: the logistic loss fits y ∈ {0, 1}"
                        .to_owned(),
                ));
            }
        };
        for value in values {
            within(
                "each of label_values",
                value,
                |y| y.abs() <= MAX_MAGNITUDE,
                "finite and at most 1e6 in magnitude",
            )?;
        }
        if values[0] == values[1] {
            return Err(ReleaseError::Invalid(
                "label_values must differ: [y0, y1] for labels 0 and 1".to_owned(),
            ));
        }
        Target::Label { values }
    } else {
        let name = params.target.strip_prefix("measure:").ok_or_else(|| {
            ReleaseError::Invalid(format!(
                "target must be `label` or `measure:NAME` (got {:?})",
                params.target
            ))
        })?;
        if params.label_values.is_some() {
            return Err(ReleaseError::Invalid(
                "label_values is for the label target only".to_owned(),
            ));
        }
        let index = schema
            .measures
            .iter()
            .position(|column| column.name == name)
            .ok_or_else(|| ReleaseError::Invalid(format!("the dataset has no measure {name:?}")))?;
        let column = &schema.measures[index];
        Target::Measure {
            index,
            min: column.min,
            width: column.max - column.min,
        }
    };
    Ok(Fit {
        loss: params.loss,
        target,
        clip: params.clip,
        fit_intercept: params.fit_intercept,
    })
}

/// Refuses a θ that is not d finite values of magnitude at most 10⁶.
pub fn check_theta(theta: &[f64], dims: usize) -> Result<(), ReleaseError> {
    if theta.len() != dims {
        return Err(ReleaseError::Invalid(format!(
            "theta has {} values; this gradient has d = {dims} (the features, and the \
             intercept first when fitted)",
            theta.len()
        )));
    }
    for &value in theta {
        within(
            "every value of theta",
            value,
            |v| v.abs() <= MAX_MAGNITUDE,
            "finite and at most 1e6 in magnitude",
        )?;
    }
    Ok(())
}

/// The noise of each of `calls` releases of Δ `sensitivity` on normalised
/// sums on `grid` over at most `n` summands of `dims` coordinates, (ε, δ)
/// together, and ε of one release alone.
fn mechanism(
    kind: GradientMechanism,
    knobs: &Knobs,
    sensitivity: f64,
    (n, dims): (u64, usize),
    calls: u32,
    grid: &Grid,
) -> Result<(Mechanism, f64), ReleaseError> {
    let invalid = |error: dp::DpError| ReleaseError::Invalid(error.to_string());
    let range = grid.range(n);
    match kind {
        GradientMechanism::Gaussian => {
            knobs.approximate("gradient with the gaussian mechanism")?;
            let mechanism = Mechanism::gaussian_steps(
                knobs.epsilon,
                knobs.delta,
                sensitivity,
                dims,
                calls,
                range,
            )
            .map_err(invalid)?;
            let alone = dp::gaussian_epsilon(
                mechanism.accounted_sensitivity() / mechanism.noise_scale(),
                knobs.delta.value(),
            );
            Ok((mechanism, alone))
        }
        GradientMechanism::NormGamma => {
            knobs.pure("gradient with the norm_gamma mechanism")?;
            let each = per_step_epsilon(knobs.epsilon, knobs.delta, calls, |each| {
                Ok(PrivacyLoss::PureEpsilon {
                    epsilon: each.value(),
                })
            })
            .map_err(invalid)?;
            let mechanism =
                Mechanism::norm_gamma(each, sensitivity, dims, range).map_err(invalid)?;
            Ok((mechanism, each.value()))
        }
    }
}

/// The terms of a priced gradient query: what every call of it repeats.
struct Terms {
    fit: Fit,
    grid: Grid,
    /// As requested: `label` or `measure:NAME`.
    target: String,
    kind: GradientMechanism,
    mechanism: Mechanism,
    call_epsilon: f64,
    /// Δ in the released numbers' units as priced: of the mean gradient,
    /// or under unit `user` of the summed one.
    sensitivity: f64,
    /// N where it is public.
    n: Option<u64>,
    /// Under unit `user`: m, and the noisy count once it is released.
    people: Option<u32>,
    noisy_rows: Option<f64>,
    feature_bounds: Vec<[f64; 2]>,
}

impl Terms {
    fn unit(&self) -> f64 {
        unit(self.grid.clip(), self.n, self.noisy_rows)
    }

    fn result(&self, gradient: Option<Vec<f64>>, calls: Option<u32>) -> api::GradientResult {
        let label_values = match self.fit.target {
            Target::Label { values } if self.fit.loss == GradientLoss::Squared => Some(values),
            _ => None,
        };
        api::GradientResult {
            gradient,
            session: calls.map(|calls| api::GradientSession { calls }),
            n: self.n,
            noisy_rows: self.noisy_rows,
            sigma: self.mechanism.noise_scale() * self.unit(),
            sensitivity: self.sensitivity,
            clip: self.fit.clip,
            loss: self.fit.loss,
            target: self.target.clone(),
            label_values,
            fit_intercept: self.fit.fit_intercept,
            mechanism: self.kind,
            call_epsilon: self.call_epsilon,
            space: "model".to_owned(),
            feature_bounds: self.feature_bounds.clone(),
        }
    }

    /// Under unit `user`: the rows' count on `snapshot`, released with a
    /// call's noise (it is priced as one more call, each row
    /// [`Grid::count_weight`] units), which every gradient is then divided
    /// by. Nothing under the other units.
    async fn count(&mut self, snapshot: &Snapshot) -> Result<(), Failure> {
        let Some(m) = self.people else {
            return Ok(());
        };
        let counted = snapshot
            .sum(Counting::new(self.grid.count_weight(m)))
            .await?;
        let noisy =
            noise_fixed(self.mechanism.clone(), counted.fixed(self.mechanism.dims())).await?;
        self.noisy_rows = Some(counted.rows(&noisy));
        Ok(())
    }

    /// The released gradient at `theta` on `snapshot`: one summed pass,
    /// over the snapshot in memory or by the engine over its files.
    async fn call(&self, snapshot: &Snapshot, theta: Vec<f64>) -> Result<Vec<f64>, Failure> {
        let pass = Gradients::at(&self.grid, self.fit.clone(), &theta, self.fit.fit_intercept);
        let exact = snapshot.sum(pass).await?.total();
        let noisy = noise_fixed(self.mechanism.clone(), exact).await?;
        let unit = self.unit();
        Ok(noisy.into_iter().map(|sum| sum * unit).collect())
    }
}

/// What one unit of a noisy sum on the grid of `clip` (C′) is worth in
/// the gradient: C′/N where N is public, else C′/max(N̂, 1) for the noisy
/// count N̂ (C′ before N̂ is released).
fn unit(clip: f64, n: Option<u64>, noisy_rows: Option<f64>) -> f64 {
    let divisor = match (n, noisy_rows) {
        (Some(n), _) => n as f64,
        (None, rows) => rows.unwrap_or(1.0).max(1.0),
    };
    clip / divisor
}

/// The releases `calls` calls make: under unit `user` (`people`) the
/// count is one more.
fn releases(calls: u32, people: Option<u32>) -> u32 {
    calls + u32::from(people.is_some())
}

/// Prices the terms on `dataset` at its N (under unit `user`, at none):
/// the sensitivity from public facts (under `label`, the largest feature
/// norm).
fn terms(
    dataset: &DatasetRecord,
    params: &GradientParams,
    knobs: &Knobs,
    calls: u32,
) -> Result<Terms, ReleaseError> {
    let fit = fit(params, &dataset.schema)?;
    let dims = fit.dims(&dataset.schema);
    let grid = fit
        .grid(&dataset.schema)
        .map_err(|error| ReleaseError::Invalid(error.to_string()))?;
    let rows = Rows {
        k: dataset.schema.k(),
        max_norm_squared: dataset.stats.max_norm_squared,
        intercept: fit.fit_intercept,
    };
    let sensitivity = dp_gd::clipped_sensitivity(dataset.privacy_unit, &grid, &rows, fit.reach());
    require_signal(dataset, fit.fit_intercept, "the gradient is 0")?;
    let people = dataset.schema.users.as_ref().map(|users| users.bounds.rows);
    let (mechanism, call_epsilon) = mechanism(
        params.mechanism,
        knobs,
        sensitivity,
        (most_rows(dataset), dims),
        releases(calls, people),
        &grid,
    )?;
    let (min, max) = dataset.schema.feature_bounds();
    let mut terms = Terms {
        fit,
        grid,
        target: params.target.clone(),
        kind: params.mechanism,
        mechanism,
        call_epsilon,
        sensitivity,
        n: people.is_none().then_some(dataset.n_rows),
        people,
        noisy_rows: None,
        feature_bounds: min.into_iter().zip(max).map(|(a, b)| [a, b]).collect(),
    };
    terms.sensitivity *= terms.unit();
    Ok(terms)
}

/// A gradient release, priced: one call at `theta`, or a session.
struct Gradient {
    price: Price,
    terms: Terms,
    ask: Ask,
}

enum Ask {
    Call(Vec<f64>),
    Session(u32),
}

/// Prices a gradient release (one call, or a session of `calls`).
pub fn plan(
    dataset: &DatasetRecord,
    params: &GradientParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    require_rows(dataset)?;
    let ask = match (params.calls, &params.theta) {
        (Some(calls), None) if (1..=MAX_CALLS).contains(&calls) => Ask::Session(calls),
        (Some(calls), None) => {
            return Err(ReleaseError::Invalid(format!(
                "calls must be from 1 to {MAX_CALLS} (got {calls})"
            )));
        }
        (Some(_), Some(_)) => {
            return Err(ReleaseError::Invalid(
                "theta is given with each call of a session, not with `calls`".to_owned(),
            ));
        }
        (None, Some(theta)) => Ask::Call(theta.clone()),
        (None, None) => {
            return Err(ReleaseError::Invalid(
                "theta is required: the gradient is taken at θ (or give `calls` to open a \
                 session)"
                    .to_owned(),
            ));
        }
    };
    let calls = match ask {
        Ask::Session(calls) => calls,
        Ask::Call(_) => 1,
    };
    let terms = terms(dataset, params, knobs, calls)?;
    let dims = terms.fit.dims(&dataset.schema);
    if let Ask::Call(theta) = &ask {
        check_theta(theta, dims)?;
    }
    // Under unit `user` N is private: a refusal by it would tell whether
    // N is above a threshold, so only the calls bound the work there.
    if terms.people.is_none() {
        let work = u64::from(calls)
            .saturating_mul(dataset.n_rows)
            .saturating_mul(dims as u64);
        check_work(work, "calls × rows × coordinates", "open fewer calls")?;
    }
    let mut price = Price::of_sums(
        &terms.mechanism,
        terms.sensitivity,
        most_rows(dataset),
        terms.unit(),
    );
    let count = releases(calls, terms.people);
    if params.mechanism == GradientMechanism::NormGamma && count > 1 {
        price.loss = Some(PrivacyLoss::Composition {
            count,
            each: Box::new(terms.mechanism.loss().clone()),
        });
    }
    Ok(Box::new(Gradient { price, terms, ask }))
}

#[async_trait]
impl Planned for Gradient {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let Gradient { mut terms, ask, .. } = *self;
        terms.count(&snapshot).await?;
        let result = match ask {
            Ask::Call(theta) => {
                let gradient = terms.call(&snapshot, theta).await?;
                terms.result(Some(gradient), None)
            }
            Ask::Session(calls) => terms.result(None, Some(calls)),
        };
        Ok(api::ReleaseResult::Gradient(result))
    }
}

#[cfg(test)]
mod tests;
