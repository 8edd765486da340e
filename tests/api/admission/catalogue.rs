//! One request for every release kind and every path through pricing:
//! each learner, the gradient's single call and session, WALR on its
//! stored features, on supplied ones and on each feature map, and the
//! requests that name a target noise instead of ε.

use dpgate_client::types::{
    AggregateMechanism, AggregateParams, DpGdParams, DpSgdParams, FrankWolfeParams, GradientLoss,
    GradientMechanism, GradientParams, Iterate, Lambda, ObjectivePerturbationParams,
    OutputPerturbationParams, ProjectionParams, ReleaseParams, ReleaseRequest, Seed, Selection,
    SuppliedRow, WalrMap, WalrParams, WarmStart,
};

use super::{model, walr};

/// A release request and what making it reads.
pub struct Case {
    pub name: &'static str,
    pub request: ReleaseRequest,
    /// Whether making it reads labels, measures or rows (opening a
    /// gradient session and WALR over the stored features on the identity
    /// map, which is made from sums kept at upload, do not).
    pub reads: bool,
    /// Whether it needs the rows in memory (DP-SGD, whose batches are
    /// sampled rows): refused as invalid input without a snapshot cache.
    /// The other learners pass over the files when none is held.
    pub in_memory: bool,
}

fn case(name: &'static str, request: ReleaseRequest) -> Case {
    Case {
        name,
        request,
        reads: true,
        in_memory: false,
    }
}

fn held(name: &'static str, request: ReleaseRequest) -> Case {
    Case {
        in_memory: true,
        ..case(name, request)
    }
}

fn request(epsilon: Option<f64>, delta: Option<f64>, params: ReleaseParams) -> ReleaseRequest {
    ReleaseRequest {
        epsilon,
        delta,
        params,
    }
}

fn aggregate(
    statistics: &[&str],
    mechanism: AggregateMechanism,
    target_std: Option<f64>,
) -> ReleaseParams {
    ReleaseParams::Aggregate(AggregateParams {
        statistics: statistics.iter().map(|&s| s.to_owned()).collect(),
        group_by: vec!["campaign".to_owned()],
        mechanism,
        target_std,
    })
}

fn mapped(map: Option<WalrMap>, target_sigma: Option<f64>) -> ReleaseParams {
    ReleaseParams::Walr(WalrParams {
        map,
        target_sigma,
        ..WalrParams::default()
    })
}

/// Vectors supplied for rows r1, r2, r3 (unit `label` only).
pub fn supplied() -> ReleaseParams {
    let rows = ["r1", "r2", "r3"].map(|id| SuppliedRow {
        row_id: id.to_owned(),
        x: vec![0.5, 0.25],
    });
    ReleaseParams::Walr(WalrParams {
        features: Some(rows.to_vec()),
        ..WalrParams::default()
    })
}

fn dp_gd(theta0: Option<WarmStart>) -> ReleaseParams {
    ReleaseParams::DpGd(DpGdParams {
        steps: 20,
        learning_rate: 1.0,
        clip: 1.0,
        lambda: 0.0,
        fit_intercept: true,
        theta0,
        radius: None,
        output: Iterate::Last,
    })
}

fn dp_sgd(projection: Option<ProjectionParams>) -> ReleaseParams {
    ReleaseParams::DpSgd(DpSgdParams {
        batch_size: 64,
        learning_rate: 1.0,
        lambda: 1e-4,
        clip: 1.0,
        epochs: 1,
        fit_intercept: true,
        projection,
    })
}

/// Frank-Wolfe on the measure, over `sources` too.
pub fn frank_wolfe(sources: Vec<uuid::Uuid>) -> ReleaseRequest {
    request(
        Some(0.5),
        Some(1e-7),
        ReleaseParams::FrankWolfe(FrankWolfeParams {
            target: "measure:value".to_owned(),
            radius: 1.0,
            steps: 10,
            fit_intercept: true,
            selection: Selection::Laplace,
            sources,
            debias: None,
        }),
    )
}

