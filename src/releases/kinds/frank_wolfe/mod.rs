//! `model/frank-wolfe`: least squares on an L1 ball by DP Frank-Wolfe
//! (Talwar, Thakurta & Zhang 2015, Alg. 2; seed 001), calibrated for
//! replace-one neighbours as LEARNERS.md §3 corrects it, optionally over
//! source datasets whose rows join the objective.
//!
//! Model space: u = (1, v) with v = 2x̃ − 1 ∈ [−1, 1]ᵏ (x̃ the features
//! scaled into [0, 1]), and the target y′ = (y − c)/s ∈ [−1, 1] from its
//! declared bounds (the label: y′ = 2y − 1). The loss is
//! L(θ) = (1/2N)·Σ(θᵀuᵢ − y′ᵢ)² over the target's rows and every source's.
//!
//! Each of T steps scores the 2d vertices ±r·eⱼ of the ball by
//! α = ⟨s, ∇L(θ)⟩ and picks one privately (`Selector`): report-noisy-min
//! with discrete Laplace noise, or the exponential mechanism. On the ball
//! |θᵀu| ≤ r and |y′| ≤ 1, so one row moves each coordinate of ∇L by at most
//! 2(r + 1)/N and each score by **Δ_s = 2r(r + 1)/N** under unit `row`;
//! under `label` only y′ moves, by at most 2: Δ_s = 2r/N. When the
//! participants' units differ, `row` holds for all. θ ← (1 − μ)θ + μ·s with
//! μ_t = 2/(t + 2): a fixed convex combination of released vertices, so the
//! model is exact post-processing.
//!
//! Each step's ε₀ is the largest whose T-fold composition the ledger itself
//! prices at ≤ (ε, δ) (`per_step_epsilon`); Laplace steps are
//! `pure_epsilon{ε₀}`, exponential ones `bounded_range{ε₀}`. Every
//! participating dataset is debited, in one transaction, or none is.
//!
//! The optional debias stage (Trans-Lasso's) runs Frank-Wolfe on the
//! target's rows alone over {θ̂ + δ : ‖δ‖₁ ≤ h}; there |θᵀu| ≤ r + h, so
//! Δ_s′ = 2h(r + h + 1)/N_target (`label`: 2h/N_target). LEARNERS.md bounds
//! it with ‖θ̂‖₁ + h + 1, which is at most that; the public r + h + 1 lets
//! the release be priced, noise scale included, before anything is read.
//! The target pays for both stages (split by `epsilon_share`), sources for
//! the first only.
mod stage;

use async_trait::async_trait;
use dpgate_api_types::{self as api, DebiasParams, FrankWolfeParams, PrivacyUnit, Selection};

use super::iterative::{SnapshotRows, check_work, learned, within};
use crate::domain::dataset::{DatasetRecord, Schema, Unit};
use crate::dp::{Charge, Delta, Epsilon, PrivacyLoss, SelectionRule};
use crate::releases::plan::{most_rows, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};
pub use stage::*;

/// Most steps a stage may take.
pub const MAX_STEPS: u32 = 1000;
/// The largest L1 radius r or h.
pub const MAX_RADIUS: f64 = 100.0;
/// Most source datasets one release may read.
pub const MAX_SOURCES: usize = 32;

/// Checks the request's settings against their public bounds.
fn check(params: &FrankWolfeParams) -> Result<(), ReleaseError> {
    let radius =
        |name: &str, r: f64| within(name, r, |r| r > 0.0 && r <= MAX_RADIUS, "in (0, 100]");
    let steps = |name: &str, steps: u32| {
        if (1..=MAX_STEPS).contains(&steps) {
            Ok(())
        } else {
            Err(ReleaseError::Invalid(format!(
                "{name} must be from 1 to {MAX_STEPS} (got {steps})"
            )))
        }
    };
    radius("radius", params.radius)?;
    steps("steps", params.steps)?;
    if let Some(debias) = &params.debias {
        radius("debias.radius", debias.radius)?;
        steps("debias.steps", debias.steps)?;
        within(
            "debias.epsilon_share",
            debias.epsilon_share,
            |share| share > 0.0 && share < 1.0,
            "in (0, 1)",
        )?;
    }
    Ok(())
}

