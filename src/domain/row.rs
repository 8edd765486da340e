//! A row as an upload parses it and the data plane stores it.

/// One validated row, encoded for storage: scaled features as little-endian
/// f32, clamped measures as little-endian f64, dimension value indices as
/// little-endian u32, and under unit `user` its person's keyed
/// fingerprint (`dp::contribution::BoundingKey::user_fingerprint`; 0 under
/// the other units).
#[derive(Debug, Clone, PartialEq)]
pub struct RowRecord {
    /// Where it was in the upload, to name it if the store rejects it.
    pub line: u64,
    pub row_id: String,
    pub label: u8,
    pub features: Vec<u8>,
    pub measures: Vec<u8>,
    pub dimensions: Vec<u8>,
    pub user: i128,
}
