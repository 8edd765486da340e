//! The solver never fails at or above the λ floor, and its certificate
//! really bounds the exact gradient norm.
//!
//! "Exact" here is double-double arithmetic (≈ 106 bits, with an explicit
//! allowance for its own error): the gradient at the returned float weights
//! is recomputed with exact products, double-double sums and a
//! double-double `exp`, independently of the code under test.

use dpgate_learn::{Objective, certifiable, min_lambda};
use ndarray::{Array1, Array2};
use proptest::prelude::*;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// The server's solve tolerance γ.
const TOLERANCE: f64 = 1e-10;

mod dd {
    //! Double-double arithmetic (Dekker; Hida, Li & Bailey's QD algorithms),
    //! enough for an exp and a gradient.

    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct Dd {
        pub hi: f64,
        pub lo: f64,
    }

    fn two_sum(a: f64, b: f64) -> (f64, f64) {
        let s = a + b;
        let bv = s - a;
        (s, (a - (s - bv)) + (b - bv))
    }

    fn quick_two_sum(a: f64, b: f64) -> (f64, f64) {
        let s = a + b;
        (s, b - (s - a))
    }

    fn two_prod(a: f64, b: f64) -> (f64, f64) {
        let p = a * b;
        (p, a.mul_add(b, -p))
    }

    pub const ZERO: Dd = Dd { hi: 0.0, lo: 0.0 };
    pub const ONE: Dd = Dd { hi: 1.0, lo: 0.0 };
    /// ln 2 to about 107 bits.
    const LN2: Dd = Dd {
        hi: std::f64::consts::LN_2,
        lo: 2.319_046_813_846_299_6e-17,
    };

    /// 1/1, 1/2, …, 1/12 in double-double.
    fn reciprocals() -> &'static [Dd; 12] {
        static TABLE: std::sync::OnceLock<[Dd; 12]> = std::sync::OnceLock::new();
        TABLE.get_or_init(|| std::array::from_fn(|i| ONE.div(Dd::new((i + 1) as f64))))
    }

    impl Dd {
        pub fn new(value: f64) -> Dd {
            Dd { hi: value, lo: 0.0 }
        }

        /// The exact product of two floats.
        pub fn product(a: f64, b: f64) -> Dd {
            let (hi, lo) = two_prod(a, b);
            Dd { hi, lo }
        }

        pub fn add(self, other: Dd) -> Dd {
            let (s, e) = two_sum(self.hi, other.hi);
            let (t, f) = two_sum(self.lo, other.lo);
            let (s, e) = quick_two_sum(s, e + t);
            let (hi, lo) = quick_two_sum(s, e + f);
            Dd { hi, lo }
        }

        pub fn neg(self) -> Dd {
            Dd {
                hi: -self.hi,
                lo: -self.lo,
            }
        }

        pub fn sub(self, other: Dd) -> Dd {
            self.add(other.neg())
        }

        pub fn mul(self, other: Dd) -> Dd {
            let (p, e) = two_prod(self.hi, other.hi);
            let (hi, lo) = quick_two_sum(p, e + (self.hi * other.lo + self.lo * other.hi));
            Dd { hi, lo }
        }

        pub fn mul_f64(self, other: f64) -> Dd {
            self.mul(Dd::new(other))
        }

        pub fn div(self, other: Dd) -> Dd {
            let q1 = self.hi / other.hi;
            let r = self.sub(other.mul_f64(q1));
            let q2 = r.hi / other.hi;
            let r = r.sub(other.mul_f64(q2));
            let q3 = r.hi / other.hi;
            let (hi, lo) = quick_two_sum(q1, q2);
            Dd { hi, lo }.add(Dd::new(q3))
        }

        pub fn abs(self) -> Dd {
            if self.hi < 0.0 { self.neg() } else { self }
        }

        fn scale(self, power: i32) -> Dd {
            let factor = 2f64.powi(power);
            Dd {
                hi: self.hi * factor,
                lo: self.lo * factor,
            }
        }

        /// e^x for x ≤ 0 (all the sigmoid needs), relative error ≈ 2⁻¹⁰⁰.
        pub fn exp_nonpositive(self) -> Dd {
            assert!(self.hi <= 0.0);
            if self.hi < -1000.0 {
                return ZERO; // e^x < 10⁻⁴³⁴: far below every bound compared
            }
            // x = n ln 2 + r, |r| ≤ ln 2/2; e^r = (e^{r/1024})^1024 through
            // p = e^s − 1, squared as (1 + p)² − 1 = 2p + p² to keep bits.
            let n = (self.hi / std::f64::consts::LN_2).round();
            let r = self.sub(LN2.mul_f64(n));
            let s = r.scale(-10);
            // |s| ≤ 3.4·10⁻⁴: twelve terms leave a remainder below 10⁻⁴⁵.
            let reciprocals = reciprocals();
            let mut p = ZERO;
            for reciprocal in reciprocals.iter().rev() {
                // p ← s/i · (1 + p), Horner for e^s − 1
                p = s.mul(*reciprocal).mul(ONE.add(p));
            }
            for _ in 0..10 {
                p = p.add(p).add(p.mul(p));
            }
            let value = ONE.add(p);
            // 2^n in two steps so that neither factor underflows early.
            let n = n as i32;
            let half = n / 2;
            value.scale(half).scale(n - half)
        }

        /// σ(z) = 1/(1 + e^{−z}).
        pub fn sigmoid(self) -> Dd {
            if self.hi >= 0.0 {
                ONE.div(ONE.add(self.neg().exp_nonpositive()))
            } else {
                let e = self.exp_nonpositive();
                e.div(ONE.add(e))
            }
        }
    }
}

