//! The one lifecycle of `aci serve`, whatever the transport: start, serve,
//! drain, abandon, settle, exit.
//!
//! 1. **Start** ([`Server::start`]): stop requests are listened for from
//!    here on; the knowledge directory is watched; with a server run (stdio),
//!    that run's records left `PROJECTING` by a killed process, older than
//!    the recovery age, are finalized `ERROR / EXECUTION_ABANDONED`.
//! 2. **Serve** ([`Server::run`]) until the transport ends by itself (the
//!    client closed stdin) or a stop is requested (SIGINT, SIGTERM).
//! 3. **Drain**: the gate goes [`Phase::Draining`] and the transport stops
//!    taking requests; calls in flight may finish for up to `[serve]
//!    drain_secs` (default: the longest tool timeout). A second stop request
//!    cuts it short.
//! 4. **Abandon**: the gate goes [`Phase::Abandoning`]: calls still running
//!    answer `EXECUTION_ABANDONED` at once and their records are finalized
//!    so on tasks of their own; the transport gives up what it still holds.
//! 5. **Settle**: those finalizations and the kills of abandoned MySQL
//!    statements are awaited, bounded (the store may be unreachable; `aci
//!    recover` finishes what is left); another stop request stops waiting.
//!    With a memory store and `[archive]`, its archiver (started at start)
//!    then archives what the outbox still holds, for up to the drain time,
//!    and says on stderr how many records it could not.
//! 6. **Exit**: the gate goes [`Phase::Finished`] and the transport closes.
//!
//! A [`Transport`] supplies only its own part of each step.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::RunId;

use super::gate::{CallGate, GateLimits, Phase};
use super::service::{McpService, ServiceSetup};
use crate::app::App;
use crate::config::ServeSection;
use crate::error::CliError;
use crate::knowledge_watch::{self, KnowledgeWatch};

/// How long handlers may take to answer once their calls are abandoned
/// (they give up at once; this bounds a handler stuck outside an await).
const ABANDON_GRACE: Duration = Duration::from_secs(5);

/// How long, at least, the store may take to accept the finalizations of
/// abandoned calls (they keep retrying while it is unreachable). The bound is
/// the longer of this and the longest tool timeout.
const FINALIZE_GRACE: Duration = Duration::from_secs(30);

/// What a transport does at each step of the lifecycle.
pub(crate) trait Transport {
    /// Serves; resolves when the transport ended by itself (the client went
    /// away). Dropped when a stop is requested first.
    fn ended(&mut self) -> impl Future<Output = ()>;

    /// Stops taking requests (the gate is draining already).
    fn stop_taking(&mut self, drain: Duration);

    /// Resolves once the transport has let go of every request it took.
    fn settled(&mut self) -> impl Future<Output = ()>;

    /// Gives up what it still holds, once running calls were abandoned.
    fn abandon(&mut self) -> impl Future<Output = ()>;

    /// Closes, after every call ended and was finalized: how the command
    /// ends.
    fn close(self) -> impl Future<Output = Result<(), CliError>>;
}

/// How `aci serve` starts and stops (from `[serve]`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServeOptions {
    /// At a stop, how long running calls may still finish.
    pub(crate) drain: Duration,
    /// At start, the age past which the server run's PROJECTING records are
    /// recovered.
    pub(crate) recovery_age: Duration,
}

impl ServeOptions {
    /// The options of `section`, with `app`'s tool timeouts as defaults.
    pub(crate) fn new(section: &ServeSection, app: &App) -> Self {
        Self {
            drain: section
                .drain_secs
                .map_or_else(|| app.boundary.longest_timeout(), Duration::from_secs),
            recovery_age: section.recover_older_than_secs.map_or_else(
                || crate::commands::recovery_threshold(app),
                Duration::from_secs,
            ),
        }
    }
}

/// One `aci serve` process: its service, its gate and its lifecycle.
pub(crate) struct Server {
    app: Arc<App>,
    gate: CallGate,
    service: McpService,
    options: ServeOptions,
    signals: Signals,
    _knowledge_watch: Option<KnowledgeWatch>,
}

impl Server {
    /// Starts: listens for stop requests, watches the knowledge directory,
    /// recovers the server run (if any), and makes the service.
    pub(crate) async fn start(
        app: App,
        options: ServeOptions,
        limits: GateLimits,
        setup: ServiceSetup,
    ) -> Result<Self, CliError> {
        let signals = Signals::listen();
        let knowledge_watch = knowledge_watch::watch(&app);
        if let Some(archive) = &app.archive {
            archive.start();
        }
        let app = Arc::new(app);
        if let Some(run) = &setup.server_run {
            recover_run(&app, run, options.recovery_age).await;
        }
        let gate = CallGate::new(limits);
        let service = McpService::new(Arc::clone(&app), gate.clone(), setup)?;
        Ok(Self {
            app,
            gate,
            service,
            options,
            signals,
            _knowledge_watch: knowledge_watch,
        })
    }

    /// The app the server serves.
    pub(crate) fn app(&self) -> &App {
        &self.app
    }

    /// The service, for the transport to serve.
    pub(crate) fn service(&self) -> &McpService {
        &self.service
    }

