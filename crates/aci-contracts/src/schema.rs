//! JSON Schemas (draft 2020-12) of the contracts, and the frozen schema files.
//!
//! `cargo xtask schema` writes [`schema_files`] under `schemas/`;
//! `cargo xtask schema --check` and a test compare them with the committed copies.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::{
    ErrorResult, LookupKnowledgeObservation, LookupKnowledgeRequest, LookupKnowledgeResult,
    QueryLogsObservation, QueryLogsRequest, QueryLogsResult, QueryMysqlObservation,
    QueryMysqlRequest, QueryMysqlResult, ToolName, tools::tool_definitions,
};

/// The `$schema` URI of every generated schema.
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
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

fn without_meta_schema(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// Every frozen schema file: (file name under `schemas/`, exact content).
///
/// Content is pretty JSON with keys sorted at every level and a trailing
/// newline, so it is identical whatever serde_json features a build enables.
#[must_use]
pub fn schema_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for tool in ToolName::ALL {
        let name = tool.as_str();
        files.push((format!("{name}.request.json"), render(request_schema(tool))));
        files.push((format!("{name}.result.json"), render(result_schema(tool))));
        files.push((
            format!("{name}.observation.json"),
            render(observation_schema(tool)),
        ));
    }
    files.push((
        "error.result.json".to_owned(),
        render(schema_for::<ErrorResult>()),
    ));
    let tools: Vec<Value> = tool_definitions().iter().map(|d| d.to_mcp()).collect();
    files.push((
        "tools.mcp.json".to_owned(),
        render(json!({ "tools": tools })),
    ));
    files.sort();
    files
}

/// Pretty JSON with sorted keys and a trailing newline.
#[must_use]
pub fn render(mut value: Value) -> String {
    sort_keys(&mut value);
    let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
    text.push('\n');
    text
}

fn sort_keys(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut sorted = Map::new();
            for (key, mut child) in entries {
                sort_keys(&mut child);
                sorted.insert(key, child);
            }
            *map = sorted;
        }
        Value::Array(items) => items.iter_mut().for_each(sort_keys),
        _ => {}
    }
}
