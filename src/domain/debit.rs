//! Debits decided under a dataset's lock: a release's charge against its
//! dataset's budget and the analyst's cap, in the order the debits arrive.
//! The store reads what a decision needs (the locked dataset, its analysts,
//! the releases an idempotency key names), these functions decide, and the
//! store writes what they return; nothing here touches the database.

use std::collections::HashMap;

use uuid::Uuid;

use crate::domain::budget::AnalystRecord;
use crate::domain::dataset::DatasetRecord;
use crate::domain::ledger::NewEntry;
use crate::dp::{Charge, Composition};

/// A release to debit: the ledger's charge and the release's bookkeeping.
#[derive(Debug, Clone)]
pub struct Debit {
    pub dataset: Uuid,
    /// N the release was priced for (the snapshot it will read); if rows
    /// arrived since, the debit reports [`DebitOutcome::Stale`] and the
    /// caller prices it again.
    pub expected_rows: u64,
    pub release_id: Uuid,
    pub analyst: String,
    pub kind: String,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
    /// The request as JSON, kept with the release for audit (supplied
    /// feature vectors replaced by their digest).
    pub request: String,
    pub charge: Charge,
    pub created_at: String,
    /// Other datasets whose rows the release also reads: each is debited
    /// in the same transaction, or none is.
    pub sources: Vec<SourceDebit>,
}

/// A source dataset of a release, and what it is debited.
#[derive(Debug, Clone)]
pub struct SourceDebit {
    pub dataset: Uuid,
    /// As [`Debit::expected_rows`].
    pub expected_rows: u64,
    pub charge: Charge,
}

/// Decides, under the budget lock, whether `charge` fits a dataset's
/// budget and the analyst's cap on it: both compositions after it, or
/// `None` to refuse.
pub type Decide = Box<
    dyn Fn(&DatasetRecord, &AnalystRecord, &Charge) -> Option<(Composition, Composition)> + Send,
>;

/// How a debit ended.
#[derive(Debug)]
pub enum DebitOutcome {
    /// Committed; the dataset as it now stands.
    Debited(Box<DatasetRecord>),
    /// Did not fit the dataset here (the release's or one of its sources);
    /// nothing was written anywhere.
    Refused(Box<(DatasetRecord, AnalystRecord)>),
    /// The idempotency key was used before (by this analyst, on this dataset).
    Replay(StoredRelease),
    /// Rows were added since the release was priced (to it or a source).
    Stale,
    /// No such dataset (or source).
    NoDataset,
}

/// A recorded release.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRelease {
    pub id: Uuid,
    pub dataset: Uuid,
    pub analyst: String,
    pub request_hash: String,
    /// The exact response body sent, once the noise was drawn and stored.
    pub response: Option<String>,
    /// The problem document of a release that failed after its debit.
    pub failure: Option<String>,
    /// The dataset's rows it was debited at (`None` if recorded before
    /// they were kept): what a gradient session's calls read.
    pub rows: Option<u64>,
}

impl Debit {
    /// Every dataset the release debits, with the rows it was priced for
    /// and its charge there: its own first, then its sources in order.
    pub fn parts(&self) -> Vec<(Uuid, u64, &Charge)> {
        std::iter::once((self.dataset, self.expected_rows, &self.charge))
            .chain(
                self.sources
                    .iter()
                    .map(|source| (source.dataset, source.expected_rows, &source.charge)),
            )
            .collect()
    }

    /// The release as recorded when it is debited, before it is made.
    fn recorded(&self) -> StoredRelease {
        StoredRelease {
            id: self.release_id,
            dataset: self.dataset,
            analyst: self.analyst.clone(),
            request_hash: self.request_hash.clone(),
            response: None,
            failure: None,
            rows: Some(self.expected_rows),
        }
    }
}

/// Releases by analyst and idempotency key.
pub type Keyed = HashMap<(String, String), StoredRelease>;

/// What a batch of debits of one dataset leaves.
#[derive(Debug)]
pub struct Decided {
    /// Each debit's outcome, in the batch's order.
    pub outcomes: Vec<DebitOutcome>,
    /// The dataset after the debits made.
    pub record: DatasetRecord,
    /// The analysts whose spending the batch changed, as they now stand,
    /// by name.
    pub changed: Vec<AnalystRecord>,
    /// The debits made, in order, and their ledger entries.
    pub made: Vec<Debit>,
    pub entries: Vec<NewEntry>,
}

