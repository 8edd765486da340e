//! WALR over feature vectors the analyst supplies (seed 002: "the weights
//! are to be supplied by the API consumer"): an advertiser holds its own
//! impression features and only needs the server's labels.
//!
//! The release is (1/N_s)·Σ yᵢ·(1, vᵢ) over the N_s supplied rows, with the
//! supplied vectors vᵢ ∈ [0, 1]ᵏ in place of the stored features. Only under
//! the `label` privacy unit: there row ids and N are public, so refusing an
//! unknown row id reveals nothing; under `row` the answer "no such row"
//! would itself disclose membership.
//!
//! Sensitivity (L2): flipping the label of supplied row i moves the sum by
//! (1, vᵢ)/N_s, so Δ = maxᵢ √(1 + ‖vᵢ‖²) / N_s (drop the 1 without the
//! intercept), computed from the supplied vectors alone: exactly, as the
//! largest ‖uᵢ‖² of the vectors on the grid of the exact sums
//! ([`WalrGrid`]).
//!
//! Before the debit (dry runs too) only the row ids are checked, from the
//! rows' public columns; the labels are joined after it, as Σ yᵢ·vᵢ with no
//! branch on a label.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use async_trait::async_trait;
use dpgate_api_types::{self as api, FeatureMap, PrivacyUnit, SuppliedRow};

use super::walr;
use super::walr_map::{self, Moments, WalrGrid};
use crate::domain::dataset::{DatasetRecord, Unit};
use crate::dp::Mechanism;
use crate::dp::fixed::Fixed;
use crate::engine::{Needed, Summed};
use crate::releases::plan::{noise_fixed, require_rows};
use crate::releases::{Failure, Knobs, Planned, Price, ReleaseError, Snapshot};
use crate::snapshots::{Columns, Pass, chunked};
use rayon::prelude::*;

/// Most values (rows × k) one release may supply: 128 MiB as f64.
pub const MAX_VALUES: usize = 16 << 20;
/// Most features a supplied vector may have.
pub const MAX_K: usize = 4096;

/// Checked supplied rows: unique ids, one k, values in [0, 1].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Supplied {
    /// Row id → position.
    index: HashMap<String, usize>,
    /// Row-major, n × k.
    values: Vec<f64>,
    k: usize,
}

impl Supplied {
    /// Checks the rows as the analyst sent them, taking them over.
    pub fn parse(rows: Vec<SuppliedRow>) -> Result<Self, String> {
        let k = rows.first().map_or(0, |row| row.x.len());
        if k == 0 || k > MAX_K {
            return Err(format!(
                "supplied feature vectors must have 1 to {MAX_K} values (the first has {k}); \
                 omit `features` to use the stored ones"
            ));
        }
        if rows.len().saturating_mul(k) > MAX_VALUES {
            return Err(format!(
                "at most {MAX_VALUES} supplied values per release (got {} rows × {k})",
                rows.len()
            ));
        }
        let mut index = HashMap::with_capacity(rows.len());
        let mut values = Vec::with_capacity(rows.len() * k);
        for (position, row) in rows.into_iter().enumerate() {
            if row.x.len() != k {
                return Err(format!(
                    "supplied row {:?} has {} values; the first has {k}",
                    row.row_id,
                    row.x.len()
                ));
            }
            if let Some((j, value)) = row
                .x
                .iter()
                .enumerate()
                .find(|(_, value)| !(0.0..=1.0).contains(*value))
            {
                return Err(format!(
                    "supplied row {:?}: value {j} is {value}; every value must be a finite \
                     number in [0, 1]",
                    row.row_id
                ));
            }
            values.extend_from_slice(&row.x);
            match index.entry(row.row_id) {
                Entry::Occupied(taken) => {
                    return Err(format!("row id {:?} is supplied twice", taken.key()));
                }
                Entry::Vacant(free) => {
                    free.insert(position);
                }
            }
        }
        Ok(Supplied { index, values, k })
    }