use dd::Dd;

/// ∇J(w) in double-double, and per coordinate an allowance for the
/// double-double computation's own error (far below the certificate's Ê).
fn reference_gradient(objective: &Objective<'_>, w: &Array1<f64>) -> (Vec<Dd>, Vec<f64>) {
    let (rows, k) = objective.x.dim();
    let mut sums = vec![dd::ZERO; k];
    let mut slack = vec![0.0f64; k];
    for (row, &y) in objective.x.outer_iter().zip(objective.y.iter()) {
        let mut margin = dd::ZERO;
        let mut size = 0.0;
        for (&x, &wv) in row.iter().zip(w.iter()) {
            margin = margin.add(Dd::product(x, wv));
            size += (x * wv).abs();
        }
        let coefficient = margin.mul_f64(-y).sigmoid().mul_f64(-y);
        // Margin error ≈ k·2⁻¹⁰⁴·Σ|xw| moves σ by ¼ of it; exp ≈ 2⁻⁹⁵.
        let row_slack = 1e-28 * (1.0 + k as f64 * size);
        for ((sum, s), &x) in sums.iter_mut().zip(slack.iter_mut()).zip(row.iter()) {
            *sum = sum.add(coefficient.mul_f64(x));
            *s += row_slack * x.abs();
        }
    }
    let n = Dd::new(rows as f64);
    let gradient: Vec<Dd> = sums
        .iter()
        .enumerate()
        .map(|(j, &sum)| {
            let total = match objective.linear {
                Some(b) => sum.add(Dd::new(b[j])),
                None => sum,
            };
            total.div(n).add(Dd::product(objective.lambda, w[j]))
        })
        .collect();
    let slack = slack
        .iter()
        .enumerate()
        .map(|(j, s)| {
            let linear = objective.linear.map_or(0.0, |b| b[j].abs());
            (s + 1e-28 * linear) / rows as f64 + 1e-28 * (objective.lambda * w[j]).abs() + 1e-300
        })
        .collect();
    (gradient, slack)
}

/// Checks the certificate at `w` against the double-double gradient:
/// |ĝⱼ − gⱼ| ≤ Êⱼ for every j and ‖g‖ ≤ bound. Returns the largest
/// |ĝⱼ − gⱼ|/Êⱼ seen (how much of the bound the real error used).
fn check_certificate(objective: &Objective<'_>, w: &Array1<f64>) -> f64 {
    let certificate = objective.certify(w.view());
    let (exact, slack) = reference_gradient(objective, w);
    let mut used = 0.0f64;
    let mut squared = dd::ZERO;
    let mut norm_slack = 0.0;
    for (j, (g, s)) in exact.iter().zip(&slack).enumerate() {
        let computed = Dd::new(certificate.gradient[j]);
        let error = computed.sub(*g).abs().hi;
        let allowed = certificate.error_bound[j];
        assert!(
            error <= allowed + s,
            "coordinate {j}: |ĝ − g| = {error:e} > Ê = {allowed:e} (ĝ = {:e})",
            certificate.gradient[j]
        );
        used = used.max(error / allowed);
        squared = squared.add(g.mul(*g));
        norm_slack += s * s;
    }
    let exact_norm = squared.hi.sqrt() * (1.0 + 1e-15);
    assert!(
        exact_norm <= certificate.bound + norm_slack.sqrt(),
        "‖g‖ = {exact_norm:e} > certified {:e}",
        certificate.bound
    );
    used
}

