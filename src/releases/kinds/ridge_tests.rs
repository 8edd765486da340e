use super::*;
use crate::domain::dataset::tests::record;
use crate::dp::Delta;
use proptest::prelude::*;

fn epsilon(value: f64) -> Epsilon {
    Epsilon::new(value).unwrap()
}

const BOTH: [Learner; 2] = [Learner::Output, Learner::Objective];

#[test]
fn the_grid_reads_as_short_decimals_from_1e_minus_10_to_100() {
    let grid: Vec<f64> = grid().collect();
    assert_eq!(grid.len(), 121);
    assert_eq!((grid[0], grid[120]), (1e-10, 1e2));
    assert!(grid.windows(2).all(|pair| pair[0] < pair[1]));
    assert!(grid.contains(&2.5e-4) && grid.contains(&6.3e-7));
    assert_eq!(grid[100], 1.0);
}

#[test]
fn auto_picks_the_least_bound_and_the_largest_lambda_on_a_tie() {
    for learner in BOTH {
        let (n, dims) = (100_000, 17);
        let chosen = least_risk(learner, epsilon(1.0), Delta::ZERO, n, dims).unwrap();
        let least = risk(learner, epsilon(1.0), Delta::ZERO, n, dims, chosen).unwrap();
        for lambda in grid() {
            if let Some(other) = risk(learner, epsilon(1.0), Delta::ZERO, n, dims, lambda) {
                assert!(least <= other, "{learner:?}: λ = {lambda} beats {chosen}");
                assert!(
                    least < other || lambda <= chosen,
                    "{learner:?}: tie at {lambda}"
                );
            }
        }
    }
}

#[test]
fn auto_at_the_figures_settings_is_pinned() {
    // docs/models.md, "Choosing λ": N = 10⁶ × 32 features with an
    // intercept, ε = 1.
    let at = |learner, delta: f64| {
        auto(
            learner,
            epsilon(1.0),
            Delta::new(delta).unwrap(),
            1_000_000,
            33,
        )
        .unwrap()
    };
    assert_eq!(at(Learner::Output, 0.0), PINNED_OUTPUT);
    assert_eq!(at(Learner::Output, 1e-6), PINNED_GAUSSIAN);
    assert_eq!(at(Learner::Objective, 0.0), PINNED_OBJECTIVE);
}

const PINNED_OUTPUT: f64 = 1e-4;
const PINNED_GAUSSIAN: f64 = 8e-5;
const PINNED_OBJECTIVE: f64 = 1e-4;

#[test]
fn objective_perturbation_never_takes_a_larger_lambda_than_output_perturbation() {
    for n in [100, 1_000, 100_000, 1_000_000, 100_000_000] {
        for value in [0.1, 1.0, 10.0] {
            let at = |learner| auto(learner, epsilon(value), Delta::ZERO, n, 33).unwrap();
            let (objective, output) = (at(Learner::Objective), at(Learner::Output));
            let own = least_risk(Learner::Objective, epsilon(value), Delta::ZERO, n, 33).unwrap();
            assert_eq!(objective, own.min(output), "N = {n}, ε = {value}");
        }
    }
}

#[test]
fn auto_falls_as_n_and_epsilon_grow() {
    for learner in BOTH {
        let mut last = f64::INFINITY;
        for n in [1_000, 10_000, 100_000, 1_000_000, 10_000_000] {
            let lambda = auto(learner, epsilon(1.0), Delta::ZERO, n, 33).unwrap();
            assert!(
                lambda <= last,
                "{learner:?}: N = {n}: {lambda} after {last}"
            );
            last = lambda;
        }
        assert!(last < 1e-4, "{learner:?}: {last}");
        let mut last = f64::INFINITY;
        for value in [0.01, 0.1, 1.0, 10.0] {
            let lambda = auto(learner, epsilon(value), Delta::ZERO, 10_000, 33).unwrap();
            assert!(
                lambda <= last,
                "{learner:?}: ε = {value}: {lambda} after {last}"
            );
            last = lambda;
        }
    }
}

#[test]
fn auto_is_priced_without_reading_anything_but_n_and_the_schema() {
    // Two datasets of the same N and schema that differ in every row and
    // label are the same record to the planner: λ comes out bit-identical
    // (the API test releases on two such datasets and compares).
    let mut one = record();
    one.n_rows = 5_000;
    let mut other = record();
    other.n_rows = 5_000;
    other.stats.label_count = 1234;
    other.stats.label_feature_units = vec![17, 3];
    let knobs = Knobs {
        epsilon: epsilon(1.0),
        delta: Delta::ZERO,
        max_groups: 1,
    };
    for learner in BOTH {
        let lambda = |dataset| {
            plan(learner, dataset, &api::Lambda::Auto, true, &knobs)
                .unwrap()
                .price()
                .noise
                .lambda
                .unwrap()
        };
        assert_eq!(lambda(&one).to_bits(), lambda(&other).to_bits());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Wherever `auto` answers, the release it prices can be made: never
    /// below the certified solver's floor, never a lattice too coarse.
    #[test]
    fn auto_never_goes_below_the_certified_floor(
        n in 1u64..100_000_000,
        dims in 2usize..120,
        log_epsilon in -2.0f64..1.5,
        gaussian in any::<bool>(),
        objective in any::<bool>(),
    ) {
        let epsilon = epsilon(10f64.powf(log_epsilon));
        let delta = if gaussian && !objective { Delta::new(1e-6).unwrap() } else { Delta::ZERO };
        let learner = if objective { Learner::Objective } else { Learner::Output };
        if let Ok(lambda) = auto(learner, epsilon, delta, n, dims) {
            prop_assert!(risk(learner, epsilon, delta, n, dims, lambda).is_some());
            match learner {
                Learner::Output => {
                    prop_assert!(model::certifiable(dims, n, lambda, 0.0).is_ok());
                    prop_assert!(model::output_mechanism(epsilon, delta, n, lambda, dims).is_ok());
                }
                Learner::Objective => {
                    let plan = ObjectivePlan::new(epsilon, n, lambda, dims).unwrap();
                    let whole = lambda + plan.params.extra_regulariser;
                    prop_assert!(model::certifiable(dims, n, whole, plan.params.linear_bound).is_ok());
                }
            }
        }
    }
}
