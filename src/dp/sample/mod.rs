//! Noise samplers: exact, and safe to publish.
//!
//! Every sampler here draws integers using only uniformly random bits and
//! exact integer arithmetic, so its output distribution is exactly the one
//! stated, and no low-order bit of a float can betray the value it was
//! added to (Mironov 2012). Releases draw from [`OsNoise`], the operating
//! system's CSPRNG; tests pass a seeded generator.
//!
//! # Citations
//! - I. Mironov. On Significance of the Least Significant Bits for
//!   Differential Privacy. CCS 2012.

mod cks20;
mod lazy;
mod norm_gamma;
mod os;

pub use cks20::{MAX_GAUSSIAN_SIGMA, discrete_gaussian, discrete_laplace};
pub(super) use cks20::{bernoulli_exp, uniform_below};
pub use norm_gamma::{norm_gamma_continuous, norm_gamma_lattice};
pub use os::OsNoise;

#[cfg(test)]
mod timing_tests;
