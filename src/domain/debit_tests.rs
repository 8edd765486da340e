use proptest::prelude::*;

use super::*;
use crate::domain::budget::admit;
use crate::domain::dataset::tests::record;
use crate::dp::{self, Accountant, Delta, Epsilon, PrivacyLoss};

const ROWS: u64 = 100;

fn budget(epsilon: f64) -> dp::Budget {
    dp::Budget {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(1e-6).unwrap(),
    }
}

fn charge(epsilon: f64) -> Charge {
    Charge {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::ZERO,
        loss: PrivacyLoss::PureEpsilon { epsilon },
    }
}

fn dataset(total: f64) -> DatasetRecord {
    let mut dataset = record();
    dataset.budget = budget(total);
    dataset.accountant = Accountant::Basic;
    dataset.n_rows = ROWS;
    dataset
}

fn debit(analyst: &str, epsilon: f64, key: Option<&str>, rows: u64) -> Debit {
    Debit {
        dataset: Uuid::nil(),
        expected_rows: rows,
        release_id: Uuid::new_v4(),
        analyst: analyst.to_owned(),
        kind: "walr".to_owned(),
        idempotency_key: key.map(str::to_owned),
        request_hash: "h".to_owned(),
        request: "{}".to_owned(),
        charge: charge(epsilon),
        created_at: "2026-11-29T00:00:00Z".to_owned(),
        sources: vec![],
    }
}

fn admitting() -> Decide {
    Box::new(|dataset, analyst, charge| admit(dataset, analyst, charge).ok())
}

fn capped(name: &str, cap: f64) -> AnalystRecord {
    AnalystRecord {
        cap: Some(budget(cap)),
        ..AnalystRecord::new(name)
    }
}

/// The outcome's name and, where it has one, the release it names.
fn summary(outcome: &DebitOutcome) -> (&'static str, Option<Uuid>) {
    match outcome {
        DebitOutcome::Debited(_) => ("debited", None),
        DebitOutcome::Refused(_) => ("refused", None),
        DebitOutcome::Replay(earlier) => ("replay", Some(earlier.id)),
        DebitOutcome::Stale => ("stale", None),
        DebitOutcome::NoDataset => ("none", None),
    }
}

#[test]
fn a_batch_replays_refuses_and_goes_stale_in_order() {
    let first = debit("ana", 0.6, Some("k"), ROWS);
    let first_id = first.release_id;
    let debits = vec![
        first,
        debit("ana", 0.1, Some("k"), ROWS),
        debit("bob", 0.5, None, ROWS),
        debit("bob", 0.3, None, ROWS + 1),
        debit("bob", 0.4, None, ROWS),
    ];
    let decided = decide_batch(
        dataset(1.0),
        vec![],
        Keyed::new(),
        debits
            .into_iter()
            .map(|debit| (debit, admitting()))
            .collect(),
    )
    .unwrap();
    let outcomes: Vec<_> = decided.outcomes.iter().map(summary).collect();
    assert_eq!(
        outcomes,
        [
            ("debited", None),
            ("replay", Some(first_id)),
            ("refused", None),
            ("stale", None),
            ("debited", None)
        ]
    );
    assert_eq!(decided.made.len(), 2);
    assert_eq!(decided.entries.len(), 2);
    assert_eq!(decided.record.composition.releases(), 2);
    let names: Vec<_> = decided.changed.iter().map(|a| a.analyst.as_str()).collect();
    assert_eq!(names, ["ana", "bob"]);
}

#[test]
fn a_stored_key_replays_and_a_cap_refuses() {
    let earlier = debit("ana", 0.1, Some("k"), ROWS).recorded();
    let keyed = Keyed::from([(("ana".to_owned(), "k".to_owned()), earlier.clone())]);
    let debits = vec![
        debit("ana", 0.1, Some("k"), ROWS),
        debit("cat", 0.3, None, ROWS),
        debit("cat", 0.1, None, ROWS),
    ];
    let decided = decide_batch(
        dataset(5.0),
        vec![capped("cat", 0.35)],
        keyed,
        debits
            .into_iter()
            .map(|debit| (debit, admitting()))
            .collect(),
    )
    .unwrap();
    let outcomes: Vec<_> = decided.outcomes.iter().map(summary).collect();
    assert_eq!(
        outcomes,
        [
            ("replay", Some(earlier.id)),
            ("debited", None),
            ("refused", None)
        ]
    );
    assert_eq!(decided.changed[0].cap, Some(budget(0.35)));
}

