use super::*;
use crate::dp::{Accountant, Budget, Charge, Composition, PrivacyLoss, gaussian_delta};
use dpgate_learn::Objective;
use ndarray::{Array1, Array2};
use proptest::prelude::*;

const GAMMA: f64 = 1e-10;

fn epsilon(value: f64) -> Epsilon {
    Epsilon::new(value).unwrap()
}

#[test]
fn the_sensitivity_is_two_m_over_lambda_n_hat_plus_the_solve_slack() {
    // m = 5, N̂ = 1000, λ = 0.01: 2·5/(0.01·1000) = 1, plus 2γ/λ = 2·10⁻⁸.
    let sensitivity = output_sensitivity(1000.0, 5, 0.01, GAMMA).unwrap();
    let exact = 1.0 + 2e-8;
    assert!(sensitivity >= exact, "{sensitivity}");
    assert!(sensitivity <= exact * (1.0 + 1e-11), "{sensitivity}");
    // m = 1 at N̂ = N is unit `row`'s 2/(Nλ) (there for a replacement).
    let one = output_sensitivity(1000.0, 1, 0.01, GAMMA).unwrap();
    let row = crate::dp::erm::output_sensitivity(1000, 0.01, GAMMA).unwrap();
    assert!(one >= row && one <= row * (1.0 + 1e-11), "{one} {row}");
    for lambda in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(
            output_sensitivity(10.0, 1, lambda, GAMMA).is_err(),
            "{lambda}"
        );
    }
    for normaliser in [0.5, f64::NAN, f64::INFINITY] {
        assert!(output_sensitivity(normaliser, 1, 0.1, GAMMA).is_err());
    }
    assert!(output_sensitivity(10.0, 0, 0.1, GAMMA).is_err());
}

#[test]
fn the_normaliser_is_the_noisy_count_clamped_to_one_and_the_largest_dataset() {
    assert_eq!(normaliser(1234.5), 1234.5);
    assert_eq!(normaliser(-40.0), 1.0);
    assert_eq!(normaliser(0.2), 1.0);
    assert_eq!(normaliser(f64::NAN), 1.0);
    assert_eq!(normaliser(1e30), MAX_ROWS as f64);
    assert_eq!(normaliser(f64::INFINITY), MAX_ROWS as f64);
}

#[test]
fn the_solver_regulariser_is_lambda_times_m_over_n_and_never_below_lambda() {
    assert_eq!(solver_lambda(0.01, 2000.0, 1000), 0.02);
    assert_eq!(solver_lambda(0.01, 500.0, 1000), 0.01);
    assert_eq!(solver_lambda(0.01, 1.0, 1), 0.01);
}

#[test]
fn the_count_and_the_model_compose_to_the_requests_epsilon_and_delta() {
    for (e, d) in [(1.0, 1e-6), (0.1, 1e-9), (8.0, 1e-5)] {
        let z = analytic_sigma(e, d, 1.0).unwrap();
        let multipliers = Multipliers::new(epsilon(e), Delta::new(d).unwrap()).unwrap();
        assert!((multipliers.count / z - 10.0).abs() < 1e-12);
        assert!((multipliers.model / z - (100f64 / 99.0).sqrt()).abs() < 1e-12);
        let mu = (multipliers.count.powi(-2) + multipliers.model.powi(-2)).sqrt();
        assert!(mu <= 1.0 / z, "μ = {mu}");
        assert!(mu >= (1.0 - 1e-12) / z, "μ = {mu}");
        assert!(gaussian_delta(mu, e) <= d);
        // The ledger's tight accountant agrees, and finds nearly all of ε
        // spent.
        let charge = Charge {
            epsilon: epsilon(e),
            delta: Delta::new(d).unwrap(),
            loss: PrivacyLoss::Sequence {
                parts: vec![
                    PrivacyLoss::Gaussian {
                        sensitivity: 1.0,
                        sigma: multipliers.count,
                    },
                    PrivacyLoss::Gaussian {
                        sensitivity: 1.0,
                        sigma: multipliers.model,
                    },
                ],
            },
        };
        let budget = Budget {
            epsilon: epsilon(e),
            delta: Delta::positive(d).unwrap(),
        };
        let spent = Composition::of([&charge]).spent(Accountant::Rdp, &budget);
        assert!(spent.epsilon <= epsilon(e), "{spent:?}");
        assert!(spent.epsilon.value() >= e * (1.0 - 1e-5), "{spent:?}");
    }
}

