//! The two queues of a connection's task: the requests running ([`InFlight`]) and the
//! reply bytes waiting for the socket ([`Output`]).

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::transmission::Frame;

/// Stop reading requests while this much reply data waits for the socket.
pub(super) const OUTPUT_HIGH_WATER_BYTES: usize = 64 << 20;
/// Most buffers handed to one `writev`.
pub(super) const MAX_IOSLICES: usize = 256;

pub(super) type RequestFuture<'a> = Pin<Box<dyn Future<Output = Frame> + Send + 'a>>;

/// The requests of one connection that are running. The connection task polls them
/// itself instead of spawning a task each: a request that completes at once (a cache
/// hit, a page-cache read) then costs no wake-up of another thread, and replies are
/// written by the same task that saw them complete. Only the requests whose wakers fired
/// are polled again, so a completion costs the same with 1 or 128 requests waiting.
#[derive(Default)]
pub(super) struct InFlight<'a> {
    running: FuturesUnordered<RequestFuture<'a>>,
    done: Vec<Frame>,
}

impl<'a> InFlight<'a> {
    pub(super) fn len(&self) -> usize {
        self.running.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    pub(super) fn push(&mut self, request: RequestFuture<'a>) {
        self.running.push(request);
    }

    /// Polls the running requests that were woken (and new ones); resolves when at least
    /// one finished (its reply is kept in `done`). Cancel-safe: finished replies are never
    /// lost.
    pub(super) fn completions(&mut self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            while let Poll::Ready(Some(frame)) = self.running.poll_next_unpin(cx) {
                self.done.push(frame);
            }
            if self.done.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    }

    pub(super) fn drain_done(&mut self, out: &mut Output) {
        for frame in self.done.drain(..) {
            out.push(frame);
        }
    }
}

/// Reply bytes waiting for the socket, as a queue of buffers. Each frame is appended
/// whole, and only this connection's task writes, so replies never interleave.
#[derive(Default)]
pub(super) struct Output {
    parts: VecDeque<Bytes>,
    len_bytes: usize,
}

impl Output {
    pub(super) fn push(&mut self, frame: Frame) {
        for part in frame.parts {
            if !part.is_empty() {
                self.len_bytes += part.len();
                self.parts.push_back(part);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    pub(super) fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    pub(super) fn fill_slices<'s>(&'s self, slices: &mut [IoSlice<'s>]) -> usize {
        let mut n = 0;
        for (slot, part) in slices.iter_mut().zip(&self.parts) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }

    /// Drops `n` written bytes from the front.
    pub(super) fn advance(&mut self, mut n: usize) {
        self.len_bytes -= n;
        while n > 0 {
            let Some(front) = self.parts.front_mut() else {
                return;
            };
            if front.len() <= n {
                n -= front.len();
                self.parts.pop_front();
            } else {
                bytes::Buf::advance(front, n);
                n = 0;
            }
        }
    }
}
