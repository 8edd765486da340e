//! Request bodies read strictly: objects only, every field once.
//!
//! serde's derived `Deserialize` for a struct also accepts a JSON array of
//! its fields in declaration order, so `"budget": [5, 1e-6]` would be read
//! as ε = 5, δ = 10⁻⁶, and a swapped `[1e-6, 5]` silently as another
//! budget. Request types therefore read their struct-typed fields through
//! [`object`] and its relatives, which accept JSON objects only.
//!
//! A release request is read by a visitor of its own: serde's internally
//! tagged enums buffer the whole body as an untyped tree before choosing
//! the variant (several times the body's size for supplied feature
//! vectors), and would accept arrays for its nested rows.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, de::Error as _};
use serde_json::{Map, Value};

use crate::releases::{AggregateMechanism, ReleaseRequest, SuppliedRow};

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(flag) => de::Unexpected::Bool(*flag),
        Value::Number(_) => de::Unexpected::Other("a number"),
        Value::String(text) => de::Unexpected::Str(text),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

fn from_object<T: DeserializeOwned, E: de::Error>(value: Value) -> Result<T, E> {
    match value {
        Value::Object(map) => T::deserialize(Value::Object(map)).map_err(E::custom),
        other => Err(E::invalid_type(unexpected(&other), &"a JSON object")),
    }
}

/// A `T` from a JSON object, never from an array.
pub fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<T, D::Error> {
    from_object(Value::deserialize(d)?)
}

/// [`object`] or `null`.
pub fn optional_object<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        value => from_object(value).map(Some),
    }
}

/// A list of [`object`]s.
pub fn objects<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    Vec::<Value>::deserialize(d)?
        .into_iter()
        .map(from_object)
        .collect()
}

/// A map from names to [`object`]s or `null`.
pub fn optional_objects_by_name<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<BTreeMap<String, Option<T>>, D::Error> {
    Map::<String, Value>::deserialize(d)?
        .into_iter()
        .map(|(name, value)| {
            let value = match value {
                Value::Null => None,
                value => Some(from_object(value)?),
            };
            Ok((name, value))
        })
        .collect()
}

/// Fills `slot` once; a second value for the same key is an error.
fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

struct RowVisitor;

impl<'de> Visitor<'de> for RowVisitor {
    type Value = SuppliedRow;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object {\"row_id\": …, \"x\": […]}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SuppliedRow, A::Error> {
        let (mut row_id, mut x) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "row_id" => once(&mut row_id, "row_id", map.next_value()?)?,
                "x" => once(&mut x, "x", map.next_value()?)?,
                other => return Err(A::Error::unknown_field(other, &["row_id", "x"])),
            }
        }
        Ok(SuppliedRow {
            row_id: row_id.ok_or_else(|| A::Error::missing_field("row_id"))?,
            x: x.ok_or_else(|| A::Error::missing_field("x"))?,
        })
    }
}

impl<'de> Deserialize<'de> for SuppliedRow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RowVisitor)
    }
}

/// Every field any release kind has.
const FIELDS: &[&str] = &[
    "kind",
    "epsilon",
    "delta",
    "intercept",
    "features",
    "statistics",
    "group_by",
    "mechanism",
    "lambda",
    "fit_intercept",
];

/// The `kind`s there are.
const KINDS: &[&str] = &[
    "walr",
    "aggregate",
    "model/output-perturbation",
    "model/objective-perturbation",
];

/// The fields of a release request as they came, each at most once.
#[derive(Default)]
struct Fields {
    kind: Option<String>,
    epsilon: Option<f64>,
    delta: Option<Option<f64>>,
    intercept: Option<bool>,
    features: Option<Vec<SuppliedRow>>,
    statistics: Option<Vec<String>>,
    group_by: Option<Vec<String>>,
    mechanism: Option<AggregateMechanism>,
    lambda: Option<f64>,
    fit_intercept: Option<bool>,
}