/// Decides a batch of debits of the locked dataset `record`, in order,
/// each against what the ones before it left: a key used before (stored,
/// in `keyed`, or earlier in the batch) replays, a debit priced for
/// another row count is stale, and the rest are debited if `decide` lets
/// them, refused if not. `analysts` are the stored records of the batch's
/// analysts (one with none starts from nothing).
pub fn decide_batch(
    mut record: DatasetRecord,
    analysts: Vec<AnalystRecord>,
    mut keyed: Keyed,
    debits: Vec<(Debit, Decide)>,
) -> Result<Decided, serde_json::Error> {
    let mut analysts: HashMap<String, AnalystRecord> = analysts
        .into_iter()
        .map(|analyst| (analyst.analyst.clone(), analyst))
        .collect();
    let mut changed = std::collections::BTreeSet::new();
    let (mut made, mut entries) = (Vec::new(), Vec::new());
    let mut outcomes = Vec::with_capacity(debits.len());
    for (debit, decide) in debits {
        let key = debit
            .idempotency_key
            .as_ref()
            .map(|key| (debit.analyst.clone(), key.clone()));
        if let Some(earlier) = key.as_ref().and_then(|key| keyed.get(key)) {
            outcomes.push(DebitOutcome::Replay(earlier.clone()));
            continue;
        }
        if record.n_rows != debit.expected_rows {
            outcomes.push(DebitOutcome::Stale);
            continue;
        }
        let analyst = analysts
            .get(&debit.analyst)
            .cloned()
            .unwrap_or_else(|| AnalystRecord::new(&debit.analyst));
        let Some((composition, own)) = decide(&record, &analyst, &debit.charge) else {
            outcomes.push(DebitOutcome::Refused(Box::new((record.clone(), analyst))));
            continue;
        };
        record.composition = composition;
        analysts.insert(
            debit.analyst.clone(),
            AnalystRecord {
                composition: own,
                ..analyst
            },
        );
        changed.insert(debit.analyst.clone());
        entries.push(NewEntry::release(
            debit.release_id,
            &debit.analyst,
            &debit.charge,
            &debit.created_at,
        )?);
        if let Some(key) = key {
            keyed.insert(key, debit.recorded());
        }
        outcomes.push(DebitOutcome::Debited(Box::new(record.clone())));
        made.push(debit);
    }
    let changed = changed
        .into_iter()
        .filter_map(|name| analysts.remove(&name))
        .collect();
    Ok(Decided {
        outcomes,
        record,
        changed,
        made,
        entries,
    })
}

/// One dataset of a release with sources, as its debit leaves it.
#[derive(Debug)]
pub struct JointPart {
    pub record: DatasetRecord,
    pub analyst: AnalystRecord,
    /// The release's entry on its own dataset, a source entry naming it on
    /// the others.
    pub entry: NewEntry,
}

/// Decides a release with sources against every dataset it debits, in the
/// order of [`Debit::parts`], each locked `record` with the analyst's
/// record there: every part debited, or the outcome that stops them all
/// (a replay of `earlier`, a stale row count, a refusal).
pub fn decide_joint(
    debit: &Debit,
    locked: Vec<(DatasetRecord, AnalystRecord)>,
    earlier: Option<StoredRelease>,
    decide: &Decide,
) -> Result<Result<Vec<JointPart>, DebitOutcome>, serde_json::Error> {
    if let Some(earlier) = earlier {
        return Ok(Err(DebitOutcome::Replay(earlier)));
    }
    let parts = debit.parts();
    let stale = locked
        .iter()
        .zip(&parts)
        .any(|((record, _), (_, rows, _))| record.n_rows != *rows);
    if stale {
        return Ok(Err(DebitOutcome::Stale));
    }
    let mut decided = Vec::with_capacity(locked.len());
    for (index, ((mut record, analyst), (_, _, charge))) in
        locked.into_iter().zip(parts).enumerate()
    {
        let Some((composition, own)) = decide(&record, &analyst, charge) else {
            return Ok(Err(DebitOutcome::Refused(Box::new((record, analyst)))));
        };
        record.composition = composition;
        let entry = if index == 0 {
            NewEntry::release(debit.release_id, &debit.analyst, charge, &debit.created_at)?
        } else {
            NewEntry::source(
                debit.release_id,
                debit.dataset,
                &debit.analyst,
                charge,
                &debit.created_at,
            )?
        };
        decided.push(JointPart {
            record,
            analyst: AnalystRecord {
                composition: own,
                ..analyst
            },
            entry,
        });
    }
    Ok(Ok(decided))
}

#[cfg(test)]
#[path = "debit_tests.rs"]
mod tests;
