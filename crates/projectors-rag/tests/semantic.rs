//! The vector leg: what it finds with the local model, that NO_EVIDENCE
//! stays honest and lexical ranks stay, that chunk vectors persist by hash
//! beside the index, and that every way the embedder can fail degrades to
//! BM25 with the fallback named.
//!
//! The quality tests run on the real multilingual-e5-small (skipped, loudly,
//! when `cargo xtask fetch-embedder` has not run; failed under
//! `ACI_E5_REQUIRED=1`). The persistence and failure tests use small
//! embedders of this file (deterministic, counting, failing, hanging): they
//! test the knowledge base's handling of the port, not a model.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use invocation_core::ExecutionContext;
use projectors_rag::embeddings::{EmbedError, EmbedRole, Embedder, LocalEmbedder};
use projectors_rag::evaluation::{LabeledQuery, evaluate_legs};
use projectors_rag::{
    DirOptions, KnowledgeSource, Legs, MarkdownDocument, MarkdownKnowledgeBase, VectorOptions,
};
use serde_json::Value;

fn bundled() -> MarkdownKnowledgeBase {
    let documents = MarkdownDocument::bundled()
        .into_iter()
        .chain(MarkdownDocument::bundled_chinese());
    MarkdownKnowledgeBase::from_documents(documents).unwrap()
}

async fn with_local_model() -> Option<MarkdownKnowledgeBase> {
    let files = testkit::embedder_files()?;
    let embedder = LocalEmbedder::load(&files.library, &files.model).unwrap();
    let base = bundled();
    assert!(base.set_embedder(Arc::new(embedder), VectorOptions::default()));
    let report = base.embed_chunks(|_, _| {}).await.unwrap().unwrap();
    assert_eq!(report.embedded, report.chunks);
    Some(base)
}

fn context() -> ExecutionContext {
    ExecutionContext {
        run_id: aci_contracts::RunId::new("run-semantic").unwrap(),
        tool_call_id: aci_contracts::ToolCallId::new("call-semantic").unwrap(),
        now: aci_contracts::Timestamp::from_unix_millis(1_796_033_776_123),
        deadline: None,
    }
}

