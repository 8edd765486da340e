//! The row shapes both backends read and write, and their conversion to and
//! from the domain records.

use dpgate_api_types as api;
use uuid::Uuid;

use super::StoreError;
use crate::domain::budget::AnalystRecord;
use crate::domain::dataset::{
    ChunkHashes, DatasetRecord, FilePart, Schema, VersionFile, WalrStats,
};
use crate::domain::debit::StoredRelease;
use crate::domain::ledger::LedgerRecord;
use crate::domain::registration::{Ended, RegistrationRecord};
use crate::dp::{Accountant, Budget, Composition, Delta, Epsilon};

fn corrupt(what: &'static str, detail: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what,
        detail: detail.to_string(),
    }
}

fn json<T: serde::de::DeserializeOwned>(what: &'static str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|error| corrupt(what, error))
}

/// JSON text of a value the store writes.
pub(super) fn to_json(value: &impl serde::Serialize) -> Result<String, StoreError> {
    Ok(serde_json::to_string(value)?)
}

pub(super) fn uuid(what: &'static str, text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|error| corrupt(what, error))
}

pub(super) fn unsigned(what: &'static str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|error| corrupt(what, error))
}

/// Stored integers are i64: a count or ε beyond it is refused, never
/// clamped into something else.
pub(super) fn signed(what: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange { what, value })
}

pub(super) fn accountant_name(accountant: Accountant) -> &'static str {
    match accountant {
        Accountant::Rdp => "rdp",
        Accountant::Basic => "basic",
    }
}

pub(super) fn event_name(event: api::LedgerEvent) -> &'static str {
    match event {
        api::LedgerEvent::Open => "open",
        api::LedgerEvent::Release => "release",
        api::LedgerEvent::Budget => "budget",
        api::LedgerEvent::Cap => "cap",
    }
}

/// A row of `version_files`.
#[derive(sqlx::FromRow)]
pub(super) struct FileRow {
    version: i64,
    part: String,
    seq: i64,
    path: String,
    row_count: i64,
    byte_count: i64,
    sha256: String,
    modified_ns: Option<i64>,
    etag: Option<String>,
    footer_bytes: Option<i64>,
    chunk_blake3: Option<Vec<u8>>,
}

impl FileRow {
    pub(super) fn into_file(self) -> Result<VersionFile, StoreError> {
        Ok(VersionFile {
            version: unsigned("file version", self.version)?,
            part: FilePart::parse(&self.part).ok_or_else(|| corrupt("file part", &self.part))?,
            seq: unsigned("file seq", self.seq)?,
            path: self.path,
            rows: unsigned("file rows", self.row_count)?,
            bytes: unsigned("file bytes", self.byte_count)?,
            sha256: self.sha256,
            modified_ns: self.modified_ns,
            etag: self.etag,
            chunks: match (self.footer_bytes, self.chunk_blake3) {
                (Some(footer), Some(hashes)) => Some(ChunkHashes {
                    footer_bytes: unsigned("footer bytes", footer)?,
                    blake3: hashes.into(),
                }),
                (None, None) => None,
                _ => return Err(corrupt("file chunk hashes", "half recorded")),
            },
        })
    }
}

/// A row of `datasets`.
#[derive(sqlx::FromRow)]
pub(super) struct DatasetRow {
    id: String,
    name: String,
    privacy_unit: String,
    accountant: String,
    schema: String,
    budget_epsilon: i64,
    budget_delta: String,
    composition: String,
    n_rows: i64,
    stats: String,
    created_at: String,
}

/// The columns of `datasets` in the order the inserts bind them.
pub(super) const DATASET_COLUMNS: &str = "id, name, privacy_unit, accountant, schema, \
     budget_epsilon, budget_delta, composition, n_rows, stats, created_at";

