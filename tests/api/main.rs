//! The integration tests: real servers on random ports, real SQLite files
//! and (with `TEST_POSTGRES_URL`) real Postgres databases, real JWTs.

// Tests may unwrap, and their case tables are tuples.
#![allow(clippy::unwrap_used, clippy::type_complexity)]

mod aggregates;
mod auth;
mod bad_input;
mod budget_admin;
mod cli;
mod client_cli;
mod helpers;
mod idempotency;
mod ledger;
mod models;
mod openapi;
mod race;
mod store;
mod supplied;
mod walkthrough;
