//! `cargo xtask bench knowledge`: retrieval quality and speed of the
//! knowledge base.
//!
//! 1. Recall@1, recall@5 and MRR per language on the labeled query set
//!    (`crates/projectors-rag/tests/data/labeled_queries.json`) over the bundled English and
//!    Chinese runbooks, for each CJK segmenter built in (CJK bigrams; jieba
//!    with the `jieba` feature): the comparison that chose the analyzer.
//! 2. Over a generated directory of 3,000 files (about 24 MB, English,
//!    Chinese and mixed): index build time in RAM (what every process paid
//!    before the persistent index), first persistent build, reopen of the
//!    unchanged persistent index, and query latency p50/p99.
//! 3. With `ACI_BIN` (the release `aci` binary; xtask sets it): the wall time
//!    of one `aci call lookup_knowledge` process rebuilding in RAM
//!    (`persistent = false`, the baseline) against a second process reusing
//!    the persistent index, measured in the same run, and their ratio.
//!
//! The last line is machine-readable.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::Arc;

use projectors_rag::embeddings::LocalEmbedder;
use projectors_rag::evaluation::{LabeledQuery, Scores, evaluate, evaluate_legs};
use projectors_rag::{
    CjkSegmenter, DirOptions, Legs, MarkdownDocument, MarkdownKnowledgeBase, VectorOptions,
};
use serde_json::Value;

const FILES: usize = 3000;
const FILE_BYTES: usize = 8000;
const QUERIES: usize = 300;

