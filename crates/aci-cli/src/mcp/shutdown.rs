//! Stopping the server: stop requests (signals) and the gate every call passes.
//!
//! A stop goes through three phases, in order, and never back:
//!
//! 1. **Draining**: no new call is admitted (the transport answers new
//!    requests with an error), calls already running go on.
//! 2. **Abandoning**: calls still running when the drain time is over (or at a
//!    second stop request) are given up: each handler drops its `invoke`
//!    future, so the boundary's guard finalizes the record
//!    `ERROR / EXECUTION_ABANDONED`, and answers the client with that error
//!    result.
//! 3. **Finished**: every handler has answered and the boundary's
//!    finalizations were sent ([`ToolBoundary::drain_abandoned`]); the
//!    transport ends the session.
//!
//! [`ToolBoundary::drain_abandoned`]: invocation_core::ToolBoundary::drain_abandoned

use std::sync::Arc;

use tokio::sync::watch;

/// Where the server is in its stop sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Serving: calls are admitted.
    Accepting,
    /// Stopping: no new call; running calls go on.
    Draining,
    /// Running calls are given up.
    Abandoning,
    /// Every call has ended; the session closes.
    Finished,
}

/// The gate every call of one server process passes, shared by all its MCP
/// sessions (one on stdio, many over HTTP).
///
/// Cloning shares the gate.
#[derive(Debug, Clone)]
pub(crate) struct CallGate {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    phase: watch::Sender<Phase>,
    in_flight: watch::Sender<usize>,
    input_closed: watch::Sender<bool>,
}

impl Default for CallGate {
    fn default() -> Self {
        Self::new()
    }
}

impl CallGate {
    /// A gate that admits calls.
    pub(crate) fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                phase: watch::Sender::new(Phase::Accepting),
                in_flight: watch::Sender::new(0),
                input_closed: watch::Sender::new(false),
            }),
        }
    }

    /// The current phase.
    pub(crate) fn phase(&self) -> Phase {
        *self.inner.phase.borrow()
    }

    /// Whether new calls are admitted.
    pub(crate) fn accepting(&self) -> bool {
        self.phase() == Phase::Accepting
    }

    /// Admits one call: `None` once the server is stopping. The ticket counts
    /// the call as running until it is dropped.
    pub(crate) fn admit(&self) -> Option<CallTicket> {
        // Count first, then check: a stop that lands in between sees the call
        // as running and waits for it.
        self.inner.in_flight.send_modify(|n| *n += 1);
        let ticket = CallTicket { gate: self.clone() };
        self.accepting().then_some(ticket)
    }

    /// Calls running now.
    pub(crate) fn in_flight(&self) -> usize {
        *self.inner.in_flight.borrow()
    }

    /// Moves to `phase` (never back).
    pub(crate) fn advance(&self, phase: Phase) {
        self.inner.phase.send_if_modified(|current| {
            let later = phase > *current;
            if later {
                *current = phase;
            }
            later
        });
    }

    /// Resolves once the gate is at `phase` or later.
    pub(crate) async fn reached(&self, phase: Phase) {
        let mut receiver = self.inner.phase.subscribe();
        // The sender lives in `self`, so the channel never closes here.
        let _ = receiver.wait_for(|current| *current >= phase).await;
    }

    /// Resolves once no call is running.
    pub(crate) async fn idle(&self) {
        let mut receiver = self.inner.in_flight.subscribe();
        let _ = receiver.wait_for(|n| *n == 0).await;
    }

    /// Records that the client closed its input (stdin end of file).
    pub(crate) fn close_input(&self) {
        self.inner.input_closed.send_replace(true);
    }

    /// Resolves once the client closed its input.
    pub(crate) async fn input_closed(&self) {
        let mut receiver = self.inner.input_closed.subscribe();
        let _ = receiver.wait_for(|closed| *closed).await;
    }
}

/// One admitted call; dropping it ends the call for the gate.
#[derive(Debug)]
pub(crate) struct CallTicket {
    gate: CallGate,
}

impl CallTicket {
    /// Resolves when the server gives up running calls.
    pub(crate) async fn abandoned(&self) {
        self.gate.reached(Phase::Abandoning).await;
    }
}

impl Drop for CallTicket {
    fn drop(&mut self) {
        self.gate
            .inner
            .in_flight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Stop requests: Ctrl-C (SIGINT) and, on Unix, SIGTERM.
///
/// The listeners are installed when this is made, before the session reads
/// anything, so a signal that arrives at any point of the session counts.
/// Each signal is one request: the first starts the drain, the second
/// abandons what still runs.
pub(crate) struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    #[cfg(unix)]
    pub(crate) fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    #[cfg(not(unix))]
    pub(crate) fn listen() -> Self {
        Self {}
    }

    /// Resolves at the next stop request; never when no listener could be
    /// installed.
    #[cfg(unix)]
    pub(crate) async fn requested(&mut self) {
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
    pub(crate) async fn requested(&mut self) {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_stopping_gate_admits_nothing_and_waits_for_running_calls() {
        let gate = CallGate::new();
        let ticket = gate.admit().unwrap();
        assert_eq!(gate.in_flight(), 1);
        gate.advance(Phase::Draining);
        assert!(gate.admit().is_none());
        assert_eq!(gate.in_flight(), 1, "a refused call is not counted");
        // Never back.
        gate.advance(Phase::Accepting);
        assert_eq!(gate.phase(), Phase::Draining);

        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.idle().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(ticket);
        waiter.await.unwrap();
        assert_eq!(gate.in_flight(), 0);
    }

    #[tokio::test]
    async fn tickets_learn_when_calls_are_abandoned() {
        let gate = CallGate::new();
        let ticket = gate.admit().unwrap();
        let abandoned = tokio::spawn(async move {
            ticket.abandoned().await;
        });
        gate.advance(Phase::Draining);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!abandoned.is_finished());
        gate.advance(Phase::Abandoning);
        abandoned.await.unwrap();
        gate.idle().await;
    }
}
