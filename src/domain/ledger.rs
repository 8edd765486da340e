//! The tamper-evident budget ledger: every entry carries the SHA-256 of the
//! previous entry of its dataset, so editing, deleting or reordering any
//! entry breaks the chain from there on. `dpgate ledger verify` walks it.

pub mod export;

use dpgate_api_types as api;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::dp::{Accountant, Budget, Charge, Composition, Delta, Epsilon, PrivacyLoss, Spent};

/// The `prev_hash` of a dataset's first entry.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One ledger entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRecord {
    pub seq: u64,
    pub event: api::LedgerEvent,
    pub actor: String,
    pub release_id: Option<Uuid>,
    pub epsilon: Epsilon,
    pub delta: Delta,
    /// The release's [`PrivacyLoss`], as the JSON text that was hashed.
    pub loss: Option<String>,
    /// Event details, as the JSON text that was hashed.
    pub details: Option<String>,
    pub created_at: String,
    pub prev_hash: String,
    pub hash: String,
}

/// The fields an entry's hash covers, in a fixed order.
#[derive(Serialize)]
struct Canonical<'a> {
    dataset: &'a Uuid,
    seq: u64,
    event: api::LedgerEvent,
    actor: &'a str,
    release_id: Option<&'a Uuid>,
    epsilon: Epsilon,
    delta: Delta,
    loss: Option<&'a str>,
    details: Option<&'a str>,
    created_at: &'a str,
    prev_hash: &'a str,
}

/// What a new entry says; its sequence number and hashes come from the chain.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub event: api::LedgerEvent,
    pub actor: String,
    pub release_id: Option<Uuid>,
    pub epsilon: Epsilon,
    pub delta: Delta,
    pub loss: Option<String>,
    pub details: Option<String>,
    pub created_at: String,
}

impl NewEntry {
    /// The entry for a release debit.
    pub fn release(
        release_id: Uuid,
        actor: &str,
        charge: &Charge,
        created_at: &str,
    ) -> Result<Self, serde_json::Error> {
        Ok(NewEntry {
            event: api::LedgerEvent::Release,
            actor: actor.to_owned(),
            release_id: Some(release_id),
            epsilon: charge.epsilon,
            delta: charge.delta,
            loss: Some(serde_json::to_string(&charge.loss)?),
            details: None,
            created_at: created_at.to_owned(),
        })
    }

    /// The entry for a debit of a source dataset of a release on another
    /// dataset (`target`), whose records hold the release.
    pub fn source(
        release_id: Uuid,
        target: Uuid,
        actor: &str,
        charge: &Charge,
        created_at: &str,
    ) -> Result<Self, serde_json::Error> {
        Ok(NewEntry {
            details: Some(serde_json::json!({ "source_of": target }).to_string()),
            ..NewEntry::release(release_id, actor, charge, created_at)?
        })
    }

    /// Places the entry after `previous` (or first), computing its hash.
    pub fn chain(
        self,
        dataset: &Uuid,
        previous: Option<(u64, &str)>,
    ) -> Result<LedgerRecord, serde_json::Error> {
        let (seq, prev_hash) = match previous {
            Some((seq, hash)) => (seq + 1, hash.to_owned()),
            None => (0, GENESIS_HASH.to_owned()),
        };
        let mut record = LedgerRecord {
            seq,
            event: self.event,
            actor: self.actor,
            release_id: self.release_id,
            epsilon: self.epsilon,
            delta: self.delta,
            loss: self.loss,
            details: self.details,
            created_at: self.created_at,
            prev_hash,
            hash: String::new(),
        };
        record.hash = record.expected_hash(dataset)?;
        Ok(record)
    }
}

impl LedgerRecord {
    /// SHA-256 (hex) of the entry's canonical JSON, `prev_hash` included.
    pub fn expected_hash(&self, dataset: &Uuid) -> Result<String, serde_json::Error> {
        let canonical = Canonical {
            dataset,
            seq: self.seq,
            event: self.event,
            actor: &self.actor,
            release_id: self.release_id.as_ref(),
            epsilon: self.epsilon,
            delta: self.delta,
            loss: self.loss.as_deref(),
            details: self.details.as_deref(),
            created_at: &self.created_at,
            prev_hash: &self.prev_hash,
        };
        let bytes = serde_json::to_vec(&canonical)?;
        Ok(hex::encode(Sha256::digest(bytes)))
    }

