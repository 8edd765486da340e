//! Budget administration: an admin moves a dataset's total and caps what
//! single analysts may spend of it. Every change is a ledger event, checked
//! and written under the same lock as the debits it constrains.

use dpgate_api_types as api;

use crate::domain::dataset::{DatasetRecord, parse_budget, spent_view};
use crate::domain::ledger::NewEntry;
use crate::dp::{self, Accountant, Composition};

/// Most caps one request may set, so one lock is never held for long.
pub const MAX_CAPS_PER_CHANGE: usize = 1000;

/// Longest analyst name (a token subject) a cap may name.
const MAX_ANALYST_LEN: usize = 200;

/// What one analyst has spent on a dataset, and its cap if it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalystRecord {
    pub analyst: String,
    pub cap: Option<dp::Budget>,
    pub composition: Composition,
}

impl AnalystRecord {
    /// An analyst with no cap and no releases yet.
    pub fn new(analyst: &str) -> Self {
        AnalystRecord {
            analyst: analyst.to_owned(),
            cap: None,
            composition: Composition::default(),
        }
    }

    /// The analyst's spending, measured at its cap's δ (or the dataset's).
    pub fn view(&self, dataset: &DatasetRecord) -> api::AnalystSpend {
        let at = self.cap.unwrap_or(dataset.budget);
        api::AnalystSpend {
            analyst: self.analyst.clone(),
            cap: self.cap.map(|cap| api::Budget {
                epsilon: cap.epsilon.value(),
                delta: cap.delta.value(),
            }),
            spent: spent_view(&self.composition.spent(dataset.accountant, &at)),
        }
    }
}

/// Whether a release fits both the dataset's budget and the analyst's cap:
/// the two compositions after it, or why not.
pub fn admit(
    dataset: &DatasetRecord,
    analyst: &AnalystRecord,
    charge: &dp::Charge,
) -> Result<(Composition, Composition), Refusal> {
    let mut total = dataset.composition.clone();
    total.push(charge);
    let spent = total.spent(dataset.accountant, &dataset.budget);
    if !dataset.budget.covers(&spent) {
        return Err(Refusal::Budget(spent));
    }
    let mut own = analyst.composition.clone();
    own.push(charge);
    if let Some(cap) = &analyst.cap {
        let spent = own.spent(dataset.accountant, cap);
        if !cap.covers(&spent) {
            return Err(Refusal::Cap(*cap, spent));
        }
    }
    Ok((total, own))
}

/// Why a release does not fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// The dataset would then have spent this, beyond its budget.
    Budget(dp::Spent),
    /// The analyst would then have spent this, beyond its cap.
    Cap(dp::Budget, dp::Spent),
}

/// A validated budget change.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub budget: Option<dp::Budget>,
    pub caps: Vec<(String, Option<dp::Budget>)>,
    pub actor: String,
    pub created_at: String,
}

impl Change {
    /// Validates a request (values only; whether it fits is checked under
    /// the lock by [`Change::check`]).
    pub fn parse(
        request: &api::BudgetChange,
        actor: &str,
        created_at: String,
    ) -> Result<Self, String> {
        if request.caps.len() > MAX_CAPS_PER_CHANGE {
            return Err(format!(
                "at most {MAX_CAPS_PER_CHANGE} caps per change (got {})",
                request.caps.len()
            ));
        }
        let budget = request.budget.as_ref().map(parse_budget).transpose()?;
        let caps = request
            .caps
            .iter()
            .map(|(analyst, cap)| {
                if analyst.trim().is_empty()
                    || analyst.chars().count() > MAX_ANALYST_LEN
                    || analyst.chars().any(char::is_control)
                {
                    return Err(format!(
                        "cap: analyst name {analyst:?} must be 1 to {MAX_ANALYST_LEN} printable \
                         characters"
                    ));
                }
                let cap = cap
                    .as_ref()
                    .map(parse_budget)
                    .transpose()
                    .map_err(|error| format!("cap of {analyst:?}: {error}"))?;
                Ok((analyst.clone(), cap))
            })
            .collect::<Result<_, String>>()?;
        Ok(Change {
            budget,
            caps,
            actor: actor.to_owned(),
            created_at,
        })
    }

    /// Under the lock: a new total may not fall below what is spent.
    pub fn check(&self, dataset: &DatasetRecord) -> Result<(), String> {
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        let spent = dataset.composition.spent(dataset.accountant, budget);
        if budget.covers(&spent) {
            return Ok(());
        }
        Err(format!(
            "the new budget (ε = {}, δ = {}) is below what the ledger has already spent \
             (ε = {}, δ = {} measured at the new δ{})",
            budget.epsilon.value(),
            budget.delta.value(),
            spent.epsilon.value(),
            spent.delta.value(),
            match dataset.accountant {
                Accountant::Rdp => "",
                Accountant::Basic => ", basic composition",
            },
        ))
    }

