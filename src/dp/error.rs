//! Errors of the privacy math: every bad parameter is refused with a reason,
//! never turned into a panic or a NaN.

/// Why a privacy parameter, sensitivity or release was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DpError {
    /// ε must be a finite number in (0, [`crate::dp::Epsilon::MAX`]].
    #[error("epsilon must be a finite number greater than 0 and at most {max} (got {value})")]
    InvalidEpsilon { value: f64, max: f64 },
    /// δ must be a finite number in [0, 1) (or (0, 1) where it is required).
    #[error("delta must be a finite number in {range} (got {value})")]
    InvalidDelta { value: f64, range: &'static str },
    /// The parameter is positive but smaller than the ledger can record.
    #[error("{name} = {value} is below the ledger's resolution of {resolution}")]
    BelowResolution {
        name: &'static str,
        value: f64,
        resolution: f64,
    },
    /// Contribution bounds under unit `user`: 1 ≤ rows per user ≤ max, and
    /// the per-group bounds between 1 and the rows per user.
    #[error(
        "contribution bounds need 1 <= max_rows_per_user <= {max}, and max_groups_per_user and \
         max_rows_per_group_per_user between 1 and max_rows_per_user (got {rows}, {groups}, \
         {rows_per_group})"
    )]
    InvalidContributionBounds {
        rows: u32,
        groups: u32,
        rows_per_group: u32,
        max: u32,
    },
    /// A target noise std must be finite and positive, and reachable with
    /// ε at most [`crate::dp::Epsilon::MAX`].
    #[error(
        "a target noise std must be a finite number greater than 0 that some epsilon up to \
         {max} reaches (got {target}; the least noise on offer is {least:e})"
    )]
    UnreachableTarget { target: f64, least: f64, max: f64 },
    /// Sensitivities are finite and strictly positive.
    #[error("sensitivity must be a finite number greater than 0 (got {0})")]
    InvalidSensitivity(f64),
    /// A release has at least one coordinate.
    #[error("a release must have at least one coordinate")]
    NoCoordinates,
    /// A composition of steps has at least one.
    #[error("a release must have at least one step")]
    NoSteps,
    /// So many coordinates that the lattice rounding would swamp the noise.
    #[error("{0} coordinates are more than one release can carry")]
    TooManyCoordinates(usize),
    /// The value handed to a mechanism does not match its calibration.
    #[error("expected {expected} values, got {actual}")]
    DimensionMismatch { expected: usize, actual: usize },
    /// A value to be released is NaN or infinite.
    #[error("the value to release at coordinate {0} is not finite")]
    NonFiniteValue(usize),
    /// The values a release may take are so large next to its noise that no
    /// lattice both holds them and resolves the noise (2^23 points per
    /// noise scale): refused before anything is spent.
    #[error(
        "values up to {range:e} are too large to release with noise of scale {noise:e} \
         (the declared bounds are too wide for this ε, or the noise too small for them)"
    )]
    RangeTooWide { range: f64, noise: f64 },
    /// A value too large for the release's lattice (|value| / spacing ≥ 2^62).
    #[error("the value to release at coordinate {0} is too large for the noise lattice")]
    ValueOutOfRange(usize),
    /// A value beyond the range its mechanism was calibrated for: the caller
    /// declared a range (or a sensitivity) its values do not respect.
    #[error("the value at coordinate {index} lies outside the declared range ±{range:e}")]
    OutsideRange { index: usize, range: f64 },
    /// A region on the fixed-point grid its bounds do not describe.
    #[error("invalid grid region: {0}")]
    InvalidRegion(&'static str),
    /// A regularisation strength λ is finite and strictly positive.
    #[error("lambda must be a finite number greater than 0 (got {0})")]
    InvalidRegulariser(f64),
    /// A learner needs at least one example.
    #[error("the dataset has no rows")]
    NoExamples,
    /// A stored privacy-loss description is malformed.
    #[error("invalid privacy-loss description: {0}")]
    InvalidLoss(&'static str),
}
