//! What is audited: every release kind (and WALR's maps and supplied
//! vectors, the aggregate's two mechanisms) under each privacy unit it
//! serves, each on a worst-case pair of neighbouring datasets.
//!
//! Both datasets hold the same [`BASE_ROWS`] rows, drawn from the seed,
//! plus one canary row at a corner of the declared domain ([`Canary`] says
//! which corner, per case):
//!
//! - under `label`, the canary has label 0 and measure 0 on D₀, label 1
//!   and measure 1000 (clamped at upload to its bound, 10) on D₁: its
//!   outcomes flip, its features stay;
//! - under `row`, D₀'s canary sits at x = 0 and D₁'s is replaced by the
//!   opposite corner x = 1 with label 1 and measure 1000;
//! - under `user`, the other rows belong to 21 people, three rows each,
//!   and D₁ adds a canary person of [`CANARY_ROWS`] rows (the dataset's
//!   `max_rows_per_user`) at the far corner x = 1 with label 1 and measure
//!   1000: all of one person's rows added, as many as a release reads.
//!
//! The other rows' features lie in [0, 0.1], so at x = 0 the canary's
//! move is within 1 % of the largest any row can make where the
//! sensitivity depends on the rows (WALR's on the raw features under
//! `label`, the largest ‖(a, xᵢ)‖), and at x = 1 it stands away from them
//! (a learner's curvature, which the other rows make, does not damp it).
//! The measure 1000 exercises the clamp at upload.

use dpgate_api_types::{self as api, PrivacyUnit};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use super::attack::Attack;
use crate::dp::audit::Estimate;

/// Rows besides the canary.
pub const BASE_ROWS: usize = 63;

/// The canary person's rows under `user`, and the bound the datasets
/// declare.
pub const CANARY_ROWS: usize = 3;

/// The features' number: the canary's corner moves two of them.
const FEATURES: usize = 2;

/// The measure's declared upper bound, and what the canary uploads.
const MEASURE_MAX: f64 = 10.0;
const CANARY_MEASURE: f64 = 1000.0;

/// The other rows' features lie in [0, this].
const SPREAD: f64 = 0.1;

/// One row as uploaded.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: String,
    /// Its person (uploaded under unit `user` only).
    pub person: String,
    pub x: [f64; FEATURES],
    pub label: u8,
    pub value: f64,
}

/// Where a case's canary sits: the release's largest move is made by a
/// different corner for different releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canary {
    /// At x = 0 under `label`; under `row`, from x = 0 with label 0 to
    /// x = 1 with label 1. For WALR on the raw features, whose intercept
    /// weight is the whole of its move at x = 0 (so leaving it out of the
    /// sensitivity shows), and for the gradient, whose θ is chosen so that
    /// these two rows' gradients point apart.
    Origin,
    /// At x = 1 under `label`, away from the other rows (so a learner's
    /// curvature does not damp its move); under `row`, from x = 0 to x = 1
    /// with label 1 both sides: the move across the box, which is what a
    /// centred map's sensitivity is.
    Across,
    /// At x = 1 under `label`; under `row`, as [`Canary::Origin`].
    Far,
}

impl Canary {
    fn corner(self) -> f64 {
        match self {
            Canary::Origin => 0.0,
            Canary::Across | Canary::Far => 1.0,
        }
    }
}

/// One audited release: its kind as the API names it, what sets it apart
/// from the kind's other cases, and the test that attacks it.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub kind: &'static str,
    pub variant: &'static str,
    pub unit: PrivacyUnit,
    /// Pure ε-DP: requested with δ = 0.
    pub pure: bool,
    pub attack: Attack,
    canary: Canary,
    /// The kind's own parameters, given the dataset's rows.
    params: fn(&[Row]) -> Value,
}

/// A kind's cases, before they are given their units.
struct Entry {
    kind: &'static str,
    variant: &'static str,
    units: &'static [PrivacyUnit],
    pure: bool,
    attack: Attack,
    canary: Canary,
    params: fn(&[Row]) -> Value,
}

