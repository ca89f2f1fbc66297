//! Properties of the RAG projector over arbitrary upstream responses: bounded
//! output, exact excerpts, consistent counts; and the projector conformance
//! suite (only frozen fields, determinism, truncation never silent).
//!
//! Case count: `PROPTEST_CASES` (default 64; raise it for a deeper run).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use aci_contracts::{
    EvidenceResult, LookupKnowledgeRequest, LookupKnowledgeResult, ReadyEvidenceStatus, ToolCallId,
};
use invocation_core::DEFAULT_MAX_AGENT_RESULT_BYTES;
use invocation_core::conformance::ProjectorHarness;
use projectors_rag::{
    HEADING_KEYS, ID_KEYS, LIST_KEYS, MIN_TEXT_BYTES, MarkdownKnowledgeBase, RagBounds,
    RagProjector, SOURCE_KEYS, STATIC_QUERY_ALLOWANCE_BYTES, TEXT_KEYS, TITLE_KEYS,
    lookup_knowledge_tool_with,
};

/// The bundled base, built once (clones share its index).
fn bundled() -> MarkdownKnowledgeBase {
    static BASE: std::sync::OnceLock<MarkdownKnowledgeBase> = std::sync::OnceLock::new();
    BASE.get_or_init(|| MarkdownKnowledgeBase::bundled().unwrap())
        .clone()
}
use proptest::prelude::*;
use serde_json::{Map, Value};

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig::with_cases(cases)
}

fn json_len(text: &str) -> usize {
    serde_json::to_string(text).unwrap().len() - 2
}

/// Text of every kind: ordinary, escape-heavy, huge, blank, any code point.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9 .,:;!?'()\n-]{0,200}",
        2 => "[\\x00-\\x1f\"\\\\ a\u{4E2D}\u{1F600}]{0,400}",
        1 => prop::collection::vec(any::<char>(), 0..600).prop_map(|chars| chars.into_iter().collect()),
        1 => (0_usize..4000, prop::sample::select(vec!["\u{1}", "\"", "中", "a", " ", "\u{1F600}"]))
            .prop_map(|(n, unit)| unit.repeat(n)),
        1 => "\\s{0,6}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    let mut keys: Vec<&'static str> = Vec::new();
    keys.extend(ID_KEYS);
    keys.extend(SOURCE_KEYS);
    keys.extend(TITLE_KEYS);
    keys.extend(HEADING_KEYS);
    keys.extend(TEXT_KEYS);
    keys.extend([
        "relevance_level",
        "relevanceLevel",
        "score",
        "_score",
        "rerankScore",
        "metadata",
        "contextPack",
        "retrievalTrace",
        "rerankTrace",
        "fallbackAttempts",
        "embedding",
    ]);
    prop_oneof![
        8 => prop::sample::select(keys).prop_map(str::to_owned),
        1 => "[a-z_]{1,12}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => text().prop_map(Value::from),
        2 => prop::sample::select(vec!["high", "HIGH", "Mid", "medium", "low", "none", " high", "0.93"])
            .prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn document() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop::collection::btree_map(key(), value(), 0..10)
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        1 => value(),
    ]
}

/// Upstream responses in every accepted shape, and arbitrary JSON.
fn response() -> impl Strategy<Value = Value> {
    let documents = || prop::collection::vec(document(), 0..12);
    prop_oneof![
        2 => documents().prop_map(Value::Array),
        4 => (
            prop::sample::select(LIST_KEYS.to_vec()),
            documents(),
            prop::collection::btree_map(key(), value(), 0..4),
        )
            .prop_map(|(list, docs, extra)| {
                let mut map: Map<String, Value> = extra.into_iter().collect();
                map.insert(list.to_owned(), Value::Array(docs));
                Value::Object(map)
            }),
        1 => documents().prop_map(|docs| serde_json::json!({"hits": {"hits": docs}, "took": 3})),
        1 => value(),
    ]
}

fn query(max_chars: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z ]{1,40}",
        1 => prop::collection::vec(any::<char>(), 1..max_chars).prop_map(|c| c.into_iter().collect()),
        1 => (1..max_chars / 6).prop_map(|n| "\u{1}".repeat(n)),
    ]
}

fn call_id() -> impl Strategy<Value = ToolCallId> {
    "[A-Za-z0-9_.:-]{1,128}".prop_map(|id| ToolCallId::new(id).unwrap())
}

fn strings_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| strings_in(item, out)),
        Value::Object(map) => map.values().for_each(|item| strings_in(item, out)),
        _ => {}
    }
}

