//! Every `structuredContent` against the frozen schemas.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, RequestMetaObject, RequestParamsMeta as _,
};
use serde_json::{Value, json};

/// The three tools.
pub const TOOLS: [&str; 3] = ["lookup_knowledge", "query_logs", "query_mysql"];

fn read_schema(file: &str) -> Value {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas")).join(file);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Validators of the frozen schemas, by file name.
static VALIDATORS: LazyLock<HashMap<String, jsonschema::Validator>> = LazyLock::new(|| {
    let mut files = vec!["error.result.json".to_owned()];
    files.extend(TOOLS.iter().map(|t| format!("{t}.observation.json")));
    files
        .into_iter()
        .map(|file| {
            let validator = jsonschema::validator_for(&read_schema(&file)).unwrap();
            (file, validator)
        })
        .collect()
});

/// The frozen `tools/list` entries (`schemas/tools.mcp.json`).
pub fn frozen_tools() -> Value {
    read_schema("tools.mcp.json")["tools"].clone()
}

fn assert_valid(validator: &jsonschema::Validator, instance: &Value, what: &str) {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{what} rejects {instance}: {errors:?}");
}

/// Text that must never reach an agent or a log.
pub fn assert_clean(text: &str, what: &str) {
    let lower = text.to_ascii_lowercase();
    for needle in ["://", "panic", "backtrace", "password", "secret", "aci:{"] {
        assert!(
            !lower.contains(needle),
            "{what} contains {needle:?}: {text}"
        );
    }
}

/// Checks one result against the contract and returns its structured content.
pub fn check(tool: &str, result: &CallToolResult) -> Value {
    let structured = result
        .structured_content
        .clone()
        .expect("every result has structuredContent");
    let [ContentBlock::Text(text)] = result.content.as_slice() else {
        panic!("expected exactly one text block: {:?}", result.content);
    };
    let from_text: Value = serde_json::from_str(&text.text).unwrap();
    assert_eq!(from_text, structured, "the text block is the same JSON");
    let status = structured["evidence_status"].as_str().unwrap();
    let is_error = status == "ERROR";
    assert_eq!(result.is_error, Some(is_error), "isError of {status}");
    if is_error {
        assert_valid(
            &VALIDATORS["error.result.json"],
            &structured,
            "error.result.json",
        );
        assert_clean(&text.text, "an error result");
    } else {
        let file = format!("{tool}.observation.json");
        assert_valid(&VALIDATORS[&file], &structured, &file);
    }
    structured
}

/// `tools/call` params with `arguments` and `_meta` (objects, or null for none).
pub fn params(name: &str, arguments: Value, meta: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name.to_owned());
    if let Value::Object(arguments) = arguments {
        params = params.with_arguments(arguments);
    }
    if let Value::Object(meta) = meta {
        params.set_meta(RequestMetaObject::from(meta));
    }
    params
}

/// `_meta` naming a run and a tool call id.
pub fn ids(run_id: &str, tool_call_id: &str) -> Value {
    json!({ "aci/run_id": run_id, "aci/tool_call_id": tool_call_id })
}

/// The error code of an error observation.
pub fn error_code(observation: &Value) -> &str {
    assert_eq!(observation["evidence_status"], "ERROR", "{observation}");
    observation["error_code"].as_str().unwrap()
}
