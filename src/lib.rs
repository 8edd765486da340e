//! dpgate: a private measurement service. Labelled data goes in; only
//! differentially private releases come out, each debited from a persistent
//! per-dataset privacy budget.
//!
//! Layers: [`api`] (HTTP, no math) → [`releases`] (request → sensitivity →
//! mechanism → ledger charge) → [`dp`] (pure privacy math) and [`store`]
//! (all SQL and transactions).

pub mod api;
pub mod app;
pub mod audit;
pub mod auth;
pub mod budget;
pub mod clock;
pub mod commands;
pub mod config;
pub mod dataset;
pub mod dp;
pub mod engine;
pub mod error;
pub mod ingest;
pub mod ledger;
pub mod mutants;
pub mod registration;
pub mod releases;
pub mod snapshots;
pub mod store;
