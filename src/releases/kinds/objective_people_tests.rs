use super::*;
use ndarray::{Array1, Array2};
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;

fn epsilon(value: f64) -> Epsilon {
    Epsilon::new(value).unwrap()
}

#[test]
fn the_normalisers_are_sixteen_steps_a_doubling_from_one_to_the_largest_dataset() {
    let all: Vec<f64> = normalisers().collect();
    assert_eq!(all.len(), 36 * 16 + 1);
    assert_eq!(all[0], 1.0);
    assert_eq!(all[16], 2.0);
    assert_eq!(*all.last().unwrap(), MAX_ROWS as f64);
    assert!(all.windows(2).all(|pair| pair[0] < pair[1]));
}

#[test]
fn the_noisy_count_is_rounded_down_onto_the_grid() {
    for noisy in [1.0, 1.5, 1234.5, 1e6, 3e9] {
        let normaliser = on_grid(noisy, 1.0);
        assert!(normaliser <= noisy, "{noisy}: {normaliser}");
        assert!(
            normaliser * 2f64.powf(1.0 / 16.0) > noisy,
            "{noisy}: {normaliser}"
        );
        assert!(normalisers().any(|step| step == normaliser));
    }
    assert_eq!(on_grid(1024.0, 1.0), 1024.0);
    assert_eq!(on_grid(-40.0, 1.0), 1.0);
    assert_eq!(on_grid(f64::NAN, 1.0), 1.0);
    assert_eq!(on_grid(1e30, 1.0), MAX_ROWS as f64);
    // Raised to the request's floor.
    assert_eq!(on_grid(1024.0, 4096.0), 4096.0);
    assert_eq!(on_grid(1e6, 4096.0), on_grid(1e6, 1.0));
}

#[test]
fn a_small_noisy_count_is_raised_to_where_the_weights_can_be_noised() {
    // m = 20 rows a person in 17 dimensions: at N̂ = 1, ‖b‖/N̂ reaches
    // about 4,300 and the weights 86, too wide for a lattice fine enough
    // for the output noise that covers γ; from the floor up every
    // normaliser can be released.
    let rest = epsilon(0.99);
    let (floor, widest) = releasable_from(rest, 20, 1e2, 17).unwrap();
    assert!(floor > 1.0, "{floor}");
    assert!(
        at(rest, 1.0, 20, 1e2, 17)
            .unwrap_err()
            .contains("too large to release")
    );
    let below = floor / 2f64.powf(1.0 / 16.0);
    assert!(at(rest, below, 20, 1e2, 17).is_err(), "{below}");
    assert!(
        normalisers()
            .filter(|&normaliser| normaliser >= floor)
            .all(|normaliser| at(rest, normaliser, 20, 1e2, 17).is_ok())
    );
    assert_eq!(
        widest.neighbours,
        Neighbours::People {
            normaliser: floor,
            rows_per_user: 20
        }
    );
    // With few enough rows a person the floor is N̂ = 1; a λ the solver
    // cannot certify even at 2³⁶ has none.
    assert_eq!(releasable_from(rest, 5, 0.1, 3).unwrap().0, 1.0);
    let refused = releasable_from(rest, 5, 1e-11, 17).unwrap_err();
    assert!(refused.contains("raise lambda"), "{refused}");
}

