//! A real OpenTelemetry collector: `rotel` (PyPI, pinned, installed by
//! `.ci/run` into `target/ci-venv`) receives the spans of `aci serve --http`
//! over OTLP/HTTP and shows them in its debug output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::json;
use support::HANG_GUARD;
use support::files::{config_file, unique};
use support::http::replica::{Replica, post_call};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

/// The `rotel-agent` binary: `ACI_ROTEL_AGENT`, else the one `.ci/run`
/// installs under `target/ci-venv`.
fn rotel_agent() -> PathBuf {
    if let Some(path) = std::env::var_os("ACI_ROTEL_AGENT") {
        return PathBuf::from(path);
    }
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let lib = target.parent().unwrap().join("ci-venv").join("lib");
    std::fs::read_dir(&lib)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|python| python.path().join("site-packages/rotel/rotel-agent"))
        .find(|agent| agent.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no rotel collector: run .ci/run (it installs rotel into target/ci-venv) \
                 or set ACI_ROTEL_AGENT to a rotel-agent binary"
            )
        })
}

/// A free loopback port (bound, then released for the collector).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running rotel whose debug exporter prints every span on stdout.
struct Rotel {
    _child: Child,
    http: u16,
    output: Arc<Mutex<String>>,
    grew: Arc<Notify>,
}

impl Rotel {
    async fn start() -> Self {
        let dir = support::files::temp_dir("rotel");
        let http = free_port();
        let grpc = free_port();
        let mut child = Command::new(rotel_agent())
            .args([
                "start",
                "--exporter",
                "blackhole",
                "--debug-log",
                "traces",
                "--debug-log-verbosity",
                "detailed",
                "--otlp-http-endpoint",
                &format!("127.0.0.1:{http}"),
                "--otlp-grpc-endpoint",
                &format!("127.0.0.1:{grpc}"),
                "--pid-file",
                dir.join("rotel.pid").to_str().unwrap(),
                "--log-file",
                dir.join("rotel.log").to_str().unwrap(),
            ])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let output = Arc::new(Mutex::new(String::new()));
        let grew = Arc::new(Notify::new());
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (output, grew) = (Arc::clone(&output), Arc::clone(&grew));
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut text = output.lock().unwrap();
                    text.push_str(&line);
                    text.push('\n');
                    grew.notify_waiters();
                }
            });
        }
        let rotel = Self {
            _child: child,
            http,
            output,
            grew,
        };
        rotel.wait_for("Starting Rotel").await;
        // Listening: the OTLP/HTTP port takes connections.
        let listening = async {
            while tokio::net::TcpStream::connect(("127.0.0.1", http))
                .await
                .is_err()
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(HANG_GUARD, listening)
            .await
            .expect("rotel listens");
        rotel
    }

    /// Waits until the output holds every one of `needles`.
    async fn wait_for(&self, needles: &str) -> String {
        let wait = async {
            loop {
                let grew = self.grew.notified();
                let text = self.output.lock().unwrap().clone();
                if needles.lines().all(|n| text.contains(n)) {
                    return text;
                }
                grew.await;
            }
        };
        match tokio::time::timeout(HANG_GUARD, wait).await {
            Ok(text) => text,
            Err(_) => panic!(
                "rotel never showed {needles:?}: {}",
                self.output.lock().unwrap()
            ),
        }
    }
}

#[tokio::test]
async fn rotel_shows_the_span_of_a_call_over_http() {
    let rotel = Rotel::start().await;
    let config = config_file(
        "collector",
        &format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n",
            rotel.http
        ),
    );
    let replica = Replica::start(&config, "memory", &["--insecure-no-auth"]).await;
    let run = unique("run");
    let (status, _, body) = post_call(
        &replica.url("/mcp"),
        None,
        7,
        "lookup_knowledge",
        &json!({"query": "connection pool exhausted"}),
        &json!({"aci/run_id": run, "aci/tool_call_id": "c-rotel"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let text = rotel
        .wait_for(&format!(
            "Name           : execute_tool lookup_knowledge\n\
             Name           : tools/call lookup_knowledge\n\
             Kind           : SPAN_KIND_SERVER\n\
             -> service.name: Str(aci)\n\
             -> gen_ai.operation.name: Str(execute_tool)\n\
             -> gen_ai.tool.call.id: Str(c-rotel)\n\
             -> aci.run.id: Str({run})\n\
             -> aci.record.status: Str(READY)\n\
             -> aci.evidence_status: Str(EVIDENCE_FOUND)\n\
             -> mcp.method.name: Str(tools/call)\n\
             -> network.transport: Str(tcp)"
        ))
        .await;
    // Content capture is off: no arguments, no result.
    assert!(!text.contains("gen_ai.tool.call.arguments"), "{text}");
    assert!(!text.contains("gen_ai.tool.call.result"), "{text}");
    replica.stop().await;
}