fn documents(response: &Value) -> Vec<(String, String)> {
    response["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| {
            let section = hit["heading_path"]
                .as_array()
                .and_then(|path| path.last())
                .and_then(Value::as_str)
                .or_else(|| hit["title"].as_str())
                .unwrap_or_default();
            (
                hit["document_id"].as_str().unwrap().to_owned(),
                section.to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paraphrase_in_another_language_finds_its_runbook() {
    let Some(base) = with_local_model().await else {
        return;
    };
    let response = base
        .retrieve("DB接続が枯渇してリクエストがタイムアウトする", &context())
        .await
        .unwrap();
    assert_eq!(
        response["retrieval_trace"]["legs"],
        serde_json::json!(["bm25", "vector"])
    );
    assert!(response["retrieval_trace"].get("fallback").is_none());
    let found = documents(&response);
    assert!(
        found
            .iter()
            .any(|(document, _)| document == "connection-pool-exhaustion"),
        "{found:?}"
    );
    assert_eq!(response["engine"], "tantivy-bm25+vector");
}

#[tokio::test(flavor = "multi_thread")]
async fn unrelated_questions_stay_no_evidence_in_every_language() {
    let Some(base) = with_local_model().await else {
        return;
    };
    let unrelated: Vec<Value> =
        serde_json::from_str(include_str!("data/unrelated_queries.json")).unwrap();
    assert!(unrelated.len() >= 32);
    let mut added = Vec::new();
    for item in &unrelated {
        let query = item["query"].as_str().unwrap();
        let fused = base.retrieve(query, &context()).await.unwrap();
        assert_eq!(
            fused["retrieval_trace"]["legs"],
            serde_json::json!(["bm25", "vector"])
        );
        let bm25 = base.search(query).unwrap();
        // The vector leg never turns "nothing found" into evidence.
        if documents(&bm25).is_empty() && !documents(&fused).is_empty() {
            added.push(query.to_owned());
        }
    }
    assert!(
        added.is_empty(),
        "the vector leg claimed evidence for {added:?}"
    );
    let budget = base
        .retrieve("quarterly marketing budget for the offsite", &context())
        .await
        .unwrap();
    assert!(documents(&budget).is_empty(), "{budget}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_lexical_query_keeps_its_bm25_rank_when_fused() {
    let Some(base) = with_local_model().await else {
        return;
    };
    let queries = LabeledQuery::parse_set(include_str!("data/labeled_queries.json")).unwrap();
    let mut vectors = Vec::new();
    for query in &queries {
        vectors.push(Some(base.embed_query(&query.query).await.unwrap()));
    }
    let (_, bm25) = evaluate_legs(&base, &queries, Legs::Bm25, &vectors).unwrap();
    let (_, fused) = evaluate_legs(&base, &queries, Legs::Fused, &vectors).unwrap();
    let worse: Vec<String> = bm25
        .iter()
        .zip(&fused)
        .filter(|(b, f)| b.rank.is_some() && f.rank.is_none_or(|f| Some(f) > b.rank))
        .map(|(b, f)| format!("{:?}: {:?} -> {:?}", b.query.query, b.rank, f.rank))
        .collect();
    assert!(worse.is_empty(), "ranked lower when fused: {worse:#?}");
}

/// A deterministic embedder: character-bigram hashing into 64 dimensions,
/// counting the passages it embeds.
#[derive(Debug, Default)]
struct Hashing {
    passages: AtomicUsize,
}

fn hashed(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0_f32; 64];
    let chars: Vec<char> = text.to_lowercase().chars().collect();
    for pair in chars.windows(2) {
        let code = (u32::from(pair[0]).wrapping_mul(31) ^ u32::from(pair[1])) as usize;
        vector[code % 64] += 1.0;
    }
    vector[0] += 0.5;
    vector
}

#[async_trait]
impl Embedder for Hashing {
    fn model_id(&self) -> &str {
        "test:bigram-hashing-64"
    }

    fn max_batch(&self) -> usize {
        4
    }

    async fn embed(&self, texts: &[String], role: EmbedRole) -> Result<Vec<Vec<f32>>, EmbedError> {
        if role == EmbedRole::Passage {
            self.passages.fetch_add(texts.len(), Ordering::SeqCst);
        }
        Ok(texts.iter().map(|text| hashed(text)).collect())
    }
}

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Self {
        Self(tempfile::tempdir().unwrap())
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.0.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn runbook(topic: &str, sections: usize) -> String {
    let mut text = format!("# {topic}\n\n");
    for section in 0..sections {
        text.push_str(&format!(
            "## Step {section}\n\nCheck the {topic} dashboard, then step {section} of the {topic} procedure.\n\n"
        ));
    }
    text
}

fn open(kb: &Dir, index: &Dir, embedder: Arc<dyn Embedder>) -> MarkdownKnowledgeBase {
    let options = DirOptions::default().index_dir(index.0.path());
    let (base, _) = MarkdownKnowledgeBase::open_dir(kb.0.path(), &options, |_| {}).unwrap();
    assert!(base.set_embedder(embedder, VectorOptions::default()));
    base
}

#[tokio::test(flavor = "multi_thread")]
async fn vectors_persist_by_chunk_hash_and_only_changed_chunks_are_embedded_again() {
    let kb = Dir::new();
    let index = Dir::new();
    kb.write("disk.md", &runbook("disk", 3));
    kb.write("dns.md", &runbook("dns", 2));

    let first = Arc::new(Hashing::default());
    let base = open(&kb, &index, first.clone());
    let report = base.embed_chunks(|_, _| {}).await.unwrap().unwrap();
    assert_eq!((report.chunks, report.embedded, report.reused), (5, 5, 0));
    assert_eq!(first.passages.load(Ordering::SeqCst), 5);
    // The vectors live beside the index, one file per model.
    let vectors: Vec<_> = std::fs::read_dir(index.0.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".vectors"))
        .collect();
    assert_eq!(vectors.len(), 1);
    drop(base);

    // A later process embeds nothing.
    let second = Arc::new(Hashing::default());
    let base = open(&kb, &index, second.clone());
    let report = base.embed_chunks(|_, _| {}).await.unwrap().unwrap();
    assert_eq!((report.embedded, report.reused), (0, 5));
    assert_eq!(second.passages.load(Ordering::SeqCst), 0);

    // One section changes: one chunk is embedded again.
    kb.write(
        "disk.md",
        &runbook("disk", 3).replace("step 1 of the disk procedure", "step 1, now different"),
    );
    base.refresh().unwrap();
    let response = base.retrieve("disk dashboard", &context()).await.unwrap();
    assert_eq!(response["retrieval_trace"]["fallback"], "VECTORS_NOT_READY");
    assert_eq!(
        response["retrieval_trace"]["legs"],
        serde_json::json!(["bm25"])
    );
    let report = base.embed_chunks(|_, _| {}).await.unwrap().unwrap();
    assert_eq!((report.embedded, report.reused), (1, 4));
    assert_eq!(second.passages.load(Ordering::SeqCst), 1);
    let response = base.retrieve("disk dashboard", &context()).await.unwrap();
    assert_eq!(
        response["retrieval_trace"]["legs"],
        serde_json::json!(["bm25", "vector"])
    );
    assert_eq!(base.vector_fallbacks().get("VECTORS_NOT_READY"), Some(&1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_vectors_file_is_embedded_again_not_trusted() {
    let kb = Dir::new();
    let index = Dir::new();
    kb.write("disk.md", &runbook("disk", 2));
    let base = open(&kb, &index, Arc::new(Hashing::default()));
    base.embed_chunks(|_, _| {}).await.unwrap();
    drop(base);
    for entry in walk(index.0.path()) {
        if entry.extension().is_some_and(|ext| ext == "bin")
            && entry.to_string_lossy().contains(".vectors")
        {
            let mut bytes = std::fs::read(&entry).unwrap();
            bytes.truncate(bytes.len() / 2);
            std::fs::write(&entry, bytes).unwrap();
        }
    }
    let counting = Arc::new(Hashing::default());
    let base = open(&kb, &index, counting.clone());
    let report = base.embed_chunks(|_, _| {}).await.unwrap().unwrap();
    assert_eq!(report.embedded, 2);
    assert_eq!(counting.passages.load(Ordering::SeqCst), 2);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// How a broken embedder breaks.
#[derive(Debug, Clone, Copy)]
enum Broken {
    /// Every call fails.
    Fails,
    /// Passages work; queries never answer.
    QueriesHang,
    /// Passages work; a query gets two vectors.
    QueriesMalformed,
    /// Passages work; a query's vector is all zeros.
    QueriesZero,
}

#[derive(Debug)]
struct BrokenEmbedder(Broken);

#[async_trait]
impl Embedder for BrokenEmbedder {
    fn model_id(&self) -> &str {
        "test:broken"
    }

    async fn embed(&self, texts: &[String], role: EmbedRole) -> Result<Vec<Vec<f32>>, EmbedError> {
        match (self.0, role) {
            (Broken::Fails, _) => Err(EmbedError::Failed {
                message: "the model server said no".to_owned(),
            }),
            (_, EmbedRole::Passage) => Ok(texts.iter().map(|text| hashed(text)).collect()),
            (Broken::QueriesHang, EmbedRole::Query) => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            (Broken::QueriesMalformed, EmbedRole::Query) => Ok(vec![hashed("a"), hashed("b")]),
            (Broken::QueriesZero, EmbedRole::Query) => Ok(vec![vec![0.0; 64]]),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_embedder_failure_degrades_to_bm25_with_its_code() {
    for (broken, code) in [
        (Broken::Fails, "EMBEDDER_FAILED"),
        (Broken::QueriesHang, "EMBEDDER_TIMEOUT"),
        (Broken::QueriesMalformed, "EMBEDDER_MALFORMED"),
        (Broken::QueriesZero, "EMBEDDER_MALFORMED"),
    ] {
        let base = bundled();
        let mut options = VectorOptions::default();
        options.query_timeout = Duration::from_millis(200);
        assert!(base.set_embedder(Arc::new(BrokenEmbedder(broken)), options));
        let embedded = base.embed_chunks(|_, _| {}).await;
        assert_eq!(
            embedded.is_err(),
            matches!(broken, Broken::Fails),
            "{broken:?}"
        );
        let started = Instant::now();
        let response = base
            .retrieve("connection pool timeout", &context())
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5), "{broken:?}");
        assert_eq!(
            response["retrieval_trace"]["legs"],
            serde_json::json!(["bm25"]),
            "{broken:?}"
        );
        assert_eq!(response["retrieval_trace"]["fallback"], code, "{broken:?}");
        // BM25's answer, unchanged.
        assert_eq!(
            documents(&response),
            documents(&base.search("connection pool timeout").unwrap()),
            "{broken:?}"
        );
        assert_eq!(base.vector_fallbacks().get(code), Some(&1), "{broken:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_embedder_is_refused_and_concurrent_passes_embed_once() {
    let kb = Dir::new();
    let index = Dir::new();
    kb.write("disk.md", &runbook("disk", 4));
    let counting = Arc::new(Hashing::default());
    let base = open(&kb, &index, counting.clone());
    assert!(!base.set_embedder(Arc::new(Hashing::default()), VectorOptions::default()));
    let (a, b) = tokio::join!(base.embed_chunks(|_, _| {}), base.embed_chunks(|_, _| {}));
    let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
    assert_eq!(a.embedded + b.embedded, 4);
    assert_eq!(counting.passages.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_embedder_nothing_changes() {
    let base = bundled();
    assert!(base.embed_chunks(|_, _| {}).await.unwrap().is_none());
    let response = base
        .retrieve("connection pool timeout", &context())
        .await
        .unwrap();
    assert_eq!(
        response["retrieval_trace"]["legs"],
        serde_json::json!(["bm25"])
    );
    assert!(response["retrieval_trace"].get("fallback").is_none());
    assert_eq!(response["engine"], "tantivy-bm25");
    assert!(base.vector_fallbacks().is_empty());
}