#[derive(Debug, Clone, Copy)]
enum Column {
    Uniform,
    Binary,
    Zero,
    One,
    Constant(f32),
    Tiny,
}

#[derive(Debug, Clone, Copy)]
enum Labels {
    Logistic,
    AllPositive,
    AllNegative,
    /// y = sign of a feature (linearly separable, or all one label if the
    /// feature is constant).
    SignOfFeature,
    /// y = sign of a random hyperplane through the data.
    Hyperplane,
}

#[derive(Debug, Clone)]
struct Design {
    columns: Vec<Column>,
    intercept: bool,
    rows: usize,
    identical_rows: bool,
    labels: Labels,
    seed: u64,
}

/// Rows of [0, 1]ᵏ (as f32, as the server stores them), an optional
/// intercept column, all scaled by 1/√d as the server does.
fn build(design: &Design) -> (Array2<f64>, Array1<f64>) {
    let k = design.columns.len();
    let d = k + usize::from(design.intercept);
    let scale = 1.0 / (d as f64).sqrt();
    let mut rng = ChaCha8Rng::seed_from_u64(design.seed);
    let mut raw = Array2::<f32>::zeros((design.rows, k));
    for i in 0..design.rows {
        if design.identical_rows && i > 0 {
            let first = raw.row(0).to_owned();
            raw.row_mut(i).assign(&first);
            continue;
        }
        for (j, column) in design.columns.iter().enumerate() {
            raw[(i, j)] = match *column {
                Column::Uniform => rng.random::<f32>(),
                Column::Binary => f32::from(u8::from(rng.random::<bool>())),
                Column::Zero => 0.0,
                Column::One => 1.0,
                Column::Constant(c) => c,
                Column::Tiny => rng.random::<f32>() * 1e-30,
            };
        }
    }
    let mut x = Array2::<f64>::zeros((design.rows, d));
    for i in 0..design.rows {
        for j in 0..k {
            x[(i, j)] = f64::from(raw[(i, j)]) * scale;
        }
        if design.intercept {
            x[(i, k)] = scale;
        }
    }
    let hyperplane: Vec<f64> = (0..k).map(|_| rng.random::<f64>() * 2.0 - 1.0).collect();
    let offset = -0.5 * hyperplane.iter().sum::<f64>();
    let y = (0..design.rows)
        .map(|i| {
            let positive = match design.labels {
                Labels::AllPositive => true,
                Labels::AllNegative => false,
                Labels::SignOfFeature => k > 0 && raw[(i, 0)] > 0.5,
                Labels::Hyperplane => {
                    let z: f64 = (0..k)
                        .map(|j| hyperplane[j] * f64::from(raw[(i, j)]))
                        .sum::<f64>()
                        + offset;
                    z > 0.0
                }
                Labels::Logistic => {
                    let z: f64 = (0..k)
                        .map(|j| (3.0 * hyperplane[j]) * f64::from(raw[(i, j)]))
                        .sum::<f64>()
                        + 3.0 * offset;
                    rng.random::<f64>() < dpgate_learn::sigmoid(z)
                }
            };
            if positive { 1.0 } else { -1.0 }
        })
        .collect();
    (x, y)
}

