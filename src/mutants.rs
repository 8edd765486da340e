//! Known faults for testing the privacy audit ([`crate::audit`]): a build
//! with the `mutants` feature can switch one on at run time, so that a
//! test can show the audit fails each one that is actually non-private.
//! Without the feature every [`active`] is the constant `false` and the
//! faults are compiled out; the feature refuses optimised builds, so no
//! release binary can carry them.

#[cfg(all(feature = "mutants", not(debug_assertions)))]
compile_error!("the `mutants` feature injects privacy faults: it is for test builds only");

/// A fault the audit must catch (or, where it is too small to be seen,
/// is documented as missed in docs/audit.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mutant {
    /// Every mechanism draws noise of half its calibrated scale.
    ScaleHalved = 1,
    /// WALR's sensitivity leaves the intercept's weight out of φ's norm.
    InterceptDropped = 2,
    /// Uploaded measures are stored unclamped to their declared bounds.
    ClampSkipped = 3,
    /// Mechanisms are calibrated to the declared sensitivity, without what
    /// rounding to the lattice can add.
    LatticeUninflated = 4,
}

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Switches `mutant` on for the whole process (`None`: the real code).
#[cfg(feature = "mutants")]
pub fn inject(mutant: Option<Mutant>) {
    ACTIVE.store(
        mutant.map_or(0, |mutant| mutant as u8),
        std::sync::atomic::Ordering::SeqCst,
    );
}

/// Whether `mutant` is switched on.
#[cfg(feature = "mutants")]
pub fn active(mutant: Mutant) -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::SeqCst) == mutant as u8
}

/// Never, without the `mutants` feature.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub const fn active(_mutant: Mutant) -> bool {
    false
}
