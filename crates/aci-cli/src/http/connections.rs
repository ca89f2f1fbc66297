//! The connections of `aci serve --http` under hostile clients: the cap on
//! open connections, shedding, and the deadlines of each connection.
//!
//! # Why
//!
//! A client that opens a connection and never finishes its request head
//! (slowloris) costs the replica a file descriptor for as long as it likes.
//! Enough of them exhaust the process's descriptors: `accept` fails with
//! `EMFILE`, the store's connections cannot be reopened, and every
//! authenticated caller times out with the attackers. Nothing in the request
//! path can help, because these clients never send a request.
//!
//! # How
//!
//! - **A cap below the descriptor limit.** The acceptor admits a connection
//!   into the [`ConnectionTable`] before handing it to a worker. At
//!   `max_connections` it sheds a batch of connections first: idle
//!   connections that never completed an authenticated request, oldest
//!   first, then idle authenticated ones, longest idle first. A connection
//!   with a request in flight is never shed. When nothing can be shed the new
//!   connection is closed at once (`refused`). `aci serve --http` raises its
//!   soft open-files limit to the hard one at start ([`raise_open_files_limit`]).
//! - **Deadlines per connection** ([`ConnectionState::verdict`]), kept by a
//!   watchdog beside hyper's connection future: the whole request head must
//!   arrive within `header_timeout` (from the accept for a new connection,
//!   from its first byte for a later request); a keep-alive connection may
//!   sit idle between requests for `idle_timeout`; a request body must be
//!   read whole within `body_timeout` of its head. A connection past a
//!   deadline is closed without an answer. The watchdog looks at the
//!   deadlines only after hyper's connection was polled: a worker whose
//!   CPU was taken past a deadline first reads what its client sent in
//!   time, so a deadline closes a connection for the client's slowness,
//!   never for the worker's (which would reset an unread request).
//! - **Bounded heads**: hyper answers 431 to a head with more than
//!   `max_header_count` headers or more than `max_header_bytes` bytes.
//!
//! # Invariants
//!
//! - Every open connection of the replica holds one [`Lease`]: the table's
//!   count is the connections holding a descriptor, whatever ends them.
//! - Open connections never exceed `max_connections` plus one shedding batch
//!   (victims still closing).
//! - The watchdog and the request path of a connection run on the same
//!   worker thread; only shedding (the acceptor) and the authenticated mark
//!   cross threads, through atomics and [`Notify`].

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use tokio::sync::Notify;

/// Default `header_timeout`.
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `idle_timeout`.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `body_timeout`.
pub(crate) const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `max_header_count`.
pub(crate) const DEFAULT_MAX_HEADER_COUNT: usize = 64;
/// Default `max_header_bytes`.
pub(crate) const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;
/// The smallest `max_header_bytes`: hyper's smallest read buffer.
pub(crate) const MIN_MAX_HEADER_BYTES: usize = 8 * 1024;
/// The default `max_connections` never exceeds this: an idle connection
/// costs a few KiB, a connection with a head half read up to
/// `max_header_bytes`.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Descriptors kept for everything but client connections: the listener,
/// the workers' reactors, store, database and archive connections, log
/// files and runbooks.
pub(crate) const RESERVED_DESCRIPTORS: u64 = 512;

/// The limits of `[serve]` on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) max_connections: usize,
    pub(crate) max_header_count: usize,
    pub(crate) max_header_bytes: usize,
}

impl ConnectionLimits {
    /// Connections shed at once when the cap is reached.
    fn shed_batch(&self) -> usize {
        (self.max_connections / 64).clamp(1, 256)
    }
}

/// Raises the soft limit on open files to the hard one; the limit now in
/// force (`None` when it cannot be read, or is unlimited).
pub(crate) fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if limit.current != limit.maximum && setrlimit(Resource::Nofile, raised).is_ok() {
        return limit.maximum;
    }
    limit.current
}

