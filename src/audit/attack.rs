//! The distinguishing tests of the audit: each turns a released vector
//! into one score, larger when the release looks like it came from D₁.
//!
//! Both are fitted on trials set aside for it (never those counted): the
//! centres μ₀, μ₁ of the two sides' releases and their pooled covariance
//! Σ. Fitting them, rather than deriving them from the mechanism's own
//! description, keeps the audit blind to what it checks: a sensitivity
//! too small or a σ miscalibrated shows up in the releases themselves.

use ndarray::{Array1, Array2, ArrayView1};

/// Which test a release kind is attacked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// The projection onto Σ⁻¹(μ₁ − μ₀) (Fisher's discriminant): the
    /// likelihood-ratio test, so the most powerful one, between two
    /// Gaussians of one covariance, and for a scalar release a threshold
    /// on the value itself, which is also the most powerful test between
    /// two shifted Laplace distributions.
    Linear,
    /// ‖v − μ₀‖ − ‖v − μ₁‖ in the norm of Σ⁻¹: the likelihood-ratio test
    /// between two shifted norm-Gamma distributions (density ∝
    /// exp(−ε‖z‖/Δ)), which are isotropic in the space the noise is drawn
    /// in; Σ⁻¹ undoes the public linear map from there to the release.
    Radial,
}

impl Attack {
    /// How reports name it.
    pub fn name(self) -> &'static str {
        match self {
            Attack::Linear => "linear (Fisher projection)",
            Attack::Radial => "radial (norm likelihood ratio)",
        }
    }
}

/// A test fitted to the set-aside releases.
#[derive(Debug, Clone)]
pub struct Fitted {
    attack: Attack,
    null: Array1<f64>,
    alternative: Array1<f64>,
    /// The Cholesky factor of the pooled covariance (lower triangle).
    factor: Array2<f64>,
    /// Σ⁻¹(μ₁ − μ₀), for [`Attack::Linear`].
    direction: Array1<f64>,
}

/// Ridge added to the covariance, relative to its largest diagonal entry:
/// a coordinate that never varies (a weight a learner never moves) must
/// not make the factor singular.
const RIDGE: f64 = 1e-9;

impl Fitted {
    /// Fits `attack` to releases on D₀ (`null`) and D₁ (`alternative`),
    /// every one of the same length; `None` if there are fewer than two a
    /// side or none has a coordinate.
    pub fn new(attack: Attack, null: &[Vec<f64>], alternative: &[Vec<f64>]) -> Option<Fitted> {
        let dims = null.first()?.len();
        if dims == 0 || null.len() < 2 || alternative.len() < 2 {
            return None;
        }
        let (mu0, mu1) = (mean(null, dims), mean(alternative, dims));
        let mut covariance = scatter(null, &mu0) + scatter(alternative, &mu1);
        covariance /= (null.len() + alternative.len() - 2) as f64;
        let largest = covariance.diag().iter().copied().fold(0.0, f64::max);
        let ridge = if largest > 0.0 { largest * RIDGE } else { 1.0 };
        for i in 0..dims {
            covariance[(i, i)] += ridge;
        }
        dpgate_learn::cholesky_in_place(&mut covariance).ok()?;
        let direction = dpgate_learn::cholesky_solve(&covariance, &(&mu1 - &mu0));
        Some(Fitted {
            attack,
            null: mu0,
            alternative: mu1,
            factor: covariance,
            direction,
        })
    }

    /// The score of one release (larger: more like D₁).
    pub fn score(&self, release: &[f64]) -> f64 {
        let release = ArrayView1::from(release);
        match self.attack {
            Attack::Linear => self.direction.dot(&release),
            Attack::Radial => {
                self.distance(release, &self.null) - self.distance(release, &self.alternative)
            }
        }
    }

    /// ‖v − centre‖ in the norm of Σ⁻¹.
    fn distance(&self, release: ArrayView1<f64>, centre: &Array1<f64>) -> f64 {
        let offset = &release - centre;
        let solved = dpgate_learn::cholesky_solve(&self.factor, &offset);
        offset.dot(&solved).max(0.0).sqrt()
    }
}

fn mean(releases: &[Vec<f64>], dims: usize) -> Array1<f64> {
    let mut sum = Array1::zeros(dims);
    for release in releases {
        sum += &ArrayView1::from(release.as_slice());
    }
    sum / releases.len() as f64
}

/// Σ (v − μ)(v − μ)ᵀ.
fn scatter(releases: &[Vec<f64>], centre: &Array1<f64>) -> Array2<f64> {
    let dims = centre.len();
    let mut sum = Array2::zeros((dims, dims));
    for release in releases {
        let offset = &ArrayView1::from(release.as_slice()) - centre;
        for i in 0..dims {
            for j in 0..dims {
                sum[(i, j)] += offset[i] * offset[j];
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linear_test_scores_along_the_shift_in_the_noise_metric() {
        // Two coordinates of unit and of 10× the spread, means apart on
        // the first only: the direction weights the first coordinate.
        let null = vec![
            vec![-1.0, -10.0],
            vec![1.0, 10.0],
            vec![-1.0, 10.0],
            vec![1.0, -10.0],
        ];
        let alternative: Vec<Vec<f64>> = null.iter().map(|v| vec![v[0] + 2.0, v[1]]).collect();
        let fitted = Fitted::new(Attack::Linear, &null, &alternative).unwrap();
        let (at_null, at_alt) = (fitted.score(&[0.0, 0.0]), fitted.score(&[2.0, 0.0]));
        assert!(at_alt > at_null);
        // Moving along the noisy second coordinate changes nothing.
        assert!((fitted.score(&[0.0, 10.0]) - at_null).abs() < 1e-6);
    }

    #[test]
    fn the_radial_test_is_positive_nearer_the_alternative_and_odd_about_the_midpoint() {
        let null = vec![
            vec![-1.0, -1.0],
            vec![1.0, 1.0],
            vec![-1.0, 1.0],
            vec![1.0, -1.0],
        ];
        let alternative: Vec<Vec<f64>> = null.iter().map(|v| vec![v[0] + 4.0, v[1]]).collect();
        let fitted = Fitted::new(Attack::Radial, &null, &alternative).unwrap();
        assert!(fitted.score(&[4.0, 0.0]) > 0.0);
        assert!(fitted.score(&[0.0, 0.0]) < 0.0);
        let (left, right) = (fitted.score(&[1.0, 0.5]), fitted.score(&[3.0, 0.5]));
        assert!((left + right).abs() < 1e-9);
    }

    #[test]
    fn a_coordinate_that_never_varies_does_not_break_the_fit() {
        let null = vec![vec![0.0, 5.0], vec![1.0, 5.0]];
        let alternative = vec![vec![2.0, 5.0], vec![3.0, 5.0]];
        let fitted = Fitted::new(Attack::Linear, &null, &alternative).unwrap();
        assert!(fitted.score(&[3.0, 5.0]) > fitted.score(&[0.0, 5.0]));
        assert!(Fitted::new(Attack::Linear, &null[..1], &alternative).is_none());
        assert!(Fitted::new(Attack::Linear, &[vec![], vec![]], &[vec![], vec![]]).is_none());
    }
}
