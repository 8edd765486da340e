//! The audit export of a dataset's ledger (`GET …/ledger?format=ndjson|csv`,
//! `dpgate ledger export`) and its offline check (`dpgate ledger verify
//! --file`).
//!
//! A line is an entry as the API shows it, plus what an auditor needs to
//! recompute its hash without the server: `epsilon_units` (10⁻⁹) and
//! `delta_units` (10⁻³⁰, a decimal string), the exact values the hash
//! covers (the f64 `epsilon` and `delta` are for reading), and `loss` and
//! `details` as the very JSON text that was hashed. The verifier walks the
//! chain ([`Chain`]) and also checks every `spent_after` and `budget_after`
//! against its own tally, so an export whose figures were edited fails too.

use std::io::BufRead;

use dpgate_api_types as api;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::{Chain, ChainBreak, LedgerRecord, Tally};
use crate::dp::{Delta, Epsilon};

/// One exported entry.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    seq: u64,
    event: api::LedgerEvent,
    actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    release_id: Option<Uuid>,
    epsilon: f64,
    delta: f64,
    epsilon_units: Epsilon,
    delta_units: Delta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    loss: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    details: Option<Box<RawValue>>,
    created_at: String,
    prev_hash: String,
    hash: String,
    dataset_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spent_after: Option<api::Spent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget_after: Option<api::Budget>,
}

/// The columns of the CSV export, in order.
pub const CSV_HEADER: &str = "seq,event,actor,release_id,epsilon,delta,epsilon_units,\
delta_units,loss,details,created_at,prev_hash,hash,dataset_id,spent_epsilon,spent_delta,\
spent_epsilon_basic,spent_delta_basic,budget_epsilon,budget_delta\n";

/// An export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Ndjson,
    Csv,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Ndjson => "application/x-ndjson",
            Format::Csv => "text/csv; charset=utf-8",
        }
    }

    /// What comes before the first entry.
    pub fn header(self) -> &'static str {
        match self {
            Format::Ndjson => "",
            Format::Csv => CSV_HEADER,
        }
    }
}

fn raw(text: &Option<String>) -> Result<Option<Box<RawValue>>, serde_json::Error> {
    text.clone().map(RawValue::from_string).transpose()
}

impl Line {
    fn of(record: &LedgerRecord, dataset: Uuid, tally: Option<&Tally>) -> serde_json::Result<Self> {
        let (spent_after, budget_after) = tally.map(Tally::after).unzip();
        Ok(Line {
            seq: record.seq,
            event: record.event,
            actor: record.actor.clone(),
            release_id: record.release_id,
            epsilon: record.epsilon.value(),
            delta: record.delta.value(),
            epsilon_units: record.epsilon,
            delta_units: record.delta,
            loss: raw(&record.loss)?,
            details: raw(&record.details)?,
            created_at: record.created_at.clone(),
            prev_hash: record.prev_hash.clone(),
            hash: record.hash.clone(),
            dataset_id: dataset,
            spent_after,
            budget_after,
        })
    }

    fn record(self) -> (Uuid, LedgerRecord, Option<api::Spent>, Option<api::Budget>) {
        let text = |raw: Option<Box<RawValue>>| raw.map(|raw| raw.get().to_owned());
        let record = LedgerRecord {
            seq: self.seq,
            event: self.event,
            actor: self.actor,
            release_id: self.release_id,
            epsilon: self.epsilon_units,
            delta: self.delta_units,
            loss: text(self.loss),
            details: text(self.details),
            created_at: self.created_at,
            prev_hash: self.prev_hash,
            hash: self.hash,
        };
        (self.dataset_id, record, self.spent_after, self.budget_after)
    }
}

/// One entry of `dataset` in `format`, after which the ledger stood at
/// `tally`: a line of NDJSON or a CSV record, each ending in a newline.
pub fn line(
    format: Format,
    record: &LedgerRecord,
    dataset: Uuid,
    tally: Option<&Tally>,
) -> anyhow::Result<String> {
    let line = Line::of(record, dataset, tally)?;
    match format {
        Format::Ndjson => {
            let mut text = serde_json::to_string(&line)?;
            text.push('\n');
            Ok(text)
        }
        Format::Csv => {
            let number = |value: Option<f64>| value.map(|v| v.to_string()).unwrap_or_default();
            let spent = line.spent_after.as_ref();
            let budget = line.budget_after.as_ref();
            let fields = [
                line.seq.to_string(),
                serde_json::to_value(line.event)?
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                line.actor.clone(),
                line.release_id.map(|id| id.to_string()).unwrap_or_default(),
                line.epsilon.to_string(),
                line.delta.to_string(),
                line.epsilon_units.units().to_string(),
                line.delta_units.units().to_string(),
                record.loss.clone().unwrap_or_default(),
                record.details.clone().unwrap_or_default(),
                line.created_at.clone(),
                line.prev_hash.clone(),
                line.hash.clone(),
                dataset.to_string(),
                number(spent.map(|s| s.epsilon)),
                number(spent.map(|s| s.delta)),
                number(spent.map(|s| s.epsilon_basic)),
                number(spent.map(|s| s.delta_basic)),
                number(budget.map(|b| b.epsilon)),
                number(budget.map(|b| b.delta)),
            ];
            let mut writer = csv::WriterBuilder::new()
                .terminator(csv::Terminator::Any(b'\n'))
                .from_writer(Vec::new());
            writer.write_record(&fields)?;
            Ok(String::from_utf8(writer.into_inner()?)?)
        }
    }
}

/// What an offline check of an export found.
#[derive(Debug, Clone, PartialEq)]
pub struct Audit {
    pub dataset: Uuid,
    pub entries: u64,
    /// The first entry that fails, if any.
    pub broken: Option<ChainBreak>,
}

/// Checks an NDJSON export (one dataset's whole ledger, oldest first):
/// the chain, and every entry's `spent_after` and `budget_after` against
/// the tally recomputed from the entries themselves.
pub fn audit(reader: impl BufRead) -> anyhow::Result<Audit> {
    let mut walked: Option<(Uuid, Chain)> = None;
    let mut entries = 0u64;
    for (number, text) in reader.lines().enumerate() {
        let text = text?;
        if text.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(&text).map_err(|error| {
            anyhow::anyhow!("line {}: not an exported entry: {error}", number + 1)
        })?;
        let (id, record, spent, budget) = line.record();
        let (dataset, chain) = walked.get_or_insert_with(|| (id, Chain::new(id)));
        entries += 1;
        let fail = |reason: String| ChainBreak {
            seq: record.seq,
            reason,
        };
        let verdict = if id != *dataset {
            Err(fail(format!(
                "an entry of dataset {id} in the export of {dataset}"
            )))
        } else {
            chain
                .check(&record)
                .map(Tally::after)
                .and_then(|(want_spent, want_budget)| {
                    if spent == Some(want_spent) && budget == Some(want_budget) {
                        Ok(())
                    } else {
                        Err(fail(format!(
                            "spent_after or budget_after differ from the entries' own tally \
                         ({want_spent:?}, {want_budget:?})"
                        )))
                    }
                })
        };
        if let Err(broken) = verdict {
            return Ok(Audit {
                dataset: *dataset,
                entries,
                broken: Some(broken),
            });
        }
    }
    let (dataset, _) = walked.ok_or_else(|| anyhow::anyhow!("the export holds no entry"))?;
    Ok(Audit {
        dataset,
        entries,
        broken: None,
    })
}