    /// The number of supplied rows, N_s.
    pub fn rows(&self) -> usize {
        self.index.len()
    }

    /// The L2 sensitivity of [`Join::exact`]'s sums on `grid` (see the
    /// module docs and [`WalrGrid`]): the largest ‖u(φ(vᵢ))‖² over the
    /// supplied rows, exactly on the grid, as the vectors are public.
    pub fn sensitivity(&self, map: &FeatureMap, grid: &WalrGrid) -> f64 {
        let (mut v, mut units) = (vec![0.0; self.k], vec![0; self.k]);
        let reach = (0..self.rows())
            .map(|position| {
                grid.units(map, self.vector(position), &mut v, &mut units);
                units
                    .iter()
                    .map(|&u| u128::from(u.unsigned_abs()).pow(2))
                    .sum::<u128>()
            })
            .max()
            .unwrap_or(0);
        grid.sensitivity(Unit::Label, reach)
    }

    /// The supplied vectors' moments: public, as the vectors are.
    pub fn moments(&self) -> Moments {
        let n = self.rows() as f64;
        let (mut sums, mut squares) = (vec![0.0; self.k], vec![0.0; self.k]);
        for vector in self.values.chunks_exact(self.k) {
            for ((sum, square), &x) in sums.iter_mut().zip(&mut squares).zip(vector) {
                *sum += x;
                *square += x * x;
            }
        }
        Moments::of_sums(&sums, &squares, n, self.k)
            .expect("BUG: supplied rows have k values and at least one row")
    }

    /// Released numbers: k, plus the intercept term.
    pub fn dims(&self, intercept: bool) -> usize {
        self.k + usize::from(intercept)
    }

    fn vector(&self, position: usize) -> &[f64] {
        &self.values[position * self.k..(position + 1) * self.k]
    }

    /// Which supplied rows the dataset holds, from row ids alone.
    pub fn presence(self: &Arc<Self>) -> Presence {
        Presence {
            found: vec![false; self.rows()],
            supplied: self.clone(),
        }
    }

    /// A join of the stored rows' labels onto the supplied vectors, summed
    /// through `map` on `grid`.
    pub fn join(self: &Arc<Self>, map: &FeatureMap, grid: &WalrGrid) -> Join {
        Join {
            supplied: self.clone(),
            map: map.clone(),
            grid: grid.clone(),
            sums: vec![0; self.k],
            labels: 0,
            joined: 0,
        }
    }

    /// Where each supplied row is in `columns` (by supplied position),
    /// looked up on all cores.
    fn positions(&self, columns: &Columns) -> Vec<(usize, Option<usize>)> {
        self.index
            .par_iter()
            .map(|(id, &position)| (position, columns.position(id)))
            .collect()
    }
}

/// Marks the supplied row ids found among the stored ones.
#[derive(Debug)]
pub struct Presence {
    supplied: Arc<Supplied>,
    found: Vec<bool>,
}

impl Presence {
    pub fn add(&mut self, row_id: &str) {
        if let Some(&position) = self.supplied.index.get(row_id) {
            self.found[position] = true;
        }
    }

    /// Looks every supplied row id up in a snapshot held in memory.
    pub fn look_up(&mut self, columns: &Columns) {
        for (position, stored) in self.supplied.positions(columns) {
            self.found[position] = stored.is_some();
        }
    }

    /// The supplied row ids the dataset does not hold, as an error.
    pub fn check(self) -> Result<(), String> {
        let mut missing = self
            .supplied
            .index
            .iter()
            .filter(|&(_, &position)| !self.found[position])
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>();
        missing.sort_unstable();
        match missing.first() {
            None => Ok(()),
            Some(first) => Err(format!(
                "{} supplied row id(s) are not in the dataset, the first (in sort order) {first:?}",
                missing.len()
            )),
        }
    }
}

