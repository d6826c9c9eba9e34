//! The two queues of a connection's task: the requests running ([`InFlight`]) and the
//! reply bytes waiting for the socket ([`Output`]).

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::OwnedSemaphorePermit;

use crate::transmission::Frame;

/// Stop reading requests while this much reply data waits for the socket (see
/// [`Output::held_bytes`]).
pub(super) const OUTPUT_HIGH_WATER_BYTES: usize = 64 << 20;
/// Stop reading requests while this much of the reply data waiting holds no payload
/// budget (replies of small READs, see [`Output::unbudgeted_bytes`]): what bounds them
/// per connection, as the budget bounds large ones over all connections.
pub(super) const OUTPUT_UNBUDGETED_BYTES: usize = 8 << 20;
/// What a queued part costs beyond its bytes: its handle in the queue (32 bytes) and,
/// for the small replies most parts are, the allocation behind it with the allocator's
/// own overhead. Counted so that many small replies stop reading too (a million simple
/// replies are 16 MiB of bytes but several times that in memory).
pub(super) const PART_OVERHEAD_BYTES: usize = 64;
/// Most buffers handed to one `writev`.
pub(super) const MAX_IOSLICES: usize = 256;

/// A finished request's reply and, for a READ, its share of the payload budget, which
/// returns only once the reply's bytes are in the socket: until then the server holds
/// them.
pub(super) struct Reply {
    pub(super) frame: Frame,
    pub(super) budget: Option<OwnedSemaphorePermit>,
}

pub(super) type RequestFuture<'a> = Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

/// The requests of one connection that are running. The connection task polls them
/// itself instead of spawning a task each: a request that completes at once (a cache
/// hit, a page-cache read) then costs no wake-up of another thread, and replies are
/// written by the same task that saw them complete. Only the requests whose wakers fired
/// are polled again, so a completion costs the same with 1 or 128 requests waiting.
#[derive(Default)]
pub(super) struct InFlight<'a> {
    running: FuturesUnordered<RequestFuture<'a>>,
    done: Vec<Reply>,
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
            while let Poll::Ready(Some(reply)) = self.running.poll_next_unpin(cx) {
                self.done.push(reply);
            }
            if self.done.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
    }

    pub(super) fn drain_done(&mut self, out: &mut Output) {
        for reply in self.done.drain(..) {
            out.push(reply.frame, reply.budget);
        }
    }
}

/// Reply bytes waiting for the socket, as a queue of buffers. Each frame is appended
/// whole, and only this connection's task writes, so replies never interleave.
#[derive(Default)]
pub(super) struct Output {
    parts: VecDeque<Bytes>,
    len_bytes: usize,
    /// Bytes ever queued: where the last queued reply ends in the connection's stream.
    queued_end: u64,
    /// The budget shares of queued READ replies, each with where its reply ends in the
    /// stream and its length; given back as the socket takes the bytes up to there.
    held: VecDeque<(u64, usize, OwnedSemaphorePermit)>,
    /// Bytes of the replies in `held`, written or not.
    budgeted_bytes: usize,
}

impl Output {
    /// Queues a reply; `budget` (a READ's share of the payload budget) is given back once
    /// the socket has taken the reply's last byte.
    pub(super) fn push(&mut self, frame: Frame, budget: Option<OwnedSemaphorePermit>) {
        let before = self.len_bytes;
        for part in frame.parts {
            if !part.is_empty() {
                self.len_bytes += part.len();
                self.queued_end += part.len() as u64;
                self.parts.push_back(part);
            }
        }
        if let Some(permit) = budget
            && self.len_bytes > 0
        {
            let len = self.len_bytes - before;
            self.budgeted_bytes += len;
            self.held.push_back((self.queued_end, len, permit));
        }
    }

    /// What [`Output::held_bytes`] counts of replies that hold no payload budget (at
    /// most; a budgeted reply's bytes count as budgeted until its last byte is taken).
    pub(super) fn unbudgeted_bytes(&self) -> usize {
        self.held_bytes().saturating_sub(self.budgeted_bytes)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// What the queue costs in memory: its bytes and an estimate of each part's overhead.
    pub(super) fn held_bytes(&self) -> usize {
        self.len_bytes + self.parts.len() * PART_OVERHEAD_BYTES
    }

    pub(super) fn fill_slices<'s>(&'s self, slices: &mut [IoSlice<'s>]) -> usize {
        let mut n = 0;
        for (slot, part) in slices.iter_mut().zip(&self.parts) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }

    /// Drops `n` written bytes from the front, and gives back the budget of the replies
    /// now wholly written.
    pub(super) fn advance(&mut self, mut n: usize) {
        self.len_bytes -= n;
        let written_end = self.queued_end - self.len_bytes as u64;
        while self
            .held
            .front()
            .is_some_and(|(end, _, _)| *end <= written_end)
        {
            if let Some((_, len, _)) = self.held.pop_front() {
                self.budgeted_bytes -= len;
            }
        }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Semaphore;

    use super::*;

    /// A READ reply's budget share stays held while any of its bytes wait, whatever
    /// queued before it, and returns with its last byte.
    #[test]
    fn a_read_replys_budget_returns_with_its_last_byte() {
        let budget = Arc::new(Semaphore::new(10));
        let mut out = Output::default();
        out.push(Frame::single(vec![0u8; 100]), None);
        let share = Arc::clone(&budget).try_acquire_many_owned(4).unwrap();
        let read_reply = Frame {
            parts: vec![Bytes::from(vec![1u8; 16]), Bytes::from(vec![2u8; 50])],
        };
        out.push(read_reply, Some(share));
        out.advance(100);
        assert_eq!(
            budget.available_permits(),
            6,
            "the READ reply is not written"
        );
        out.advance(65);
        assert_eq!(budget.available_permits(), 6, "one byte of it still waits");
        out.advance(1);
        assert_eq!(budget.available_permits(), 10);
        assert!(out.is_empty());
    }

    /// Small replies count for more than their bytes, so that a flood of them stops the
    /// connection reading before they take far more memory than the high-water mark.
    #[test]
    fn queued_parts_count_their_overhead() {
        let mut out = Output::default();
        for _ in 0..1000 {
            out.push(Frame::single(vec![0u8; 16]), None);
        }
        assert_eq!(out.held_bytes(), 1000 * (16 + PART_OVERHEAD_BYTES));
    }
}