impl DatasetRow {
    pub(super) fn into_record(self) -> Result<DatasetRecord, StoreError> {
        let privacy_unit = match self.privacy_unit.as_str() {
            "label" => api::PrivacyUnit::Label,
            "row" => api::PrivacyUnit::Row,
            "user" => api::PrivacyUnit::User,
            other => return Err(corrupt("privacy unit", other)),
        };
        let accountant = match self.accountant.as_str() {
            "rdp" => Accountant::Rdp,
            "basic" => Accountant::Basic,
            other => return Err(corrupt("accountant", other)),
        };
        let budget_delta: u128 = self
            .budget_delta
            .parse()
            .map_err(|error| corrupt("budget delta", error))?;
        DatasetRecord {
            id: uuid("dataset id", &self.id)?,
            name: self.name,
            privacy_unit,
            accountant,
            schema: json::<Schema>("schema", &self.schema)?,
            budget: Budget {
                epsilon: Epsilon::from_units(unsigned("budget epsilon", self.budget_epsilon)?),
                delta: Delta::from_units(budget_delta),
            },
            composition: json::<Composition>("composition", &self.composition)?,
            n_rows: unsigned("row count", self.n_rows)?,
            stats: json::<WalrStats>("statistics", &self.stats)?,
            created_at: self.created_at,
        }
        .consistent()
        .map_err(|error| corrupt("privacy unit", error))
    }
}

/// A row of `ledger`.
#[derive(sqlx::FromRow)]
pub(super) struct LedgerRow {
    seq: i64,
    event: String,
    actor: String,
    release_id: Option<String>,
    epsilon: i64,
    delta: String,
    loss: Option<String>,
    details: Option<String>,
    created_at: String,
    prev_hash: String,
    hash: String,
}

pub(super) const LEDGER_COLUMNS: &str =
    "seq, event, actor, release_id, epsilon, delta, loss, details, created_at, prev_hash, hash";

