//! The JSON schemas the tools are described by, derived from their argument structs and from
//! proto's answer types, made portable for every MCP client: optional arguments left out of
//! `required`, no `uint` formats, integers bounded to what JSON numbers carry exactly.

use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::{Value, json};

/// The input schema of an argument struct, as MCP wants it (a JSON object with `type: object`).
/// Optional arguments are simply left out, so `anyOf [T, null]` is just `T`; only each
/// argument keeps its description.
pub(crate) fn input_schema<T: JsonSchema>() -> Arc<JsonObject> {
    let mut value = schema_of::<T>();
    if let Some(map) = value.as_object_mut() {
        map.remove("description");
        let props = map.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(props) = props {
            props.values_mut().for_each(optional_argument);
        }
    }
    object(value)
}

/// One argument's schema: its description kept, `null` dropped from its choices, the rest
/// [`compact`]ed.
fn optional_argument(prop: &mut Value) {
    let Value::Object(map) = prop else { return };
    let description = map.remove("description");
    if let Some(Value::Array(branches)) = map.get("anyOf") {
        let not_null: Vec<&Value> =
            branches.iter().filter(|b| b.get("type") != Some(&json!("null"))).collect();
        if let [only] = not_null.as_slice()
            && let Value::Object(only) = (*only).clone()
        {
            map.remove("anyOf");
            map.extend(only);
        }
    }
    compact(prop);
    if let (Some(d), Value::Object(map)) = (description, prop) {
        map.insert("description".into(), d);
    }
}

/// The output schema of a daemon result type: the shape of `structuredContent`, derived from
/// proto's type (so it cannot drift from the wire). Without descriptions (the fields are
/// documented in `docs/protocol.md`; the model reads the text content) and with string choices
/// as plain `enum`s, so `tools/list` stays small.
pub(crate) fn output_schema<T: JsonSchema>() -> Arc<JsonObject> {
    let mut value = schema_of::<T>();
    compact(&mut value);
    object(value)
}

/// Drop descriptions and defaults; turn a `oneOf` of string constants into an `enum`.
fn compact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("description");
            map.remove("default");
            map.values_mut().for_each(compact);
            let consts: Option<Vec<Value>> = match map.get("oneOf") {
                Some(Value::Array(branches)) => branches
                    .iter()
                    .map(|b| match b.as_object() {
                        Some(o) if o.len() == 2 && o.get("type") == Some(&json!("string")) => {
                            o.get("const").cloned()
                        }
                        _ => None,
                    })
                    .collect(),
                _ => None,
            };
            if let Some(consts) = consts {
                map.remove("oneOf");
                map.insert("type".into(), json!("string"));
                map.insert("enum".into(), Value::Array(consts));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(compact),
        _ => {}
    }
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// `T`'s JSON Schema (draft 2020-12, inlined) in the form every host compiles: see [`portable`].
fn schema_of<T: JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = serde_json::to_value(schema).unwrap_or_else(|_| json!({}));
    portable(&mut value);
    if let Some(map) = value.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
        map.entry("type").or_insert_with(|| json!("object"));
    }
    value
}

/// Largest integer a JSON number holds exactly (2^53 - 1): the `maximum` of counters and
/// cursors.
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Rewrite what strict validators (Ajv in strict mode) refuse: integer `format`s (`uint64`,
/// `uint`, …) become `minimum`/`maximum`; a type list such as `["integer", "null"]` becomes an
/// `anyOf` of single types; `nullable`-style unions keep their keywords on the right branch.
fn portable(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.values_mut().for_each(portable);
            if let Some(Value::Array(types)) = map.get("type").cloned() {
                // Split the keywords of each type onto its own branch.
                let mut branches = Vec::new();
                for t in types {
                    let mut branch = serde_json::Map::new();
                    branch.insert("type".into(), t.clone());
                    if t != "null" {
                        for key in TYPED_KEYWORDS {
                            if let Some(v) = map.get(*key) {
                                branch.insert((*key).into(), v.clone());
                            }
                        }
                    }
                    let mut branch = Value::Object(branch);
                    integer_bounds(&mut branch);
                    branches.push(branch);
                }
                map.remove("type");
                for key in TYPED_KEYWORDS {
                    map.remove(*key);
                }
                map.insert("anyOf".into(), Value::Array(branches));
            } else {
                integer_bounds_map(map);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(portable),
        _ => {}
    }
}

/// Keywords that belong to one type (moved onto that type's branch of an `anyOf`).
const TYPED_KEYWORDS: &[&str] = &[
    "format",
    "minimum",
    "maximum",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minLength",
    "maxLength",
];

fn integer_bounds(value: &mut Value) {
    if let Value::Object(map) = value {
        integer_bounds_map(map);
    }
}

/// An integer with a `format` gets bounds instead: `uint*` from 0, `int*` within ±2^53.
fn integer_bounds_map(map: &mut serde_json::Map<String, Value>) {
    if map.get("type") != Some(&json!("integer")) {
        return;
    }
    let Some(Value::String(format)) = map.remove("format") else {
        if !map.contains_key("minimum") {
            map.insert("minimum".into(), json!(-(MAX_SAFE_INTEGER as i64)));
        }
        if !map.contains_key("maximum") {
            map.insert("maximum".into(), json!(MAX_SAFE_INTEGER));
        }
        return;
    };
    let (min, max): (i64, u64) = match format.as_str() {
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "int8" => (i8::MIN.into(), i8::MAX as u64),
        "int16" => (i16::MIN.into(), i16::MAX as u64),
        "int32" => (i32::MIN.into(), i32::MAX as u64),
        f if f.starts_with("uint") => (0, MAX_SAFE_INTEGER),
        _ => (-(MAX_SAFE_INTEGER as i64), MAX_SAFE_INTEGER),
    };
    map.entry("minimum").or_insert_with(|| json!(min));
    map.entry("maximum").or_insert_with(|| json!(max));
}
