//! A deadline on the peer's reading: [`StallGuard`] wraps a connection's stream and fails
//! a write (or flush) once the peer has had bytes waiting for it for
//! [`WRITE_STALL_TIMEOUT`] and took less than [`MIN_PROGRESS_BYTES`] of them in that time.
//! hyper then drops the connection, its answer and its slot.
//!
//! The deadline is on progress, not on the whole answer: a reader that takes 64 KiB
//! every 30 s (2 KiB/s) keeps its connection, and a `/api/v1/live` stream may stay open
//! for hours; a peer that stops reading, or takes a few bytes now and then (which before
//! kept an answer, up to several times the history's size, in memory for as long as it
//! liked, and with it one of the few places answers from the history have), is cut off.
//! A flush that completes (everything hyper had was handed to the socket) ends the watch.
//! hyper has a deadline
//! for reading a request's head but none for writing its answer, hence this wrapper.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long the peer may leave waiting bytes (mostly) untaken.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the peer must take of the waiting bytes within [`WRITE_STALL_TIMEOUT`].
pub const MIN_PROGRESS_BYTES: usize = 64 << 10;

/// A stream whose writes fail when the peer takes too little for too long.
pub struct StallGuard<S> {
    inner: S,
    /// Armed when a write or flush first waits; ended by a flush that completes, or once
    /// the peer took [`MIN_PROGRESS_BYTES`] since.
    stalled: Option<Pin<Box<Sleep>>>,
    /// Bytes taken since the watch was armed.
    taken: usize,
}

impl<S> StallGuard<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        StallGuard {
            inner,
            stalled: None,
            taken: 0,
        }
    }

    /// What a write that completed (`n` bytes taken, or a flush: `None`) or waited turns
    /// into.
    fn settle<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
        taken: impl FnOnce(&T) -> Option<usize>,
    ) -> Poll<io::Result<T>> {
        if let Poll::Ready(result) = &polled {
            if self.stalled.is_some() {
                match result.as_ref().ok().and_then(taken) {
                    Some(n) => self.taken += n,
                    None => self.taken = usize::MAX,
                }
                if self.taken >= MIN_PROGRESS_BYTES {
                    self.stalled = None;
                    self.taken = 0;
                }
            }
            return polled;
        }
        let deadline = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL_TIMEOUT)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer took too little of the answer for 30 s",
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
        this.settle(cx, polled, |n| Some(*n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.settle(cx, polled, |n| Some(*n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.settle(cx, polled, |_| None)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.settle(cx, polled, |_| None)
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

        // Takes 16 KiB every 5 s (96 KiB per 30 s): slow, but enough; everything arrives.
        let (mut peer, stream) = tokio::io::duplex(16 << 10);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut piece = vec![0u8; 16 << 10];
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                match peer.read(&mut piece).await.unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&piece[..n]),
                }
            }
        });
        let mut guarded = StallGuard::new(stream);
        guarded.write_all(&[9u8; 256 << 10]).await.unwrap();
        guarded.shutdown().await.unwrap();
        drop(guarded);
        assert_eq!(reader.await.unwrap(), vec![9u8; 256 << 10]);

        // Takes 512 bytes every 20 s: progress, but far too little (before, any byte
        // taken kept the connection, and its answer, for as long as the peer liked).
        let (mut peer, stream) = tokio::io::duplex(1024);
        let trickle = tokio::spawn(async move {
            let mut piece = [0u8; 512];
            loop {
                tokio::time::sleep(Duration::from_secs(20)).await;
                if matches!(peer.read(&mut piece).await, Ok(0) | Err(_)) {
                    return;
                }
            }
        });
        let mut guarded = StallGuard::new(stream);
        let started = tokio::time::Instant::now();
        let err = guarded.write_all(&[5u8; 256 << 10]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= WRITE_STALL_TIMEOUT);
        drop(guarded);
        trickle.await.unwrap();
    }

    /// A finished answer (its flush done) ends the watch: the next answer on the
    /// connection starts with none, however little the previous one moved.
    #[tokio::test(start_paused = true)]
    async fn a_completed_flush_ends_the_watch() {
        let (mut peer, stream) = tokio::io::duplex(1024);
        let mut guarded = StallGuard::new(stream);
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut piece = [0u8; 4096];
            while got < 2048 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                got += peer.read(&mut piece).await.unwrap();
            }
            peer
        });
        guarded.write_all(&[1u8; 2048]).await.unwrap();
        guarded.flush().await.unwrap();
        assert!(guarded.stalled.is_none());
        let mut peer = reader.await.unwrap();
        // An hour later, the next answer waits again and has its own 30 s.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let writer =
            tokio::spawn(async move { guarded.write_all(&[2u8; 2048]).await.map(|()| guarded) });
        tokio::time::sleep(Duration::from_secs(10)).await;
        let mut piece = [0u8; 4096];
        let mut got = 0;
        while got < 2048 {
            got += peer.read(&mut piece).await.unwrap();
        }
        assert!(writer.await.unwrap().is_ok());
    }
}
