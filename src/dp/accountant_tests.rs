use super::*;
use crate::dp::reference;
use crate::dp::{analytic_sigma, gaussian_epsilon};
use proptest::prelude::*;

fn budget(epsilon: f64, delta: f64) -> Budget {
    Budget {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::positive(delta).unwrap(),
    }
}

/// A Gaussian release of sensitivity 1 calibrated to (ε, δ).
fn gaussian(epsilon: f64, delta: f64) -> Charge {
    Charge {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(delta).unwrap(),
        loss: PrivacyLoss::Gaussian {
            sensitivity: 1.0,
            sigma: analytic_sigma(epsilon, delta, 1.0).unwrap(),
        },
    }
}

fn pure(epsilon: f64) -> Charge {
    Charge {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::ZERO,
        loss: PrivacyLoss::PureEpsilon { epsilon },
    }
}

/// An ε-bounded-range release (an exponential-mechanism selection).
fn bounded_range(epsilon: f64) -> Charge {
    Charge {
        loss: PrivacyLoss::BoundedRange { epsilon },
        ..pure(epsilon)
    }
}

#[test]
fn ten_releases_of_a_tenth_fit_a_basic_budget_of_one_and_the_eleventh_is_refused() {
    let total = budget(1.0, 1e-6);
    let mut ledger = Composition::default();
    for release in 0..10 {
        match ledger.admits(&pure(0.1), Accountant::Basic, &total) {
            Decision::Admit(_) => ledger.push(&pure(0.1)),
            Decision::Refuse(spent) => panic!("release {release} refused: {spent:?}"),
        }
    }
    assert_eq!(
        ledger.spent(Accountant::Basic, &total).epsilon,
        total.epsilon
    );
    assert!(matches!(
        ledger.admits(&pure(0.1), Accountant::Basic, &total),
        Decision::Refuse(spent) if spent.epsilon == Epsilon::new(1.1).unwrap()
    ));
    // Ten pure releases convert through RDP to less than their sum.
    let rdp = ledger.spent(Accountant::Rdp, &total).epsilon;
    assert!(rdp < total.epsilon, "rdp spent {rdp:?}");
}

#[test]
fn a_single_release_of_the_whole_budget_fits_under_both_accountants() {
    let total = budget(1.0, 1e-6);
    for accountant in [Accountant::Basic, Accountant::Rdp] {
        let decision = Composition::default().admits(&gaussian(1.0, 1e-6), accountant, &total);
        assert!(matches!(decision, Decision::Admit(_)), "{accountant:?}");
    }
}

#[test]
fn a_hundred_gaussian_releases_compose_exactly_under_rdp() {
    let reference = reference::load();
    let expected = reference
        .gaussian_epsilon
        .iter()
        .find(|point| point.name.as_deref() == Some("100_releases"))
        .expect("the reference has the 100-release point");
    let total = budget(100.0, 1e-5);
    let ledger = Composition::of(&vec![gaussian(0.1, 1e-7); 100]);

    let rdp = ledger.spent(Accountant::Rdp, &total);
    assert_eq!(rdp.epsilon, Epsilon::ceil(expected.epsilon));
    assert!((0.8937..0.8938).contains(&rdp.epsilon.value()));
    assert_eq!(rdp.delta, total.delta);

    let basic = ledger.spent(Accountant::Basic, &total);
    assert_eq!(basic.epsilon, Epsilon::new(10.0).unwrap());
    assert_eq!(basic.delta, Delta::new(1e-5).unwrap());
    assert_eq!(
        (rdp.epsilon_basic, rdp.delta_basic),
        (basic.epsilon, basic.delta)
    );
}

#[test]
fn a_mixed_ledger_is_measured_by_its_rdp_curve() {
    let case = reference::load()
        .rdp_to_epsilon
        .into_iter()
        .find(|case| case.name == "mixed")
        .expect("the reference has the mixed ledger");
    let mut charges = vec![
        Charge {
            epsilon: Epsilon::new(2.0).unwrap(),
            delta: Delta::new(1e-7).unwrap(),
            loss: PrivacyLoss::Gaussian {
                sensitivity: 0.2,
                sigma: 1.0,
            },
        };
        5
    ];
    charges.extend(vec![pure(0.5); 3]);
    let spent = spent(&charges, Accountant::Rdp, &budget(20.0, case.delta));
    assert_eq!(spent.epsilon, Epsilon::ceil(case.epsilon));
    assert_eq!(spent.epsilon_basic, Epsilon::new(11.5).unwrap());
}