    /// The ledger events recording the change: the total first, then each
    /// cap in analyst order.
    pub fn entries(&self, dataset: &DatasetRecord) -> Vec<NewEntry> {
        let wire = |budget: &dp::Budget| api::Budget {
            epsilon: budget.epsilon.value(),
            delta: budget.delta.value(),
        };
        let event = |event, budget: Option<&dp::Budget>, details: serde_json::Value| NewEntry {
            event,
            actor: self.actor.clone(),
            release_id: None,
            epsilon: budget.map_or(dp::Epsilon::ZERO, |budget| budget.epsilon),
            delta: budget.map_or(dp::Delta::ZERO, |budget| budget.delta),
            loss: None,
            details: Some(details.to_string()),
            created_at: self.created_at.clone(),
        };
        let total = self.budget.iter().map(|budget| {
            event(
                api::LedgerEvent::Budget,
                Some(budget),
                serde_json::json!({"from": wire(&dataset.budget), "to": wire(budget)}),
            )
        });
        let caps = self.caps.iter().map(|(analyst, cap)| {
            event(
                api::LedgerEvent::Cap,
                cap.as_ref(),
                serde_json::json!({"analyst": analyst, "cap": cap.as_ref().map(wire)}),
            )
        });
        total.chain(caps).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp::{Delta, Epsilon, PrivacyLoss};

    fn budget(epsilon: f64, delta: f64) -> dp::Budget {
        dp::Budget {
            epsilon: Epsilon::new(epsilon).unwrap(),
            delta: Delta::new(delta).unwrap(),
        }
    }

    fn charge(epsilon: f64) -> dp::Charge {
        dp::Charge {
            epsilon: Epsilon::new(epsilon).unwrap(),
            delta: Delta::ZERO,
            loss: PrivacyLoss::PureEpsilon { epsilon },
        }
    }

    fn dataset(total: f64, accountant: Accountant) -> DatasetRecord {
        let mut record = crate::domain::dataset::tests::record();
        record.budget = budget(total, 1e-6);
        record.accountant = accountant;
        record
    }

    #[test]
    fn a_release_must_fit_the_total_and_the_cap() {
        let dataset = dataset(1.0, Accountant::Basic);
        let mut analyst = AnalystRecord::new("ana");
        assert!(admit(&dataset, &analyst, &charge(1.0)).is_ok());
        assert!(matches!(
            admit(&dataset, &analyst, &charge(1.1)),
            Err(Refusal::Budget(_))
        ));
        analyst.cap = Some(budget(0.3, 1e-6));
        let (total, own) = admit(&dataset, &analyst, &charge(0.3)).unwrap();
        assert_eq!(total.releases(), 1);
        analyst.composition = own;
        assert!(matches!(
            admit(&dataset, &analyst, &charge(1e-9)),
            Err(Refusal::Cap(cap, _)) if cap == budget(0.3, 1e-6)
        ));
    }

    #[test]
    fn the_total_never_falls_below_the_spent() {
        let mut record = dataset(1.0, Accountant::Basic);
        record.composition.push(&charge(0.6));
        let change = |epsilon| Change {
            budget: Some(budget(epsilon, 1e-6)),
            caps: vec![],
            actor: "root".to_owned(),
            created_at: "t".to_owned(),
        };
        assert!(change(0.6).check(&record).is_ok());
        assert!(change(5.0).check(&record).is_ok());
        let refused = change(0.599999999).check(&record).unwrap_err();
        assert!(
            refused.contains("below what the ledger has already spent"),
            "{refused}"
        );
    }

    #[test]
    fn changes_are_validated_and_become_ledger_events() {
        let request: api::BudgetChange = serde_json::from_str(
            r#"{"budget": {"epsilon": 3, "delta": 1e-6},
                "caps": {"bob": null, "ana": {"epsilon": 0.5, "delta": 1e-7}}}"#,
        )
        .unwrap();
        let change = Change::parse(&request, "root", "t".to_owned()).unwrap();
        let entries = change.entries(&dataset(1.0, Accountant::Rdp));
        let events: Vec<_> = entries
            .iter()
            .map(|entry| {
                (
                    entry.event,
                    entry.epsilon.value(),
                    entry.details.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            events,
            vec![
                (
                    api::LedgerEvent::Budget,
                    3.0,
                    r#"{"from":{"delta":1e-6,"epsilon":1.0},"to":{"delta":1e-6,"epsilon":3.0}}"#
                        .to_owned()
                ),
                (
                    api::LedgerEvent::Cap,
                    0.5,
                    r#"{"analyst":"ana","cap":{"delta":1e-7,"epsilon":0.5}}"#.to_owned()
                ),
                (
                    api::LedgerEvent::Cap,
                    0.0,
                    r#"{"analyst":"bob","cap":null}"#.to_owned()
                ),
            ]
        );
        // An empty change is a no-op: no ledger event.
        let empty: api::BudgetChange = serde_json::from_str("{}").unwrap();
        let nothing = Change::parse(&empty, "root", "t".to_owned()).unwrap();
        assert!(nothing.entries(&dataset(1.0, Accountant::Rdp)).is_empty());
        for bad in [
            r#"{"budget": {"epsilon": 0, "delta": 1e-6}}"#,
            r#"{"budget": {"epsilon": 1, "delta": 0}}"#,
            r#"{"caps": {"": {"epsilon": 1, "delta": 1e-6}}}"#,
            r#"{"caps": {"ana": {"epsilon": -1, "delta": 1e-6}}}"#,
        ] {
            let request: api::BudgetChange = serde_json::from_str(bad).unwrap();
            assert!(
                Change::parse(&request, "root", "t".to_owned()).is_err(),
                "{bad}"
            );
        }
    }
}
