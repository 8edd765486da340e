//! Calibrated mechanisms that release vectors safely.
//!
//! A release never adds a random float to the true value: floating-point
//! rounding of `value + noise` depends on `value`, and its low bits can give
//! the value away (Mironov 2012). Instead every release lives on a lattice
//! of spacing γ = 2^g:
//!
//! 1. each coordinate of the true value q is rounded to the nearest lattice
//!    point, an exact integer multiple n·γ (division by a power of two is
//!    exact);
//! 2. integer noise Y is drawn exactly ([`super::sample`]) and added in
//!    integer arithmetic;
//! 3. (n + Y)·γ is converted to a float, which is post-processing of the
//!    integer n + Y and cannot leak anything more.
//!
//! The rounding in step 1 is the lattice's privacy cost: neighbouring inputs
//! whose true values differ by ≤ Δ (L2) or ≤ Δ₁ (L1) round to lattice points
//! differing by ≤ Δ + γ·√k or ≤ Δ₁ + γ·k. Every mechanism is calibrated to
//! that inflated sensitivity, and it is what the ledger records. γ is chosen
//! so that the noise spans at least 2^23 lattice points and the rounding adds
//! at most 2^−20 (10⁻⁶) of the sensitivity, unless the sampler's integers
//! run out first (Gaussian noise above 2^30 points, for instance ε = 0.01 on
//! 10⁶ coordinates, where the inflation is still below 10⁻³).
//!
//! Every mechanism is also told the `range` of its query: the largest
//! magnitude any coordinate can take for any dataset in the declared domain,
//! a public fact. The lattice is made coarse enough that every value in the
//! range snaps to an index below 2^61, so a release can never fail on a
//! value that is too large; if that would leave fewer than 2^23 lattice
//! points per noise scale, the mechanism is refused up front
//! ([`DpError::RangeTooWide`]), before anything is spent.
//!
//! The discrete Gaussian on the lattice has exactly the RDP curve of the
//! continuous one (Canonne et al. 2020, Theorem 14). Its (ε, δ) profile
//! matches the continuous Gaussian's up to terms of order e^{−2π²s²} in the
//! noise scale s in lattice units (ibid.); with s ≥ 2^23 those terms are
//! below 10^(−10¹⁴), far below any δ the ledger can record, so the analytic
//! Gaussian calibration and the exact Gaussian composition apply.
//!
//! # Citations
//! - I. Mironov. On Significance of the Least Significant Bits for
//!   Differential Privacy. CCS 2012.
//! - C. Canonne, G. Kamath, T. Steinke. The Discrete Gaussian for
//!   Differential Privacy. NeurIPS 2020.

use rand::Rng;

use super::fixed::Fixed;
use super::gaussian::{analytic_sigma, check_sensitivity};
use super::sample::{MAX_GAUSSIAN_SIGMA, discrete_gaussian, discrete_laplace, norm_gamma_lattice};
use super::{Delta, DpError, Epsilon, PrivacyLoss};

/// log₂ of the fewest lattice points the noise scale spans.
const MIN_NOISE_BITS: i32 = 23;

/// log₂ of the largest share of the sensitivity the rounding may add.
pub(super) const MAX_INFLATION_BITS: i32 = 20;

/// Values are snapped to lattice points n·γ with |n| below this.
const MAX_LATTICE_INDEX: f64 = (1u64 << 62) as f64;

/// log₂ of the largest index a value within a mechanism's range snaps to:
/// half of [`MAX_LATTICE_INDEX`], which leaves room for the noise.
const RANGE_INDEX_BITS: i32 = 61;

/// The lattice γℤᵏ, γ = 2^exponent, a release is rounded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lattice {
    exponent: i32,
}

/// The largest exponent e with 2^e ≤ x, read off x's bits (subnormals
/// included); `None` unless x is finite and positive.
fn floor_log2(x: f64) -> Option<i32> {
    if !(x.is_finite() && x > 0.0) {
        return None;
    }
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased > 0 {
        return Some(biased - 1023);
    }
    // A subnormal is m·2^−1074 with m < 2^52.
    let mantissa = bits & ((1 << 52) - 1);
    Some(-1074 + 63 - mantissa.leading_zeros() as i32)
}

