//! The socket watch of an idle connection: a moment of polling before its thread parks
//! (see [`Spin`]), and the read half that takes what a watch read off the socket
//! ([`SpunRead`]).

use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};

use super::conn::BoxedRead;

/// How long an idle connection watches its socket before parking.
const SPIN_FOR: Duration = Duration::from_micros(50);
/// After a spin that saw nothing, this many idle moments pass without one.
const SPIN_BACKOFF: u32 = 64;
/// After this many yielding watches in a row saw nothing while no other connection had
/// work, [`SPIN_BACKOFF`] idle moments pass without one.
const YIELD_MISSES: u32 = 8;
/// Idle moments after a burst of more than one request (a client that pipelines) in
/// which the connection does not yield.
const PIPELINED_MEMORY: u32 = 1024;
/// Most `sched_yield` calls in one yielding watch (it ends sooner if [`SPIN_FOR`] passes).
const MAX_YIELDS: u32 = 4;
/// Bytes a watch reads off a bare socket at once: a request header and a small write.
const SPUN_BYTES: usize = 16 * 1024;

/// A moment of polling a connection's socket when it falls idle (nothing read, running
/// or to write), before its thread parks in the reactor. A client at queue depth 1 sends
/// its next request a few microseconds after it reads a reply; a thread that parks
/// meanwhile is woken by the kernel, and on a virtual machine a wake-up that lands on a
/// halted vCPU costs an interrupt and a VM exit, more than the request itself (measured:
/// BENCHMARKS.md). The watch takes one of two forms:
///
/// - **Yield**, when the client waits for each reply (queue depth 1: no burst of more
///   than one request between two of the last [`PIPELINED_MEMORY`] idle moments), the
///   connection has a thread of its own and the export allows it (the `nbd_idle_yield`
///   tunable): looks at the socket for up to [`SPIN_FOR`], calling `sched_yield`
///   between looks, so any runnable thread (another connection's, the client's on the
///   same machine, the syncer) takes the CPU first.
///   The thread stays runnable, so the request finds it awake (no wake-up, no interrupt),
///   and the client's own wake-up can land on a CPU that is not halted. Any number of
///   connections may yield at once; while other connections have work a watch yields at
///   most [`MAX_YIELDS`] times and a miss has no back-off (one costs a few yields, and a
///   back-off there lost much of the gain); otherwise, after [`YIELD_MISSES`] watches in
///   a row saw nothing, the next [`SPIN_BACKOFF`] idle moments have none.
/// - **Spin**, otherwise, and only while no other connection has work: busy-polling for
///   up to [`SPIN_FOR`], one connection per spare core at a time; a spin that saw nothing
///   skips the next [`SPIN_BACKOFF`] idle moments.
///
/// Neither runs on a single core. Measured (BENCHMARKS.md, "Issue 18: the socket watch
/// yields"; 2 vCPUs): with the yield, 1.2-1.3x the ARC hits of one QD1 client, 1.1x its
/// L2 hits, 1.2-2x the ARC hits of 4-64 of them, a median read of 9 µs instead of up to
/// 290, but a p99 of 1.5-2.7 ms at 8-16 clients (more threads stay runnable, so a woken
/// one waits longer for a CPU); a pipelining client gained nothing from it and lost up
/// to a quarter of its rate, hence the spin for it. A watch costs at most [`SPIN_FOR`]
/// of CPU per idle moment (a yielding one mostly CPU that would otherwise idle), and an
/// idle moment follows a burst of replies, so a connection with no requests costs
/// nothing.
pub(super) struct Spin {
    fd: RawFd,
    spinners: Arc<Spinners>,
    skip: u32,
    /// Whether this connection is counted in `Spinners::busy`.
    busy: bool,
    /// Whether the connection runs on a thread of its own, the only place a watch may
    /// yield (on a shared runtime, a watch holds up the tasks behind it on its worker,
    /// so it only spins, when nothing else has work).
    may_yield: bool,
    /// Requests read since the last idle moment.
    burst: u32,
    /// Idle moments left before a client seen pipelining counts as at queue depth 1.
    pipelined_for: u32,
    /// Watches in a row that saw nothing.
    misses: u32,
}

