//! Registrations of Parquet in place that run in the background: the record
//! the store keeps, and how any replica reads where one stands.
//!
//! A registration reads and checks every row of its files, which at 10⁸
//! rows takes minutes, longer than a request may. Asked for with `Prefer:
//! respond-async`, it runs in the replica that accepted it, which writes a
//! beat every [`BEAT`]; the record holds what the synchronous call would
//! have answered once it ends. A replica that stops mid-way (a deploy, a
//! crash) leaves a record that stops beating: after [`LOST_AFTER`] any
//! replica reports it failed. The commit of its version is a
//! registration's last step, in one transaction, so a lost one either
//! committed just before its replica stopped (the dataset's `n_rows` shows
//! it) or left nothing, and can simply be asked for again.

use std::time::Duration;

use dpgate_api_types::{IngestReport, Problem, ProblemType, Registration, RegistrationState};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

/// How often the replica running a registration records that it still is.
pub const BEAT: Duration = Duration::from_secs(5);

/// How long a running registration may go without a beat before it is
/// taken to have lost its replica: many beats, so that a store slow for a
/// moment does not fail a registration that is still reading.
pub const LOST_AFTER: Duration = Duration::from_secs(60);

/// A registration as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationRecord {
    pub id: Uuid,
    /// The dataset it creates or appends a version to.
    pub dataset_id: Uuid,
    /// The admin who asked for it.
    pub actor: String,
    /// RFC 3339, as every stored timestamp.
    pub created_at: String,
    /// The running replica's last beat.
    pub beat_at: String,
    /// Once it ended: when, and what the synchronous call would have
    /// answered.
    pub ended: Option<Ended>,
}

/// How a registration ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub at: String,
    pub outcome: Result<IngestReport, Problem>,
}

impl RegistrationRecord {
    /// A registration of `dataset_id` for `actor`, starting now.
    pub fn start(dataset_id: Uuid, actor: &str) -> Result<Self, crate::domain::clock::ClockError> {
        let now = crate::domain::clock::timestamp()?;
        Ok(RegistrationRecord {
            id: Uuid::now_v7(),
            dataset_id,
            actor: actor.to_owned(),
            created_at: now.clone(),
            beat_at: now,
            ended: None,
        })
    }

    /// Where it stands at `now`: a running one whose beats stopped more
    /// than [`LOST_AFTER`] ago has failed.
    pub fn view(&self, now: OffsetDateTime) -> Registration {
        let (state, finished_at, report, problem) = match &self.ended {
            Some(Ended {
                at,
                outcome: Ok(report),
            }) => (
                RegistrationState::Done,
                Some(at.clone()),
                Some(*report),
                None,
            ),
            Some(Ended {
                at,
                outcome: Err(problem),
            }) => (
                RegistrationState::Failed,
                Some(at.clone()),
                None,
                Some(problem.clone()),
            ),
            None if self.lost(now) => (
                RegistrationState::Failed,
                None,
                None,
                Some(self.lost_problem()),
            ),
            None => (RegistrationState::Running, None, None, None),
        };
        Registration {
            id: self.id,
            dataset_id: self.dataset_id,
            state,
            created_at: self.created_at.clone(),
            finished_at,
            report,
            problem,
        }
    }

    /// Whether its last beat is more than [`LOST_AFTER`] before `now` (a
    /// beat that does not parse never came from this service: lost too).
    fn lost(&self, now: OffsetDateTime) -> bool {
        OffsetDateTime::parse(&self.beat_at, &Rfc3339).map_or(true, |beat| now - beat > LOST_AFTER)
    }

    fn lost_problem(&self) -> Problem {
        let kind = ProblemType::Internal;
        Problem {
            problem_type: kind.uri(),
            title: kind.title().to_owned(),
            status: 500,
            detail: format!(
                "the replica running this registration stopped before recording how it ended \
                 (its last beat: {}). A registration commits its version in one transaction, \
                 as its last step: if the dataset's n_rows does not count its rows, nothing of \
                 it was registered: ask for it again",
                self.beat_at
            ),
            errors: Vec::new(),
            remaining: None,
            release_id: None,
            request_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &Rfc3339).unwrap()
    }

    fn running(beat_at: &str) -> RegistrationRecord {
        RegistrationRecord {
            id: Uuid::nil(),
            dataset_id: Uuid::max(),
            actor: "ops".to_owned(),
            created_at: "2026-11-29T10:00:00Z".to_owned(),
            beat_at: beat_at.to_owned(),
            ended: None,
        }
    }

    #[test]
    fn a_running_registration_is_running_until_its_beats_stop_for_longer_than_lost_after() {
        let record = running("2026-11-29T10:05:00Z");
        let view = record.view(at("2026-11-29T10:06:00Z"));
        assert_eq!(view.state, RegistrationState::Running);
        assert_eq!(
            (view.finished_at, view.report, view.problem),
            (None, None, None)
        );
        // Exactly LOST_AFTER (60 s) after the beat: still running.
        assert_eq!(
            record.view(at("2026-11-29T10:06:00Z")).state,
            RegistrationState::Running
        );
        let lost = record.view(at("2026-11-29T10:06:01Z"));
        assert_eq!(lost.state, RegistrationState::Failed);
        let problem = lost.problem.unwrap();
        assert_eq!(
            (problem.status, problem.kind()),
            (500, Some(ProblemType::Internal))
        );
        assert!(
            problem.detail.contains("2026-11-29T10:05:00Z"),
            "{}",
            problem.detail
        );
        assert_eq!(lost.finished_at, None);
    }

    #[test]
    fn a_beat_that_does_not_parse_is_lost() {
        let view = running("yesterday").view(at("2026-11-29T10:00:00Z"));
        assert_eq!(view.state, RegistrationState::Failed);
    }

    #[test]
    fn a_finished_registration_shows_its_outcome_however_old_its_last_beat() {
        let mut record = running("2026-11-29T10:05:00Z");
        let report = IngestReport {
            rows_added: 7,
            n_rows: 10,
        };
        record.ended = Some(Ended {
            at: "2026-11-29T10:07:00Z".to_owned(),
            outcome: Ok(report),
        });
        let view = record.view(at("2027-01-01T00:00:00Z"));
        assert_eq!(view.state, RegistrationState::Done);
        assert_eq!(view.report, Some(report));
        assert_eq!(view.finished_at.as_deref(), Some("2026-11-29T10:07:00Z"));
        let problem = running("2026-11-29T10:05:00Z").lost_problem();
        record.ended = Some(Ended {
            at: "2026-11-29T10:07:00Z".to_owned(),
            outcome: Err(problem.clone()),
        });
        let view = record.view(at("2027-01-01T00:00:00Z"));
        assert_eq!(view.state, RegistrationState::Failed);
        assert_eq!((view.report, view.problem), (None, Some(problem)));
    }
}