impl Lattice {
    /// The coarsest lattice on which noise of scale `noise` spans at least
    /// 2^23 points and rounding adds at most 2^−20·Δ to the sensitivity
    /// (`per_axis` = Δ/√k for L2, Δ₁/k for L1), unless that needs more than
    /// 2^`max_bits` points per noise scale, where the sampler's integers end;
    /// coarser still if values up to `range` would otherwise snap to indices
    /// beyond 2^61 (then the rounding may add more than 2^−20·Δ, which the
    /// inflated sensitivity accounts for).
    pub(super) fn choose(
        noise: f64,
        per_axis: f64,
        max_bits: i32,
        range: f64,
    ) -> Result<Self, DpError> {
        if !(range.is_finite() && range >= 0.0) {
            return Err(DpError::RangeTooWide { range, noise });
        }
        let target =
            (noise / 2f64.powi(MIN_NOISE_BITS)).min(per_axis / 2f64.powi(MAX_INFLATION_BITS));
        let (Some(noise_bits), Some(target_bits)) = (floor_log2(noise), floor_log2(target)) else {
            return Err(DpError::InvalidSensitivity(per_axis));
        };
        let finest = noise_bits - max_bits + 1;
        // The smallest exponent e with range < 2^(e + 61).
        let holds_range = floor_log2(range).map_or(i32::MIN, |bits| bits - RANGE_INDEX_BITS + 1);
        let exponent = target_bits.max(finest).max(holds_range);
        // Keep γ a normal float, so that scaling by it is exact.
        if !(-1000..=1000).contains(&exponent) {
            return Err(DpError::InvalidSensitivity(per_axis));
        }
        if noise_bits - exponent < MIN_NOISE_BITS {
            return Err(DpError::RangeTooWide { range, noise });
        }
        Ok(Lattice { exponent })
    }

    pub(super) fn spacing(self) -> f64 {
        2f64.powi(self.exponent)
    }

    /// The nearest lattice index of every value.
    pub(super) fn snap(self, values: &[f64]) -> Result<Vec<i128>, DpError> {
        values
            .iter()
            .enumerate()
            .map(|(index, &value)| {
                if !value.is_finite() {
                    return Err(DpError::NonFiniteValue(index));
                }
                let point = (value / self.spacing()).round();
                if point.abs() >= MAX_LATTICE_INDEX {
                    return Err(DpError::ValueOutOfRange(index));
                }
                Ok(point as i128)
            })
            .collect()
    }

    /// The nearest lattice index of every exact value, in integer
    /// arithmetic: the exact sums never pass through a float.
    pub(super) fn snap_fixed(self, values: &Fixed) -> Result<Vec<i128>, DpError> {
        let shift = values.exponent - self.exponent;
        values
            .units
            .iter()
            .enumerate()
            .map(|(index, &units)| {
                let out_of_range = DpError::ValueOutOfRange(index);
                if units.unsigned_abs() >= 1 << 126 {
                    return Err(out_of_range);
                }
                let point = if units == 0 {
                    0
                } else if shift >= 0 {
                    // Any point at 2^62 or beyond is refused.
                    if shift >= 62 || units.unsigned_abs() >= (1 << (62 - shift)) {
                        return Err(out_of_range);
                    }
                    units << shift
                } else if shift <= -127 {
                    // |units|·2^shift < 2^−1: nearest to 0.
                    0
                } else {
                    // Round half up: floor((units + 2^(s−1)) / 2^s), without
                    // the sum that could overflow.
                    let bits = -shift;
                    let floor = units >> bits;
                    let rest = units - (floor << bits);
                    floor + i128::from(rest >= 1 << (bits - 1))
                };
                if point.unsigned_abs() >= 1 << 62 {
                    return Err(out_of_range);
                }
                Ok(point)
            })
            .collect()
    }

