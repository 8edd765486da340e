//! A release request's identity for idempotent replays, and the JSON kept
//! with it for audit.

use dpgate_api_types as api;
use sha2::{Digest, Sha256};

/// Feeds serialised JSON straight into a hash, so that a large request is
/// never held as text.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The request's identity for idempotent replays (SHA-256 of its canonical
/// JSON, supplied vectors included) and the JSON kept with it for audit
/// (supplied vectors replaced by their number).
pub(super) fn fingerprint(
    request: &api::ReleaseRequest,
) -> Result<(String, String), serde_json::Error> {
    let mut hasher = HashWriter(Sha256::new());
    serde_json::to_writer(&mut hasher, request)?;
    let hash = hex::encode(hasher.0.finalize());
    let audit = match &request.params {
        api::ReleaseParams::Walr(
            walr @ api::WalrParams {
                features: Some(rows),
                ..
            },
        ) => {
            let mut audit = serde_json::to_value(api::ReleaseRequest {
                params: api::ReleaseParams::Walr(api::WalrParams {
                    features: None,
                    ..walr.clone()
                }),
                ..*request
            })?;
            audit["supplied_rows"] = rows.len().into();
            audit.to_string()
        }
        _ => serde_json::to_string(request)?,
    };
    Ok((hash, audit))
}