fn main() {
    if !aci_bench::full_run() {
        return;
    }
    let queries = LabeledQuery::parse_set(include_str!(
        "../../crates/projectors-rag/tests/data/labeled_queries.json"
    ))
    .unwrap();
    println!("== retrieval quality: {} labeled queries", queries.len());
    let segmenters = [
        Some(CjkSegmenter::Bigram),
        #[cfg(feature = "jieba")]
        Some(CjkSegmenter::Jieba),
    ];
    let mut bigram_r5 = Vec::new();
    for segmenter in segmenters.into_iter().flatten() {
        let documents = MarkdownDocument::bundled()
            .into_iter()
            .chain(MarkdownDocument::bundled_chinese());
        let base = MarkdownKnowledgeBase::from_documents_with(documents, segmenter).unwrap();
        let (scores, _) = evaluate(&base, &queries).unwrap();
        for (language, score) in &scores {
            println!(
                "{:<7} {:<6} n={:<3} recall@1={:.3} recall@5={:.3} MRR={:.3}",
                segmenter.name(),
                language,
                score.queries,
                score.recall_at_1,
                score.recall_at_5,
                score.mrr
            );
            if segmenter == CjkSegmenter::Bigram {
                bigram_r5.push(format!("r5_{language}={:.3}", score.recall_at_5));
            }
        }
    }

    let semantic_summary = semantic(&queries);

    let root = std::env::temp_dir().join(format!("bench-knowledge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let kb = root.join("kb");
    let bytes = generate(&kb);
    println!(
        "== generated directory: {FILES} files, {:.1} MB",
        bytes as f64 / 1e6
    );

    let started = Instant::now();
    let (ram, report) =
        MarkdownKnowledgeBase::open_dir(&kb, &DirOptions::default(), |_| {}).unwrap();
    let ram_build = started.elapsed();
    println!(
        "build in RAM (baseline, every process before): {:>8.1} ms ({} chunks)",
        ms(ram_build),
        report.chunks
    );
    let index = root.join("index");
    let options = DirOptions::default().index_dir(&index);
    let started = Instant::now();
    drop(MarkdownKnowledgeBase::open_dir(&kb, &options, |_| {}).unwrap());
    let first_build = started.elapsed();
    println!(
        "first persistent build:                       {:>8.1} ms",
        ms(first_build)
    );
    let started = Instant::now();
    let (persistent, report) = MarkdownKnowledgeBase::open_dir(&kb, &options, |_| {}).unwrap();
    let reopen = started.elapsed();
    assert!(report.unchanged());
    println!(
        "reopen unchanged persistent index:            {:>8.1} ms (ratio to RAM build {:.1}x)",
        ms(reopen),
        ratio(ram_build, reopen)
    );

    let words = vocabulary();
    let mut latencies = Vec::with_capacity(QUERIES);
    let mut rng = Lcg(7);
    for _ in 0..QUERIES {
        let query: Vec<&str> = (0..3).map(|_| words[rng.below(words.len())]).collect();
        let query = query.join(" ");
        let started = Instant::now();
        persistent.search(&query).unwrap();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let p50 = latencies[QUERIES / 2];
    let p99 = latencies[QUERIES * 99 / 100];
    println!(
        "query latency over {QUERIES} queries: p50 {:.2} ms, p99 {:.2} ms",
        ms(p50),
        ms(p99)
    );
    drop(ram);

    let mut process_ratio = String::from("n/a");
    if let Some(aci) = std::env::var_os("ACI_BIN").map(PathBuf::from) {
        let baseline_config = root.join("rebuild.toml");
        std::fs::write(
            &baseline_config,
            format!(
                "[knowledge]\ndir = {:?}\npersistent = false\n",
                kb.to_string_lossy()
            ),
        )
        .unwrap();
        let persistent_config = root.join("persistent.toml");
        std::fs::write(
            &persistent_config,
            format!(
                "[knowledge]\ndir = {:?}\nindex_dir = {:?}\n",
                kb.to_string_lossy(),
                root.join("aci-index").to_string_lossy()
            ),
        )
        .unwrap();
        let rebuild = aci_call(&aci, &baseline_config);
        let _warm = aci_call(&aci, &persistent_config);
        let second = aci_call(&aci, &persistent_config);
        process_ratio = format!("{:.1}", ratio(rebuild, second));
        println!(
            "aci call, rebuild in RAM (baseline):  {:>8.1} ms\naci call, second process, persistent: {:>8.1} ms\nratio: {process_ratio}x (goal >= 10x)",
            ms(rebuild),
            ms(second)
        );
    } else {
        println!("(set ACI_BIN to the release aci binary for the second-process comparison)");
    }
    let _ = std::fs::remove_dir_all(&root);
    println!(
        "{} {semantic_summary} build_ram_ms={:.0} reopen_ms={:.0} p50_ms={:.2} p99_ms={:.2} process_ratio={process_ratio}",
        bigram_r5.join(" "),
        ms(ram_build),
        ms(reopen),
        ms(p50),
        ms(p99)
    );
}

/// Semantic retrieval with the local model: recall@5 and MRR of BM25, the
/// vector leg and the fusion per language on the lexical and paraphrase
/// slices, the evidence threshold against unrelated queries, query CPU and
/// indexing CPU per MB.
fn semantic(lexical: &[LabeledQuery]) -> String {
    let Some(files) = testkit::embedder_files() else {
        println!("== semantic retrieval: skipped (the local embedder is not fetched)");
        return "semantic=skipped".to_owned();
    };
    let paraphrase = LabeledQuery::parse_set(include_str!(
        "../../crates/projectors-rag/tests/data/paraphrase_queries.json"
    ))
    .unwrap();
    let unrelated: Vec<Value> = serde_json::from_str(include_str!(
        "../../crates/projectors-rag/tests/data/unrelated_queries.json"
    ))
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let embedder = LocalEmbedder::load(&files.library, &files.model).unwrap();
    let documents: Vec<MarkdownDocument> = MarkdownDocument::bundled()
        .into_iter()
        .chain(MarkdownDocument::bundled_chinese())
        .collect();
    let corpus_bytes: usize = documents.iter().map(|d| d.text.len()).sum();
    let base = MarkdownKnowledgeBase::from_documents(documents).unwrap();
    assert!(base.set_embedder(Arc::new(embedder), VectorOptions::default()));
    let before = process_cpu_ns();
    let report = runtime
        .block_on(base.embed_chunks(|_, _| {}))
        .unwrap()
        .unwrap();
    let index_cpu_s = (process_cpu_ns() - before) as f64 / 1e9;
    let index_cpu_per_mb = index_cpu_s / (corpus_bytes as f64 / 1e6);
    println!(
        "== semantic retrieval (multilingual-e5-small, local): {} chunks, {:.1} KB embedded in {index_cpu_s:.1} s CPU = {index_cpu_per_mb:.1} s CPU per MB",
        report.chunks,
        corpus_bytes as f64 / 1e3
    );
    let embed_all = |queries: &[String]| -> (Vec<Option<Vec<f32>>>, Vec<f64>) {
        let mut vectors = Vec::new();
        let mut cpu_ms = Vec::new();
        for query in queries {
            let before = process_cpu_ns();
            vectors.push(Some(runtime.block_on(base.embed_query(query)).unwrap()));
            cpu_ms.push((process_cpu_ns() - before) as f64 / 1e6);
        }
        (vectors, cpu_ms)
    };
    let mut summary = Vec::new();
    let mut query_cpu = Vec::new();
    for (slice, set) in [("lexical", lexical), ("paraphrase", &paraphrase[..])] {
        let texts: Vec<String> = set.iter().map(|q| q.query.clone()).collect();
        let (vectors, cpu) = embed_all(&texts);
        query_cpu.extend(cpu);
        let mut by_legs: BTreeMap<&str, BTreeMap<String, Scores>> = BTreeMap::new();
        let mut ranks = BTreeMap::new();
        for (name, legs) in [
            ("bm25", Legs::Bm25),
            ("vector", Legs::Vector),
            ("fused", Legs::Fused),
        ] {
            let (scores, outcomes) = evaluate_legs(&base, set, legs, &vectors).unwrap();
            ranks.insert(name, outcomes);
            by_legs.insert(name, scores);
        }
        println!("-- {slice} slice ({} queries): recall@5 / MRR", set.len());
        let languages: Vec<String> = by_legs["bm25"].keys().cloned().collect();
        for language in &languages {
            let cell = |legs: &str| {
                let s = by_legs[legs][language];
                format!("{:.3} / {:.3}", s.recall_at_5, s.mrr)
            };
            println!(
                "{language:<6} n={:<3} bm25 {}   vector {}   fused {}",
                by_legs["bm25"][language].queries,
                cell("bm25"),
                cell("vector"),
                cell("fused")
            );
        }
        let all = |legs: &str| {
            let outcomes = &ranks[legs];
            outcomes.iter().filter(|o| o.rank.is_some()).count() as f64 / outcomes.len() as f64
        };
        println!(
            "all    n={:<3} recall@5 bm25 {:.3} vector {:.3} fused {:.3}",
            set.len(),
            all("bm25"),
            all("vector"),
            all("fused")
        );
        let worse: Vec<String> = ranks["bm25"]
            .iter()
            .zip(&ranks["fused"])
            .filter(|(b, f)| b.rank.is_some() && f.rank.is_none_or(|f| Some(f) > b.rank))
            .map(|(b, f)| format!("{:?} {:?}->{:?}", b.query.query, b.rank, f.rank))
            .collect();
        println!(
            "queries ranked lower fused than by BM25: {} {worse:?}",
            worse.len()
        );
        summary.push(format!("{slice}_fused_r5={:.3}", all("fused")));
        summary.push(format!("{slice}_bm25_r5={:.3}", all("bm25")));
    }
    // The evidence threshold: the nearest chunk of unrelated questions.
    let mut found = Vec::new();
    let mut bm25_found = 0;
    println!(
        "-- unrelated queries: nearest similarity (evidence thresholds: Latin {}, zh {}, ja {}, ko {})",
        projectors_rag::EVIDENCE_SIMILARITY_LATIN,
        projectors_rag::EVIDENCE_SIMILARITY_CHINESE,
        projectors_rag::EVIDENCE_SIMILARITY_JAPANESE,
        projectors_rag::EVIDENCE_SIMILARITY_KOREAN
    );
    let mut by_language: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for item in &unrelated {
        let query = item["query"].as_str().unwrap();
        let vector = runtime.block_on(base.embed_query(query)).unwrap();
        let response = base.search_legs(query, Legs::Fused, Some(&vector)).unwrap();
        let nearest = response["retrieval_trace"]["vector"]["nearest_similarity"]
            .as_f64()
            .unwrap_or(0.0);
        by_language
            .entry(item["language"].as_str().unwrap().to_owned())
            .or_default()
            .push(nearest);
        let bm25 = base.search_legs(query, Legs::Bm25, None).unwrap();
        let has = |response: &Value| {
            response["documents"]
                .as_array()
                .is_some_and(|d| !d.is_empty())
        };
        if has(&response) && !has(&bm25) {
            found.push(query.to_owned());
        }
        if has(&bm25) {
            bm25_found += 1;
        }
    }
    for (language, values) in &by_language {
        let (median, min, max) = aci_bench::spread(values);
        println!(
            "{language:<4} n={:<3} nearest min {min:.3} median {median:.3} max {max:.3}",
            values.len()
        );
    }
    println!(
        "unrelated queries: {bm25_found} of {} answered by BM25 (a shared word), {} more by the vector leg {found:?}",
        unrelated.len(),
        found.len()
    );
    let embed_cpu_ms = aci_bench::median(query_cpu);
    // A whole query as lookup_knowledge runs it: embedding, both legs,
    // fusion, response.
    let context = invocation_core::ExecutionContext {
        run_id: aci_contracts::RunId::new("bench").unwrap(),
        tool_call_id: aci_contracts::ToolCallId::new("bench").unwrap(),
        now: aci_contracts::Timestamp::from_unix_millis(0),
        deadline: None,
    };
    let mut whole = Vec::new();
    for query in paraphrase.iter().chain(lexical) {
        let before = process_cpu_ns();
        runtime
            .block_on(projectors_rag::KnowledgeSource::retrieve(
                &base,
                &query.query,
                &context,
            ))
            .unwrap();
        whole.push((process_cpu_ns() - before) as f64 / 1e6);
    }
    let query_cpu_ms = aci_bench::median(whole);
    println!(
        "query CPU, median: {query_cpu_ms:.1} ms for the whole search (goal <= 50 ms), {embed_cpu_ms:.1} ms of it embedding the query"
    );
    summary.push(format!("unrelated_vector_evidence={}", found.len()));
    summary.push(format!("query_cpu_ms={query_cpu_ms:.1}"));
    summary.push(format!("index_cpu_s_per_mb={index_cpu_per_mb:.1}"));
    summary.join(" ")
}

/// CPU time of every thread of this process, in nanoseconds
/// (`/proc/self/task/*/schedstat`).
fn process_cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

fn aci_call(aci: &Path, config: &Path) -> Duration {
    let started = Instant::now();
    let out = Command::new(aci)
        .args([
            "call",
            "lookup_knowledge",
            r#"{"query":"连接池 timeout"}"#,
            "--config",
        ])
        .arg(config)
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ratio(base: Duration, other: Duration) -> f64 {
    base.as_secs_f64() / other.as_secs_f64().max(1e-9)
}

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(self.0 >> 33).unwrap() % n
    }
}

fn vocabulary() -> Vec<&'static str> {
    "connection pool timeout disk latency replica queue cache leak restart error kafka \
     consumer lag certificate expiry dns resolver memory heap thread deadlock index \
     连接池 超时 磁盘 空间 主从 切换 缓存 内存 泄漏 告警 日志 重启 数据库 索引 延迟"
        .split_whitespace()
        .collect()
}

/// Writes the generated directory; returns its size in bytes.
fn generate(dir: &Path) -> usize {
    let words = vocabulary();
    let mut rng = Lcg(42);
    let mut total = 0;
    for i in 0..FILES {
        let mut text = format!("# Runbook {i} {}\n\n", words[rng.below(words.len())]);
        let mut section = 0;
        while text.len() < FILE_BYTES {
            text.push_str(&format!(
                "## Section {section} {}\n\n",
                words[rng.below(words.len())]
            ));
            for _ in 0..60 {
                text.push_str(words[rng.below(words.len())]);
                text.push(' ');
            }
            text.push_str("\n\n");
            section += 1;
        }
        let path = dir.join(format!("team-{:02}/runbook-{i:04}.md", i % 30));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        total += text.len();
    }
    total
}
