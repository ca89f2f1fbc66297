//! `aci serve --http` on in-memory connections, for the fuzz targets
//! (feature `fuzzing`): the replica [`serve`](super::serve) starts (its
//! settings, metrics, connection table, router and server), without a
//! listener; each connection admitted into its table and served on the
//! workers' path ([`workers::serve_in_memory`]).

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::time::Instant;

use super::{HttpOptions, Replica, workers};
use crate::app::App;
use crate::config::Config;
use crate::error::CliError;

/// The client's address on every in-memory connection.
const PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 40_000);

/// How long the server may take to close a connection once its client
/// closed its side, beyond the exchange's bound.
const CLOSE_GRACE: Duration = Duration::from_millis(250);

/// A started replica serving in-memory connections.
pub(crate) struct InMemoryReplica {
    replica: Replica,
}

/// What the server wrote on one connection.
#[derive(Debug)]
pub(crate) struct Exchange {
    /// Every byte, in order.
    pub(crate) output: Vec<u8>,
    /// Whether the server closed the connection itself in time (else it was
    /// dropped and `output` may end inside a response).
    pub(crate) closed: bool,
}

impl InMemoryReplica {
    /// Starts the replica of `config` (which must configure `[auth]`, as
    /// `aci serve --http` without `--insecure-no-auth` asks) on `app`. The
    /// process's limit on open files is left as it is.
    ///
    /// # Errors
    /// As `aci serve --http` at start.
    pub(crate) async fn start(app: App, config: &Config) -> Result<Self, CliError> {
        let options = HttpOptions {
            addr: String::new(),
            insecure_no_auth: false,
            shared_store: false,
        };
        let replica = Replica::start(app, config, &options, || None).await?;
        Ok(Self { replica })
    }

    /// One connection whose client writes `input`, waits until the server
    /// has read it all and answered every request it could read whole (for
    /// up to `bound`), then closes its side; everything the server wrote
    /// until it closed the connection (for up to a short grace more).
    pub(crate) async fn exchange(&self, input: &[u8], bound: Duration) -> Exchange {
        let deadline = Instant::now() + bound;
        let Some(lease) = self.replica.table.admit().await else {
            return Exchange {
                output: Vec::new(),
                closed: true,
            };
        };
        let state = Arc::clone(lease.state());
        let (client, server) = tokio::io::duplex(64 * 1024);
        let read = Arc::new(AtomicUsize::new(0));
        let server = Counted {
            inner: server,
            read: Arc::clone(&read),
        };
        let serving = tokio::spawn(workers::serve_in_memory(
            server,
            PEER,
            lease,
            self.replica.router.clone(),
        ));
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let reading = tokio::spawn(async move {
            let mut output = Vec::new();
            let _ = from_server.read_to_end(&mut output).await;
            output
        });
        let sending = async {
            // An error: the server closed the connection.
            if to_server.write_all(input).await.is_err() {
                return;
            }
            // Settled: the server read everything and waits on the client,
            // seen twice with every ready task run in between (hyper may
            // have woken itself for requests it holds).
            let mut settled = 0;
            let mut looks = 0_u32;
            while settled < 2 && !serving.is_finished() {
                if read.load(Ordering::Relaxed) == input.len() && state.waits_on_client() {
                    settled += 1;
                } else {
                    settled = 0;
                }
                looks += 1;
                if looks < 64 {
                    tokio::task::yield_now().await;
                } else {
                    // Waiting on a timer or a blocking task: poll slower.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, sending).await;
        let _ = to_server.shutdown().await;
        let closed = tokio::time::timeout_at(deadline + CLOSE_GRACE, async {
            while !serving.is_finished() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .is_ok();
        serving.abort();
        let _ = serving.await;
        let output = reading.await.unwrap_or_default();
        Exchange { output, closed }
    }
}

/// A stream that counts the bytes read from it.
struct Counted<S> {
    inner: S,
    read: Arc<AtomicUsize>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.read.fetch_add(read, Ordering::Relaxed);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
