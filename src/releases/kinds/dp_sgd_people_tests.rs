use super::*;
use crate::releases::kinds::test_rows::{
    exactly_within, people_columns, people_rows, units_apart_squared,
};
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;

fn sgd(batch_size: usize, epochs: u32) -> Sgd {
    Sgd {
        batch_size,
        epochs,
        learning_rate: 1.0,
        lambda: 0.0,
        clip: 0.5,
        fit_intercept: true,
    }
}

#[test]
fn an_epoch_makes_n_hat_over_b_batches_within_the_caps() {
    assert_eq!(batches(1000.0, &sgd(100, 2), 3), 10);
    assert_eq!(batches(1001.0, &sgd(100, 2), 3), 11);
    assert_eq!(batches(1.0, &sgd(100, 2), 3), 1);
    // 2³⁶ rows in batches of 1: the steps' cap, then the noise's.
    assert_eq!(batches(6.9e10, &sgd(1, 1), 1), MAX_STEPS);
    assert_eq!(batches(6.9e10, &sgd(1, 4), 1000), MAX_NOISE / 4000);
}

/// The exact sums each step of `sgd` sees on `columns`, with people put
/// in batches by `batch_of(person index)` and θ kept at 0 (each step
/// released as zeros).
fn step_sums(
    sgd: &Sgd,
    columns: &Columns,
    grid: &Grid,
    batches: usize,
    batch_of: impl Fn(usize) -> usize,
) -> Vec<Fixed> {
    let mut seen = Vec::new();
    let theta = sgd
        .run_people(
            columns,
            &Identity(2),
            grid,
            (batches, 10.0),
            |assigned| {
                for (person, batch) in assigned.iter_mut().enumerate() {
                    *batch = batch_of(person);
                }
            },
            |_, exact| {
                seen.push(exact.clone());
                Ok(vec![0.0; 3])
            },
        )
        .unwrap();
    assert_eq!(theta, vec![0.0; 3]);
    seen
}

#[test]
fn every_person_meets_one_batch_an_epoch_and_moves_it_by_at_most_the_reach() {
    // 40 people of 1 to 6 rows (m = 6), 4 batches, 2 epochs.
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let rows = people_rows(&mut rng, 40, 6, 2);
    let columns = people_columns(&rows, 2);
    let grid = Grid::per_person(0.5, 1.0, 3, true, 6).unwrap();
    let run = sgd(10, 2);
    let spread = |person: usize| (person * 7 + person / 3) % 4;
    let sums = step_sums(&run, &columns, &grid, 4, spread);
    assert_eq!(sums.len(), 8);
    // An epoch's batches add up to every person's clipped total once.
    let people = people_runs(columns.users()).unwrap();
    let loss = LogisticLabels(columns.labels());
    let all = grid
        .sum_people(&columns, &people, &Identity(2), &loss, &[0.0; 3], true)
        .unwrap();
    for epoch in sums.chunks(4) {
        let mut added = vec![0i128; 3];
        for batch in epoch {
            for (total, units) in added.iter_mut().zip(&batch.units) {
                *total += units;
            }
        }
        assert_eq!(Fixed::normalised(added), Fixed::normalised(all.clone()));
    }
    // Without person 13 (the others in their batches), one batch of each
    // epoch moves, by at most the reach.
    let gone = 13;
    let without: Vec<_> = rows.iter().filter(|row| row.0 != gone).cloned().collect();
    let fewer = people_columns(&without, 2);
    let shifted = |person: usize| {
        spread(if person >= gone as usize {
            person + 1
        } else {
            person
        })
    };
    let moved = step_sums(&run, &fewer, &grid, 4, shifted);
    for (step, (with, without)) in sums.iter().zip(&moved).enumerate() {
        let apart = units_apart_squared(with, without);
        assert_eq!(apart > 0, step % 4 == spread(gone as usize), "step {step}");
        assert!(exactly_within(apart, grid.added()), "step {step}: {apart}");
    }
}

#[test]
fn each_step_divides_the_batch_sum_by_its_rows_on_average() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let rows = people_rows(&mut rng, 12, 3, 2);
    let columns = people_columns(&rows, 2);
    let grid = Grid::per_person(0.5, 1.0, 3, true, 3).unwrap();
    let run = sgd(5, 1);
    // One batch, released exactly: one gradient step of η₀ on the sum
    // over r = 10 rows.
    let theta = run
        .run_people(
            &columns,
            &Identity(2),
            &grid,
            (1, 10.0),
            |assigned| assigned.fill(0),
            |_, exact| Ok(exact.to_f64()),
        )
        .unwrap();
    let people = people_runs(columns.users()).unwrap();
    let loss = LogisticLabels(columns.labels());
    let sum = Fixed::normalised(
        grid.sum_people(&columns, &people, &Identity(2), &loss, &[0.0; 3], true)
            .unwrap(),
    )
    .to_f64();
    let expected: Vec<f64> = sum.iter().map(|s| -s * grid.clip() / 10.0).collect();
    assert_eq!(theta, expected);
}