impl LedgerRow {
    pub(super) fn into_record(self) -> Result<LedgerRecord, StoreError> {
        let event = match self.event.as_str() {
            "open" => api::LedgerEvent::Open,
            "release" => api::LedgerEvent::Release,
            "budget" => api::LedgerEvent::Budget,
            "cap" => api::LedgerEvent::Cap,
            other => return Err(corrupt("ledger event", other)),
        };
        Ok(LedgerRecord {
            seq: unsigned("ledger sequence number", self.seq)?,
            event,
            actor: self.actor,
            release_id: self
                .release_id
                .as_deref()
                .map(|id| uuid("release id", id))
                .transpose()?,
            epsilon: Epsilon::from_units(unsigned("ledger epsilon", self.epsilon)?),
            delta: Delta::from_units(
                self.delta
                    .parse()
                    .map_err(|error| corrupt("ledger delta", error))?,
            ),
            loss: self.loss,
            details: self.details,
            created_at: self.created_at,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

/// A row of `releases` joined to its dataset's public id.
#[derive(sqlx::FromRow)]
pub(super) struct ReleaseRow {
    id: String,
    dataset: String,
    analyst: String,
    request_hash: String,
    response: Option<String>,
    failure: Option<String>,
    n_rows: Option<i64>,
}

pub(super) const RELEASE_COLUMNS: &str =
    "r.id, d.id AS dataset, r.analyst, r.request_hash, r.response, r.failure, r.n_rows";

impl ReleaseRow {
    pub(super) fn into_release(self) -> Result<StoredRelease, StoreError> {
        Ok(StoredRelease {
            id: uuid("release id", &self.id)?,
            dataset: uuid("dataset id", &self.dataset)?,
            analyst: self.analyst,
            request_hash: self.request_hash,
            response: self.response,
            failure: self.failure,
            rows: self
                .n_rows
                .map(|rows| unsigned("release rows", rows))
                .transpose()?,
        })
    }
}

/// The opening ledger entry of a new dataset: its budget and accountant.
pub(super) fn opening_entry(dataset: &super::NewDataset) -> Result<LedgerRecord, StoreError> {
    let record = &dataset.record;
    let mut details = serde_json::json!({
        "name": record.name,
        "privacy_unit": record.privacy_unit.name(),
        "accountant": accountant_name(record.accountant),
        "budget": {"epsilon": record.budget.epsilon.value(), "delta": record.budget.delta.value()},
    });
    // Unit `user`: the bounds are part of what the guarantee says, so the
    // ledger records them from the start (never the key).
    if let Some(users) = &record.schema.users {
        details["user_column"] = users.column.clone().into();
        details["contribution_bounds"] = serde_json::json!({
            "max_rows_per_user": users.bounds.rows,
            "max_groups_per_user": users.bounds.groups,
            "max_rows_per_group_per_user": users.bounds.rows_per_group,
        });
    }
    crate::domain::ledger::NewEntry {
        event: api::LedgerEvent::Open,
        actor: dataset.actor.clone(),
        release_id: None,
        epsilon: Epsilon::ZERO,
        delta: Delta::ZERO,
        loss: None,
        details: Some(details.to_string()),
        created_at: record.created_at.clone(),
    }
    .chain(&record.id, None)
    .map_err(StoreError::from)
}

/// A row of `analysts`.
#[derive(sqlx::FromRow)]
pub(crate) struct AnalystRow {
    analyst: String,
    cap_epsilon: Option<i64>,
    cap_delta: Option<String>,
    composition: String,
}

/// The columns of `analysts` as [`AnalystRow`] reads them.
pub(crate) const ANALYST_COLUMNS: &str = "analyst, cap_epsilon, cap_delta, composition";

impl AnalystRow {
    /// `analyst`'s row from its columns, read under other names.
    pub(crate) fn new(
        analyst: String,
        cap_epsilon: Option<i64>,
        cap_delta: Option<String>,
        composition: String,
    ) -> Self {
        AnalystRow {
            analyst,
            cap_epsilon,
            cap_delta,
            composition,
        }
    }

    pub(crate) fn into_record(self) -> Result<AnalystRecord, StoreError> {
        let cap = match (self.cap_epsilon, self.cap_delta) {
            (Some(epsilon), Some(delta)) => Some(Budget {
                epsilon: Epsilon::from_units(unsigned("cap epsilon", epsilon)?),
                delta: Delta::from_units(
                    delta.parse().map_err(|error| corrupt("cap delta", error))?,
                ),
            }),
            (None, None) => None,
            _ => return Err(corrupt("cap", "half of it is missing")),
        };
        Ok(AnalystRecord {
            analyst: self.analyst,
            cap,
            composition: json::<Composition>("analyst composition", &self.composition)?,
        })
    }
}

/// A release joined to the ledger entry that debited it.
#[derive(sqlx::FromRow)]
pub(crate) struct ReleaseListingRow {
    id: String,
    kind: String,
    analyst: String,
    epsilon: i64,
    delta: String,
    seq: i64,
    created_at: String,
}

impl ReleaseListingRow {
    pub(crate) fn into_summary(self) -> Result<api::ReleaseSummary, StoreError> {
        Ok(api::ReleaseSummary {
            id: uuid("release id", &self.id)?,
            kind: self.kind,
            analyst: self.analyst,
            epsilon: Epsilon::from_units(unsigned("ledger epsilon", self.epsilon)?).value(),
            delta: Delta::from_units(
                self.delta
                    .parse()
                    .map_err(|error| corrupt("ledger delta", error))?,
            )
            .value(),
            seq: unsigned("ledger sequence number", self.seq)?,
            created_at: self.created_at,
        })
    }
}

/// A `registrations` row.
#[derive(sqlx::FromRow)]
pub(super) struct RegistrationRow {
    id: String,
    dataset_id: String,
    actor: String,
    created_at: String,
    beat_at: String,
    finished_at: Option<String>,
    report: Option<String>,
    problem: Option<String>,
}

pub(super) const REGISTRATION_COLUMNS: &str =
    "id, dataset_id, actor, created_at, beat_at, finished_at, report, problem";

impl RegistrationRow {
    pub(super) fn into_record(self) -> Result<RegistrationRecord, StoreError> {
        let outcome = match (self.report, self.problem) {
            (None, None) => None,
            (Some(report), None) => Some(Ok(json("registration report", &report)?)),
            (None, Some(problem)) => Some(Err(json("registration problem", &problem)?)),
            (Some(_), Some(_)) => {
                return Err(corrupt("registration", "both a report and a problem"));
            }
        };
        let ended = match (self.finished_at, outcome) {
            (None, None) => None,
            (Some(at), Some(outcome)) => Some(Ended { at, outcome }),
            _ => {
                return Err(corrupt(
                    "registration",
                    "an end without an outcome, or one without an end",
                ));
            }
        };
        Ok(RegistrationRecord {
            id: uuid("registration id", &self.id)?,
            dataset_id: uuid("registration's dataset id", &self.dataset_id)?,
            actor: self.actor,
            created_at: self.created_at,
            beat_at: self.beat_at,
            ended,
        })
    }
}
