//! Per-example clipped gradients of a GLM loss over a snapshot's rows:
//! the query every iterative learner releases, step by step.
//!
//! Row i is uᵢ = (1, φ(xᵢ)) with the intercept (first) or φ(xᵢ) without,
//! xᵢ its stored features in [0, 1]ᵏ, φ a public per-row [`FeatureMap`].
//! Its gradient at θ is rᵢ·uᵢ, scaled down to L2 norm at most C, with the
//! residual rᵢ a [`Residual`] of θᵀuᵢ: (σ(θᵀuᵢ) − yᵢ) for the logistic
//! loss on the label ([`LogisticLabels`], what DP-GD and DP-SGD train).
//! The residual is a type parameter, so each learner's loop is compiled
//! for its own loss. Each clipped gradient is put on a public fixed-point
//! grid and summed exactly in integers ([`Grid`]), so the sum is the same
//! integers on any number of cores, in any order, and its sensitivity is
//! proved on those integers. The loop over the rows does not branch on a
//! row's values. Nor does a row's time depend
//! on θ: the logistic is [`crate::dp::constant_time`]'s, and θ's tiny
//! weights are flushed, so a caller's θ cannot make some rows slower than
//! others and time how many there are.

use crate::dp::DpError;
use crate::dp::constant_time::{flush_tiny, logistic};
use crate::dp::fixed::{FRACTION_BITS, Fixed, ceil_sqrt};
use crate::dp::region::{Region, SnappedSums};
use std::ops::Range;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::engine::{Needed, Summed, add_exact};
use crate::snapshots::{Columns, Pass, chunked};

/// A public map of one row's stored features into the space a model is
/// trained in.
pub trait FeatureMap: Sync {
    /// The dimension of φ(x).
    fn dims(&self) -> usize;

    /// Writes φ(`features`) into `out` (of length [`Self::dims`]).
    fn apply(&self, features: &[f32], out: &mut [f64]);

    /// Whether every coordinate of φ(x) lies in [0, 1] for x in [0, 1]ᵏ.
    fn bounded(&self) -> bool;
}

/// φ(x) = x.
pub struct Identity(pub usize);

impl FeatureMap for Identity {
    fn dims(&self) -> usize {
        self.0
    }

    fn apply(&self, features: &[f32], out: &mut [f64]) {
        for (mapped, &value) in out.iter_mut().zip(features) {
            *mapped = f64::from(value);
        }
    }

    fn bounded(&self) -> bool {
        true
    }
}

/// dℓ/d(θᵀu) of one row's loss: its gradient is this times u.
pub trait Residual: Sync {
    fn residual(&self, prediction: f64, row: usize) -> f64;
}

/// The logistic loss on the rows' 0/1 labels: σ(θᵀu) − y.
pub struct LogisticLabels<'a>(pub &'a [u8]);

impl Residual for LogisticLabels<'_> {
    fn residual(&self, prediction: f64, row: usize) -> f64 {
        logistic(prediction) - f64::from(self.0[row])
    }
}

/// How each row's clipped gradient is put on the fixed-point grid, and
/// the sensitivity of their exact sum.
///
/// A row's gradient r·u is clipped to norm C′ = min(C, |r|max·√d) when
/// every coordinate of u lies in [0, 1] (`bounded`: stored features, the
/// intercept's 1), C otherwise; clipping at C′ changes nothing the clip at
/// C would not, since ‖r·u‖ ≤ |r|max·√d. Each coordinate is then at most
/// b = min(|r|max, C) in magnitude (C when unbounded). The row goes onto
/// the [`Region`] of scale C′ with the box [−b, b]ᵈ and the ball C′, whose
/// bounds hold exactly in integer space, and the rows' units are summed
/// in i128: the sum is the same integers in any order, on any number of
/// threads. Read as units·2⁻⁴⁰ it is Σ clip(gᵢ)/C′ up to the rounding the
/// sensitivities below count.
///
/// # Sensitivity of the exact sum (units·2⁻⁴⁰)
///
/// - A row replaced, added or removed, or any change to it: both rows'
///   units lie in the region, so the sum moves by at most its diameter,
///   √min(Σ(2b)², 4·2⁸⁰)·2⁻⁴⁰ ≤ 2·min(C, |r|max·√d)/C′ exactly
///   ([`Region::diameter_squared`], computed in integers).
/// - An outcome changed (unit `label`): r moves by at most `shift` along
///   the row's u, and clipping (a radial scaling) is 1-Lipschitz along
///   that line, so the real gradients move by at most shift·‖u‖; on the
///   grid by at most that/C′·2⁴⁰ plus [`Region::line_units`]' public
///   rounding term (below 6√d + 2 units), capped at the diameter.
/// - A person's rows added or removed (unit `user`, on a
///   [`Grid::per_person`]): the sum gains or loses one vector of the
///   region, the person's clipped total, so it moves by at most the
///   region's reach, √min(Σb², C′²)·2⁻⁴⁰ ≤ 1 exactly
///   ([`Region::reach_squared`]), whatever the person's rows.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Grid {
    region: Region,
    clip: f64,
    /// Under unit `user`, the grid each person's rows are summed on
    /// before their total is clipped onto this one.
    rows: Option<Box<Grid>>,
}

