//! `aci serve --http ADDR`: the MCP service ([`crate::server`]) over
//! Streamable HTTP, for many agents and many replicas.
//!
//! - [`router`]: the axum router, its tower layers (authentication, body
//!   limit, the URL's run) and the facts the service reads off a request;
//! - [`auth`]: bearer tokens (static digests, JWTs against a JWKS);
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics` and the protected resource
//!   metadata, which need no token;
//! - [`metrics`]: the Prometheus registry, fed by the service's answered
//!   calls and the execution-time tracing layer;
//! - [`workers`]: the serving threads and the handoff of accepted
//!   connections to them;
//! - [`connections`]: the cap on open connections, shedding, and each
//!   connection's header, idle and body deadlines;
//! - [`tls`]: HTTPS on the listener, the certificate re-read when it
//!   changes;
//! - [`config`]: `[auth]` and `[serve]`.
//!
//! Calls in flight are bounded per replica and per principal by the
//! server's gate; a call over a limit gets an `OVERLOADED` error result at
//! once. The run of a call comes from the request (`_meta`, the
//! `Aci-Run-Id` header, or the URL), never from the server, and the TCP
//! connection is the MCP session of a client that declares none.
//!
//! Stopping (SIGTERM or SIGINT) is the server's lifecycle: at the drain the
//! replica takes no new connections and finishes the requests it took;
//! then, or on a second signal, the rest are abandoned.

mod auth;
pub(crate) mod config;
mod connections;
#[cfg(feature = "fuzzing")]
pub(crate) mod in_memory;
mod login;
mod metrics;
mod ops;
mod router;
mod tls;
mod workers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use self::auth::Authenticator;
use self::config::TlsFiles;
use self::connections::{ConnectionLimits, ConnectionTable};
use self::metrics::Metrics;
pub(crate) use self::metrics::execution_metrics_layer;
use self::router::HttpFacts;
use self::tls::TlsSettings;
use self::workers::Workers;
use crate::app::App;
use crate::config::Config;
use crate::error::CliError;
use crate::server::{GateLimits, ServeOptions, Server, ServiceSetup, Transport};

/// The default limit of calls in flight per replica.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// How long the workers may take to close their connections once the calls
/// were abandoned, and to end at exit.
const WORKERS_GRACE: Duration = Duration::from_secs(5);

/// How the command was asked to serve.
#[derive(Debug, Clone)]
pub(crate) struct HttpOptions {
    /// The address to listen on, e.g. `127.0.0.1:8080`.
    pub(crate) addr: String,
    /// Serve without authentication (local development only).
    pub(crate) insecure_no_auth: bool,
    /// Whether the store is shared by replicas (not `memory`).
    pub(crate) shared_store: bool,
}

/// Serves until SIGTERM/SIGINT, then drains.
pub(crate) async fn serve(app: App, config: &Config, options: HttpOptions) -> Result<(), CliError> {
    let Replica {
        server,
        router,
        cancel,
        table,
        tls,
        worker_count,
    } = Replica::start(app, config, &options, connections::raise_open_files_limit).await?;
    let listener = TcpListener::bind(&options.addr)
        .await
        .map_err(|e| CliError::config(format!("cannot listen on {}: {e}", options.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::config(format!("cannot listen on {}: {e}", options.addr)))?;
    match &tls {
        Some(settings) => {
            eprintln!(
                "aci: serving MCP over HTTPS at https://{local}/mcp{}",
                if settings.requires_client_certificates() {
                    " (client certificates required)"
                } else {
                    ""
                }
            );
            tokio::spawn(Arc::clone(settings).watch());
        }
        None => eprintln!("aci: serving MCP over HTTP at http://{local}/mcp"),
    }
    let workers = Workers::start(worker_count, &router, local, table, tls)
        .map_err(|e| CliError::config(format!("cannot start the HTTP workers: {e}")))?;
    let transport = HttpTransport {
        listener: Some(listener),
        workers,
        cancel,
    };
    server.run(transport).await
}

/// What `aci serve --http` serves, before it listens: the started server,
/// its router, the connection table and the settings of its workers.
struct Replica {
    server: Server,
    router: axum::Router,
    cancel: CancellationToken,
    table: Arc<ConnectionTable>,
    tls: Option<Arc<TlsSettings>>,
    worker_count: usize,
}

impl Replica {
    /// Checks the settings (`open_files` reads the process's limit on open
    /// files, once `[serve]`'s other settings passed), builds the metrics,
    /// the connection table and the router, and starts the server.
    async fn start(
        app: App,
        config: &Config,
        options: &HttpOptions,
        open_files: impl FnOnce() -> Option<u64>,
    ) -> Result<Self, CliError> {
        // Settings are checked before anything is said at start: an error is
        // the one line on stderr.
        let (limits, worker_count) = serve_settings(config)?;
        let connection_limits = connection_limits(config, open_files())?;
        let tls = match tls_files(config)? {
            Some(files) => Some(
                TlsSettings::load(files).map_err(|e| CliError::config(format!("serve: {e}")))?,
            ),
            None => None,
        };
        let authenticator = authenticator(config, options)?;
        if !options.shared_store {
            eprintln!(
                "aci: the memory store keeps records in this process only: run one replica (use a Redis store for several)"
            );
        }
        let metrics = Metrics::new().map_err(|e| CliError::config(format!("metrics: {e}")))?;
        if let Some(archive) = &app.archive {
            metrics
                .register_archive(archive.metrics())
                .map_err(|e| CliError::config(format!("metrics: {e}")))?;
        }
        if config.knowledge.embeddings.is_some() {
            metrics
                .register_knowledge(&app.knowledge)
                .map_err(|e| CliError::config(format!("metrics: {e}")))?;
        }
        let table = ConnectionTable::new(connection_limits)
            .map_err(|e| CliError::config(format!("metrics: {e}")))?;
        metrics
            .register_connections(&table)
            .map_err(|e| CliError::config(format!("metrics: {e}")))?;
        let metrics = Arc::new(metrics);
        let serve_options = ServeOptions::new(&config.serve, &app);
        let setup = ServiceSetup {
            server_run: None,
            facts: Arc::new(HttpFacts),
            observer: Some(Arc::clone(&metrics) as _),
        };
        // The review pages read a run the store no longer holds from the
        // archive: its connection is opened now (and again when it fails).
        let archive = crate::archive::ArchiveReader::of(config).map(Arc::new);
        if let Some(reader) = &archive {
            reader.connect_now().await;
        }
        let server = Server::start(app, serve_options, limits, setup).await?;
        let (router, cancel) = router::routes(&server, config, authenticator, metrics, archive);
        Ok(Self {
            server,
            router,
            cancel,
            table,
            tls,
            worker_count,
        })
    }
}

/// The gate's limits and the number of workers, from `[serve]`.
fn serve_settings(config: &Config) -> Result<(GateLimits, usize), CliError> {
    let limits = GateLimits {
        max_in_flight: Some(config.serve.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT)),
        max_per_principal: config.serve.max_in_flight_per_principal,
    };
    let workers = match config.serve.workers {
        Some(0) => return Err(CliError::config("serve: workers must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    if limits.max_in_flight == Some(0) || limits.max_per_principal == Some(0) {
        return Err(CliError::config(
            "serve: max_in_flight limits must be at least 1",
        ));
    }
    Ok((limits, workers))
}

/// Checks `[serve]` as `aci serve --http` does at start, with `open_files`
/// the process's limit on open files (the TLS files are not read).
#[cfg(feature = "fuzzing")]
pub(crate) fn check_serve_section(
    config: &Config,
    open_files: Option<u64>,
) -> Result<(), CliError> {
    serve_settings(config)?;
    connection_limits(config, open_files)?;
    tls_files(config)?;
    Ok(())
}

/// The limits of `[serve]` on connections, with `open_files` the process's
/// limit on open files (`None`: unlimited or unknown).
fn connection_limits(
    config: &Config,
    open_files: Option<u64>,
) -> Result<ConnectionLimits, CliError> {
    let serve = &config.serve;
    let available = open_files.map(|limit| {
        usize::try_from(limit.saturating_sub(connections::RESERVED_DESCRIPTORS))
            .unwrap_or(usize::MAX)
    });
    let max_connections = match (serve.max_connections, available) {
        (Some(0), _) => {
            return Err(CliError::config(
                "serve: max_connections must be at least 1",
            ));
        }
        (Some(n), Some(available)) if n > available => {
            return Err(CliError::config(format!(
                "serve: max_connections = {n} leaves fewer than {} of the {} file descriptors this process may open for its stores, databases, logs and runbooks (at most {available})",
                connections::RESERVED_DESCRIPTORS,
                open_files.unwrap_or_default(),
            )));
        }
        (Some(n), _) => n,
        (None, Some(0)) => {
            return Err(CliError::config(format!(
                "serve: the limit on open files ({}) leaves no file descriptor for connections: raise it (ulimit -n) above {}",
                open_files.unwrap_or_default(),
                connections::RESERVED_DESCRIPTORS,
            )));
        }
        (None, available) => available.map_or(connections::DEFAULT_MAX_CONNECTIONS, |a| {
            a.min(connections::DEFAULT_MAX_CONNECTIONS)
        }),
    };
    let seconds = |value: Option<u64>, default: Duration, key: &str| match value {
        Some(0) => Err(CliError::config(format!("serve: {key} must be at least 1"))),
        Some(secs) => Ok(Duration::from_secs(secs)),
        None => Ok(default),
    };
    let max_header_count = serve
        .max_header_count
        .unwrap_or(connections::DEFAULT_MAX_HEADER_COUNT);
    if max_header_count == 0 {
        return Err(CliError::config(
            "serve: max_header_count must be at least 1",
        ));
    }
    let max_header_bytes = serve
        .max_header_bytes
        .unwrap_or(connections::DEFAULT_MAX_HEADER_BYTES);
    if max_header_bytes < connections::MIN_MAX_HEADER_BYTES {
        return Err(CliError::config(format!(
            "serve: max_header_bytes must be at least {}",
            connections::MIN_MAX_HEADER_BYTES
        )));
    }
    Ok(ConnectionLimits {
        header_timeout: seconds(
            serve.header_timeout_secs,
            connections::DEFAULT_HEADER_TIMEOUT,
            "header_timeout_secs",
        )?,
        idle_timeout: seconds(
            serve.idle_timeout_secs,
            connections::DEFAULT_IDLE_TIMEOUT,
            "idle_timeout_secs",
        )?,
        body_timeout: seconds(
            serve.body_timeout_secs,
            connections::DEFAULT_BODY_TIMEOUT,
            "body_timeout_secs",
        )?,
        max_connections,
        max_header_count,
        max_header_bytes,
    })
}

/// The TLS files of `[serve]`: none, or a certificate with its key (and
/// perhaps client CAs).
fn tls_files(config: &Config) -> Result<Option<TlsFiles>, CliError> {
    let serve = &config.serve;
    match (
        &serve.tls_cert_file,
        &serve.tls_key_file,
        &serve.tls_client_ca_file,
    ) {
        (None, None, None) => Ok(None),
        (Some(cert), Some(key), client_ca) => Ok(Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: client_ca.clone(),
        })),
        (None, None, Some(_)) => Err(CliError::config(
            "serve: tls_client_ca_file needs tls_cert_file and tls_key_file (client certificates are asked for over TLS only)",
        )),
        _ => Err(CliError::config(
            "serve: tls_cert_file and tls_key_file go together",
        )),
    }
}

/// The credentials of `[auth]`, or none with `--insecure-no-auth` (said on
/// stderr); either one of them or an error.
fn authenticator(
    config: &Config,
    options: &HttpOptions,
) -> Result<Option<Authenticator>, CliError> {
    let authenticator = Authenticator::from_config(&config.auth)?;
    match (&authenticator, options.insecure_no_auth) {
        (None, false) => Err(CliError::config(
            "--http needs [auth.tokens.NAME] or [auth.jwt] in the config file (or --insecure-no-auth for local development)",
        )),
        (None, true) => {
            eprintln!(
                "aci: WARNING: serving without authentication (--insecure-no-auth): anyone who reaches the port may call the tools"
            );
            Ok(None)
        }
        (Some(_), true) => Err(CliError::config(
            "--insecure-no-auth with [auth] configured: drop one of them",
        )),
        (Some(_), false) => Ok(authenticator),
    }
}

/// The HTTP transport as the lifecycle sees it: the acceptor and the worker
/// threads serving the router.
struct HttpTransport {
    /// `None` once the replica stopped taking connections.
    listener: Option<TcpListener>,
    workers: Workers,
    /// Cancels rmcp's requests still open after the calls were abandoned.
    cancel: CancellationToken,
}

impl Transport for HttpTransport {
    /// Accepts connections for ever, handing each to a worker.
    async fn ended(&mut self) {
        /// At most one warning about descriptors per this time.
        const WARN_EVERY: Duration = Duration::from_secs(10);
        let Some(listener) = &self.listener else {
            return std::future::pending().await;
        };
        let mut descriptors_warned = Instant::now()
            .checked_sub(WARN_EVERY)
            .unwrap_or_else(Instant::now);
        loop {
            match listener.accept().await {
                Ok((stream, _)) => self.workers.dispatch(stream).await,
                // A connection that failed before it was accepted: the next one.
                Err(e) if is_connection_error(&e) => {}
                // Out of file descriptors (something else holds them):
                // shed idle connections and retry after a short pause
                // rather than spin.
                Err(e) if is_out_of_descriptors(&e) => {
                    self.workers.relieve();
                    if descriptors_warned.elapsed() >= WARN_EVERY {
                        tracing::error!(error = %e, "accepting a connection failed: out of file descriptors; shedding idle connections");
                        descriptors_warned = Instant::now();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// No new connections; every worker finishes the requests it took and
    /// closes its connections (axum's graceful shutdown).
    fn stop_taking(&mut self, drain: Duration) {
        self.listener = None;
        eprintln!(
            "aci: stopping: no new connections; calls in flight may finish for up to {}s",
            drain.as_secs()
        );
        self.workers.stop();
    }

    async fn settled(&mut self) {
        if let Err(e) = self.workers.finished().await {
            eprintln!("aci: the HTTP server failed: {e}");
        }
    }

    async fn abandon(&mut self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(WORKERS_GRACE, self.workers.finished()).await;
    }

    /// Ends the worker threads, whose runtimes ran the finalizations of
    /// abandoned calls until now.
    async fn close(self) -> Result<(), CliError> {
        self.workers.exit(WORKERS_GRACE).await;
        Ok(())
    }
}

/// `EMFILE` or `ENFILE`.
fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    e.raw_os_error().is_some_and(|code| {
        code == rustix::io::Errno::MFILE.raw_os_error()
            || code == rustix::io::Errno::NFILE.raw_os_error()
    })
}

fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
