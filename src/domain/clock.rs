//! The service's one clock. Timestamps enter the ledger's hash chain, so a
//! clock that cannot be written is an error, never a default.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Why the current time could not be written down.
#[derive(Debug, thiserror::Error)]
#[error("the system clock cannot be written as RFC 3339: {0}")]
pub struct ClockError(#[from] time::error::Format);

/// Now, in UTC.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Now as RFC 3339 text, the form every stored timestamp takes.
pub fn timestamp() -> Result<String, ClockError> {
    Ok(now().format(&Rfc3339)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_and_parse_back() {
        let text = timestamp().unwrap();
        let parsed = OffsetDateTime::parse(&text, &Rfc3339).unwrap();
        assert!(text.ends_with('Z'), "{text}");
        assert!((now() - parsed).whole_seconds().abs() < 5);
    }
}