    /// The API view of the entry of `dataset`, with what the ledger had
    /// spent and allowed after it (`tally`, when it could be read).
    pub fn view(&self, dataset: Uuid, tally: Option<&Tally>) -> api::LedgerEntry {
        let json = |text: &Option<String>| {
            text.as_deref()
                .and_then(|text| serde_json::from_str(text).ok())
        };
        let (spent_after, budget_after) = tally.map(Tally::after).unzip();
        api::LedgerEntry {
            seq: self.seq,
            event: self.event,
            actor: self.actor.clone(),
            release_id: self.release_id,
            epsilon: self.epsilon.value(),
            delta: self.delta.value(),
            loss: json(&self.loss),
            details: json(&self.details),
            created_at: self.created_at.clone(),
            prev_hash: self.prev_hash.clone(),
            hash: self.hash.clone(),
            dataset_id: dataset,
            spent_after,
            budget_after,
        }
    }
}

/// Where and why a ledger fails verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ledger entry {seq}: {reason}")]
pub struct ChainBreak {
    pub seq: u64,
    pub reason: String,
}

/// What a ledger read from its opening had allowed and spent after each
/// entry: the opening names the accountant and the budget, `budget` events
/// change the budget, releases add their charges. It reads the entries'
/// contents only, so a page of a tampered ledger can still be shown.
#[derive(Debug, Clone)]
pub struct Tally {
    accountant: Accountant,
    budget: Budget,
    composition: Composition,
}

/// The opening entry's details, as far as a tally needs them.
#[derive(Deserialize)]
struct Opening {
    accountant: Accountant,
    budget: api::Budget,
}

impl Tally {
    /// The tally after the dataset's opening entry.
    pub fn open(entry: &LedgerRecord) -> Result<Tally, String> {
        if entry.event != api::LedgerEvent::Open {
            return Err("the first entry is not the dataset's opening".to_owned());
        }
        let opening: Opening = entry
            .details
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
            .ok_or("an opening without a readable accountant and budget")?;
        Ok(Tally {
            accountant: opening.accountant,
            budget: budget(opening.budget.epsilon, opening.budget.delta)?,
            composition: Composition::default(),
        })
    }

    /// Takes in the entry after those seen so far.
    pub fn add(&mut self, entry: &LedgerRecord) -> Result<(), String> {
        match entry.event {
            api::LedgerEvent::Open => return Err("a second opening".to_owned()),
            api::LedgerEvent::Budget => {
                self.budget = budget(entry.epsilon.value(), entry.delta.value())?;
            }
            api::LedgerEvent::Release => {
                let loss: PrivacyLoss = entry
                    .loss
                    .as_deref()
                    .and_then(|text| serde_json::from_str(text).ok())
                    .ok_or("a release without a readable privacy loss")?;
                loss.validate().map_err(|error| error.to_string())?;
                self.composition.push(&Charge {
                    epsilon: entry.epsilon,
                    delta: entry.delta,
                    loss,
                });
            }
            api::LedgerEvent::Cap => {}
        }
        Ok(())
    }

