//! The Markdown knowledge base: bundled runbooks, directories, chunking,
//! the response it gives the projector, and queries of any kind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use projectors_rag::{
    CHUNK_TARGET_BYTES, DEFAULT_TOP_K, Error, MarkdownDocument, MarkdownKnowledgeBase, Progress,
};
use proptest::prelude::*;
use serde_json::Value;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "projectors-rag-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn documents(response: &Value) -> &Vec<Value> {
    response["documents"].as_array().unwrap()
}

fn bundled_text(source: &str) -> &'static str {
    match source {
        "knowledge/connection-pool-exhaustion.md" => {
            include_str!("../knowledge/connection-pool-exhaustion.md")
        }
        "knowledge/slow-queries.md" => include_str!("../knowledge/slow-queries.md"),
        "knowledge/disk-pressure.md" => include_str!("../knowledge/disk-pressure.md"),
        "knowledge/oom-kills.md" => include_str!("../knowledge/oom-kills.md"),
        "knowledge/tls-certificate-expiry.md" => {
            include_str!("../knowledge/tls-certificate-expiry.md")
        }
        "knowledge/message-queue-backlog.md" => {
            include_str!("../knowledge/message-queue-backlog.md")
        }
        "knowledge/dns-resolution-failures.md" => {
            include_str!("../knowledge/dns-resolution-failures.md")
        }
        other => panic!("unknown source {other}"),
    }
}

#[test]
fn the_bundled_runbooks_answer_their_topics() {
    let base = MarkdownKnowledgeBase::bundled().unwrap();
    assert_eq!(base.document_count(), 7);
    assert!(base.chunk_count() > 7 * 4);
    for (query, document) in [
        ("connection pool timeout", "connection-pool-exhaustion"),
        ("slow query missing index EXPLAIN", "slow-queries"),
        ("No space left on device", "disk-pressure"),
        ("pod OOMKilled exit code 137", "oom-kills"),
        ("x509: certificate has expired", "tls-certificate-expiry"),
        ("kafka consumer lag growing", "message-queue-backlog"),
        (
            "UnknownHostException: no such host",
            "dns-resolution-failures",
        ),
    ] {
        let response = base.search(query).unwrap();
        let top = &documents(&response)[0];
        assert_eq!(top["document_id"], document, "{query}");
        assert_eq!(response["relevance_level"], "high", "{query}");
    }
}

#[test]
fn excerpts_are_exact_chunks_under_their_heading_path() {
    let base = MarkdownKnowledgeBase::bundled().unwrap();
    for query in [
        "connection pool",
        "disk inode",
        "memory heap limit",
        "dns ndots",
        "certificate renew",
    ] {
        let response = base.search(query).unwrap();
        assert!(!documents(&response).is_empty(), "{query}");
        for document in documents(&response) {
            let text = bundled_text(document["source"].as_str().unwrap());
            let excerpt = document["excerpt"].as_str().unwrap();
            let start =
                usize::try_from(document["metadata"]["byte_start"].as_u64().unwrap()).unwrap();
            let end = usize::try_from(document["metadata"]["byte_end"].as_u64().unwrap()).unwrap();
            assert_eq!(&text[start..end], excerpt);
            assert_eq!(excerpt, excerpt.trim());
            assert!(
                !excerpt
                    .lines()
                    .any(|line| line.starts_with("# ") || line.starts_with("## "))
            );
            let path: Vec<&str> = document["heading_path"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap())
                .collect();
            assert_eq!(path[0], document["title"], "the H1 heads every path");
            let heading = format!(" {}\n", path.last().unwrap());
            let heading_at = text[..start]
                .rfind(&heading)
                .expect("the chunk follows its heading");
            assert!(!text[heading_at + heading.len()..start].contains("\n#"));
        }
    }
}

