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