impl Grid {
    /// Gradients r·u clipped to `clip` with |r| ≤ `largest` (∞ when θ
    /// does not bound it), d = `dims` coordinates, each coordinate of u
    /// in [0, 1] when `bounded`.
    pub fn new(clip: f64, largest: f64, dims: usize, bounded: bool) -> Result<Grid, DpError> {
        let (clip, side) = if bounded {
            (clip.min(largest * (dims as f64).sqrt()), clip.min(largest))
        } else {
            (clip, clip)
        };
        let region = Region::new(clip, &vec![-side; dims], &vec![side; dims], Some(clip))?;
        Ok(Grid {
            region,
            clip,
            rows: None,
        })
    }

    /// The grid of a sum over people, each person's summed gradient clipped
    /// to `clip` (the per-user clipping of unit `user`), a person having at
    /// most `m` rows, each r·u as [`Grid::new`] says. A person's rows are
    /// summed exactly on a grid of their own first, each row's gradient
    /// left whole where the loss and the features bound it (‖r·u‖ ≤
    /// |r|max·√d) and clipped to C where they do not; the total, at most
    /// m·|r|max in each coordinate, is then clipped to C′ = min(C,
    /// m·|r|max·√d) and snapped onto this grid's region, so one person adds
    /// one vector of the region however many rows they have.
    pub fn per_person(
        clip: f64,
        largest: f64,
        dims: usize,
        bounded: bool,
        m: u32,
    ) -> Result<Grid, DpError> {
        let whole = match bounded && largest.is_finite() {
            true => largest * (dims as f64).sqrt(),
            false => clip,
        };
        let rows = Grid::new(whole, largest, dims, bounded)?;
        let person = Grid::new(clip, largest * f64::from(m), dims, bounded)?;
        Ok(Grid {
            rows: Some(Box::new(rows)),
            ..person
        })
    }

    /// The grid a person's rows are summed on, for a [`Grid::per_person`].
    pub fn of_rows(&self) -> Option<&Grid> {
        self.rows.as_deref()
    }

    /// C′: one unit of a normalised sum is worth C′ in the gradients'.
    pub fn clip(&self) -> f64 {
        self.clip
    }

    /// The sensitivity of the normalised sum when one row may change in
    /// any way (unit `row`).
    pub fn replaced(&self) -> f64 {
        ceil_sqrt(self.region.diameter_squared()) * 2f64.powi(-FRACTION_BITS)
    }

    /// The sensitivity of the normalised sum when one summand is added or
    /// removed (a person, unit `user`): the region's reach.
    pub fn added(&self) -> f64 {
        ceil_sqrt(self.region.reach_squared()) * 2f64.powi(-FRACTION_BITS)
    }

    /// The units one row weighs in a count released beside this grid's
    /// sums when a person has at most `m` rows: ⌊Δ/m⌋ for Δ the reach in
    /// units ([`Grid::added`]), so that a person moves the count by at most
    /// what they move the sums by.
    pub fn count_weight(&self, m: u32) -> i128 {
        (ceil_sqrt(self.region.reach_squared()) / f64::from(m)).floor() as i128
    }

    /// The sensitivity of the normalised sum when one row's gradient moves
    /// along its u by at most `distance` (an outcome under unit `label`).
    pub fn moved(&self, distance: f64) -> f64 {
        self.region.line_units(distance) * 2f64.powi(-FRACTION_BITS)
    }

    /// The largest magnitude a coordinate of the normalised sum of `rows`
    /// rows can reach, for the noise lattice.
    pub fn range(&self, rows: u64) -> f64 {
        let side = ceil_sqrt(self.region.reach_squared());
        (rows as f64 * side).next_up() * 2f64.powi(-FRACTION_BITS)
    }