#[test]
fn the_response_carries_what_the_projector_must_drop() {
    let base = MarkdownKnowledgeBase::bundled().unwrap();
    let response = base.search("why is the payment service slow").unwrap();
    for key in [
        "engine",
        "query",
        "documents",
        "retrieval_trace",
        "relevance_level",
    ] {
        assert!(response.get(key).is_some(), "{key}");
    }
    assert_eq!(
        response["retrieval_trace"]["analyzed_terms"],
        serde_json::json!(["payment", "servic", "slow"])
    );
    let documents = documents(&response);
    assert_eq!(documents.len(), DEFAULT_TOP_K);
    for document in documents {
        for key in [
            "chunk_id",
            "score",
            "relevance_level",
            "matched_terms",
            "metadata",
            "heading_path",
        ] {
            assert!(document.get(key).is_some(), "{key}");
        }
        // "payment" is in no runbook: one term of three matched at most.
        assert_eq!(document["relevance_level"], "low");
    }
    assert_eq!(response["relevance_level"], "low");
    let scores: Vec<f64> = documents
        .iter()
        .map(|d| d["score"].as_f64().unwrap())
        .collect();
    assert!(
        scores.windows(2).all(|pair| pair[0] >= pair[1]),
        "best first: {scores:?}"
    );
}

#[test]
fn top_k_is_configurable_and_queries_without_words_find_nothing() {
    let base = MarkdownKnowledgeBase::bundled().unwrap().with_top_k(1);
    assert_eq!(documents(&base.search("disk").unwrap()).len(), 1);
    for query in [
        "",
        "   ",
        "the of and",
        "?!*:^~\"()[]{}",
        "AND OR NOT",
        "连接池超时",
    ] {
        let response = base.search(query).unwrap();
        assert!(documents(&response).is_empty(), "{query:?}");
        assert!(response.get("relevance_level").is_none(), "{query:?}");
    }
}

#[test]
fn non_ascii_documents_are_searchable_by_words() {
    let base = MarkdownKnowledgeBase::from_documents([
        MarkdownDocument {
            document_id: "zh/pool".to_owned(),
            source: "zh/pool.md".to_owned(),
            text: "# 数据库连接池\n\n## 症状\n\n连接池 耗尽，请求 超时。\n".to_owned(),
        },
        MarkdownDocument {
            document_id: "untitled".to_owned(),
            source: "untitled.md".to_owned(),
            text: "No heading at all, just a note about caches.\n".to_owned(),
        },
    ])
    .unwrap();
    let response = base.search("连接池 超时").unwrap();
    let top = &documents(&response)[0];
    assert_eq!(top["document_id"], "zh/pool");
    assert_eq!(
        top["heading_path"],
        serde_json::json!(["数据库连接池", "症状"])
    );
    assert_eq!(top["excerpt"], "连接池 耗尽，请求 超时。");

    let response = base.search("caches").unwrap();
    let top = &documents(&response)[0];
    assert_eq!(top["title"], "untitled", "no H1: the id is the title");
    assert_eq!(top["heading_path"], serde_json::json!([]));
}

#[test]
fn long_sections_are_split_at_paragraphs() {
    let paragraph = "Check the replica lag before and after each step of the migration. ".repeat(6);
    let mut text = String::from("# Big\n\n## Steps\n\n");
    for _ in 0..8 {
        text.push_str(paragraph.trim_end());
        text.push_str("\n\n");
    }
    let base = MarkdownKnowledgeBase::from_documents([MarkdownDocument {
        document_id: "big".to_owned(),
        source: "big.md".to_owned(),
        text: text.clone(),
    }])
    .unwrap()
    .with_top_k(50);
    assert!(base.chunk_count() > 1);
    let response = base.search("replica lag").unwrap();
    assert_eq!(documents(&response).len(), base.chunk_count());
    for document in documents(&response) {
        let excerpt = document["excerpt"].as_str().unwrap();
        assert!(excerpt.len() <= CHUNK_TARGET_BYTES);
        assert!(text.contains(excerpt));
        assert_eq!(
            document["heading_path"],
            serde_json::json!(["Big", "Steps"])
        );
    }
}

