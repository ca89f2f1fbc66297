//! Thread-per-core serving: one acceptor, `[serve] workers` threads that
//! each run a single-threaded tokio runtime and serve the connections handed
//! to them, whole.
//!
//! # Why
//!
//! A `tools/call` over rmcp's Streamable HTTP transport spawns several tasks
//! (its per-request service, the handler, the response) and passes messages
//! between them. On a work-stealing runtime each spawn and wake may unpark
//! another worker thread, which steals the task: the request hops between
//! cores, and every hop is a cross-core wake (an inter-processor interrupt,
//! a VM exit on a virtual machine). Measured on two cores, a replica on the
//! work-stealing runtime made about 1.7 context switches per call, and on a
//! single worker thread 0.03 with a fifth less CPU per call; served by these
//! workers, the HTTP benchmark's replica went from about 560 to about 470 µs
//! of CPU per call in the same rounds (docs/benchmarks.md).
//!
//! # How
//!
//! The acceptor (on the main runtime) takes each connection and hands its
//! socket to the worker with the fewest open connections (ties: the next in
//! turn), where it is registered with that worker's reactor and served by
//! hyper's HTTP/1 connection with the router, beside the watchdog of its
//! deadlines ([`super::connections`]); at the stop each connection shuts
//! down gracefully (the request in flight is answered, then it closes). A worker keeps running after its
//! connections are done until [`Workers::exit`]: finalizations the boundary
//! spawned for abandoned calls run on the worker's runtime and must finish
//! first.
//!
//! # Invariants
//!
//! - A connection lives on one worker from accept to close.
//! - A worker's runtime outlives every task spawned on it that the process
//!   waits for (finalizations of abandoned calls), because it only stops at
//!   [`Workers::exit`], after the server drained them.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, watch};
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use super::connections::{
    Closed, ConnectionLimits, ConnectionState, ConnectionTable, Lease, Verdict, deadline_instant,
    now_ms, watch_request, watch_response,
};
use super::tls::TlsSettings;
use crate::server::McpSession;

/// A connection's socket on its way to a worker, counted open there and in
/// the replica's table.
struct Handoff {
    socket: std::net::TcpStream,
    open: OpenConnection,
    lease: Lease,
}

/// One open connection in its worker's count; counts it closed when
/// dropped, wherever the connection ends (a failed handoff included).
struct OpenConnection(Arc<AtomicUsize>);

impl OpenConnection {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(count))
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One worker thread, as the acceptor sees it.
struct Worker {
    /// Where its connections go; closed once its thread has ended.
    queue: mpsc::UnboundedSender<Handoff>,
    /// Its open connections.
    open: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

/// The worker threads of one server.
pub(crate) struct Workers {
    workers: Vec<Worker>,
    /// The replica's open connections and their limits.
    table: Arc<ConnectionTable>,
    /// Where the next dispatch starts looking (ties go round robin).
    next: usize,
    stop: watch::Sender<bool>,
    exit: watch::Sender<bool>,
    served: mpsc::UnboundedReceiver<io::Result<()>>,
    /// Workers whose server has not reported its end yet.
    running: usize,
}

impl Workers {
    /// Starts `count` (at least one) worker threads serving `router` on the
    /// connections `table` admits.
    ///
    /// # Errors
    /// When a thread or its runtime cannot be started.
    pub(crate) fn start(
        count: usize,
        router: &Router,
        local: SocketAddr,
        table: Arc<ConnectionTable>,
        tls: Option<Arc<TlsSettings>>,
    ) -> io::Result<Self> {
        let (stop, _) = watch::channel(false);
        let (exit, _) = watch::channel(false);
        let (served_tx, served) = mpsc::unbounded_channel();
        let http = Arc::new(http_builder(table.limits()));
        let mut workers = Vec::new();
        for index in 0..count.max(1) {
            let (queue, incoming) = mpsc::unbounded_channel();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let serving = WorkerServer {
                incoming,
                router: router.clone(),
                local,
                http: Arc::clone(&http),
                tls: tls.clone(),
                stopping: stop.subscribe(),
            };
            let mut exiting = exit.subscribe();
            let served_tx = served_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("aci-http-{index}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        tokio::select! {
                            () = serving.run() => {
                                let _ = served_tx.send(Ok(()));
                            }
                            _ = exiting.wait_for(|exit| *exit) => return,
                        }
                        let _ = exiting.wait_for(|exit| *exit).await;
                    });
                })?;
            workers.push(Worker {
                queue,
                open: Arc::new(AtomicUsize::new(0)),
                thread,
            });
        }
        Ok(Self {
            running: workers.len(),
            workers,
            table,
            next: 0,
            stop,
            exit,
            served,
        })
    }

    /// Admits an accepted connection into the table (shedding others at
    /// the cap, or closing it when nothing can be shed) and hands it to the
    /// worker with the fewest open ones (of those still running).
    pub(crate) async fn dispatch(&mut self, stream: tokio::net::TcpStream) {
        let Some(lease) = self.table.admit().await else {
            return;
        };
        // Deregistered from this runtime's reactor; the worker registers it
        // with its own.
        let Ok(socket) = stream.into_std() else {
            return;
        };
        let count = self.workers.len();
        let start = self.next;
        self.next = (self.next + 1) % count;
        let chosen = (0..count)
            .map(|k| &self.workers[(start + k) % count])
            .filter(|worker| !worker.queue.is_closed())
            .min_by_key(|worker| worker.open.load(Ordering::Relaxed));
        let Some(worker) = chosen else {
            // No worker left (each one's thread ended): the socket closes.
            tracing::error!("no HTTP worker is running; a connection was closed");
            return;
        };
        let open = OpenConnection::new(&worker.open);
        // A worker that ended since drops the handoff: the socket closes and
        // the counts go back down.
        let _ = worker.queue.send(Handoff {
            socket,
            open,
            lease,
        });
    }

    /// Out of file descriptors at the accept: sheds idle connections now.
    pub(crate) fn relieve(&self) {
        self.table.relieve();
    }

    /// Stops taking connections: every worker finishes its requests in
    /// flight and closes its connections (hyper's graceful shutdown).
    pub(crate) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until every worker's server has finished (after
    /// [`stop`](Self::stop)); the first failure, if any.
    pub(crate) async fn finished(&mut self) -> io::Result<()> {
        let mut outcome = Ok(());
        while self.running > 0 {
            match self.served.recv().await {
                Some(result) => {
                    self.running -= 1;
                    if outcome.is_ok() {
                        outcome = result;
                    }
                }
                None => break,
            }
        }
        outcome
    }

    /// Ends every worker thread, dropping what still runs on it, and waits
    /// for them up to `bound`.
    pub(crate) async fn exit(self, bound: Duration) {
        self.exit.send_replace(true);
        let workers = self.workers;
        let joined = tokio::task::spawn_blocking(move || {
            for worker in workers {
                let _ = worker.thread.join();
            }
        });
        let _ = tokio::time::timeout(bound, joined).await;
    }
}

