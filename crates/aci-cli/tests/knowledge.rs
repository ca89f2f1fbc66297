//! The knowledge directory end to end: `aci index` builds the persistent
//! index and prints what changed, a second process reuses it, and `aci serve`
//! finds a file added while it runs, without a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn aci(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aci"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the aci binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A knowledge directory, an index directory and a config naming both.
struct Setup {
    root: PathBuf,
    config: PathBuf,
}

impl Setup {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("knowledge-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(root.join("kb")).unwrap();
        let config = root.join("aci.toml");
        std::fs::write(
            &config,
            format!(
                "[knowledge]\ndir = {:?}\nindex_dir = {:?}\n",
                root.join("kb").to_string_lossy(),
                root.join("index").to_string_lossy()
            ),
        )
        .unwrap();
        Self { root, config }
    }

    fn write(&self, relative: &str, contents: &str) {
        let path = self.root.join("kb").join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
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
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("(built anew: new)"), "{stdout}");
    assert!(
        stdout.contains("3 files: 0 reused, 3 added, 0 updated, 0 removed, 0 failed"),
        "{stdout}"
    );
    assert!(stdout.contains("added    pool.md"), "{stdout}");

    // A second process: `aci call` reuses the index (the counter on stderr).
    let out = aci(&[
        "call",
        "lookup_knowledge",
        r#"{"query":"连接池"}"#,
        "--config",
        setup.config(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("knowledge index: 3 reused, 0 added, 0 updated, 0 removed, 0 failed"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["observation"]["evidence_status"], "EVIDENCE_FOUND");
    assert_eq!(v["observation"]["evidence"][0]["document_id"], "pool");

    // One changed file: only it is re-indexed.
    setup.write("disk.md", "# 磁盘空间不足\n\n## 处理\n\n清理过期日志。\n");
    setup.write("bad.md", "\u{FFFD}");
    std::fs::write(setup.root.join("kb/bad.md"), [0xFF, 0xFE]).unwrap();
    let out = aci(&["index", "--config", setup.config()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("4 files: 2 reused, 1 added, 1 updated, 0 removed, 1 failed"),
        "{stdout}"
    );
    assert!(stdout.contains("updated  disk.md"), "{stdout}");
    assert!(
        stdout.contains("failed   bad.md (KNOWLEDGE_FILE_NOT_UTF8)"),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("skipped knowledge file bad.md (KNOWLEDGE_FILE_NOT_UTF8)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn aci_index_without_a_knowledge_dir_is_a_config_error() {
    let out = aci(&["index"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("[knowledge] dir"),
        "{}",
        text(&out.stderr)
    );
}

/// `aci serve` as a child, spoken to in raw JSON-RPC lines.
struct Serve {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Serve {
    fn start(config: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_aci"))
            .args(["serve", "--config", config])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut serve = Self {
            child,
            stdin,
            stdout,
        };
        serve.send(&json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}
            }
        }));
        assert_eq!(serve.response(0)["result"]["serverInfo"]["name"], "aci");
        serve.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        serve
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn response(&mut self, id: u64) -> Value {
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    fn lookup(&mut self, id: u64, query: &str) -> Value {
        self.send(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "lookup_knowledge", "arguments": {"query": query}}
        }));
        self.response(id)["result"]["structuredContent"].clone()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(mut found: impl FnMut() -> bool) -> bool {
    // A guard against a watcher that never fires, not a timing assertion.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if found() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[test]
fn aci_serve_finds_a_file_added_while_it_runs() {
    let setup = Setup::new("serve");
    setup.write(
        "pool.md",
        "# Pool\n\n## Symptoms\n\nThe pool is exhausted.\n",
    );
    let mut serve = Serve::start(setup.config());
    assert_eq!(
        serve.lookup(1, "warp core breach")["evidence_status"],
        "NO_EVIDENCE"
    );
    setup.write(
        "nested/warp.md",
        "# Warp core\n\n## Symptoms\n\nThe warp core breach alarm sounds.\n",
    );
    let mut id = 1;
    let found = wait_until(|| {
        id += 1;
        serve.lookup(id, "warp core breach")["evidence_status"] == "EVIDENCE_FOUND"
    });
    assert!(found, "the new file was never found");
    let result = serve.lookup(id + 1, "warp core breach");
    assert_eq!(result["evidence"][0]["document_id"], "nested/warp");
    // The old file is still served.
    assert_eq!(
        serve.lookup(id + 2, "pool exhausted")["evidence_status"],
        "EVIDENCE_FOUND"
    );
    let _ = Path::new(setup.config());
}
