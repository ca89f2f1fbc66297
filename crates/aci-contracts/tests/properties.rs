//! Property tests: identifier rule, serde round trips, non-ASCII text.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use aci_contracts::*;
use proptest::prelude::*;

fn matches_rule(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
}

fn config() -> ProptestConfig {
    // Cheap cases: more of them by default.
    testkit::proptest_config_with_default(256)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ids_accept_exactly_the_rule(s in any::<String>()) {
        let accepted = ToolCallId::new(s.clone());
        prop_assert_eq!(accepted.is_ok(), matches_rule(&s));
        prop_assert_eq!(RunId::new(s.clone()).is_ok(), matches_rule(&s));
        let json = serde_json::to_string(&s).unwrap();
        prop_assert_eq!(serde_json::from_str::<ToolCallId>(&json).is_ok(), matches_rule(&s));
    }

    #[test]
    fn valid_ids_round_trip_byte_for_byte(s in "[A-Za-z0-9_.:-]{1,128}") {
        let id = ToolCallId::new(s.clone()).unwrap();
        prop_assert_eq!(id.as_str().as_bytes(), s.as_bytes());
        let text = serde_json::to_string(&id).unwrap();
        let back: ToolCallId = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back.as_str(), s.as_str());
    }

    #[test]
    fn near_miss_ids_are_rejected(
        prefix in "[A-Za-z0-9_.:-]{0,20}",
        bad in prop::sample::select(vec![' ', '\t', '\n', '\0', '{', '}', '*', '?', '[', ']', '/', '\\', '"', '\'', 'é', '调', '😀', '\u{200b}']),
        suffix in "[A-Za-z0-9_.:-]{0,20}",
    ) {
        let s = format!("{prefix}{bad}{suffix}");
        prop_assert!(ToolCallId::new(s).is_err());
    }

    #[test]
    fn knowledge_results_round_trip(
        query in any::<String>(),
        items in prop::collection::vec((any::<String>(), any::<String>(), any::<String>(), any::<String>(), any::<String>()), 0..4),
        truncated in any::<bool>(),
        relevance in prop::option::of(prop::sample::select(vec![RelevanceLevel::High, RelevanceLevel::Medium, RelevanceLevel::Low])),
        legs in prop::collection::btree_set("[a-z0-9_]{1,32}", 0..=MAX_RETRIEVAL_LEGS),
        fallback in prop::option::of("[A-Z0-9_]{1,64}"),
    ) {
        let evidence: Vec<KnowledgeEvidence> = items.into_iter().map(|(document_id, source, title, breadcrumb, excerpt)| KnowledgeEvidence { document_id, source, title, breadcrumb, excerpt }).collect();
        let r = LookupKnowledgeResult {
            evidence_status: if evidence.is_empty() { ReadyEvidenceStatus::NoEvidence } else { ReadyEvidenceStatus::EvidenceFound },
            tool_call_id: ToolCallId::new("call-1").unwrap(),
            query,
            returned_count: evidence.len() as u64,
            evidence,
            relevance_level: relevance,
            truncated,
            retrieval_legs: legs.into_iter().collect(),
            retrieval_fallback: fallback,
        };
        let text = serde_json::to_string(&r).unwrap();
        prop_assert_eq!(serde_json::from_str::<LookupKnowledgeResult>(&text).unwrap(), r.clone());
        prop_assert_eq!(r.validate().is_err_and(|e| e == ValidationError::InvalidRetrievalTrace), false);
        let obs = r.observation();
        let text = serde_json::to_string(&obs).unwrap();
        let keys = serde_json::from_str::<serde_json::Value>(&text).unwrap();
        prop_assert!(keys.get("retrieval_legs").is_none() && keys.get("retrieval_fallback").is_none());
        prop_assert_eq!(serde_json::from_str::<LookupKnowledgeObservation>(&text).unwrap(), obs);
    }

    #[test]
    fn timestamps_round_trip(millis in -62_167_219_200_000_i64..253_402_300_799_999) {
        let t = Timestamp::from_unix_millis(millis);
        let text = serde_json::to_string(&t).unwrap();
        prop_assert_eq!(serde_json::from_str::<Timestamp>(&text).unwrap(), t);
    }

    #[test]
    fn mysql_cells_round_trip(cells in prop::collection::vec(prop_oneof![
        Just(SqlValue::Null),
        any::<bool>().prop_map(SqlValue::Bool),
        any::<i64>().prop_map(SqlValue::Int),
        ((i64::MAX as u64 + 1)..=u64::MAX).prop_map(SqlValue::UInt),
        any::<String>().prop_map(SqlValue::Text),
        (-1e15f64..1e15).prop_map(SqlValue::Float),
    ], 0..8)) {
        let text = serde_json::to_string(&cells).unwrap();
        let back: Vec<SqlValue> = serde_json::from_str(&text).unwrap();
        // Floats with no fraction come back as integers: same JSON number.
        prop_assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&cells).unwrap());
    }

    #[test]
    fn error_results_round_trip(index in 0..ErrorCode::ALL.len(), with_id in any::<bool>()) {
        let code = ErrorCode::ALL[index];
        let r = ErrorResult::new(code, with_id.then(|| ToolCallId::new("c").unwrap()));
        let text = serde_json::to_string(&r).unwrap();
        prop_assert_eq!(serde_json::from_str::<ErrorResult>(&text).unwrap(), r);
    }
}

#[test]
fn non_ascii_text_survives_exactly() {
    let texts = [
        "数据库连接池耗尽",
        "😀🔥 emoji",
        "mixed ascii 和 中文 ✓",
        "\u{1F469}\u{200D}\u{1F4BB}",
    ];
    for text in texts {
        let r = LookupKnowledgeRequest { query: text.into() };
        let json = serde_json::to_string(&r).unwrap();
        let back: LookupKnowledgeRequest = serde_json::from_str(&json).unwrap();
        assert_eq!(back.query.as_bytes(), text.as_bytes());
    }
}