/// hyper's HTTP/1 settings from the limits: bounded heads; the header
/// deadline is the watchdog's (hyper's would also cut idle keep-alive
/// connections at the header timeout).
fn http_builder(limits: &ConnectionLimits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .header_read_timeout(None)
        .max_headers(limits.max_header_count)
        .max_header_size(limits.max_header_bytes)
        .keep_alive(true);
    builder
}

/// A worker's server: the connections handed to it, each on a task of its
/// runtime.
struct WorkerServer {
    incoming: mpsc::UnboundedReceiver<Handoff>,
    router: Router,
    local: SocketAddr,
    http: Arc<http1::Builder>,
    tls: Option<Arc<TlsSettings>>,
    stopping: watch::Receiver<bool>,
}

impl WorkerServer {
    /// Serves until the stop, then until every connection has closed.
    async fn run(mut self) {
        let tracker = TaskTracker::new();
        let mut stopping = self.stopping.clone();
        loop {
            tokio::select! {
                handoff = self.incoming.recv() => match handoff {
                    Some(handoff) => {
                        tracker.spawn(serve_connection(
                            handoff,
                            self.router.clone(),
                            self.local,
                            Arc::clone(&self.http),
                            self.tls.clone(),
                            self.stopping.clone(),
                        ));
                    }
                    // The acceptor is gone: the server ends at the stop.
                    None => break,
                },
                _ = stopping.wait_for(|stop| *stop) => break,
            }
        }
        let _ = stopping.wait_for(|stop| *stop).await;
        // Connections handed over but not taken close with the queue.
        drop(self.incoming);
        tracker.close();
        tracker.wait().await;
    }
}

/// Serves one accepted socket to its end.
async fn serve_connection(
    handoff: Handoff,
    router: Router,
    local: SocketAddr,
    http: Arc<http1::Builder>,
    tls: Option<Arc<TlsSettings>>,
    stopping: watch::Receiver<bool>,
) {
    let Handoff {
        socket,
        open,
        lease,
    } = handoff;
    // A socket that cannot be registered is dropped (closed) with its counts.
    let Ok(socket) = tokio::net::TcpStream::from_std(socket) else {
        return;
    };
    let peer = socket.peer_addr().unwrap_or(local);
    let stream = WatchedStream {
        inner: socket,
        state: Arc::clone(lease.state()),
        _open: open,
        lease,
    };
    serve_stream(stream, peer, router, &http, tls, stopping).await;
}

