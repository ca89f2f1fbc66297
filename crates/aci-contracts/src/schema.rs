//! JSON Schemas (draft 2020-12) of the contracts, and the frozen schema files.
//!
//! Schema generation only: it knows the tool names, never the tool
//! definitions ([`ToolDefinition`](crate::ToolDefinition)s are built from it) or the frozen files
//! ([`crate::frozen`]).

use schemars::generate::SchemaSettings;
use schemars::transform::transform_subschemas;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Value, json};

use crate::{
    ErrorResult, LookupKnowledgeObservation, LookupKnowledgeRequest, LookupKnowledgeResult,
    QueryLogsObservation, QueryLogsRequest, QueryLogsResult, QueryMysqlObservation,
    QueryMysqlRequest, QueryMysqlResult, ToolName,
};

/// The `$schema` URI of every generated schema.
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .with_transform(standard_integer_bounds)
        .into_generator()
}

/// Replaces schemars' integer formats (`uint32`, `uint64`, ...), which are
/// not formats of JSON Schema and make standard validators warn, by the
/// bounds they stand for, as `minimum` and `maximum`. A bound the type
/// already narrowed (a `#[schemars(range)]`) is kept.
fn standard_integer_bounds(schema: &mut Schema) {
    transform_subschemas(&mut standard_integer_bounds, schema);
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let Some((minimum, maximum)) = object
        .get("format")
        .and_then(Value::as_str)
        .and_then(integer_format_bounds)
    else {
        return;
    };
    object.remove("format");
    object.entry("minimum").or_insert(minimum);
    object.entry("maximum").or_insert(maximum);
}

/// The bounds of one of schemars' integer formats.
fn integer_format_bounds(format: &str) -> Option<(Value, Value)> {
    Some(match format {
        "uint8" => (json!(0), json!(u8::MAX)),
        "uint16" => (json!(0), json!(u16::MAX)),
        "uint32" => (json!(0), json!(u32::MAX)),
        "uint64" | "uint" => (json!(0), json!(u64::MAX)),
        "int8" => (json!(i8::MIN), json!(i8::MAX)),
        "int16" => (json!(i16::MIN), json!(i16::MAX)),
        "int32" => (json!(i32::MIN), json!(i32::MAX)),
        "int64" | "int" => (json!(i64::MIN), json!(i64::MAX)),
        _ => return None,
    })
}

/// The root schema of `T`: draft 2020-12, every subschema inlined.
#[must_use]
pub fn schema_for<T: JsonSchema>() -> Value {
    generator().into_root_schema_for::<T>().to_value()
}

/// The request schema of `tool`.
#[must_use]
pub fn request_schema(tool: ToolName) -> Value {
    match tool {
        ToolName::LookupKnowledge => schema_for::<LookupKnowledgeRequest>(),
        ToolName::QueryLogs => schema_for::<QueryLogsRequest>(),
        ToolName::QueryMysql => schema_for::<QueryMysqlRequest>(),
    }
}

/// The bounded result schema of `tool`.
#[must_use]
pub fn result_schema(tool: ToolName) -> Value {
    match tool {
        ToolName::LookupKnowledge => schema_for::<LookupKnowledgeResult>(),
        ToolName::QueryLogs => schema_for::<QueryLogsResult>(),
        ToolName::QueryMysql => schema_for::<QueryMysqlResult>(),
    }
}

/// The model observation schema of `tool`.
#[must_use]
pub fn observation_schema(tool: ToolName) -> Value {
    match tool {
        ToolName::LookupKnowledge => schema_for::<LookupKnowledgeObservation>(),
        ToolName::QueryLogs => schema_for::<QueryLogsObservation>(),
        ToolName::QueryMysql => schema_for::<QueryMysqlObservation>(),
    }
}

/// The output schema of `tool` for MCP: an object that is exactly one of the
/// tool's observation or the error result.
#[must_use]
pub fn output_schema(tool: ToolName) -> Value {
    json!({
        "$schema": DRAFT_2020_12,
        "title": format!("{} output", tool.as_str()),
        "type": "object",
        "oneOf": [
            without_meta_schema(observation_schema(tool)),
            without_meta_schema(schema_for::<ErrorResult>())
        ]
    })
}

/// `schema` without its `$schema` key (for schemas embedded in another).
#[must_use]
pub fn without_meta_schema(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}
