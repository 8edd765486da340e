//! Random rows for the learners' tests: test data, not noise.

use ndarray::Array2;
use rand::RngExt;
use rand::rngs::ChaCha8Rng;

use dpgate_api_types::PrivacyUnit;

use super::gradients::{Gradients, Grid, Loss};
use crate::dp::fixed::Fixed;
use crate::snapshots::{Columns, Pass};

/// A standard normal draw (Box–Muller): test data, not noise.
pub fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let (u, v): (f64, f64) = (rng.random(), rng.random());
    (-2.0 * (1.0 - u).ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A random row: features in [0, 1], a fifth of them at a corner.
pub fn random_row(rng: &mut ChaCha8Rng, k: usize) -> (Vec<f64>, u8) {
    let features = (0..k)
        .map(|_| {
            if rng.random_bool(0.2) {
                f64::from(u8::from(rng.random_bool(0.5)))
            } else {
                rng.random::<f64>()
            }
        })
        .collect();
    (features, u8::from(rng.random_bool(0.5)))
}

pub fn columns_of(rows: &[(Vec<f64>, u8)], k: usize) -> Columns {
    let x = Array2::from_shape_fn((rows.len(), k), |(i, j)| rows[i].0[j]);
    let y: Vec<u8> = rows.iter().map(|row| row.1).collect();
    Columns::of_labelled(x.view(), &y)
}

pub fn distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// `n` random rows of `k` features and a neighbour under `unit` (one
/// label flipped, or one row replaced), as columns; and the largest ‖xᵢ‖²
/// of the first, from its stored (f32) features as the dataset's
/// statistics are.
pub fn neighbours(
    rng: &mut ChaCha8Rng,
    unit: PrivacyUnit,
    n: usize,
    k: usize,
) -> (Columns, Columns, f64) {
    let rows: Vec<(Vec<f64>, u8)> = (0..n).map(|_| random_row(rng, k)).collect();
    let mut neighbour = rows.clone();
    let changed = rng.random_range(0..n);
    match unit {
        PrivacyUnit::Label => neighbour[changed].1 ^= 1,
        PrivacyUnit::Row => neighbour[changed] = random_row(rng, k),
        PrivacyUnit::User => unreachable!("the tests pair rows under label and row"),
    }
    let original = columns_of(&rows, k);
    let max_norm_squared = (0..n)
        .map(|row| {
            original
                .features(row)
                .iter()
                .map(|&v| f64::from(v).powi(2))
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    (original, columns_of(&neighbour, k), max_norm_squared)
}

/// What neighbouring pairs showed of a declared sensitivity: each pair's
/// gap must be within it, and the largest share of it any pair reached,
/// by class of pair (a unit, say), shows it is not loose.
pub struct Tightness(Vec<f64>);

impl Tightness {
    pub fn new(classes: usize) -> Self {
        Tightness(vec![0.0; classes])
    }

    /// Asserts `gap` ≤ `declared` (to rounding) for a pair of `class`.
    #[track_caller]
    pub fn record(&mut self, class: usize, gap: f64, declared: f64, pair: impl Fn() -> String) {
        assert!(
            gap <= declared * (1.0 + 1e-12),
            "{}: moved {gap}, declared {declared}",
            pair()
        );
        self.0[class] = self.0[class].max(gap / declared);
    }

    /// Asserts some pair of `class` reached more than `share` of the bound.
    #[track_caller]
    pub fn attained(&self, class: usize, share: f64, name: &str) {
        assert!(
            self.0[class] > share,
            "{name}: at most {} of the bound",
            self.0[class]
        );
    }
}

/// ‖a − b‖ of two exact sums' units, squared, in integers.
pub fn units_apart_squared(a: &Fixed, b: &Fixed) -> u128 {
    assert_eq!((a.exponent, a.units.len()), (b.exponent, b.units.len()));
    a.units
        .iter()
        .zip(&b.units)
        .map(|(x, y)| x.abs_diff(*y).pow(2))
        .sum()
}

/// Whether an integer `distance_squared` (in units²) is at most
/// (`declared`·2⁴⁰)², decided exactly: `declared`·2⁴⁰ = m·2^e exactly,
/// and an integer is at most m²·2^(2e) iff it is at most its floor.
pub fn exactly_within(distance_squared: u128, declared: f64) -> bool {
    let units = declared * 2f64.powi(40);
    assert!(units.is_normal() && units > 0.0, "{declared}");
    let bits = units.to_bits();
    let mantissa = u128::from((bits & ((1 << 52) - 1)) | (1 << 52));
    let shift = 2 * (((bits >> 52) & 0x7ff) as i32 - 1075);
    let square = mantissa * mantissa;
    let bound = if shift >= 0 {
        assert!(shift < 20, "{declared} is too large to compare");
        square << shift
    } else {
        square >> (-shift).min(127)
    };
    distance_squared <= bound
}

/// The exact normalised sum of the clipped gradients at `theta` of every
/// row of `columns` on `grid`, as a learner's pass sums it.
pub fn gradient_total<L: Loss>(
    grid: &Grid,
    loss: L,
    columns: &Columns,
    theta: &[f64],
    intercept: bool,
) -> Fixed {
    let mut pass = Gradients::at(grid, loss, theta, intercept);
    pass.visit(columns).expect("a pass over rows in memory");
    pass.total()
}

/// Rows of people (person, features, label) as columns of unit `user`,
/// in the order given.
pub fn people_columns(rows: &[(i128, Vec<f64>, u8)], k: usize) -> Columns {
    let shape = crate::snapshots::Shape {
        features: k,
        ids: true,
        labels: true,
        users: true,
        ..Default::default()
    };
    let mut builder = Columns::builder(shape, true, rows.len());
    for (index, (person, features, label)) in rows.iter().enumerate() {
        let stored: Vec<u8> = features
            .iter()
            .flat_map(|&value| (value as f32).to_le_bytes())
            .collect();
        builder
            .push(&format!("{index:010}"), *label, &stored, &[], &[], *person)
            .expect("a well-formed row");
    }
    builder.finish()
}

/// `people` people of 1 to `most` random rows of `k` features each, each
/// person's rows together: (person, features, label).
pub fn people_rows(
    rng: &mut ChaCha8Rng,
    people: i128,
    most: usize,
    k: usize,
) -> Vec<(i128, Vec<f64>, u8)> {
    (0..people)
        .flat_map(|person| {
            let rows = rng.random_range(1..=most);
            (0..rows)
                .map(|_| {
                    let (features, label) = random_row(rng, k);
                    (person, features, label)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
