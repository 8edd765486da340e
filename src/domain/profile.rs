//! A ledger's privacy profile: the smallest ε at which what it composed is
//! (ε, δ)-DP, for each δ asked for.

use dpgate_api_types::{PrivacyProfile, ProfilePoint};

use crate::domain::dataset::accountant_kind;
use crate::dp::{Accountant, Composition, Delta};

/// Most δ one request may ask for.
pub const MAX_DELTAS: usize = 200;

/// The δ of a request: `text`'s, comma-separated, each in [0, 1) and at
/// most [`MAX_DELTAS`]; without, 10⁻¹² to 10⁻¹ by decades and `budget`'s.
pub fn deltas(text: Option<&str>, budget: Delta) -> Result<Vec<f64>, String> {
    let Some(text) = text else {
        return Ok((1..=12)
            .rev()
            .map(|decade| 10f64.powi(-decade))
            .chain([budget.value()])
            .collect());
    };
    let deltas: Vec<f64> = text
        .split(',')
        .map(|part| {
            part.trim()
                .parse::<f64>()
                .ok()
                .filter(|delta| (0.0..1.0).contains(delta))
                .ok_or_else(|| {
                    format!("deltas must be numbers in [0, 1), comma-separated (got {part:?})")
                })
        })
        .collect::<Result<_, _>>()?;
    if deltas.len() > MAX_DELTAS {
        return Err(format!(
            "at most {MAX_DELTAS} deltas (got {})",
            deltas.len()
        ));
    }
    Ok(deltas)
}

/// `composition`'s profile under `accountant` at each of `deltas`, for
/// `analyst`'s releases (the whole ledger's without).
pub fn profile(
    composition: &Composition,
    accountant: Accountant,
    analyst: Option<String>,
    deltas: &[f64],
) -> Result<PrivacyProfile, String> {
    let points = deltas
        .iter()
        .map(|&delta| {
            let exact = Delta::new(delta).map_err(|error| error.to_string())?;
            Ok(ProfilePoint {
                delta,
                epsilon: composition
                    .epsilon_at(accountant, exact)
                    .map(|epsilon| epsilon.value()),
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(PrivacyProfile {
        accountant: accountant_kind(accountant),
        analyst,
        releases: composition.releases(),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_default_to_decades_and_the_budget() {
        let delta = Delta::new(1e-6).unwrap();
        let all = deltas(None, delta).unwrap();
        assert_eq!(all.len(), 13);
        assert_eq!((all[0], all[11], all[12]), (1e-12, 1e-1, 1e-6));
        assert_eq!(deltas(Some(" 0.5,0"), delta).unwrap(), [0.5, 0.0]);
        for bad in ["1", "-0.1", "x", "0.1,,0.2"] {
            assert!(deltas(Some(bad), delta).is_err(), "{bad}");
        }
        let many = vec!["0.1"; MAX_DELTAS + 1].join(",");
        assert_eq!(
            deltas(Some(&many), delta).unwrap_err(),
            "at most 200 deltas (got 201)"
        );
    }

    #[test]
    fn nothing_composed_costs_nothing_at_any_delta() {
        let profile = profile(&Composition::default(), Accountant::Rdp, None, &[1e-6]).unwrap();
        assert_eq!(profile.releases, 0);
        assert_eq!(profile.points[0].epsilon, Some(0.0));
    }
}
