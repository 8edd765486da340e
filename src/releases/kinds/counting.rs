//! The rows' count as one more released sum: under unit `user` N is
//! private, so a learner that divides by it releases it with noise first,
//! as one more step of its composition ([`Counting`]).

use crate::dp::contribution::MAX_ROWS;
use crate::dp::fixed::{FRACTION_BITS, Fixed};
use crate::dp::{DpError, Epsilon, Mechanism, erm_people};
use crate::engine::{Needed, Summed};
use crate::snapshots::{Columns, Pass};

/// The rows a pass visits, `weight` grid units each: with a person
/// contributing at most m rows and `weight` at most Δ/m units, the count
/// moves by at most Δ when a person's rows are added or removed, the
/// sensitivity of the learner's other steps, so it is priced as one of
/// them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Counting {
    weight: i128,
    sums: [i128; 1],
}

impl Counting {
    /// No row yet, each row worth `weight` units.
    pub fn new(weight: i128) -> Counting {
        Counting { weight, sums: [0] }
    }

    /// The count as the exact sums of a release of `dims` coordinates (a
    /// learner's steps have d, and the count is priced as one of them):
    /// the rows' units in the first, 0 in the others.
    pub fn fixed(&self, dims: usize) -> Fixed {
        let mut units = vec![0; dims];
        units[0] = self.sums[0];
        Fixed::normalised(units)
    }

    /// The count of rows read back from a release of [`Counting::fixed`].
    pub fn rows(&self, released: &[f64]) -> f64 {
        released[0] / (self.weight as f64 * 2f64.powi(-FRACTION_BITS))
    }
}

/// The noisy count of a pure-ε release under unit `user` that divides by
/// it: Laplace noise on the kept rows (a person moves them by at most `m`)
/// at 1/100 of `epsilon` ([`erm_people::split_epsilon`]), and the ε left
/// for the rest.
pub fn laplace_count(epsilon: Epsilon, m: u32) -> Result<(Mechanism, Epsilon), DpError> {
    let (count, rest) = erm_people::split_epsilon(epsilon)?;
    let mechanism = Mechanism::laplace(count, f64::from(m), 1, MAX_ROWS as f64)?;
    Ok((mechanism, rest))
}

impl Pass for Counting {
    fn visit(&mut self, block: &Columns) -> Result<(), String> {
        let rows = i128::try_from(block.len()).map_err(|error| error.to_string())?;
        self.sums[0] += rows * self.weight;
        Ok(())
    }
}

impl Summed for Counting {
    const KIND: &'static str = "rows/counted";

    /// The people alone (the engine's function needs a column to count;
    /// under unit `user` the bounding reads them anyway).
    fn needs(&self) -> Needed {
        Needed {
            labels: false,
            measures: false,
            features: false,
            ids: false,
            dimensions: false,
            people: true,
        }
    }

    fn sums(&self) -> Vec<i128> {
        self.sums.to_vec()
    }

    fn add_sums(&mut self, sums: &[i128]) -> Result<(), String> {
        crate::engine::add_exact(&mut self.sums, sums)
    }
}
