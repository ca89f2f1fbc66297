//! The entry points of the fuzz targets (`fuzz/`, feature `fuzzing`): the
//! code paths production uses, on bytes. Not an API.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aci_contracts::RunId;
use tokio::io::AsyncReadExt as _;

use crate::app::App;
use crate::config::Config;
use crate::server::ServeOptions;

/// `aci serve` on stdio with the default configuration (the memory store,
/// the bundled runbooks, the mock log source), one session per input.
#[derive(Debug)]
pub struct StdioHarness {
    runtime: tokio::runtime::Runtime,
    app: App,
    sessions: AtomicU64,
}

impl StdioHarness {
    /// Builds the app once.
    ///
    /// # Panics
    /// When the runtime or the default app cannot be built.
    #[must_use]
    #[allow(clippy::expect_used)]
    pub fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let app = runtime
            .block_on(App::build(&Config::default(), Some("memory")))
            .expect("the default app");
        Self {
            runtime,
            app,
            sessions: AtomicU64::new(0),
        }
    }

    /// Serves one stdio session that reads `input` to its end (in a run of
    /// its own), then drains as at a client's end of input; everything the
    /// server wrote on its stdout.
    ///
    /// # Panics
    /// When the session fails to start or its end is not clean.
    #[must_use]
    #[allow(clippy::expect_used)]
    pub fn session(&self, input: &[u8]) -> Vec<u8> {
        let n = self.sessions.fetch_add(1, Ordering::Relaxed);
        let run = RunId::new(format!("run-fuzz-{n}")).expect("a valid run id");
        let options = ServeOptions {
            drain: Duration::from_secs(10),
            recovery_age: Duration::from_secs(3600),
        };
        let app = self.app.sharing();
        let input = input.to_vec();
        self.runtime.block_on(async move {
            let (output, mut written) = tokio::io::duplex(64 * 1024);
            let reader = tokio::spawn(async move {
                let mut bytes = Vec::new();
                let _ = written.read_to_end(&mut bytes).await;
                bytes
            });
            let served =
                crate::stdio::serve_on(app, run, options, std::io::Cursor::new(input), output)
                    .await;
            if let Err(e) = served {
                // A session that ends at the handshake is a clean end; any
                // other error is a finding.
                panic!("the stdio session failed: {e}");
            }
            reader.await.expect("the output reader")
        })
    }
}

impl Default for StdioHarness {
    fn default() -> Self {
        Self::new()
    }
}

/// `aci serve --http` as configured by [`HttpHarness::CONFIG`] (the
/// default configuration with two static tokens and the shortest
/// connection deadlines), started once: one in-memory connection per
/// input, served as a worker serves an accepted socket (hyper's HTTP/1
/// settings, the watchdog of its deadlines, the router with its layers).
pub struct HttpHarness {
    /// The runtime the replica started on (as `aci`'s main one).
    _main: tokio::runtime::Runtime,
    /// A worker's runtime: the connections are served on it.
    worker: tokio::runtime::Runtime,
    replica: crate::http::in_memory::InMemoryReplica,
}

impl std::fmt::Debug for HttpHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpHarness").finish_non_exhaustive()
    }
}

/// What the server wrote on one connection of [`HttpHarness::exchange`].
#[derive(Debug)]
pub struct HttpExchange {
    /// Every byte, in order.
    pub output: Vec<u8>,
    /// Whether the server closed the connection itself within the bound
    /// (else the harness dropped it, and `output` may end inside a
    /// response).
    pub closed: bool,
}

impl HttpHarness {
    /// The bearer token of principal `agent`.
    pub const AGENT_TOKEN: &'static str = "aci-fuzz-agent";
    /// The bearer token of principal `reviewer`, who may review every run.
    pub const REVIEWER_TOKEN: &'static str = "aci-fuzz-reviewer";
    /// The configuration file: the SHA-256 digests of the two tokens, and
    /// every connection deadline at its smallest (1 s).
    pub const CONFIG: &'static str = "\
[serve]
header_timeout_secs = 1
idle_timeout_secs = 1
body_timeout_secs = 1

[auth.tokens.agent]
sha256 = \"bfcec5c57f88865bd14dc847ae149ff3d0ffbb5db09921d38314ac4c2c5b912b\"

[auth.tokens.reviewer]
sha256 = \"62883611748d5419c39e79a0a9490456ac014f098979456aaf76b18bb88cdb67\"
review = true
";
    /// How long a client waits for its answers before it closes its side
    /// of the connection.
    pub const BOUND: Duration = Duration::from_secs(1);

    /// Builds the app and starts the replica once.
    ///
    /// # Panics
    /// When a runtime, the app or the replica cannot be built.
    #[must_use]
    #[allow(clippy::expect_used)]
    pub fn new() -> Self {
        let main = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let worker = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a worker's runtime");
        let config = Config::parse(Self::CONFIG).expect("the harness's configuration");
        let replica = main.block_on(async {
            let app = App::build(&config, Some("memory"))
                .await
                .expect("the default app");
            crate::http::in_memory::InMemoryReplica::start(app, &config)
                .await
                .expect("the replica")
        });
        Self {
            _main: main,
            worker,
            replica,
        }
    }

    /// Serves one connection whose client writes `input`, waits for its
    /// answers (up to [`Self::BOUND`]) and closes its side; what the server
    /// wrote until it closed the connection.
    #[must_use]
    pub fn exchange(&self, input: &[u8]) -> HttpExchange {
        let exchange = self
            .worker
            .block_on(self.replica.exchange(input, Self::BOUND));
        HttpExchange {
            output: exchange.output,
            closed: exchange.closed,
        }
    }
}

impl Default for HttpHarness {
    fn default() -> Self {
        Self::new()
    }
}

/// Parses `text` as the whole configuration file and checks what `aci`
/// derives from it without reading other files or opening a connection:
/// the `[serve]` limits (as on a process allowed 20,000 open files) and
/// the TLS settings' shape, the embedder's settings. `Err` is the one-line
/// message the command prints.
///
/// # Errors
/// The configuration error.
pub fn check_config(text: &str) -> Result<(), String> {
    let config = Config::parse(text)?;
    crate::http::check_serve_section(&config, Some(20_000)).map_err(|e| e.to_string())?;
    if let Some(embeddings) = &config.knowledge.embeddings {
        embeddings.check().map_err(|e| e.to_string())?;
    }
    Ok(())
}