/// Why the replica closed a connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Its request head did not arrive whole in time.
    HeaderTimeout,
    /// It sat idle between requests too long.
    IdleTimeout,
    /// Its request body was not read whole in time.
    BodyTimeout,
    /// Shed to make room at the cap.
    Shed,
}

impl Closed {
    fn label(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::BodyTimeout => "body_timeout",
            Self::Shed => "shed",
        }
    }
}

/// The origin of [`now_ms`].
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Milliseconds on the process's monotonic clock.
pub(crate) fn now_ms() -> u64 {
    u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The instant of a [`now_ms`] value; `None` for [`NEVER`] (or beyond any
/// representable time).
pub(crate) fn deadline_instant(ms: u64) -> Option<tokio::time::Instant> {
    if ms == NEVER {
        return None;
    }
    EPOCH
        .checked_add(Duration::from_millis(ms))
        .map(tokio::time::Instant::from_std)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// No time recorded.
const NEVER: u64 = u64::MAX;

/// One open connection, as its watchdog, its requests and the acceptor see
/// it. Times are [`now_ms`] values.
#[derive(Debug)]
pub(crate) struct ConnectionState {
    id: u64,
    opened_ms: u64,
    /// Whether a request on it was authenticated (every request, without
    /// `[auth]`).
    authenticated: AtomicBool,
    /// Requests between their head and the end of their response.
    in_flight: AtomicUsize,
    /// Request bodies not read to their end yet.
    reading_bodies: AtomicUsize,
    /// When the latest request's head was complete.
    request_ms: AtomicU64,
    /// When the last response ended (the opening, before any).
    idle_since_ms: AtomicU64,
    /// When the first byte of the next request came ([`NEVER`]: none yet).
    head_started_ms: AtomicU64,
    /// Whether a request head was ever complete on it.
    served: AtomicBool,
    /// Marked by the acceptor to be shed.
    closing: AtomicBool,
    /// Wakes the watchdog to close it (shed).
    close: Notify,
    /// Wakes the watchdog when a deadline may have moved earlier.
    changed: Notify,
}

/// What the watchdog should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Look again at this time ([`now_ms`]), or when woken.
    WaitUntil(u64),
    /// Close the connection.
    Close(Closed),
}

impl ConnectionState {
    fn new(id: u64) -> Self {
        let now = now_ms();
        Self {
            id,
            opened_ms: now,
            authenticated: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            reading_bodies: AtomicUsize::new(0),
            request_ms: AtomicU64::new(now),
            idle_since_ms: AtomicU64::new(now),
            head_started_ms: AtomicU64::new(NEVER),
            served: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            close: Notify::new(),
            changed: Notify::new(),
        }
    }

    /// A request on this connection was authenticated.
    pub(crate) fn authenticated(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }

    /// Bytes were read from the socket: the first of a request head starts
    /// its header deadline.
    pub(crate) fn bytes_read(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_started_ms.load(Ordering::Relaxed) == NEVER
        {
            self.head_started_ms.store(now_ms(), Ordering::Relaxed);
            self.changed.notify_one();
        }
    }

    /// A request head is complete; the request is in flight until the
    /// returned guard is dropped with its response.
    fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.served.store(true, Ordering::Relaxed);
        self.request_ms.store(now_ms(), Ordering::Relaxed);
        self.head_started_ms.store(NEVER, Ordering::Relaxed);
        self.changed.notify_one();
        InFlight(Arc::clone(self))
    }

    /// The deadline now in force, or the reason to close.
    pub(crate) fn verdict(&self, limits: &ConnectionLimits, now: u64) -> Verdict {
        let due = |start: u64, timeout: Duration, closed: Closed| {
            let deadline = start.saturating_add(millis(timeout));
            if now >= deadline {
                Verdict::Close(closed)
            } else {
                Verdict::WaitUntil(deadline)
            }
        };
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            if self.reading_bodies.load(Ordering::Relaxed) > 0 {
                return due(
                    self.request_ms.load(Ordering::Relaxed),
                    limits.body_timeout,
                    Closed::BodyTimeout,
                );
            }
            // Answering: no deadline here (the tool's timeout and the run's
            // deadline bound the call); looked at again when it ends.
            return Verdict::WaitUntil(NEVER);
        }
        if !self.served.load(Ordering::Relaxed) {
            // A new connection's first head is due from the accept.
            return due(self.opened_ms, limits.header_timeout, Closed::HeaderTimeout);
        }
        match self.head_started_ms.load(Ordering::Relaxed) {
            NEVER => due(
                self.idle_since_ms.load(Ordering::Relaxed),
                limits.idle_timeout,
                Closed::IdleTimeout,
            ),
            started => due(started, limits.header_timeout, Closed::HeaderTimeout),
        }
    }

    /// Whether the connection waits on its client: no request is being
    /// answered, or a request body is still to come.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn waits_on_client(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
            || self.reading_bodies.load(Ordering::Relaxed) > 0
    }

    /// Resolves when the acceptor shed this connection.
    pub(crate) async fn shed(&self) {
        self.close.notified().await;
    }

    /// Resolves when a deadline may have moved.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The order of shedding: unauthenticated before authenticated, then the
    /// longest idle first (then the oldest).
    fn shed_key(&self) -> ShedKey {
        (
            self.authenticated.load(Ordering::Relaxed),
            self.idle_since_ms.load(Ordering::Relaxed),
            self.id,
        )
    }

    fn sheddable(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0 && !self.closing.load(Ordering::Relaxed)
    }
}