    /// The float of a lattice point (post-processing).
    fn emit(self, point: i128) -> f64 {
        point as f64 * self.spacing()
    }
}

/// The noise a mechanism adds, in lattice units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Noise {
    /// Discrete Gaussian of this σ.
    Gaussian(u32),
    /// Discrete Laplace of this scale, independently per coordinate.
    Laplace(u64),
    /// Lattice norm-Gamma vector of this scale.
    NormGamma(u64),
}

impl Noise {
    /// The fault [`crate::mutants::Mutant::ScaleHalved`].
    fn halved(self) -> Noise {
        match self {
            Noise::Gaussian(sigma) => Noise::Gaussian(sigma / 2),
            Noise::Laplace(scale) => Noise::Laplace(scale / 2),
            Noise::NormGamma(scale) => Noise::NormGamma(scale / 2),
        }
    }
}

/// A mechanism calibrated for one release: its lattice, its noise, and the
/// privacy loss the ledger records for it. Calibration is deterministic, so
/// a dry run prices exactly what the release will spend.
#[derive(Debug, Clone, PartialEq)]
pub struct Mechanism {
    lattice: Lattice,
    dims: usize,
    noise: Noise,
    /// The sensitivity the noise is calibrated to, lattice rounding included.
    sensitivity: f64,
    loss: PrivacyLoss,
}

/// The norm a sensitivity is measured in, which decides how much rounding
/// each of `dims` coordinates to the lattice can add to it: γ·k in L1, γ·√k
/// in L2.
#[derive(Debug, Clone, Copy)]
enum Norm {
    L1,
    L2,
}

/// The lattice for noise of scale `noise` on values up to `range`, and the
/// sensitivity once the rounding to it is added (rounded up, never down).
fn rounded(
    noise: f64,
    sensitivity: f64,
    dims: usize,
    norm: Norm,
    max_bits: i32,
    range: f64,
) -> Result<(Lattice, f64), DpError> {
    if dims == 0 {
        return Err(DpError::NoCoordinates);
    }
    let growth = match norm {
        Norm::L1 => dims as f64,
        Norm::L2 => (dims as f64).sqrt(),
    };
    let lattice = Lattice::choose(noise, sensitivity / growth, max_bits, range)?;
    if crate::mutants::active(crate::mutants::Mutant::LatticeUninflated) {
        return Ok((lattice, sensitivity));
    }
    let sensitivity = (sensitivity + (lattice.spacing() * growth).next_up()).next_up();
    Ok((lattice, sensitivity))
}

/// log₂ of the largest Laplace or norm-Gamma scale, in lattice units.
pub(super) const MAX_SCALE_BITS: i32 = 48;
const MAX_SCALE: f64 = (1u64 << 50) as f64;

/// The noise scale in lattice units: the smallest integer ≥ scale/γ.
fn units(scale: f64, lattice: Lattice) -> f64 {
    (scale / lattice.spacing()).ceil()
}

/// The lattice, rounded sensitivity and scale (in lattice units) of pure
/// ε-DP noise of scale Δ/ε.
fn pure_scale(
    epsilon: Epsilon,
    sensitivity: f64,
    dims: usize,
    norm: Norm,
    range: f64,
) -> Result<(Lattice, f64, u64), DpError> {
    check_sensitivity(sensitivity)?;
    let epsilon = epsilon.value();
    let (lattice, sensitivity) = rounded(
        sensitivity / epsilon,
        sensitivity,
        dims,
        norm,
        MAX_SCALE_BITS,
        range,
    )?;
    let scale = units((sensitivity / epsilon).next_up(), lattice);
    if scale > MAX_SCALE {
        return Err(DpError::TooManyCoordinates(dims));
    }
    Ok((lattice, sensitivity, scale as u64))
}

