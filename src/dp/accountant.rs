//! The privacy accountant: what a ledger of releases has spent, and whether
//! one more release fits the budget.
//!
//! Each release is charged twice over, and both charges are kept:
//! - its nominal (ε, δ), summed exactly for basic composition (Σε, Σδ);
//! - its [`PrivacyLoss`], the mechanism and noise actually used, from which
//!   the tighter figures are derived: the exact composition when every
//!   release is Gaussian (they compose to one Gaussian mechanism with
//!   μ = √Σμᵢ², Dong, Roth & Su 2022, Corollary 3.3), otherwise the sum of RDP
//!   curves converted at the budget's δ.
//!
//! Every figure is a valid (ε, δ_total) guarantee on its own, so the `rdp`
//! accountant reports the smallest of them: it is never worse than `basic`.
//!
//! # Citations
//! - J. Dong, A. Roth, W. Su. Gaussian Differential Privacy. JRSS B 2022.
//! - D. Durfee, R. Rogers. Practical Differentially Private Top-k Selection
//!   with Pay-what-you-get Composition. NeurIPS 2019.
//! - M. Cesar, R. Rogers. Bounding, Concentrating, and Truncating: Unifying
//!   Privacy Loss Composition for Data Analytics. ALT 2021.
//! - I. Mironov. Rényi Differential Privacy. CSF 2017.

use serde::{Deserialize, Serialize};

use super::gaussian::gaussian_epsilon;
use super::rdp::RdpCurve;
use super::{Delta, DpError, Epsilon};

/// The noise one release actually used, enough to recompute its privacy
/// loss at any order or δ. Stored with every ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mechanism", rename_all = "snake_case")]
pub enum PrivacyLoss {
    /// (Discrete) Gaussian noise of standard deviation `sigma` on a query of
    /// L2 sensitivity `sensitivity`.
    Gaussian { sensitivity: f64, sigma: f64 },
    /// Discrete Laplace noise of scale `scale` on the lattice of spacing
    /// `grid`, for a query of L1 sensitivity `sensitivity` (both already
    /// including the lattice rounding).
    Laplace {
        sensitivity: f64,
        scale: f64,
        grid: f64,
    },
    /// Any other ε-DP mechanism, e.g. the norm-Gamma vector mechanism.
    PureEpsilon { epsilon: f64 },
    /// An ε-bounded-range mechanism (its privacy loss always lies in an
    /// interval of width ε), e.g. the exponential mechanism
    /// P(s) ∝ exp(−ε·α_s/(2Δ)) (Durfee & Rogers 2019). Also ε-DP, and
    /// ε²/8-zCDP (Cesar & Rogers 2021), which composes much better.
    BoundedRange { epsilon: f64 },
    /// `count` adaptive repetitions of one mechanism (T-step training).
    Composition { count: u32, each: Box<PrivacyLoss> },
    /// Different mechanisms one after the other, adaptively: the stages
    /// of one release (Frank-Wolfe's fit, then its debias stage).
    Sequence { parts: Vec<PrivacyLoss> },
    /// Mechanisms on disjoint parts of the rows, fixed by public facts
    /// alone (a row's index, under unit `row` or `label`, where a neighbour
    /// replaces a row in place): each row meets one part, so the release
    /// costs the most any part costs (parallel composition; McSherry,
    /// PINQ, SIGMOD 2009, Theorem 4). A later part may read an earlier
    /// part's output: for a row of that later part the earlier output is
    /// a fixed input. λ's private selection: the candidates on the
    /// training rows, then their pick on the held-out rows.
    Parallel { parts: Vec<PrivacyLoss> },
}

impl PrivacyLoss {
    /// Checks a description (for instance one read back from storage):
    /// every parameter finite and positive.
    pub fn validate(&self) -> Result<(), DpError> {
        let positive = |value: f64| value.is_finite() && value > 0.0;
        let valid = match self {
            PrivacyLoss::Gaussian { sensitivity, sigma } => {
                positive(*sensitivity) && positive(*sigma)
            }
            PrivacyLoss::Laplace {
                sensitivity,
                scale,
                grid,
            } => positive(*sensitivity) && positive(*scale) && positive(*grid),
            PrivacyLoss::PureEpsilon { epsilon } | PrivacyLoss::BoundedRange { epsilon } => {
                positive(*epsilon)
            }
            PrivacyLoss::Composition { count, each } => {
                return if *count == 0 {
                    Err(DpError::InvalidLoss("a composition repeats at least once"))
                } else {
                    each.validate()
                };
            }
            PrivacyLoss::Sequence { parts } | PrivacyLoss::Parallel { parts } => {
                if parts.is_empty() {
                    return Err(DpError::InvalidLoss("a composition has at least one part"));
                }
                return parts.iter().try_for_each(PrivacyLoss::validate);
            }
        };
        if valid {
            Ok(())
        } else {
            Err(DpError::InvalidLoss(
                "every parameter must be finite and positive",
            ))
        }
    }