impl Fields {
    /// The names of the fields that were given.
    fn given(&self) -> Vec<&'static str> {
        let present = [
            self.kind.is_some(),
            self.epsilon.is_some(),
            self.delta.is_some(),
            self.intercept.is_some(),
            self.features.is_some(),
            self.statistics.is_some(),
            self.group_by.is_some(),
            self.mechanism.is_some(),
            self.lambda.is_some(),
            self.fit_intercept.is_some(),
        ];
        FIELDS
            .iter()
            .zip(present)
            .filter_map(|(name, present)| present.then_some(*name))
            .collect()
    }

    /// The request of the given kind, refusing any field it does not have.
    fn build<E: de::Error>(self) -> Result<ReleaseRequest, E> {
        let kind = self.kind.clone().ok_or_else(|| E::missing_field("kind"))?;
        let allowed: &[&str] = match kind.as_str() {
            "walr" => &["kind", "epsilon", "delta", "intercept", "features"],
            "aggregate" => &[
                "kind",
                "epsilon",
                "delta",
                "statistics",
                "group_by",
                "mechanism",
            ],
            "model/output-perturbation" | "model/objective-perturbation" => {
                &["kind", "epsilon", "delta", "lambda", "fit_intercept"]
            }
            other => return Err(E::unknown_variant(other, KINDS)),
        };
        if let Some(stray) = self
            .given()
            .into_iter()
            .find(|name| !allowed.contains(name))
        {
            return Err(E::unknown_field(stray, allowed));
        }
        let epsilon = self.epsilon.ok_or_else(|| E::missing_field("epsilon"))?;
        let delta = self.delta.flatten();
        Ok(match kind.as_str() {
            "walr" => ReleaseRequest::Walr {
                epsilon,
                delta,
                intercept: self.intercept.unwrap_or(true),
                features: self.features,
            },
            "aggregate" => ReleaseRequest::Aggregate {
                epsilon,
                delta,
                statistics: self
                    .statistics
                    .ok_or_else(|| E::missing_field("statistics"))?,
                group_by: self.group_by.unwrap_or_default(),
                mechanism: self.mechanism.unwrap_or_default(),
            },
            model => {
                let lambda = self.lambda.ok_or_else(|| E::missing_field("lambda"))?;
                let fit_intercept = self.fit_intercept.unwrap_or(true);
                if model == "model/output-perturbation" {
                    ReleaseRequest::OutputPerturbation {
                        epsilon,
                        delta,
                        lambda,
                        fit_intercept,
                    }
                } else {
                    ReleaseRequest::ObjectivePerturbation {
                        epsilon,
                        delta,
                        lambda,
                        fit_intercept,
                    }
                }
            }
        })
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = ReleaseRequest;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object with a `kind`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReleaseRequest, A::Error> {
        let mut fields = Fields::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "kind" => once(&mut fields.kind, "kind", map.next_value()?)?,
                "epsilon" => once(&mut fields.epsilon, "epsilon", map.next_value()?)?,
                "delta" => once(&mut fields.delta, "delta", map.next_value()?)?,
                "intercept" => once(&mut fields.intercept, "intercept", map.next_value()?)?,
                "features" => once(&mut fields.features, "features", map.next_value()?)?,
                "statistics" => once(&mut fields.statistics, "statistics", map.next_value()?)?,
                "group_by" => once(&mut fields.group_by, "group_by", map.next_value()?)?,
                "mechanism" => once(&mut fields.mechanism, "mechanism", map.next_value()?)?,
                "lambda" => once(&mut fields.lambda, "lambda", map.next_value()?)?,
                "fit_intercept" => {
                    once(
                        &mut fields.fit_intercept,
                        "fit_intercept",
                        map.next_value()?,
                    )?;
                }
                other => return Err(A::Error::unknown_field(other, FIELDS)),
            }
        }
        fields.build()
    }
}

