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
//! α = ⟨s, ∇L(θ)⟩ and picks one privately ([`Selector`]): report-noisy-min
//! with discrete Laplace noise, or the exponential mechanism. On the ball
//! |θᵀu| ≤ r and |y′| ≤ 1, so one row moves each coordinate of ∇L by at most
//! 2(r + 1)/N and each score by **Δ_s = 2r(r + 1)/N** under unit `row`;
//! under `label` only y′ moves, by at most 2: Δ_s = 2r/N. When the
//! participants' units differ, `row` holds for all. θ ← (1 − μ)θ + μ·s with
//! μ_t = 2/(t + 2): a fixed convex combination of released vertices, so the
//! model is exact post-processing.
//!
//! Each step's ε₀ is the largest whose T-fold composition the ledger itself
//! prices at ≤ (ε, δ) ([`per_step_epsilon`]); Laplace steps are
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

use std::sync::Arc;

use async_trait::async_trait;
use dpgate_api_types::{self as api, DebiasParams, FrankWolfeParams, PrivacyUnit, Selection};

use super::iterative::{RowPasses, SnapshotRows, check_work, learned, within};
use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::fixed::{FRACTION_BITS, Fixed};
use crate::dp::region::Region;
use crate::dp::{
    Charge, Delta, DpError, Epsilon, OsNoise, PrivacyLoss, SelectionRule, Selector,
    per_step_epsilon,
};
use crate::engine::{Needed, Summed, add_exact};
use crate::releases::pacing;
use crate::releases::plan::require_rows;
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};
use crate::snapshots::{Columns, Pass};

/// Most steps a stage may take.
pub const MAX_STEPS: u32 = 1000;
/// The largest L1 radius r or h.
pub const MAX_RADIUS: f64 = 100.0;
/// Most source datasets one release may read.
pub const MAX_SOURCES: usize = 32;

/// Where the target is in one participant's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Outcome {
    Label,
    Measure(usize),
}

/// The target y′ = (y − centre)/scale, as every participant holds it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Target {
    name: String,
    centre: f64,
    scale: f64,
}

impl Target {
    /// The request's target on `schema`: where it is, and its map.
    fn parse(name: &str, schema: &Schema) -> Result<(Target, Outcome), ReleaseError> {
        if name == "label" {
            let target = Target {
                name: name.to_owned(),
                centre: 0.5,
                scale: 0.5,
            };
            return Ok((target, Outcome::Label));
        }
        let measure = name.strip_prefix("measure:").ok_or_else(|| {
            ReleaseError::Invalid(format!(
                "target must be `label` or `measure:NAME` (got {name:?})"
            ))
        })?;
        let index = schema
            .measures
            .iter()
            .position(|column| column.name == measure)
            .ok_or_else(|| {
                ReleaseError::Invalid(format!("the dataset has no measure {measure:?}"))
            })?;
        let column = &schema.measures[index];
        let target = Target {
            name: name.to_owned(),
            centre: (column.max + column.min) / 2.0,
            scale: (column.max - column.min) / 2.0,
        };
        Ok((target, Outcome::Measure(index)))
    }
}

/// Where a source holds the target, if its schema matches the target
/// dataset's: the same features (names and bounds) and the target with
/// the same bounds.
fn matching(
    source: &DatasetRecord,
    dataset: &DatasetRecord,
    target: &str,
) -> Result<Outcome, ReleaseError> {
    let mismatch = |what: &str| {
        ReleaseError::Invalid(format!(
            "source dataset {:?} ({}) {what}: a source must have the same features, with the \
             same bounds, and the same target",
            source.name, source.id
        ))
    };
    if source.schema.features != dataset.schema.features {
        return Err(mismatch("has other features or feature bounds"));
    }
    let (_, outcome) = Target::parse(target, &source.schema)?;
    if let (Outcome::Measure(there), Outcome::Measure(here)) =
        (outcome, Target::parse(target, &dataset.schema)?.1)
        && source.schema.measures[there] != dataset.schema.measures[here]
    {
        return Err(mismatch("declares other bounds for the target"));
    }
    Ok(outcome)
}