#[test]
fn pure_epsilon_gives_the_count_a_hundredth_in_whole_units() {
    let (count, model) = split_epsilon(epsilon(1.0)).unwrap();
    assert_eq!((count, model), (epsilon(0.01), epsilon(0.99)));
    let smallest = Epsilon::from_units(2);
    assert_eq!(
        split_epsilon(smallest).unwrap(),
        (Epsilon::from_units(1), Epsilon::from_units(1))
    );
    assert!(matches!(
        split_epsilon(Epsilon::from_units(1)),
        Err(DpError::BelowResolution { .. })
    ));
}

/// The minimiser of J̃ for `rows` (x, y) normalised by `normaliser`, as a
/// release would solve it.
fn fit(rows: &[(Vec<f64>, f64)], normaliser: f64, lambda: f64, dims: usize) -> Array1<f64> {
    if rows.is_empty() {
        return Array1::zeros(dims);
    }
    let x = Array2::from_shape_fn((rows.len(), dims), |(i, j)| rows[i].0[j]);
    let y = Array1::from_iter(rows.iter().map(|row| row.1));
    Objective {
        x: x.view(),
        y: y.view(),
        lambda: solver_lambda(lambda, normaliser, rows.len()),
        linear: None,
        normaliser: None,
    }
    .minimise(GAMMA)
    .unwrap()
    .weights
}

