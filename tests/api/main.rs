//! The integration tests: real servers on random ports, real SQLite files
//! and (with `TEST_POSTGRES_URL`) real Postgres databases, real JWTs.

// Tests may unwrap, and their case tables are tuples.
#![allow(clippy::unwrap_used, clippy::type_complexity)]

mod admission;
mod aggregates;
mod auth;
mod bad_input;
#[cfg(feature = "ballista")]
mod ballista;
mod buckets;
mod budget_admin;
mod cli;
mod client_cli;
mod console;
mod counting;
mod disconnect;
mod failed;
mod features;
mod floor;
mod frank_wolfe;
mod gradient;
mod helpers;
mod idempotency;
mod learners;
mod ledger;
mod models;
mod openapi;
mod outcomes;
mod race;
mod refusals;
mod registration;
mod registrations;
mod shapes;
mod snapshots;
mod store;
mod strict_input;
mod supplied;
mod telemetry;
mod typed_uploads;
mod user_unit;
mod walkthrough;
mod walr_map;
