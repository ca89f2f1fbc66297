//! Golden JSON of `lookup_knowledge` projections: evidence found, no evidence,
//! truncated, and the bundled knowledge base's answer to a known query.
//!
//! Regenerate after an intended change with
//! `UPDATE_GOLDEN=1 cargo test -p projectors-rag --test golden` and review the diff.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use aci_contracts::{EvidenceResult, ToolCallId};
use projectors_rag::{MarkdownKnowledgeBase, RagBounds, RagProjector};
use serde_json::{Value, json};

fn golden(name: &str, actual: &impl serde::Serialize) {
    testkit::golden!().check_json(name, actual);
}

fn id(text: &str) -> ToolCallId {
    ToolCallId::new(text).unwrap()
}

/// A realistic upstream response: passages plus everything the agent must not see.
fn upstream_response() -> Value {
    json!({
        "relevanceLevel": "HIGH",
        "contextPack": {"tokens": 1834, "passages": ["…full context sent to the model…"]},
        "retrievalTrace": {"l0": {"topK": 50, "latencyMs": 12}, "l1": {"collection": "ops_kb_v3"}},
        "rerankTrace": {"model": "bge-reranker-v2", "scores": [0.97, 0.64]},
        "fallbackAttempts": [{"strategy": "keyword", "reason": "vector timeout"}],
        "documents": [
            {
                "documentId": "kb-db-017",
                "source": "https://bob:hunter2@wiki.example.com/ops/db-pool?token=abc123#symptoms",
                "title": "Database connection pool exhaustion",
                "headingPath": ["Database connection pool exhaustion", "Symptoms"],
                "excerpt": "  Requests fail with \"Connection is not available, request timed out after 30000ms\".\n",
                "score": 0.9731,
                "rerankScore": 0.97,
                "relevanceLevel": "medium",
                "metadata": {"owner": "dba-team", "updated": "2024-05-01", "embedding": [0.1, 0.2]},
                "body": "# Database connection pool exhaustion\n\nFull document body…"
            },
            {
                "doc_id": 42,
                "path": "runbooks/slow-queries.md",
                "name": "Slow database queries",
                "breadcrumb": "Slow database queries > Diagnosis",
                "text": "Run EXPLAIN on the statement with real parameter values.",
                "score": 0.64
            },
            {
                "id": "kb-empty",
                "title": "Blank passage",
                "excerpt": "   \n\t ",
                "score": 0.5
            },
            {
                "page_content": "Kill long idle transactions only after confirming their owner.",
                "metadata": {"source": "confluence/OPS/pool", "title": "Pool mitigation", "id": "kb-db-018", "score": 0.4}
            },
            {
                "url": "https://runbooks.example.com/dns/ndots?sig=9f8e",
                "section_path": ["DNS resolution failures", "", "The ndots trap"],
                "snippet": "With the default ndots:5, a lookup first tries every search domain.",
                "chunk": {"index": 7}
            }
        ]
    })
}

#[test]
fn evidence_found() {
    let result = RagProjector::default()
        .project_response(
            &id("call_evidence_1"),
            "connection pool timeout",
            &upstream_response(),
        )
        .unwrap();
    result.validate().unwrap();
    golden("evidence_found.result.json", &result);
    golden("evidence_found.observation.json", &result.observation());
}

#[test]
fn no_evidence() {
    let raw = json!({
        "relevance_level": "high",
        "results": [
            {"id": "kb-1", "title": "Empty", "excerpt": "", "score": 0.99, "relevance_level": "high"},
            {"id": "kb-2", "title": "Blank", "content": " \n\u{3000} ", "score": 0.98},
            {"title": "No id, no source", "excerpt": "A passage nobody can cite is not evidence."},
            "not a document",
            {"id": "kb-3", "excerpt": ["not", "text"]}
        ],
        "retrievalTrace": {"attempts": 3}
    });
    let result = RagProjector::default()
        .project_response(&id("call_none_1"), "  quarterly budget spreadsheet ", &raw)
        .unwrap();
    result.validate().unwrap();
    golden("no_evidence.result.json", &result);
}

#[test]
fn truncated() {
    let bounds = RagBounds {
        max_items: 2,
        max_excerpt_bytes: 40,
        max_field_bytes: 24,
        ..RagBounds::default()
    };
    let raw = json!({
        "hits": {
            "total": 4,
            "hits": [
                {
                    "id": "runbooks/oom-kills-and-memory-limits",
                    "title": "Out-of-memory kills",
                    "heading_path": ["Out-of-memory kills (OOMKilled)", "Diagnosis", "JVM memory beyond the heap"],
                    "text": "The heap is only part of a Java process: metaspace, thread stacks and direct buffers live outside it.",
                    "relevance_level": "low",
                    "_score": 11.2
                },
                {
                    "id": "disk-pressure",
                    "title": "Disk \"pressure\"\n",
                    "snippet": "Writes fail with \"No space left on device\".",
                    "relevance_level": "Mid",
                    "_score": 9.8
                },
                {
                    "id": "dns",
                    "snippet": "Left out: over max_items.",
                    "relevance_level": "high",
                    "_score": 3.1
                }
            ]
        }
    });
    let result = RagProjector::new(bounds)
        .unwrap()
        .project_response(&id("call_trunc_1"), "memory", &raw)
        .unwrap();
    result.validate().unwrap();
    assert!(result.truncated);
    golden("truncated.result.json", &result);
}

#[test]
fn bundled_knowledge_base_answer() {
    let base = MarkdownKnowledgeBase::bundled().unwrap();
    let raw = base.search("connection pool timeout").unwrap();
    let result = RagProjector::default()
        .project_response(&id("call_kb_1"), "connection pool timeout", &raw)
        .unwrap();
    result.validate().unwrap();
    golden("bundled_connection_pool_timeout.result.json", &result);
}
