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

use crate::releases::{ReleaseParams, ReleaseRequest, SuppliedRow};

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

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = ReleaseRequest;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object with a `kind`")
    }

    /// `kind`, `epsilon` and `delta` are every kind's; `features` (a
    /// `walr` release's supplied vectors, the one field that can be large)
    /// is read as it streams in; the kind's other fields are small and
    /// gathered for its own type to read.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReleaseRequest, A::Error> {
        let mut kind: Option<String> = None;
        let mut epsilon: Option<f64> = None;
        let mut delta: Option<Option<f64>> = None;
        let mut features: Option<Vec<SuppliedRow>> = None;
        let mut rest = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "kind" => once(&mut kind, "kind", map.next_value()?)?,
                "epsilon" => once(&mut epsilon, "epsilon", map.next_value()?)?,
                "delta" => once(&mut delta, "delta", map.next_value()?)?,
                "features" => once(&mut features, "features", map.next_value()?)?,
                _ => {
                    let value: Value = map.next_value()?;
                    if rest.insert(key.clone(), value).is_some() {
                        return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
                    }
                }
            }
        }
        let kind = kind.ok_or_else(|| A::Error::missing_field("kind"))?;
        let mut params = ReleaseParams::parse(&kind, rest).map_err(A::Error::custom)?;
        match (&mut params, features) {
            (ReleaseParams::Walr(walr), features) => walr.features = features,
            (_, Some(_)) => return Err(A::Error::custom("unknown field `features`")),
            (_, None) => {}
        }
        Ok(ReleaseRequest {
            epsilon,
            delta: delta.flatten(),
            params,
        })
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
            ReleaseRequest {
                epsilon: Some(1.0),
                delta: None,
                params: ReleaseParams::Walr(crate::WalrParams {
                    intercept: true,
                    features: Some(vec![SuppliedRow {
                        row_id: "r1".to_owned(),
                        x: vec![0.5]
                    }]),
                    ..crate::WalrParams::default()
                }),
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
        // Written as it always was: the idempotency hash covers these bytes.
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"kind":"walr","epsilon":1.0,"delta":null,"intercept":true,"features":[{"row_id":"r1","x":[0.5]}]}"#
        );
        refused::<ReleaseRequest>(
            r#"{"kind": "aggregate", "epsilon": 1, "statistics": ["count"], "features": []}"#,
            "unknown field `features`",
        );
        refused::<ReleaseRequest>(
            r#"{"kind": "aggregate", "epsilon": 1, "statistics": ["count"], "group_by": [], "group_by": []}"#,
            "duplicate field `group_by`",
        );
        // Every kind survives its own serialisation.
        for json in [
            r#"{"kind": "aggregate", "epsilon": 1, "statistics": ["count"], "mechanism": "laplace"}"#,
            r#"{"kind": "model/objective-perturbation", "epsilon": 1, "lambda": 0.1}"#,
            r#"{"kind": "model/output-perturbation", "epsilon": 1, "delta": 1e-6, "lambda": 0.1, "fit_intercept": false}"#,
        ] {
            let request: ReleaseRequest = serde_json::from_str(json).unwrap();
            let written = serde_json::to_string(&request).unwrap();
            assert!(written.starts_with(&format!(
                r#"{{"kind":"{}","epsilon":1.0,"delta":"#,
                request.kind()
            )));
            let again: ReleaseRequest = serde_json::from_str(&written).unwrap();
            assert_eq!(again, request);
        }
    }
}
