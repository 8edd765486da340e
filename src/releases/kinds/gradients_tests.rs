//! Sums over people (unit `user`): each person's total clipped, whatever
//! their rows, and the same integers however the people are split.

use super::*;
use crate::releases::kinds::test_rows::{
    Tightness, exactly_within, people_columns, people_rows, units_apart_squared,
};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

type PersonRow = (i128, Vec<f64>, u8);

fn total(grid: &Grid, rows: &[PersonRow], k: usize, theta: &[f64]) -> Fixed {
    let mut pass = Gradients::at(grid, Logistic, theta, true);
    pass.visit(&people_columns(rows, k))
        .expect("people together");
    pass.total()
}

#[test]
fn a_person_added_or_removed_moves_the_sum_by_at_most_its_reach() {
    // Up to 4m rows a person: the sum over people does not rely on the
    // bounding for its sensitivity, only on the clip.
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    let mut tightness = Tightness::new(2);
    for trial in 0..400 {
        let k = rng.random_range(1..5);
        let m = [1, 3, 10][trial % 3];
        let clip = [0.05, 0.5, 3.0, 50.0][rng.random_range(0..4)];
        let grid = Grid::per_person(clip, 1.0, k + 1, true, m).unwrap();
        let theta: Vec<f64> = (0..=k).map(|_| rng.random_range(-8.0..8.0)).collect();
        let count = rng.random_range(1..20);
        let rows = people_rows(&mut rng, count, 4 * m as usize, k);
        let gone = rng.random_range(0..=rows.last().unwrap().0);
        let without: Vec<PersonRow> = rows.iter().filter(|row| row.0 != gone).cloned().collect();
        let apart = units_apart_squared(
            &total(&grid, &rows, k, &theta),
            &total(&grid, &without, k, &theta),
        );
        let declared = grid.added();
        assert!(
            exactly_within(apart, declared),
            "trial {trial}: moved {apart} units², declared {declared}"
        );
        let gap = (apart as f64).sqrt() * 2f64.powi(-FRACTION_BITS);
        tightness.record(usize::from(clip < 1.0), gap, declared, || {
            format!("trial {trial}")
        });
    }
    // Where the clip binds a person's total reaches the bound.
    tightness.attained(1, 0.99, "clip below a person's gradients");
}

#[test]
fn a_persons_total_is_clipped_not_each_row() {
    // One person of two rows at θ = 0: residuals 0.5 − y, gradients
    // (0.5 − y)·(1, x).
    // The total is (0.5, 0.5) + (0.5, 0.25) = (1, 0.75), of norm 1.25.
    let rows: Vec<PersonRow> = vec![(7, vec![1.0], 0), (7, vec![0.5], 0)];
    let near = |sum: &[f64], expected: [f64; 2]| {
        sum.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-8)
    };
    // C = 2 (C′ = min(C, m·√d) = 2): nothing is clipped, the sum is the
    // total over C′.
    let grid = Grid::per_person(2.0, 1.0, 2, true, 2).unwrap();
    let sum = total(&grid, &rows, 1, &[0.0, 0.0]).to_f64();
    assert!(near(&sum, [0.5, 0.375]), "{sum:?}");
    // C = 0.5: the total is clipped whole to (0.4, 0.3), 0.8 and 0.6 of
    // C′; clipping each row to 0.5 first would give (0.8, 0.58) of it.
    let grid = Grid::per_person(0.5, 1.0, 2, true, 2).unwrap();
    let sum = total(&grid, &rows, 1, &[0.0, 0.0]).to_f64();
    assert!(near(&sum, [0.8, 0.6]), "{sum:?}");
}

#[test]
fn the_sum_over_people_is_the_same_integers_however_they_are_split() {
    // 20 000 people (more than a chunk of rows) of 1 to 3 rows.
    let mut rng = ChaCha8Rng::seed_from_u64(35);
    let k = 3;
    let rows = people_rows(&mut rng, 20_000, 3, k);
    let grid = Grid::per_person(0.3, 1.0, k + 1, true, 3).unwrap();
    let theta = [0.5, -1.0, 2.0, 0.25];
    let whole = total(&grid, &rows, k, &theta);
    // Each person's rows in reverse, the people one at a time as the
    // engine hands them: the same integers.
    let mut reversed = rows.clone();
    reversed.reverse();
    reversed.sort_by_key(|row| row.0);
    assert_eq!(total(&grid, &reversed, k, &theta), whole);
    let mut by_people = Gradients::at(&grid, Logistic, &theta, true);
    for person in rows.chunk_by(|a, b| a.0 == b.0) {
        let mut theirs = by_people.of_person().expect("a pass over people");
        theirs.visit(&people_columns(person, k)).unwrap();
        by_people.add_person(&theirs.sums()).unwrap();
    }
    assert_eq!(by_people.total(), whole);
    // A pass over rows has no person to add.
    let rows_grid = Grid::new(0.3, 1.0, k + 1, true).unwrap();
    let mut by_rows = Gradients::at(&rows_grid, Logistic, &theta, true);
    assert!(by_rows.of_person().is_none());
    assert!(by_rows.add_person(&[0; 4]).is_err());
}

#[test]
fn a_block_whose_people_are_not_together_is_refused() {
    let rows: Vec<PersonRow> = vec![(1, vec![0.5], 1), (2, vec![0.5], 0), (1, vec![0.5], 1)];
    let grid = Grid::per_person(1.0, 1.0, 2, true, 2).unwrap();
    let mut pass = Gradients::at(&grid, Logistic, &[0.0, 0.0], true);
    let error = pass.visit(&people_columns(&rows, 1)).unwrap_err();
    assert!(error.contains("not together"), "{error}");
    assert_eq!(people_runs(&[3, 3, 5]).unwrap(), vec![0..2, 2..3]);
    assert!(people_runs(&[]).unwrap().is_empty());
}
