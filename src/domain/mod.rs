//! The ground floor: dpgate's own types and rules, with no store, no HTTP
//! and no async under them. Everything above (the store, the data plane,
//! the releases, the API) depends on these; they depend on [`crate::dp`]
//! and the API's types at most.
//!
//! - [`dataset`]: a dataset's schema, its validation and its budget's record;
//! - [`budget`]: admitting a charge against a budget and an analyst's cap,
//!   and budget changes;
//! - [`debit`]: debits decided under a dataset's lock, alone or in batches;
//! - [`ledger`]: the hash-chained ledger's entries, their tally and export;
//! - [`profile`]: a ledger's privacy profile, ε as a function of δ;
//! - [`auth`]: bearer tokens and their claims;
//! - [`registration`]: a background registration's record;
//! - [`row`]: a row as an upload parses it and the data plane stores it;
//! - [`clock`]: the one clock timestamps are read from.

pub mod auth;
pub mod budget;
pub mod clock;
pub mod dataset;
pub mod debit;
pub mod ledger;
pub mod profile;
pub mod registration;
pub mod row;