/// A row of norm at most 1 (on the sphere when `edge`), label ±1.
fn row_strategy(dims: usize) -> impl Strategy<Value = (Vec<f64>, f64)> {
    (
        prop::collection::vec(-1.0f64..1.0, dims),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(x, edge, label)| {
            let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-9);
            let scale = if edge || norm > 1.0 { 1.0 / norm } else { 1.0 };
            (
                x.iter().map(|v| v * scale).collect(),
                if label { 1.0 } else { -1.0 },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// Neighbours (one person's k ≤ m rows added) at any released N̂,
    /// below, between or above both N's: the two solves differ by at
    /// most Δ = 2m/(λN̂) + 2γ/λ.
    #[test]
    fn a_person_moves_the_fit_by_at_most_the_sensitivity(
        rows in prop::collection::vec(row_strategy(3), 0..40),
        person in prop::collection::vec(row_strategy(3), 1..6),
        m_extra in 0u32..3,
        n_hat in 1.0f64..80.0,
        lambda in prop::sample::select(vec![1e-3, 1e-2, 0.1, 1.0]),
    ) {
        let m = person.len() as u32 + m_extra;
        let with: Vec<_> = rows.iter().chain(&person).cloned().collect();
        let w = fit(&rows, n_hat, lambda, 3);
        let w_prime = fit(&with, n_hat, lambda, 3);
        let moved = (&w - &w_prime).mapv(|v| v * v).sum().sqrt();
        let bound = output_sensitivity(n_hat, m, lambda, GAMMA).unwrap();
        prop_assert!(moved <= bound, "moved {moved} > Δ {bound}");
    }
}

#[test]
fn the_bound_is_within_a_small_factor_of_a_worst_neighbour() {
    // Ten rows pull w along e₁; a person of m = 5 rows pulls the other
    // way, with N̂ at N and λ large enough that every gradient is near
    // x/2: the fit moves by about a third of Δ (the logistic loss's
    // gradients are at most half the bound's 1 there), so a Δ four times
    // too small would fail the property above.
    let along = |sign: f64| (vec![sign, 0.0, 0.0], 1.0);
    let rows = vec![along(1.0); 10];
    let person = vec![along(-1.0); 5];
    let with: Vec<_> = rows.iter().chain(&person).cloned().collect();
    let (n_hat, lambda) = (10.0, 10.0);
    let moved = (&fit(&rows, n_hat, lambda, 3) - &fit(&with, n_hat, lambda, 3))
        .mapv(|v| v * v)
        .sum()
        .sqrt();
    let bound = output_sensitivity(n_hat, 5, lambda, GAMMA).unwrap();
    assert!(moved <= bound && moved >= bound / 4.0, "{moved} of {bound}");
}

/// b(w) = −(N̂/M)·Σᵢ ∇ℓᵢ(w) − N̂Λw, the only b whose perturbed objective
/// w minimises, and the log-determinant of its Jacobian, for `rows` at
/// normaliser N̂ (M = max(N̂, N)).
fn inverse(rows: &[(Vec<f64>, f64)], n_hat: f64, whole: f64, w: &[f64]) -> (Array1<f64>, f64) {
    let dims = w.len();
    let alpha = n_hat / n_hat.max(rows.len() as f64);
    let mut b = Array1::from_iter(w.iter().map(|v| -n_hat * whole * v));
    let mut jacobian = Array2::from_diag(&Array1::from_elem(dims, n_hat * whole));
    for (x, y) in rows {
        let margin: f64 = x.iter().zip(w).map(|(a, b)| a * b).sum();
        let pull = dpgate_learn::sigmoid(-y * margin);
        let curvature = dpgate_learn::sigmoid(margin) * dpgate_learn::sigmoid(-margin);
        for j in 0..dims {
            b[j] += alpha * y * pull * x[j];
            for l in 0..dims {
                jacobian[(j, l)] += alpha * curvature * x[j] * x[l];
            }
        }
    }
    dpgate_learn::cholesky_in_place(&mut jacobian).unwrap();
    let log_det = 2.0 * (0..dims).map(|j| jacobian[(j, j)].ln()).sum::<f64>();
    (b, log_det)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Objective perturbation under `user`: adding a person of k rows
    /// moves b(w) by at most 2k and the Jacobian's log-determinant by at
    /// most k·c/(N̂Λ), at any w and any N̂ below, between or above both N.
    #[test]
    fn a_person_shifts_b_by_two_k_and_the_jacobian_by_k_c_over_n_hat_lambda(
        rows in prop::collection::vec(row_strategy(3), 0..40),
        person in prop::collection::vec(row_strategy(3), 1..6),
        n_hat in 1.0f64..80.0,
        whole in prop::sample::select(vec![1e-3, 1e-2, 0.1, 1.0]),
        w in prop::collection::vec(-20.0f64..20.0, 3),
    ) {
        let k = person.len() as f64;
        let with: Vec<_> = rows.iter().chain(&person).cloned().collect();
        let (b, log_det) = inverse(&rows, n_hat, whole, &w);
        let (b_prime, log_det_prime) = inverse(&with, n_hat, whole, &w);
        let shift = (&b - &b_prime).mapv(|v| v * v).sum().sqrt();
        prop_assert!(shift <= 2.0 * k * (1.0 + 1e-12), "shift {shift} > 2k = {}", 2.0 * k);
        let jacobian = (log_det_prime - log_det).abs();
        let bound = k * crate::dp::erm::LOGISTIC_CURVATURE / (n_hat * whole);
        prop_assert!(jacobian <= bound * (1.0 + 1e-9) + 1e-12, "{jacobian} > {bound}");
    }
}

#[test]
fn reweighting_the_others_adds_to_a_persons_shift() {
    // A person of 5 rows along −e₁ against 40 rows along +e₁, N̂ between
    // N and N′, at w = 0 (every gradient ∓e₁/2): the shift is the
    // person's α′·5/2 plus the others' reweighting (1 − α′)·40/2, with
    // α′ = 42/45: over a third of 2k = 10, and more than k/2 alone.
    let along = |sign: f64| (vec![sign, 0.0, 0.0], 1.0);
    let rows = vec![along(1.0); 40];
    let person = vec![along(-1.0); 5];
    let with: Vec<_> = rows.iter().chain(&person).cloned().collect();
    let w = [0.0; 3];
    let (b, _) = inverse(&rows, 42.0, 0.1, &w);
    let (b_prime, _) = inverse(&with, 42.0, 0.1, &w);
    let shift = (&b - &b_prime).mapv(|v| v * v).sum().sqrt();
    let alpha = 42.0 / 45.0;
    assert!(
        (shift - (alpha * 2.5 + (1.0 - alpha) * 20.0)).abs() < 1e-12,
        "{shift}"
    );
    assert!(shift <= 10.0 && shift > 10.0 / 3.0, "{shift}");
}