/// One Frank-Wolfe stage: `steps` private selections over the ball of
/// L1 radius `radius` around a centre.
///
/// Its scores are exact: each row's gradient coordinates (θᵀu − y′)·uⱼ,
/// at most `reach` in magnitude, go onto the grid of scale `reach` with
/// the box [−reach, reach] ([`Region`]) and are summed in i128 over every
/// participant's rows, so a score is the same integer however the rows
/// are split. The vertex ±r·eⱼ scores ±Sⱼ·2⁻⁴⁰ (the positive factor
/// r·reach/N, which does not change the argmin, is left out). One row
/// moves each Sⱼ by at most:
/// - unit `row`: the box's side, 2·2⁴⁰ units exactly: Δ_s = 2;
/// - unit `label`: y′ moves by at most 2, so (θᵀu − y′)·uⱼ moves by at
///   most 2|uⱼ| ≤ 2, on the grid 2/reach·2⁴⁰ plus the rounding of
///   [`Region::coordinate_units`] (3 units): Δ_s = 2/reach + 3·2⁻⁴⁰.
///
/// In score units (× r·reach/N) those are the module docs' 2r(r + 1)/N and
/// 2r/N (plus 3·2⁻⁴⁰·r·reach/N), with no float rounding left to pad.
#[derive(Debug, Clone)]
struct Stage {
    steps: u32,
    radius: f64,
    n: u64,
    epsilon: Epsilon,
    delta: Delta,
    step_epsilon: Epsilon,
    /// Δ_s in score units.
    sensitivity: f64,
    selector: Selector,
    region: Region,
    /// What one unit of a normalised score is worth in score units.
    unit: f64,
}

impl Stage {
    /// Calibrates a stage of `steps` over `n` rows of `dims` coordinates to
    /// (ε, δ), on a ball of `radius` where residuals are at most `reach`;
    /// `row` when any participant's unit is.
    fn price(
        rule: SelectionRule,
        budget: (Epsilon, Delta),
        (steps, radius, reach): (u32, f64, f64),
        (n, dims): (u64, usize),
        row: bool,
    ) -> Result<Stage, ReleaseError> {
        let invalid = |error: DpError| ReleaseError::Invalid(error.to_string());
        let (epsilon, delta) = budget;
        let step_epsilon = per_step_epsilon(epsilon, delta, steps, |each| Ok(one_step(rule, each)))
            .map_err(invalid)?;
        let region =
            Region::new(reach, &vec![-reach; dims], &vec![reach; dims], None).map_err(invalid)?;
        let moved = if row {
            region.side_units() as f64
        } else {
            region.coordinate_units(2.0)
        };
        let sensitivity = moved * 2f64.powi(-FRACTION_BITS);
        // |Sⱼ| ≤ N·2⁴⁰ units.
        let range = (n as f64).next_up();
        let selector = Selector::new(rule, step_epsilon, sensitivity, range).map_err(invalid)?;
        let unit = radius * reach / n as f64;
        Ok(Stage {
            steps,
            radius,
            n,
            epsilon,
            delta,
            step_epsilon,
            sensitivity: sensitivity * unit,
            selector,
            region,
            unit,
        })
    }

    /// What the ledger records for the stage.
    fn loss(&self) -> PrivacyLoss {
        let each = self.selector.loss();
        if self.steps == 1 {
            each
        } else {
            PrivacyLoss::Composition {
                count: self.steps,
                each: Box::new(each),
            }
        }
    }

    fn used(&self) -> api::StageUsed {
        api::StageUsed {
            steps: self.steps,
            radius: self.radius,
            n: self.n,
            epsilon: self.epsilon.value(),
            delta: self.delta.value(),
            step_epsilon: self.step_epsilon.value(),
            score_sensitivity: self.sensitivity,
            selection_scale: self.selector.scale() * self.unit,
        }
    }

