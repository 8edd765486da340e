//! Unit `user`: the rows a release reads, at most `max_rows_per_user` of
//! each person (and, for a grouped pass, at most `max_groups_per_user`
//! cells of `max_rows_per_group_per_user` rows), chosen by the keyed rank
//! of their ids ([`crate::dp::contribution`]). The in-memory form of the
//! engine's windows over the user column.

use rayon::prelude::*;

use super::Columns;
use crate::domain::dataset::Users;
use crate::dp::contribution::{Candidate, keep, keep_grouped};

impl Columns {
    /// The rows of this run a release under unit `user` reads, in stored
    /// order, or `together`, each person's together (people in increasing
    /// order of their fingerprint, each person's rows in stored order) for
    /// a pass over people ([`crate::engine::Summed::of_person`]), which
    /// costs a copy row by row: [`keep`]'s rows, or [`keep_grouped`]'s when the pass sums
    /// the cells of the dimensions `grouped_by` apart. Only on a run read
    /// with its ids and outcomes, of a dataset of the unit; only after a
    /// debit (it reads who owns each row).
    pub fn bounded(
        &self,
        users: &Users,
        grouped_by: &[usize],
        together: bool,
    ) -> Result<Columns, String> {
        if !(self.outcomes && self.shape.users && self.shape.ids) {
            return Err("bounding needs a run read with its ids and its people".to_owned());
        }
        if let Some(&missing) = grouped_by.iter().find(|&&j| j >= self.dimensions.len()) {
            return Err(format!(
                "bounding by dimension {missing} of a run without it"
            ));
        }
        let owners = self.users();
        let candidates: Vec<Candidate<i128, Vec<u32>, &str>> = (0..self.len())
            .into_par_iter()
            .map(|row| Candidate {
                user: owners[row],
                group: grouped_by
                    .iter()
                    .map(|&j| self.dimensions[j][row])
                    .collect(),
                row_rank: users.key.row_rank(self.id(row).as_bytes()),
                id: self.id(row),
            })
            .collect();
        let bounds = users.bounds;
        let per_cell = bounds.groups < bounds.rows || bounds.rows_per_group < bounds.rows;
        let kept = if grouped_by.is_empty() || !per_cell {
            keep(&candidates, bounds.rows)
        } else {
            keep_grouped(&candidates, bounds)
        };
        let mut order: Vec<usize> = (0..self.len()).filter(|&row| kept[row]).collect();
        if together {
            order.par_sort_unstable_by_key(|&row| (owners[row], row));
        }
        let mut bounded = Columns::builder(self.shape, true, order.len());
        // Consecutive kept rows are copied as one range.
        let mut from = 0;
        for at in 1..=order.len() {
            if at == order.len() || order[at] != order[at - 1] + 1 {
                bounded.extend(self, order[from]..order[at - 1] + 1);
                from = at;
            }
        }
        Ok(bounded.finish())
    }
}