/// The source list's own rules (checked before any source is read): at
/// most [`MAX_SOURCES`], each once, not the release's own dataset.
pub fn check_sources(sources: &[uuid::Uuid], dataset: uuid::Uuid) -> Result<(), ReleaseError> {
    if sources.len() > MAX_SOURCES {
        return Err(ReleaseError::Invalid(format!(
            "at most {MAX_SOURCES} sources (got {})",
            sources.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for source in sources {
        if *source == dataset {
            return Err(ReleaseError::Invalid(
                "a dataset cannot be its own source".to_owned(),
            ));
        }
        if !seen.insert(source) {
            return Err(ReleaseError::Invalid(format!(
                "source {source} is listed twice"
            )));
        }
    }
    Ok(())
}

/// (ε, δ) split between the stages: the second's share rounded down to
/// the ledger's units, the first the rest, so that together they are
/// exactly the request's.
fn split(knobs: &Knobs, share: f64) -> Result<[(Epsilon, Delta); 2], ReleaseError> {
    let second_epsilon = Epsilon::from_units((knobs.epsilon.units() as f64 * share).floor() as u64);
    let second_delta = Delta::from_units((knobs.delta.units() as f64 * share).floor() as u128);
    let first = (
        knobs.epsilon.saturating_sub(second_epsilon),
        knobs.delta.saturating_sub(second_delta),
    );
    if second_epsilon == Epsilon::ZERO || first.0 == Epsilon::ZERO {
        return Err(ReleaseError::Invalid(
            "epsilon × debias.epsilon_share leaves a stage without ε".to_owned(),
        ));
    }
    Ok([first, (second_epsilon, second_delta)])
}

/// A Frank-Wolfe release, priced.
struct FrankWolfe {
    price: Price,
    source_charge: Option<Charge>,
    fit: Fit,
    outcome: Outcome,
    first: Stage,
    debias: Option<Stage>,
    sources: Vec<(DatasetRecord, Outcome)>,
    schema: Schema,
    radius: f64,
    selection: Selection,
}

/// Prices a Frank-Wolfe release from its settings and the public facts of
/// the target and its sources (their units, N and schemas).
pub fn plan(
    dataset: &DatasetRecord,
    sources: &[DatasetRecord],
    params: &FrankWolfeParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    check(params)?;
    require_rows(dataset)?;
    let (target, outcome) = Target::parse(&params.target, &dataset.schema)?;
    let sources = sources
        .iter()
        .map(|source| {
            require_rows(source).map_err(|_| {
                ReleaseError::Invalid(format!(
                    "source dataset {:?} ({}) has no rows yet",
                    source.name, source.id
                ))
            })?;
            Ok((source.clone(), matching(source, dataset, &params.target)?))
        })
        .collect::<Result<Vec<_>, ReleaseError>>()?;
    // Under unit `user` N is private: its public bound takes its place,
    // and a refusal by the work it makes would tell N against a threshold.
    let n = sources.iter().fold(most_rows(dataset), |n, (source, _)| {
        n.saturating_add(most_rows(source))
    });
    let units: Vec<Unit> = std::iter::once(dataset)
        .chain(sources.iter().map(|(source, _)| source))
        .map(DatasetRecord::unit)
        .collect();
    let dims = dataset.schema.k() + usize::from(params.fit_intercept);
    let steps = params.steps + params.debias.as_ref().map_or(0, |debias| debias.steps);
    if !units.iter().any(|unit| matches!(unit, Unit::User(_))) {
        check_work(
            u64::from(steps)
                .saturating_mul(n)
                .saturating_mul(dims as u64),
            "steps × rows × coordinates",
            "take fewer steps",
        )?;
    }
    let rule = match params.selection {
        Selection::Laplace => SelectionRule::Laplace,
        Selection::Exponential => SelectionRule::Exponential,
    };
    let r = params.radius;
    let budgets = match &params.debias {
        Some(debias) => split(knobs, debias.epsilon_share)?,
        None => [(knobs.epsilon, knobs.delta); 2],
    };
    let first = Stage::price(
        rule,
        budgets[0],
        (params.steps, r, r + 1.0),
        (n, dims),
        &units,
    )?;
    let debias = params
        .debias
        .as_ref()
        .map(
            |DebiasParams {
                 radius: h, steps, ..
             }| {
                Stage::price(
                    rule,
                    budgets[1],
                    (*steps, *h, r + h + 1.0),
                    (most_rows(dataset), dims),
                    &units[..1],
                )
            },
        )
        .transpose()?;
    let first_loss = first.loss();
    let loss = match &debias {
        Some(second) => PrivacyLoss::Sequence {
            parts: vec![first_loss.clone(), second.loss()],
        },
        None => first_loss.clone(),
    };
    let source_charge = (!sources.is_empty()).then_some(Charge {
        epsilon: first.epsilon,
        delta: first.delta,
        loss: first_loss,
    });
    let price = Price {
        loss: Some(loss),
        sensitivity: first.sensitivity,
        sigma: noise_std(rule, first.selector.scale() * first.unit),
        noise: api::NoiseDetails {
            mechanism: mechanism_name(rule).to_owned(),
            scale: first.selector.scale() * first.unit,
            grid: first.selector.grid() * first.unit,
            accounted_sensitivity: first.selector.accounted_sensitivity() * first.unit,
            sigma_classic: None,
            lambda: None,
        },
        n,
        epsilon: None,
    };
    Ok(Box::new(FrankWolfe {
        price,
        source_charge,
        fit: Fit {
            target,
            intercept: params.fit_intercept,
        },
        outcome,
        first,
        debias,
        sources,
        schema: dataset.schema.clone(),
        radius: r,
        selection: params.selection,
    }))
}

/// θ (model space, intercept first when fitted) as raw-unit weights and
/// intercept: ŷ = c + s·(θ₀ + Σⱼ θⱼ·(2(xⱼ − loⱼ)/(hiⱼ − loⱼ) − 1)).
fn unfold(theta: &[f64], schema: &Schema, intercept: bool, target: &Target) -> (Vec<f64>, f64) {
    let (constant, slopes) = if intercept {
        (theta[0], &theta[1..])
    } else {
        (0.0, theta)
    };
    let mut offset = target.centre + target.scale * constant;
    let weights = slopes
        .iter()
        .zip(&schema.features)
        .map(|(slope, column)| {
            let per_unit = 2.0 / (column.max - column.min);
            offset -= target.scale * slope * (per_unit * column.min + 1.0);
            target.scale * slope * per_unit
        })
        .collect();
    (weights, offset)
}

#[async_trait]
impl Planned for FrankWolfe {
    fn price(&self) -> &Price {
        &self.price
    }

    fn source_charge(&self) -> Option<Charge> {
        self.source_charge.clone()
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let FrankWolfe {
            fit,
            outcome,
            first,
            debias,
            sources,
            schema,
            radius,
            selection,
            ..
        } = *self;
        // Held in memory only if every participant fits at once; else
        // every pass is the engine's, over the files.
        let hold = snapshot.fit_together(
            std::iter::once(snapshot.dataset()).chain(sources.iter().map(|(source, _)| source)),
        );
        let siblings: Vec<Snapshot> = sources
            .iter()
            .map(|(source, _)| snapshot.sibling(source.clone()))
            .collect();
        let mut data = vec![Participant {
            rows: SnapshotRows::of(snapshot, hold).await?,
            outcome,
        }];
        for (sibling, (_, outcome)) in siblings.into_iter().zip(&sources) {
            data.push(Participant {
                rows: SnapshotRows::of(sibling, hold).await?,
                outcome: *outcome,
            });
        }
        let run = (fit.clone(), first.clone(), debias.clone());
        let dims = schema.k() + usize::from(fit.intercept);
        let theta = learned(move || {
            let (fit, first, debias) = run;
            let theta = first.run_private(&data, &fit, &vec![0.0; dims])?;
            match debias {
                None => Ok(theta),
                Some(second) => {
                    data.truncate(1);
                    second.run_private(&data, &fit, &theta)
                }
            }
        })
        .await?;
        let (weights, intercept) = unfold(&theta, &schema, fit.intercept, &fit.target);
        Ok(api::ReleaseResult::FrankWolfe(api::FrankWolfeResult {
            weights,
            intercept,
            model_weights: theta,
            target: fit.target.name,
            target_centre: fit.target.centre,
            target_scale: fit.target.scale,
            radius,
            fit_intercept: fit.intercept,
            selection,
            stage: first.used(),
            debias: debias.as_ref().map(Stage::used),
            sources: sources
                .iter()
                .map(|(source, _)| api::SourceUsed {
                    dataset: source.id,
                    n: (source.privacy_unit != PrivacyUnit::User).then_some(source.n_rows),
                })
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests;