/// Serves one connection's stream to its end (after its TLS handshake,
/// with TLS).
async fn serve_stream<S>(
    stream: WatchedStream<S>,
    peer: SocketAddr,
    router: Router,
    http: &http1::Builder,
    tls: Option<Arc<TlsSettings>>,
    stopping: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::clone(&stream.state);
    let table = Arc::clone(stream.lease.table());
    let connection = Connection {
        session: McpSession::connection(),
        peer,
        state: Arc::clone(&state),
    };
    let Some(tls) = tls else {
        return drive(stream, router, connection, &table, http, stopping).await;
    };
    // The handshake is part of the head: due within the header timeout of
    // the accept, and shed like any idle connection meanwhile.
    let handshake = tokio_rustls::TlsAcceptor::from(tls.config()).accept(stream);
    let stream = tokio::select! {
        handshaken = tokio::time::timeout(table.limits().header_timeout, handshake) => match handshaken {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a TLS handshake failed");
                return;
            }
            Err(_) => {
                table.closed(Closed::HeaderTimeout);
                return;
            }
        },
        () = state.shed() => return,
    };
    drive(stream, router, connection, &table, http, stopping).await;
}

/// Serves `stream`, a connection admitted into `lease`'s table, as a worker
/// serves an accepted socket, without TLS and never stopped: the fuzz
/// targets' connections, in memory.
#[cfg(feature = "fuzzing")]
pub(crate) async fn serve_in_memory<S>(stream: S, peer: SocketAddr, lease: Lease, router: Router)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let http = http_builder(lease.table().limits());
    let count = Arc::new(AtomicUsize::new(0));
    let stream = WatchedStream {
        inner: stream,
        state: Arc::clone(lease.state()),
        _open: OpenConnection::new(&count),
        lease,
    };
    // Held to the end: a closed channel would read as a stop.
    let (_stop, stopping) = watch::channel(false);
    serve_stream(stream, peer, router, &http, None, stopping).await;
}

/// hyper's connection future on `io`, beside the watchdog of its deadlines,
/// its shedding and the replica's stop.
async fn drive<I>(
    io: I,
    router: Router,
    connection: Connection,
    table: &ConnectionTable,
    http: &http1::Builder,
    mut stopping: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::clone(&connection.state);
    let limits = *table.limits();
    let service = hyper::service::service_fn(move |request| {
        let (mut request, in_flight) = watch_request(&connection.state, request);
        request
            .extensions_mut()
            .insert(ConnectInfo(connection.clone()));
        let response = router.clone().oneshot(request);
        async move {
            let response = match response.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(watch_response(response, in_flight))
        }
    });
    let connection = http.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    // The deadlines are looked at only after hyper's connection was polled:
    // a worker busy past a deadline (its CPU taken by other work) first
    // reads what the client sent meanwhile, so that it closes a connection
    // for the client's slowness, never for its own (closing with a request
    // unread would reset it under the client). The first look is due at
    // once, after the first poll.
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    let mut deadline = Some(tokio::time::Instant::now());
    let mut graceful = false;
    loop {
        tokio::select! {
            biased;
            served = connection.as_mut() => {
                if let Err(e) = served {
                    tracing::trace!(error = %e, "a connection ended with an error");
                }
                return;
            }
            // Shed (counted by the table): the socket closes.
            () = state.shed() => return,
            _ = stopping.wait_for(|stop| *stop), if !graceful => {
                connection.as_mut().graceful_shutdown();
                graceful = true;
            }
            () = state.changed() => {}
            () = &mut sleep, if deadline.is_some() => {}
        }
        deadline = match state.verdict(&limits, now_ms()) {
            Verdict::WaitUntil(at) => deadline_instant(at),
            Verdict::Close(reason) => {
                table.closed(reason);
                return;
            }
        };
        if let Some(at) = deadline {
            sleep.as_mut().reset(at);
        }
    }
}

/// What a request knows of its connection.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    /// The connection's MCP session, named once per connection: the session
    /// of a stateless client that declares none.
    pub(crate) session: McpSession,
    /// The client's address (`client.address` of the call's span).
    pub(crate) peer: SocketAddr,
    /// Its state in the replica's table (authentication marks it).
    pub(crate) state: Arc<ConnectionState>,
}

/// A served connection's socket: tells its state when bytes come, and holds
/// the connection's place in its worker's count and the replica's table
/// until dropped.
struct WatchedStream<S> {
    inner: S,
    state: Arc<ConnectionState>,
    _open: OpenConnection,
    lease: Lease,
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.bytes_read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeSet;

    use axum::routing::get;
    use http_body_util::{BodyExt as _, Empty};
    use hyper::body::Bytes;
    use hyper_util::rt::TokioIo;

    use super::*;

    /// Which thread served the request.
    async fn who() -> String {
        std::thread::current().name().unwrap_or_default().to_owned()
    }

