//! The check-and-debit transactions: a batch of one dataset's debits, and a
//! release with sources.

/// Expands this part of the shared `Store` implementation for `$store`
/// over `$db` (see [`super::common_store`]).
macro_rules! debits_sql {
    ($store:ty, $db:ty) => {
        /// Makes a batch of debits of dataset `id` in one transaction and
        /// answers each (see `super::batches`).
        async fn write_debits(
            store: &$store,
            id: uuid::Uuid,
            batch: Vec<$crate::store::batches::Pending<($crate::domain::debit::Debit, $crate::domain::debit::Decide), $crate::domain::debit::DebitOutcome>>,
        ) {
            let (debits, replies): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|pending| (pending.item, pending.reply))
                .unzip();
            match debit_all(store, id, debits).await {
                Ok(outcomes) => {
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
                Err(error) => {
                    tracing::error!(dataset = %id, %error, "a batch of debits failed");
                    $crate::store::batches::fail_all(replies, &error);
                }
            }
        }

        /// The check-and-debit transaction for `debits` of dataset `id`, in
        /// order: each decided under the lock against what the ones before
        /// it left ([`crate::domain::debit::decide_batch`]), all written and
        /// committed together.
        async fn debit_all(
            store: &$store,
            id: uuid::Uuid,
            debits: Vec<($crate::domain::debit::Debit, $crate::domain::debit::Decide)>,
        ) -> Result<Vec<$crate::domain::debit::DebitOutcome>, $crate::store::StoreError> {
            use $crate::domain::debit::{DebitOutcome, decide_batch};
            let mut tx = store.begin_write().await?;
            let Some((pk, record)) = dataset_in(&mut tx, id, true).await? else {
                return Ok(debits.iter().map(|_| DebitOutcome::NoDataset).collect());
            };
            let names: Vec<&str> = debits.iter().map(|(debit, _)| debit.analyst.as_str()).collect();
            let analysts = analysts_in(&mut tx, pk, Some(&names)).await?;
            let keys: Vec<(&str, &str)> = debits
                .iter()
                .filter_map(|(debit, _)| Some((debit.analyst.as_str(), debit.idempotency_key.as_deref()?)))
                .collect();
            let keyed = keyed_releases(&mut tx, pk, &keys).await?;
            let decided = decide_batch(record, analysts, keyed, debits)?;
            if decided.made.is_empty() {
                return Ok(decided.outcomes);
            }
            let changed: Vec<&$crate::domain::budget::AnalystRecord> = decided.changed.iter().collect();
            let chained = write_spending(&mut tx, pk, &decided.record, decided.entries, &changed).await?;
            insert_releases(&mut tx, pk, &decided.made, &chained).await?;
            tx.commit().await?;
            Ok(decided.outcomes)
        }

        /// The check-and-debit transaction of a release with sources: every
        /// dataset locked in id order (so that two such transactions cannot
        /// wait on each other), each decided against its own charge
        /// ([`crate::domain::debit::decide_joint`]), and all debited or
        /// none. The release is recorded on its own dataset; each source's
        /// ledger entry names it.
        async fn debit_joint(
            store: &$store,
            debit: &$crate::domain::debit::Debit,
            decide: $crate::domain::debit::Decide,
        ) -> Result<$crate::domain::debit::DebitOutcome, $crate::store::StoreError> {
            use $crate::domain::budget::AnalystRecord;
            use $crate::domain::debit::{DebitOutcome, decide_joint};
            let parts = debit.parts();
            let mut order: Vec<usize> = (0..parts.len()).collect();
            order.sort_by_key(|&index| parts[index].0);
            let mut tx = store.begin_write().await?;
            let mut locked = vec![None; parts.len()];
            for index in order {
                match dataset_in(&mut tx, parts[index].0, true).await? {
                    Some(found) => locked[index] = Some(found),
                    None => return Ok(DebitOutcome::NoDataset),
                }
            }
            let (pks, records): (Vec<i64>, Vec<_>) = locked.into_iter().flatten().unzip();
            let earlier = match &debit.idempotency_key {
                Some(key) => keyed_releases(&mut tx, pks[0], &[(debit.analyst.as_str(), key.as_str())])
                    .await?
                    .into_values()
                    .next(),
                None => None,
            };
            let mut with_analysts = Vec::with_capacity(records.len());
            for (pk, record) in pks.iter().zip(records) {
                let analyst = analysts_in(&mut tx, *pk, Some(&[debit.analyst.as_str()]))
                    .await?
                    .pop()
                    .unwrap_or_else(|| AnalystRecord::new(&debit.analyst));
                with_analysts.push((record, analyst));
            }
            let decided = match decide_joint(debit, with_analysts, earlier, &decide)? {
                Ok(decided) => decided,
                Err(outcome) => return Ok(outcome),
            };
            let mut target = None;
            for (pk, part) in pks.iter().zip(decided) {
                let chained = write_spending(&mut tx, *pk, &part.record, vec![part.entry], &[&part.analyst]).await?;
                if target.is_none() {
                    insert_releases(&mut tx, *pk, std::slice::from_ref(debit), &chained).await?;
                    target = Some(part.record);
                }
            }
            tx.commit().await?;
            Ok(target.map_or(DebitOutcome::NoDataset, |record| DebitOutcome::Debited(Box::new(record))))
        }

        async fn debit(
            store: &$store,
            debit: &$crate::domain::debit::Debit,
            decide: $crate::domain::debit::Decide,
        ) -> Result<$crate::domain::debit::DebitOutcome, $crate::store::StoreError> {
            if !debit.sources.is_empty() {
                return debit_joint(store, debit, decide).await;
            }
            let owned = store.clone();
            store.debits
                .submit(debit.dataset, (debit.clone(), decide), move |id, batch| {
                    let store = owned.clone();
                    async move { write_debits(&store, id, batch).await }
                })
                .await
        }
    };
}

pub(crate) use debits_sql;
