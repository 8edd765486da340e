//! The ridge strength λ of a model release: a number, `"auto"` (the
//! default), or `{"select": [λ₁, …, λ_m]}`.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use utoipa::PartialSchema;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{KnownFormat, RefOr, SchemaFormat};

/// The fewest and the most candidates a private selection may name.
pub const MIN_CANDIDATES: usize = 2;
pub const MAX_CANDIDATES: usize = 8;

/// How a model release sets λ of (λ/2)‖w‖².
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Lambda {
    /// Chosen from public facts alone (N, d, ε, δ and the certified
    /// solver's floor) by minimising the mechanism's excess-risk bound
    /// (docs/models.md, "Choosing λ").
    #[default]
    Auto,
    /// The analyst's λ.
    Fixed(f64),
    /// Each candidate trained privately on a public split of the rows and
    /// the best on the held-out rest picked by report-noisy-max, priced
    /// and debited as one release.
    Select(Vec<f64>),
}

impl Serialize for Lambda {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Lambda::Auto => serializer.serialize_str("auto"),
            Lambda::Fixed(lambda) => serializer.serialize_f64(*lambda),
            Lambda::Select(candidates) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("select", candidates)?;
                map.end()
            }
        }
    }
}

const EXPECTED: &str = "a number, \"auto\" or {\"select\": [λ₁, …]}";

impl<'de> Deserialize<'de> for Lambda {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LambdaVisitor;

        impl<'de> Visitor<'de> for LambdaVisitor {
            type Value = Lambda;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str(EXPECTED)
            }

            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Lambda, E> {
                Ok(Lambda::Fixed(value))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Lambda, E> {
                Ok(Lambda::Fixed(value as f64))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Lambda, E> {
                Ok(Lambda::Fixed(value as f64))
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Lambda, E> {
                match value {
                    "auto" => Ok(Lambda::Auto),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &EXPECTED)),
                }
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Lambda, A::Error> {
                let mut candidates = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "select" {
                        return Err(de::Error::unknown_field(&key, &["select"]));
                    }
                    if candidates.is_some() {
                        return Err(de::Error::duplicate_field("select"));
                    }
                    candidates = Some(map.next_value::<Vec<f64>>()?);
                }
                candidates
                    .map(Lambda::Select)
                    .ok_or_else(|| de::Error::missing_field("select"))
            }
        }

        deserializer.deserialize_any(LambdaVisitor)
    }
}

/// `auto`, a number, or `select:λ₁,λ₂,…` (the client CLI's `--lambda`).
impl FromStr for Lambda {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let number = |text: &str| {
            text.trim()
                .parse::<f64>()
                .map_err(|_| format!("λ must be `auto`, a number or `select:λ₁,λ₂,…` (got {text})"))
        };
        if text == "auto" {
            Ok(Lambda::Auto)
        } else if let Some(list) = text.strip_prefix("select:") {
            list.split(',')
                .map(number)
                .collect::<Result<_, _>>()
                .map(Lambda::Select)
        } else {
            number(text).map(Lambda::Fixed)
        }
    }
}

impl fmt::Display for Lambda {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Lambda::Auto => formatter.write_str("auto"),
            Lambda::Fixed(lambda) => write!(formatter, "{lambda}"),
            Lambda::Select(candidates) => {
                let list: Vec<String> = candidates.iter().map(f64::to_string).collect();
                write!(formatter, "select:{}", list.join(","))
            }
        }
    }
}

impl PartialSchema for Lambda {
    fn schema() -> RefOr<Schema> {
        let number = || {
            ObjectBuilder::new()
                .schema_type(Type::Number)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
                .minimum(Some(1e-12))
                .maximum(Some(1e6))
        };
        let select = ObjectBuilder::new()
            .property(
                "select",
                ArrayBuilder::new()
                    .items(number())
                    .min_items(Some(MIN_CANDIDATES))
                    .max_items(Some(MAX_CANDIDATES)),
            )
            .required("select")
            .additional_properties(Some(
                utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
            ));
        OneOfBuilder::new()
            .item(number().description(Some("λ itself.")))
            .item(crate::schemas::constant("auto"))
            .item(select)
            .description(Some(
                "λ of (λ/2)‖w‖²: a number in [1e-12, 1e6] (at least the certified\n\
                 solver's floor for the dataset's N and d), \"auto\" (the default: chosen\n\
                 from N, d, ε and δ alone), or {\"select\": [λ₁, …, λ_m]} (2 to 8\n\
                 candidates, trained on 90% of the rows, the best on the other 10%\n\
                 picked by report-noisy-max, all for the request's ε).",
            ))
            .default(Some(serde_json::json!("auto")))
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_read_and_write_back() {
        for (text, lambda) in [
            ("0.001", Lambda::Fixed(1e-3)),
            ("2", Lambda::Fixed(2.0)),
            ("\"auto\"", Lambda::Auto),
            ("{\"select\":[0.1,0.0001]}", Lambda::Select(vec![0.1, 1e-4])),
        ] {
            assert_eq!(serde_json::from_str::<Lambda>(text).unwrap(), lambda);
            let back = serde_json::to_string(&lambda).unwrap();
            assert_eq!(serde_json::from_str::<Lambda>(&back).unwrap(), lambda);
        }
    }

    #[test]
    fn other_forms_are_refused_with_what_is_expected() {
        for text in [
            "\"best\"",
            "[0.1]",
            "{\"choose\":[0.1]}",
            "{}",
            "{\"select\":[0.1],\"select\":[0.2]}",
            "true",
            "null",
        ] {
            assert!(serde_json::from_str::<Lambda>(text).is_err(), "{text}");
        }
        let error = serde_json::from_str::<Lambda>("\"best\"").unwrap_err();
        assert!(error.to_string().contains("\"auto\""), "{error}");
    }

    #[test]
    fn the_cli_form_parses() {
        assert_eq!("auto".parse::<Lambda>(), Ok(Lambda::Auto));
        assert_eq!("1e-4".parse::<Lambda>(), Ok(Lambda::Fixed(1e-4)));
        assert_eq!(
            "select:1e-3,1e-5".parse::<Lambda>(),
            Ok(Lambda::Select(vec![1e-3, 1e-5]))
        );
        assert!("select:".parse::<Lambda>().is_err());
        assert!("lots".parse::<Lambda>().is_err());
        assert_eq!(
            Lambda::Select(vec![1e-3, 1e-5]).to_string(),
            "select:0.001,0.00001"
        );
    }
}
