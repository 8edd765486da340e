//! Parsing uploads: `cargo bench --bench ingest`.
//!
//! A generated body of 1,000,000 rows × 32 features (the shape
//! `examples/service_bench.rs` uploads; set `BENCH_ROWS` for fewer), as CSV
//! and as NDJSON, parsed, validated, scaled and encoded into rows that a
//! no-op sink drops. The parser uses every core it may run on: compare one
//! core with `taskset -c 0 cargo bench --bench ingest`.

// Benchmark set-up only unwraps constants that are valid by construction.
#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpgate::domain::dataset::Schema;
use dpgate::ingest::{Format, parse};

mod common;

use common::FEATURES;

fn rows() -> usize {
    std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000)
}

fn schema() -> Schema {
    Schema::parse(&serde_json::from_value(common::request("bench")).unwrap()).unwrap()
}

/// The rows `write_csv` in `examples/service_bench.rs` writes: an id, a
/// label at a 20% rate, features with 6 decimals, a measure with 2, two
/// dimensions.
struct Row {
    label: u8,
    features: [f64; FEATURES],
    value: u64,
    campaign: u64,
    device: u64,
}

fn generated(rows: usize) -> impl Iterator<Item = Row> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..rows).map(move |_| Row {
        label: u8::from(next() % 5 == 0),
        features: std::array::from_fn(|_| (next() % 1_000_000) as f64 / 1_000_000.0),
        value: next() % 10_000,
        campaign: next() % 4,
        device: next() % 3,
    })
}

fn csv(rows: usize) -> Vec<u8> {
    let names: Vec<String> = (0..FEATURES).map(|j| format!("f{j}")).collect();
    let mut text = format!(
        "row_id,converted,{},value,campaign,device\n",
        names.join(",")
    );
    for (index, row) in generated(rows).enumerate() {
        write!(text, "r{index},{}", row.label).unwrap();
        for feature in row.features {
            write!(text, ",{feature:.6}").unwrap();
        }
        let Row {
            value,
            campaign,
            device,
            ..
        } = row;
        writeln!(
            text,
            ",{}.{:02},c{campaign},d{device}",
            value / 100,
            value % 100
        )
        .unwrap();
    }
    text.into_bytes()
}

fn ndjson(rows: usize) -> Vec<u8> {
    let mut text = String::new();
    for (index, row) in generated(rows).enumerate() {
        write!(text, r#"{{"row_id":"r{index}","converted":{}"#, row.label).unwrap();
        for (j, feature) in row.features.iter().enumerate() {
            write!(text, r#","f{j}":{feature:.6}"#).unwrap();
        }
        let Row {
            value,
            campaign,
            device,
            ..
        } = row;
        writeln!(
            text,
            r#","value":{}.{:02},"campaign":"c{campaign}","device":"d{device}"}}"#,
            value / 100,
            value % 100
        )
        .unwrap();
    }
    text.into_bytes()
}

fn uploads(c: &mut Criterion) {
    let (rows, schema) = (rows(), schema());
    let mut group = c.benchmark_group(format!("parse_{rows}_x{FEATURES}"));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(30));
    for (format, body) in [(Format::Csv, csv(rows)), (Format::Ndjson, ndjson(rows))] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("{format:?}").to_lowercase(), |b| {
            b.iter(|| {
                let summary = parse(format, body.as_slice(), &schema, |batch| {
                    drop(black_box(batch));
                    true
                })
                .unwrap();
                assert!(summary.errors.is_empty(), "{:?}", summary.errors);
                assert_eq!(summary.rows, rows as u64);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, uploads);
criterion_main!(benches);
