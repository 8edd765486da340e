//! Row ids checked for uniqueness in 24 bytes a row, however long they are:
//! an upload of 10⁸ rows holds 2.4 GB here where a table of the ids' text
//! held 4–5 GB.
//!
//! Each id is kept as its 128-bit SipHash-1-3 fingerprint under a key drawn
//! from the OS once a process and never shown, beside the line it came on;
//! the fingerprints are sorted once, at the end. Equal ids always have equal
//! fingerprints, so no duplicate is ever let through. Two different ids
//! share one with probability 2⁻¹²⁸ under a key nobody knows (they cannot
//! be chosen to collide), so n ids refuse a valid upload with probability
//! below n²·2⁻¹²⁹: 1.5·10⁻²³ at n = 10⁸, 1.5·10⁻¹⁹ at 10¹⁰.

use std::hash::Hasher;
use std::sync::LazyLock;

use dpgate_api_types::LineError;
use rand::TryRng;
use rayon::slice::ParallelSliceMut;
use siphasher::sip128::{Hasher128, SipHasher13};

/// The process's key: two words from the OS CSPRNG.
static KEY: LazyLock<(u64, u64)> = LazyLock::new(|| {
    let mut os = rand::rngs::SysRng;
    // getrandom(2) does not fail on a running Linux system; if it ever did,
    // a fixed key still finds every duplicate (it only lets ids be chosen
    // to collide, refusing an upload, never accepting one).
    let mut word = || os.try_next_u64().unwrap_or(0x0123_4567_89ab_cdef);
    (word(), word())
});

/// A row id's fingerprint.
pub fn fingerprint(id: &str) -> u128 {
    let mut hasher = SipHasher13::new_with_keys(KEY.0, KEY.1);
    hasher.write(id.as_bytes());
    hasher.finish128().as_u128()
}

/// One row: its id's fingerprint (as two words, so that an entry takes 24
/// bytes, not the 32 a `u128`'s alignment would make it) and its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    high: u64,
    low: u64,
    line: u64,
}

impl Entry {
    fn fingerprint(&self) -> u128 {
        (u128::from(self.high) << 64) | u128::from(self.low)
    }
}

/// The row ids of an upload, by fingerprint.
#[derive(Debug, Default)]
pub struct RowIds {
    entries: Vec<Entry>,
}

impl RowIds {
    /// Room for `rows` ids.
    pub fn with_capacity(rows: usize) -> Self {
        RowIds {
            entries: Vec::with_capacity(rows),
        }
    }

    /// Adds the row on `line` whose id has fingerprint `fingerprint`.
    pub fn push(&mut self, fingerprint: u128, line: u64) {
        self.entries.push(Entry {
            high: (fingerprint >> 64) as u64,
            low: fingerprint as u64,
            line,
        });
    }

    /// Sorts by fingerprint (then line); a sorted list is found sorted in
    /// one linear scan.
    fn sort(&mut self) {
        self.entries.par_sort_unstable();
    }

    /// Every row whose id an earlier line had too, naming that line with
    /// `naming`: the first `most` by line.
    pub fn repeated(&mut self, most: usize, naming: &dyn Fn(u64) -> String) -> Vec<LineError> {
        self.sort();
        let mut repeats: Vec<LineError> = self
            .entries
            .chunk_by(|a, b| a.fingerprint() == b.fingerprint())
            .filter(|same| same.len() > 1)
            .flat_map(|same| {
                let first = naming(same[0].line);
                same[1..].iter().map(move |entry| {
                    let reason = format!("row_id repeats the row_id of {first}");
                    LineError::new(entry.line, reason)
                })
            })
            .collect();
        first_by_line(&mut repeats, most);
        repeats
    }

    /// Every row whose id is in `stored` (sorted fingerprints): the first
    /// `most` by line.
    pub fn stored(&mut self, stored: &[u128], most: usize) -> Vec<LineError> {
        self.sort();
        let mut found = Vec::new();
        let mut others = stored.iter().peekable();
        for entry in &self.entries {
            let fingerprint = entry.fingerprint();
            while others.next_if(|other| **other < fingerprint).is_some() {}
            if others.peek() == Some(&&fingerprint) {
                found.push(LineError::new(
                    entry.line,
                    "row_id is already stored".to_owned(),
                ));
            }
        }
        first_by_line(&mut found, most);
        found
    }
}

fn first_by_line(errors: &mut Vec<LineError>, most: usize) {
    errors.sort_by_key(|error| error.line);
    errors.truncate(most);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(rows: &[&str]) -> RowIds {
        let mut ids = RowIds::default();
        for (at, id) in rows.iter().enumerate() {
            ids.push(fingerprint(id), at as u64 + 1);
        }
        ids
    }

    #[test]
    fn repeats_name_the_line_and_the_first() {
        let naming = |line| format!("line {line}");
        let mut rows = ids(&["a", "b", "a", "c", "b", "a"]);
        let repeats = rows.repeated(10, &naming);
        let found: Vec<(u64, &str)> = repeats
            .iter()
            .map(|error| (error.line, error.reason.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (3, "row_id repeats the row_id of line 1"),
                (5, "row_id repeats the row_id of line 2"),
                (6, "row_id repeats the row_id of line 1"),
            ]
        );
        assert_eq!(rows.repeated(2, &naming).len(), 2);
        assert!(ids(&["a", "b", "c"]).repeated(10, &naming).is_empty());
    }

    #[test]
    fn stored_ids_are_found_by_merging() {
        let mut stored: Vec<u128> = ["x", "b", "y"].iter().map(|id| fingerprint(id)).collect();
        stored.sort_unstable();
        let found = ids(&["a", "b", "c", "y"]).stored(&stored, 10);
        let lines: Vec<u64> = found.iter().map(|error| error.line).collect();
        assert_eq!(lines, [2, 4]);
        assert!(ids(&["a"]).stored(&[], 10).is_empty());
    }

    #[test]
    fn fingerprints_tell_ids_apart() {
        assert_eq!(fingerprint("r1"), fingerprint("r1"));
        assert_ne!(fingerprint("r1"), fingerprint("r10"));
        assert_ne!(fingerprint(""), fingerprint("\0"));
    }
}