impl Pass for Presence {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        for row in 0..block.len() {
            self.add(block.id(row));
        }
        Ok(())
    }
}

/// The join of the stored rows' labels onto the supplied vectors:
/// Σ yᵢ·u(φ(vᵢ)) and Σ yᵢ over the stored rows whose ids were supplied (vᵢ
/// the supplied vector, yᵢ the stored label), exactly on the grid, and
/// how many rows joined. A summed pass that reads no stored feature, so
/// the engine runs it over files no snapshot holds.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct Join {
    supplied: Arc<Supplied>,
    map: FeatureMap,
    grid: WalrGrid,
    sums: Vec<i128>,
    labels: u64,
    joined: u64,
}

impl Join {
    /// The sums over `rows`, given as (supplied position, stored label).
    fn part(&self, rows: impl Iterator<Item = (usize, u8)>) -> (Vec<i128>, u64, u64) {
        let k = self.supplied.k;
        let mut v = vec![0.0; k];
        let mut sums = self.grid.sums();
        let (mut labels, mut joined) = (0, 0);
        for (position, label) in rows {
            let x = self.supplied.vector(position);
            self.grid.add(&self.map, (x, label), &mut v, &mut sums);
            labels += u64::from(label);
            joined += 1;
        }
        (sums.finish(), labels, joined)
    }

    fn absorb(&mut self, (sums, labels, joined): (Vec<i128>, u64, u64)) {
        for (sum, part) in self.sums.iter_mut().zip(sums) {
            *sum += part;
        }
        self.labels += labels;
        self.joined += joined;
    }

    /// Joins every supplied row to a snapshot held in memory, found by id
    /// (a binary search each, on all cores), not by a pass over its rows.
    pub fn look_up(&mut self, columns: &Columns) {
        let labels = columns.labels();
        let found: Vec<(usize, u8)> = self
            .supplied
            .positions(columns)
            .into_iter()
            .filter_map(|(position, stored)| stored.map(|row| (position, labels[row])))
            .collect();
        let parts = chunked(found.len(), |at| self.part(found[at].iter().copied()));
        for part in parts {
            self.absorb(part);
        }
    }

    /// The exact sums Σ yᵢ·u(φ(vᵢ)) and Σ yᵢ·A on the grid
    /// ([`WalrGrid::exact`]); an error unless every supplied row joined
    /// exactly once.
    pub fn exact(self) -> Result<Fixed, String> {
        let n = self.supplied.rows() as u64;
        if self.joined != n {
            return Err(format!("{} of {n} supplied rows joined", self.joined));
        }
        Ok(self.grid.exact(self.sums, self.labels, n))
    }
}

impl Pass for Join {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let labels = block.labels();
        let index = &self.supplied.index;
        let parts = block.chunks(|rows| {
            self.part(rows.filter_map(|row| {
                index
                    .get(block.id(row))
                    .map(|&position| (position, labels[row]))
            }))
        });
        for part in parts {
            self.absorb(part);
        }
        Ok(())
    }
}

/// The sums, then Σ yᵢ and the rows joined.
impl Summed for Join {
    const KIND: &'static str = "walr-supplied";

    /// The rows' ids and labels alone.
    fn needs(&self) -> Needed {
        Needed {
            labels: true,
            measures: false,
            features: false,
            ids: true,
            dimensions: false,
            people: false,
        }
    }

    fn sums(&self) -> Vec<i128> {
        let mut sums = self.sums.clone();
        sums.extend([i128::from(self.labels), i128::from(self.joined)]);
        sums
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        let [sums @ .., labels, joined] = sums else {
            return Err("no sums to add".to_owned());
        };
        if sums.len() != self.sums.len() {
            return Err(format!("{} sums for {}", sums.len(), self.sums.len()));
        }
        let count = |value: &i128| u64::try_from(*value).map_err(|_| "a negative count");
        self.absorb((sums.to_vec(), count(labels)?, count(joined)?));
        Ok(())
    }
}

