//! Reference values computed independently in 50-digit arithmetic by
//! `testdata/make_reference.py` (mpmath, and Google's dp_accounting as an
//! outside cross-check). Tests compare the privacy math against them.

use serde::Deserialize;

#[derive(Deserialize)]
pub struct Reference {
    pub orders: Vec<f64>,
    pub analytic_gaussian: Vec<SigmaPoint>,
    pub classic_gaussian: Vec<SigmaPoint>,
    pub gaussian_epsilon: Vec<GaussianEpsilon>,
    pub rdp_to_epsilon: Vec<Conversion>,
    pub laplace_rdp: Vec<EpsilonRdp>,
    pub discrete_laplace_rdp: Vec<DiscreteLaplaceRdp>,
    pub pure_dp_rdp: Vec<EpsilonRdp>,
    pub dp_accounting: Vec<Accounting>,
}

#[derive(Deserialize)]
pub struct SigmaPoint {
    pub epsilon: f64,
    pub delta: f64,
    pub sensitivity: f64,
    pub sigma: f64,
}

#[derive(Deserialize)]
pub struct GaussianEpsilon {
    pub name: Option<String>,
    pub mu: f64,
    pub delta: f64,
    pub epsilon: f64,
}

#[derive(Deserialize)]
pub struct Conversion {
    pub name: String,
    pub rdp: Vec<f64>,
    pub delta: f64,
    pub epsilon: f64,
}

#[derive(Deserialize)]
pub struct EpsilonRdp {
    pub alpha: f64,
    pub epsilon: f64,
    pub rdp: f64,
}

#[derive(Deserialize)]
pub struct DiscreteLaplaceRdp {
    pub alpha: f64,
    pub scale: f64,
    pub shift: u32,
    pub rdp: f64,
}

#[derive(Deserialize)]
pub struct Accounting {
    pub name: String,
    pub delta: f64,
    pub epsilon: f64,
}

/// The parsed reference file.
pub fn load() -> Reference {
    serde_json::from_str(include_str!("testdata/reference.json"))
        .expect("testdata/reference.json is committed and well-formed")
}

/// The learners' reference values, from `testdata/make_learners.py`.
#[derive(Deserialize)]
pub struct Learners {
    pub dp_gd: Vec<DpGdPoint>,
    pub pure_epochs: Vec<PureEpochsPoint>,
    pub per_step: Vec<PerStepPoint>,
}

/// The largest per-step ε of T steps priced together at (ε, δ).
#[derive(Deserialize)]
pub struct PerStepPoint {
    /// `pure` (ε₀-DP steps), `bounded_range` (ε₀-BR steps) or `gaussian`
    /// (each calibrated to (ε₀, δ)).
    pub loss: String,
    pub epsilon: f64,
    pub delta: f64,
    pub steps: u32,
    pub per_step: f64,
}

/// E epochs of a pure ε_e-DP mechanism: what the ledger's accountants
/// make of them at δ.
#[derive(Deserialize)]
pub struct PureEpochsPoint {
    pub epoch_epsilon: f64,
    pub epochs: u32,
    pub delta: f64,
    pub basic: f64,
    pub rdp: f64,
}

/// DP-GD at one setting (unit `row`, with the intercept).
#[derive(Deserialize)]
pub struct DpGdPoint {
    pub epsilon: f64,
    pub delta: f64,
    pub n: u64,
    pub clip: f64,
    pub k: usize,
    pub steps: u32,
    pub sensitivity: f64,
    /// The per-step σ whose T-fold composition is (ε, δ)-DP, before
    /// lattice rounding.
    pub sigma: f64,
    /// The seed-000 slides' σ, and the ε it really delivers.
    pub sigma_slides: f64,
    pub epsilon_of_slides_sigma: f64,
}

/// The parsed learners' reference file.
pub fn learners() -> Learners {
    serde_json::from_str(include_str!("testdata/learners.json"))
        .expect("testdata/learners.json is committed and well-formed")
}

/// Asserts `actual` is within `relative` of `expected` (absolute near 0).
#[track_caller]
pub fn assert_close(actual: f64, expected: f64, relative: f64, what: &str) {
    let tolerance = relative * expected.abs().max(1e-300);
    assert!(
        (actual - expected).abs() <= tolerance,
        "{what}: got {actual:e}, expected {expected:e} (relative error {:e})",
        ((actual - expected) / expected).abs()
    );
}
