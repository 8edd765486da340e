//! Schema pieces the derive cannot say on its own, so that the OpenAPI
//! document states exactly what the server accepts: δ ranges with the
//! ledger's resolution, names without control characters, lists without
//! repeats, caps keyed by analyst.

use utoipa::openapi::schema::{
    AnyOfBuilder, ArrayBuilder, KnownFormat, Object, ObjectBuilder, OneOfBuilder, Schema,
    SchemaFormat, Type,
};
use utoipa::openapi::{Ref, RefOr};

/// A name: 1 to 128 characters, none a control character (Unicode Cc),
/// not all whitespace.
pub const NAME_PATTERN: &str = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$";

/// The smallest positive δ the ledger records (10⁻³⁰).
pub const MIN_DELTA: f64 = 1e-30;
/// The smallest ε the ledger records (10⁻⁹).
pub const MIN_EPSILON: f64 = 1e-9;
/// The largest ε any budget or release may name.
pub const MAX_EPSILON: f64 = 1e6;

fn number() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Number)
}

/// δ > 0: at least [`MIN_DELTA`], below 1.
fn positive_delta() -> ObjectBuilder {
    number()
        .minimum(Some(MIN_DELTA))
        .exclusive_maximum(Some(1.0))
}

/// A release's ε: at least `min`, at most [`MAX_EPSILON`].
pub fn epsilon(min: f64, description: Option<&str>) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Number)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
        .description(description)
        .minimum(Some(min))
        .maximum(Some(MAX_EPSILON))
        .build()
}

/// A string that must be `value` (a release's `kind`).
pub fn constant(value: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([value]))
        .build()
}

/// A δ a release requires: positive.
pub fn required_delta() -> Object {
    positive_delta()
        .description(Some("Required: in [1e-30, 1)."))
        .build()
}

/// A δ a release may omit: absent, `null` or 0 (pure ε), else positive.
pub fn optional_delta() -> Schema {
    Schema::AnyOf(
        AnyOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .item(number().enum_values(Some([0.0])))
            .item(positive_delta())
            .description(Some("Omitted, null or 0 for pure ε; else in [1e-30, 1)."))
            .build(),
    )
}

/// A δ that must be absent, `null` or 0.
pub fn no_delta() -> Schema {
    Schema::AnyOf(
        AnyOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .item(number().enum_values(Some([0.0])))
            .description(Some("Must be omitted, null or 0: the mechanism is pure ε."))
            .build(),
    )
}

fn name(max: usize) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(NAME_PATTERN))
}

/// A dataset or column name.
pub fn column_name() -> Object {
    name(128).build()
}

/// `caps`: analysts' names (1 to 200 characters, as names) to a
/// [`crate::Budget`] or `null`, at most 1000 of them.
pub fn caps() -> Object {
    let value = OneOfBuilder::new()
        .item(Ref::from_schema_name("Budget"))
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .build();
    ObjectBuilder::new()
        .additional_properties(Some(RefOr::T(Schema::OneOf(value))))
        .property_names(Some(name(200)))
        .max_properties(Some(1000))
        .build()
}

/// A list of distinct strings, `min` to `max` of them, each matching
/// `pattern` if given.
fn distinct_strings(min: usize, max: usize, pattern: Option<&str>) -> ArrayBuilder {
    let mut item = ObjectBuilder::new().schema_type(Type::String);
    if let Some(pattern) = pattern {
        item = item.pattern(Some(pattern));
    }
    ArrayBuilder::new()
        .items(item)
        .min_items(Some(min))
        .max_items(Some(max))
        .unique_items(true)
}

/// An aggregate's statistics: 1 to 16 distinct `count`, `sum:COLUMN` or
/// `mean:COLUMN`.
pub fn statistics() -> utoipa::openapi::Array {
    distinct_strings(1, 16, Some(r"^(count|sum:.+|mean:.+)$")).build()
}

/// An aggregate's `group_by`: distinct dimension names, at most 16.
pub fn group_by() -> utoipa::openapi::Array {
    distinct_strings(0, 16, None).build()
}

/// A dimension's values: 1 to 100,000 distinct strings.
pub fn dimension_values() -> utoipa::openapi::Array {
    distinct_strings(1, 100_000, None).build()
}

/// A supplied feature vector: 1 to 4096 values in [0, 1].
pub fn feature_vector() -> utoipa::openapi::Array {
    ArrayBuilder::new()
        .items(number().minimum(Some(0.0)).maximum(Some(1.0)))
        .min_items(Some(1))
        .max_items(Some(4096))
        .build()
}

/// Model weights: finite, each at most 10⁶ in magnitude.
pub fn weights() -> utoipa::openapi::Array {
    ArrayBuilder::new()
        .items(number().minimum(Some(-1e6)).maximum(Some(1e6)))
        .min_items(Some(1))
        .build()
}
