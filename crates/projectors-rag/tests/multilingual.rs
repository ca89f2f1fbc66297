//! Runbooks in every language a team writes: Chinese, Japanese, Korean,
//! mixed CJK/Latin text, full-width forms; the labeled query set; arbitrary
//! Unicode never panics the analyzer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use projectors_rag::evaluation::{LabeledQuery, evaluate};
use projectors_rag::{MarkdownDocument, MarkdownKnowledgeBase};
use proptest::prelude::*;
use serde_json::Value;

fn doc(id: &str, text: &str) -> MarkdownDocument {
    MarkdownDocument {
        document_id: id.to_owned(),
        source: format!("{id}.md"),
        text: text.to_owned(),
    }
}

fn top_id(base: &MarkdownKnowledgeBase, query: &str) -> Option<String> {
    let response = base.search(query).unwrap();
    response["documents"]
        .as_array()
        .unwrap()
        .first()
        .map(|d| d["document_id"].as_str().unwrap().to_owned())
}

fn issue_base() -> MarkdownKnowledgeBase {
    MarkdownKnowledgeBase::from_documents([
        doc(
            "pool",
            "# 数据库连接池耗尽\n\n## 症状\n\n应用报错：获取数据库连接超时，HikariCP 连接池的活跃连接数达到上限。\n",
        ),
        doc(
            "disk",
            "# 磁盘空间不足\n\n## 症状\n\n日志写入失败，磁盘使用率超过 95%。\n",
        ),
        doc(
            "ja-pool",
            "# 接続プールの枯渇\n\n## 症状\n\nデータベースへの接続がタイムアウトし、コネクションプールが枯渇します。\n",
        ),
        doc(
            "ko-disk",
            "# 디스크 공간 부족\n\n## 증상\n\n로그 기록이 실패하고 디스크 사용률이 높습니다.\n",
        ),
        doc(
            "en-cache",
            "# Cache stampede\n\n## Symptoms\n\nMany requests miss the cache at once after expiry.\n",
        ),
    ])
    .unwrap()
}

#[test]
fn the_issue_queries_find_the_chinese_runbooks() {
    let base = issue_base();
    for (query, expected) in [
        ("连接池", "pool"),
        ("连接池耗尽", "pool"),
        ("数据库连接超时", "pool"),
        ("磁盘", "disk"),
        ("磁盘空间", "disk"),
        ("HikariCP 连接池", "pool"),
        ("hikaricp连接池", "pool"),
    ] {
        assert_eq!(top_id(&base, query).as_deref(), Some(expected), "{query}");
    }
}

#[test]
fn japanese_and_korean_are_found_by_their_words() {
    let base = issue_base();
    for (query, expected) in [
        ("接続プール", "ja-pool"),
        ("コネクションプール 枯渇", "ja-pool"),
        ("タイムアウト", "ja-pool"),
        ("디스크 공간", "ko-disk"),
        ("사용률", "ko-disk"),
    ] {
        assert_eq!(top_id(&base, query).as_deref(), Some(expected), "{query}");
    }
}

#[test]
fn full_width_and_half_width_forms_fold_together() {
    let base = issue_base();
    // Full-width Latin letters and digits, half-width katakana.
    assert_eq!(top_id(&base, "ＨｉｋａｒｉＣＰ").as_deref(), Some("pool"));
    assert_eq!(top_id(&base, "ﾀｲﾑｱｳﾄ").as_deref(), Some("ja-pool"));
    let full_width_doc = MarkdownKnowledgeBase::from_documents([doc(
        "fw",
        "# ＲＥＤＩＳ　主从切换\n\nＳｅｎｔｉｎｅｌ　选主。\n",
    )])
    .unwrap();
    assert_eq!(
        top_id(&full_width_doc, "redis sentinel").as_deref(),
        Some("fw")
    );
}

#[test]
fn latin_text_keeps_stemming_and_case_folding() {
    let base = issue_base();
    assert_eq!(top_id(&base, "REQUEST MISSES").as_deref(), Some("en-cache"));
    assert_eq!(
        top_id(&base, "expiring caches").as_deref(),
        Some("en-cache")
    );
    // Chinese query words never match English-only text, and vice versa.
    assert_eq!(top_id(&base, "缓存"), None);
}