#[test]
fn bounded_range_steps_compose_below_pure_ones_and_one_costs_at_most_its_epsilon() {
    let total = budget(1000.0, 1e-6);
    // Frank-Wolfe's fifty selections at LEARNERS.md's per-step ε.
    for (each, steps) in [(0.0325, 50), (0.0624, 50), (0.01, 1000)] {
        let rdp = |charge: Charge| {
            Composition::of(&vec![charge; steps])
                .spent(Accountant::Rdp, &total)
                .epsilon
        };
        // A quarter of the RDP curve: about half the ε.
        let (bounded, pure_steps) = (rdp(bounded_range(each)), rdp(pure(each)));
        assert!(
            bounded.value() < 0.55 * pure_steps.value(),
            "{steps} × {each}: bounded range {bounded:?}, pure {pure_steps:?}"
        );
    }
    // The exponential selection's calibration: 50 steps of 0.0624 fit ε = 1
    // where pure steps of that size would not.
    let fifty = |charge: Charge| Composition::of(&vec![charge; 50]);
    let one = budget(1.0, 1e-6);
    assert!(
        fifty(bounded_range(0.0624))
            .spent(Accountant::Rdp, &one)
            .epsilon
            <= one.epsilon
    );
    assert!(fifty(pure(0.0624)).spent(Accountant::Rdp, &one).epsilon > one.epsilon);
    for epsilon in [1e-3, 0.1, 1.0, 5.0, 30.0] {
        let single = Composition::of(&[bounded_range(epsilon)]);
        for accountant in [Accountant::Basic, Accountant::Rdp] {
            let spent = single.spent(accountant, &total).epsilon;
            assert!(
                spent <= Epsilon::new(epsilon).unwrap(),
                "{epsilon}: {spent:?}"
            );
        }
        assert_eq!(bounded_range(epsilon).loss.gaussian_mu_squared(), None);
    }
}

#[test]
fn an_empty_ledger_has_spent_nothing() {
    for accountant in [Accountant::Basic, Accountant::Rdp] {
        let spent = Composition::default().spent(accountant, &budget(1.0, 1e-6));
        assert_eq!(spent.epsilon, Epsilon::ZERO);
        assert_eq!(spent.delta, Delta::ZERO);
    }
}

#[test]
fn basic_composition_also_caps_delta() {
    let total = budget(10.0, 1e-6);
    let ledger = Composition::of(&vec![gaussian(0.5, 4e-7); 2]);
    assert!(matches!(
        ledger.admits(&gaussian(0.5, 4e-7), Accountant::Basic, &total),
        Decision::Refuse(spent) if spent.delta_basic == Delta::new(1.2e-6).unwrap()
    ));
    // Under RDP the per-release δ does not add up: the noise does.
    assert!(matches!(
        ledger.admits(&gaussian(0.5, 4e-7), Accountant::Rdp, &total),
        Decision::Admit(_)
    ));
}

