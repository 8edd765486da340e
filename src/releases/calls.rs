//! The calls of a pre-paid gradient session (`kinds::gradient`): the
//! session's release debited all T of them, so a call spends nothing; it
//! claims its index, once.
//!
//! The first request for call k claims it (with the hash of its θ) and
//! gets the gradient at θ, its noise drawn fresh; a retry of k with the
//! same θ gets the stored answer byte for byte, and with another θ is
//! refused: answering it would be a second draw for one paid call. The
//! call is made on a task of its own, like a release, so a client that
//! goes away cannot lose it; a call that fails after its claim stays
//! spent and its failure is the answer to every retry.

use std::sync::Arc;
use std::time::Duration;

use dpgate_api_types as api;
use sha2::{Digest, Sha256};
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use super::kinds::gradient::{Session, check_theta};
use super::{Failure, ReleaseError, Snapshot};
use crate::snapshots::Snapshots;
use crate::store::{CallClaim, Finished, Store, StoredCall};

/// How long a retry waits for its call to be made by another request.
const CALL_WAIT: Duration = Duration::from_secs(60);
/// How often it looks.
const CALL_POLL: Duration = Duration::from_millis(100);

/// A call of a session.
pub struct CallAsk<'a> {
    pub dataset: Uuid,
    pub release: Uuid,
    pub analyst: &'a str,
    pub call: api::GradientCall,
}

/// The session a release opened: 404 unless it is one of `analyst`'s
/// releases on `dataset`, 422 if that release is not a gradient session.
async fn session(data: &Arc<Snapshots>, ask: &CallAsk<'_>) -> Result<Session, ReleaseError> {
    let store = data.store();
    let none = || ReleaseError::NotFound("no such gradient session".to_owned());
    let stored = store
        .release(ask.dataset, ask.release)
        .await?
        .filter(|stored| stored.analyst == ask.analyst)
        .ok_or_else(none)?;
    let body = stored.response.ok_or_else(none)?;
    let release: api::Release = serde_json::from_str(&body).map_err(anyhow::Error::from)?;
    let dataset = store
        .dataset(ask.dataset)
        .await?
        .ok_or(ReleaseError::NoDataset)?;
    Session::of(&release, stored.rows, Snapshot::new(data.clone(), dataset))
        .map_err(|failure| ReleaseError::Internal(failure.into()))?
        .ok_or_else(|| {
            ReleaseError::Invalid(format!(
                "release {} is a {} release, not a gradient session (open one with \
                 \"kind\": \"gradient\" and \"calls\")",
                ask.release, release.kind
            ))
        })
}

/// Makes (or replays) one call of a session: the response body, as
/// stored.
pub async fn call(
    data: Arc<Snapshots>,
    tasks: &TaskTracker,
    ask: CallAsk<'_>,
) -> Result<String, ReleaseError> {
    let session = session(&data, &ask).await?;
    let api::GradientCall { call, theta } = ask.call;
    if call >= session.calls {
        return Err(ReleaseError::Invalid(format!(
            "call must be from 0 to {} (the session holds {} calls; got {call})",
            session.calls - 1,
            session.calls
        )));
    }
    check_theta(&theta, session.dims())?;
    let theta_hash = hex::encode(Sha256::digest(
        serde_json::to_vec(&theta).map_err(anyhow::Error::from)?,
    ));
    let store = data.store().clone();
    let claimed = match store.claim_call(ask.release, call, &theta_hash).await? {
        CallClaim::Claimed { claimed } => claimed,
        CallClaim::Taken(stored) => {
            return replay(store.as_ref(), ask.release, call, stored, &theta_hash).await;
        }
    };
    let remaining = u64::from(session.calls).saturating_sub(claimed);
    let release = ask.release;
    let span =
        tracing::info_span!("gradient_call", dataset = %ask.dataset, release = %release, call);
    let task = tasks.spawn(
        async move {
            let made = make(session, call, theta, remaining).await;
            match made {
                Ok(body) => {
                    store
                        .finish_call(release, call, Finished::Response(body.clone()))
                        .await?;
                    tracing::info!("gradient call made");
                    Ok(body)
                }
                Err(failure) => {
                    tracing::error!(error = %failure, "a claimed gradient call failed");
                    let detail = failed(release, call);
                    store
                        .finish_call(release, call, Finished::Failure(detail.clone()))
                        .await?;
                    Err(ReleaseError::Failed { release, detail })
                }
            }
        }
        .instrument(span),
    );
    task.await.map_err(|error| {
        ReleaseError::Internal(anyhow::anyhow!("the gradient call's task failed: {error}"))
    })?
}

/// The response body of a claimed call.
async fn make(
    session: Session,
    call: u32,
    theta: Vec<f64>,
    remaining: u64,
) -> Result<String, Failure> {
    let gradient = session.call(theta).await?;
    let body = api::GradientCallResult {
        call,
        gradient,
        remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
    };
    Ok(serde_json::to_string(&body)?)
}

/// The answer to a call that could not be made after its claim.
fn failed(release: Uuid, call: u32) -> String {
    format!(
        "call {call} of gradient session {release} was claimed but could not be made: it stays \
         spent, and a retry with the same theta gets this same answer. The cause is in the \
         server's log."
    )
}

/// The answer to a retry of a claimed call: its response, its failure, or
/// (while another request is still making it) what it becomes.
async fn replay(
    store: &dyn Store,
    release: Uuid,
    call: u32,
    mut stored: StoredCall,
    theta_hash: &str,
) -> Result<String, ReleaseError> {
    if stored.theta_hash != theta_hash {
        return Err(ReleaseError::Conflict(format!(
            "call {call} of this session was already made at another theta: each call is \
             spent once; use the next call index"
        )));
    }
    let deadline = tokio::time::Instant::now() + CALL_WAIT;
    loop {
        if let Some(body) = stored.response {
            return Ok(body);
        }
        if let Some(detail) = stored.failure {
            return Err(ReleaseError::Failed { release, detail });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ReleaseError::Conflict(format!(
                "call {call} is still being made, or its server stopped after claiming it (it \
                 stays spent); retry later"
            )));
        }
        tokio::time::sleep(CALL_POLL).await;
        stored = store
            .call(release, call)
            .await?
            .ok_or_else(|| ReleaseError::NotFound("no such gradient call".to_owned()))?;
    }
}
