//! A gradient session's calls, priced again from the release that opened
//! it: the terms it was debited for, on the rows it was debited at.

use dpgate_api_types::{self as api, GradientParams, PrivacyUnit};

use super::{SESSION_TOLERANCE, Terms, fit, mechanism, releases, unit};
use crate::domain::dataset::DatasetRecord;
use crate::dp::{self, Epsilon};
use crate::releases::plan::most_rows;
use crate::releases::{Failure, Knobs, Snapshot};

/// An open session, as its release recorded it: the calls are priced on
/// the terms it was debited for (its N, Δ and σ), whatever rows came since.
pub struct Session {
    terms: Terms,
    /// T.
    pub calls: u32,
    snapshot: Snapshot,
}

impl Session {
    /// The session `release` opened on `snapshot` (the dataset as it is
    /// now; the session reads it at its own N, the response's or, under
    /// unit `user` where the response does not say it, the `rows` its
    /// debit recorded); `None` if `release` is not a gradient session.
    pub fn of(
        release: &api::Release,
        rows: Option<u64>,
        snapshot: Snapshot,
    ) -> Result<Option<Session>, Failure> {
        let Some(api::ReleaseResult::Gradient(opened)) = &release.result else {
            return Ok(None);
        };
        let Some(session) = opened.session else {
            return Ok(None);
        };
        let corrupt =
            |detail: String| Failure::Corrupt(format!("session {:?}: {detail}", release.id));
        let knobs = Knobs {
            epsilon: Epsilon::new(release.epsilon).map_err(|e| corrupt(e.to_string()))?,
            delta: dp::Delta::new(release.delta).map_err(|e| corrupt(e.to_string()))?,
            max_groups: 0,
        };
        let params = GradientParams {
            loss: opened.loss,
            target: opened.target.clone(),
            label_values: opened.label_values,
            clip: opened.clip,
            fit_intercept: opened.fit_intercept,
            mechanism: opened.mechanism,
            theta: None,
            calls: Some(session.calls),
        };
        let n = opened
            .n
            .or(rows)
            .ok_or_else(|| corrupt("no rows were recorded for it".to_owned()))?;
        let dataset = DatasetRecord {
            n_rows: n,
            ..snapshot.dataset().clone()
        };
        let fit = fit(&params, &dataset.schema).map_err(|e| corrupt(e.to_string()))?;
        let dims = fit.dims(&dataset.schema);
        let grid = fit
            .grid(&dataset.schema)
            .map_err(|e| corrupt(e.to_string()))?;
        let people = dataset.schema.users.as_ref().map(|users| users.bounds.rows);
        let n_public = people.is_none().then_some(n);
        if people.is_some() && opened.noisy_rows.is_none() {
            return Err(corrupt("no noisy count under unit user".to_owned()));
        }
        // Δ as priced then, in the sum's units: under `label` it came from
        // the features' norms at that N, which later rows may have raised.
        // Back from the released numbers' units (the summed gradient's
        // under `user`), rounded up past the division's rounding, and
        // never below one row's (under `user`, one person's) reach on the
        // grid.
        let priced_in = unit(grid.clip(), n_public, None);
        let mut sensitivity = (opened.sensitivity / priced_in).next_up().next_up();
        match dataset.privacy_unit {
            PrivacyUnit::Row => sensitivity = sensitivity.max(grid.replaced()),
            PrivacyUnit::User => sensitivity = sensitivity.max(grid.added()),
            PrivacyUnit::Label => {}
        }
        let (mechanism, call_epsilon) = mechanism(
            opened.mechanism,
            &knobs,
            sensitivity,
            (most_rows(&dataset), dims),
            releases(session.calls, people),
            &grid,
        )
        .map_err(|e| corrupt(e.to_string()))?;
        let terms = Terms {
            fit,
            grid,
            target: opened.target.clone(),
            kind: opened.mechanism,
            mechanism,
            call_epsilon,
            sensitivity: opened.sensitivity,
            n: n_public,
            people,
            noisy_rows: opened.noisy_rows,
            feature_bounds: opened.feature_bounds.clone(),
        };
        // The same σ up to those roundings, or (a session opened before
        // sums were exact) up to the float padding it was priced with.
        let sigma = terms.mechanism.noise_scale() * terms.unit();
        if (sigma - opened.sigma).abs() > SESSION_TOLERANCE * opened.sigma {
            return Err(corrupt(format!(
                "its noise prices at {sigma} now, not {}",
                opened.sigma
            )));
        }
        Ok(Some(Session {
            terms,
            calls: session.calls,
            snapshot: snapshot.sibling(dataset),
        }))
    }

    /// d, the length of θ and of each gradient.
    pub fn dims(&self) -> usize {
        self.terms.fit.dims(&self.snapshot.dataset().schema)
    }

    /// One call's released gradient at `theta` (checked by the caller),
    /// its noise fresh from the OS CSPRNG.
    pub async fn call(&self, theta: Vec<f64>) -> Result<Vec<f64>, Failure> {
        self.terms.call(&self.snapshot, theta).await
    }
}
