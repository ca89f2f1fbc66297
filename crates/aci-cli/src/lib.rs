//! `aci`: the tool boundary on the command line.
//!
//! - `aci tools` prints the three frozen tool definitions (MCP, OpenAI or
//!   Anthropic format).
//! - `aci call <tool> '<json>'` runs one call through the boundary and prints
//!   `{"observation": …, "control": …}`; exit status 0 when READY, 2 when
//!   ERROR, 1 for a usage or configuration error.
//! - `aci inspect` and `aci verify` read a run's journal from a shared store.
//! - `aci report` writes a run's review page to one self-contained HTML file.
//! - `aci recover` finalizes a run's calls left PROJECTING by a killed process.
//! - `aci index` builds or updates the persistent knowledge index.
//! - `aci archive` moves finalized records into the PostgreSQL archive;
//!   `aci verify --archive` and `aci export` read it back.
//! - `aci serve` is an MCP server on stdio; `aci serve --http ADDR` serves
//!   the same MCP service over Streamable HTTP to many agents (and many
//!   replicas on one store). Both pick up changed knowledge files without a
//!   restart.
//!
//! With no configuration, everything runs on embedded defaults: the in-memory
//! store, the bundled runbooks, the mock log source, and no MySQL data source.
//!
//! This library is the `aci` command ([`run`]); nothing else in it is an
//! API. With the `fuzzing` feature it also has `aci_cli::fuzzing`, the entry
//! points of the fuzz targets in `fuzz/`.