    /// `steps` steps from `centre` over `data`; `select` picks the index
    /// of a vertex from the exact normalised scores (privately, in
    /// production).
    fn run<R: RowPasses>(
        &self,
        data: &[Participant<R>],
        fit: &Fit,
        centre: &[f64],
        mut select: impl FnMut(&Fixed) -> Result<usize, DpError>,
    ) -> Result<Vec<f64>, Failure> {
        let dims = centre.len();
        let mut theta = centre.to_vec();
        let mut scores = Fixed::normalised(vec![0; 2 * dims]);
        for step in 1..=self.steps {
            let sums = gradient(data, fit, &theta, &self.region)?;
            for (index, sum) in sums.into_iter().enumerate() {
                scores.units[index] = sum;
                scores.units[dims + index] = -sum;
            }
            let chosen = select(&scores)?;
            let (axis, sign) = (chosen % dims, if chosen < dims { 1.0 } else { -1.0 });
            let mu = 2.0 / (f64::from(step) + 2.0);
            for (weight, middle) in theta.iter_mut().zip(centre) {
                *weight = (1.0 - mu) * *weight + mu * middle;
            }
            theta[axis] += mu * sign * self.radius;
        }
        Ok(theta)
    }

    /// [`Stage::run`] with the stage's selector on the OS CSPRNG, its
    /// selections together held to one deadline fixed by public facts (the
    /// stage's steps and candidates), so that how long they took (the
    /// exponential mechanism's rejections depend on the scores) does not
    /// show: the deadline covers the rejections' tail at the worst scores
    /// ([`Selector::allowance`]).
    fn run_private<R: RowPasses>(
        &self,
        data: &[Participant<R>],
        fit: &Fit,
        centre: &[f64],
    ) -> Result<Vec<f64>, Failure> {
        let candidates = 2 * centre.len();
        let mut meter = pacing::Meter::new(pacing::budget_of_selections(
            &self.selector,
            candidates,
            self.steps,
        ));
        let mut rng = OsNoise::new();
        self.run(data, fit, centre, |scores| {
            meter.time(|| {
                self.selector
                    .select_fixed(scores, &mut rng)
                    .map(|(index, _)| index)
            })
        })
    }
}

/// Frank-Wolfe on the label of `columns` (in memory) as a release runs its
/// first stage under unit `row` at (ε, δ), each step's vertex chosen by
/// the stage's selector from `rng` without pacing: what `cargo bench
/// --bench learners` times.
pub fn fit_label<R: rand::Rng + ?Sized>(
    columns: Arc<Columns>,
    (radius, steps): (f64, u32),
    (rule, budget): (SelectionRule, (Epsilon, Delta)),
    rng: &mut R,
) -> Result<Vec<f64>, ReleaseError> {
    let n = columns.len() as u64;
    let dims = columns.shape().features + 1;
    let fit = Fit {
        target: Target {
            name: "label".to_owned(),
            centre: 0.5,
            scale: 0.5,
        },
        intercept: true,
    };
    let stage = Stage::price(rule, budget, (steps, radius, radius + 1.0), (n, dims), true)?;
    let data = [Participant {
        rows: columns,
        outcome: Outcome::Label,
    }];
    stage
        .run(&data, &fit, &vec![0.0; dims], |scores| {
            stage
                .selector
                .select_fixed(scores, rng)
                .map(|(index, _)| index)
        })
        .map_err(|error| ReleaseError::Invalid(error.to_string()))
}

/// One step's loss under `rule` at ε₀.
fn one_step(rule: SelectionRule, epsilon: Epsilon) -> PrivacyLoss {
    match rule {
        SelectionRule::Laplace => PrivacyLoss::PureEpsilon {
            epsilon: epsilon.value(),
        },
        SelectionRule::Exponential => PrivacyLoss::BoundedRange {
            epsilon: epsilon.value(),
        },
    }
}

/// The release's `noise.mechanism`.
fn mechanism_name(rule: SelectionRule) -> &'static str {
    match rule {
        SelectionRule::Laplace => "report_noisy_min",
        SelectionRule::Exponential => "exponential",
    }
}

/// The std of the noise on each vertex score: discrete Laplace of scale b
/// has std ≈ √2·b; the exponential mechanism of temperature τ is the
/// argmin of the scores plus Gumbel(τ) noise, of std πτ/√6.
fn noise_std(rule: SelectionRule, scale: f64) -> f64 {
    match rule {
        SelectionRule::Laplace => std::f64::consts::SQRT_2 * scale,
        SelectionRule::Exponential => std::f64::consts::PI * scale / 6f64.sqrt(),
    }
}

/// What every step computes with: public settings.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Fit {
    target: Target,
    intercept: bool,
}

