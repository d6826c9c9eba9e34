//! The socket spin of an idle connection: a moment of busy-polling before its thread
//! parks, for clients at queue depth 1 (see [`Spin`]).

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long an idle connection watches its socket before parking.
const SPIN_FOR: Duration = Duration::from_micros(50);
/// After a watch that saw nothing, this many idle moments pass without one.
const SPIN_BACKOFF: u32 = 64;

/// Busy-polling of a connection's socket for a moment when it falls idle (nothing read,
/// running or to write). A client at queue depth 1 sends its next request a few
/// microseconds after it reads a reply; a thread that parks meanwhile is woken by the
/// kernel, which on a virtual machine costs more than the request itself (measured:
/// BENCHMARKS.md). At most one connection per spare core spins at a time, none on a
/// single core, and a connection whose watch saw nothing skips the next
/// [`SPIN_BACKOFF`] idle moments, so idle and busy connections cost (almost) nothing.
pub(super) struct Spin {
    fd: RawFd,
    spinners: Arc<Spinners>,
    skip: u32,
    /// Whether this connection is counted in `Spinners::busy`.
    busy: bool,
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
    pub(super) fn new(fd: RawFd, spinners: Arc<Spinners>) -> Spin {
        Spin {
            fd,
            spinners,
            skip: 0,
            busy: false,
        }
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

    /// Watches the socket for up to [`SPIN_FOR`]; true if data (or the end of the stream)
    /// arrived meanwhile.
    pub(super) fn wait_briefly(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        let s = &self.spinners;
        if s.busy.load(Ordering::Acquire) > 0 {
            return false;
        }
        if s.now.fetch_add(1, Ordering::AcqRel) >= s.max {
            s.now.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let started = std::time::Instant::now();
        let mut arrived = false;
        while started.elapsed() < SPIN_FOR {
            let mut byte = 0u8;
            // SAFETY: peeks at most one byte into a valid buffer; the descriptor belongs
            // to this connection's socket, open while its halves live (they outlive self).
            let n = unsafe {
                libc::recv(
                    self.fd,
                    (&mut byte as *mut u8).cast(),
                    1,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                arrived = true;
                break;
            }
            std::hint::spin_loop();
        }
        s.now.fetch_sub(1, Ordering::AcqRel);
        if !arrived {
            self.skip = SPIN_BACKOFF;
        }
        arrived
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

    fn spinners(max: usize) -> Arc<Spinners> {
        Arc::new(Spinners {
            now: AtomicUsize::new(0),
            max,
            busy: AtomicUsize::new(0),
        })
    }

    #[test]
    fn an_idle_connection_sees_a_request_that_arrives_while_it_spins() {
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        let shared = spinners(1);
        let mut spin = Spin::new(server.as_raw_fd(), Arc::clone(&shared));
        assert!(!spin.wait_briefly(), "nothing sent yet");
        assert_eq!(
            spin.skip, SPIN_BACKOFF,
            "a watch that saw nothing backs off"
        );
        client.write_all(b"x").unwrap();
        for _ in 0..SPIN_BACKOFF {
            assert!(!spin.wait_briefly(), "backing off");
        }
        assert!(spin.wait_briefly(), "the byte is waiting");
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
        assert!(spin.wait_briefly());
    }

    #[test]
    fn no_spinning_while_another_connection_is_busy_or_without_a_spare_core() {
        let (mut client, server) = std::os::unix::net::UnixStream::pair().unwrap();
        client.write_all(b"x").unwrap();
        let shared = spinners(1);
        let mut spin = Spin::new(server.as_raw_fd(), Arc::clone(&shared));
        let mut other = Spin::new(server.as_raw_fd(), Arc::clone(&shared));
        other.set_busy(true);
        assert!(!spin.wait_briefly(), "another connection has work");
        drop(other);
        assert_eq!(
            shared.busy.load(Ordering::Acquire),
            0,
            "dropping releases it"
        );
        assert!(spin.wait_briefly());
        let mut single = Spin::new(server.as_raw_fd(), spinners(0));
        assert!(!single.wait_briefly(), "a single core never spins");
    }
}
