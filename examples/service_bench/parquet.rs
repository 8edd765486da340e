//! `--parquet DIR`: the figures of a dataset registered in place
//! (issue 31's targets), against DuckDB on the same files.
//!
//! 1. the directory's Parquet files, written first by
//!    `scripts/bench/parquet_data.py` (`--rows`, `--files`) if it has none:
//!    a row id, the label `converted`, 32 features, the measure `value`,
//!    the dimensions `d1` and `d2`;
//! 2. registration in place (in the background, polled), against DuckDB's
//!    `CREATE TABLE … AS SELECT * FROM read_parquet(…)` into a database
//!    file;
//! 3. a WALR release (`map: auto`), an aggregate (count, mean of `value` by
//!    `d1`, `d2`) and a DP-GD release of `--steps` steps, each streamed
//!    from the files (no snapshot held in memory, as for a dataset larger
//!    than memory): the first, then the median of `--runs`, against the
//!    median of DuckDB's SQL for the same sums (`scripts/bench/duckdb_peer.py`,
//!    timed inside its process);
//! 4. this process's peak RSS (the server's, with its client).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dpgate::api::Limits;
use dpgate::domain::auth::{Keys, Role};
use dpgate::engine::{DataDir, Root};
use dpgate_client::types::{CreateDataset, ReleaseRequest};
use dpgate_client::{Client, ReleaseOptions};

use super::{median, serve};

/// What a run of the mode measures.
pub struct Options<'a> {
    pub dir: &'a Path,
    pub rows: u64,
    pub files: usize,
    pub runs: usize,
    pub steps: u32,
}

/// DuckDB's time for `kind` (`scripts/bench/duckdb_peer.py`), or why not.
fn duckdb(dir: &Path, kind: &str, steps: u32) -> Result<Duration, String> {
    let output = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/bench/duckdb_peer.py"
        ))
        .arg(dir)
        .arg(kind)
        .arg(steps.to_string())
        .output()
        .map_err(|error| format!("python3: {error}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
    }
    let seconds: f64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|error| format!("duckdb_peer.py printed no time: {error}"))?;
    Ok(Duration::from_secs_f64(seconds))
}

/// The median of `runs` of DuckDB's `kind`, or why not.
fn duckdb_median(dir: &Path, kind: &str, steps: u32, runs: usize) -> Result<Duration, String> {
    let times = (0..runs)
        .map(|_| duckdb(dir, kind, steps))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(median(times))
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM"))
                .map(|line| line.trim_start_matches("VmHWM:").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

fn has_parquet(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.path().extension().is_some_and(|ext| ext == "parquet"))
    })
}

pub async fn run(options: Options<'_>) {
    let Options {
        dir,
        rows,
        files,
        runs,
        steps,
    } = options;
    std::fs::create_dir_all(dir).unwrap();
    let dir = std::path::absolute(dir).unwrap();
    if !has_parquet(&dir) {
        let started = Instant::now();
        let status = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/bench/parquet_data.py"
            ))
            .arg(&dir)
            .arg(rows.to_string())
            .arg(files.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "parquet_data.py failed");
        println!(
            "wrote {rows} rows into {} in {:.1?}",
            dir.display(),
            started.elapsed()
        );
    }

    let scratch = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", scratch.path().join("bench.db").display());
    let store = dpgate::store::connect(&url).await.unwrap();
    let keys = Keys::from_secret("bench-secret-of-at-least-thirty-two-bytes").unwrap();
    let data = Arc::new(
        DataDir::new(scratch.path().join("data")).with_roots(vec![Root::Local(dir.clone())]),
    );
    // Nothing held in memory: every pass streams from the files.
    let limits = Limits {
        cache_bytes: 0,
        ..Limits::default()
    };
    let (_, address) = serve(store, &data, &keys, limits).await;
    let hour = Duration::from_secs(3600);
    let admin = Client::new(
        &address,
        Some(keys.mint(Role::Admin, "admin", &[], hour).unwrap()),
    );

    let request: CreateDataset = serde_json::from_value(serde_json::json!({
        "name": "bench", "privacy_unit": "label",
        "features": (1..=32).map(|j| serde_json::json!({"name": format!("x{j}"), "min": 0, "max": 1})).collect::<Vec<_>>(),
        "label": "converted",
        "measures": [{"name": "value", "min": 0, "max": 100}],
        "dimensions": [
            {"name": "d1", "values": ["a", "b", "c", "d"]},
            {"name": "d2", "values": ["s", "t", "u", "v", "w", "x", "y", "z"]}
        ],
        "budget": {"epsilon": 1_000_000, "delta": 0.5},
        "source": {"uri": format!("file://{}/", dir.display())}
    }))
    .unwrap();
    let started = Instant::now();
    let registration = admin.create_dataset_in_background(&request).await.unwrap();
    let report = admin
        .registered(registration.id, Duration::from_millis(200))
        .await
        .unwrap();
    let registered = started.elapsed();
    let ctas = duckdb(&dir, "ctas", 1);
    match &ctas {
        Ok(ctas) => println!(
            "registration of {} rows: {registered:.2?}; DuckDB's CTAS {ctas:.2?}: {:.2}×",
            report.rows_added,
            registered.as_secs_f64() / ctas.as_secs_f64()
        ),
        Err(why) => println!(
            "registration of {} rows: {registered:.2?}; DuckDB skipped: {why}",
            report.rows_added
        ),
    }
    println!("peak RSS after registration: {}", peak_rss());

    let id = registration.dataset_id;
    let analyst = admin.with_token(&keys.mint(Role::Analyst, "ana", &[id], hour).unwrap());
    let releases = [
        (
            "walr",
            serde_json::json!({"kind": "walr", "epsilon": 1, "delta": 1e-9, "map": "auto"}),
        ),
        (
            "aggregate",
            serde_json::json!({"kind": "aggregate", "epsilon": 1, "delta": 1e-9,
                "statistics": ["count", "mean:value"], "group_by": ["d1", "d2"]}),
        ),
        (
            "dp_gd",
            serde_json::json!({"kind": "model/dp-gd", "epsilon": 1, "delta": 1e-9,
                "steps": steps, "clip": 1}),
        ),
    ];
    for (kind, request) in releases {
        let request: ReleaseRequest = serde_json::from_value(request).unwrap();
        let timed = || async {
            let started = Instant::now();
            analyst
                .release(id, &request, &ReleaseOptions::default())
                .await
                .unwrap();
            started.elapsed()
        };
        let first = timed().await;
        let mut times = Vec::new();
        for _ in 0..runs {
            times.push(timed().await);
        }
        let ours = median(times);
        match duckdb_median(&dir, kind, steps, runs) {
            Ok(theirs) => println!(
                "{kind}: first {first:.2?}, median of {runs} {ours:.2?}; DuckDB {theirs:.2?}: {:.2}×",
                ours.as_secs_f64() / theirs.as_secs_f64()
            ),
            Err(why) => println!(
                "{kind}: first {first:.2?}, median of {runs} {ours:.2?}; DuckDB skipped: {why}"
            ),
        }
    }
    println!("peak RSS: {}", peak_rss());
}