/// A participating dataset's rows and where its target is.
struct Participant<R> {
    rows: R,
    outcome: Outcome,
}

/// N·∇L(θ) = Σ(θᵀuᵢ − y′ᵢ)·uᵢ over every participant's rows, each row's
/// terms on `region`'s grid ([`Stage`]), summed exactly in grid units: the
/// same integers in any order, on any number of threads or partitions.
fn gradient<R: RowPasses>(
    data: &[Participant<R>],
    fit: &Fit,
    theta: &[f64],
    region: &Region,
) -> Result<Vec<i128>, Failure> {
    let mut total = vec![0; theta.len()];
    for participant in data {
        let pass = Terms {
            fit: fit.clone(),
            outcome: participant.outcome,
            theta: theta.to_vec(),
            region: region.clone(),
            sums: vec![0; theta.len()],
        };
        let part = participant.rows.sum(pass)?.sums;
        add_exact(&mut total, &part).map_err(Failure::Corrupt)?;
    }
    Ok(total)
}

/// Σ(θᵀuᵢ − y′ᵢ)·uᵢ over the rows a pass visits, each row's terms on
/// `region`'s grid: a summed pass, so the engine runs it over files too.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Terms {
    fit: Fit,
    outcome: Outcome,
    theta: Vec<f64>,
    region: Region,
    sums: Vec<i128>,
}

impl Pass for Terms {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let dims = self.theta.len();
        let offset = usize::from(self.fit.intercept);
        let parts = block.chunks(|rows| {
            let mut sum = self.region.sums();
            let (mut u, mut terms) = (vec![1.0; dims], vec![0.0; dims]);
            for row in rows {
                for (slot, &x) in u[offset..].iter_mut().zip(block.features(row)) {
                    *slot = 2.0 * f64::from(x) - 1.0;
                }
                let y = match self.outcome {
                    Outcome::Label => f64::from(block.labels()[row]),
                    Outcome::Measure(index) => block.measure(index)[row],
                };
                let target = (y - self.fit.target.centre) / self.fit.target.scale;
                let residual = u.iter().zip(&self.theta).map(|(a, b)| a * b).sum::<f64>() - target;
                for (term, value) in terms.iter_mut().zip(&u) {
                    *term = residual * value;
                }
                sum.add(&terms, true);
            }
            sum.finish()
        });
        for part in parts {
            add_exact(&mut self.sums, &part)?;
        }
        Ok(())
    }
}

impl Summed for Terms {
    const KIND: &'static str = "frank-wolfe";

    fn needs(&self) -> Needed {
        Needed::features_and(matches!(self.outcome, Outcome::Measure(_)))
    }

    fn sums(&self) -> Vec<i128> {
        self.sums.clone()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        add_exact(&mut self.sums, sums)
    }
}

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
    let n = sources.iter().fold(dataset.n_rows, |n, (source, _)| {
        n.saturating_add(source.n_rows)
    });
    let dims = dataset.schema.k() + usize::from(params.fit_intercept);
    let steps = params.steps + params.debias.as_ref().map_or(0, |debias| debias.steps);
    check_work(
        u64::from(steps)
            .saturating_mul(n)
            .saturating_mul(dims as u64),
        "steps × rows × coordinates",
        "take fewer steps",
    )?;
    let rule = match params.selection {
        Selection::Laplace => SelectionRule::Laplace,
        Selection::Exponential => SelectionRule::Exponential,
    };
    let row = std::iter::once(dataset)
        .chain(sources.iter().map(|(source, _)| source))
        .any(|participant| participant.privacy_unit == PrivacyUnit::Row);
    let r = params.radius;
    let budgets = match &params.debias {
        Some(debias) => split(knobs, debias.epsilon_share)?,
        None => [(knobs.epsilon, knobs.delta); 2],
    };
    let first = Stage::price(rule, budgets[0], (params.steps, r, r + 1.0), (n, dims), row)?;
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
                    (dataset.n_rows, dims),
                    dataset.privacy_unit == PrivacyUnit::Row,
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
                    n: source.n_rows,
                })
                .collect(),
        }))
    }
}

#[cfg(test)]
#[path = "frank_wolfe_tests.rs"]
mod tests;