#[test]
fn a_lambda_is_checked_at_every_normaliser_against_the_solvers_floor() {
    let rest = epsilon(0.99);
    for normaliser in normalisers().step_by(37) {
        let plan = at(rest, normaliser, 5, 1e-3, 17).unwrap();
        assert_eq!(
            plan.neighbours,
            Neighbours::People {
                normaliser,
                rows_per_user: 5
            }
        );
        assert!(plan.params.epsilon_prime >= plan.params.epsilon_objective / 2.0);
    }
    // At N̂ = 1 the extra regulariser holds the Jacobian's term to ε_p/2;
    // b's noise is then the widest it can be.
    let widest = at(rest, 1.0, 5, 1e-3, 17).unwrap();
    assert_eq!(
        widest.params.epsilon_prime,
        widest.params.epsilon_objective / 2.0
    );
    let large = at(rest, 1e6, 5, 1e-3, 17).unwrap();
    assert!(large.params.b_scale < widest.params.b_scale);
    assert_eq!(large.params.extra_regulariser, 0.0);
    // Below the certified solver's floor for the most rows a fit can
    // hold, where N̂ is too large for Δ to lift it (at N̂ = 10⁶ Δ does).
    assert!(
        at(rest, 1e6, 5, 1e-11, 17)
            .unwrap()
            .params
            .extra_regulariser
            > 1e-6
    );
    let refused = at(rest, MAX_ROWS as f64, 5, 1e-11, 17).unwrap_err();
    assert!(refused.contains("raise lambda"), "{refused}");
    assert!(at(rest, 1e6, 5, 0.0, 17).is_err());
}

/// `rows` random rows of norm at most 1, labels ±1 from a fixed model.
fn design(rows: usize, seed: u64) -> model::Design {
    let data = dpgate_learn::synthetic::logistic_data(rows, 3, seed);
    model::Design {
        x: data.x.mapv(|value| (value - 0.5) * 2.0 / 3f64.sqrt()),
        y: Array1::from_iter(data.y.iter().map(|&label| 2.0 * f64::from(label) - 1.0)),
        fit_intercept: false,
    }
}

/// ‖∇F(w)‖ for F(w) = (1/M)·Σℓᵢ(w) + (Λ/2)‖w‖² + (1/N̂)·bᵀw.
fn gradient_norm(
    design: &model::Design,
    n_hat: f64,
    whole: f64,
    b: &Array1<f64>,
    w: &Array1<f64>,
) -> f64 {
    let most = n_hat.max(design.y.len() as f64);
    let mut gradient = w * whole + b / n_hat;
    for (x, &y) in design.x.rows().into_iter().zip(&design.y) {
        let pull = dpgate_learn::sigmoid(-y * x.dot(w));
        gradient.scaled_add(-y * pull / most, &x);
    }
    gradient.dot(&gradient).sqrt()
}

#[test]
fn the_solve_minimises_the_loss_over_max_n_hat_n_and_b_over_n_hat() {
    let rest = epsilon(0.99);
    for (rows, n_hat) in [(3000, 1024.0), (3000, 8192.0), (0, 64.0)] {
        let design = design(rows, 4);
        let plan = at(rest, n_hat, 5, 1e-2, 3).unwrap();
        let w = plan
            .solve_perturbed(&design, &mut ChaCha8Rng::seed_from_u64(7))
            .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let b = Array1::from(crate::dp::norm_gamma_continuous(
            3,
            plan.params.b_scale,
            &mut rng,
        ));
        let norm = gradient_norm(&design, n_hat, plan.whole_lambda(), &b, &w);
        assert!(norm < 1e-9, "N = {rows}, N̂ = {n_hat}: ‖∇F‖ = {norm:e}");
    }
}

#[test]
fn an_empty_design_gives_minus_b_over_n_hat_lambda() {
    let plan = at(epsilon(0.99), 64.0, 5, 1e-2, 3).unwrap();
    let empty = model::Design {
        x: Array2::zeros((0, 3)),
        y: Array1::zeros(0),
        fit_intercept: false,
    };
    let w = plan
        .solve_perturbed(&empty, &mut ChaCha8Rng::seed_from_u64(11))
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let b = Array1::from(crate::dp::norm_gamma_continuous(
        3,
        plan.params.b_scale,
        &mut rng,
    ));
    for (weight, noise) in w.iter().zip(&b) {
        let exact = -noise / (64.0 * plan.whole_lambda());
        assert!(
            (weight - exact).abs() <= 1e-15 * exact.abs(),
            "{weight} vs {exact}"
        );
    }
}
