//! The aggregate release: counts, sums and means of the label or of a
//! declared measure, over every combination of the declared values of the
//! `group_by` dimensions (present in the data or not, so that the set of
//! groups reveals nothing).
//!
//! A request becomes per-cell *quantities*: `count` and `sum:c` for each
//! column c a statistic needs (`mean:c` = sum / count). Every quantity that
//! the privacy unit leaves public is released exactly; the private ones are
//! released together, with one noise draw calibrated to their joint
//! sensitivity.
//!
//! Sensitivity of one quantity over all cells, for a column with declared
//! bounds [lo, hi] (the label has [0, 1]) and M = max(|lo|, |hi|):
//!
//! | unit    | grouped | quantity    | L2                  | L1               |
//! |---------|---------|-------------|---------------------|------------------|
//! | `label` | either  | `count`     | 0 (public)          | 0 (public)       |
//! | `label` | either  | `sum:c`     | hi − lo             | hi − lo          |
//! | `row`   | no      | `count`     | 0 (N is public)     | 0                |
//! | `row`   | no      | `sum:c`     | hi − lo             | hi − lo          |
//! | `row`   | yes     | `count`     | √2                  | 2                |
//! | `row`   | yes     | `sum:c`     | max(hi − lo, √2·M)  | max(hi − lo, 2M) |
//! | `user`  | no      | either      | M·m                 | M·m              |
//! | `user`  | yes     | either      | M·‖c*‖₂             | M·‖c*‖₁          |
//!
//! Under `user` (M = 1 for a count) a neighbour adds or removes one
//! person's rows, of which a release reads at most m (grouped: g cells of
//! r rows, m in all), the count vector c* of
//! [`crate::dp::contribution::Reach::of_groups`] bounding every person's
//! ([`Calibration`] has the proof). Every quantity is private there, the
//! count too, and means are over the noisy count.
//!
//! Under `label` a neighbour changes one row's outcomes: its label and its
//! measures (a measure is typically an outcome, a conversion value beside
//! `converted`, so it is as private as the label). Dimensions are public,
//! so the row stays in its cell, the counts stay, and each sum of that cell
//! moves by at most its column's hi − lo. Under `row` one row
//! is replaced: either it stays in its cell (each sum moves by at most
//! hi − lo, the count not at all) or it moves between two cells (each
//! quantity loses up to M in one and gains up to M in the other, the count
//! 1 in each). A quantity whose bound is 0 (a constant) is public.
//!
//! Joint calibration. Each private quantity q is divided by its own
//! sensitivity w_q above before the noise is added (and multiplied back
//! after), so that every statistic gets the same share of the privacy loss
//! and the noise on q has standard deviation σ·w_q. The normalised vector's
//! sensitivity is the worse of the two cases, with r_q = hi − lo (0 for the
//! count):
//! L2² = max(Σ (r_q/w_q)², Σ 2(M_q/w_q)²), L1 = max(Σ r_q/w_q, Σ 2M_q/w_q),
//! the second term only under `row` with `group_by`.
//!
//! Means. Under `label`, and under `row` without `group_by`, the count is
//! public: mean = noisy sum / max(count, 1), std = std(sum) / max(count, 1)
//! (an empty group's mean is its noise alone, clamped). Under `row` with
//! `group_by` the count is private and is released with the sum (the budget
//! is split between them by the normalisation above): mean = noisy sum /
//! max(noisy count, 1), and the std is the delta-method
//! √(std(sum)² + mean²·std(count)²) / max(count, 1). Noisy means are
//! clamped to [lo, hi]; `std` describes the noise before clamping.
//!
//! The noise lattice must hold every value a query can take (see
//! [`crate::dp::Mechanism`]): a count is at most N, a sum at most N·M, each
//! divided by its own sensitivity. A declared range so wide that no lattice
//! holds it and still resolves the noise is refused before the debit.
//!
//! A release of counts alone under `label` is public and free: it reads the
//! rows' dimensions, never a label or a measure. Under `row` without
//! `group_by` the count is N itself.

mod query;
mod sensitivity;
mod tally;

use async_trait::async_trait;
use dpgate_api_types::{self as api};

use crate::domain::dataset::{DatasetRecord, Schema};
use crate::dp::{Delta, Epsilon, Mechanism};
use crate::releases::plan::{most_rows, noise_fixed, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};

pub use query::*;
pub use sensitivity::*;
pub use tally::*;

/// Most statistics one request may ask for.
pub const MAX_STATISTICS: usize = 16;