impl<'de> Deserialize<'de> for ReleaseRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RequestVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BudgetChange, CreateDataset};

    fn refused<T: DeserializeOwned + fmt::Debug>(json: &str, reason: &str) {
        let error = serde_json::from_str::<T>(json).unwrap_err().to_string();
        assert!(error.contains(reason), "{json}: {error}");
    }

    #[test]
    fn arrays_are_never_read_as_objects() {
        let dataset = r#"{"name": "d", "privacy_unit": "row", "label": "y",
            "features": [{"name": "f", "min": 0, "max": 1}], "budget": {"epsilon": 1, "delta": 1e-6}}"#;
        assert!(serde_json::from_str::<CreateDataset>(dataset).is_ok());
        refused::<CreateDataset>(
            &dataset.replace(r#"{"epsilon": 1, "delta": 1e-6}"#, "[1e-6, 1]"),
            "expected a JSON object",
        );
        refused::<CreateDataset>(
            &dataset.replace(r#"{"name": "f", "min": 0, "max": 1}"#, r#"["f", 0, 1]"#),
            "expected a JSON object",
        );
        refused::<BudgetChange>(r#"{"budget": [2000, 1e-3]}"#, "expected a JSON object");
        refused::<BudgetChange>(r#"{"caps": {"ana": [1, 2]}}"#, "expected a JSON object");
        assert!(serde_json::from_str::<BudgetChange>(r#"{"caps": {"ana": null}}"#).is_ok());
        refused::<ReleaseRequest>("[\"walr\", 1]", "invalid type");
        refused::<ReleaseRequest>(
            r#"{"kind": "walr", "epsilon": 1, "features": [["r1", [0.5]]]}"#,
            "invalid type: sequence",
        );
    }

    #[test]
    fn release_requests_take_each_field_once_and_only_their_kinds() {
        let request: ReleaseRequest = serde_json::from_str(
            r#"{"epsilon": 1, "delta": null, "kind": "walr",
                "features": [{"x": [0.5], "row_id": "r1"}]}"#,
        )
        .unwrap();
        assert_eq!(
            request,
            ReleaseRequest::Walr {
                epsilon: 1.0,
                delta: None,
                intercept: true,
                features: Some(vec![SuppliedRow {
                    row_id: "r1".to_owned(),
                    x: vec![0.5]
                }]),
            }
        );
        refused::<ReleaseRequest>(
            r#"{"kind": "walr", "epsilon": 1, "epsilon": 2}"#,
            "duplicate field `epsilon`",
        );
        refused::<ReleaseRequest>(
            r#"{"kind": "walr", "epsilon": 1, "lambda": 2}"#,
            "unknown field `lambda`",
        );
        refused::<ReleaseRequest>(
            r#"{"kind": "walr", "epsilon": 1, "x": 2}"#,
            "unknown field `x`",
        );
        refused::<ReleaseRequest>(r#"{"kind": "tea", "epsilon": 1}"#, "unknown variant `tea`");
        refused::<ReleaseRequest>(r#"{"epsilon": 1}"#, "missing field `kind`");
        refused::<ReleaseRequest>(
            r#"{"kind": "aggregate", "epsilon": 1}"#,
            "missing field `statistics`",
        );
        refused::<ReleaseRequest>(
            r#"{"kind": "walr", "epsilon": 1, "features": [{"row_id": "r", "x": [1], "y": 2}]}"#,
            "unknown field `y`",
        );
        // Every kind survives its own serialisation.
        for json in [
            r#"{"kind": "aggregate", "epsilon": 1, "statistics": ["count"], "mechanism": "laplace"}"#,
            r#"{"kind": "model/objective-perturbation", "epsilon": 1, "lambda": 0.1}"#,
            r#"{"kind": "model/output-perturbation", "epsilon": 1, "delta": 1e-6, "lambda": 0.1, "fit_intercept": false}"#,
        ] {
            let request: ReleaseRequest = serde_json::from_str(json).unwrap();
            let again: ReleaseRequest =
                serde_json::from_str(&serde_json::to_string(&request).unwrap()).unwrap();
            assert_eq!(again, request);
        }
    }
}