/// b with ‖b‖/N = β (just under, against rounding), uniform direction.
fn linear_term(d: usize, rows: usize, beta: f64, seed: u64) -> Array1<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let direction: Array1<f64> = (0..d)
        .map(|_| {
            // Box–Muller normal for a uniform direction.
            let u1: f64 = rng.random::<f64>().max(1e-300);
            let u2: f64 = rng.random();
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect();
    let length = direction.dot(&direction).sqrt().max(1e-300);
    direction * (beta * rows as f64 * (1.0 - 1e-12) / length)
}

/// Fits at λ = floor·factor and checks everything; returns (iterations,
/// certified norm, share of Ê used).
fn fit_and_check(design: &Design, factor: f64, beta: Option<f64>) -> (usize, f64, f64) {
    let (x, y) = build(design);
    let (rows, d) = x.dim();
    let b = beta.map(|beta| linear_term(d, rows, beta, design.seed));
    let floor = min_lambda(d, rows, beta.unwrap_or(0.0), TOLERANCE).expect("a floor");
    let lambda = floor * factor;
    assert_eq!(
        certifiable(d, rows, lambda, beta.unwrap_or(0.0), TOLERANCE),
        Ok(())
    );
    let objective = Objective {
        x: x.view(),
        y: y.view(),
        lambda,
        linear: b.as_ref().map(|b| b.view()),
        normaliser: None,
    };
    let started = std::time::Instant::now();
    let fit = objective
        .minimise(TOLERANCE)
        .unwrap_or_else(|error| panic!("{design:?}, λ = {lambda:e}, β = {beta:?}: {error}"));
    assert!(
        fit.certified_gradient_norm <= TOLERANCE,
        "certified {:e}",
        fit.certified_gradient_norm
    );
    assert!(fit.gradient_norm <= fit.certified_gradient_norm);
    assert!(fit.weights.iter().all(|w| w.is_finite()));
    let fit_time = started.elapsed();
    let certificate = objective.certify(fit.weights.view());
    assert_eq!(certificate.bound, fit.certified_gradient_norm);
    let used = check_certificate(&objective, &fit.weights);
    // CERTIFIED_FIT_LOG=1 cargo test … -- --nocapture: one line per fit.
    if std::env::var_os("CERTIFIED_FIT_LOG").is_some() {
        eprintln!(
            "N = {rows}, d = {d}, {:?}, β = {beta:?}, λ = {lambda:.3e}: {} iterations in \
             {fit_time:.2?}, certified {:.2e}, used {used:.1e} of Ê",
            design.labels, fit.iterations, fit.certified_gradient_norm
        );
    }
    (fit.iterations, fit.certified_gradient_norm, used)
}

fn column() -> impl Strategy<Value = Column> {
    prop_oneof![
        4 => Just(Column::Uniform),
        2 => Just(Column::Binary),
        1 => Just(Column::Zero),
        1 => Just(Column::One),
        1 => (0.0f32..=1.0).prop_map(Column::Constant),
        1 => Just(Column::Tiny),
    ]
}

fn labels() -> impl Strategy<Value = Labels> {
    prop_oneof![
        2 => Just(Labels::Logistic),
        1 => Just(Labels::AllPositive),
        1 => Just(Labels::AllNegative),
        2 => Just(Labels::SignOfFeature),
        2 => Just(Labels::Hyperplane),
    ]
}

fn design() -> impl Strategy<Value = Design> {
    let columns = prop_oneof![
        // Every column of one kind: all uniform, all corners, all constant.
        (1usize..=24, column()).prop_map(|(k, c)| vec![c; k]),
        prop::collection::vec(column(), 1..=24),
    ];
    let rows = prop_oneof![
        2 => Just(1usize),
        1 => 2usize..=5,
        3 => 6usize..=300,
        1 => 301usize..=3000,
    ];
    (
        columns,
        any::<bool>(),
        rows,
        prop::bool::weighted(0.15),
        labels(),
        any::<u64>(),
    )
        .prop_map(
            |(columns, intercept, rows, identical_rows, labels, seed)| Design {
                columns,
                intercept,
                rows,
                identical_rows,
                labels,
                seed,
            },
        )
}

fn lambda_factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => Just(1.0),
        2 => Just(1.0 + 1e-9),
        1 => Just(1.01),
        1 => Just(2.0),
        1 => Just(1e3),
        1 => Just(1e8),
    ]
}

fn linear_bound() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(1e-4)),
        1 => Just(Some(1e-2)),
        1 => Just(Some(1.0)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 160,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any data in the domain, λ at or above the floor, with or without a
    /// linear term at the accepted bound: the fit succeeds and its
    /// certificate bounds the exact gradient.
    #[test]
    fn fits_at_the_floor_are_certified(
        design in design(),
        factor in lambda_factor(),
        beta in linear_bound(),
    ) {
        fit_and_check(&design, factor, beta);
    }

    /// The certificate bounds the exact gradient at arbitrary weights,
    /// including huge ones, and for data outside the domain (negative
    /// features, rows longer than 1).
    #[test]
    fn certificate_bounds_the_exact_gradient_anywhere(
        rows in 1usize..200,
        k in 1usize..40,
        weight_scale in prop_oneof![Just(0.0), Just(1e-3), Just(1.0), Just(1e3), Just(1e6)],
        feature_scale in prop_oneof![Just(1e-3), Just(1.0), Just(30.0)],
        lambda in prop_oneof![Just(1e-12), Just(1e-3), Just(10.0)],
        with_linear in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = Array2::from_shape_simple_fn((rows, k), || {
            (rng.random::<f64>() * 2.0 - 1.0) * feature_scale
        });
        let y: Array1<f64> = (0..rows).map(|_| if rng.random::<bool>() { 1.0 } else { -1.0 }).collect();
        let w: Array1<f64> = (0..k).map(|_| (rng.random::<f64>() * 2.0 - 1.0) * weight_scale).collect();
        let b: Array1<f64> = (0..k).map(|_| rng.random::<f64>() * 4.0 - 2.0).collect();
        let objective = Objective {
            x: x.view(),
            y: y.view(),
            lambda,
            linear: with_linear.then(|| b.view()),
            normaliser: None,
        };
        check_certificate(&objective, &w);
    }
}