    /// What the ledger had spent, as a dataset's `spent` reports it.
    pub fn spent(&self) -> Spent {
        self.composition.spent(self.accountant, &self.budget)
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    pub fn accountant(&self) -> Accountant {
        self.accountant
    }

    pub fn composition(&self) -> &Composition {
        &self.composition
    }

    /// The API's figures after the entry.
    pub fn after(&self) -> (api::Spent, api::Budget) {
        let spent = self.spent();
        (
            api::Spent {
                epsilon: spent.epsilon.value(),
                delta: spent.delta.value(),
                epsilon_basic: spent.epsilon_basic.value(),
                delta_basic: spent.delta_basic.value(),
            },
            api::Budget {
                epsilon: self.budget.epsilon.value(),
                delta: self.budget.delta.value(),
            },
        )
    }
}

/// A [`Tally`] kept over entries read in order from the opening, which
/// gives up (and tells nothing more) at the first entry it cannot read.
#[derive(Debug, Default)]
pub struct Follow {
    tally: Option<Tally>,
    lost: bool,
}

impl Follow {
    /// Takes in the next entry; the tally after it, if still known.
    pub fn take(&mut self, entry: &LedgerRecord) -> Option<&Tally> {
        if self.lost {
            return None;
        }
        let read = match &mut self.tally {
            None => Tally::open(entry).map(|tally| self.tally = Some(tally)),
            Some(tally) => tally.add(entry),
        };
        self.lost = read.is_err();
        self.tally.as_ref().filter(|_| !self.lost)
    }
}

fn budget(epsilon: f64, delta: f64) -> Result<Budget, String> {
    Ok(Budget {
        epsilon: Epsilon::new(epsilon).map_err(|error| error.to_string())?,
        delta: Delta::positive(delta).map_err(|error| error.to_string())?,
    })
}

/// Checks a dataset's ledger entry by entry, oldest first: sequence
/// numbers from 0 without gaps, the first entry an `open`, every
/// `prev_hash` the previous entry's hash, every hash recomputed, every
/// entry readable by a [`Tally`].
#[derive(Debug)]
pub struct Chain {
    dataset: Uuid,
    previous: String,
    seen: u64,
    tally: Option<Tally>,
}

impl Chain {
    pub fn new(dataset: Uuid) -> Self {
        Chain {
            dataset,
            previous: GENESIS_HASH.to_owned(),
            seen: 0,
            tally: None,
        }
    }

    /// Checks the next entry; the tally after it.
    pub fn check(&mut self, entry: &LedgerRecord) -> Result<&Tally, ChainBreak> {
        let fail = |reason: &str| ChainBreak {
            seq: entry.seq,
            reason: reason.to_owned(),
        };
        if entry.seq != self.seen {
            return Err(fail("sequence number out of place (an entry is missing)"));
        }
        if entry.prev_hash != self.previous {
            return Err(fail("prev_hash does not match the previous entry's hash"));
        }
        let expected = entry
            .expected_hash(&self.dataset)
            .map_err(|error| fail(&format!("its contents do not encode: {error}")))?;
        if entry.hash != expected {
            return Err(fail("hash does not match the entry's contents"));
        }
        match &mut self.tally {
            None => self.tally = Some(Tally::open(entry).map_err(|reason| fail(&reason))?),
            Some(tally) => tally.add(entry).map_err(|reason| fail(&reason))?,
        }
        self.seen += 1;
        self.previous.clone_from(&entry.hash);
        Ok(self.tally.as_ref().expect("set above"))
    }

    /// The entries checked so far.
    pub fn checked(&self) -> u64 {
        self.seen
    }

