//! The frozen schema files: the top layer (names <- schema generation <-
//! definitions <- frozen files).
//!
//! `cargo xtask schema` writes [`schema_files`] under `schemas/`;
//! `cargo xtask schema --check` and a test compare them with the committed copies.

use serde_json::{Map, Value, json};

use crate::schema::{observation_schema, request_schema, result_schema, schema_for};
use crate::{ErrorResult, ToolName, tool_definitions};

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