fn check_invariants(result: &LookupKnowledgeResult, raw: &Value, bounds: &RagBounds) {
    result.validate().unwrap();
    assert_eq!(result.returned_count, result.evidence.len() as u64);
    assert!(result.evidence.len() <= bounds.max_items);
    match result.evidence_status {
        ReadyEvidenceStatus::EvidenceFound => assert!(!result.evidence.is_empty()),
        ReadyEvidenceStatus::NoEvidence => {
            assert!(result.evidence.is_empty());
            assert_eq!(result.relevance_level, None);
        }
    }
    let mut upstream = Vec::new();
    strings_in(raw, &mut upstream);
    for item in &result.evidence {
        assert!(!item.excerpt.trim().is_empty());
        assert!(!item.document_id.trim().is_empty());
        assert!(json_len(&item.excerpt) <= bounds.max_excerpt_bytes);
        for field in [
            &item.document_id,
            &item.source,
            &item.title,
            &item.breadcrumb,
        ] {
            assert!(json_len(field) <= bounds.max_field_bytes);
        }
        assert!(
            upstream
                .iter()
                .any(|text| text.contains(item.excerpt.as_str())),
            "excerpt {:?} is not a substring of the upstream text",
            item.excerpt
        );
    }
}

/// The projector conformance suite of invocation-core, over arbitrary
/// responses and over well-formed ones (whose cuts can be told from outside).
struct Rag;

impl ProjectorHarness for Rag {
    type Projector = RagProjector;

    fn projector(&self) -> RagProjector {
        RagProjector::default()
    }

    fn request(&self, _raw: &Value) -> LookupKnowledgeRequest {
        LookupKnowledgeRequest {
            query: "disk full".into(),
        }
    }

    /// For a `{"documents": [{"id", "text"}, ...]}` response: the result
    /// keeps the first usable documents in order, so something was cut
    /// when fewer came back than were usable or an excerpt is shorter than
    /// its trimmed text.
    fn was_cut(&self, raw: &Value, result: &LookupKnowledgeResult) -> Option<bool> {
        let raw = raw.as_object().filter(|raw| raw.len() == 1)?;
        let documents = raw.get("documents")?.as_array()?;
        let mut usable = Vec::new();
        for document in documents {
            let object = document.as_object()?;
            let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
            keys.sort_unstable();
            if keys != ["id", "score", "text"] || object.get("id")?.as_str().is_none() {
                return None;
            }
            let text = object.get("text")?.as_str()?.trim();
            if !text.is_empty() {
                usable.push(text);
            }
        }
        let shortened = usable
            .iter()
            .zip(&result.evidence)
            .any(|(text, item)| item.excerpt.len() < text.len());
        Some(result.evidence.len() < usable.len() || shortened)
    }

    fn result_keys(&self) -> &'static [&'static str] {
        &[
            "evidence_status",
            "tool_call_id",
            "query",
            "evidence",
            "returned_count",
            "relevance_level",
            "truncated",
            "document_id",
            "source",
            "title",
            "breadcrumb",
            "excerpt",
        ]
    }
}

/// Well-formed documents: ids, texts of every length (blank ones too).
fn well_formed() -> impl Strategy<Value = Value> {
    prop::collection::vec(
        prop_oneof![3 => "[a-z .\n\"]{0,300}", 1 => "[a-z]{1000,2000}", 1 => "\\s{0,3}"],
        0..9,
    )
    .prop_map(|texts| {
        let documents: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| serde_json::json!({"id": format!("doc-{i}"), "text": text, "score": 1.0}))
            .collect();
        serde_json::json!({ "documents": documents })
    })
}

invocation_core::projector_conformance_tests!(Rag, prop_oneof![well_formed(), response()]);