    /// The tally of the entries checked so far (none before the opening).
    pub fn tally(&self) -> Option<&Tally> {
        self.tally.as_ref()
    }
}

/// Checks a dataset's whole ledger ([`Chain`]). Returns the composition of
/// its releases, to compare with the dataset's running state.
pub fn verify(dataset: &Uuid, entries: &[LedgerRecord]) -> Result<Composition, ChainBreak> {
    let mut chain = Chain::new(*dataset);
    for entry in entries {
        chain.check(entry)?;
    }
    Ok(chain
        .tally()
        .map(|tally| tally.composition().clone())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(dataset: &Uuid) -> Vec<LedgerRecord> {
        let open = NewEntry {
            event: api::LedgerEvent::Open,
            actor: "admin".to_owned(),
            release_id: None,
            epsilon: Epsilon::ZERO,
            delta: Delta::ZERO,
            loss: None,
            details: Some(
                r#"{"accountant":"rdp","budget":{"epsilon":1.0,"delta":1e-6}}"#.to_owned(),
            ),
            created_at: "2026-01-01T00:00:00Z".to_owned(),
        }
        .chain(dataset, None)
        .unwrap();
        let mut entries = vec![open];
        for index in 0..3 {
            let charge = Charge {
                epsilon: Epsilon::new(0.1).unwrap(),
                delta: Delta::new(1e-7).unwrap(),
                loss: PrivacyLoss::Gaussian {
                    sensitivity: 1.0,
                    sigma: 40.0 + f64::from(index),
                },
            };
            let last = entries.last().unwrap();
            let entry = NewEntry::release(Uuid::new_v4(), "ana", &charge, "2026-01-01T00:00:01Z")
                .unwrap()
                .chain(dataset, Some((last.seq, &last.hash)))
                .unwrap();
            entries.push(entry);
        }
        entries
    }

    #[test]
    fn an_intact_ledger_verifies_and_recomputes_its_composition() {
        let dataset = Uuid::new_v4();
        let composition = verify(&dataset, &ledger(&dataset)).unwrap();
        assert_eq!(composition.releases(), 3);
    }

    #[test]
    fn any_edit_deletion_or_swap_is_detected() {
        let dataset = Uuid::new_v4();
        type Edit = Box<dyn Fn(&mut Vec<LedgerRecord>)>;
        let edits: Vec<(u64, Edit)> = vec![
            (2, Box::new(|e| e[2].epsilon = Epsilon::new(0.01).unwrap())),
            (1, Box::new(|e| e[1].actor = "someone else".to_owned())),
            (
                3,
                Box::new(|e| {
                    e[3].loss = Some(r#"{"mechanism":"pure_epsilon","epsilon":0.001}"#.to_owned())
                }),
            ),
            (
                3,
                Box::new(|e| {
                    e.remove(2);
                }),
            ),
            (2, Box::new(|e| e.swap(1, 2))),
            (0, Box::new(|e| e[0].details = None)),
        ];
        for (seq, edit) in edits {
            let mut entries = ledger(&dataset);
            edit(&mut entries);
            let error = verify(&dataset, &entries).unwrap_err();
            assert_eq!(error.seq, seq, "{error}");
        }
        // The same entries under another dataset's id do not verify either.
        assert!(verify(&Uuid::new_v4(), &ledger(&dataset)).is_err());
    }

    #[test]
    fn a_recomputed_hash_on_an_edited_entry_still_breaks_the_next_link() {
        let dataset = Uuid::new_v4();
        let mut entries = ledger(&dataset);
        entries[1].epsilon = Epsilon::new(0.01).unwrap();
        entries[1].hash = entries[1].expected_hash(&dataset).unwrap();
        assert_eq!(verify(&dataset, &entries).unwrap_err().seq, 2);
    }

    #[test]
    fn the_tally_follows_releases_and_budget_changes_entry_by_entry() {
        let dataset = Uuid::new_v4();
        let mut entries = ledger(&dataset);
        let last = entries.last().unwrap();
        let raise = NewEntry {
            event: api::LedgerEvent::Budget,
            actor: "admin".to_owned(),
            release_id: None,
            epsilon: Epsilon::new(2.0).unwrap(),
            delta: Delta::new(1e-5).unwrap(),
            loss: None,
            details: None,
            created_at: "2026-01-01T00:00:02Z".to_owned(),
        }
        .chain(&dataset, Some((last.seq, &last.hash)))
        .unwrap();
        entries.push(raise);
        let mut chain = Chain::new(dataset);
        let mut seen = Vec::new();
        for entry in &entries {
            let tally = chain.check(entry).unwrap();
            seen.push((tally.spent(), tally.budget()));
        }
        assert_eq!(chain.checked(), 5);
        let charges: Vec<Charge> = entries[1..4]
            .iter()
            .map(|entry| Charge {
                epsilon: entry.epsilon,
                delta: entry.delta,
                loss: serde_json::from_str(entry.loss.as_deref().unwrap()).unwrap(),
            })
            .collect();
        let opened = budget(1.0, 1e-6).unwrap();
        assert_eq!(seen[0].0.epsilon, Epsilon::ZERO);
        for count in 1..=3 {
            let want = Composition::of(&charges[..count]).spent(Accountant::Rdp, &opened);
            assert_eq!(seen[count], (want, opened), "after release {count}");
        }
        // The raise: the same releases, measured at the new budget's δ.
        let raised = budget(2.0, 1e-5).unwrap();
        let want = Composition::of(&charges).spent(Accountant::Rdp, &raised);
        assert_eq!(seen[4], (want, raised));
        assert!(want.epsilon < seen[3].0.epsilon, "a larger δ costs less ε");
        // A second opening, or an opening without its budget, is refused.
        let mut reopened = entries[0].clone();
        reopened.seq = 5;
        reopened.prev_hash = entries[4].hash.clone();
        reopened.hash = reopened.expected_hash(&dataset).unwrap();
        assert_eq!(
            chain.check(&reopened).unwrap_err().reason,
            "a second opening"
        );
        let mut bare = entries[0].clone();
        bare.details = Some("{}".to_owned());
        assert!(Tally::open(&bare).is_err());
    }
}