#[test]
fn double_double_exp_is_accurate() {
    // e⁻¹ = 0.36787944117144233 − 1.2428753672788363e-17 (to 34 digits:
    // 0.3678794411714423215955237701614609).
    let e = Dd::new(-1.0).exp_nonpositive();
    assert_eq!(e.hi, 0.367_879_441_171_442_33);
    assert!((e.lo - -1.242_875_367_278_836_3e-17).abs() < 1e-31, "{e:?}");
    // e^{−a} e^{−b} = e^{−(a+b)} to about 2⁻¹⁰⁰ (a + b summed exactly).
    for (a, b) in [
        (0.3, 1.7),
        (10.0, 25.5),
        (300.0, 400.0),
        (0.001, 700.0),
        (1e-9, 0.2),
    ] {
        let product = Dd::new(-a)
            .exp_nonpositive()
            .mul(Dd::new(-b).exp_nonpositive());
        let direct = Dd::new(-a).add(Dd::new(-b)).exp_nonpositive();
        let relative = product.sub(direct).abs().hi / direct.hi;
        assert!(relative < 1e-29, "{a} {b}: {relative:e}");
    }
    assert_eq!(Dd::new(0.0).sigmoid(), Dd::new(0.5));
    let s = Dd::new(3.0).sigmoid().add(Dd::new(-3.0).sigmoid());
    assert!(s.sub(dd::ONE).abs().hi < 1e-31);
}

/// The degenerate designs of the proptest, for every dimension of the
/// brief's table above 24 columns, at the floor and just above it.
#[test]
fn wide_designs_at_the_floor() {
    let cases: [(usize, usize, Labels, Column, bool); 8] = [
        (64, 40, Labels::SignOfFeature, Column::Binary, false),
        (64, 200, Labels::Hyperplane, Column::Uniform, false),
        (128, 60, Labels::AllPositive, Column::One, false),
        (128, 30, Labels::Hyperplane, Column::Binary, true),
        (256, 40, Labels::SignOfFeature, Column::Uniform, false),
        (256, 1, Labels::AllNegative, Column::Binary, false),
        (512, 50, Labels::Hyperplane, Column::Uniform, false),
        (512, 20, Labels::SignOfFeature, Column::Binary, true),
    ];
    for (seed, &(k, rows, labels, column, identical_rows)) in cases.iter().enumerate() {
        let mut columns = vec![column; k];
        // Some constant columns among the rest.
        columns[1] = Column::Zero;
        columns[2] = Column::One;
        let design = Design {
            columns,
            intercept: true,
            rows,
            identical_rows,
            labels,
            seed: seed as u64,
        };
        for (factor, beta) in [(1.0, None), (1.0 + 1e-9, Some(1e-2))] {
            let (iterations, certified, used) = fit_and_check(&design, factor, beta);
            eprintln!(
                "d = {}, N = {rows}, {labels:?}, β = {beta:?}: {iterations} iterations, \
                 certified {certified:.2e}, used {used:.2e} of Ê",
                k + 1
            );
        }
    }
}

/// Millions of rows, separable, at the floor, with and without the linear
/// term.
#[test]
fn millions_of_rows_at_the_floor() {
    for (rows, beta) in [(2_000_000, None), (1_000_000, Some(1e-3))] {
        let design = Design {
            columns: vec![Column::Uniform],
            intercept: true,
            rows,
            identical_rows: false,
            labels: Labels::SignOfFeature,
            seed: 7,
        };
        let (iterations, certified, used) = fit_and_check(&design, 1.0, beta);
        eprintln!(
            "N = {rows}, separable, β = {beta:?}: {iterations} iterations, certified \
             {certified:.2e}, used {used:.2e} of Ê"
        );
    }
}

#[test]
fn infeasible_parameters_are_refused_before_the_fit() {
    // λ below the floor is refused with the floor; at the floor it passes.
    let floor = min_lambda(33, 10_000, 1e-2, TOLERANCE).unwrap();
    assert!(certifiable(33, 10_000, floor / 2.0, 1e-2, TOLERANCE).is_err());
    assert!(certifiable(33, 10_000, floor, 1e-2, TOLERANCE).is_ok());
    assert!(certifiable(513, 100, 1e-8, 0.0, TOLERANCE).is_err());
    assert!(certifiable(2, 1, 1e-12, 0.0, TOLERANCE).is_err());
}
