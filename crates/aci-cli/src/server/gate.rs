//! The gate every `tools/call` of one server process passes, whatever its
//! transport: how many calls run at once (per process and per principal),
//! and where the server is in its stop sequence.
//!
//! # Admission
//!
//! [`CallGate::admit`] never waits: a call over a limit is refused at once
//! ([`Refusal::Overloaded`]), so a burst cannot queue without bound in the
//! process. The per-principal counts hold only principals with calls in
//! flight (an entry goes when its count reaches zero), so they are bounded by
//! the process's limit, not by how many principals were ever seen. A stdio
//! server has no limits ([`GateLimits::UNBOUNDED`]).
//!
//! # Stopping
//!
//! A stop goes through three phases, in order, and never back:
//!
//! 1. **Draining**: the transport takes no new requests (stdio answers them
//!    with an error; HTTP takes no new connections and finishes the requests
//!    it already took); calls already admitted go on.
//! 2. **Abandoning**: calls still running are given up: each waiter on
//!    [`CallTicket::abandoned`] drops its `invoke` future, so the boundary's
//!    guard finalizes the record `ERROR / EXECUTION_ABANDONED`, and answers
//!    with that error result. A call admitted from now on is refused
//!    ([`Refusal::Abandoned`]).
//! 3. **Finished**: every call has ended and the boundary's finalizations
//!    were sent; the transport ends its sessions.
//!
//! "Abandon now" and "every call was answered" are events
//! ([`CallTicket::abandoned`], [`CallGate::idle`]): nothing polls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// Where the server is in its stop sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Serving: the transport takes requests.
    Accepting,
    /// Stopping: no new requests; admitted calls go on.
    Draining,
    /// Running calls are given up.
    Abandoning,
    /// Every call has ended; the transport closes.
    Finished,
}

/// How many calls may run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GateLimits {
    /// In the whole process.
    pub(crate) max_in_flight: Option<usize>,
    /// Of one principal.
    pub(crate) max_per_principal: Option<usize>,
}

impl GateLimits {
    /// No limit (the stdio server: one client, which waits for its replies).
    pub(crate) const UNBOUNDED: Self = Self {
        max_in_flight: None,
        max_per_principal: None,
    };
}

/// Why a call was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A limit is reached (`OVERLOADED`: transient, call again shortly).
    Overloaded,
    /// The server is giving up running calls (`EXECUTION_ABANDONED`).
    Abandoned,
}

/// The gate of one server process, shared by all its sessions and
/// connections. Cloning shares the gate.
#[derive(Debug, Clone)]
pub(crate) struct CallGate {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limits: GateLimits,
    counts: Mutex<Counts>,
    /// Whether no call is in flight; changed under `counts`' lock, only when
    /// it flips, so a busy server does not wake anyone per call.
    idle: watch::Sender<bool>,
    phase: watch::Sender<Phase>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_principal: HashMap<Arc<str>, usize>,
}

