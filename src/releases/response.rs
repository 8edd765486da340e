//! What a release answers: its outcome, and the response body every kind
//! shares.

use dpgate_api_types as api;
use uuid::Uuid;

use super::Price;
use crate::domain::dataset::{DatasetRecord, Unit, spent_view};
use crate::dp::{self, Delta, Epsilon};

/// A successful answer.
#[derive(Debug)]
pub enum Outcome {
    /// A new release: the response body as stored.
    Created(String),
    /// The stored response of an earlier request with the same key.
    Replayed(String),
    /// A dry run's price, or a release of public numbers only: nothing
    /// spent, nothing stored.
    Priced(Box<api::Release>),
}

/// What a release asks for, beyond its body.
pub struct Ask<'a> {
    pub dataset: Uuid,
    pub analyst: &'a str,
    pub idempotency_key: Option<String>,
    pub dry_run: bool,
    /// Most groups an aggregate may cover.
    pub max_groups: usize,
}

/// What every response of one request repeats.
#[derive(Debug, Clone)]
pub(super) struct Summary {
    pub(super) kind: &'static str,
    /// As requested (the ledger records them in its units).
    pub(super) epsilon: f64,
    pub(super) delta: f64,
    pub(super) analyst: String,
}

/// The response for a release; `id` is `None` when nothing is recorded,
/// `result` on a dry run.
pub(super) fn response(
    id: Option<Uuid>,
    summary: &Summary,
    price: &Price,
    after: &DatasetRecord,
    created_at: String,
    result: Option<api::ReleaseResult>,
) -> api::Release {
    let spent = after.spent();
    let (epsilon, delta) = match price.loss {
        Some(_) => (summary.epsilon, summary.delta),
        None => (0.0, 0.0),
    };
    let mut noise = price.noise.clone();
    if noise.mechanism == "gaussian" {
        // T steps at √T times one release's σ compose to that release.
        let steps = match &price.loss {
            Some(dp::PrivacyLoss::Composition { count, .. }) => f64::from(*count),
            _ => 1.0,
        };
        noise.sigma_classic = dp::classic_sigma(epsilon, delta, price.sensitivity)
            .ok()
            .map(|sigma| steps.sqrt() * sigma);
    }
    api::Release {
        id,
        kind: summary.kind.to_owned(),
        epsilon: Epsilon::new(epsilon).map_or(epsilon, Epsilon::value),
        delta: Delta::new(delta).map_or(delta, Delta::value),
        sensitivity: price.sensitivity,
        sigma: price.sigma,
        n: (!matches!(after.unit(), Unit::User(_))).then_some(price.n),
        noise,
        result,
        spent: spent_view(&spent),
        remaining: after.remaining(&spent),
        analyst: summary.analyst.clone(),
        created_at,
        dry_run: false,
    }
}
