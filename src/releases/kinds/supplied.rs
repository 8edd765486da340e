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
//! intercept), computed from the supplied vectors alone.
//!
//! Before the debit (dry runs too) only the row ids are checked, from the
//! rows' public columns; the labels are joined after it, as Σ yᵢ·vᵢ with no
//! branch on a label.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use async_trait::async_trait;
use dpgate_api_types::{self as api, FeatureMap, PrivacyUnit, SuppliedRow, WalrMap};

use super::walr;
use super::walr_map::{self, Moments};
use crate::dataset::DatasetRecord;
use crate::dp::Mechanism;
use crate::releases::plan::{noise, require_rows};
use crate::releases::{Failure, Knobs, Pass, Planned, Price, ReleaseError, Snapshot};
use crate::snapshots::{Columns, chunked};
use rayon::prelude::*;

/// Most values (rows × k) one release may supply: 128 MiB as f64.
pub const MAX_VALUES: usize = 16 << 20;
/// Most features a supplied vector may have.
pub const MAX_K: usize = 4096;

/// Checked supplied rows: unique ids, one k, values in [0, 1].
#[derive(Debug)]
pub struct Supplied {
    /// Row id → position.
    index: HashMap<String, usize>,
    /// Row-major, n × k.
    values: Vec<f64>,
    k: usize,
    max_norm_squared: f64,
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
        let mut max_norm_squared = 0.0f64;
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
            max_norm_squared = max_norm_squared.max(row.x.iter().map(|v| v * v).sum());
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
        Ok(Supplied {
            index,
            values,
            k,
            max_norm_squared,
        })
    }

    /// The number of supplied rows, N_s.
    pub fn rows(&self) -> usize {
        self.index.len()
    }

    /// The L2 sensitivity of [`Join::exact`] on `map` (see the module
    /// docs): the largest ‖φ(vᵢ)‖ over the supplied rows, over N_s.
    pub fn sensitivity(&self, map: &FeatureMap, intercept: bool) -> f64 {
        let a = if intercept { map.intercept_weight } else { 0.0 };
        let reach_squared = if map.name == WalrMap::None {
            self.max_norm_squared
        } else {
            let mut v = vec![0.0; self.k];
            (0..self.rows())
                .map(|position| {
                    map.apply(self.vector(position), &mut v);
                    v.iter().map(|v| v * v).sum::<f64>()
                })
                .fold(0.0, f64::max)
        };
        (reach_squared + a * a).sqrt() / self.rows() as f64
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

    /// A join of the stored rows' labels onto the supplied vectors.
    pub fn join(self: &Arc<Self>) -> Join {
        Join {
            labels: vec![0; self.rows()],
            found: vec![false; self.rows()],
            joined: 0,
            supplied: self.clone(),
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

/// The stored labels of the supplied rows, by supplied position.
#[derive(Debug)]
pub struct Join {
    supplied: Arc<Supplied>,
    labels: Vec<u8>,
    found: Vec<bool>,
    joined: usize,
}

impl Join {
    /// Takes a stored row's label if its row was supplied.
    pub fn add(&mut self, row_id: &str, label: u8) {
        let Some(&position) = self.supplied.index.get(row_id) else {
            return;
        };
        self.labels[position] = label;
        if !self.found[position] {
            self.found[position] = true;
            self.joined += 1;
        }
    }

    /// Takes every supplied row's label from a snapshot held in memory.
    pub fn look_up(&mut self, columns: &Columns) {
        let labels = columns.labels();
        for (position, stored) in self.supplied.positions(columns) {
            if let Some(row) = stored {
                self.labels[position] = labels[row];
                self.found[position] = true;
                self.joined += 1;
            }
        }
    }

    /// (1/N_s)·Σ yᵢ·v(vᵢ), then (1/N_s)·Σ yᵢ·a if `intercept`, summed in
    /// supplied order (fixed chunks, on all cores, added in order); an
    /// error if not every supplied row was joined.
    pub fn exact(self, map: &FeatureMap, intercept: bool) -> Result<Vec<f64>, String> {
        let supplied = &self.supplied;
        let (n, k) = (supplied.rows(), supplied.k);
        if self.joined != n {
            return Err(format!("{} of {n} supplied rows joined", self.joined));
        }
        let parts = chunked(n, |positions| {
            let (mut sums, mut v) = (vec![0.0; k + 1], vec![0.0; k]);
            for position in positions {
                let label = f64::from(self.labels[position]);
                map.apply(supplied.vector(position), &mut v);
                for (sum, value) in sums.iter_mut().zip(&v) {
                    *sum += label * value;
                }
                sums[k] += label;
            }
            sums
        });
        let mut sums = vec![0.0; k + 1];
        for part in parts {
            for (sum, value) in sums.iter_mut().zip(part) {
                *sum += value;
            }
        }
        let n = n as f64;
        let mut values: Vec<f64> = sums[..k].iter().map(|sum| sum / n).collect();
        if intercept {
            values.push(sums[k] * map.intercept_weight / n);
        }
        Ok(values)
    }
}

impl Pass for Join {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let labels = block.labels();
        for (row, &label) in labels.iter().enumerate() {
            self.add(block.id(row), label);
        }
        Ok(())
    }
}

/// A WALR release over supplied vectors, priced.
struct SuppliedWalr {
    price: Price,
    mechanism: Mechanism,
    intercept: bool,
    map: FeatureMap,
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
    if dataset.privacy_unit == PrivacyUnit::Row {
        return Err(ReleaseError::Invalid(
            "supplied features need the privacy unit `label`: under `row`, which row ids exist \
             is private"
                .to_owned(),
        ));
    }
    knobs.approximate("walr")?;
    require_rows(dataset)?;
    let map = walr_map::choose(
        params.map,
        PrivacyUnit::Label,
        rows.k,
        Some(&rows.moments()),
    )
    .map_err(ReleaseError::Invalid)?;
    let sensitivity_of = |map: &FeatureMap| rows.sensitivity(map, params.intercept);
    let map = walr::settled(map, params, knobs, sensitivity_of)?;
    let sensitivity = sensitivity_of(&map);
    let calibrated = walr::mechanism(&map, sensitivity, params, knobs)?;
    Ok(Box::new(SuppliedWalr {
        price: calibrated.price(sensitivity, rows.rows() as u64),
        mechanism: calibrated.mechanism,
        intercept: params.intercept,
        map,
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
        let join = match snapshot.columns().await? {
            Some(columns) => {
                let mut join = self.rows.join();
                join.look_up(&columns);
                join
            }
            None => snapshot.scan(self.rows.join()).await?,
        };
        let (intercept, map) = (self.intercept, self.map.clone());
        let exact = tokio::task::spawn_blocking(move || join.exact(&map, intercept))
            .await?
            .map_err(Failure::Corrupt)?;
        let noisy = noise(self.mechanism, exact).await?;
        Ok(api::ReleaseResult::Walr(walr::result(
            noisy,
            self.intercept,
            self.map,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // √(1 + 1 + 1) / 3 from row d.
        let identity = FeatureMap::identity(2);
        assert!((supplied.sensitivity(&identity, true) - 3f64.sqrt() / 3.0).abs() < 1e-15);
        assert!((supplied.sensitivity(&identity, false) - 2f64.sqrt() / 3.0).abs() < 1e-15);
        assert_eq!(supplied.dims(true), 3);
        let mut join = supplied.join();
        for (id, label) in [("a", 1), ("b", 1), ("c", 0), ("d", 1)] {
            join.add(id, label);
        }
        let exact = join.exact(&identity, true).unwrap();
        assert_eq!(exact, vec![1.2 / 3.0, 2.0 / 3.0, 2.0 / 3.0]);
        let mut partial = supplied.join();
        partial.add("a", 1);
        assert!(partial.exact(&identity, false).is_err());
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
