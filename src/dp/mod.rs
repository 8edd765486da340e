//! The privacy math of dpgate: calibration, samplers and the accountant.
//!
//! Pure functions only: no I/O, no async, no SQL. Randomness comes in as a
//! [`rand::Rng`] argument ([`OsNoise`] in production, a seeded generator in
//! tests), so every mechanism is deterministic given its random bits.

mod accountant;
pub mod audit;
pub mod constant_time;
pub mod contribution;
pub mod erm;
pub mod erm_people;
mod error;
pub mod fixed;
mod gaussian;
mod mechanism;
mod rdp;
#[cfg(test)]
pub(crate) mod reference;
pub mod region;
mod sample;
mod select;
#[cfg(test)]
pub(crate) mod statistics;
mod steps;
mod target;
mod units;

pub use accountant::{
    Accountant, Budget, Charge, Composition, Decision, PrivacyLoss, Spent, spent,
};
pub use error::DpError;
pub use gaussian::{analytic_sigma, classic_sigma, gaussian_delta, gaussian_epsilon};
pub use mechanism::{Drawn, Mechanism};
pub use rdp::{ORDER_COUNT, ORDERS, RdpCurve};
pub use sample::{
    MAX_GAUSSIAN_SIGMA, OsNoise, discrete_gaussian, discrete_laplace, norm_gamma_continuous,
    norm_gamma_lattice,
};
pub use select::{OVERRUN, SelectionRule, Selector};
pub use steps::per_step_epsilon;
pub use target::smallest_epsilon;
pub use units::{Delta, Epsilon};
