//! One Frank-Wolfe stage: the steps over the L1 ball's vertices, each
//! picked by a private selection from the gradient's exact sums, and the
//! pass that sums them.

use std::sync::Arc;

use dpgate_api_types::{self as api};

use super::super::iterative::RowPasses;
use crate::domain::dataset::{DatasetRecord, Schema, Unit};
use crate::dp::fixed::{FRACTION_BITS, Fixed};
use crate::dp::region::Region;
use crate::dp::{
    Delta, DpError, Epsilon, OsNoise, PrivacyLoss, SelectionRule, Selector, per_step_epsilon,
};
use crate::engine::{Needed, Summed, add_exact};
use crate::releases::pacing;
use crate::releases::{Failure, ReleaseError};

use crate::snapshots::{Columns, Pass};

/// Where the target is in one participant's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Outcome {
    Label,
    Measure(usize),
}

/// The target y′ = (y − centre)/scale, as every participant holds it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Target {
    pub(super) name: String,
    pub(super) centre: f64,
    pub(super) scale: f64,
}

impl Target {
    /// The request's target on `schema`: where it is, and its map.
    pub(super) fn parse(name: &str, schema: &Schema) -> Result<(Target, Outcome), ReleaseError> {
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
pub(super) fn matching(
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
/// - unit `user`: a person adds or removes at most m rows, each of whose
///   terms lies in the box, half its side: Δ_s = m (m·2⁴⁰ units exactly).
///
/// In score units (× r·reach/N) those are the module docs' 2r(r + 1)/N and
/// 2r/N (plus 3·2⁻⁴⁰·r·reach/N), with no float rounding left to pad; under
/// `user`, where N is private, scores stay sums (× r·reach): m·r(r + 1).
/// With several participants Δ_s is the largest of theirs.
#[derive(Debug, Clone)]
pub(super) struct Stage {
    pub(super) steps: u32,
    pub(super) radius: f64,
    /// N, where every participant's is public.
    pub(super) n: Option<u64>,
    pub(super) epsilon: Epsilon,
    pub(super) delta: Delta,
    pub(super) step_epsilon: Epsilon,
    /// Δ_s in score units.
    pub(super) sensitivity: f64,
    pub(super) selector: Selector,
    pub(super) region: Region,
    /// What one unit of a normalised score is worth in score units.
    pub(super) unit: f64,
}

impl Stage {
    /// Calibrates a stage of `steps` over `n` rows of `dims` coordinates to
    /// (ε, δ), on a ball of `radius` where residuals are at most `reach`,
    /// for participants of `units`; `n` is N, or under unit `user` the
    /// public bound on it.
    pub(super) fn price(
        rule: SelectionRule,
        budget: (Epsilon, Delta),
        (steps, radius, reach): (u32, f64, f64),
        (n, dims): (u64, usize),
        units: &[Unit],
    ) -> Result<Stage, ReleaseError> {
        let invalid = |error: DpError| ReleaseError::Invalid(error.to_string());
        let (epsilon, delta) = budget;
        let step_epsilon = per_step_epsilon(epsilon, delta, steps, |each| Ok(one_step(rule, each)))
            .map_err(invalid)?;
        let region =
            Region::new(reach, &vec![-reach; dims], &vec![reach; dims], None).map_err(invalid)?;
        let moved = units
            .iter()
            .map(|unit| match unit {
                Unit::Row => region.side_units() as f64,
                Unit::Label => region.coordinate_units(2.0),
                Unit::User(bounds) => region.side_units() as f64 / 2.0 * f64::from(bounds.rows),
            })
            .fold(0.0, f64::max);
        let sensitivity = moved * 2f64.powi(-FRACTION_BITS);
        // |Sⱼ| ≤ N·2⁴⁰ units.
        let range = (n as f64).next_up();
        let selector = Selector::new(rule, step_epsilon, sensitivity, range).map_err(invalid)?;
        let public = !units.iter().any(|unit| matches!(unit, Unit::User(_)));
        let n = public.then_some(n);
        let unit = radius * reach / n.unwrap_or(1) as f64;
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
    pub(super) fn loss(&self) -> PrivacyLoss {
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

    pub(super) fn used(&self) -> api::StageUsed {
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
    pub(super) fn run<R: RowPasses>(
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
    pub(super) fn run_private<R: RowPasses>(
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
    let stage = Stage::price(
        rule,
        budget,
        (steps, radius, radius + 1.0),
        (n, dims),
        &[Unit::Row],
    )?;
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
pub(super) fn one_step(rule: SelectionRule, epsilon: Epsilon) -> PrivacyLoss {
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
pub(super) fn mechanism_name(rule: SelectionRule) -> &'static str {
    match rule {
        SelectionRule::Laplace => "report_noisy_min",
        SelectionRule::Exponential => "exponential",
    }
}

/// The std of the noise on each vertex score: discrete Laplace of scale b
/// has std ≈ √2·b; the exponential mechanism of temperature τ is the
/// argmin of the scores plus Gumbel(τ) noise, of std πτ/√6.
pub(super) fn noise_std(rule: SelectionRule, scale: f64) -> f64 {
    match rule {
        SelectionRule::Laplace => std::f64::consts::SQRT_2 * scale,
        SelectionRule::Exponential => std::f64::consts::PI * scale / 6f64.sqrt(),
    }
}

/// What every step computes with: public settings.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Fit {
    pub(super) target: Target,
    pub(super) intercept: bool,
}

/// A participating dataset's rows and where its target is.
pub(super) struct Participant<R> {
    pub(super) rows: R,
    pub(super) outcome: Outcome,
}

/// N·∇L(θ) = Σ(θᵀuᵢ − y′ᵢ)·uᵢ over every participant's rows, each row's
/// terms on `region`'s grid ([`Stage`]), summed exactly in grid units: the
/// same integers in any order, on any number of threads or partitions.
pub(super) fn gradient<R: RowPasses>(
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
pub(crate) struct Terms {
    pub(super) fit: Fit,
    pub(super) outcome: Outcome,
    pub(super) theta: Vec<f64>,
    pub(super) region: Region,
    pub(super) sums: Vec<i128>,
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
