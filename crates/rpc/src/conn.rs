//! One accepted connection: HTTP/1.1 (with upgrades to WebSocket) over a socket with
//! deadlines.
//!
//! HTTP/1.1 only: cleartext HTTP/2 bought nothing here (JSON-RPC clients, wallets, `curl`
//! and caches speak HTTP/1.1 to an `http://` URL) and let one connection hold 200 answers
//! in flight, each holding a route's permit, which the per-address connection bound could
//! not see.
//!
//! The socket's deadlines bound what a client that stops reading can hold: once no byte of
//! an answer has been taken for the send timeout, the connection is closed, and with it
//! every answer body and permit it held (a slow client that keeps taking bytes is not cut).
//! A connection that sends no byte within [`FIRST_REQUEST_TIMEOUT`] of being accepted is
//! closed too, as jsonrpsee's own loop did.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long an accepted connection may wait before its first byte.
pub(crate) const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A socket whose writes fail once they have made no progress for `send_timeout`, and
/// whose reads fail if no byte came within `first_byte` of the start.
#[derive(Debug)]
pub(crate) struct Deadlines<S> {
    inner: S,
    send_timeout: Duration,
    /// Armed while a write waits for room in the socket.
    stalled: Option<Pin<Box<Sleep>>>,
    /// Armed until the first byte is read.
    first_byte: Option<Pin<Box<Sleep>>>,
}

impl<S> Deadlines<S> {
    pub(crate) fn new(inner: S, first_byte: Duration, send_timeout: Duration) -> Self {
        Self {
            inner,
            send_timeout,
            stalled: None,
            first_byte: Some(Box::pin(tokio::time::sleep(first_byte))),
        }
    }

    /// What a write that returned `result` means once the stall timer is considered: a
    /// write that went through disarms it; one that waits arms it, and fails once it fires.
    fn after_write<T>(
        &mut self,
        result: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(ready) => {
                self.stalled = None;
                Poll::Ready(ready)
            }
            Poll::Pending => {
                let timeout = self.send_timeout;
                let timer = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client took no byte for {} s", timeout.as_secs_f64()),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Deadlines<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Some(timer) = &mut this.first_byte {
            match read {
                Poll::Ready(Ok(())) if buf.filled().len() > before => this.first_byte = None,
                Poll::Pending if timer.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request within the first-request timeout",
                    )));
                }
                _ => {}
            }
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Deadlines<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(result, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.after_write(result, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.after_write(result, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_that_makes_no_progress_fails_at_the_send_timeout() {
        // A pipe of 64 KiB that nobody reads.
        let (ours, _theirs) = tokio::io::duplex(64 << 10);
        let mut socket = Deadlines::new(ours, Duration::from_secs(60), Duration::from_millis(200));
        let piece = vec![7u8; 16 << 10];
        let mut sent = 0usize;
        let error = loop {
            match socket.write(&piece).await {
                Ok(n) => sent += n,
                Err(e) => break e,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert_eq!(sent, 64 << 10, "what the pipe held went through");
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_fails_at_the_first_request_timeout() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut socket = Deadlines::new(ours, Duration::from_millis(100), Duration::from_secs(60));
        let mut buf = [0u8; 16];
        let error = socket.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        // Once a byte came, reads wait as long as it takes.
        let (ours, mut other) = tokio::io::duplex(1024);
        let mut socket = Deadlines::new(ours, Duration::from_millis(100), Duration::from_secs(60));
        other.write_all(b"G").await.unwrap();
        assert_eq!(socket.read(&mut buf).await.unwrap(), 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        other.write_all(b"ET").await.unwrap();
        assert_eq!(socket.read(&mut buf).await.unwrap(), 2);
        theirs.shutdown().await.unwrap();
    }
}