    /// The gate, for a transport that admits calls itself or reads its
    /// phase.
    pub(crate) fn gate(&self) -> &CallGate {
        &self.gate
    }

    /// Serves through `transport` until it ends or a stop is requested, then
    /// drains, abandons, settles and closes (see the module docs).
    pub(crate) async fn run<T: Transport>(mut self, mut transport: T) -> Result<(), CliError> {
        tokio::select! {
            () = transport.ended() => {}
            () = self.signals.requested() => tracing::info!("stop requested"),
        }
        self.stop(&mut transport).await;
        transport.close().await
    }

    /// Steps 3 to 6 of the module docs.
    async fn stop<T: Transport>(&mut self, transport: &mut T) {
        let gate = &self.gate;
        let drain = self.options.drain;
        gate.advance(Phase::Draining);
        transport.stop_taking(drain);
        let running = gate.in_flight();
        if running > 0 {
            tracing::info!(
                running,
                drain_secs = drain.as_secs(),
                "draining running calls"
            );
        }
        let answered = async {
            gate.idle().await;
            transport.settled().await;
        };
        let cut_short = tokio::select! {
            biased;
            () = answered => None,
            () = tokio::time::sleep(drain) => Some("drain time over"),
            () = self.signals.requested() => Some("second stop request"),
        };
        if let Some(why) = cut_short {
            eprintln!(
                "aci: {why}; abandoning the calls still in flight ({})",
                gate.in_flight()
            );
        }
        gate.advance(Phase::Abandoning);
        // Each handler drops its boundary future and answers at once; the
        // finalization is handed to the boundary, which `settle` waits for.
        if tokio::time::timeout(ABANDON_GRACE, gate.idle())
            .await
            .is_err()
        {
            tracing::warn!(
                running = gate.in_flight(),
                "calls did not answer after they were abandoned"
            );
        }
        if cut_short.is_some() {
            transport.abandon().await;
        }
        settle(&self.app, &mut self.signals).await;
        archive_rest(&self.app, self.options.drain, &mut self.signals).await;
        gate.advance(Phase::Finished);
    }
}

/// Waits for the finalizations of abandoned calls and the tools' cleanup of
/// their work (the kills of their MySQL statements): both run on tasks of
/// their own, which a process exit would cancel, and the boundary's
/// `drain_abandoned` waits for both. Bounded (the store may be unreachable);
/// a stop request stops waiting.
async fn settle(app: &App, signals: &mut Signals) {
    let boundary = &app.boundary;
    let bound = FINALIZE_GRACE.max(boundary.longest_timeout());
    let settle = tokio::time::timeout(bound, boundary.drain_abandoned());
    tokio::select! {
        settled = settle => {
            if settled.is_err() {
                eprintln!(
                    "aci: some abandoned calls could not be finalized in time ({} pending); `aci recover` finalizes them",
                    boundary.pending_settlements()
                );
            }
        }
        () = signals.requested() => {
            tracing::warn!("stop requested again; not waiting for finalizations");
        }
    }
}

/// With a memory store that archives: archives what its outbox still holds
/// (for up to the drain time; another stop request stops waiting), and says
/// what could not be.
async fn archive_rest(app: &App, bound: Duration, signals: &mut Signals) {
    let Some(archive) = &app.archive else {
        return;
    };
    tokio::select! {
        _ = archive.finish(bound) => {}
        () = signals.requested() => {
            eprintln!("aci: stop requested again; finalized records still in the outbox are not archived");
        }
    }
}

/// Finalizes the records of `run` that a killed process left PROJECTING
/// (older than `age`, so no live process still runs them). A failure is
/// logged, never fatal: the server still serves.
async fn recover_run(app: &App, run: &RunId, age: Duration) {
    match app.boundary.journal().recover_run(run, age).await {
        Ok(recovered) if recovered.is_empty() => {}
        Ok(recovered) => tracing::warn!(
            records = recovered.len(),
            older_than_secs = age.as_secs(),
            "recovered records of this run left PROJECTING: now ERROR / EXECUTION_ABANDONED"
        ),
        Err(error) => tracing::warn!(code = error.code(), "recovering this run failed"),
    }
}

/// Stop requests: Ctrl-C (SIGINT) and, on Unix, SIGTERM.
///
/// The listeners are installed when this is made, at start, so a signal that
/// arrives at any point of serving counts (and never kills the process
/// mid-call). Each signal is one request: the first starts the drain, the
/// second abandons what still runs, a third stops waiting for finalizations.
struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    #[cfg(unix)]
    fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    #[cfg(not(unix))]
    fn listen() -> Self {
        Self {}
    }

    /// Resolves at the next stop request; never when no listener could be
    /// installed.
    #[cfg(unix)]
    async fn requested(&mut self) {
        async fn next(signal: Option<&mut tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    if signal.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(self.interrupt.as_mut()) => {}
            () = next(self.terminate.as_mut()) => {}
        }
    }

    /// Resolves at the next stop request; never when no listener could be
    /// installed.
    #[cfg(not(unix))]
    async fn requested(&mut self) {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