/// Default most groups (combinations of dimension values) one aggregate
/// may cover (`DPGATE_MAX_GROUPS`).
pub const DEFAULT_MAX_GROUPS: usize = 100_000;
/// The released groups: `noisy` is the mechanism's output over
/// [`Calibration::private_values`], `noise_std` its per-coordinate std.
pub fn groups(
    query: &Query,
    schema: &Schema,
    calibration: &Calibration,
    tally: &Tally,
    noisy: &[f64],
    noise_std: f64,
) -> Vec<api::AggregateGroup> {
    let estimates = calibration.estimates(tally, noisy, noise_std);
    let width = query.quantities.len();
    let position = |quantity: Quantity| {
        query
            .quantities
            .iter()
            .position(|&q| q == quantity)
            .unwrap_or(0)
    };
    let count_index = position(Quantity::Count);
    let mut groups = Vec::with_capacity(query.cells * query.statistics.len());
    for (key, cell) in query.keys(schema).into_iter().zip(estimates.chunks(width)) {
        for stat in &query.statistics {
            let (value, std) = match stat.op {
                Op::Count => cell[count_index],
                Op::Sum(col) => cell[position(Quantity::Sum(col))],
                Op::Mean(col) => {
                    let (sum, sum_std) = cell[position(Quantity::Sum(col))];
                    let (count, count_std) = cell[count_index];
                    let (lo, hi) = column_bounds(col, schema);
                    let count = count.max(1.0);
                    let mean = (sum / count).clamp(lo, hi);
                    let std = (sum_std.powi(2) + (mean * count_std).powi(2)).sqrt() / count;
                    (mean, std)
                }
            };
            groups.push(api::AggregateGroup {
                key: key.clone(),
                statistic: stat.name.clone(),
                value,
                std,
                exact: std == 0.0,
            });
        }
    }
    groups
}

/// An aggregate release, priced.
struct Aggregate {
    price: Price,
    query: Query,
    calibration: Calibration,
    schema: Schema,
    /// `None` when every quantity is public.
    mechanism: Option<Mechanism>,
}

fn norm(kind: api::AggregateMechanism, knobs: &Knobs) -> Result<Norm, ReleaseError> {
    match (kind, knobs.delta == Delta::ZERO) {
        (api::AggregateMechanism::Gaussian, false) => Ok(Norm::L2),
        (api::AggregateMechanism::Laplace, true) => Ok(Norm::L1),
        (api::AggregateMechanism::Gaussian, true) => Err(ReleaseError::Invalid(
            "the gaussian mechanism needs a delta in (0, 1); use \"mechanism\": \"laplace\" for \
             pure ε"
                .to_owned(),
        )),
        (api::AggregateMechanism::Laplace, false) => Err(ReleaseError::Invalid(
            "the laplace mechanism is pure ε: omit delta or set it to 0".to_owned(),
        )),
    }
}

/// Prices an aggregate: everything it needs is the schema, N and the query.
pub fn plan(
    dataset: &DatasetRecord,
    params: &api::AggregateParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    let norm = norm(params.mechanism, knobs)?;
    require_rows(dataset)?;
    let schema = &dataset.schema;
    let query = Query::parse(
        schema,
        &params.statistics,
        &params.group_by,
        knobs.max_groups,
    )
    .map_err(ReleaseError::Invalid)?;
    let calibration = Calibration::new(&query, dataset.unit(), schema, norm);
    let n = most_rows(dataset);
    if !calibration.holds(n) {
        return Err(ReleaseError::Invalid(format!(
            "the declared bounds are too wide for an exact sum over {n} rows; narrow them"
        )));
    }
    let (price, mechanism) = if calibration.public() {
        // Public numbers cost nothing, whatever the target.
        let mut price = Price::free(n);
        price.epsilon = params.target_std.map(|_| Epsilon::ZERO);
        (price, None)
    } else {
        let dims = query.cells() * calibration.private_quantities();
        let (sensitivity, range) = (calibration.sensitivity, calibration.range(n));
        let spread = calibration.spread(&query, schema, n);
        let calibrated = match norm {
            Norm::L2 => knobs.gaussian(params.target_std, spread, sensitivity, dims, range)?,
            Norm::L1 => knobs.calibrated(params.target_std, spread, |epsilon| {
                Mechanism::laplace(epsilon, sensitivity, dims, range)
            })?,
        };
        (calibrated.price(sensitivity, n), Some(calibrated.mechanism))
    };
    Ok(Box::new(Aggregate {
        price,
        query,
        calibration,
        schema: schema.clone(),
        mechanism,
    }))
}

#[async_trait]
impl Planned for Aggregate {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let Aggregate {
            query,
            calibration,
            schema,
            mechanism,
            ..
        } = *self;
        let mut tally = calibration.tally(&query);
        let pass = || Tallying {
            query: query.clone(),
            calibration: calibration.clone(),
            tally: calibration.tally(&query),
        };
        let (noisy, noise_std) = match mechanism {
            // Counts only, public under the unit: from N, or from the rows'
            // dimensions (never their outcomes).
            None if !query.grouped() => {
                tally.count_all(&query, snapshot.dataset().n_rows);
                (Vec::new(), 0.0)
            }
            None => {
                tally = snapshot
                    .scan_inputs(pass())
                    .await
                    .map_err(|error| Failure::Corrupt(error.to_string()))?
                    .tally;
                (Vec::new(), 0.0)
            }
            Some(mechanism) => {
                tally = snapshot.sum(pass()).await?.tally;
                let noise_std = mechanism.noise_std();
                let exact = calibration.private_values(&tally);
                (noise_fixed(mechanism, exact).await?, noise_std)
            }
        };
        Ok(api::ReleaseResult::Aggregate(api::AggregateResult {
            groups: groups(&query, &schema, &calibration, &tally, &noisy, noise_std),
        }))
    }
}

#[cfg(test)]
mod tests;
