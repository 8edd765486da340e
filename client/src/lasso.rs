//! Distributed ISTA for L1-regularised (Lasso) models across several data
//! holders, each releasing only noisy clipped gradients (seed 004 §3.3.2;
//! LEARNERS.md §4): the thesis's Algorithm 1 with its bugs fixed.
//!
//! Every step asks each holder for its mean gradient at the current θ (in
//! parallel), combines them into the **weighted mean** Σ_h (N_h/N)·g_h
//! (the thesis sums per-holder means, which is pooled ISTA at m times the
//! learning rate), and takes a proximal step with the real soft-threshold
//! soft(a, τ) = sign(a)·max(|a| − τ, 0) at τ = ηλ (the thesis's
//! sign(a)(|a| − λ) never gives an exact zero). The intercept is not
//! penalised. The number of steps is fixed: a stop on a private loss
//! would be an unaccounted release.

use std::future::Future;

/// A data holder: its public N, and its noisy mean gradient at θ for the
/// `call`th step (each call index is spent once).
pub trait Holder {
    fn n(&self) -> u64;

    fn gradient(
        &self,
        call: u32,
        theta: &[f64],
    ) -> impl Future<Output = anyhow::Result<Vec<f64>>> + Send;
}

/// ISTA's public settings.
#[derive(Debug, Clone, Copy)]
pub struct Ista {
    pub steps: u32,
    /// η; at most 1/L for the loss's smoothness L.
    pub learning_rate: f64,
    /// λ of λ‖w‖₁ (the intercept excluded).
    pub lambda: f64,
    /// Whether θ₀ is an intercept (left unpenalised).
    pub fit_intercept: bool,
}

/// sign(a)·max(|a| − τ, 0).
pub fn soft_threshold(a: f64, tau: f64) -> f64 {
    if a.abs() <= tau {
        0.0
    } else {
        a - tau.copysign(a)
    }
}

/// Σ_h (N_h/N)·g_h: the pooled data's mean gradient, had the holders'
/// rows been one dataset.
pub fn weighted_mean(gradients: &[Vec<f64>], sizes: &[u64]) -> Vec<f64> {
    let total: u64 = sizes.iter().sum();
    let mut mean = vec![0.0; gradients.first().map_or(0, Vec::len)];
    for (gradient, &size) in gradients.iter().zip(sizes) {
        let weight = size as f64 / total as f64;
        for (slot, value) in mean.iter_mut().zip(gradient) {
            *slot += weight * value;
        }
    }
    mean
}

impl Ista {
    /// One proximal step from θ along the combined gradient `g`.
    pub fn step(&self, theta: &mut [f64], g: &[f64]) {
        let tau = self.learning_rate * self.lambda;
        for (index, (weight, gradient)) in theta.iter_mut().zip(g).enumerate() {
            let moved = *weight - self.learning_rate * gradient;
            *weight = if index == 0 && self.fit_intercept {
                moved
            } else {
                soft_threshold(moved, tau)
            };
        }
    }

    /// `steps` steps from θ = 0 (of `dims` coordinates) over `holders`;
    /// `progress` hears of each step done.
    pub async fn run<H: Holder + Sync>(
        &self,
        holders: &[H],
        dims: usize,
        mut progress: impl FnMut(u32),
    ) -> anyhow::Result<Vec<f64>> {
        let sizes: Vec<u64> = holders.iter().map(Holder::n).collect();
        let mut theta = vec![0.0; dims];
        for call in 0..self.steps {
            let gradients = futures_util::future::try_join_all(
                holders.iter().map(|holder| holder.gradient(call, &theta)),
            )
            .await?;
            for gradient in &gradients {
                anyhow::ensure!(
                    gradient.len() == dims,
                    "a holder returned {} gradient values for {dims} coordinates",
                    gradient.len()
                );
            }
            self.step(&mut theta, &weighted_mean(&gradients, &sizes));
            progress(call + 1);
        }
        Ok(theta)
    }
}

#[cfg(test)]
#[path = "lasso_tests.rs"]
mod tests;
