//! Under unit `label` a row's outcomes are private: its label and every
//! measure. Counts by declared dimensions stay public and free.

use dpgate_client::types::{
    AggregateMechanism, AggregateParams, ReleaseParams, ReleaseRequest, ReleaseResult,
};
use dpgate_client::{ReleaseOptions, UploadFormat};
use rstest::rstest;

use crate::helpers::{Backend, ads_dataset, spawn_app, unavailable};

/// Rows whose measure is 100·label: a sum of it would reveal the labels.
fn rows(count: usize) -> String {
    let mut csv = String::from("row_id,converted,f0,f1,value,campaign\n");
    for index in 0..count {
        let label = u8::from(index % 4 == 0);
        let campaign = if index % 2 == 0 { "a" } else { "b" };
        csv.push_str(&format!(
            "r{index},{label},0.5,1,{},{campaign}\n",
            100 * u32::from(label)
        ));
    }
    csv
}

fn aggregate(statistics: &[&str]) -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(1.0),
        delta: Some(1e-7),
        params: ReleaseParams::Aggregate(AggregateParams {
            statistics: statistics.iter().map(|s| (*s).to_owned()).collect(),
            group_by: vec!["campaign".to_owned()],
            mechanism: AggregateMechanism::Gaussian,
            target_std: None,
        }),
    }
}

#[rstest]
#[case::sqlite(Backend::Sqlite)]
#[case::postgres(Backend::Postgres)]
#[tokio::test]
async fn a_measure_equal_to_a_hundred_times_the_label_is_noised_and_debited(
    #[case] backend: Backend,
) {
    if unavailable(backend) {
        return;
    }
    let app = spawn_app(backend).await;
    let dataset = app
        .dataset(ads_dataset("ads", "label", "basic", 10.0))
        .await;
    app.admin
        .upload_rows(dataset.id, UploadFormat::Csv, rows(400))
        .await
        .unwrap();
    let analyst = app.analyst("ana", &[dataset.id]);
    let release = analyst
        .release(
            dataset.id,
            &aggregate(&["sum:value", "mean:value"]),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap()
        .release;
    let id = release.id.unwrap();
    assert_eq!((release.epsilon, release.spent.epsilon_basic), (1.0, 1.0));
    let Some(ReleaseResult::Aggregate(result)) = &release.result else {
        panic!("{release:?}");
    };
    assert_eq!(result.groups.len(), 4);
    for group in &result.groups {
        assert!(!group.exact, "{group:?}");
        assert!(group.std > 0.0 && group.value.is_finite(), "{group:?}");
    }
    // The sum's noise has std σ·100 (the measure's range): a group's
    // 100·label sum (campaign a: 100 positives of 200 rows) is hidden. It
    // is the largest std a released number can have: the `sigma`.
    assert_eq!(result.groups[0].std, 100.0 * release.noise.scale);
    assert_eq!(release.sigma, result.groups[0].std);
    let ledger = app.admin.ledger(dataset.id).await.unwrap();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[1].release_id, Some(id));
    assert_eq!(ledger[1].epsilon, 1.0);

    // Counts by a declared dimension are exact and free.
    let counts = analyst
        .release(
            dataset.id,
            &aggregate(&["count"]),
            &ReleaseOptions::default(),
        )
        .await
        .unwrap();
    let counts = counts.release;
    assert_eq!((counts.epsilon, counts.sigma, counts.id), (0.0, 0.0, None));
    let Some(ReleaseResult::Aggregate(result)) = &counts.result else {
        panic!("{counts:?}");
    };
    let values: Vec<(f64, bool)> = result.groups.iter().map(|g| (g.value, g.exact)).collect();
    assert_eq!(values, vec![(200.0, true), (200.0, true)]);
    assert_eq!(app.admin.ledger(dataset.id).await.unwrap().len(), 2);
    let view = app.admin.dataset(dataset.id).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 1.0);
    app.finish().await;
}