/// The server's count of connections spinning now, how many may, and how many
/// connections have requests running or replies to write (a connection spins only when
/// no other has: it would hold up their work on its thread).
pub(super) struct Spinners {
    now: AtomicUsize,
    max: usize,
    busy: AtomicUsize,
}

impl Spinners {
    pub(super) fn new() -> Spinners {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Spinners {
            now: AtomicUsize::new(0),
            max: cores.saturating_sub(1),
            busy: AtomicUsize::new(0),
        }
    }
}

impl Spin {
    pub(super) fn new(fd: RawFd, spinners: Arc<Spinners>, own_thread: bool) -> Spin {
        Spin {
            fd,
            spinners,
            skip: 0,
            busy: false,
            may_yield: own_thread,
            burst: 0,
            pipelined_for: 0,
            misses: 0,
        }
    }

    /// Records that a request was read (the burst [`Spin::wait_briefly`] looks at).
    pub(super) fn note_request(&mut self) {
        self.burst = self.burst.saturating_add(1);
    }

    /// Records whether the connection has work (requests running, replies to write).
    pub(super) fn set_busy(&mut self, busy: bool) {
        if busy != self.busy {
            self.busy = busy;
            if busy {
                self.spinners.busy.fetch_add(1, Ordering::AcqRel);
            } else {
                self.spinners.busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Watches the socket for up to [`SPIN_FOR`] (spinning or yielding, see [`Spin`];
    /// `yield_allowed`: the export's say); true if data (or the end of the stream)
    /// arrived meanwhile. On a bare socket the watch reads what arrives into `read`,
    /// which hands it out before reading the socket again (saving the reactor's turn and
    /// a second read); otherwise it only peeks.
    pub(super) fn wait_briefly(&mut self, read: &mut SpunRead, yield_allowed: bool) -> bool {
        let burst = std::mem::take(&mut self.burst);
        if read.holds_bytes() {
            return true;
        }
        let s = &self.spinners;
        if s.max == 0 {
            return false;
        }
        // A client at queue depth 1 never has a second request out before its reply: a
        // burst of more proves it pipelines, for a while.
        if burst > 1 {
            self.pipelined_for = PIPELINED_MEMORY;
        } else {
            self.pipelined_for = self.pipelined_for.saturating_sub(1);
        }
        let yielding = self.may_yield && yield_allowed && self.pipelined_for == 0;
        let others_busy = s.busy.load(Ordering::Acquire) > 0;
        if others_busy && !yielding {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        let spinning = !yielding;
        if spinning && s.now.fetch_add(1, Ordering::AcqRel) >= s.max {
            s.now.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let started = std::time::Instant::now();
        let mut arrived = false;
        let mut byte = 0u8;
        // Read into the reader's room on a bare socket, else peek at one byte.
        let (into, len, flags) = if read.bare {
            (read.spun.as_mut_ptr(), read.spun.len(), libc::MSG_DONTWAIT)
        } else {
            (&mut byte as *mut u8, 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
        };
        let mut yields = 0;
        while started.elapsed() < SPIN_FOR {
            // SAFETY: receives at most `len` bytes into a valid buffer of that length
            // that nothing else uses meanwhile; the descriptor belongs to this
            // connection's socket, open while its halves live (they outlive self).
            let n = unsafe { libc::recv(self.fd, into.cast(), len, flags) };
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                // The end of the stream (0) or an error is left for the socket's next
                // read to report again; only bytes are kept.
                if read.bare {
                    read.at = 0;
                    read.end = usize::try_from(n).unwrap_or(0);
                }
                arrived = true;
                break;
            }
            if yielding {
                if others_busy && yields == MAX_YIELDS {
                    break;
                }
                yields += 1;
                // SAFETY: sched_yield takes no arguments and touches no memory of ours.
                unsafe { libc::sched_yield() };
            } else {
                std::hint::spin_loop();
            }
        }
        if spinning {
            s.now.fetch_sub(1, Ordering::AcqRel);
        }
        if arrived {
            self.misses = 0;
        } else if spinning {
            self.skip = SPIN_BACKOFF;
        } else if !others_busy {
            // A yielding watch with nothing else to run kept its CPU for SPIN_FOR: it
            // backs off after a run of them. One among busy connections cost a few
            // yields; backing off there lost much of the gain.
            self.misses += 1;
            if self.misses == YIELD_MISSES {
                self.misses = 0;
                self.skip = SPIN_BACKOFF;
            }
        }
        arrived
    }
}

/// A connection's read half, with the bytes a spin read off its socket: they are handed
/// out before the socket is read again, so the stream's order holds.
pub(super) struct SpunRead {
    inner: BoxedRead,
    /// Whether `inner` reads the socket itself with nothing buffered in front (not TLS,
    /// nothing left over from the handshake): only then may a spin read the socket.
    bare: bool,
    /// Room for what a spin reads (empty unless bare); `at..end` not yet handed out.
    spun: Box<[u8]>,
    at: usize,
    end: usize,
}

impl SpunRead {
    pub(super) fn new(inner: BoxedRead, bare: bool) -> SpunRead {
        let room = if bare { SPUN_BYTES } else { 0 };
        SpunRead {
            inner,
            bare,
            spun: vec![0; room].into_boxed_slice(),
            at: 0,
            end: 0,
        }
    }

    /// Whether bytes a spin read wait to be handed out.
    pub(super) fn holds_bytes(&self) -> bool {
        self.at < self.end
    }
}

impl AsyncRead for SpunRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.holds_bytes() {
            let n = (this.end - this.at).min(buf.remaining());
            buf.put_slice(&this.spun[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        self.set_busy(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use tokio::io::AsyncReadExt;

    /// A reader the spin may only peek for (as under TLS).
    fn peeking() -> SpunRead {
        SpunRead::new(Box::new(tokio::io::empty()), false)
    }

    fn spinners(max: usize) -> Arc<Spinners> {
        Arc::new(Spinners {
            now: AtomicUsize::new(0),
            max,
            busy: AtomicUsize::new(0),
        })
    }

    #[test]
    fn a_spin_sees_what_waits_and_backs_off_after_a_miss() {
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        let shared = spinners(1);
        let mut spin = Spin::new(server.as_raw_fd(), Arc::clone(&shared), true);
        let mut read = peeking();
        // The export says no yield: the watch spins.
        assert!(!spin.wait_briefly(&mut read, false), "nothing sent yet");
        assert_eq!(spin.skip, SPIN_BACKOFF, "a spin that saw nothing backs off");
        client.write_all(b"x").unwrap();
        for _ in 0..SPIN_BACKOFF {
            assert!(!spin.wait_briefly(&mut read, false), "backing off");
        }
        assert!(spin.wait_briefly(&mut read, false), "the byte is waiting");
        assert_eq!(
            shared.now.load(Ordering::Acquire),
            0,
            "the slot is given back"
        );
        // Peeking leaves the byte for the real read.
        let mut byte = [0u8; 1];
        std::io::Read::read_exact(&mut &server, &mut byte).unwrap();
        assert_eq!(&byte, b"x");
        // The stream's end counts as arrived too (the reader then sees it).
        drop(client);
        assert!(spin.wait_briefly(&mut read, false));
    }

    #[test]
    fn a_queue_depth_1_client_yields_with_no_slot_and_backs_off_after_a_run_of_lone_misses() {
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        let shared = spinners(1);
        let mut spin = Spin::new(server.as_raw_fd(), Arc::clone(&shared), true);
        let mut other = Spin::new(server.as_raw_fd(), Arc::clone(&shared), true);
        let mut read = peeking();
        // A third connection holds the only spinning slot: a yielding watch needs none.
        shared.now.store(1, Ordering::Release);
        for miss in 1..YIELD_MISSES {
            spin.note_request();
            assert!(!spin.wait_briefly(&mut read, true), "miss {miss}");
            assert_eq!(spin.skip, 0, "no back-off after {miss} misses");
        }
        client.write_all(b"x").unwrap();
        assert!(spin.wait_briefly(&mut read, true), "sees the byte");
        std::io::Read::read_exact(&mut &server, &mut [0u8; 1]).unwrap();
        for _ in 0..YIELD_MISSES {
            assert!(!spin.wait_briefly(&mut read, true));
        }
        assert_eq!(spin.skip, SPIN_BACKOFF, "a run of misses backs off");
        spin.skip = 0;
        // While others work, a miss costs a few yields and has no back-off.
        other.set_busy(true);
        for _ in 0..2 * YIELD_MISSES {
            assert!(!spin.wait_briefly(&mut read, true));
        }
        assert_eq!(spin.skip, 0, "no back-off among busy connections");
        client.write_all(b"x").unwrap();
        assert!(spin.wait_briefly(&mut read, true), "sees the byte");
        std::io::Read::read_exact(&mut &server, &mut [0u8; 1]).unwrap();
        assert_eq!(
            shared.now.load(Ordering::Acquire),
            1,
            "no slot taken or given"
        );
        client.write_all(b"x").unwrap();
        spin.note_request();
        spin.note_request();
        assert!(
            !spin.wait_briefly(&mut read, true),
            "a client that pipelined does not yield while others work"
        );
        for moment in 1..PIPELINED_MEMORY {
            spin.note_request();
            assert!(
                !spin.wait_briefly(&mut read, true),
                "nor for a while after ({moment} bursts of one since)"
            );
        }
        assert!(
            spin.wait_briefly(&mut read, true),
            "then it counts as at queue depth 1 again"
        );
        assert!(
            !spin.wait_briefly(&mut read, false),
            "nor while the export says no"
        );
        other.set_busy(false);
        spin.note_request();
        spin.note_request();
        assert!(
            !spin.wait_briefly(&mut read, true),
            "alone, a client that pipelined spins, which needs the slot"
        );
        shared.now.store(0, Ordering::Release);
        assert!(spin.wait_briefly(&mut read, true), "and spins with it");
        drop(other);
        assert_eq!(
            shared.busy.load(Ordering::Acquire),
            0,
            "dropping releases it"
        );
    }

    #[test]
    fn no_watch_while_another_connection_works_on_a_shared_runtime_or_without_a_spare_core() {
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        client.write_all(b"x").unwrap();
        let shared = spinners(1);
        let mut task = Spin::new(server.as_raw_fd(), Arc::clone(&shared), false);
        let mut other = Spin::new(server.as_raw_fd(), Arc::clone(&shared), true);
        let mut read = peeking();
        other.set_busy(true);
        assert!(
            !task.wait_briefly(&mut read, true),
            "a task on a shared runtime does not hold its worker while others work"
        );
        other.set_busy(false);
        assert!(
            task.wait_briefly(&mut read, true),
            "it spins when nobody else works"
        );
        let lone = spinners(0);
        let mut single = Spin::new(server.as_raw_fd(), Arc::clone(&lone), true);
        let mut busy_there = Spin::new(server.as_raw_fd(), lone, true);
        assert!(
            !single.wait_briefly(&mut read, true),
            "a single core never yields"
        );
        assert!(!single.wait_briefly(&mut read, false), "nor spins");
        busy_there.set_busy(true);
        assert!(
            !single.wait_briefly(&mut read, true),
            "nor yields while others work"
        );
    }

    #[tokio::test]
    async fn on_a_bare_socket_the_spin_reads_what_arrives_and_the_reader_hands_it_out_first() {
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        server.set_nonblocking(true).unwrap();
        let fd = server.as_raw_fd();
        let server = tokio::net::UnixStream::from_std(server).unwrap();
        let mut read = SpunRead::new(Box::new(server), true);
        let mut spin = Spin::new(fd, spinners(1), true);
        client.write_all(b"first").unwrap();
        assert!(spin.wait_briefly(&mut read, true));
        assert!(read.holds_bytes(), "the spin read the bytes itself");
        client.write_all(b" second").unwrap();
        assert!(
            spin.wait_briefly(&mut read, true),
            "bytes held count as arrived, and the spin reads no more over them"
        );
        let mut got = [0u8; 12];
        read.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"first second", "held bytes first, then the socket's");
        assert!(!read.holds_bytes());
        // The end of the stream is left for the reader to see.
        drop(client);
        assert!(spin.wait_briefly(&mut read, true));
        assert!(!read.holds_bytes());
        let mut rest = Vec::new();
        read.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
}