/// Every unit: each kind is calibrated for all three (supplied vectors,
/// for unit `label` only, are not audited).
const ALL: &[PrivacyUnit] = &[PrivacyUnit::Label, PrivacyUnit::Row, PrivacyUnit::User];

fn entries() -> Vec<Entry> {
    let entry = |kind, variant, units, pure, (attack, canary), params| Entry {
        kind,
        variant,
        units,
        pure,
        attack,
        canary,
        params,
    };
    let linear = |canary| (Attack::Linear, canary);
    vec![
        entry(
            "walr",
            "map none",
            ALL,
            false,
            linear(Canary::Origin),
            |_| json!({"map": "none"}),
        ),
        entry(
            "walr",
            "map centre",
            ALL,
            false,
            linear(Canary::Across),
            |_| json!({"map": "centre"}),
        ),
        entry(
            "walr",
            "map auto",
            ALL,
            false,
            linear(Canary::Across),
            |_| json!({"map": "auto"}),
        ),
        // Supplied vectors are for unit `label` only; on the map a request
        // without one gets (`auto`, fitted to the vectors).
        entry(
            "walr",
            "supplied vectors",
            &[PrivacyUnit::Label],
            false,
            linear(Canary::Far),
            |rows| {
                let features: Vec<Value> = rows
                    .iter()
                    .map(|row| json!({"row_id": row.id, "x": row.x}))
                    .collect();
                json!({ "features": features })
            },
        ),
        entry(
            "aggregate",
            "sum, gaussian",
            ALL,
            false,
            linear(Canary::Far),
            |_| json!({"statistics": ["sum:value"]}),
        ),
        entry(
            "aggregate",
            "sum, laplace",
            ALL,
            true,
            linear(Canary::Far),
            |_| json!({"statistics": ["sum:value"], "mechanism": "laplace"}),
        ),
        entry(
            "model/output-perturbation",
            "λ auto",
            ALL,
            true,
            (Attack::Radial, Canary::Far),
            |_| json!({}),
        ),
        entry(
            "model/objective-perturbation",
            "λ auto",
            ALL,
            true,
            linear(Canary::Far),
            |_| json!({}),
        ),
        entry(
            "model/dp-gd",
            "100 steps",
            ALL,
            false,
            linear(Canary::Far),
            |_| json!({}),
        ),
        entry(
            "model/dp-sgd",
            "batches of 16",
            ALL,
            true,
            linear(Canary::Far),
            |_| json!({"batch_size": 16}),
        ),
        entry(
            "model/frank-wolfe",
            "label, r = 1, 10 steps",
            ALL,
            false,
            linear(Canary::Far),
            |_| json!({"target": "label", "radius": 1.0, "steps": 10}),
        ),
        entry(
            "gradient",
            "logistic at θ = (5, −10, −10)",
            ALL,
            false,
            linear(Canary::Origin),
            // Where the canary's rows pull hardest apart: the fit is sure
            // of label 1 at x = 0 and of label 0 at x = 1, so under `row`
            // each of D₀'s and D₁'s canaries has a gradient near the clip,
            // pointing away from the other's.
            |_| json!({ "theta": [5.0, -10.0, -10.0] }),
        ),
    ]
}

/// Every kind the audit knows, as `--kind` takes them.
pub fn kinds() -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = entries().iter().map(|entry| entry.kind).collect();
    kinds.dedup();
    kinds
}

