//! dpgate: a private measurement service. Labelled data goes in; only
//! differentially private releases come out, each debited from a persistent
//! per-dataset privacy budget.
//!
//! Layers, each depending only on those below it: [`api`] (HTTP, no math)
//! → [`releases`] (request → sensitivity → mechanism → ledger charge) →
//! the data plane ([`engine`], [`snapshots`]) and [`store`] (all SQL and
//! transactions) → [`domain`] (dpgate's types and rules) → [`dp`] (pure
//! privacy math).

// Production functions stay short enough to read (clippy.toml: 120
// lines); tests may spell a scenario out at length.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod api;
pub mod app;
pub mod audit;
pub mod commands;
pub mod config;
pub mod domain;
pub mod dp;
pub mod engine;
pub mod export;
pub mod ingest;
pub mod ledger;
pub mod mutants;
pub mod releases;
pub mod snapshots;
pub mod store;
pub mod uploads;