mod app;
mod archive;
mod commands;
mod config;
mod embeddings;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod index;
mod knowledge_watch;
mod output;
mod pretty;
mod review;
mod server;
mod stdio;
mod telemetry;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// The tool boundary for agent tools: bounded, recorded, citable evidence.
#[derive(Debug, Parser)]
#[command(name = "aci", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options shared by the commands that open a store.
#[derive(Debug, Clone, clap::Args)]
struct StoreArgs {
    /// Where canonical records live: `memory` (this process only; the default),
    /// `redis://host:port/db`, `rediss://…` (TLS), or
    /// `redis+cluster://host:port,host:port` (`rediss+cluster://…` for TLS).
    /// Overrides the config file's `store`.
    #[arg(long, value_name = "STORE")]
    store: Option<String>,
    /// A TOML configuration file (store, limits, budgets, run deadline,
    /// knowledge directory, MySQL data sources). See README.md for every key.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the three frozen tool definitions as JSON.
    Tools {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Mcp)]
        format: Format,
    },
    /// Run one tool call through the boundary and print its two views.
    ///
    /// Exit status: 0 when the call is READY (EVIDENCE_FOUND or NO_EVIDENCE),
    /// 2 when it is ERROR (the error observation is still printed), 1 for a
    /// usage or configuration error. The command plays the agent framework:
    /// without `--run-id`/`--tool-call-id` it makes fresh ids (`run-<uuid>`,
    /// `call-<uuid>`), shown in the control view.
    Call {
        /// The tool: lookup_knowledge, query_logs or query_mysql.
        tool: String,
        /// The arguments as a JSON object, e.g. '{"query":"connection pool timeout"}'.
        arguments: String,
        /// The run id (default: a fresh `run-<uuid>`).
        #[arg(long)]
        run_id: Option<String>,
        /// The tool call id (default: a fresh `call-<uuid>`).
        #[arg(long)]
        tool_call_id: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Show a run's journal: every call in creation order.
    Inspect {
        /// The run id.
        #[arg(long)]
        run: String,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
        /// Include the harness-only raw responses (implies --json).
        #[arg(long)]
        raw: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Give the citation verdict of each tool call id of a run.
    ///
    /// With `--archive`: recompute the run's archived hash chain instead
    /// (exit 0 when intact, 2 naming the first bad record).
    Verify {
        /// The run id.
        #[arg(long)]
        run: String,
        /// Tool call ids (or run_id/tool_call_id) cited by the agent.
        #[arg(required_unless_present = "archive")]
        ids: Vec<String>,
        /// Verify the run in the `[archive]` database.
        #[arg(long, conflicts_with = "ids")]
        archive: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Write a run's review page (timeline, both views of every call, the
    /// citation check) to one self-contained HTML file.
    Report {
        /// The run id.
        #[arg(long)]
        run: String,
        /// The HTML file to write, e.g. `run.html`.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Build or update the persistent index of `[knowledge] dir` and print
    /// what changed (later `aci call`/`aci serve` processes reuse it).
    Index {
        /// The TOML configuration file with the `[knowledge]` section.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Finalize a run's calls that a killed process left PROJECTING.
    ///
    /// Moves the run's PROJECTING records older than `--older-than` to
    /// ERROR / EXECUTION_ABANDONED (compare-and-set; nothing is executed
    /// again) and prints one JSON line per record it changed. Safe when no
    /// live process can still finish such a record: keep the threshold above
    /// the longest tool timeout (the default adds a margin to it).
    Recover {
        /// The run id.
        #[arg(long)]
        run: String,
        /// Only records created more than this many seconds ago (default: the
        /// longest tool timeout plus 30 s).
        #[arg(long, value_name = "SECS")]
        older_than: Option<u64>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Move finalized records from the store's outbox into the `[archive]`
    /// PostgreSQL archive, acknowledging each batch after it committed.
    ///
    /// Runs until SIGTERM (finishing the batch in hand, exit 0). With
    /// `--once`: stops when the outbox has nothing more for it; exit 0 when
    /// nothing is pending, 2 when entries are still held by another
    /// archiver. Prints one JSON summary line.
    Archive {
        /// One pass, then exit.
        #[arg(long)]
        once: bool,
        /// Serve `GET /metrics` (Prometheus text: pending, lag, rows,
        /// errors) on this `host:port` (overrides `[archive]
        /// metrics_listen`).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Write a run's archived calls in chain order (exit 2 when the archive
    /// has none).
    Export {
        /// The run id.
        #[arg(long)]
        run: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = archive::ExportFormat::Jsonl)]
        format: archive::ExportFormat,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Serve the three tools over MCP on stdio.
    ///
    /// The run id and tool call id of a `tools/call` come from its `_meta`
    /// (`aci/run_id`, `aci/tool_call_id`); otherwise the tool call id is the
    /// JSON-RPC request id and the run id is the server's (`--run-id`, or one
    /// made at start and written to stderr). Logs go to stderr (`RUST_LOG`).
    ///
    /// With `--http ADDR` it serves MCP Streamable HTTP instead, at `/mcp` and
    /// `/runs/<run_id>/mcp`, to callers with a bearer token of the config's
    /// `[auth]`; the run id then comes from each request (`_meta`, the
    /// `Aci-Run-Id` header, or the URL), never from the server.
    Serve {
        /// The server's run id (default: a fresh `run-<uuid>`; stdio only).
        #[arg(long, conflicts_with = "http")]
        run_id: Option<String>,
        /// Serve MCP Streamable HTTP on this address, e.g. `127.0.0.1:8080`.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// With `--http`: serve without authentication (local development only).
        #[arg(long, requires = "http")]
        insecure_no_auth: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// Tool definition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// MCP tool objects (`inputSchema`, `outputSchema`, `annotations`).
    Mcp,
    /// OpenAI function tools.
    Openai,
    /// Anthropic tools.
    Anthropic,
}

/// The `aci` command: parses the process's arguments, runs the command and
/// gives its exit status.
#[must_use]
pub fn run() -> ExitCode {
    install_panic_hook();
    install_crypto_provider();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("aci: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            if e.has_message() {
                eprintln!("aci: {e}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// Panics are caught by the boundary; this hook keeps their messages (which
/// may carry payload text) off stderr.
/// Makes ring the process's TLS crypto provider before any client is built.
///
/// rustls picks a provider by itself only when exactly one is compiled in,
/// and a build may hold none or two (a dependency of another crate can turn
/// on the OTLP exporter's `rustls-no-provider`, or a second provider):
/// without a process default, building the exporter's HTTP client, or a
/// `rediss://` or PostgreSQL TLS connection, would panic.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another installer got there first: a default exists either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("aci: a panic was caught{location}");
    }));
}

/// Crates whose events below `warn` carry payloads, URLs or keys (rmcp logs
/// whole requests and results at `debug`; the HTTP stack and the drivers log
/// what they send): they never log below `warn`, whatever `RUST_LOG` says.
const QUIET_TARGETS: [&str; 12] = [
    "rmcp",
    "hyper",
    "hyper_util",
    "h2",
    "tower",
    "tower_http",
    "axum",
    "reqwest",
    "redis",
    "mysql_async",
    "mysql_common",
    "tantivy",
];

/// Logs go to stderr only (stdout carries results or the MCP protocol);
/// `RUST_LOG` sets the filter, default `warn`, and [`QUIET_TARGETS`] stay at
/// `warn` or above.
fn init_tracing() {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::{FilterExt as _, LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let quiet = QUIET_TARGETS.iter().fold(
        Targets::new().with_default(LevelFilter::TRACE),
        |targets, target| targets.with_target(*target, LevelFilter::WARN),
    );
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(filter.and(quiet));
    let _ = tracing_subscriber::registry()
        .with(layer)
        .with(http::execution_metrics_layer())
        .try_init();
}

impl From<Format> for commands::ToolFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Mcp => Self::Mcp,
            Format::Openai => Self::Openai,
            Format::Anthropic => Self::Anthropic,
        }
    }
}