impl Mechanism {
    /// Gaussian noise for (ε, δ)-DP on `dims` coordinates of L2 sensitivity
    /// `sensitivity`, each coordinate at most `range` in magnitude, with σ
    /// from the analytic Gaussian mechanism.
    pub fn gaussian(
        epsilon: Epsilon,
        delta: Delta,
        sensitivity: f64,
        dims: usize,
        range: f64,
    ) -> Result<Self, DpError> {
        Self::gaussian_steps(epsilon, delta, sensitivity, dims, 1, range)
    }

    /// Gaussian noise for each of `steps` adaptive releases (T steps of
    /// training) that are (ε, δ)-DP together: every step's query has L2
    /// sensitivity `sensitivity` on `dims` coordinates, each at most
    /// `range` in magnitude. T Gaussian steps of σ on Δ′ compose exactly to
    /// one Gaussian of μ = √T·Δ′/σ (Dong, Roth, Su 2022), so σ =
    /// √T·σ_analytic(ε, δ, Δ′). Δ′ is the sensitivity with each step's
    /// own lattice rounding added (Δ + γ√d): every step rounds, so the
    /// inflation counts √T times in μ, not once, as it would if this were
    /// priced as one Gaussian on √T·Δ. The ledger records the T-fold
    /// composition. One step is [`Mechanism::gaussian`].
    pub fn gaussian_steps(
        epsilon: Epsilon,
        delta: Delta,
        sensitivity: f64,
        dims: usize,
        steps: u32,
        range: f64,
    ) -> Result<Self, DpError> {
        let (epsilon, delta) = (epsilon.value(), delta.value());
        // σ of T steps, never below √T·σ₁ for all the rounding of √T and
        // of the product; exactly σ₁ for one step.
        let spread = |sigma: f64| match steps {
            0 => Err(DpError::NoSteps),
            1 => Ok(sigma),
            _ => Ok((f64::from(steps).sqrt().next_up() * sigma).next_up()),
        };
        let noise = spread(analytic_sigma(epsilon, delta, sensitivity)?)?;
        let (lattice, sensitivity) = rounded(noise, sensitivity, dims, Norm::L2, 30, range)?;
        let sigma = units(
            spread(analytic_sigma(epsilon, delta, sensitivity)?)?,
            lattice,
        );
        if sigma > f64::from(MAX_GAUSSIAN_SIGMA) {
            return Err(DpError::TooManyCoordinates(dims));
        }
        let step = PrivacyLoss::Gaussian {
            sensitivity,
            sigma: sigma * lattice.spacing(),
        };
        Ok(Mechanism {
            lattice,
            dims,
            sensitivity,
            noise: Noise::Gaussian(sigma as u32),
            loss: match steps {
                1 => step,
                count => PrivacyLoss::Composition {
                    count,
                    each: Box::new(step),
                },
            },
        })
    }

    /// Gaussian noise whose σ is at least `multiplier` times the
    /// sensitivity, the lattice's rounding included (σ ≥ z·Δ′): one
    /// release that costs at most a Gaussian of μ = 1/z, whatever Δ is.
    /// For a release whose sensitivity is known only once an earlier part
    /// of it has been released (a model normalised by a noisy count under
    /// unit `user`): its cost is priced from z before the debit, its
    /// lattice and σ from Δ after.
    pub fn gaussian_multiplier(
        multiplier: f64,
        sensitivity: f64,
        dims: usize,
        range: f64,
    ) -> Result<Self, DpError> {
        check_sensitivity(sensitivity)?;
        if !(multiplier.is_finite() && multiplier > 0.0) {
            return Err(DpError::InvalidSensitivity(multiplier));
        }
        let (lattice, sensitivity) = rounded(
            multiplier * sensitivity,
            sensitivity,
            dims,
            Norm::L2,
            30,
            range,
        )?;
        let sigma = units((multiplier * sensitivity).next_up(), lattice);
        if sigma > f64::from(MAX_GAUSSIAN_SIGMA) {
            return Err(DpError::TooManyCoordinates(dims));
        }
        Ok(Mechanism {
            lattice,
            dims,
            sensitivity,
            noise: Noise::Gaussian(sigma as u32),
            loss: PrivacyLoss::Gaussian {
                sensitivity,
                sigma: sigma * lattice.spacing(),
            },
        })
    }

