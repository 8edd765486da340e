//! dpgate: a private measurement service. Labelled data goes in; only
//! differentially private releases come out, each debited from a persistent
//! per-dataset privacy budget.

pub mod dp;
