//! Aggregate releases end to end: exact public statistics, noisy private
//! ones with their std, the price of a dry run, the ledger.

use dpgate_client::ReleaseOptions;
use dpgate_client::UploadFormat;
use dpgate_client::types::{
    AggregateMechanism, AggregateParams, Dataset, Release, ReleaseParams, ReleaseRequest,
    ReleaseResult,
};
use rstest::rstest;

use crate::helpers::{Backend, TestApp, ads_dataset, ads_rows, dry_run, spawn_app, unavailable};

/// "ads" under unit `label` and "rows" under unit `row`, on the ledgers
/// (accounting, ε) given, each holding `n` rows of the ads schema.
async fn both_units(app: &TestApp, [label, row]: [(&str, f64); 2], n: usize) -> (Dataset, Dataset) {
    let labelled = app
        .dataset(ads_dataset("ads", "label", label.0, label.1))
        .await;
    let rows = app.dataset(ads_dataset("rows", "row", row.0, row.1)).await;
    for dataset in [&labelled, &rows] {
        app.admin
            .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, n))
            .await
            .unwrap();
    }
    (labelled, rows)
}

fn aggregate(statistics: &[&str], group_by: &[&str], delta: Option<f64>) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(1.0),
        delta,
        params: ReleaseParams::Aggregate(AggregateParams {
            statistics: statistics.iter().map(|&s| s.to_owned()).collect(),
            group_by: group_by.iter().map(|&s| s.to_owned()).collect(),
            mechanism: if delta.is_some() {
                AggregateMechanism::Gaussian
            } else {
                AggregateMechanism::Laplace
            },
            target_std: None,
        }),
    }
}

