use proptest::prelude::*;

use super::*;

const SHAPE: Shape = Shape {
    features: 2,
    measures: 1,
    dimensions: 1,
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
    )
}

fn run(ids: &[&str]) -> Columns {
    let mut builder = Columns::builder(SHAPE, true, ids.len());
    for (i, id) in ids.iter().enumerate() {
        push(&mut builder, id, (i % 2) as u8, i as f32 / 10.0).expect("well formed");
    }
    builder.finish_sorted().expect("unique ids")
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
            &[f64::from(0.1f32)][..],
            &[7u32][..]
        )
    );
    assert_eq!(columns.feature_matrix(), &[0.0, 1.0, 0.1, 0.9]);
}

#[test]
fn malformed_rows_are_refused_by_name() {
    let mut builder = Columns::builder(SHAPE, true, 1);
    let short = builder.push("r", 0, &encoded(&[0.5]), &[0; 8], &[0; 4]);
    assert_eq!(short, Err("row \"r\" has malformed features".to_owned()));
    let label = builder.push("r", 2, &encoded(&[0.5, 0.5]), &[0; 8], &[0; 4]);
    assert_eq!(label, Err("row \"r\" has malformed outcomes".to_owned()));
    let dims = builder.push("r", 0, &encoded(&[0.5, 0.5]), &[0; 8], &[0; 3]);
    assert_eq!(dims, Err("row \"r\" has malformed dimensions".to_owned()));
    assert!(builder.is_empty());
}

#[test]
fn inputs_only_runs_hold_no_outcomes() {
    let mut builder = Columns::builder(SHAPE, false, 1);
    // Whatever the label and measures say, they are not kept (nor checked).
    builder
        .push("r", 9, &encoded(&[0.5, 0.5]), &[], &[0; 4])
        .expect("inputs are well formed");
    let columns = builder.finish().expect("one row is sorted");
    assert!(!columns.has_outcomes());
    // An id's text, its end, two features, one dimension: no outcomes.
    assert!(columns.bytes() <= 8 + 8 + 8 + 4, "{}", columns.bytes());
}

#[test]
fn stored_order_must_be_increasing() {
    let mut builder = Columns::builder(SHAPE, true, 2);
    push(&mut builder, "b", 0, 0.5).expect("well formed");
    push(&mut builder, "a", 0, 0.5).expect("well formed");
    assert_eq!(
        builder.finish(),
        Err("stored rows arrived out of row id order".to_owned())
    );
}

#[test]
fn duplicates_are_named_when_sorting_and_merging() {
    let mut builder = Columns::builder(SHAPE, true, 2);
    push(&mut builder, "z", 0, 0.5).expect("well formed");
    push(&mut builder, "z", 1, 0.5).expect("well formed");
    assert_eq!(
        builder.finish_sorted(),
        Err("row id \"z\" is stored twice".to_owned())
    );
    assert_eq!(
        run(&["a", "c"]).merge(&run(&["c"])),
        Err("row id \"c\" is stored twice".to_owned())
    );
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
    /// Sorting an upload and merging it into what was stored gives the run
    /// a store would read back: every id once, in byte order, each with its
    /// own values; and every id is found where it is.
    #[test]
    fn merged_runs_are_sorted_and_indexed(
        ids in proptest::collection::btree_set("[a-zé0-9]{1,6}", 1..60),
        split in 0usize..60,
    ) {
        let ids: Vec<String> = ids.into_iter().collect();
        let split = split.min(ids.len());
        // The later upload arrives in reverse order.
        let earlier: Vec<&str> = ids[..split].iter().map(String::as_str).collect();
        let later: Vec<&str> = ids[split..].iter().rev().map(String::as_str).collect();
        let merged = run(&earlier).merge(&run(&later)).expect("disjoint ids");
        prop_assert_eq!(merged.len(), ids.len());
        for (position, id) in ids.iter().enumerate() {
            prop_assert_eq!(merged.id(position), id.as_str());
            prop_assert_eq!(merged.position(id), Some(position));
        }
        prop_assert_eq!(merged.position("~"), None);
    }
}
