//! A stored block of the `row_blocks` table (`crate::store::blocks`)
//! checked against the dataset's shape, so that decoding it is a copy of
//! its bytes, not a parse of each row.

use super::Shape;
use crate::store::blocks::{BLOCK_ROWS, RawBlock};

/// A block checked against its shape: every column holds `rows` rows,
/// every id is non-empty UTF-8, every label 0 or 1.
#[derive(Debug)]
pub struct Stored<'a> {
    pub rows: usize,
    pub ids: &'a str,
    id_ends: &'a [u8],
    pub labels: &'a [u8],
    pub features: &'a [u8],
    pub measures: &'a [u8],
    pub dimensions: &'a [u8],
}

impl<'a> Stored<'a> {
    /// Checks `raw` holds rows of `shape`, with the outcomes if `outcomes`.
    pub fn check(raw: RawBlock<'a>, shape: Shape, outcomes: bool) -> Result<Stored<'a>, String> {
        let rows = usize::try_from(raw.rows)
            .ok()
            .filter(|&rows| rows <= BLOCK_ROWS)
            .ok_or_else(|| format!("a block of {} rows", raw.rows))?;
        let sized = |what: &str, bytes: &[u8], width: usize| {
            if bytes.len() == rows * width {
                Ok(())
            } else {
                Err(format!(
                    "a block of {rows} rows has {} bytes of {what}, not {}",
                    bytes.len(),
                    rows * width
                ))
            }
        };
        sized("id ends", raw.id_ends, 4)?;
        sized("features", raw.features, 4 * shape.features)?;
        sized("dimensions", raw.dimensions, 4 * shape.dimensions)?;
        if outcomes {
            sized("labels", raw.labels, 1)?;
            sized("measures", raw.measures, 8 * shape.measures)?;
            if raw.labels.iter().any(|&label| label > 1) {
                return Err("a stored label is neither 0 nor 1".to_owned());
            }
        }
        let ids = std::str::from_utf8(raw.ids).map_err(|error| format!("stored ids: {error}"))?;
        let stored = Stored {
            rows,
            ids,
            id_ends: raw.id_ends,
            labels: if outcomes { raw.labels } else { &[] },
            features: raw.features,
            measures: if outcomes { raw.measures } else { &[] },
            dimensions: raw.dimensions,
        };
        let mut start = 0;
        for row in 0..rows {
            let end = stored.id_end(row);
            if end <= start || end > ids.len() || !ids.is_char_boundary(end) {
                return Err(format!("stored id {row} of a block ends at {end}"));
            }
            start = end;
        }
        if start != ids.len() {
            return Err("a block's ids run past their last end".to_owned());
        }
        Ok(stored)
    }

    /// Where row `row`'s id ends in `ids`.
    pub fn id_end(&self, row: usize) -> usize {
        let word = &self.id_ends[4 * row..4 * row + 4];
        u32::from_le_bytes([word[0], word[1], word[2], word[3]]) as usize
    }
}