    /// The RDP curve of this release.
    pub fn rdp(&self) -> RdpCurve {
        match self {
            PrivacyLoss::Gaussian { sensitivity, sigma } => RdpCurve::gaussian(sensitivity / sigma),
            PrivacyLoss::Laplace {
                sensitivity,
                scale,
                grid,
            } => RdpCurve::discrete_laplace(sensitivity / grid, scale / grid),
            PrivacyLoss::PureEpsilon { epsilon } => RdpCurve::pure(*epsilon),
            PrivacyLoss::BoundedRange { epsilon } => RdpCurve::bounded_range(*epsilon),
            PrivacyLoss::Composition { count, each } => each.rdp().repeated(*count),
            PrivacyLoss::Sequence { parts } => {
                let mut total = RdpCurve::zero();
                for part in parts {
                    total.add(&part.rdp());
                }
                total
            }
            PrivacyLoss::Parallel { parts } => {
                let mut most = RdpCurve::zero();
                for part in parts {
                    most.max(&part.rdp());
                }
                most
            }
        }
    }

    /// Σμᵢ² if the release is Gaussian noise only, else `None`.
    fn gaussian_mu_squared(&self) -> Option<f64> {
        match self {
            PrivacyLoss::Gaussian { sensitivity, sigma } => Some((sensitivity / sigma).powi(2)),
            PrivacyLoss::Composition { count, each } => each
                .gaussian_mu_squared()
                .map(|mu2| mu2 * f64::from(*count)),
            PrivacyLoss::Sequence { parts } => parts
                .iter()
                .map(PrivacyLoss::gaussian_mu_squared)
                .sum::<Option<f64>>(),
            PrivacyLoss::Parallel { parts } => parts
                .iter()
                .map(PrivacyLoss::gaussian_mu_squared)
                .try_fold(0.0, |most: f64, part| part.map(|mu2| most.max(mu2))),
            PrivacyLoss::Laplace { .. }
            | PrivacyLoss::PureEpsilon { .. }
            | PrivacyLoss::BoundedRange { .. } => None,
        }
    }
}

/// One debit of the ledger: the nominal (ε, δ) and the noise behind them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Charge {
    pub epsilon: Epsilon,
    pub delta: Delta,
    pub loss: PrivacyLoss,
}

/// A dataset's total budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub epsilon: Epsilon,
    /// Strictly positive: the δ at which the `rdp` accountant measures ε.
    pub delta: Delta,
}

impl Budget {
    /// Whether a ledger that spent `spent` stays within this budget.
    pub fn covers(&self, spent: &Spent) -> bool {
        spent.epsilon <= self.epsilon && spent.delta <= self.delta
    }
}

/// How a dataset composes its releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Accountant {
    /// Tightest of exact Gaussian composition, RDP and basic composition.
    #[default]
    Rdp,
    /// Σεᵢ ≤ ε_total and Σδᵢ ≤ δ_total.
    Basic,
}

/// What a ledger has spent, every figure rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// Under the dataset's accountant: the ledger is (epsilon, delta)-DP.
    pub epsilon: Epsilon,
    pub delta: Delta,
    /// Basic composition, always reported so the accountant's saving shows.
    pub epsilon_basic: Epsilon,
    pub delta_basic: Delta,
}

/// The running composition of a ledger: enough state to price the next
/// release without rereading the entries. Serialisable, so a store can keep
/// it beside the budget and update both in one transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    releases: u64,
    epsilon_basic: Epsilon,
    delta_basic: Delta,
    rdp: RdpCurve,
    /// Σμᵢ² while every release so far was Gaussian.
    gaussian_mu_squared: Option<f64>,
}

