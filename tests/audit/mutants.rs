//! The audit catches known faults: built with the `mutants` feature
//! (`cargo test --features mutants --test audit_mutants`), each fault is
//! switched on in turn and the audit of the kind it breaks must FAIL, while
//! the real code, audited the same way, PASSes. One test, so the faults,
//! which are process-wide, never overlap.

// Tests may unwrap.
#![allow(clippy::unwrap_used)]

use dpgate::audit::{self, Case, Scratch, Settings};
use dpgate::mutants::{Mutant, inject};
use dpgate_api_types::PrivacyUnit;

/// Releases a side: enough for every caught fault to show at ε = 1, few
/// enough for CI (docs/audit.md gives the trials each needs).
const TRIALS: u64 = 100_000;

/// A correct, tight release fails with probability at most 1 − this; the
/// faults are caught by far more (docs/audit.md).
const CONFIDENCE: f64 = 1.0 - 1e-6;

fn case(kind: &str, variant: &str, unit: PrivacyUnit) -> Case {
    audit::cases::select(&[kind.to_owned()], &[unit])
        .unwrap()
        .into_iter()
        .find(|case| case.variant == variant)
        .unwrap()
}

async fn epsilon_lower(scratch: &Scratch, case: &Case) -> f64 {
    let settings = Settings {
        kinds: vec![],
        units: vec![],
        epsilon: 1.0,
        delta: 1e-5,
        trials: TRIALS,
        seed: 1,
        confidence: CONFIDENCE,
    };
    let finding = audit::audit(scratch, case, &settings, &|_| {})
        .await
        .unwrap();
    assert_eq!(finding.pass, finding.epsilon_lower <= 1.0);
    finding.epsilon_lower
}

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_fails_each_fault_that_is_non_private_and_passes_the_real_code() {
    dpgate::releases::pacing::skip_holds();
    let scratch = Scratch::open().await.unwrap();
    let laplace = case("aggregate", "sum, laplace", PrivacyUnit::Row);
    let walr = case("walr", "map none", PrivacyUnit::Label);
    let gaussian_sum = case("aggregate", "sum, gaussian", PrivacyUnit::Label);
    let faults = [
        (Some(Mutant::ScaleHalved), &laplace, true),
        (Some(Mutant::ScaleHalved), &walr, true),
        (Some(Mutant::InterceptDropped), &walr, true),
        (Some(Mutant::ClampSkipped), &gaussian_sum, true),
        // 2^-20 of the sensitivity: far below what any number of trials
        // could show (docs/audit.md).
        (Some(Mutant::LatticeUninflated), &laplace, false),
        (None, &laplace, false),
        (None, &walr, false),
        (None, &gaussian_sum, false),
    ];
    let mut seen = Vec::new();
    for (mutant, case, caught) in faults {
        inject(mutant);
        let bound = epsilon_lower(&scratch, case).await;
        inject(None);
        eprintln!(
            "{mutant:?} on {} ({}, {:?}): ε̂ = {bound:.3}",
            case.kind, case.variant, case.unit
        );
        seen.push((mutant, case.kind, bound, caught));
    }
    for (mutant, kind, bound, caught) in seen {
        assert_eq!(
            bound > 1.0,
            caught,
            "{mutant:?} on {kind}: ε̂ = {bound} (a fault {} be caught)",
            if caught { "must" } else { "cannot" }
        );
    }
}