/// (campaign, statistic, value, std, exact) of every group.
fn groups(release: &Release) -> Vec<(String, String, f64, f64, bool)> {
    let Some(ReleaseResult::Aggregate(result)) = &release.result else {
        panic!("an aggregate result: {release:?}");
    };
    result
        .groups
        .iter()
        .map(|g| {
            (
                g.key.get("campaign").cloned().unwrap_or_default(),
                g.statistic.clone(),
                g.value,
                g.std,
                g.exact,
            )
        })
        .collect()
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn aggregates_release_public_numbers_exactly_and_private_ones_with_noise(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app.dataset(ads_dataset("ads", "label", "rdp", 10.0)).await;
    // 600 rows: campaign a on even rows; converted on every third;
    // value = i mod 150, clamped to its declared bounds [0, 100] on
    // ingest.
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, ads_rows(0, 600))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[dataset.id]);
    let request = aggregate(
        &[
            "count",
            "sum:value",
            "mean:value",
            "sum:converted",
            "mean:converted",
        ],
        &["campaign"],
        Some(1e-6),
    );
    let priced = analyst
        .release(dataset.id, &request, &dry_run())
        .await
        .unwrap()
        .release;
    assert!(priced.dry_run && priced.result.is_none());
    assert_eq!(
        app.admin.dataset(dataset.id).await.unwrap().spent.epsilon,
        0.0
    );
    let release = analyst
        .release(dataset.id, &request, &ReleaseOptions::default())
        .await
        .unwrap()
        .release;
    // The dry run priced exactly what the release spent.
    assert_eq!(priced.spent, release.spent, "{backend:?}");
    assert_eq!(
        (priced.sigma, priced.sensitivity),
        (release.sigma, release.sensitivity)
    );
    // Under label the label sum and the value sum are private, each
    // normalised by its own sensitivity (1 and 100): jointly √2.
    assert!((release.sensitivity - std::f64::consts::SQRT_2).abs() < 1e-11);
    assert_eq!(release.noise.mechanism, "gaussian");
    // σ of the normalised quantities; `sigma` is the largest std a
    // released number can have: the value sum's, 100σ (a mean of a
    // group of one row would have it too).
    let sigma = release.noise.scale;
    assert_eq!(release.sigma, 100.0 * sigma);
    assert_eq!(release.spent.epsilon_basic, 1.0);
    let sum_value = |parity: usize| -> f64 {
        (0..600)
            .filter(|i| i % 2 == parity)
            .map(|i| (i % 150).min(100) as f64)
            .sum()
    };
    let sums = [sum_value(0), sum_value(1)];
    let got = groups(&release);
    assert_eq!(got.len(), 10);
    for (index, campaign) in ["a", "b"].iter().enumerate() {
        let cell = &got[index * 5..index * 5 + 5];
        assert!(cell.iter().all(|g| g.0 == *campaign));
        assert_eq!(cell[0].1, "count");
        assert_eq!((cell[0].2, cell[0].3, cell[0].4), (300.0, 0.0, true));
        // The value sum is an outcome: noised, std σ·100 (its range).
        assert_eq!((cell[1].3, cell[1].4), (100.0 * sigma, false));
        assert!((cell[1].2 - sums[index]).abs() < 1000.0 * sigma);
        assert!((cell[2].3 - 100.0 * sigma / 300.0).abs() < 1e-9);
        // The label sum: 100 converted per campaign, plus noise of the
        // reported std (a 10σ miss has probability < 1e-22).
        assert_eq!(
            (cell[3].1.as_str(), cell[3].3, cell[3].4),
            ("sum:converted", sigma, false)
        );
        assert!((cell[3].2 - 100.0).abs() < 10.0 * sigma);
        assert!((cell[4].3 - sigma / 300.0).abs() < 1e-12);
        let mean = cell[4].2;
        assert!((0.0..=1.0).contains(&mean));
    }
    // The ledger records the debit and the stored release replays it.
    let ledger = app.admin.ledger(dataset.id).await.unwrap();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    let stored = analyst
        .get_release(dataset.id, release.id.unwrap())
        .await
        .unwrap();
    assert_eq!(stored, release);
    app.finish().await;
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn public_only_aggregates_cost_nothing_and_row_unit_counts_are_noisy(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let (labelled, rows) = both_units(&app, [("rdp", 1.0), ("basic", 10.0)], 100).await;
    let analyst = app.analyst("ana", &[labelled.id, rows.id]);
    // Counts by declared dimensions do not depend on outcomes: exact,
    // free, not recorded.
    let request = aggregate(&["count"], &["campaign"], Some(1e-6));
    let free = analyst
        .release(labelled.id, &request, &ReleaseOptions::default())
        .await
        .unwrap();
    let release = free.release;
    assert_eq!(
        (release.epsilon, release.delta, release.sigma),
        (0.0, 0.0, 0.0)
    );
    assert_eq!(release.noise.mechanism, "none");
    assert!(release.id.is_none());
    assert!(groups(&release).iter().all(|g| g.4 && g.3 == 0.0));
    assert_eq!(groups(&release)[0].2, 50.0);
    let view = app.admin.dataset(labelled.id).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 0.0);
    assert_eq!(app.admin.ledger(labelled.id).await.unwrap().len(), 1);
    // Under row a grouped count moves by 1 in two groups: L2 √2, L1 2.
    // The release reports the sensitivity of the count divided by its
    // own sensitivity (1) and each group's std in counts, which is its
    // `sigma`.
    let gaussian = analyst
        .release(
            rows.id,
            &aggregate(&["count"], &["campaign"], Some(1e-7)),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap()
        .release;
    assert!(
        (gaussian.sensitivity - 1.0).abs() < 1e-11,
        "{}",
        gaussian.sensitivity
    );
    let sqrt2 = std::f64::consts::SQRT_2;
    assert!((gaussian.sigma - sqrt2 * gaussian.noise.scale).abs() < 1e-9);
    for group in groups(&gaussian) {
        assert!(!group.4);
        assert_eq!(group.3, gaussian.sigma, "{group:?}");
    }
    let laplace = analyst
        .release(
            rows.id,
            &aggregate(&["count"], &["campaign"], None),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap()
        .release;
    assert!(
        (laplace.sensitivity - 1.0).abs() < 1e-11,
        "{}",
        laplace.sensitivity
    );
    assert_eq!(laplace.delta, 0.0);
    assert_eq!(laplace.noise.mechanism, "laplace");
    // b = 1/ε on the normalised lattice, std √2·b, times the count's
    // L1 sensitivity 2 per group.
    assert!(
        (laplace.noise.scale - 1.0).abs() < 1e-6,
        "{:?}",
        laplace.noise
    );
    assert!((laplace.sigma - 2.0 * sqrt2 * laplace.noise.scale).abs() < 1e-9);
    for group in groups(&laplace) {
        assert_eq!(group.3, laplace.sigma, "{group:?}");
    }
    // An ungrouped count under row is N: public.
    let n = analyst
        .release(
            rows.id,
            &aggregate(&["count", "sum:converted"], &[], Some(1e-7)),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap()
        .release;
    let got = groups(&n);
    assert_eq!((got[0].2, got[0].4), (100.0, true));
    assert!(!got[1].4);
    assert!((n.sensitivity - 1.0).abs() < 1e-11, "{}", n.sensitivity);
    let spent = app.admin.dataset(rows.id).await.unwrap().spent;
    assert_eq!(spent.epsilon_basic, 3.0, "{backend:?}");
    app.finish().await;
}

/// Asks for `statistics` by `group_by` at a target std instead of an ε.
fn targeted(statistics: &[&str], group_by: &[&str], target: f64) -> ReleaseRequest {
    let mut request = aggregate(statistics, group_by, Some(1e-7));
    request.epsilon = None;
    if let ReleaseParams::Aggregate(params) = &mut request.params {
        params.target_std = Some(target);
    }
    request
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_target_std_holds_for_every_released_number_and_one_ledger_unit_less_would_miss_it(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let (labelled, rows) = both_units(&app, [("rdp", 1e4), ("rdp", 1e4)], 300).await;
    let analyst = app.analyst("ana", &[labelled.id, rows.id]);
    let cases = [
        // The review's request: value ∈ [0, 100], so the value sum's
        // std is 100 times the count's.
        (labelled.id, targeted(&["count", "sum:value"], &[], 5.0)),
        (rows.id, targeted(&["count", "sum:value"], &[], 5.0)),
        (
            labelled.id,
            targeted(&["sum:converted", "mean:value"], &["campaign"], 20.0),
        ),
        (
            rows.id,
            targeted(
                &["count", "mean:value", "sum:converted"],
                &["campaign"],
                50.0,
            ),
        ),
    ];
    for (dataset, request) in cases {
        let ReleaseParams::Aggregate(params) = &request.params else {
            unreachable!("an aggregate request");
        };
        let target = params.target_std.unwrap();
        let release = analyst
            .release(dataset, &request, &ReleaseOptions::default())
            .await
            .unwrap()
            .release;
        assert!(
            release.sigma <= target,
            "{params:?}: sigma {}",
            release.sigma
        );
        for group in groups(&release) {
            assert!(group.3 <= target, "{params:?}: {group:?} above {target}");
        }
        // The same request at one ledger unit (10⁻⁹) less ε: its
        // largest std, its `sigma`, misses the target.
        let cheaper = ReleaseRequest {
            epsilon: Some(release.epsilon - 1e-9),
            params: ReleaseParams::Aggregate(AggregateParams {
                target_std: None,
                ..params.clone()
            }),
            ..request.clone()
        };
        let cheaper = analyst
            .release(dataset, &cheaper, &dry_run())
            .await
            .unwrap()
            .release;
        assert!(
            cheaper.sigma > target,
            "{params:?}: {} at ε − 10⁻⁹",
            cheaper.sigma
        );
    }
    app.finish().await;
}