impl Default for Composition {
    fn default() -> Self {
        Composition {
            releases: 0,
            epsilon_basic: Epsilon::ZERO,
            delta_basic: Delta::ZERO,
            rdp: RdpCurve::zero(),
            gaussian_mu_squared: Some(0.0),
        }
    }
}

impl Composition {
    /// The composition of a whole ledger.
    pub fn of<'a>(charges: impl IntoIterator<Item = &'a Charge>) -> Self {
        let mut composition = Composition::default();
        for charge in charges {
            composition.push(charge);
        }
        composition
    }

    /// The number of releases composed.
    pub fn releases(&self) -> u64 {
        self.releases
    }

    /// Adds one release.
    pub fn push(&mut self, charge: &Charge) {
        self.releases += 1;
        self.epsilon_basic = self.epsilon_basic.saturating_add(charge.epsilon);
        self.delta_basic = self.delta_basic.saturating_add(charge.delta);
        self.rdp.add(&charge.loss.rdp());
        self.gaussian_mu_squared = self
            .gaussian_mu_squared
            .zip(charge.loss.gaussian_mu_squared())
            .map(|(total, more)| total + more);
    }

    /// What the ledger has spent, measured against `budget`'s δ.
    pub fn spent(&self, accountant: Accountant, budget: &Budget) -> Spent {
        let basic = Spent {
            epsilon: self.epsilon_basic,
            delta: self.delta_basic,
            epsilon_basic: self.epsilon_basic,
            delta_basic: self.delta_basic,
        };
        if accountant == Accountant::Basic || self.releases == 0 {
            return basic;
        }
        Spent {
            epsilon: self.tight_epsilon(budget.delta),
            delta: budget.delta,
            ..basic
        }
    }

    /// The ledger's privacy profile: the ε (rounded up) at which it is
    /// (ε, `delta`)-DP under `accountant`. `None` where the accountant
    /// claims nothing: below the basic Σδᵢ under `basic`, and at δ = 0
    /// with Gaussian releases under `rdp`. At the budget's δ it is
    /// [`Composition::spent`]'s ε.
    pub fn epsilon_at(&self, accountant: Accountant, delta: Delta) -> Option<Epsilon> {
        if self.releases == 0 {
            return Some(Epsilon::ZERO);
        }
        match accountant {
            Accountant::Basic => (self.delta_basic <= delta).then_some(self.epsilon_basic),
            Accountant::Rdp if delta == Delta::ZERO => {
                (self.delta_basic == Delta::ZERO).then_some(self.epsilon_basic)
            }
            Accountant::Rdp => Some(self.tight_epsilon(delta)),
        }
    }

    /// The tightest ε at `delta` > 0: exact Gaussian composition while every
    /// release was Gaussian, RDP otherwise, basic composition when its δ
    /// fits.
    fn tight_epsilon(&self, delta: Delta) -> Epsilon {
        let tight = match self.gaussian_mu_squared {
            Some(mu_squared) => gaussian_epsilon(mu_squared.sqrt(), delta.value()),
            None => self.rdp.epsilon(delta.value()),
        };
        let epsilon = Epsilon::ceil(tight);
        if self.delta_basic <= delta {
            epsilon.min(self.epsilon_basic)
        } else {
            epsilon
        }
    }

    /// Whether `charge` fits `budget` on top of this ledger; the decision
    /// carries what would then be spent.
    pub fn admits(&self, charge: &Charge, accountant: Accountant, budget: &Budget) -> Decision {
        let mut after = self.clone();
        after.push(charge);
        let spent = after.spent(accountant, budget);
        if budget.covers(&spent) {
            Decision::Admit(spent)
        } else {
            Decision::Refuse(spent)
        }
    }
}

/// The accountant's answer for one more release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// It fits; the ledger would then have spent this.
    Admit(Spent),
    /// It does not fit; this is what it would have spent.
    Refuse(Spent),
}

/// What a whole ledger has spent (a convenience over [`Composition`]).
pub fn spent<'a>(
    charges: impl IntoIterator<Item = &'a Charge>,
    accountant: Accountant,
    budget: &Budget,
) -> Spent {
    Composition::of(charges).spent(accountant, budget)
}

#[cfg(test)]
#[path = "accountant_tests.rs"]
mod tests;