    /// The clipped gradients of `rows` at `theta`, exactly summed in grid
    /// units.
    pub fn sum(
        &self,
        columns: &Columns,
        rows: impl IntoIterator<Item = usize>,
        map: &impl FeatureMap,
        loss: &impl Residual,
        theta: &[f64],
        intercept: bool,
    ) -> Vec<i128> {
        let mut summer = Summer::new(self, theta, intercept);
        summer.add(columns, rows, map, loss);
        summer.sums.finish()
    }

    /// The clipped totals at `theta` of `people`, each a run of one
    /// person's rows, exactly summed on this [`Grid::per_person`]: each
    /// run summed on the rows' grid ([`Grid::sum`]), then added as
    /// [`Grid::add_person`] adds it.
    pub fn sum_people(
        &self,
        columns: &Columns,
        people: &[Range<usize>],
        map: &impl FeatureMap,
        loss: &impl Residual,
        theta: &[f64],
        intercept: bool,
    ) -> Result<Vec<i128>, String> {
        let rows = self.of_rows().ok_or(NOT_PER_PERSON)?;
        let mut summer = Summer::new(rows, theta, intercept);
        let mut sums = self.region.sums();
        let (mut exact, mut total) = (vec![0; theta.len()], vec![0.0; theta.len()]);
        for run in people {
            summer.add(columns, run.clone(), map, loss);
            summer.sums.take(&mut exact);
            self.clipped(rows, &exact, &mut total);
            sums.add(&total, true);
        }
        Ok(sums.finish())
    }

    /// `sums` with one person's total added: `exact`, the person's rows
    /// summed on the rows' grid, clipped to C′ and snapped onto this one.
    pub fn add_person(&self, sums: &mut [i128], exact: &[i128]) -> Result<(), String> {
        let rows = self.of_rows().ok_or(NOT_PER_PERSON)?;
        if exact.len() != sums.len() {
            return Err(format!(
                "a person of {} sums for {}",
                exact.len(),
                sums.len()
            ));
        }
        let mut total = vec![0.0; exact.len()];
        self.clipped(rows, exact, &mut total);
        let mut snapped = self.region.sums();
        snapped.add(&total, true);
        add_exact(sums, &snapped.finish())
    }

    /// A person's total (`exact`, on the grid `rows`) scaled down to norm
    /// at most C′, into `total`: a function of the exact integers alone, so
    /// the same however the person's rows were split or ordered.
    fn clipped(&self, rows: &Grid, exact: &[i128], total: &mut [f64]) {
        let unit = rows.region.unit();
        for (value, &units) in total.iter_mut().zip(exact) {
            *value = units as f64 * unit;
        }
        let norm = total.iter().map(|value| value * value).sum::<f64>().sqrt();
        // C/0 = ∞ when the total is zero: the factor is then 1.
        let factor = (self.clip / norm).min(1.0);
        for value in total {
            *value *= factor;
        }
    }
}

const NOT_PER_PERSON: &str = "a sum over people on a grid of rows";

/// A running exact sum of rows' clipped gradients at θ on a grid, its
/// scratch space kept from row to row and from person to person.
struct Summer<'g> {
    grid: &'g Grid,
    sums: SnappedSums<'g>,
    /// θ, its tiny weights flushed (module docs).
    theta: Vec<f64>,
    intercept: bool,
    gradient: Vec<f64>,
}

impl<'g> Summer<'g> {
    fn new(grid: &'g Grid, theta: &[f64], intercept: bool) -> Self {
        Summer {
            grid,
            sums: grid.region.sums(),
            theta: theta.iter().copied().map(flush_tiny).collect(),
            intercept,
            gradient: vec![0.0; theta.len()],
        }
    }

    /// Adds the clipped gradients of `rows`.
    fn add(
        &mut self,
        columns: &Columns,
        rows: impl IntoIterator<Item = usize>,
        map: &impl FeatureMap,
        loss: &impl Residual,
    ) {
        let k = columns.shape().features;
        let offset = usize::from(self.intercept);
        let (bias, one) = if self.intercept {
            (self.theta[0], 1.0)
        } else {
            (0.0, 0.0)
        };
        let weights = &self.theta[offset..];
        let matrix = columns.feature_matrix();
        let gradient = &mut self.gradient;
        for row in rows {
            map.apply(&matrix[row * k..(row + 1) * k], &mut gradient[offset..]);
            let mapped = &gradient[offset..];
            let (mut prediction, mut norm_squared) = (bias, one);
            for (weight, &value) in weights.iter().zip(mapped) {
                prediction += weight * value;
                norm_squared += value * value;
            }
            let residual = loss.residual(prediction, row);
            // C/0 = ∞ when the gradient is zero: the factor is then 1.
            let clip = self.grid.clip;
            let factor = residual * (clip / (residual.abs() * norm_squared.sqrt())).min(1.0);
            if self.intercept {
                gradient[0] = 1.0;
            }
            for value in gradient.iter_mut() {
                *value *= factor;
            }
            self.sums.add(gradient, true);
        }
    }
}

