//! `DPGATE_ENGINE=ballista://…`: `dpgate serve` sends its passes to a
//! `dpgate scheduler` and two `dpgate executor` processes sharing its data
//! directory; the releases are those of an embedded engine (exact counts
//! to the row), and once the cluster is gone a release fails after its
//! debit as any engine failure does, the same on every retry.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use dpgate::domain::auth::Role;
use dpgate_client::types::{
    AggregateMechanism, AggregateParams, ProblemType, ReleaseParams, ReleaseRequest, ReleaseResult,
    WalrMap,
};
use dpgate_client::{ReleaseOptions, UploadFormat};
use tokio::process::{Child, Command};

use crate::cli::{client_of, serve};
use crate::helpers::{ads_dataset, ads_rows};

/// A free port whose next port is free too (an executor's gRPC one).
fn free_pair() -> SocketAddr {
    loop {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = first.local_addr().unwrap();
        if TcpListener::bind(("127.0.0.1", address.port() + 1)).is_ok() {
            return address;
        }
    }
}

fn dpgate(args: &[String], data: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dpgate"))
        .args(args)
        .env("DPGATE_DATA_DIR", data)
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("dpgate starts")
}

/// A scheduler and two executors reading `data`: the processes and the
/// scheduler's address.
async fn cluster(data: &std::path::Path) -> (Vec<Child>, SocketAddr) {
    let scheduler = free_pair();
    let mut processes = vec![dpgate(
        &["scheduler".into(), "--bind".into(), scheduler.to_string()],
        data,
    )];
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(scheduler).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..2 {
        let args = [
            "executor".into(),
            "--scheduler".into(),
            scheduler.to_string(),
            "--bind".into(),
            free_pair().to_string(),
            "--cores".into(),
            "2".into(),
        ];
        processes.push(dpgate(&args, data));
    }
    (processes, scheduler)
}

/// A WALR release on a map: its sums are an engine pass.
fn centred_walr() -> ReleaseRequest {
    let mut request = ReleaseRequest::walr(1.0, 1e-7);
    if let ReleaseParams::Walr(params) = &mut request.params {
        params.map = Some(WalrMap::Centre);
    }
    request
}

fn counts_by_campaign() -> ReleaseRequest {
    ReleaseRequest {
        epsilon: Some(1.0),
        delta: None,
        params: ReleaseParams::Aggregate(AggregateParams {
            statistics: vec!["count".to_owned(), "sum:value".to_owned()],
            group_by: vec!["campaign".to_owned()],
            mechanism: AggregateMechanism::Laplace,
            target_std: None,
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_two_executors_runs_the_releases_and_its_loss_fails_them_after_the_debit() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut processes, scheduler) = cluster(&data).await;
    let url = format!("sqlite://{}", dir.path().join("served.db").display());
    let (_server, api) = serve(
        &url,
        None,
        &[
            ("DPGATE_DATA_DIR", data.display().to_string()),
            ("DPGATE_ENGINE", format!("ballista://{scheduler}")),
            // Nothing held in memory: every pass goes to the cluster.
            ("DPGATE_CACHE_BYTES", "0".to_owned()),
            ("DPGATE_ENGINE_TIMEOUT", "60s".to_owned()),
        ],
    )
    .await;
    let admin = client_of(api, Role::Admin, &[]);
    let request = ads_dataset("clustered", "label", "basic", 10.0);
    let dataset = admin
        .create_dataset(&serde_json::from_value(request).unwrap())
        .await
        .unwrap()
        .id;
    for from in [0, 300] {
        admin
            .upload_rows(dataset, UploadFormat::Csv, ads_rows(from, 300))
            .await
            .unwrap();
    }
    let analyst = client_of(api, Role::Analyst, &[dataset]);

    // Under unit `label` counts are public: exact, to the row.
    let release = analyst
        .release(dataset, &counts_by_campaign(), &ReleaseOptions::default())
        .await
        .expect("an aggregate on the cluster");
    let Some(ReleaseResult::Aggregate(result)) = &release.release.result else {
        panic!("an aggregate: {release:?}");
    };
    let counts: Vec<(String, f64, bool)> = result
        .groups
        .iter()
        .filter(|group| group.statistic == "count")
        .map(|group| (group.key["campaign"].clone(), group.value, group.exact))
        .collect();
    assert_eq!(
        counts,
        [("a".to_owned(), 300.0, true), ("b".to_owned(), 300.0, true)]
    );
    let walr = analyst
        .release(dataset, &centred_walr(), &ReleaseOptions::default())
        .await
        .expect("a WALR release on the cluster");
    assert!(
        matches!(walr.release.result, Some(ReleaseResult::Walr(_))),
        "{walr:?}"
    );

    // The cluster gone, a release fails after its debit, and its retry
    // gets the same failure without a second debit.
    for process in &mut processes {
        process.kill().await.unwrap();
    }
    let keyed = ReleaseOptions {
        idempotency_key: Some("lost".to_owned()),
        dry_run: false,
    };
    let mut failures = Vec::new();
    for _ in 0..2 {
        let failed = analyst
            .release(dataset, &centred_walr(), &keyed)
            .await
            .expect_err("no cluster");
        let dpgate_client::ClientError::Problem(problem) = failed else {
            panic!("a problem document: {failed:?}");
        };
        assert_eq!(
            problem.kind(),
            Some(ProblemType::ReleaseFailed),
            "{problem:?}"
        );
        failures.push((problem.release_id, problem.detail));
    }
    assert_eq!(failures[0], failures[1]);
    let view = admin.dataset(dataset).await.unwrap();
    assert_eq!(view.spent.epsilon_basic, 3.0);
}