/// Where a connection stands in the order of shedding (smallest first):
/// authenticated, idle since, id.
type ShedKey = (bool, u64, u64);

/// A request in flight on its connection; its end when dropped (with the
/// response body, or with the request when the connection dies first).
#[derive(Debug)]
pub(crate) struct InFlight(Arc<ConnectionState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let state = &self.0;
        state.idle_since_ms.store(now_ms(), Ordering::Relaxed);
        if state.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            state.changed.notify_one();
        }
    }
}

/// A request body not read to its end yet, counted by its connection.
#[derive(Debug)]
struct ReadingBody(Arc<ConnectionState>);

impl ReadingBody {
    fn new(state: &Arc<ConnectionState>) -> Self {
        state.reading_bodies.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(state))
    }
}

impl Drop for ReadingBody {
    fn drop(&mut self) {
        self.0.reading_bodies.fetch_sub(1, Ordering::Relaxed);
        self.0.changed.notify_one();
    }
}

/// What a [`Watched`] body holds until the body ends or is dropped.
pub(crate) trait BodyWatch {
    /// Whether the body's end flag ends the watch too, not only its last
    /// frame or an error: a request body's reader may stop once the body
    /// says it is at its end, without polling for the end; a response
    /// body's request stays in flight until the body is polled to its end
    /// (or dropped).
    const ENDS_AT_END_STREAM: bool;
}

impl BodyWatch for ReadingBody {
    const ENDS_AT_END_STREAM: bool = true;
}

impl BodyWatch for InFlight {
    const ENDS_AT_END_STREAM: bool = false;
}

/// A body holding `W` until its end or its drop: a request body counted
/// as being read ([`ReadingBody`]), or a response body that keeps its
/// request in flight ([`InFlight`]).
pub(crate) struct Watched<B, W> {
    inner: B,
    watch: Option<W>,
}

