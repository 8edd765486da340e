use proptest::prelude::*;

use super::*;
use crate::store::blocks::{BLOCK_ROWS, Packed, RawBlock};

const SHAPE: Shape = Shape {
    features: 2,
    measures: 1,
    dimensions: 1,
    ids: true,
    labels: true,
    users: false,
};

fn encoded(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn push(builder: &mut Builder, id: &str, label: u8, x: f32) -> Result<(), String> {
    builder.push(
        id,
        label,
        &encoded(&[x, 1.0 - x]),
        &f64::from(x).to_le_bytes(),
        &7u32.to_le_bytes(),
        0,
    )
}

fn run(ids: &[&str]) -> Columns {
    let mut builder = Columns::builder(SHAPE, true, ids.len());
    for (i, id) in ids.iter().enumerate() {
        push(&mut builder, id, (i % 2) as u8, i as f32 / 10.0).expect("well formed");
    }
    builder.finish()
}

#[test]
fn rows_decode_as_stored() {
    let columns = run(&["a", "b"]);
    assert_eq!(columns.len(), 2);
    let row = columns.row(1);
    assert_eq!(
        (
            row.id,
            row.label,
            row.features,
            row.measures,
            row.dimensions
        ),
        (
            "b",
            1,
            &[0.1f32, 0.9][..],
            vec![f64::from(0.1f32)],
            vec![7u32]
        )
    );
    assert_eq!(columns.feature_matrix(), &[0.0, 1.0, 0.1, 0.9]);
}

#[test]
fn malformed_rows_are_refused_by_name() {
    let mut builder = Columns::builder(SHAPE, true, 1);
    let short = builder.push("r", 0, &encoded(&[0.5]), &[0; 8], &[0; 4], 0);
    assert_eq!(short, Err("row \"r\" has malformed features".to_owned()));
    let label = builder.push("r", 2, &encoded(&[0.5, 0.5]), &[0; 8], &[0; 4], 0);
    assert_eq!(label, Err("row \"r\" has malformed outcomes".to_owned()));
    let dims = builder.push("r", 0, &encoded(&[0.5, 0.5]), &[0; 8], &[0; 3], 0);
    assert_eq!(dims, Err("row \"r\" has malformed dimensions".to_owned()));
    assert!(builder.is_empty());
}

#[test]
fn inputs_only_runs_hold_no_outcomes() {
    let mut builder = Columns::builder(SHAPE, false, 1);
    // Whatever the label and measures say, they are not kept (nor checked).
    builder
        .push("r", 9, &encoded(&[0.5, 0.5]), &[], &[0; 4], 0)
        .expect("inputs are well formed");
    let columns = builder.finish();
    assert!(!columns.has_outcomes());
    // An id's text, its end, its index entry, two features, one
    // dimension: no outcomes.
    assert!(columns.bytes() <= 8 + 8 + 4 + 8 + 4, "{}", columns.bytes());
}

#[test]
fn stored_blocks_decode_in_any_cut() {
    let rows = ["a", "é", "bb", "c"];
    let mut packed = Packed::default();
    for (i, id) in rows.iter().enumerate() {
        packed.push(&crate::domain::row::RowRecord {
            line: 2,
            row_id: (*id).to_owned(),
            label: (i % 2) as u8,
            features: encoded(&[i as f32, 1.0]),
            measures: (i as f64).to_le_bytes().to_vec(),
            dimensions: (i as u32).to_le_bytes().to_vec(),
            user: 0,
        });
    }
    let stored = Stored::check(packed.raw(), SHAPE, true).expect("well formed");
    let mut whole = Columns::builder(SHAPE, true, 4);
    whole.append_stored(&stored, 0..4);
    let whole = whole.finish();
    let mut cut = Columns::builder(SHAPE, true, 4);
    for range in [0..1, 1..1, 1..3, 3..4] {
        cut.append_stored(&stored, range);
    }
    assert_eq!(cut.finish(), whole);
    assert_eq!(
        (0..4).map(|row| whole.id(row)).collect::<Vec<_>>(),
        rows.to_vec()
    );
    let third = whole.row(2);
    assert_eq!(
        (
            third.label,
            third.features,
            third.measures,
            third.dimensions
        ),
        (0, &[2.0f32, 1.0][..], vec![2.0], vec![2u32])
    );
    // Without the outcomes, only the inputs are kept.
    let inputs = Stored::check(packed.raw(), SHAPE, false).expect("well formed");
    let mut public = Columns::builder(SHAPE, false, 4);
    public.append_stored(&inputs, 1..4);
    let public = public.finish();
    assert!(!public.has_outcomes());
    assert_eq!(
        (public.id(0), public.features(2)),
        ("é", &[3.0f32, 1.0][..])
    );
}

#[test]
fn malformed_blocks_are_refused() {
    let mut packed = Packed::default();
    packed.push(&crate::domain::row::RowRecord {
        line: 2,
        row_id: "r".to_owned(),
        label: 1,
        features: encoded(&[0.5, 0.5]),
        measures: 1.0f64.to_le_bytes().to_vec(),
        dimensions: 0u32.to_le_bytes().to_vec(),
        user: 0,
    });
    let raw = packed.raw();
    let check = |raw| Stored::check(raw, SHAPE, true).map(|_| ());
    assert!(check(raw).is_ok());
    let short = RawBlock {
        features: &raw.features[1..],
        ..raw
    };
    assert!(check(short).unwrap_err().contains("features"));
    let label = RawBlock {
        labels: &[2],
        ..raw
    };
    assert_eq!(
        check(label).unwrap_err(),
        "a stored label is neither 0 nor 1"
    );
    let zero_end = RawBlock {
        id_ends: &[0, 0, 0, 0],
        ..raw
    };
    assert!(check(zero_end).unwrap_err().contains("ends at 0"));
    let past = RawBlock { ids: b"rx", ..raw };
    assert!(check(past).unwrap_err().contains("past"));
    let split_char = RawBlock {
        ids: "é".as_bytes(),
        id_ends: &[1, 0, 0, 0],
        ..raw
    };
    assert!(check(split_char).is_err());
    let too_many = RawBlock {
        rows: BLOCK_ROWS as i64 + 1,
        ..raw
    };
    assert!(check(too_many).is_err());
    // Without the outcomes, labels and measures are not looked at.
    let no_outcomes = RawBlock {
        labels: &[],
        measures: &[],
        ..raw
    };
    assert!(Stored::check(no_outcomes, SHAPE, false).is_ok());
}

#[test]
fn chunks_cover_every_row_once_in_order() {
    let len = 2 * CHUNK_ROWS + 5;
    let parts = chunked(len, |rows| rows);
    assert_eq!(
        parts,
        vec![
            0..CHUNK_ROWS,
            CHUNK_ROWS..2 * CHUNK_ROWS,
            2 * CHUNK_ROWS..len
        ]
    );
    assert!(chunked(0, |rows| rows).is_empty());
}

proptest! {
    /// A version joined from uploads keeps every row in stored order, and
    /// the index finds every id where it is, and no other.
    #[test]
    fn joined_runs_keep_order_and_index_every_id(
        ids in proptest::collection::hash_set("[a-zé0-9]{1,6}", 1..60),
        split in 0usize..60,
    ) {
        let ids: Vec<String> = ids.into_iter().collect();
        let split = split.min(ids.len());
        let earlier: Vec<&str> = ids[..split].iter().map(String::as_str).collect();
        let later: Vec<&str> = ids[split..].iter().map(String::as_str).collect();
        let joined = run(&earlier).joined(&run(&later)).expect("same shape");
        prop_assert_eq!(joined.len(), ids.len());
        for (position, id) in ids.iter().enumerate() {
            prop_assert_eq!(joined.id(position), id.as_str());
            prop_assert_eq!(joined.position(id), Some(position));
        }
        prop_assert_eq!(joined.position("~"), None);
        prop_assert_eq!(joined.position(""), None);
    }
}

#[test]
fn a_runs_people_travel_with_its_outcomes_and_only_with_them() {
    let shape = Shape {
        users: true,
        ..SHAPE
    };
    let mut builder = Columns::builder(shape, true, 3);
    for (i, user) in [7i128, -7, i128::MAX].into_iter().enumerate() {
        builder
            .push(
                &format!("r{i}"),
                0,
                &encoded(&[0.5, 0.5]),
                &1.0f64.to_le_bytes(),
                &0u32.to_le_bytes(),
                user,
            )
            .expect("well formed");
    }
    let run = builder.finish();
    assert_eq!(run.users(), &[7, -7, i128::MAX]);
    // Through the engine's batches and back, and joined to itself.
    let batch = run.clone().into_batch().expect("a batch");
    assert_eq!(
        batch.schema().field_with_name("user").unwrap().data_type(),
        &USER_TYPE
    );
    assert_eq!(
        Columns::from_batch(shape, true, &batch).expect("read back"),
        run
    );
    assert_eq!(
        run.joined(&run).unwrap().users(),
        &[7, -7, i128::MAX, 7, -7, i128::MAX]
    );
    // A read of the public columns holds no person.
    let inputs = run.inputs();
    assert!(
        inputs
            .into_batch()
            .unwrap()
            .column_by_name("user")
            .is_none()
    );
    assert_eq!(shape.row_bytes(true), SHAPE.row_bytes(true) + 16);
}

/// A run of `rows` (person, id, code of its one dimension) under unit
/// `user`, in that order.
fn people_run(rows: &[(i128, String, u32)]) -> Columns {
    let shape = Shape {
        users: true,
        ..SHAPE
    };
    let mut builder = Columns::builder(shape, true, rows.len());
    for (person, id, code) in rows {
        builder
            .push(
                id,
                1,
                &encoded(&[0.5, 0.5]),
                &1.0f64.to_le_bytes(),
                &code.to_le_bytes(),
                *person,
            )
            .expect("well formed");
    }
    builder.finish()
}

fn users(bounds: [u32; 3], seed: u8) -> crate::domain::dataset::Users {
    let [m, g, r] = bounds;
    crate::domain::dataset::Users {
        column: "person".to_owned(),
        bounds: crate::dp::contribution::ContributionBounds::new(m, Some(g), Some(r)).unwrap(),
        key: crate::dp::contribution::BoundingKey::new([seed; 32]),
    }
}

fn kept_ids(run: &Columns) -> Vec<String> {
    let mut ids: Vec<String> = (0..run.len()).map(|row| run.id(row).to_owned()).collect();
    ids.sort();
    ids
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// In memory, the bounding keeps the rows `dp::contribution` keeps
    /// (grouped by the dimension or not), in stored order or each
    /// person's together in stored order, whatever the order the rows came
    /// in, with each row's person and cell.
    #[test]
    fn the_bounded_run_is_the_references_rows(
        rows in prop::collection::vec((0i128..9, 0u32..4), 0..120),
        m in 1u32..6,
        g in 1u32..6,
        r in 1u32..6,
        seed in any::<u8>(),
    ) {
        use crate::dp::contribution::{Candidate, keep, keep_grouped};
        let (g, r) = (g.min(m), r.min(m));
        let rows: Vec<(i128, String, u32)> =
            rows.iter().enumerate().map(|(i, &(p, code))| (p, format!("row-{i}"), code)).collect();
        let users = users([m, g, r], seed);
        let candidates: Vec<Candidate<i128, u32, String>> = rows
            .iter()
            .map(|(person, id, code)| Candidate {
                user: *person,
                group: *code,
                row_rank: users.key.row_rank(id.as_bytes()),
                id: id.clone(),
            })
            .collect();
        for (grouped_by, kept) in [
            (vec![], keep(&candidates, m)),
            (vec![0], keep_grouped(&candidates, users.bounds)),
        ] {
            let mut expected: Vec<(i128, String, u32)> =
                rows.iter().zip(kept).filter(|(_, kept)| *kept).map(|(row, _)| row.clone()).collect();
            let shown = |run: &Columns| -> Vec<(i128, String, u32)> {
                (0..run.len())
                    .map(|row| (run.users()[row], run.id(row).to_owned(), run.dimension(0)[row]))
                    .collect()
            };
            let bounded = people_run(&rows).bounded(&users, &grouped_by, false).unwrap();
            prop_assert_eq!(shown(&bounded), expected.clone());
            expected.sort_by_key(|(person, _, _)| *person);
            let together = people_run(&rows).bounded(&users, &grouped_by, true).unwrap();
            prop_assert_eq!(shown(&together), expected);
            let mut reversed = rows.clone();
            reversed.reverse();
            let again = people_run(&reversed).bounded(&users, &grouped_by, true).unwrap();
            prop_assert_eq!(kept_ids(&again), kept_ids(&bounded));
        }
    }
}

#[test]
fn only_a_run_with_its_people_is_bounded() {
    let without = run(&["a", "b"]);
    assert!(without.bounded(&users([1, 1, 1], 0), &[], false).is_err());
    let people = people_run(&[(1, "a".to_owned(), 0), (1, "b".to_owned(), 1)]);
    assert!(
        people
            .inputs()
            .bounded(&users([1, 1, 1], 0), &[], false)
            .is_err()
    );
    assert!(people.bounded(&users([1, 1, 1], 0), &[1], false).is_err());
    assert_eq!(
        people
            .bounded(&users([1, 1, 1], 0), &[], false)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        people.bounded(&users([2, 2, 2], 0), &[], false).unwrap(),
        people
    );
    // Two cells of one row each: one cell kept when g = 1.
    assert_eq!(
        people
            .bounded(&users([2, 1, 2], 0), &[0], false)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        people.bounded(&users([2, 2, 1], 0), &[0], false).unwrap(),
        people
    );
}