/// The runs of rows of one person each in `users`, which must hold each
/// person's rows together in increasing order of person (as
/// [`Columns::bounded`] leaves them).
pub fn people_runs(users: &[i128]) -> Result<Vec<Range<usize>>, String> {
    let mut runs = Vec::new();
    let mut start = 0;
    for row in 1..=users.len() {
        if row == users.len() || users[row] != users[start] {
            if row < users.len() && users[row] < users[start] {
                return Err("a person's rows are not together".to_owned());
            }
            runs.push(start..row);
            start = row;
        }
    }
    Ok(runs)
}

/// The residuals of a block's rows under a loss: what a [`Gradients`]
/// pass asks each block it visits for.
pub trait Loss: Clone + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// Names the [`Gradients`] pass under this loss.
    const KIND: &'static str;

    fn on<'b>(&'b self, block: &'b Columns) -> impl Residual + 'b;

    /// Whether its residuals read a measure (else the label).
    fn of_measure(&self) -> bool;
}

/// The logistic loss on the rows' 0/1 labels ([`LogisticLabels`]).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Logistic;

impl Loss for Logistic {
    const KIND: &'static str = "gradients/logistic";

    fn on<'b>(&'b self, block: &'b Columns) -> impl Residual + 'b {
        LogisticLabels(block.labels())
    }

    fn of_measure(&self) -> bool {
        false
    }
}

/// The clipped gradients at θ of every row a pass visits, exactly summed
/// on a [`Grid`] (chunks on all cores; integers, so their order is moot):
/// a summed pass, so the engine runs it over files no snapshot holds, and
/// a learner's step over 10⁹ rows is one pass of it.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct Gradients<L> {
    grid: Grid,
    loss: L,
    theta: Vec<f64>,
    intercept: bool,
    sums: Vec<i128>,
}

impl<L: Loss> Gradients<L> {
    /// No row yet, at `theta` (intercept first when `intercept`).
    pub fn at(grid: &Grid, loss: L, theta: &[f64], intercept: bool) -> Self {
        Gradients {
            grid: grid.clone(),
            loss,
            theta: theta.to_vec(),
            intercept,
            sums: vec![0; theta.len()],
        }
    }

    /// The normalised sum Σ clip(gᵢ)/C′ of the rows visited.
    pub fn total(self) -> Fixed {
        Fixed::normalised(self.sums)
    }
}

impl<L: Loss> Pass for Gradients<L> {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let map = Identity(block.shape().features);
        let parts = {
            let loss = self.loss.on(block);
            let (grid, theta, intercept) = (&self.grid, &self.theta, self.intercept);
            match grid.of_rows() {
                None => {
                    block.chunks(|rows| Ok(grid.sum(block, rows, &map, &loss, theta, intercept)))
                }
                // Each person's rows are in the block, together: the
                // people are split among the cores, never a person.
                Some(_) => {
                    let people = people_runs(block.users())?;
                    chunked(people.len(), |some| {
                        grid.sum_people(block, &people[some], &map, &loss, theta, intercept)
                    })
                }
            }
        };
        for part in parts {
            add_exact(&mut self.sums, &part?)?;
        }
        Ok(())
    }
}

impl<L: Loss> Summed for Gradients<L> {
    const KIND: &'static str = L::KIND;

    fn needs(&self) -> Needed {
        let needed = Needed::features_and(self.loss.of_measure());
        match self.grid.of_rows() {
            Some(_) => needed.with_people(),
            None => needed,
        }
    }

    fn sums(&self) -> Vec<i128> {
        self.sums.clone()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        add_exact(&mut self.sums, sums)
    }

    fn of_person(&self) -> Option<Self> {
        let rows = self.grid.of_rows()?;
        Some(Gradients::at(
            rows,
            self.loss.clone(),
            &self.theta,
            self.intercept,
        ))
    }

    fn add_person(&mut self, rows: &[i128]) -> Result<(), String> {
        self.grid.add_person(&mut self.sums, rows)
    }
}

#[cfg(test)]
#[path = "gradients_tests.rs"]
mod tests;