/// A gradient release: one call at `theta`, or a session of `calls`.
pub fn gradient(theta: Option<Vec<f64>>, calls: Option<u32>) -> ReleaseRequest {
    request(
        Some(0.5),
        Some(1e-7),
        ReleaseParams::Gradient(GradientParams {
            loss: GradientLoss::Logistic,
            target: "label".to_owned(),
            label_values: None,
            clip: 1.0,
            fit_intercept: true,
            mechanism: GradientMechanism::Gaussian,
            theta,
            calls,
        }),
    )
}

/// Every case that `unit` allows.
pub fn every_release(unit: &str) -> Vec<Case> {
    use AggregateMechanism::Gaussian;
    let (some, delta) = (Some(0.5), Some(1e-7));
    let mut cases = vec![
        Case {
            reads: false,
            ..case("walr", walr(0.5))
        },
        // No map: the default, `auto`, which passes over the rows.
        case("walr default map", request(some, delta, mapped(None, None))),
        case(
            "walr map centre",
            request(some, delta, mapped(Some(WalrMap::Centre), None)),
        ),
        case(
            "walr map auto",
            request(some, delta, mapped(Some(WalrMap::Auto), None)),
        ),
        Case {
            reads: false,
            ..case(
                "walr target_sigma",
                request(None, delta, mapped(Some(WalrMap::None), Some(0.05))),
            )
        },
        case(
            "walr map auto target_sigma",
            request(None, delta, mapped(Some(WalrMap::Auto), Some(1.0))),
        ),
        case(
            "aggregate",
            request(
                some,
                delta,
                aggregate(&["sum:value", "mean:converted"], Gaussian, None),
            ),
        ),
        case(
            "aggregate laplace",
            request(
                some,
                None,
                aggregate(
                    &["count", "sum:converted"],
                    AggregateMechanism::Laplace,
                    None,
                ),
            ),
        ),
        case(
            "aggregate target_std",
            request(
                None,
                delta,
                aggregate(&["count", "sum:value"], Gaussian, Some(500.0)),
            ),
        ),
        case("output perturbation", model(0.5)),
        case(
            "output perturbation auto",
            request(
                some,
                delta,
                ReleaseParams::OutputPerturbation(OutputPerturbationParams {
                    lambda: Lambda::Auto,
                    fit_intercept: true,
                }),
            ),
        ),
        case(
            "objective perturbation select",
            request(
                some,
                None,
                ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                    lambda: Lambda::Select(vec![1e-1, 1e-3]),
                    fit_intercept: true,
                }),
            ),
        ),
        case(
            "objective perturbation",
            request(
                some,
                None,
                ReleaseParams::ObjectivePerturbation(ObjectivePerturbationParams {
                    lambda: Lambda::Fixed(0.01),
                    fit_intercept: true,
                }),
            ),
        ),
        case("dp-gd", request(some, delta, dp_gd(None))),
        case(
            "dp-gd warm start",
            request(
                some,
                delta,
                dp_gd(Some(WarmStart {
                    weights: vec![0.5, -0.1],
                    intercept: 0.2,
                })),
            ),
        ),
        held("dp-sgd", request(some, None, dp_sgd(None))),
        held(
            "dp-sgd projected",
            request(
                some,
                None,
                dp_sgd(Some(ProjectionParams {
                    dims: 1,
                    seed: Some(Seed(7)),
                })),
            ),
        ),
        case("frank-wolfe", frank_wolfe(Vec::new())),
        case("gradient", gradient(Some(vec![0.1, -0.2, 0.3]), None)),
        Case {
            reads: false,
            ..case("gradient session", gradient(None, Some(10)))
        },
    ];
    if unit == "label" {
        cases.push(case("supplied walr", request(some, delta, supplied())));
    }
    cases
}