    async fn slow() -> &'static str {
        tokio::time::sleep(Duration::from_millis(300)).await;
        "done"
    }

    /// Holds its worker's thread (what a CPU taken by other work does to a
    /// worker), then answers.
    #[allow(clippy::unused_async)]
    async fn hold() -> &'static str {
        HOLDING.store(true, Ordering::SeqCst);
        std::thread::sleep(HELD);
        "held"
    }

    static HOLDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    const HELD: Duration = Duration::from_millis(600);

    fn router() -> Router {
        Router::new()
            .route("/who", get(who))
            .route("/slow", get(slow))
            .route("/hold", get(hold))
    }

    /// `paths` in turn over one keep-alive connection; the bodies.
    async fn over_one_connection(addr: SocketAddr, paths: &[&str]) -> Vec<String> {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut bodies = Vec::new();
        for path in paths {
            let request = hyper::Request::get(*path)
                .header("host", addr.to_string())
                .body(Empty::<Bytes>::new())
                .unwrap();
            sender.ready().await.unwrap();
            let response = sender.send_request(request).await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            bodies.push(String::from_utf8(body.to_vec()).unwrap());
        }
        bodies
    }

    /// Stops the workers, waits for their servers and ends their threads.
    async fn shut_down(mut workers: Workers) {
        workers.stop();
        tokio::time::timeout(Duration::from_secs(10), workers.finished())
            .await
            .unwrap()
            .unwrap();
        workers.exit(Duration::from_secs(5)).await;
    }

    fn table(max_connections: usize) -> Arc<ConnectionTable> {
        ConnectionTable::new(ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections,
            max_header_count: 64,
            max_header_bytes: 16 * 1024,
        })
        .unwrap()
    }

    async fn listen() -> (tokio::net::TcpListener, SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_stays_on_one_worker_and_connections_spread_over_all() {
        let (listener, addr) = listen().await;
        let mut workers = Workers::start(3, &router(), addr, table(100), None).unwrap();
        let clients: Vec<_> = (0..6)
            .map(|_| tokio::spawn(over_one_connection(addr, &["/who", "/who", "/who"])))
            .collect();
        for _ in 0..6 {
            let (stream, _) = listener.accept().await.unwrap();
            workers.dispatch(stream).await;
        }
        let mut served = BTreeSet::new();
        for client in clients {
            let names = client.await.unwrap();
            assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
            served.insert(names[0].clone());
        }
        let all: BTreeSet<String> = (0..3).map(|i| format!("aci-http-{i}")).collect();
        assert_eq!(served, all);
        shut_down(workers).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_lets_the_request_in_flight_finish() {
        let (listener, addr) = listen().await;
        let mut workers = Workers::start(2, &router(), addr, table(100), None).unwrap();
        let client = tokio::spawn(over_one_connection(addr, &["/slow"]));
        let (stream, _) = listener.accept().await.unwrap();
        workers.dispatch(stream).await;
        // Let the request reach its handler, then stop.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The servers end only once that request was answered.
        shut_down(workers).await;
        assert_eq!(client.await.unwrap(), ["done"]);
    }

    /// A worker kept busy past a connection's header deadline reads the
    /// request its client sent in time and answers it: the deadline is the
    /// client's, not the worker's (closing with the request unread would
    /// reset the connection under the client).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_busy_past_a_deadline_answers_what_arrived_in_time() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let (listener, addr) = listen().await;
        let limits = ConnectionLimits {
            header_timeout: HELD / 3,
            ..*table(100).limits()
        };
        let table = ConnectionTable::new(limits).unwrap();
        let mut workers = Workers::start(1, &router(), addr, table, None).unwrap();
        // The one worker's thread is held by a request...
        let holder = tokio::spawn(over_one_connection(addr, &["/hold"]));
        let (stream, _) = listener.accept().await.unwrap();
        workers.dispatch(stream).await;
        while !HOLDING.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // ...while a second client sends its whole request at once.
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        workers.dispatch(stream).await;
        client
            .write_all(b"GET /who HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut reply))
            .await
            .unwrap()
            .unwrap();
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
        assert!(reply.ends_with("aci-http-0"), "{reply:?}");
        assert_eq!(holder.await.unwrap(), ["held"]);
        shut_down(workers).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_are_counted_closed() {
        let (listener, addr) = listen().await;
        let mut workers = Workers::start(2, &router(), addr, table(100), None).unwrap();
        let client = tokio::spawn(over_one_connection(addr, &["/who"]));
        let (stream, _) = listener.accept().await.unwrap();
        workers.dispatch(stream).await;
        client.await.unwrap();
        // The client dropped its connection; the worker sees it close.
        tokio::time::timeout(Duration::from_secs(10), async {
            while workers
                .workers
                .iter()
                .any(|w| w.open.load(Ordering::Relaxed) > 0)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
        shut_down(workers).await;
    }
}
