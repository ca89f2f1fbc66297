//! stdin, read on a dedicated thread.

use std::io::Read as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

use crate::error::CliError;

/// stdin, read on a dedicated thread.
///
/// A read on Tokio's stdin runs on the blocking pool and cannot be cancelled,
/// so a stop request would leave the runtime waiting for the next line from a
/// terminal. A plain thread blocked in `read` does not hold the process.
#[derive(Debug)]
pub(crate) struct ThreadStdin {
    chunks: mpsc::Receiver<std::io::Result<Vec<u8>>>,
    pending: Vec<u8>,
    offset: usize,
}

impl ThreadStdin {
    /// Bytes read ahead, at most (in chunks of up to 64 KiB).
    const CHUNKS: usize = 16;
    const CHUNK_BYTES: usize = 64 * 1024;

    pub(crate) fn spawn() -> Result<Self, CliError> {
        let (sender, chunks) = mpsc::channel(Self::CHUNKS);
        std::thread::Builder::new()
            .name("aci-mcp-stdin".to_owned())
            .spawn(move || read_stdin(&sender))
            .map_err(|e| CliError::config(format!("cannot start reading stdin: {e}")))?;
        Ok(Self {
            chunks,
            pending: Vec::new(),
            offset: 0,
        })
    }
}

/// Forwards stdin to `sender` until end of file, a read error, or the reader
/// goes away.
fn read_stdin(sender: &mpsc::Sender<std::io::Result<Vec<u8>>>) {
    let mut stdin = std::io::stdin().lock();
    let mut buffer = vec![0_u8; ThreadStdin::CHUNK_BYTES];
    loop {
        let chunk = match stdin.read(&mut buffer) {
            Ok(0) => return,
            Ok(n) => Ok(buffer[..n].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Err(e),
        };
        let failed = chunk.is_err();
        if sender.blocking_send(chunk).is_err() || failed {
            return;
        }
    }
}

impl AsyncRead for ThreadStdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        while this.offset >= this.pending.len() {
            match this.chunks.poll_recv(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.pending = chunk;
                    this.offset = 0;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                // End of file: the reading thread is done.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let available = &this.pending[this.offset..];
        let n = available.len().min(buf.remaining());
        buf.put_slice(&available[..n]);
        this.offset += n;
        Poll::Ready(Ok(()))
    }
}
