//! A dataset's ledger read from its store in pages, for the checks and
//! views that need it from its opening (verification, the running tally
//! behind a page, the audit export, the privacy profile).

use std::sync::Arc;

use bytes::Bytes;
use dpgate_api_types::LedgerEntry;
use futures_util::stream::{BoxStream, StreamExt};
use uuid::Uuid;

use crate::domain::dataset::DatasetRecord;
use crate::domain::ledger::export::{self, Format};
use crate::domain::ledger::{Chain, ChainBreak, Follow, LedgerRecord};
use crate::dp::Composition;
use crate::store::{Store, StoreError};

/// Entries read per page.
pub const PAGE: u32 = 1000;

/// Reads `dataset`'s entries from the opening up to and including `until`
/// (all of them without), handing each to `visit` in order; stops early
/// when `visit` says so.
pub async fn walk(
    store: &dyn Store,
    dataset: Uuid,
    until: Option<u64>,
    mut visit: impl FnMut(&LedgerRecord) -> bool,
) -> Result<(), StoreError> {
    let mut after = None;
    loop {
        let page = store.ledger(dataset, after, PAGE).await?;
        for entry in &page {
            if until.is_some_and(|until| entry.seq > until) || !visit(entry) {
                return Ok(());
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = Some(last.seq),
            _ => return Ok(()),
        }
    }
}

/// The tally of `dataset`'s ledger up to and including `until`.
pub async fn follow(
    store: &dyn Store,
    dataset: Uuid,
    until: Option<u64>,
) -> Result<Follow, StoreError> {
    let mut follow = Follow::default();
    walk(store, dataset, until, |entry| {
        follow.take(entry);
        true
    })
    .await?;
    Ok(follow)
}

/// What verifying a stored ledger found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub entries: u64,
    pub broken: Option<ChainBreak>,
}

/// Walks `dataset`'s whole ledger ([`Chain`]) and compares what its entries
/// add up to with the dataset's running composition, which prices every
/// release.
pub async fn verify(store: &dyn Store, dataset: &DatasetRecord) -> Result<Verdict, StoreError> {
    let mut chain = Chain::new(dataset.id);
    let mut broken = None;
    walk(store, dataset.id, None, |entry| {
        broken = chain.check(entry).err();
        broken.is_none()
    })
    .await?;
    let entries = chain.checked() + u64::from(broken.is_some());
    if broken.is_none() {
        let recomputed = chain.tally().map(|tally| tally.composition().clone());
        if recomputed.unwrap_or_default() != dataset.composition {
            broken = Some(ChainBreak {
                seq: chain.checked().saturating_sub(1),
                reason: "the chain is intact but the dataset's running composition disagrees \
                         with it"
                    .to_owned(),
            });
        }
    }
    Ok(Verdict { entries, broken })
}

/// What `analyst`'s releases on `dataset` composed (none: nothing yet), or
/// without an analyst the whole ledger's.
pub async fn composition(
    store: &dyn Store,
    dataset: &DatasetRecord,
    analyst: Option<&str>,
) -> Result<Composition, StoreError> {
    let Some(analyst) = analyst else {
        return Ok(dataset.composition.clone());
    };
    Ok(store
        .dataset_with_analyst(dataset.id, analyst)
        .await?
        .map(|(_, record)| record.composition)
        .unwrap_or_default())
}

/// Up to `limit` of `dataset`'s entries after `after`, each with what the
/// ledger had spent and allowed after it.
pub async fn page(
    store: &dyn Store,
    dataset: Uuid,
    after: Option<u64>,
    limit: u32,
) -> Result<Vec<LedgerEntry>, StoreError> {
    let entries = store.ledger(dataset, after, limit).await?;
    let mut follow = match after {
        Some(after) => self::follow(store, dataset, Some(after)).await?,
        None => Follow::default(),
    };
    Ok(entries
        .iter()
        .map(|entry| entry.view(dataset, follow.take(entry)))
        .collect())
}

/// `dataset`'s whole ledger in `format` (the audit export), read and
/// encoded a page at a time as the stream is polled.
pub fn export(
    store: Arc<dyn Store>,
    dataset: Uuid,
    format: Format,
) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    struct Reading {
        store: Arc<dyn Store>,
        after: Option<u64>,
        follow: Follow,
        started: bool,
        done: bool,
    }
    let reading = Reading {
        store,
        after: None,
        follow: Follow::default(),
        started: false,
        done: false,
    };
    futures_util::stream::unfold(reading, move |mut reading| async move {
        if reading.done {
            return None;
        }
        let page = match reading.store.ledger(dataset, reading.after, PAGE).await {
            Ok(page) => page,
            Err(error) => {
                tracing::error!(%error, %dataset, "the ledger export failed part way");
                return Some((Err(std::io::Error::other(error.to_string())), reading));
            }
        };
        reading.done = page.len() < PAGE as usize;
        reading.after = page.last().map(|entry| entry.seq);
        let mut text = String::new();
        if !reading.started {
            text.push_str(format.header());
            reading.started = true;
        }
        for entry in &page {
            let tally = reading.follow.take(entry);
            match export::line(format, entry, dataset, tally) {
                Ok(line) => text.push_str(&line),
                Err(error) => {
                    reading.done = true;
                    return Some((Err(std::io::Error::other(error.to_string())), reading));
                }
            }
        }
        Some((Ok(Bytes::from(text)), reading))
    })
    .boxed()
}
