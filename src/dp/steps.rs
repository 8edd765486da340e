//! How much of a release's ε each of its T adaptive steps may spend, when
//! the steps are priced together: the largest per-step ε₀ whose T-fold
//! composition the ledger itself prices at no more than the request's
//! (ε, δ) (LEARNERS.md §3, step 1; §4, the per-call ε).
//!
//! The ledger's figure for a release is the smaller of its tight one (exact
//! Gaussian composition when every step is Gaussian, else the RDP curve
//! converted at δ; [`super::Composition`]) and the basic T·ε₀, so ε₀ is
//! found by bisection on exactly that function, over the ledger's 10⁻⁹
//! grid: a release priced with it never costs more than it claims. With
//! δ = 0 only the basic figure is a guarantee, and ε₀ = ⌊ε/T⌋.

use super::{Accountant, Budget, Charge, Composition, Delta, DpError, Epsilon, PrivacyLoss};

/// The largest ε₀ on the ledger's grid such that `steps` repetitions of
/// `each(ε₀)` cost at most `epsilon` at `delta`; an error if even the
/// ledger's smallest unit costs more.
pub fn per_step_epsilon(
    epsilon: Epsilon,
    delta: Delta,
    steps: u32,
    each: impl Fn(Epsilon) -> Result<PrivacyLoss, DpError>,
) -> Result<Epsilon, DpError> {
    if steps == 0 {
        return Err(DpError::NoSteps);
    }
    let split = Epsilon::from_units(epsilon.units() / u64::from(steps));
    if delta == Delta::ZERO {
        return if split == Epsilon::ZERO {
            Err(DpError::BelowResolution {
                name: "epsilon per step",
                value: epsilon.value() / f64::from(steps),
                resolution: 1e-9,
            })
        } else {
            Ok(split)
        };
    }
    let fits = |candidate: Epsilon| -> Result<bool, DpError> {
        Ok(cost(candidate, delta, steps, each(candidate)?) <= epsilon)
    };
    // ⌊ε/T⌋ always fits (its basic figure is at most ε); one step can never
    // spend more than ε.
    let (mut low, mut high) = (split.units(), epsilon.units() + 1);
    if low == 0 {
        if !fits(Epsilon::from_units(1))? {
            return Err(DpError::BelowResolution {
                name: "epsilon per step",
                value: epsilon.value() / f64::from(steps),
                resolution: 1e-9,
            });
        }
        low = 1;
    }
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits(Epsilon::from_units(middle))? {
            low = middle;
        } else {
            high = middle;
        }
    }
    Ok(Epsilon::from_units(low))
}

/// What the ledger's tight accountant makes of `steps` repetitions of
/// `each` (per-step ε₀) at `delta`, as a fresh ledger whose δ is the
/// release's would report it.
fn cost(each_epsilon: Epsilon, delta: Delta, steps: u32, each: PrivacyLoss) -> Epsilon {
    let charge = Charge {
        epsilon: Epsilon::from_units(each_epsilon.units().saturating_mul(u64::from(steps))),
        delta,
        loss: PrivacyLoss::Composition {
            count: steps,
            each: Box::new(each),
        },
    };
    let budget = Budget {
        epsilon: Epsilon::from_units(u64::MAX),
        delta,
    };
    Composition::of([&charge])
        .spent(Accountant::Rdp, &budget)
        .epsilon
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