/// A WALR release over supplied vectors, priced.
struct SuppliedWalr {
    price: Price,
    mechanism: Mechanism,
    intercept: bool,
    map: FeatureMap,
    fallback: Option<String>,
    grid: WalrGrid,
    rows: Arc<Supplied>,
}

/// Prices WALR over `rows` (unit `label` only), its map fitted to the
/// supplied vectors.
pub fn plan(
    dataset: &DatasetRecord,
    rows: Arc<Supplied>,
    params: &api::WalrParams,
    knobs: &Knobs,
) -> Result<Box<dyn Planned>, ReleaseError> {
    if dataset.privacy_unit != PrivacyUnit::Label {
        return Err(ReleaseError::Invalid(
            "supplied features need the privacy unit `label`: under `row` and `user`, which \
             row ids exist is private"
                .to_owned(),
        ));
    }
    knobs.approximate("walr")?;
    require_rows(dataset)?;
    // The supplied vectors' moments are always there: a request without
    // a map gets `auto`, never the fallback.
    let chosen = walr_map::choose(
        params.map,
        PrivacyUnit::Label,
        rows.k,
        Some(&rows.moments()),
    )
    .map_err(ReleaseError::Invalid)?;
    let sensitivity_of = |grid: &WalrGrid, map: &FeatureMap| rows.sensitivity(map, grid);
    let n = rows.rows() as u64;
    let map = walr::settled(chosen.map, params, knobs, n, sensitivity_of)?;
    let grid = walr::grid(&map, params.intercept)?;
    let sensitivity = sensitivity_of(&grid, &map);
    let calibrated = walr::mechanism(&grid, sensitivity, (n, 1.0 / n as f64), params, knobs)?;
    Ok(Box::new(SuppliedWalr {
        price: calibrated.price(sensitivity / n as f64, n),
        mechanism: calibrated.mechanism,
        intercept: params.intercept,
        map,
        fallback: chosen.fallback,
        grid,
        rows,
    }))
}

#[async_trait]
impl Planned for SuppliedWalr {
    fn price(&self) -> &Price {
        &self.price
    }

    async fn vet(&mut self, snapshot: &Snapshot) -> Result<(), ReleaseError> {
        let presence = match snapshot.held() {
            Some(columns) => {
                let mut presence = self.rows.presence();
                presence.look_up(&columns);
                presence
            }
            None => snapshot.scan_inputs(self.rows.presence()).await?,
        };
        presence.check().map_err(ReleaseError::Invalid)
    }