impl<B, W> http_body::Body for Watched<B, W>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    W: BodyWatch + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_))))
            || (W::ENDS_AT_END_STREAM && self.inner.is_end_stream())
        {
            self.watch = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Starts a request on `state`'s connection: its body counted while read,
/// the request in flight until the response made of it ends.
pub(crate) fn watch_request(
    state: &Arc<ConnectionState>,
    request: hyper::Request<hyper::body::Incoming>,
) -> (hyper::Request<Body>, InFlight) {
    let in_flight = state.request_started();
    let request = request.map(|inner| {
        let watch = (!http_body::Body::is_end_stream(&inner)).then(|| ReadingBody::new(state));
        Body::new(Watched { inner, watch })
    });
    (request, in_flight)
}

/// The response of a request started by [`watch_request`].
pub(crate) fn watch_response(
    response: axum::response::Response,
    in_flight: InFlight,
) -> hyper::Response<Watched<Body, InFlight>> {
    response.map(|inner| Watched {
        inner,
        watch: Some(in_flight),
    })
}

/// How long an accepted connection may wait for the connections shed for it
/// to close before it is closed itself.
const CLOSING_WAIT: Duration = Duration::from_secs(1);

/// What [`ConnectionTable::try_admit`] decided.
enum Admission {
    Admitted(Lease),
    /// Nothing can be shed: close the new connection.
    Refused,
    /// Connections shed are still closing: wait for them.
    Closing,
}

/// The replica's open connections.
#[derive(Debug)]
pub(crate) struct ConnectionTable {
    limits: ConnectionLimits,
    inner: Mutex<TableInner>,
    /// Woken when a shed connection has closed.
    released: Notify,
    next_id: AtomicU64,
    metrics: ConnectionMetrics,
}

#[derive(Debug, Default)]
struct TableInner {
    open: HashMap<u64, Arc<ConnectionState>>,
    /// Of `open`, those marked to be shed and not closed yet.
    closing: usize,
}

/// The connection metrics served at `/metrics`.
#[derive(Debug, Clone)]
struct ConnectionMetrics {
    open: IntGauge,
    closed: IntCounterVec,
    refused: IntCounter,
}

impl ConnectionMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            open: IntGauge::new(
                "aci_http_connections_open",
                "HTTP connections open now (counted from their accept to their close).",
            )?,
            closed: IntCounterVec::new(
                Opts::new(
                    "aci_http_connections_closed_total",
                    "HTTP connections the replica closed itself, by reason: header_timeout, idle_timeout, body_timeout, shed.",
                ),
                &["reason"],
            )?,
            refused: IntCounter::new(
                "aci_http_connections_refused_total",
                "HTTP connections closed at their accept: the cap was reached and every open connection had a request in flight.",
            )?,
        })
    }
}

impl ConnectionTable {
    /// An empty table for `limits`.
    ///
    /// # Errors
    /// Only when a metric is malformed (a programming error).
    pub(crate) fn new(limits: ConnectionLimits) -> Result<Arc<Self>, prometheus::Error> {
        Ok(Arc::new(Self {
            limits,
            inner: Mutex::new(TableInner::default()),
            released: Notify::new(),
            next_id: AtomicU64::new(0),
            metrics: ConnectionMetrics::new()?,
        }))
    }

    pub(crate) fn limits(&self) -> &ConnectionLimits {
        &self.limits
    }