    /// Laplace noise for pure ε-DP on `dims` coordinates of L1 sensitivity
    /// `sensitivity`, each at most `range` in magnitude: scale b = Δ₁/ε per
    /// coordinate.
    pub fn laplace(
        epsilon: Epsilon,
        sensitivity: f64,
        dims: usize,
        range: f64,
    ) -> Result<Self, DpError> {
        let (lattice, sensitivity, scale) =
            pure_scale(epsilon, sensitivity, dims, Norm::L1, range)?;
        Ok(Mechanism {
            lattice,
            dims,
            sensitivity,
            noise: Noise::Laplace(scale),
            loss: PrivacyLoss::Laplace {
                sensitivity,
                scale: scale as f64 * lattice.spacing(),
                grid: lattice.spacing(),
            },
        })
    }

    /// Norm-Gamma vector noise, density ∝ exp(−ε‖z‖₂/Δ), for pure ε-DP on
    /// `dims` coordinates of L2 sensitivity `sensitivity`, each at most
    /// `range` in magnitude (Chaudhuri et al. 2011, Algorithm 1; Song et al.
    /// 2013).
    pub fn norm_gamma(
        epsilon: Epsilon,
        sensitivity: f64,
        dims: usize,
        range: f64,
    ) -> Result<Self, DpError> {
        let (lattice, sensitivity, scale) =
            pure_scale(epsilon, sensitivity, dims, Norm::L2, range)?;
        Ok(Mechanism {
            lattice,
            dims,
            sensitivity,
            noise: Noise::NormGamma(scale),
            loss: PrivacyLoss::PureEpsilon {
                epsilon: epsilon.value(),
            },
        })
    }

    /// What the ledger records for this release.
    pub fn loss(&self) -> &PrivacyLoss {
        &self.loss
    }

