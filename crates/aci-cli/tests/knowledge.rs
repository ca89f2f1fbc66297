//! The knowledge directory end to end: `aci index` builds the persistent
//! index and prints what changed, a second process reuses it, and `aci serve`
//! (over stdio and over HTTP) finds a file added while it runs, without a
//! restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::command::{aci, json, stderr, stdout};
use support::contract::{McpClient, call, ids};
use support::files::{temp_dir, unique, write_in};
use support::http::replica::Replica;
use support::stdio::RawSession;

/// A knowledge directory, an index directory and a config naming both.
struct Setup {
    root: PathBuf,
    config: PathBuf,
}

impl Setup {
    fn new(tag: &str) -> Self {
        let root = temp_dir(&format!("knowledge-{tag}"));
        std::fs::create_dir_all(root.join("kb")).unwrap();
        let config = write_in(
            &root,
            "aci.toml",
            &format!(
                "[knowledge]\ndir = {:?}\nindex_dir = {:?}\n",
                root.join("kb").to_string_lossy(),
                root.join("index").to_string_lossy()
            ),
        );
        Self { root, config }
    }

    fn write(&self, relative: &str, contents: &str) {
        write_in(&self.root.join("kb"), relative, contents);
    }

    fn config(&self) -> &str {
        self.config.to_str().unwrap()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn aci_index_builds_once_and_later_processes_reuse_it() {
    let setup = Setup::new("index");
    setup.write(
        "pool.md",
        "# 数据库连接池耗尽\n\n## 症状\n\nHikariCP 连接池耗尽，获取连接超时。\n",
    );
    setup.write(
        "disk.md",
        "# 磁盘空间不足\n\n## 症状\n\n磁盘使用率超过 95%。\n",
    );
    setup.write(
        "notes.txt",
        "Plain text notes: the flux capacitor overheats.\n",
    );

    let out = aci(&["index", "--config", setup.config()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(report.contains("(built anew: new)"), "{report}");
    assert!(
        report.contains("3 files: 0 reused, 3 added, 0 updated, 0 removed, 0 failed"),
        "{report}"
    );
    assert!(report.contains("added    pool.md"), "{report}");

    // A second process: `aci call` reuses the index (the counter on stderr).
    let out = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"连接池"}"#,
        "--config",
        setup.config(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(
        log.contains("knowledge index: 3 reused, 0 added, 0 updated, 0 removed, 0 failed"),
        "{log}"
    );
    let v = json(&out);
    assert_eq!(v["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(v["observation"]["evidence"][0]["document_id"], "pool");

    // One changed file: only it is re-indexed.
    setup.write("disk.md", "# 磁盘空间不足\n\n## 处理\n\n清理过期日志。\n");
    setup.write("bad.md", "\u{FFFD}");
    std::fs::write(setup.root.join("kb/bad.md"), [0xFF, 0xFE]).unwrap();
    let out = aci(&["index", "--config", setup.config()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(
        report.contains("4 files: 2 reused, 1 added, 1 updated, 0 removed, 1 failed"),
        "{report}"
    );
    assert!(report.contains("updated  disk.md"), "{report}");
    assert!(
        report.contains("failed   bad.md (KNOWLEDGE_FILE_NOT_UTF8)"),
        "{report}"
    );
    assert!(
        stderr(&out).contains("skipped knowledge file bad.md (KNOWLEDGE_FILE_NOT_UTF8)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn aci_index_without_a_knowledge_dir_is_a_config_error() {
    let out = aci(&["index"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("[knowledge] dir"), "{}", stderr(&out));
}

/// A server the watch scenario looks things up on: a stdio session, or an
/// HTTP client in a run of its own.
trait Lookup {
    /// The `structuredContent` of `lookup_knowledge` call number `id` of
    /// `query`.
    async fn lookup(&mut self, id: u64, query: &str) -> Value;
}

impl Lookup for RawSession {
    async fn lookup(&mut self, id: u64, query: &str) -> Value {
        self.call(
            &json!(id),
            "lookup_knowledge",
            json!({"query": query}),
            None,
        )
        .await
    }
}

/// An rmcp client over HTTP, calling in `run`.
struct HttpLookup {
    client: McpClient,
    run: String,
}

impl Lookup for HttpLookup {
    async fn lookup(&mut self, id: u64, query: &str) -> Value {
        call(
            &self.client,
            "lookup_knowledge",
            json!({"query": query}),
            ids(&self.run, &format!("call_{id}")),
        )
        .await
    }
}

/// A guard against a watcher that never fires, not a timing assertion.
const WATCH_GUARD: Duration = Duration::from_secs(60);

/// The server behind `server`, started on `setup`'s directory holding
/// `pool.md`, finds a file added while it runs, without a restart, and
/// still serves the one it had.
async fn finds_a_file_added_while_it_runs(setup: &Setup, server: &mut impl Lookup) {
    assert_eq!(
        server.lookup(1, "warp core breach").await["evidence_status"],
        "NO_EVIDENCE"
    );
    setup.write(
        "nested/warp.md",
        "# Warp core\n\n## Symptoms\n\nThe warp core breach alarm sounds.\n",
    );
    let mut id = 1;
    let mut found = false;
    let started = Instant::now();
    while !found && started.elapsed() < WATCH_GUARD {
        id += 1;
        found = server.lookup(id, "warp core breach").await["evidence_status"] == "EVIDENCE_FOUND";
        if !found {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(found, "the new file was never found");
    let result = server.lookup(id + 1, "warp core breach").await;
    assert_eq!(result["evidence"][0]["document_id"], "nested/warp");
    // The old file is still served.
    assert_eq!(
        server.lookup(id + 2, "pool exhausted").await["evidence_status"],
        "EVIDENCE_FOUND"
    );
}

/// `setup` with the file the watch scenario starts from.
fn watch_setup(tag: &str) -> Setup {
    let setup = Setup::new(tag);
    setup.write(
        "pool.md",
        "# Pool\n\n## Symptoms\n\nThe pool is exhausted.\n",
    );
    setup
}

#[tokio::test(flavor = "multi_thread")]
async fn aci_serve_finds_a_file_added_while_it_runs() {
    let setup = watch_setup("serve");
    let mut serve = RawSession::start(&["--config", setup.config()]).await;
    finds_a_file_added_while_it_runs(&setup, &mut serve).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn aci_serve_http_finds_a_file_added_while_it_runs() {
    let setup = watch_setup("serve-http");
    let replica = Replica::start(&setup.config, "memory", &["--insecure-no-auth"]).await;
    let mut http = HttpLookup {
        client: replica.client("/mcp", None).await,
        run: unique("run-watch"),
    };
    finds_a_file_added_while_it_runs(&setup, &mut http).await;
    http.client.cancel().await.unwrap();
    let (status, stderr) = replica.stop().await;
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("knowledge updated: 1 added"),
        "the watcher said what it applied: {stderr}"
    );
}