#[test]
fn chinese_queries_get_relevance_from_term_coverage() {
    let base = issue_base();
    let response = base.search("连接池耗尽").unwrap();
    assert_eq!(response["relevance_level"], "high");
    assert_eq!(
        response["retrieval_trace"]["analyzed_terms"],
        serde_json::json!(["连接", "接池", "池耗", "耗尽"])
    );
}

fn labeled() -> Vec<LabeledQuery> {
    LabeledQuery::parse_set(include_str!("data/labeled_queries.json")).unwrap()
}

#[test]
fn the_labeled_set_covers_three_languages_and_recall_at_5_holds() {
    let queries = labeled();
    assert!(queries.len() >= 60, "{}", queries.len());
    let base = MarkdownKnowledgeBase::from_documents(
        MarkdownDocument::bundled()
            .into_iter()
            .chain(MarkdownDocument::bundled_chinese()),
    )
    .unwrap();
    let (scores, outcomes) = evaluate(&base, &queries).unwrap();
    assert_eq!(
        scores.keys().map(String::as_str).collect::<Vec<_>>(),
        ["en", "mixed", "zh"]
    );
    let misses: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.rank.is_none())
        .map(|o| o.query.query.as_str())
        .collect();
    for (language, score) in &scores {
        assert!(
            score.recall_at_5 >= 0.9,
            "{language}: {score:?}; misses: {misses:?}"
        );
    }
}

#[test]
fn every_labeled_target_exists() {
    // A label that names a missing section would make recall meaningless.
    let docs: Vec<MarkdownDocument> = MarkdownDocument::bundled()
        .into_iter()
        .chain(MarkdownDocument::bundled_chinese())
        .collect();
    for query in labeled() {
        let document = docs
            .iter()
            .find(|d| d.document_id == query.document_id)
            .unwrap_or_else(|| panic!("{query:?}"));
        assert!(
            document.text.contains(&format!("# {}\n", query.heading)),
            "{query:?}"
        );
    }
}

fn unicode_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[\u{4E00}-\u{4FFF}\u{3040}-\u{30FF}\u{AC00}-\u{AC80}a-zA-Z0-9 #\n，。！？ｱ-ﾝＡ-Ｚ０-９　]{0,200}",
        "(# [a-z\u{4E00}-\u{4E20}]{1,5}\n\n[\u{4E00}-\u{4E20}a-z ]{0,40}\n\n){0,5}",
    ]
}

fn documents(response: &Value) -> &Vec<Value> {
    response["documents"].as_array().unwrap()
}

proptest! {
    #![proptest_config(testkit::proptest_config_with_default(48))]

    /// Arbitrary Unicode documents and queries never panic the analyzer, and
    /// every excerpt is an exact substring of its source document, at the
    /// byte range the response names.
    #[test]
    fn arbitrary_unicode_never_panics_and_excerpts_are_exact(
        texts in proptest::collection::vec(unicode_text(), 1..4),
        query in unicode_text(),
    ) {
        let docs: Vec<MarkdownDocument> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| doc(&format!("d{i}"), text))
            .collect();
        let base = MarkdownKnowledgeBase::from_documents(docs.clone()).unwrap().with_top_k(50);
        // Query with the documents' own text too, so hits happen.
        for q in [query.as_str(), texts[0].as_str()] {
            let response = base.search(q).unwrap();
            for hit in documents(&response) {
                let id = hit["document_id"].as_str().unwrap();
                let source = &docs.iter().find(|d| d.document_id == id).unwrap().text;
                let excerpt = hit["excerpt"].as_str().unwrap();
                let start = usize::try_from(hit["metadata"]["byte_start"].as_u64().unwrap()).unwrap();
                let end = usize::try_from(hit["metadata"]["byte_end"].as_u64().unwrap()).unwrap();
                prop_assert_eq!(source.get(start..end), Some(excerpt));
            }
        }
    }
}
