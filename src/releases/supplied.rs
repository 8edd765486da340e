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

use std::collections::HashMap;

use dpgate_api_types::SuppliedRow;

use crate::store::StoredRow;

/// Most values (rows × k) one release may supply.
pub const MAX_VALUES: usize = 64 << 20;
/// Most features a supplied vector may have.
pub const MAX_K: usize = 4096;

/// Checked supplied rows: unique ids, one k, values in [0, 1].
#[derive(Debug)]
pub struct Supplied<'a> {
    rows: &'a [SuppliedRow],
    index: HashMap<&'a str, usize>,
    k: usize,
}

impl<'a> Supplied<'a> {
    /// Checks the rows as the analyst sent them.
    pub fn parse(rows: &'a [SuppliedRow]) -> Result<Self, String> {
        let k = rows.first().map_or(0, |row| row.x.len());
        if k == 0 || k > MAX_K {
            return Err(format!(
                "supplied feature vectors must have 1 to {MAX_K} values (the first has {k})"
            ));
        }
        if rows.len().saturating_mul(k) > MAX_VALUES {
            return Err(format!(
                "at most {MAX_VALUES} supplied values per release (got {} rows × {k})",
                rows.len()
            ));
        }
        let mut index = HashMap::with_capacity(rows.len());
        for (position, row) in rows.iter().enumerate() {
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
            if index.insert(row.row_id.as_str(), position).is_some() {
                return Err(format!("row id {:?} is supplied twice", row.row_id));
            }
        }
        Ok(Supplied { rows, index, k })
    }

    /// The L2 sensitivity of [`Join::exact`] (see the module docs).
    pub fn sensitivity(&self, intercept: bool) -> f64 {
        let one = if intercept { 1.0 } else { 0.0 };
        let max_norm_squared = self
            .rows
            .iter()
            .map(|row| row.x.iter().map(|v| v * v).sum::<f64>())
            .fold(0.0, f64::max);
        (max_norm_squared + one).sqrt() / self.rows.len() as f64
    }

    /// Released numbers: k, plus the intercept term.
    pub fn dims(&self, intercept: bool) -> usize {
        self.k + usize::from(intercept)
    }

    /// A join of the stored rows' labels onto the supplied vectors.
    pub fn join(&self) -> Join<'_, 'a> {
        Join {
            supplied: self,
            label_sums: vec![0.0; self.k],
            label_sum: 0.0,
            found: vec![false; self.rows.len()],
        }
    }
}

/// The running Σ yᵢ·(1, vᵢ) over the stored rows seen so far.
#[derive(Debug)]
pub struct Join<'s, 'a> {
    supplied: &'s Supplied<'a>,
    label_sums: Vec<f64>,
    label_sum: f64,
    found: Vec<bool>,
}

impl Join<'_, '_> {
    /// Adds a stored row if it was supplied.
    pub fn add(&mut self, row: &StoredRow) {
        let Some(&position) = self.supplied.index.get(row.row_id.as_str()) else {
            return;
        };
        self.found[position] = true;
        if row.label == 1 {
            self.label_sum += 1.0;
            for (sum, value) in self
                .label_sums
                .iter_mut()
                .zip(&self.supplied.rows[position].x)
            {
                *sum += value;
            }
        }
    }

    /// (1/N_s)·Σ yᵢ·vᵢ, then (1/N_s)·Σ yᵢ if `intercept`; or the supplied
    /// row ids the dataset does not hold.
    pub fn exact(self, intercept: bool) -> Result<Vec<f64>, String> {
        let missing: Vec<&str> = self
            .found
            .iter()
            .zip(self.supplied.rows)
            .filter(|(found, _)| !**found)
            .map(|(_, row)| row.row_id.as_str())
            .collect();
        if let Some(first) = missing.first() {
            return Err(format!(
                "{} supplied row id(s) are not in the dataset, the first {first:?}",
                missing.len()
            ));
        }
        let n = self.supplied.rows.len() as f64;
        let mut values: Vec<f64> = self.label_sums.iter().map(|sum| sum / n).collect();
        if intercept {
            values.push(self.label_sum / n);
        }
        Ok(values)
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

    fn stored(id: &str, label: u8) -> StoredRow {
        StoredRow {
            row_id: id.to_owned(),
            label,
            features: vec![0.5],
            measures: vec![],
            dimensions: vec![],
        }
    }

    #[test]
    fn bad_supplied_rows_are_refused_with_the_reason() {
        let cases: [(&[SuppliedRow], &str); 6] = [
            (&[], "1 to 4096 values"),
            (&[row("a", &[])], "1 to 4096 values"),
            (
                &[row("a", &[0.5]), row("a", &[0.1])],
                "\"a\" is supplied twice",
            ),
            (
                &[row("a", &[0.5, 0.1]), row("b", &[0.1])],
                "\"b\" has 1 values",
            ),
            (&[row("a", &[1.5])], "value 0 is 1.5"),
            (&[row("a", &[0.2, f64::NAN])], "value 1 is NaN"),
        ];
        for (rows, reason) in cases {
            let error = Supplied::parse(rows).unwrap_err();
            assert!(error.contains(reason), "{error} ≠ {reason}");
        }
    }

    #[test]
    fn the_join_sums_supplied_vectors_of_positive_rows() {
        let rows = [
            row("a", &[0.2, 1.0]),
            row("c", &[0.6, 0.0]),
            row("d", &[1.0, 1.0]),
        ];
        let supplied = Supplied::parse(&rows).unwrap();
        // √(1 + 1 + 1) / 3 from row d.
        assert!((supplied.sensitivity(true) - 3f64.sqrt() / 3.0).abs() < 1e-15);
        assert!((supplied.sensitivity(false) - 2f64.sqrt() / 3.0).abs() < 1e-15);
        assert_eq!(supplied.dims(true), 3);
        let mut join = supplied.join();
        for (id, label) in [("a", 1), ("b", 1), ("c", 0), ("d", 1)] {
            join.add(&stored(id, label));
        }
        let exact = join.exact(true).unwrap();
        assert_eq!(exact, vec![1.2 / 3.0, 2.0 / 3.0, 2.0 / 3.0]);
        let mut partial = supplied.join();
        partial.add(&stored("a", 1));
        let error = partial.exact(false).unwrap_err();
        assert!(
            error.contains("2 supplied row id(s)") && error.contains("\"c\""),
            "{error}"
        );
    }
}