proptest! {
    #![proptest_config(config())]

    /// With the default bounds, every result fits the default agent result
    /// limit, for any upstream response and any query up to 12 KiB of JSON.
    #[test]
    fn default_projection_fits_the_agent_result_limit(
        raw in response(),
        query in query(2000),
        id in call_id(),
    ) {
        prop_assume!(json_len(&query) <= 12 * 1024);
        let projector = RagProjector::default();
        let result = projector.project_response(&id, &query, &raw).unwrap();
        let json = serde_json::to_string(&result).unwrap();
        prop_assert!(json.len() <= DEFAULT_MAX_AGENT_RESULT_BYTES, "{} bytes", json.len());
        check_invariants(&result, &raw, &projector.bounds());
    }

    /// The per-item bounds alone (no total budget) never exceed the computed
    /// worst case, which fits the default limit for queries up to the static
    /// allowance.
    #[test]
    fn static_bounds_never_exceed_the_worst_case(
        raw in response(),
        query in query(700),
        id in call_id(),
    ) {
        let bounds = RagBounds { max_result_bytes: usize::MAX, ..RagBounds::default() };
        let projector = RagProjector::new(bounds).unwrap();
        let result = projector.project_response(&id, &query, &raw).unwrap();
        let len = serde_json::to_string(&result).unwrap().len();
        prop_assert!(len <= bounds.worst_case_result_bytes(json_len(&query)));
        if json_len(&query) <= STATIC_QUERY_ALLOWANCE_BYTES {
            prop_assert!(len <= DEFAULT_MAX_AGENT_RESULT_BYTES);
        }
        check_invariants(&result, &raw, &bounds);
    }

    /// Tight, arbitrary bounds hold too, and the total budget is met.
    #[test]
    fn arbitrary_bounds_hold(
        raw in response(),
        max_items in 0_usize..8,
        max_excerpt_bytes in 0_usize..300,
        max_field_bytes in 0_usize..64,
        max_result_bytes in 1500_usize..6000,
    ) {
        let bounds = RagBounds { max_items, max_excerpt_bytes, max_field_bytes, max_result_bytes };
        // Bounds below their minimums are refused, never raised silently.
        let valid = max_items >= 1 && max_excerpt_bytes >= MIN_TEXT_BYTES && max_field_bytes >= MIN_TEXT_BYTES;
        let projector = RagProjector::new(bounds);
        prop_assert_eq!(projector.is_ok(), valid);
        prop_assert_eq!(lookup_knowledge_tool_with(bundled(), bounds).is_ok(), valid);
        let Ok(projector) = projector else { return Ok(()); };
        let id = ToolCallId::new("call_1").unwrap();
        let result = projector.project_response(&id, "disk full", &raw).unwrap();
        let len = serde_json::to_string(&result).unwrap().len();
        prop_assert!(len <= max_result_bytes, "{len} > {max_result_bytes}");
        check_invariants(&result, &raw, &projector.bounds());
    }
}

#[test]
fn worst_case_formula_is_exact_and_fits_by_default() {
    let bounds = RagBounds::default();
    let fill = |bytes: usize| "\u{1}".repeat(bytes / 6) + &"a".repeat(bytes % 6);
    let query = fill(STATIC_QUERY_ALLOWANCE_BYTES);
    let item = serde_json::json!({
        "id": fill(bounds.max_field_bytes),
        "source": fill(bounds.max_field_bytes),
        "title": fill(bounds.max_field_bytes),
        "breadcrumb": fill(bounds.max_field_bytes),
        "excerpt": fill(bounds.max_excerpt_bytes),
        "relevance_level": "medium",
    });
    let id = ToolCallId::new("x".repeat(aci_contracts::MAX_ID_BYTES)).unwrap();
    let worst = bounds.worst_case_result_bytes(json_len(&query));

    // Every field exactly at its bound, nothing left out, the longest
    // retrieval trace: the formula is exact.
    let legs: Vec<String> = (0..aci_contracts::MAX_RETRIEVAL_LEGS)
        .map(|i| format!("{i}").repeat(aci_contracts::MAX_RETRIEVAL_LEG_BYTES))
        .collect();
    let fallback = "E".repeat(aci_contracts::MAX_RETRIEVAL_FALLBACK_BYTES);
    let raw = serde_json::json!({
        "documents": vec![item.clone(); bounds.max_items],
        "retrieval_trace": {"legs": legs, "fallback": fallback},
    });
    let result = RagProjector::default()
        .project_response(&id, &query, &raw)
        .unwrap();
    let len = serde_json::to_string(&result).unwrap().len();
    assert_eq!(result.evidence.len(), bounds.max_items);
    assert_eq!(result.retrieval_legs, legs);
    assert!(!result.truncated);
    assert_eq!(len, worst);
    assert!(len <= DEFAULT_MAX_AGENT_RESULT_BYTES, "{len}");

    // Longer fields and more items only shorten and drop.
    let mut longer = item;
    longer["excerpt"] = Value::from(fill(bounds.max_excerpt_bytes) + "overflow");
    let raw = Value::Array(vec![longer; bounds.max_items + 3]);
    let result = RagProjector::default()
        .project_response(&id, &query, &raw)
        .unwrap();
    let len = serde_json::to_string(&result).unwrap().len();
    assert_eq!(result.evidence.len(), bounds.max_items);
    assert!(result.truncated);
    assert!(len <= worst);
}