#[test]
fn a_joint_debit_is_all_or_nothing() {
    let mut joint = debit("ana", 0.5, None, ROWS);
    let source = dataset(0.4);
    joint.sources.push(SourceDebit {
        dataset: source.id,
        expected_rows: ROWS,
        charge: charge(0.5),
    });
    let locked = |source: DatasetRecord| {
        vec![
            (dataset(1.0), AnalystRecord::new("ana")),
            (source, AnalystRecord::new("ana")),
        ]
    };
    let refused = decide_joint(&joint, locked(source.clone()), None, &admitting()).unwrap();
    assert!(matches!(refused, Err(DebitOutcome::Refused(ref pair)) if pair.0.id == source.id));
    let mut stale = dataset(1.0);
    stale.n_rows += 1;
    let stale = decide_joint(&joint, locked(stale), None, &admitting()).unwrap();
    assert!(matches!(stale, Err(DebitOutcome::Stale)));
    let replay = decide_joint(
        &joint,
        locked(dataset(1.0)),
        Some(joint.recorded()),
        &admitting(),
    );
    assert!(matches!(replay, Ok(Err(DebitOutcome::Replay(_)))));
    let parts = decide_joint(&joint, locked(dataset(1.0)), None, &admitting())
        .unwrap()
        .unwrap();
    assert_eq!(parts.len(), 2);
    assert!(
        parts
            .iter()
            .all(|part| part.record.composition.releases() == 1)
    );
    assert_eq!(parts[0].entry.release_id, Some(joint.release_id));
    assert_eq!(parts[1].entry.release_id, Some(joint.release_id));
}

/// A debit drawn for the property: its analyst, ε, key and whether it was
/// priced for the row count there is.
fn debits() -> impl Strategy<Value = Vec<(usize, f64, Option<usize>, bool)>> {
    prop::collection::vec(
        (
            0..3usize,
            0.01..0.6f64,
            prop::option::weighted(0.4, 0..3usize),
            prop::bool::weighted(0.9),
        ),
        0..24,
    )
}

const ANALYSTS: [&str; 3] = ["ana", "bob", "cat"];

fn drawn(spec: &[(usize, f64, Option<usize>, bool)]) -> Vec<Debit> {
    spec.iter()
        .map(|&(analyst, epsilon, key, current)| {
            let key = key.map(|key| format!("k{key}"));
            let rows = if current { ROWS } else { ROWS - 1 };
            debit(ANALYSTS[analyst], epsilon, key.as_deref(), rows)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A batch decides exactly as its debits would one at a time, each
    /// against what the one before left; the total and every cap stay
    /// covered, and only debited releases have entries.
    #[test]
    fn a_batch_decides_as_its_debits_one_at_a_time(
        spec in debits(),
        total in 0.5..3.0f64,
        cap in 0.2..2.0f64,
    ) {
        let debits = drawn(&spec);
        let analysts = vec![capped("bob", cap)];
        let batch = decide_batch(
            dataset(total),
            analysts.clone(),
            Keyed::new(),
            debits.iter().cloned().map(|debit| (debit, admitting())).collect(),
        )
        .unwrap();

        let (mut record, mut stored, mut keyed) = (dataset(total), analysts, Keyed::new());
        let mut outcomes = Vec::new();
        for debit in &debits {
            let one = decide_batch(record.clone(), stored.clone(), keyed.clone(), vec![(debit.clone(), admitting())])
                .unwrap();
            for analyst in one.changed {
                stored.retain(|kept| kept.analyst != analyst.analyst);
                stored.push(analyst);
            }
            if let (Some(key), [_]) = (&debit.idempotency_key, one.made.as_slice()) {
                keyed.insert((debit.analyst.clone(), key.clone()), debit.recorded());
            }
            record = one.record;
            outcomes.extend(one.outcomes);
        }
        let batch_summary: Vec<_> = batch.outcomes.iter().map(summary).collect();
        let single_summary: Vec<_> = outcomes.iter().map(summary).collect();
        prop_assert_eq!(batch_summary, single_summary);
        prop_assert_eq!(&batch.record.composition, &record.composition);
        prop_assert_eq!(batch.made.len(), batch.entries.len());
        let debited = batch.outcomes.iter().filter(|o| matches!(o, DebitOutcome::Debited(_))).count();
        prop_assert_eq!(debited, batch.made.len());
        prop_assert_eq!(batch.record.composition.releases(), batch.made.len() as u64);
        let spent = batch.record.composition.spent(Accountant::Basic, &batch.record.budget);
        prop_assert!(batch.record.budget.covers(&spent));
        for analyst in &batch.changed {
            if let Some(cap) = &analyst.cap {
                prop_assert!(cap.covers(&analyst.composition.spent(Accountant::Basic, cap)));
            }
        }
    }
}