#[test]
fn stored_descriptions_keep_their_json_shape() {
    let loss = PrivacyLoss::Composition {
        count: 3,
        each: Box::new(PrivacyLoss::Laplace {
            sensitivity: 2.0,
            scale: 4.0,
            grid: 0.5,
        }),
    };
    let json = serde_json::to_string(&loss).unwrap();
    assert_eq!(
        json,
        r#"{"mechanism":"composition","count":3,"each":{"mechanism":"laplace","sensitivity":2.0,"scale":4.0,"grid":0.5}}"#
    );
    assert_eq!(serde_json::from_str::<PrivacyLoss>(&json).unwrap(), loss);
    let selection = PrivacyLoss::BoundedRange { epsilon: 0.0625 };
    let json = serde_json::to_string(&selection).unwrap();
    assert_eq!(json, r#"{"mechanism":"bounded_range","epsilon":0.0625}"#);
    assert_eq!(
        serde_json::from_str::<PrivacyLoss>(&json).unwrap(),
        selection
    );
}

#[test]
fn malformed_descriptions_are_refused() {
    let bad = [
        PrivacyLoss::Gaussian {
            sensitivity: 1.0,
            sigma: 0.0,
        },
        PrivacyLoss::Gaussian {
            sensitivity: f64::NAN,
            sigma: 1.0,
        },
        PrivacyLoss::Laplace {
            sensitivity: 1.0,
            scale: 1.0,
            grid: -1.0,
        },
        PrivacyLoss::PureEpsilon {
            epsilon: f64::INFINITY,
        },
        PrivacyLoss::BoundedRange { epsilon: 0.0 },
        PrivacyLoss::BoundedRange { epsilon: f64::NAN },
        PrivacyLoss::Composition {
            count: 0,
            each: Box::new(PrivacyLoss::PureEpsilon { epsilon: 1.0 }),
        },
        PrivacyLoss::Sequence { parts: Vec::new() },
        PrivacyLoss::Sequence {
            parts: vec![
                PrivacyLoss::PureEpsilon { epsilon: 1.0 },
                PrivacyLoss::BoundedRange { epsilon: -1.0 },
            ],
        },
    ];
    for loss in bad {
        assert!(loss.validate().is_err(), "{loss:?}");
    }
    assert!(PrivacyLoss::PureEpsilon { epsilon: 1.0 }.validate().is_ok());
    assert!(
        PrivacyLoss::BoundedRange { epsilon: 1.0 }
            .validate()
            .is_ok()
    );
}

#[test]
fn a_sequence_composes_its_parts_as_separate_charges_would() {
    let total = budget(100.0, 1e-6);
    let parts = [
        PrivacyLoss::Composition {
            count: 30,
            each: Box::new(PrivacyLoss::BoundedRange { epsilon: 0.05 }),
        },
        PrivacyLoss::Gaussian {
            sensitivity: 1.0,
            sigma: 3.0,
        },
        PrivacyLoss::PureEpsilon { epsilon: 0.2 },
    ];
    let charge = |loss: PrivacyLoss, epsilon: f64| Charge {
        epsilon: Epsilon::new(epsilon).unwrap(),
        delta: Delta::new(1e-7).unwrap(),
        loss,
    };
    let one = Composition::of([&charge(
        PrivacyLoss::Sequence {
            parts: parts.to_vec(),
        },
        3.0,
    )]);
    let separate: Vec<Charge> = parts.iter().map(|part| charge(part.clone(), 1.0)).collect();
    let apart = Composition::of(&separate);
    let (one, apart) = (
        one.spent(Accountant::Rdp, &total),
        apart.spent(Accountant::Rdp, &total),
    );
    assert_eq!(one.epsilon, apart.epsilon);
    assert!(one.epsilon < Epsilon::new(3.0).unwrap());
    // Gaussian parts alone keep the exact Gaussian composition.
    let gaussians = PrivacyLoss::Sequence {
        parts: vec![parts[1].clone(), parts[1].clone()],
    };
    let mu = (2.0f64).sqrt() / 3.0;
    let spent = Composition::of([&charge(gaussians, 10.0)]).spent(Accountant::Rdp, &total);
    let exact = crate::dp::gaussian_epsilon(mu, 1e-6);
    assert!(
        (spent.epsilon.value() - exact).abs() <= 1e-9,
        "{spent:?} vs {exact}"
    );
    let json = serde_json::to_string(&PrivacyLoss::Sequence {
        parts: vec![PrivacyLoss::PureEpsilon { epsilon: 0.5 }],
    })
    .unwrap();
    assert_eq!(
        json,
        r#"{"mechanism":"sequence","parts":[{"mechanism":"pure_epsilon","epsilon":0.5}]}"#
    );
}

#[test]
fn parallel_parts_cost_what_the_costliest_part_costs() {
    let total = budget(100.0, 1e-6);
    // A nominal ε of 10: basic composition never the tightest here.
    let spent = |loss: PrivacyLoss| {
        let charge = Charge {
            epsilon: Epsilon::new(10.0).unwrap(),
            delta: Delta::new(1e-7).unwrap(),
            loss,
        };
        Composition::of([&charge])
            .spent(Accountant::Rdp, &total)
            .epsilon
    };
    let costly = PrivacyLoss::Sequence {
        parts: vec![PrivacyLoss::PureEpsilon { epsilon: 0.25 }; 4],
    };
    let cheap = PrivacyLoss::Gaussian {
        sensitivity: 1.0,
        sigma: 8.0,
    };
    let parallel = PrivacyLoss::Parallel {
        parts: vec![costly.clone(), cheap.clone()],
    };
    // The larger curve converts at its own best order: at least what
    // either part would cost alone, less than both in sequence.
    let both = PrivacyLoss::Sequence {
        parts: vec![costly.clone(), cheap.clone()],
    };
    assert!(spent(parallel.clone()) >= spent(costly.clone()));
    assert!(spent(parallel.clone()) >= spent(cheap.clone()));
    assert!(spent(parallel.clone()) < spent(both));
    // Order by order, the larger curve: never below either part's.
    let curve = parallel.rdp();
    for (bound, (a, b)) in curve
        .bounds()
        .iter()
        .zip(costly.rdp().bounds().iter().zip(cheap.rdp().bounds()))
    {
        assert_eq!(*bound, a.max(*b));
    }
    // Gaussian parts alone: the largest μ, exactly.
    let gaussians = PrivacyLoss::Parallel {
        parts: vec![
            cheap.clone(),
            PrivacyLoss::Gaussian {
                sensitivity: 1.0,
                sigma: 3.0,
            },
        ],
    };
    let exact = crate::dp::gaussian_epsilon(1.0 / 3.0, 1e-6);
    assert!((spent(gaussians).value() - exact).abs() <= 1e-9);
    assert!(PrivacyLoss::Parallel { parts: vec![] }.validate().is_err());
    assert_eq!(
        serde_json::to_string(&PrivacyLoss::Parallel {
            parts: vec![PrivacyLoss::PureEpsilon { epsilon: 0.5 }],
        })
        .unwrap(),
        r#"{"mechanism":"parallel","parts":[{"mechanism":"pure_epsilon","epsilon":0.5}]}"#
    );
}

fn any_charge() -> impl Strategy<Value = Charge> {
    prop_oneof![
        (1e-3f64..5.0, 1e-10f64..1e-6).prop_map(|(epsilon, delta)| gaussian(epsilon, delta)),
        (1e-3f64..5.0).prop_map(pure),
        (1e-3f64..5.0).prop_map(bounded_range),
        (1e-3f64..5.0, 1u32..20).prop_map(|(epsilon, scale)| Charge {
            epsilon: Epsilon::new(epsilon).unwrap(),
            delta: Delta::ZERO,
            loss: PrivacyLoss::Laplace {
                sensitivity: epsilon * f64::from(scale),
                scale: f64::from(scale),
                grid: 1.0,
            },
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn spent_epsilon_never_decreases_when_a_release_is_added(charges in prop::collection::vec(any_charge(), 1..30)) {
        let total = budget(1000.0, 1e-5);
        for accountant in [Accountant::Basic, Accountant::Rdp] {
            let mut ledger = Composition::default();
            let mut before = ledger.spent(accountant, &total);
            for charge in &charges {
                ledger.push(charge);
                let after = ledger.spent(accountant, &total);
                prop_assert!(after.epsilon >= before.epsilon, "{accountant:?}: {after:?} < {before:?}");
                prop_assert!(after.epsilon_basic >= before.epsilon_basic);
                prop_assert!(after.delta_basic >= before.delta_basic);
                before = after;
            }
        }
    }

    #[test]
    fn exact_gaussian_composition_beats_rdp_and_basic(releases in prop::collection::vec((1e-3f64..3.0, 1e-10f64..1e-7), 1..40)) {
        let delta_total = 1e-5;
        let charges: Vec<Charge> = releases.iter().map(|&(e, d)| gaussian(e, d)).collect();
        let mut curve = RdpCurve::zero();
        let mut mu_squared = 0.0;
        for charge in &charges {
            curve.add(&charge.loss.rdp());
            if let PrivacyLoss::Gaussian { sensitivity, sigma } = charge.loss {
                mu_squared += (sensitivity / sigma).powi(2);
            }
        }
        let exact = gaussian_epsilon(mu_squared.sqrt(), delta_total);
        let basic: f64 = charges.iter().map(|charge| charge.epsilon.value()).sum();
        prop_assert!(exact <= curve.epsilon(delta_total) * (1.0 + 1e-9));
        prop_assert!(exact <= basic * (1.0 + 1e-9), "exact {exact} > basic {basic}");
        let reported = spent(&charges, Accountant::Rdp, &budget(1000.0, delta_total));
        prop_assert!(reported.epsilon <= reported.epsilon_basic);
    }
}

#[test]
fn a_composition_survives_storage_exactly() {
    let ledger = Composition::of(&[gaussian(0.3, 1e-7), pure(0.25), gaussian(1.0, 1e-9)]);
    let json = serde_json::to_string(&ledger).unwrap();
    let back: Composition = serde_json::from_str(&json).unwrap();
    assert_eq!(back, ledger);
    assert!(
        json.contains(r#""delta_basic":"101000000000000000000000""#),
        "{json}"
    );
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    value["rdp"] = serde_json::json!([0.5, 1.0]);
    let short = serde_json::from_value::<Composition>(value).unwrap_err();
    assert!(short.to_string().contains("125 bounds"), "{short}");
}

#[test]
fn the_privacy_profile_of_a_hundred_gaussians_is_exact_composition_at_every_delta() {
    let ledger = Composition::of(&vec![gaussian(0.1, 1e-7); 100]);
    let mu = 10.0 / analytic_sigma(0.1, 1e-7, 1.0).unwrap();
    for delta in [1e-12, 1e-9, 1e-6, 1e-5, 1e-3] {
        let at = ledger
            .epsilon_at(Accountant::Rdp, Delta::new(delta).unwrap())
            .unwrap();
        assert_eq!(
            at,
            Epsilon::ceil(gaussian_epsilon(mu, delta)),
            "δ = {delta}"
        );
    }
    // Σδᵢ = 10⁻⁵: from there on basic composition claims ε = 10, not below.
    let basic = |delta: f64| ledger.epsilon_at(Accountant::Basic, Delta::new(delta).unwrap());
    assert_eq!(basic(1e-5), Some(Epsilon::new(10.0).unwrap()));
    assert_eq!(basic(1e-2), Some(Epsilon::new(10.0).unwrap()));
    assert_eq!(basic(9.99e-6), None);
    // No finite ε at δ = 0 for Gaussian noise; pure releases keep their sum.
    assert_eq!(ledger.epsilon_at(Accountant::Rdp, Delta::ZERO), None);
    let pure_ledger = Composition::of(&[pure(0.25), bounded_range(0.5)]);
    assert_eq!(
        pure_ledger.epsilon_at(Accountant::Rdp, Delta::ZERO),
        Some(Epsilon::new(0.75).unwrap())
    );
    assert_eq!(
        Composition::default().epsilon_at(Accountant::Basic, Delta::ZERO),
        Some(Epsilon::ZERO)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_profile_passes_through_spent_and_falls_as_delta_grows(charges in prop::collection::vec(any_charge(), 1..20)) {
        let ledger = Composition::of(&charges);
        for delta in [1e-9, 1e-6, 1e-5] {
            let total = budget(1000.0, delta);
            let at_budget = ledger.epsilon_at(Accountant::Rdp, total.delta);
            prop_assert_eq!(at_budget, Some(ledger.spent(Accountant::Rdp, &total).epsilon));
            let basic = ledger.spent(Accountant::Basic, &total);
            if basic.delta_basic <= total.delta {
                prop_assert_eq!(ledger.epsilon_at(Accountant::Basic, total.delta), Some(basic.epsilon));
            }
        }
        let mut previous = None;
        for exponent in -12..0 {
            let delta = Delta::new(10f64.powi(exponent)).unwrap();
            let at = ledger.epsilon_at(Accountant::Rdp, delta).unwrap();
            if let Some(previous) = previous {
                prop_assert!(at <= previous, "ε({delta:?}) = {at:?} > {previous:?}");
            }
            previous = Some(at);
        }
    }
}
