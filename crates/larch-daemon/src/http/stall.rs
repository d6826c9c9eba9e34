//! A deadline on the peer's reading: [`StallGuard`] wraps a connection's stream and fails
//! a write (or flush) that has waited [`WRITE_STALL_TIMEOUT`] for the peer to take
//! anything. hyper then drops the connection, its answer and its slot.
//!
//! The deadline is on progress, not on the whole answer: a slow reader that takes a few
//! bytes now and then keeps its connection, a `/api/v1/live` stream may stay open for
//! hours, and only a peer that stops reading altogether is cut off. hyper has a deadline
//! for reading a request's head but none for writing its answer, hence this wrapper.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long a write may wait for the peer to take any of it.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A stream whose writes fail after [`WRITE_STALL_TIMEOUT`] without progress.
pub struct StallGuard<S> {
    inner: S,
    /// Armed when a write or flush first waits; disarmed by any that completes.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> StallGuard<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        StallGuard {
            inner,
            stalled: None,
        }
    }

    /// What a write that completed or waited turns into.
    fn settle<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let deadline = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL_TIMEOUT)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer took nothing of the answer for 30 s",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.settle(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.settle(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.settle(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.settle(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_fails_the_write_and_a_slow_one_does_not() {
        // Stops reading: the write that fills the pipe fails after the timeout.
        let (_peer, stream) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(stream);
        let started = tokio::time::Instant::now();
        let err = guarded.write_all(&[7u8; 4096]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= WRITE_STALL_TIMEOUT);

        // Reads a little every 20 s: never 30 s without progress, so everything arrives.
        let (mut peer, stream) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut piece = [0u8; 512];
            loop {
                tokio::time::sleep(Duration::from_secs(20)).await;
                match peer.read(&mut piece).await.unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&piece[..n]),
                }
            }
        });
        let mut guarded = StallGuard::new(stream);
        guarded.write_all(&[9u8; 8192]).await.unwrap();
        guarded.shutdown().await.unwrap();
        drop(guarded);
        assert_eq!(reader.await.unwrap(), vec![9u8; 8192]);
    }
}