/// The cases of `kinds` (all if empty) under `units` (all if empty), in
/// catalogue order; an unknown kind is an error naming the known ones.
pub fn select(kinds: &[String], units: &[PrivacyUnit]) -> Result<Vec<Case>, String> {
    let known = self::kinds();
    if let Some(unknown) = kinds.iter().find(|kind| !known.contains(&kind.as_str())) {
        return Err(format!(
            "no release kind {unknown:?} to audit; the kinds are {}",
            known.join(", ")
        ));
    }
    Ok(entries()
        .into_iter()
        .filter(|entry| kinds.is_empty() || kinds.iter().any(|kind| kind == entry.kind))
        .flat_map(|entry| {
            entry
                .units
                .iter()
                .filter(|unit| units.is_empty() || units.contains(unit))
                .map(move |&unit| Case {
                    kind: entry.kind,
                    variant: entry.variant,
                    unit,
                    pure: entry.pure,
                    attack: entry.attack,
                    canary: entry.canary,
                    params: entry.params,
                })
        })
        .collect())
}

impl Case {
    /// The request, at `epsilon` and (unless pure) `delta`, on `rows`.
    pub fn request(
        &self,
        epsilon: f64,
        delta: f64,
        rows: &[Row],
    ) -> Result<api::ReleaseRequest, serde_json::Error> {
        let mut body = (self.params)(rows);
        body["kind"] = self.kind.into();
        body["epsilon"] = epsilon.into();
        body["delta"] = self.delta(delta).into();
        serde_json::from_value(body)
    }

    /// How the attack's errors become a bound: the GDP estimate for the
    /// kinds whose noise is Gaussian (their trade-off curve is), the
    /// assumption-free Clopper–Pearson bound for the others.
    pub fn estimate(&self) -> Estimate {
        if self.pure || self.kind == "model/frank-wolfe" {
            Estimate::ClopperPearson
        } else {
            Estimate::Gdp
        }
    }

    /// The test and the estimate, as reports name them.
    pub fn attack_name(&self) -> String {
        let estimate = match self.estimate() {
            Estimate::ClopperPearson => "Clopper-Pearson",
            Estimate::Gdp => "GDP estimate",
        };
        format!("{}, {estimate}", self.attack.name())
    }

    /// The δ it is requested (and audited) at.
    pub fn delta(&self, delta: f64) -> f64 {
        if self.pure { 0.0 } else { delta }
    }

    /// The dataset both sides are created with.
    pub fn schema(&self, name: &str) -> api::CreateDataset {
        let mut schema = json!({
            "name": name,
            "privacy_unit": self.unit,
            "features": [
                {"name": "x1", "min": 0.0, "max": 1.0},
                {"name": "x2", "min": 0.0, "max": 1.0},
            ],
            "label": "y",
            "measures": [{"name": "value", "min": 0.0, "max": MEASURE_MAX}],
            "budget": {"epsilon": 10.0, "delta": 1e-3},
        });
        if self.unit == PrivacyUnit::User {
            schema["user_column"] = "person".into();
            schema["max_rows_per_user"] = CANARY_ROWS.into();
        }
        serde_json::from_value(schema).expect("BUG: the audit's schema is a valid dataset")
    }

    /// Its rows as an upload of [`Case::schema`]: with their people under
    /// unit `user`.
    pub fn csv(&self, rows: &[Row]) -> String {
        let people = self.unit == PrivacyUnit::User;
        let mut text = String::from("row_id,x1,x2,y,value");
        text += if people { ",person\n" } else { "\n" };
        for row in rows {
            text += &format!(
                "{},{},{},{},{}",
                row.id, row.x[0], row.x[1], row.label, row.value
            );
            if people {
                text += &format!(",{}", row.person);
            }
            text += "\n";
        }
        text
    }