impl CallGate {
    /// A gate that admits calls up to `limits`.
    pub(crate) fn new(limits: GateLimits) -> Self {
        Self {
            inner: Arc::new(Inner {
                limits,
                counts: Mutex::new(Counts::default()),
                idle: watch::Sender::new(true),
                phase: watch::Sender::new(Phase::Accepting),
            }),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.inner
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits one call of `principal` (none: an anonymous call, counted only
    /// against the process's limit). The ticket counts the call in flight
    /// until it is dropped.
    ///
    /// # Errors
    /// [`Refusal::Overloaded`] over a limit; [`Refusal::Abandoned`] once the
    /// gate is [`Phase::Abandoning`] or later.
    pub(crate) fn admit(&self, principal: Option<&str>) -> Result<CallTicket, Refusal> {
        let limits = self.inner.limits;
        let ticket = {
            let mut counts = self.counts();
            if limits.max_in_flight.is_some_and(|max| counts.total >= max) {
                return Err(Refusal::Overloaded);
            }
            let principal = match principal {
                Some(name) => {
                    let (key, count) = match counts.by_principal.get_key_value(name) {
                        Some((key, count)) => (Arc::clone(key), *count),
                        None => (Arc::from(name), 0),
                    };
                    if limits.max_per_principal.is_some_and(|max| count >= max) {
                        return Err(Refusal::Overloaded);
                    }
                    counts.by_principal.insert(Arc::clone(&key), count + 1);
                    Some(key)
                }
                None => None,
            };
            if counts.total == 0 {
                self.inner.idle.send_replace(false);
            }
            counts.total += 1;
            CallTicket {
                gate: self.clone(),
                principal,
            }
        };
        // Count first, then look at the phase: a stop that lands in between
        // sees the call in flight and waits for it, and no call starts once
        // the stop has seen the gate idle while abandoning.
        if self.phase() >= Phase::Abandoning {
            return Err(Refusal::Abandoned);
        }
        Ok(ticket)
    }

    /// Admits one call only while the gate is [`Phase::Accepting`]: for a
    /// transport that admits a call when it reads it and takes nothing once
    /// the server stops (stdio).
    ///
    /// # Errors
    /// As [`admit`](Self::admit), and [`Refusal::Abandoned`] once the gate
    /// is draining.
    pub(crate) fn admit_while_accepting(
        &self,
        principal: Option<&str>,
    ) -> Result<CallTicket, Refusal> {
        let ticket = self.admit(principal)?;
        // Counted before this look, as in `admit`.
        if self.accepting() {
            Ok(ticket)
        } else {
            Err(Refusal::Abandoned)
        }
    }

    /// The current phase.
    pub(crate) fn phase(&self) -> Phase {
        *self.inner.phase.borrow()
    }

    /// Whether the transport takes requests.
    pub(crate) fn accepting(&self) -> bool {
        self.phase() == Phase::Accepting
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

    /// Calls in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.counts().total
    }

    /// Resolves once no call is in flight.
    pub(crate) async fn idle(&self) {
        let mut receiver = self.inner.idle.subscribe();
        let _ = receiver.wait_for(|idle| *idle).await;
    }

    /// Calls in flight now, and principals with calls in flight.
    #[cfg(test)]
    fn counted(&self) -> (usize, usize) {
        let counts = self.counts();
        (counts.total, counts.by_principal.len())
    }
}

/// One admitted call; dropping it ends the call for the gate.
#[derive(Debug)]
pub(crate) struct CallTicket {
    gate: CallGate,
    principal: Option<Arc<str>>,
}

impl CallTicket {
    /// Resolves when the server gives up running calls.
    pub(crate) async fn abandoned(&self) {
        self.gate.reached(Phase::Abandoning).await;
    }
}

impl Drop for CallTicket {
    fn drop(&mut self) {
        let mut counts = self.gate.counts();
        counts.total = counts.total.saturating_sub(1);
        if let Some(principal) = &self.principal
            && let Some(count) = counts.by_principal.get_mut(principal)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.by_principal.remove(principal);
            }
        }
        if counts.total == 0 {
            self.gate.inner.idle.send_replace(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    use super::*;

    fn limits(max_in_flight: usize, max_per_principal: Option<usize>) -> GateLimits {
        GateLimits {
            max_in_flight: Some(max_in_flight),
            max_per_principal,
        }
    }

    /// Whether `future` is still pending after every wake-up it had so far:
    /// an event that has not happened, without waiting for time to pass.
    fn pending<F: Future>(future: std::pin::Pin<&mut F>) -> bool {
        future
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    }

    #[test]
    fn the_process_limit_refuses_at_once_and_frees_on_drop() {
        let gate = CallGate::new(limits(2, None));
        let a = gate.admit(Some("a")).unwrap();
        let b = gate.admit(None).unwrap();
        assert_eq!(gate.admit(Some("c")).unwrap_err(), Refusal::Overloaded);
        assert_eq!(gate.counted(), (2, 1), "a refused call is not counted");
        drop(a);
        let c = gate.admit(Some("c")).unwrap();
        assert_eq!(gate.counted(), (2, 1));
        drop((b, c));
        assert_eq!(gate.counted(), (0, 0));
    }

    #[test]
    fn the_principal_limit_is_per_principal_and_its_map_shrinks() {
        let gate = CallGate::new(limits(10, Some(2)));
        let tickets: Vec<_> = (0..2).map(|_| gate.admit(Some("a")).unwrap()).collect();
        assert_eq!(gate.admit(Some("a")).unwrap_err(), Refusal::Overloaded);
        let other = gate.admit(Some("b")).unwrap();
        let anonymous = gate.admit(None).unwrap();
        assert_eq!(gate.counted(), (4, 2));
        drop((tickets, other, anonymous));
        assert_eq!(gate.counted(), (0, 0));
        for i in 0..1000 {
            drop(gate.admit(Some(&format!("p{i}"))).unwrap());
        }
        assert_eq!(gate.counted(), (0, 0));
    }

    #[test]
    fn an_unbounded_gate_admits_any_number() {
        let gate = CallGate::new(GateLimits::UNBOUNDED);
        let tickets: Vec<_> = (0..10_000)
            .map(|_| gate.admit(Some("a")).unwrap())
            .collect();
        assert_eq!(gate.in_flight(), 10_000);
        drop(tickets);
        assert_eq!(gate.counted(), (0, 0));
    }

    #[test]
    fn draining_stops_only_the_transports_that_admit_while_accepting() {
        let gate = CallGate::new(GateLimits::UNBOUNDED);
        let running = gate.admit_while_accepting(None).unwrap();
        gate.advance(Phase::Draining);
        // Never back.
        gate.advance(Phase::Accepting);
        assert_eq!(gate.phase(), Phase::Draining);
        assert!(!gate.accepting());
        // stdio reads no new call; a request HTTP took before the stop still
        // runs.
        assert_eq!(
            gate.admit_while_accepting(None).unwrap_err(),
            Refusal::Abandoned
        );
        let taken = gate.admit(None).unwrap();
        assert_eq!(gate.in_flight(), 2, "a refused call is not counted");
        gate.advance(Phase::Abandoning);
        assert_eq!(gate.admit(None).unwrap_err(), Refusal::Abandoned);
        assert_eq!(gate.in_flight(), 2);
        drop((running, taken));
        assert_eq!(gate.in_flight(), 0);
    }

    #[test]
    fn idle_is_an_event_of_the_last_call_ending() {
        let gate = CallGate::new(GateLimits::UNBOUNDED);
        // Idle from the start.
        assert!(!pending(pin!(gate.idle())));
        let first = gate.admit(None).unwrap();
        let second = gate.admit(None).unwrap();
        let mut idle = pin!(gate.idle());
        assert!(pending(idle.as_mut()));
        drop(first);
        assert!(pending(idle.as_mut()), "one call still runs");
        drop(second);
        assert!(!pending(idle.as_mut()));
    }

    #[test]
    fn abandonment_is_an_event_of_the_phase() {
        let gate = CallGate::new(GateLimits::UNBOUNDED);
        let ticket = gate.admit(None).unwrap();
        let mut abandoned = pin!(ticket.abandoned());
        assert!(pending(abandoned.as_mut()));
        gate.advance(Phase::Draining);
        assert!(pending(abandoned.as_mut()), "draining lets calls run");
        let mut finished = pin!(gate.reached(Phase::Finished));
        assert!(pending(finished.as_mut()));
        gate.advance(Phase::Abandoning);
        assert!(!pending(abandoned.as_mut()));
        assert!(pending(finished.as_mut()));
        gate.advance(Phase::Finished);
        assert!(!pending(finished.as_mut()));
    }

    #[test]
    fn a_call_is_counted_before_the_phase_is_read() {
        // The order that makes a racing stop safe: a stop that advances
        // between the count and the look sees the call in flight (and waits
        // for it), and a call counted after the stop saw the gate idle while
        // abandoning is refused. Seen here by the idle flag flipping.
        let gate = CallGate::new(GateLimits::UNBOUNDED);
        gate.advance(Phase::Abandoning);
        let mut idle = gate.inner.idle.subscribe();
        idle.mark_unchanged();
        assert_eq!(gate.admit(None).unwrap_err(), Refusal::Abandoned);
        assert!(
            idle.has_changed().unwrap(),
            "the refused call was counted first"
        );
        assert!(*idle.borrow_and_update());
        assert_eq!(gate.in_flight(), 0);
    }
}
