//! The tool contract as an MCP client sees it, over stdio and HTTP alike:
//! every result against the frozen schemas of `schemas/` ([`check`]), the
//! `_meta` ids a framework sends, and rmcp client calls checked that way
//! ([`call`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, RequestMetaObject, RequestParamsMeta as _,
};
use rmcp::service::RunningService;
use serde_json::{Value, json};

use super::HANG_GUARD;

/// An rmcp client of an `aci` server, over stdio or HTTP.
pub(crate) type McpClient = RunningService<RoleClient, ()>;

/// The three tools, in `tools/list` order.
pub(crate) const TOOLS: [&str; 3] = ["lookup_knowledge", "query_logs", "query_mysql"];

/// A frozen schema file of `schemas/`, e.g. `tools.mcp.json`.
pub(crate) fn read_schema(file: &str) -> Value {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas")).join(file);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Validators of the frozen result schemas, by file name.
static VALIDATORS: LazyLock<HashMap<String, jsonschema::Validator>> = LazyLock::new(|| {
    let mut files = vec!["error.result.json".to_owned()];
    files.extend(TOOLS.iter().map(|t| format!("{t}.observation.json")));
    files
        .into_iter()
        .map(|file| {
            let validator = jsonschema::validator_for(&read_schema(&file))
                .unwrap_or_else(|e| panic!("{file} is not a valid schema: {e}"));
            (file, validator)
        })
        .collect()
});

/// Validators of each tool's frozen `outputSchema`, by tool name.
static OUTPUT_SCHEMAS: LazyLock<HashMap<String, jsonschema::Validator>> = LazyLock::new(|| {
    TOOLS
        .iter()
        .map(|tool| {
            let schema = frozen_output_schema(tool)
                .unwrap_or_else(|| panic!("no frozen outputSchema of {tool}"));
            let validator = jsonschema::validator_for(&schema)
                .unwrap_or_else(|e| panic!("the outputSchema of {tool} is not valid: {e}"));
            ((*tool).to_owned(), validator)
        })
        .collect()
});

/// The validator of result schema `file` (`error.result.json`,
/// `<tool>.observation.json`).
pub(crate) fn validator(file: &str) -> &'static jsonschema::Validator {
    &VALIDATORS[file]
}

/// The frozen `tools/list` entries (`schemas/tools.mcp.json`).
pub(crate) fn frozen_tools() -> Value {
    read_schema("tools.mcp.json")["tools"].clone()
}

/// The frozen `outputSchema` of `tool`, if it is one of the three.
pub(crate) fn frozen_output_schema(tool: &str) -> Option<Value> {
    frozen_tools()
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .map(|t| t["outputSchema"].clone())
}

/// Asserts that `validator` accepts `instance`, naming `what` otherwise.
pub(crate) fn assert_valid(validator: &jsonschema::Validator, instance: &Value, what: &str) {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{what} rejects {instance}: {errors:?}");
}

/// Text that must never reach an agent, the terminal or a log.
pub(crate) fn assert_clean(text: &str, what: &str) {
    let lower = text.to_ascii_lowercase();
    for needle in ["://", "panic", "backtrace", "password", "secret", "aci:{"] {
        assert!(
            !lower.contains(needle),
            "{what} contains {needle:?}: {text}"
        );
    }
}

/// Checks one result of `tool` against the contract and returns its
/// structured content: one text block holding the same JSON in the
/// contract's field order, `isError` exactly for ERROR, the frozen schema of
/// its status and the tool's frozen `outputSchema`, an error result clean of
/// URLs and secrets, and no result `_meta`.
pub(crate) fn check(tool: &str, result: &CallToolResult) -> Value {
    let structured = result
        .structured_content
        .clone()
        .expect("every result has structuredContent");
    let [ContentBlock::Text(text)] = result.content.as_slice() else {
        panic!("expected exactly one text block: {:?}", result.content);
    };
    let from_text: Value = serde_json::from_str(&text.text).unwrap();
    assert_eq!(from_text, structured, "the text block is the same JSON");
    assert!(
        text.text.starts_with("{\"evidence_status\":"),
        "the text keeps the contract's field order: {}",
        text.text
    );
    let status = structured["evidence_status"].as_str().unwrap();
    let is_error = status == "ERROR";
    assert_eq!(result.is_error, Some(is_error), "isError of {status}");
    if is_error {
        assert_valid(
            validator("error.result.json"),
            &structured,
            "error.result.json",
        );
        assert_clean(&text.text, "an error result");
    } else {
        let file = format!("{tool}.observation.json");
        assert_valid(validator(&file), &structured, &file);
    }
    if let Some(output) = OUTPUT_SCHEMAS.get(tool) {
        assert_valid(output, &structured, "the tool's outputSchema");
    }
    assert!(result.meta.is_none(), "nothing but the observation");
    structured
}

/// Calls `tool` through an rmcp client (over stdio or HTTP) with `arguments`
/// and `_meta` (objects, or null for none), and [`check`]s the result.
pub(crate) async fn call(client: &McpClient, tool: &str, arguments: Value, meta: Value) -> Value {
    let result = tokio::time::timeout(HANG_GUARD, client.call_tool(params(tool, arguments, meta)))
        .await
        .unwrap()
        .unwrap();
    check(tool, &result)
}

/// `tools/call` params with `arguments` and `_meta` (objects, or null for none).
pub(crate) fn params(name: &str, arguments: Value, meta: Value) -> CallToolRequestParams {
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
pub(crate) fn ids(run_id: &str, tool_call_id: &str) -> Value {
    json!({ "aci/run_id": run_id, "aci/tool_call_id": tool_call_id })
}

/// `_meta` naming a tool call id (in the server's run).
pub(crate) fn call_id(tool_call_id: &str) -> Value {
    json!({ "aci/tool_call_id": tool_call_id })
}

/// The error code of an error observation.
pub(crate) fn error_code(observation: &Value) -> &str {
    assert_eq!(observation["evidence_status"], "ERROR", "{observation}");
    observation["error_code"].as_str().unwrap()
}
