//! The frozen request schemas and the implementation-neutral descriptions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use aci_contracts::schema::{observation_schema, request_schema, result_schema, schema_for};
use aci_contracts::{ErrorCode, ErrorResult, ToolName, tool_definitions};
use serde_json::Value;

fn property_names(schema: &Value) -> Vec<String> {
    let mut names: Vec<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

#[test]
fn request_schemas_have_exactly_the_frozen_properties_and_are_closed() {
    for (tool, expected) in [
        (ToolName::LookupKnowledge, vec!["query"]),
        (
            ToolName::QueryLogs,
            vec!["lookback_minutes", "query", "topic"],
        ),
        (ToolName::QueryMysql, vec!["data_source", "params", "sql"]),
    ] {
        let schema = request_schema(tool);
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(schema["type"], "object", "{tool}");
        assert_eq!(schema["additionalProperties"], false, "{tool}");
        assert_eq!(property_names(&schema), expected, "{tool}");
    }
}

#[test]
fn every_schema_has_an_object_root() {
    for tool in ToolName::ALL {
        for schema in [
            request_schema(tool),
            result_schema(tool),
            observation_schema(tool),
            tool.definition().output_schema,
        ] {
            assert_eq!(schema["type"], "object", "{tool}");
        }
    }
    assert_eq!(schema_for::<ErrorResult>()["type"], "object");
}

/// Every `format` in `schema` and its subschemas.
fn formats_in(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::String(format)) = object.get("format") {
                out.push(format.clone());
            }
            object.values().for_each(|value| formats_in(value, out));
        }
        Value::Array(items) => items.iter().for_each(|value| formats_in(value, out)),
        _ => {}
    }
}

#[test]
fn schemas_use_only_standard_formats_and_integers_are_bounded() {
    let mut schemas = vec![schema_for::<ErrorResult>()];
    for tool in ToolName::ALL {
        schemas.extend([
            request_schema(tool),
            result_schema(tool),
            observation_schema(tool),
            tool.definition().output_schema,
        ]);
    }
    for schema in &schemas {
        let mut formats = Vec::new();
        formats_in(schema, &mut formats);
        for format in formats {
            assert_eq!(format, "date-time", "non-standard format in {schema}");
        }
    }
    // `lookback_minutes` is a u32 with a declared range; `returned_count` a
    // u64 with only the type's bounds.
    let request = request_schema(ToolName::QueryLogs);
    let lookback = &request["properties"]["lookback_minutes"];
    assert_eq!(
        (&lookback["minimum"], &lookback["maximum"]),
        (&1.into(), &1440.into())
    );
    let result = result_schema(ToolName::QueryLogs);
    let returned = &result["properties"]["returned_count"];
    assert_eq!(returned["minimum"], 0);
    assert_eq!(returned["maximum"], u64::MAX);
}

/// Words that reveal how a tool is built, hosted, bounded or recorded.
const BANNED: &[&str] = &[
    "milvus",
    "l0",
    "l1",
    "l0/l1",
    "rerank",
    "reranker",
    "reranking",
    "cls",
    "region",
    "topicid",
    "topic_id",
    "redis",
    "jdbc",
    "credential",
    "credentials",
    "password",
    "topk",
    "top_k",
    "limit",
    "limits",
    "trace",
    "traces",
    "retry",
    "retries",
    "ranking",
    "audit",
    "storage",
    "tantivy",
    "bm25",
    "score",
    "scores",
    "mariadb",
    "fingerprint",
    "budget",
    "threshold",
];

fn banned_words_in(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '/'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut found = Vec::new();
    for banned in BANNED {
        if words
            .iter()
            .any(|w| w == banned || w.split('/').any(|part| part == *banned))
        {
            found.push((*banned).to_owned());
        }
    }
    if lower.contains("audit storage") {
        found.push("audit storage".into());
    }
    found
}

fn descriptions_in(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                if matches!(key.as_str(), "description" | "title")
                    && let Some(text) = value.as_str()
                {
                    out.push(text.to_owned());
                }
                descriptions_in(value, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| descriptions_in(v, out)),
        _ => {}
    }
}

#[test]
fn the_banned_word_check_itself_works() {
    assert_eq!(banned_words_in("uses Redis"), vec!["redis"]);
    assert_eq!(banned_words_in("TopK=5"), vec!["topk"]);
    assert_eq!(
        banned_words_in("the L0/L1 cache"),
        vec!["l0", "l1", "l0/l1"]
    );
    assert_eq!(
        banned_words_in("no audit storage"),
        vec!["audit", "storage", "audit storage"]
    );
    assert!(banned_words_in("unlimited delimiter cls_x stretched").is_empty());
}

#[test]
fn descriptions_and_schema_texts_are_implementation_neutral() {
    for definition in tool_definitions() {
        let mut texts = vec![
            definition.name.description().to_owned(),
            definition.name.title().to_owned(),
        ];
        descriptions_in(&definition.input_schema, &mut texts);
        descriptions_in(&definition.output_schema, &mut texts);
        for text in texts {
            assert!(
                banned_words_in(&text).is_empty(),
                "{}: {:?} in {text:?}",
                definition.name,
                banned_words_in(&text)
            );
        }
    }
    for code in ErrorCode::ALL {
        assert!(banned_words_in(code.message()).is_empty(), "{code}");
    }
}

#[test]
fn descriptions_say_when_input_and_cannot() {
    for tool in ToolName::ALL {
        let d = tool.description();
        assert!(
            d.contains("Call it when") || d.contains("Call it to"),
            "{tool}"
        );
        assert!(d.contains("Input:"), "{tool}");
        assert!(d.contains("cannot"), "{tool}");
        assert!(d.len() < 700, "{tool} description is concise");
    }
}

#[test]
fn export_formats() {
    for definition in tool_definitions() {
        let mcp = definition.to_mcp();
        assert_eq!(mcp["name"], definition.name.as_str());
        assert_eq!(mcp["annotations"]["readOnlyHint"], true);
        assert_eq!(mcp["outputSchema"]["type"], "object");
        assert_eq!(mcp["inputSchema"], request_schema(definition.name));

        let openai = definition.to_openai();
        assert_eq!(openai["type"], "function");
        assert_eq!(openai["function"]["name"], definition.name.as_str());
        assert_eq!(
            openai["function"]["parameters"]["additionalProperties"],
            false
        );
        assert!(openai["function"]["parameters"].get("$schema").is_none());

        let anthropic = definition.to_anthropic();
        assert_eq!(anthropic["name"], definition.name.as_str());
        assert_eq!(anthropic["input_schema"]["type"], "object");
        assert!(anthropic["input_schema"].get("$schema").is_none());
    }
}
