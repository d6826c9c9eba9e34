//! The daemon's standard error, kept writable whatever happens to its reader.
//!
//! A server ignores SIGPIPE (its sockets need it), so once whatever reads its standard
//! error goes away (`larch serve 2>&1 | head`, a closed terminal, a log collector
//! restarted), every later write to it fails with EPIPE, and `eprintln!` panics when a
//! write fails: in whichever thread logs next. That was the signal task's "shutting down"
//! (the daemon then ignored SIGTERM and SIGINT for ever), and could have been the TXG
//! syncer's or a connection's. [`StderrShield`] puts a pipe in place of descriptor 2 and
//! drains it on a thread of its own into the original, dropping whatever the original no
//! longer takes: the daemon's writes to standard error always succeed (they block, as
//! before, only while the original's reader is slow).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::Duration;

/// How long dropping the shield waits for the relay to write out what is left (a reader
/// that stalls must not stop the daemon from exiting).
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// Standard error through a relay (see the module documentation); dropping it puts the
/// original back and waits for the relay to write out what is left.
pub struct StderrShield {
    original: OwnedFd,
    drained: mpsc::Receiver<()>,
}

impl StderrShield {
    /// Puts the relay in place. On an error nothing has changed.
    pub fn install() -> io::Result<StderrShield> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two descriptors on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: two new descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: duplicates descriptor 2 (a new descriptor, or -1).
        let original = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        if original < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor that nothing else owns.
        let original = unsafe { OwnedFd::from_raw_fd(original) };
        let target = original.try_clone()?;
        let (done, drained) = mpsc::channel();
        std::thread::Builder::new()
            .name("larch-stderr".into())
            .spawn(move || {
                relay(File::from(read), File::from(target));
                let _ = done.send(());
            })?;
        // SAFETY: makes descriptor 2 the pipe's write end (atomically: a write meanwhile
        // goes to one or the other).
        if unsafe { libc::dup2(write.as_raw_fd(), 2) } < 0 {
            // `write` closes on return, and the relay, at its end, stops.
            return Err(io::Error::last_os_error());
        }
        Ok(StderrShield { original, drained })
    }
}

/// Copies `from` to `to` until `from` ends; once `to` fails, goes on reading and drops.
fn relay(mut from: File, mut to: File) {
    let mut buf = vec![0u8; 16 << 10];
    let mut writable = true;
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if writable && to.write_all(&buf[..n]).is_err() {
                    writable = false;
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

impl Drop for StderrShield {
    fn drop(&mut self) {
        // Descriptor 2 is the original again; the pipe's last write end closes with it,
        // and the relay ends once it has written what was left.
        // SAFETY: both descriptors are open.
        unsafe { libc::dup2(self.original.as_raw_fd(), 2) };
        let _ = self.drained.recv_timeout(DRAIN_WAIT);
    }
}