    /// `gaussian`, `laplace` or `norm_gamma`.
    pub fn name(&self) -> &'static str {
        match self.noise {
            Noise::Gaussian(_) => "gaussian",
            Noise::Laplace(_) => "laplace",
            Noise::NormGamma(_) => "norm_gamma",
        }
    }

    /// The sensitivity the noise is calibrated to: the declared one plus
    /// what rounding to the lattice can add.
    pub fn accounted_sensitivity(&self) -> f64 {
        self.sensitivity
    }

    /// The number of coordinates released.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The spacing γ of the lattice the release lies on.
    pub fn grid(&self) -> f64 {
        self.lattice.spacing()
    }

    /// The noise's own scale parameter: σ (Gaussian), b (Laplace) or the
    /// Gamma scale θ of the norm (norm-Gamma).
    pub fn noise_scale(&self) -> f64 {
        let units = match self.noise {
            Noise::Gaussian(sigma) => f64::from(sigma),
            Noise::Laplace(scale) | Noise::NormGamma(scale) => scale as f64,
        };
        units * self.lattice.spacing()
    }

    /// The standard deviation of the noise on each coordinate, for error
    /// bars: σ, √2·b, or √(k+1)·θ (E‖Z‖² = k(k+1)θ² spread over k axes).
    pub fn noise_std(&self) -> f64 {
        let factor = match self.noise {
            Noise::Gaussian(_) => 1.0,
            Noise::Laplace(_) => std::f64::consts::SQRT_2,
            Noise::NormGamma(_) => (self.dims as f64 + 1.0).sqrt(),
        };
        factor * self.noise_scale()
    }

    /// Releases `values` (one per coordinate) with this mechanism's noise.
    /// Draw the noise from [`super::OsNoise`] in production.
    pub fn release<R: Rng + ?Sized>(
        &self,
        values: &[f64],
        rng: &mut R,
    ) -> Result<Vec<f64>, DpError> {
        self.check_dims(values)?;
        let drawn = self.draw(rng);
        self.add(values, &drawn)
    }

    /// One release's noise, drawn ahead of the values it will be added to:
    /// an iterative learner draws every step's noise before it reads a row,
    /// so that how long the draws took can be hidden on its own, and the
    /// steps then take the same time whatever the noise was.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> Drawn {
        let noise = if crate::mutants::active(crate::mutants::Mutant::ScaleHalved) {
            self.noise.halved()
        } else {
            self.noise
        };
        Drawn(match noise {
            Noise::Gaussian(sigma) => (0..self.dims)
                .map(|_| discrete_gaussian(sigma, rng))
                .collect(),
            Noise::Laplace(scale) => (0..self.dims)
                .map(|_| discrete_laplace(scale, rng))
                .collect(),
            Noise::NormGamma(scale) => norm_gamma_lattice(self.dims, scale, rng),
        })
    }

    /// Releases exact `values` (sums on a [`super::fixed::Grid`], say) with
    /// this mechanism's noise: they are snapped to the lattice in integer
    /// arithmetic, so rounding moves each by at most half a lattice step,
    /// as [`Mechanism::release`]'s analysis assumes, however large they are.
    pub fn release_fixed<R: Rng + ?Sized>(
        &self,
        values: &Fixed,
        rng: &mut R,
    ) -> Result<Vec<f64>, DpError> {
        self.add_fixed(values, &self.draw(rng))
    }

    /// [`Mechanism::add`] for exact `values`, snapped as
    /// [`Mechanism::release_fixed`] snaps them.
    pub fn add_fixed(&self, values: &Fixed, drawn: &Drawn) -> Result<Vec<f64>, DpError> {
        self.check_dims(&values.units)?;
        self.check_dims(&drawn.0)?;
        Ok(self.noised(&self.lattice.snap_fixed(values)?, drawn))
    }

    /// `values` snapped to the lattice with `drawn` added: the release, for
    /// noise this mechanism drew.
    pub fn add(&self, values: &[f64], drawn: &Drawn) -> Result<Vec<f64>, DpError> {
        self.check_dims(values)?;
        self.check_dims(&drawn.0)?;
        Ok(self.noised(&self.lattice.snap(values)?, drawn))
    }

    fn noised(&self, points: &[i128], drawn: &Drawn) -> Vec<f64> {
        points
            .iter()
            .zip(&drawn.0)
            .map(|(&point, &noise)| self.lattice.emit(point.saturating_add(noise)))
            .collect()
    }

    fn check_dims<T>(&self, values: &[T]) -> Result<(), DpError> {
        if values.len() != self.dims {
            return Err(DpError::DimensionMismatch {
                expected: self.dims,
                actual: values.len(),
            });
        }
        Ok(())
    }
}

/// One release's noise in lattice units, from [`Mechanism::draw`], for
/// [`Mechanism::add`] of the mechanism that drew it.
#[derive(Debug, Clone)]
pub struct Drawn(Vec<i128>);

#[cfg(test)]
#[path = "mechanism_tests.rs"]
mod tests;

#[cfg(test)]
mod floor_log2_tests {
    use super::floor_log2;

    #[test]
    fn floor_log2_is_exact_from_subnormals_to_the_largest_float() {
        assert_eq!(floor_log2(1.0), Some(0));
        assert_eq!(floor_log2(3.0), Some(1));
        assert_eq!(floor_log2(0.75), Some(-1));
        assert_eq!(floor_log2(f64::MAX), Some(1023));
        assert_eq!(floor_log2(f64::MIN_POSITIVE), Some(-1022));
        assert_eq!(floor_log2(5e-324), Some(-1074));
        assert_eq!(floor_log2(1e-318), Some(-1057));
        for x in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(floor_log2(x), None, "{x}");
        }
        for e in -1074..=1023 {
            let x = 2f64.powi(e.max(-1022)) * 2f64.powi((e + 1022).min(0));
            assert_eq!(floor_log2(x), Some(e));
        }
    }
}