    /// Serves the connection metrics from `registry`.
    pub(crate) fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.metrics.open.clone()))?;
        registry.register(Box::new(self.metrics.closed.clone()))?;
        registry.register(Box::new(self.metrics.refused.clone()))
    }

    fn lock(&self) -> MutexGuard<'_, TableInner> {
        // The table holds no invariant a panic could break half way.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a new connection, shedding others at the cap; `None` when it
    /// must be closed at once (every open connection has a request in
    /// flight). While the connections shed for it are still closing, waits
    /// for them (up to [`CLOSING_WAIT`]): the acceptor takes no other
    /// connection meanwhile, which holds back a client that reconnects as
    /// fast as it is shed.
    pub(crate) async fn admit(self: &Arc<Self>) -> Option<Lease> {
        let waited = tokio::time::Instant::now();
        loop {
            // Registered before looking, so a release in between is seen.
            let released = self.released.notified();
            match self.try_admit() {
                Admission::Admitted(lease) => return Some(lease),
                Admission::Refused => return None,
                Admission::Closing => {
                    let left = CLOSING_WAIT.saturating_sub(waited.elapsed());
                    if left.is_zero() || tokio::time::timeout(left, released).await.is_err() {
                        self.metrics.refused.inc();
                        return None;
                    }
                }
            }
        }
    }

    fn try_admit(self: &Arc<Self>) -> Admission {
        let max = self.limits.max_connections;
        let mut inner = self.lock();
        if inner.open.len() - inner.closing >= max {
            self.shed(&mut inner);
            if inner.open.len() - inner.closing >= max {
                self.metrics.refused.inc();
                return Admission::Refused;
            }
        }
        if inner.open.len() >= max + self.limits.shed_batch() {
            return Admission::Closing;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnectionState::new(id));
        inner.open.insert(id, Arc::clone(&state));
        self.metrics.open.inc();
        Admission::Admitted(Lease {
            table: Arc::clone(self),
            state,
        })
    }

    /// Marks a batch of idle connections to be shed, in [`shed_key`] order,
    /// and wakes their watchdogs.
    ///
    /// [`shed_key`]: ConnectionState::shed_key
    fn shed(&self, inner: &mut TableInner) {
        let mut candidates: Vec<(ShedKey, &Arc<ConnectionState>)> = inner
            .open
            .values()
            .filter(|state| state.sheddable())
            .map(|state| (state.shed_key(), state))
            .collect();
        let batch = self.limits.shed_batch().min(candidates.len());
        if batch == 0 {
            return;
        }
        if batch < candidates.len() {
            candidates.select_nth_unstable_by_key(batch - 1, |(key, _)| *key);
        }
        for (_, state) in &candidates[..batch] {
            state.closing.store(true, Ordering::Relaxed);
            state.close.notify_one();
        }
        inner.closing += batch;
        self.metrics
            .closed
            .with_label_values(&[Closed::Shed.label()])
            .inc_by(batch as u64);
    }

    /// Sheds a batch of idle connections now (the process ran out of file
    /// descriptors at an accept).
    pub(crate) fn relieve(&self) {
        let mut inner = self.lock();
        self.shed(&mut inner);
    }

    /// Counts a connection its watchdog closed.
    pub(crate) fn closed(&self, reason: Closed) {
        if reason != Closed::Shed {
            self.metrics
                .closed
                .with_label_values(&[reason.label()])
                .inc();
        }
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().open.len()
    }
}

/// One open connection's place in the table, given back when dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    table: Arc<ConnectionTable>,
    state: Arc<ConnectionState>,
}

impl Lease {
    pub(crate) fn state(&self) -> &Arc<ConnectionState> {
        &self.state
    }

