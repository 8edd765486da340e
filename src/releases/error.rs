//! Why a release was not made, or failed once debited.

use dpgate_api_types as api;
use dpgate_learn::FitError;
use uuid::Uuid;

use crate::domain::budget::Refusal;
use crate::domain::dataset::DatasetRecord;
use crate::dp::{self, DpError};
use crate::store::StoreError;

/// Why a release was not made.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// Bad parameters for this kind or dataset (nothing spent).
    #[error("{0}")]
    Invalid(String),
    #[error("no such dataset")]
    NoDataset,
    /// No such thing for this caller (a gradient session, say).
    #[error("{0}")]
    NotFound(String),
    /// The release does not fit (nothing spent).
    #[error("{detail}")]
    BudgetExhausted {
        detail: String,
        remaining: api::Remaining,
    },
    /// The idempotency key was used for another request, or its release is
    /// still being made.
    #[error("{0}")]
    Conflict(String),
    /// The release was debited but could not be made: its ledger entry
    /// stays, its record says it failed.
    #[error("{detail}")]
    Failed { release: Uuid, detail: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A fault before the debit (nothing spent).
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// Why a debited release could not be made (the cause goes to the log).
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the stored rows do not match their snapshot: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Fit(#[from] ModelError),
    #[error(transparent)]
    Noise(#[from] dp::DpError),
    #[error("a released value is not finite")]
    NonFinite,
    #[error("the snapshot could not be held in memory")]
    Unheld,
    #[error("a computation task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("cannot encode the release: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Clock(#[from] crate::domain::clock::ClockError),
}

impl Failure {
    /// The `cause` label of `dpgate_release_failures_total`. Those whose
    /// occurrence can depend on the private data (`not_converged`,
    /// `noise`, `non_finite`) are un-noised bits an operator must see;
    /// docs/models.md bounds how often the first can happen.
    pub fn cause(&self) -> &'static str {
        match self {
            Failure::Store(_) => "store",
            Failure::Corrupt(_) => "corrupt",
            Failure::Fit(ModelError::Fit(FitError::NotConverged { .. })) => "not_converged",
            Failure::Fit(ModelError::Fit(_)) => "fit_input",
            Failure::Fit(ModelError::Dp(_)) | Failure::Noise(_) => "noise",
            Failure::NonFinite => "non_finite",
            Failure::Unheld => "unheld",
            Failure::Task(_) => "task",
            Failure::Encode(_) => "encode",
            Failure::Clock(_) => "clock",
        }
    }
}

/// Why a fit failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the fit did not converge: {0}")]
    Fit(#[from] FitError),
    #[error(transparent)]
    Dp(#[from] DpError),
}

/// The refusal of a release that `dataset` (its own, or with `source`
/// set, one of its sources) cannot pay for.
pub(super) fn exhausted(dataset: &DatasetRecord, refusal: Refusal, source: bool) -> ReleaseError {
    let spent = dataset.spent();
    let which = if source {
        format!(
            "source dataset {:?} ({}) cannot pay its share, so nothing was spent anywhere: ",
            dataset.name, dataset.id
        )
    } else {
        String::new()
    };
    let detail = which
        + &match refusal {
            Refusal::Budget(after) => {
                let left = dataset.remaining(&spent);
                format!(
                    "this release would bring the dataset's spending to ε = {}, δ = {} (budget \
                     ε = {}, δ = {}); it has ε = {}, δ = {} left",
                    after.epsilon.value(),
                    after.delta.value(),
                    dataset.budget.epsilon.value(),
                    dataset.budget.delta.value(),
                    left.epsilon,
                    left.delta,
                )
            }
            Refusal::Cap(cap, after) => format!(
                "this release would bring your own spending on this dataset to ε = {}, δ = {}, \
                 beyond your cap of ε = {}, δ = {}",
                after.epsilon.value(),
                after.delta.value(),
                cap.epsilon.value(),
                cap.delta.value(),
            ),
        };
    ReleaseError::BudgetExhausted {
        detail,
        remaining: dataset.remaining(&spent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_its_cause_and_a_fit_that_did_not_converge_is_told_apart() {
        let not_converged = Failure::Fit(ModelError::Fit(dpgate_learn::FitError::NotConverged {
            gradient_norm: 1e-9,
            iterations: 600,
        }));
        assert_eq!(not_converged.cause(), "not_converged");
        let bad_input = Failure::Fit(ModelError::Fit(dpgate_learn::FitError::NonFinite {
            what: "x",
        }));
        assert_eq!(bad_input.cause(), "fit_input");
        assert_eq!(Failure::NonFinite.cause(), "non_finite");
        assert_eq!(Failure::Corrupt("a block".to_owned()).cause(), "corrupt");
        assert_eq!(Failure::Unheld.cause(), "unheld");
        assert_eq!(Failure::Noise(dp::DpError::NoSteps).cause(), "noise");
    }
}