    async fn compute(self: Box<Self>, snapshot: Snapshot) -> Result<api::ReleaseResult, Failure> {
        let join = self.rows.join(&self.map, &self.grid);
        let joined = match snapshot.columns().await? {
            Some(columns) => {
                let span = tracing::Span::current();
                tokio::task::spawn_blocking(move || {
                    let _entered = span.enter();
                    let mut join = join;
                    join.look_up(&columns);
                    join
                })
                .await?
            }
            None => snapshot.sum(join).await?,
        };
        let exact = joined.exact().map_err(Failure::Corrupt)?;
        let noisy = noise_fixed(self.mechanism, exact).await?;
        let n = self.rows.rows() as f64;
        let mean = noisy.into_iter().map(|sum| sum / n).collect();
        Ok(api::ReleaseResult::Walr(walr::result(
            mean,
            self.intercept,
            self.map,
            self.fallback,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::releases::kinds::summed_in_parts;
    use crate::snapshots::{OwnedRow, Shape};

    fn row(id: &str, x: &[f64]) -> SuppliedRow {
        SuppliedRow {
            row_id: id.to_owned(),
            x: x.to_vec(),
        }
    }

    #[test]
    fn bad_supplied_rows_are_refused_with_the_reason() {
        let cases: [(Vec<SuppliedRow>, &str); 6] = [
            (vec![], "1 to 4096 values"),
            (vec![row("a", &[])], "1 to 4096 values"),
            (
                vec![row("a", &[0.5]), row("a", &[0.1])],
                "\"a\" is supplied twice",
            ),
            (
                vec![row("a", &[0.5, 0.1]), row("b", &[0.1])],
                "\"b\" has 1 values",
            ),
            (vec![row("a", &[1.5])], "value 0 is 1.5"),
            (vec![row("a", &[0.2, f64::NAN])], "value 1 is NaN"),
        ];
        for (rows, reason) in cases {
            let error = Supplied::parse(rows).unwrap_err();
            assert!(error.contains(reason), "{error} ≠ {reason}");
        }
    }

    #[test]
    fn the_join_sums_supplied_vectors_weighted_by_label() {
        let rows = vec![
            row("a", &[0.2, 1.0]),
            row("c", &[0.6, 0.0]),
            row("d", &[1.0, 1.0]),
        ];
        let supplied = Arc::new(Supplied::parse(rows).unwrap());
        // √(1 + 1 + 1) from row d, on the grid: exactly, as its units
        // are 2⁴⁰ each (the sum's sensitivity; the mean's is this over 3).
        let identity = FeatureMap::identity(2);
        let (with, without) = (
            walr::grid(&identity, true).unwrap(),
            walr::grid(&identity, false).unwrap(),
        );
        assert_eq!(
            supplied.sensitivity(&identity, &with),
            3f64.sqrt().next_up()
        );
        assert_eq!(
            supplied.sensitivity(&identity, &without),
            2f64.sqrt().next_up()
        );
        assert_eq!(supplied.dims(true), 3);
        let shape = Shape::of(&crate::domain::dataset::tests::record().schema);
        let rows = [("a", 1), ("b", 1), ("c", 0), ("d", 1)].map(|(id, label)| OwnedRow {
            id: id.to_owned(),
            features: vec![0.0, 0.0],
            label,
            measures: vec![0.0],
            dimensions: vec![0],
        });
        let stored = Columns::of_rows(shape, &rows);
        let mut join = supplied.join(&identity, &with);
        join.visit(&stored).unwrap();
        let exact = join.exact().unwrap();
        let one = 1i128 << 40;
        // 0.2 is not a multiple of 2⁻⁴⁰: its units are rounded, once.
        let fifth = (0.2 * 2f64.powi(40)).round() as i128;
        assert_eq!(
            exact,
            Fixed::normalised(vec![fifth + one, 2 * one, 2 * one])
        );
        // Looked up by id in memory, and summed in parts as the engine
        // does, the same integers.
        let mut looked_up = supplied.join(&identity, &with);
        looked_up.look_up(&stored);
        assert_eq!(looked_up.exact().unwrap(), exact);
        let parts: Vec<Columns> = rows
            .chunks(1)
            .map(|row| Columns::of_rows(shape, row))
            .collect();
        let fresh = supplied.join(&identity, &with);
        assert_eq!(summed_in_parts(&fresh, &parts).exact().unwrap(), exact);
        // A supplied row not stored is refused.
        let mut partial = supplied.join(&identity, &without);
        partial.visit(&Columns::of_rows(shape, &rows[..1])).unwrap();
        assert!(partial.exact().is_err());
    }

    #[test]
    fn presence_names_the_missing_row_ids_without_labels() {
        let supplied = Arc::new(
            Supplied::parse(vec![row("a", &[0.2]), row("c", &[0.6]), row("b", &[0.1])]).unwrap(),
        );
        let mut presence = supplied.presence();
        presence.add("a");
        presence.add("z");
        let error = presence.check().unwrap_err();
        assert!(
            error.contains("2 supplied row id(s)") && error.contains("\"b\""),
            "{error}"
        );
        let mut presence = supplied.presence();
        for id in ["a", "b", "c"] {
            presence.add(id);
        }
        assert!(presence.check().is_ok());
    }
}
