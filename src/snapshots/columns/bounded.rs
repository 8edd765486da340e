//! Unit `user`: the rows a release reads, at most `max_rows_per_user` of
//! each person (`dp::contribution`), chosen by the keyed rank of their
//! ids. The in-memory form of the engine's window over the user column.

use rayon::prelude::*;

use super::Columns;
use crate::domain::dataset::Users;

impl Columns {
    /// The rows of this run a release under unit `user` reads: of each
    /// person, the `users.bounds.rows` of smallest rank (ties by id), kept
    /// in stored order. Only on a run read with its ids and outcomes, of a
    /// dataset of the unit; only after a debit (it reads who owns each
    /// row).
    ///
    /// The rows kept are [`crate::dp::contribution::keep`]'s: a sort by
    /// (person, rank, id), then the first m of each person's run, which
    /// depends on each person's rows alone, not on their order.
    pub fn bounded(&self, users: &Users) -> Result<Columns, String> {
        if !(self.outcomes && self.shape.users && self.shape.ids) {
            return Err("bounding needs a run read with its ids and its people".to_owned());
        }
        let owners = self.users();
        let ranks: Vec<u64> = (0..self.len())
            .into_par_iter()
            .map(|row| users.key.row_rank(self.id(row).as_bytes()).0)
            .collect();
        let key = |row: usize| (owners[row], ranks[row], self.id(row));
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.par_sort_unstable_by(|&a, &b| key(a).cmp(&key(b)));
        let mut kept = vec![false; self.len()];
        let mut run = 0u32;
        for (position, &row) in order.iter().enumerate() {
            let same = position > 0 && owners[order[position - 1]] == owners[row];
            run = if same { run + 1 } else { 0 };
            kept[row] = run < users.bounds.rows;
        }
        let count = kept.iter().filter(|&&kept| kept).count();
        let mut bounded = Columns::builder(self.shape, true, count);
        // Consecutive kept rows are copied as one range.
        let mut start = None;
        for row in 0..=self.len() {
            match (start, kept.get(row).copied().unwrap_or(false)) {
                (None, true) => start = Some(row),
                (Some(from), false) => {
                    bounded.extend(self, from..row);
                    start = None;
                }
                _ => {}
            }
        }
        Ok(bounded.finish())
    }
}
