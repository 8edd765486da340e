//! Reading every row of a dataset for a release that needs more than the
//! running statistics (models, aggregates).

use super::ReleaseError;
use crate::dataset::DatasetRecord;
use crate::store::{Store, StoredRow};

/// Rows fetched per query: large enough that round trips do not dominate,
/// small enough to keep one page's memory modest.
const PAGE_ROWS: u32 = 10_000;

/// Calls `visit` on every row of the snapshot `dataset`, in row-id order.
/// False if rows arrived meanwhile, so that the release is planned again on
/// a fresh snapshot. A row failing `visit` is a fault of the stored data.
pub async fn scan(
    store: &dyn Store,
    dataset: &DatasetRecord,
    mut visit: impl FnMut(&StoredRow) -> Result<(), String>,
) -> Result<bool, ReleaseError> {
    let mut after: Option<String> = None;
    let mut seen = 0u64;
    loop {
        let page = store.rows(dataset.id, after.as_deref(), PAGE_ROWS).await?;
        for row in &page {
            visit(row).map_err(ReleaseError::Internal)?;
        }
        seen += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == PAGE_ROWS as usize => after = Some(last.row_id.clone()),
            _ => return Ok(seen == dataset.n_rows),
        }
    }
}