#[test]
fn a_directory_is_indexed_with_progress() {
    let dir = TempDir::new();
    dir.write("a.md", "# Alpha\n\nThe alpha service restarts nightly.\n");
    dir.write("sub/b.md", "# Beta\n\n## Checks\n\nBeta queue depth.\n");
    dir.write("sub/deeper/c.md", "Gamma without headings.\n");
    dir.write("notes.txt", "not markdown: alpha beta gamma");
    dir.write(".hidden/d.md", "# Hidden\n\nalpha\n");
    dir.write(".e.md", "# Hidden file\n\nalpha\n");

    let mut events = Vec::new();
    let base = MarkdownKnowledgeBase::from_dir(dir.path(), |p| events.push(p)).unwrap();
    assert_eq!(
        events,
        vec![
            Progress::Found { files: 3 },
            Progress::Read { done: 1, total: 3 },
            Progress::Read { done: 2, total: 3 },
            Progress::Read { done: 3, total: 3 },
            Progress::Indexed {
                documents: 3,
                chunks: 3
            },
        ]
    );
    let response = base.search("beta queue").unwrap();
    let top = &documents(&response)[0];
    assert_eq!(top["document_id"], "sub/b");
    assert_eq!(top["source"], "sub/b.md");
    assert_eq!(top["heading_path"], serde_json::json!(["Beta", "Checks"]));
    assert_eq!(
        documents(&base.search("alpha").unwrap()).len(),
        1,
        "hidden entries are skipped"
    );
    assert_eq!(
        documents(&base.search("gamma").unwrap())[0]["document_id"],
        "sub/deeper/c"
    );
}

#[test]
fn a_large_directory_reports_every_file() {
    let dir = TempDir::new();
    for i in 0..250 {
        dir.write(
            &format!("team-{}/runbook-{i:03}.md", i % 5),
            format!("# Runbook {i}\n\n## Symptoms\n\nService svc{i} returns errors.\n\n## Fix\n\nRestart svc{i}.\n"),
        );
    }
    let mut reads = 0;
    let mut finished = None;
    let base = MarkdownKnowledgeBase::from_dir(dir.path(), |progress| match progress {
        Progress::Read { done, total } => {
            reads += 1;
            assert_eq!((done, total), (reads, 250));
        }
        Progress::Indexed { documents, chunks } => finished = Some((documents, chunks)),
        _ => {}
    })
    .unwrap();
    assert_eq!(reads, 250);
    assert_eq!(finished, Some((250, 500)));
    let response = base.search("svc137").unwrap();
    assert_eq!(documents(&response)[0]["document_id"], "team-2/runbook-137");
}

#[test]
fn directory_errors_are_typed_and_clear() {
    let dir = TempDir::new();
    let missing = dir.path().join("nope");
    let error = MarkdownKnowledgeBase::from_dir(&missing, |_| {}).unwrap_err();
    assert!(matches!(error, Error::DirectoryNotFound { .. }));
    assert_eq!(error.code(), "KNOWLEDGE_DIR_NOT_FOUND");
    assert_eq!(
        error.to_string(),
        format!("knowledge directory `{}` does not exist", missing.display())
    );

    let file = dir.write("file.md", "# x\n\ny\n");
    let error = MarkdownKnowledgeBase::from_dir(&file, |_| {}).unwrap_err();
    assert_eq!(error.code(), "KNOWLEDGE_NOT_A_DIRECTORY");
    assert!(error.to_string().contains("is not a directory"));

    let empty = TempDir::new();
    empty.write("readme.txt", "no markdown here");
    let error = MarkdownKnowledgeBase::from_dir(empty.path(), |_| {}).unwrap_err();
    assert_eq!(error.code(), "KNOWLEDGE_NO_DOCUMENTS");
    assert!(error.to_string().contains("holds no Markdown (*.md) files"));

    let binary = TempDir::new();
    binary.write("bad.md", [0x23, 0x20, 0xFF, 0xFE, 0x0A]);
    let error = MarkdownKnowledgeBase::from_dir(binary.path(), |_| {}).unwrap_err();
    assert_eq!(error.code(), "KNOWLEDGE_FILE_NOT_UTF8");
    assert!(error.to_string().contains("bad.md"));
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Any agent string is a valid query: no syntax errors, no panics.
    #[test]
    fn any_query_string_works(query in prop_oneof![
        any::<String>(),
        "[a-z :()\"*?~^+\\-\\[\\]{}!/\\\\]{0,60}",
        "[\u{4E00}-\u{4FFF}，。！？ ]{0,30}",
    ]) {
        let base = bundled();
        let response = base.search(&query).unwrap();
        prop_assert!(documents(&response).len() <= DEFAULT_TOP_K);
    }
}

fn bundled() -> &'static MarkdownKnowledgeBase {
    static BASE: std::sync::OnceLock<MarkdownKnowledgeBase> = std::sync::OnceLock::new();
    BASE.get_or_init(|| MarkdownKnowledgeBase::bundled().unwrap())
}