    pub(crate) fn table(&self) -> &Arc<ConnectionTable> {
        &self.table
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut inner = self.table.lock();
        if inner.open.remove(&self.state.id).is_some() {
            self.table.metrics.open.dec();
            if self.state.closing.load(Ordering::Relaxed) {
                inner.closing -= 1;
                self.table.released.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn limits(max_connections: usize) -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections,
            max_header_count: DEFAULT_MAX_HEADER_COUNT,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }

    #[test]
    fn a_new_connection_owes_its_head_from_the_accept() {
        let limits = limits(10);
        let state = ConnectionState::new(0);
        let opened = state.opened_ms;
        assert_eq!(
            state.verdict(&limits, opened),
            Verdict::WaitUntil(opened + 10_000)
        );
        // A byte changes nothing: the first head is due from the accept.
        state.bytes_read();
        assert_eq!(
            state.verdict(&limits, opened + 9_999),
            Verdict::WaitUntil(opened + 10_000)
        );
        assert_eq!(
            state.verdict(&limits, opened + 10_000),
            Verdict::Close(Closed::HeaderTimeout)
        );
    }

    #[test]
    fn between_requests_the_idle_deadline_then_the_header_deadline_apply() {
        let limits = limits(10);
        let state = Arc::new(ConnectionState::new(0));
        let request = state.request_started();
        // Answering: no deadline.
        assert_eq!(state.verdict(&limits, now_ms()), Verdict::WaitUntil(NEVER));
        drop(request);
        let idle = state.idle_since_ms.load(Ordering::Relaxed);
        assert_eq!(
            state.verdict(&limits, idle),
            Verdict::WaitUntil(idle + 60_000)
        );
        assert_eq!(
            state.verdict(&limits, idle + 60_000),
            Verdict::Close(Closed::IdleTimeout)
        );
        // The next request's first byte: its head is due within the header
        // timeout, whatever the idle deadline.
        state.bytes_read();
        let started = state.head_started_ms.load(Ordering::Relaxed);
        assert_eq!(
            state.verdict(&limits, started),
            Verdict::WaitUntil(started + 10_000)
        );
    }

    #[test]
    fn a_body_must_be_read_within_the_body_timeout() {
        let limits = limits(10);
        let state = Arc::new(ConnectionState::new(0));
        let request = state.request_started();
        let reading = ReadingBody::new(&state);
        let at = state.request_ms.load(Ordering::Relaxed);
        assert_eq!(
            state.verdict(&limits, at + 29_999),
            Verdict::WaitUntil(at + 30_000)
        );
        assert_eq!(
            state.verdict(&limits, at + 30_000),
            Verdict::Close(Closed::BodyTimeout)
        );
        drop(reading);
        assert_eq!(
            state.verdict(&limits, at + 30_000),
            Verdict::WaitUntil(NEVER)
        );
        drop(request);
    }

    #[tokio::test]
    async fn at_the_cap_idle_unauthenticated_connections_go_first_and_busy_ones_never() {
        let table = ConnectionTable::new(limits(4)).unwrap();
        let busy = table.admit().await.unwrap();
        let _request = busy.state().request_started();
        let idle_authenticated = table.admit().await.unwrap();
        idle_authenticated.state().authenticated();
        let silent_old = table.admit().await.unwrap();
        let silent_new = table.admit().await.unwrap();
        // Full: the fifth sheds one batch (one connection at this size),
        // the oldest unauthenticated idle one.
        let fifth = table.admit().await.unwrap();
        assert!(silent_old.state().closing.load(Ordering::Relaxed));
        assert!(!silent_new.state().closing.load(Ordering::Relaxed));
        // Until the victim closes, the next one waits for it, and gets in
        // once it closed.
        let sixth = {
            let waiting = tokio::spawn({
                let table = Arc::clone(&table);
                async move { table.admit().await }
            });
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished());
            drop(silent_old);
            waiting.await.unwrap().unwrap()
        };
        assert!(silent_new.state().closing.load(Ordering::Relaxed));
        // Victims that never close: the newcomer (which shed one more) is
        // closed after the wait.
        assert!(table.admit().await.is_none());
        assert!(fifth.state().closing.load(Ordering::Relaxed));
        drop(silent_new);
        drop(fifth);
        // Only authenticated idle ones are left to shed: the longest idle.
        sixth.state().authenticated();
        let seventh = table.admit().await.unwrap();
        seventh.state().authenticated();
        let eighth = tokio::spawn({
            let table = Arc::clone(&table);
            async move { table.admit().await }
        });
        tokio::task::yield_now().await;
        assert!(idle_authenticated.state().closing.load(Ordering::Relaxed));
        assert!(!busy.state().closing.load(Ordering::Relaxed));
        drop(idle_authenticated);
        let eighth = eighth.await.unwrap().unwrap();
        assert_eq!(table.open(), 4);
        // Every connection busy: the newcomer is closed at once.
        let _requests: Vec<_> = [&sixth, &seventh, &eighth]
            .iter()
            .map(|lease| lease.state().request_started())
            .collect();
        assert!(table.admit().await.is_none(), "every connection is busy");
        assert_eq!(table.metrics.refused.get(), 2);
        assert_eq!(table.metrics.closed.with_label_values(&["shed"]).get(), 4);
    }

    #[tokio::test]
    async fn leases_count_connections_open() {
        let table = ConnectionTable::new(limits(100)).unwrap();
        let mut leases = Vec::new();
        for _ in 0..10 {
            leases.push(table.admit().await.unwrap());
        }
        assert_eq!(table.open(), 10);
        assert_eq!(table.metrics.open.get(), 10);
        drop(leases);
        assert_eq!(table.open(), 0);
        assert_eq!(table.metrics.open.get(), 0);
    }
}