    /// The rows of D₀ and of D₁ (module docs), the others drawn from `seed`.
    pub fn neighbours(&self, seed: u64) -> (Vec<Row>, Vec<Row>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut rows: Vec<Row> = (0..BASE_ROWS)
            .map(|i| Row {
                id: format!("r{i}"),
                person: format!("p{}", i % 21),
                x: [rng.random::<f64>() * SPREAD, rng.random::<f64>() * SPREAD],
                label: u8::from(rng.random_bool(0.5)),
                value: rng.random::<f64>() * MEASURE_MAX,
            })
            .collect();
        let canary = |x: f64, label: u8, value: f64| Row {
            id: "canary".to_owned(),
            person: "canary".to_owned(),
            x: [x; FEATURES],
            label,
            value,
        };
        let mut other = rows.clone();
        match self.unit {
            PrivacyUnit::Label => {
                let corner = self.canary.corner();
                rows.push(canary(corner, 0, 0.0));
                other.push(canary(corner, 1, CANARY_MEASURE));
            }
            PrivacyUnit::Row => {
                let label = u8::from(self.canary == Canary::Across);
                rows.push(canary(0.0, label, 0.0));
                other.push(canary(1.0, 1, CANARY_MEASURE));
            }
            PrivacyUnit::User => {
                other.extend((0..CANARY_ROWS).map(|at| Row {
                    id: format!("canary-{at}"),
                    ..canary(1.0, 1, CANARY_MEASURE)
                }));
            }
        }
        (rows, other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_differ_in_the_canary_alone_and_as_the_unit_says() {
        for case in select(&[], &[]).unwrap() {
            let (d0, d1) = case.neighbours(7);
            if case.unit == PrivacyUnit::User {
                // The canary person's rows added, all at the far corner.
                assert_eq!(d1[..BASE_ROWS], d0[..]);
                assert_eq!(d1.len(), BASE_ROWS + CANARY_ROWS);
                let canary = &d1[BASE_ROWS..];
                assert!(canary.iter().all(|row| row.person == "canary"
                    && (row.x, row.label, row.value) == ([1.0; 2], 1, CANARY_MEASURE)));
                assert!(d0.iter().all(|row| row.person != "canary"));
                assert!(case.csv(&d1).starts_with("row_id,x1,x2,y,value,person\n"));
                continue;
            }
            assert!(case.csv(&d1).starts_with("row_id,x1,x2,y,value\n"));
            assert_eq!((d0.len(), d1.len()), (BASE_ROWS + 1, BASE_ROWS + 1));
            assert_eq!(d0[..BASE_ROWS], d1[..BASE_ROWS]);
            let (a, b) = (&d0[BASE_ROWS], &d1[BASE_ROWS]);
            let across = case.unit == PrivacyUnit::Row && case.canary == Canary::Across;
            assert_eq!((a.label, b.label), (u8::from(across), 1));
            assert_eq!((a.value, b.value), (0.0, CANARY_MEASURE));
            match case.unit {
                PrivacyUnit::Label => assert_eq!(a.x, b.x),
                PrivacyUnit::Row => assert_eq!((a.x, b.x), ([0.0; 2], [1.0; 2])),
                PrivacyUnit::User => unreachable!("handled above"),
            }
            // The same seed, the same rows.
            assert_eq!(case.neighbours(7), (d0, d1));
        }
    }

    #[test]
    fn every_case_makes_a_valid_request_and_pure_ones_ask_no_delta() {
        let cases = select(&[], &[]).unwrap();
        assert_eq!(cases.len(), 34);
        for case in &cases {
            let (rows, _) = case.neighbours(1);
            let request = case.request(1.0, 1e-5, &rows).unwrap();
            assert_eq!(request.kind(), case.kind);
            assert_eq!(request.delta(), if case.pure { 0.0 } else { 1e-5 });
        }
    }

    #[test]
    fn kinds_and_units_filter_and_an_unknown_kind_is_refused() {
        let walr = select(&["walr".to_owned()], &[PrivacyUnit::Row]).unwrap();
        assert_eq!(walr.len(), 3);
        assert!(walr.iter().all(|case| case.unit == PrivacyUnit::Row));
        let error = select(&["model/dp".to_owned()], &[]).unwrap_err();
        assert!(
            error.contains("\"model/dp\"") && error.contains("model/dp-gd"),
            "{error}"
        );
        assert_eq!(kinds().len(), 8);
    }
}
