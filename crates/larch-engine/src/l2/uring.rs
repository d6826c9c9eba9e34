//! Cache-device reads through io_uring, without a thread hand-off per read.
//!
//! The task that needs a block submits the read itself (one `io_uring_enter`) and awaits a
//! one-shot channel. The ring signals completions on an eventfd that sits in tokio's
//! reactor; one reaper task drains the completion queue and answers the channels, so a
//! completion wakes the waiting task on the worker that polled the reactor. The blocking
//! path this replaces handed every L2 hit to a pool thread and back (two futex wake-ups
//! and two context switches per read).
//!
//! Two kinds of ring ([`UringReader::shared`], [`UringReader::local`]). A shared ring
//! takes reads from every worker of a multi-threaded runtime: the kernel runs each
//! completion on the thread that submitted the read (an interrupt or a wake-up of that
//! thread), which then signals the eventfd, whose wake-up may land on yet another worker.
//! A thread that runs a runtime of its own (the daemon serves each NBD connection on one)
//! gets a local ring, set up like fio's (`SINGLE_ISSUER | DEFER_TASKRUN`): the kernel
//! queues its completions until that thread asks for them, the eventfd wakes that same
//! thread, and the read's submission, completion and reply stay on one thread, with no
//! interrupt of a running thread. [`local_reader`] keeps one per thread.
//!
//! Safety of the buffers: each read's buffer lives in the reader's slot table from
//! submission until its completion is reaped, whether or not the waiting task is still
//! there. Dropping the reader waits for every read in flight first.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use io_uring::{IoUring, opcode, types};
use larch_io::{AlignedBuf, BlockDevice};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

/// Reads in flight at most; further reads take the blocking path until some complete.
pub const URING_DEPTH: u32 = 256;

/// The outcome of one read: the kernel's result (bytes read, or a negative errno) and the
/// buffer.
type Completion = (i32, AlignedBuf);

/// Most bytes of read buffers kept for reuse (by all rings together): a few hundred reads' worth is
/// enough to absorb the churn of a hit rate in the hundreds of thousands per second.
const POOL_MAX_BYTES: usize = 4 << 20;

/// Read buffers given back by the blocks that used them (evicted from the ARC, replies
/// sent), for the next reads of the same size: an aligned allocation and its free cost
/// more than the rest of a read's bookkeeping together.
#[derive(Default)]
struct BufPool {
    free: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// Kept buffers by length (volumes have few block sizes).
    by_len: Vec<(usize, Vec<AlignedBuf>)>,
    bytes: usize,
}

impl BufPool {
    /// A buffer of `len` bytes: a kept one (holding an earlier block's bytes), or a new one
    /// whose bytes are uninitialised.
    ///
    /// # Safety
    /// As [`AlignedBuf::uninit`]: nothing reads the buffer before a read fills all `len`
    /// bytes.
    unsafe fn take(&self, len: usize) -> AlignedBuf {
        let kept = {
            let mut free = self.free.lock().expect("pool lock");
            let kept = free
                .by_len
                .iter_mut()
                .find(|(l, _)| *l == len)
                .and_then(|(_, bufs)| bufs.pop());
            if kept.is_some() {
                free.bytes -= len;
            }
            kept
        };
        // SAFETY: the caller's contract.
        kept.unwrap_or_else(|| unsafe { AlignedBuf::uninit(len) })
    }

    fn give(&self, buf: AlignedBuf) {
        let len = buf.len();
        let mut free = self.free.lock().expect("pool lock");
        if free.bytes + len > POOL_MAX_BYTES {
            return;
        }
        free.bytes += len;
        match free.by_len.iter_mut().find(|(l, _)| *l == len) {
            Some((_, bufs)) => bufs.push(buf),
            None => free.by_len.push((len, vec![buf])),
        }
    }
}

/// The one pool every ring's reads take their buffers from and give them back to, so that
/// a ring per connection thread keeps no more than [`POOL_MAX_BYTES`] in all.
static SHARED_POOL: std::sync::LazyLock<Arc<BufPool>> = std::sync::LazyLock::new(Arc::default);

/// A read's bytes, owned by the `Bytes` handed out: the buffer goes back to its reader's
/// pool when the last reference is dropped.
struct PooledBuf {
    buf: Option<AlignedBuf>,
    pool: Arc<BufPool>,
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or_default()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give(buf);
        }
    }
}

struct Pending {
    buf: AlignedBuf,
    /// Keeps the device (and so the descriptor the kernel reads) open until completion.
    _device: Arc<dyn BlockDevice>,
    done: oneshot::Sender<Completion>,
}

struct Inner {
    ring: IoUring,
    slots: Vec<Option<Pending>>,
    free: Vec<u32>,
    /// A local ring: completions wait in the kernel until this thread asks for them.
    deferred: bool,
}

impl Inner {
    fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes every posted completion out of the queue and frees its slot. A local ring
    /// first has the kernel post the completions it holds for this thread (a system call
    /// only when the ring's flag says some wait).
    fn reap(&mut self) -> Vec<(Pending, i32)> {
        if self.deferred && self.ring.submission().taskrun() {
            // Submits nothing (the queue is empty between calls); an error leaves the
            // completions for the next call.
            let _ = self.ring.submit();
        }
        let mut done = Vec::new();
        for cqe in self.ring.completion() {
            let Ok(index) = u32::try_from(cqe.user_data()) else {
                continue;
            };
            if let Some(pending) = self.slots.get_mut(index as usize).and_then(Option::take) {
                self.free.push(index);
                done.push((pending, cqe.result()));
            }
        }
        done
    }
}

/// One io_uring for cache-device reads, with its reaper task on the tokio runtime that
/// created it.
pub struct UringReader {
    inner: Mutex<Inner>,
    event: Arc<AsyncFd<OwnedFd>>,
    pool: Arc<BufPool>,
    /// Cleared when the reaper task ends (its runtime shut down): reads must then take the
    /// blocking path, as nothing would answer them.
    alive: Arc<AtomicBool>,
    /// The runtime the reaper runs on.
    runtime: tokio::runtime::Id,
}

/// Clears the reader's `alive` flag when the reaper task is dropped.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl UringReader {
    /// A shared ring of [`URING_DEPTH`] entries, with its reaper spawned on `runtime` (the
    /// current one if `None`), which must outlive the reads: any thread may submit.
    /// Fails outside a runtime, or where io_uring is unavailable (old kernels,
    /// `kernel.io_uring_disabled`, seccomp filters).
    pub fn shared(runtime: Option<&tokio::runtime::Handle>) -> io::Result<Arc<UringReader>> {
        let ring = IoUring::builder()
            .setup_cqsize(URING_DEPTH * 2)
            .build(URING_DEPTH)?;
        let handle = match runtime {
            Some(handle) => handle.clone(),
            None => tokio::runtime::Handle::try_current().map_err(io::Error::other)?,
        };
        UringReader::with_ring(ring, false, handle)
    }

    /// A ring for this thread alone, whose reaper runs on the current runtime: only for a
    /// single-threaded runtime, so that every submission and every reap happen on this
    /// thread (the kernel refuses the others). Fails as [`UringReader::shared`] does, and
    /// on kernels older than 6.1 (no `DEFER_TASKRUN`).
    pub fn local() -> io::Result<Arc<UringReader>> {
        let ring = IoUring::builder()
            .setup_cqsize(URING_DEPTH * 2)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(URING_DEPTH)?;
        let handle = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        UringReader::with_ring(ring, true, handle)
    }

    fn with_ring(
        ring: IoUring,
        deferred: bool,
        handle: tokio::runtime::Handle,
    ) -> io::Result<Arc<UringReader>> {
        // SAFETY: eventfd returns a new descriptor or -1; it is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh descriptor nothing else owns.
        let event_fd = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.submitter().register_eventfd(event_fd.as_raw_fd())?;
        let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _entered = handle.enter();
            // SAFETY: the AsyncFd owns the descriptor, which stays open while it lives.
            unsafe { AsyncFd::register_with_interest(event_fd, Interest::READABLE) }
        }));
        // register panics on a runtime built without I/O: fall back, do not crash.
        let event = match registered {
            Ok(Ok(event)) => Arc::new(event),
            Ok(Err(err)) => return Err(err.into_parts().1),
            Err(_) => return Err(io::Error::other("the tokio runtime has no I/O driver")),
        };
        let alive = Arc::new(AtomicBool::new(true));
        let reader = Arc::new(UringReader {
            inner: Mutex::new(Inner {
                ring,
                slots: (0..URING_DEPTH).map(|_| None).collect(),
                free: (0..URING_DEPTH).rev().collect(),
                deferred,
            }),
            event: Arc::clone(&event),
            pool: Arc::clone(&SHARED_POOL),
            alive: Arc::clone(&alive),
            runtime: handle.id(),
        });
        handle.spawn(reap_forever(
            event,
            Arc::downgrade(&reader),
            AliveGuard(alive),
        ));
        Ok(reader)
    }

    /// Whether completions are still being reaped.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Reads `len` bytes (a multiple of the device's alignment) at `offset` of `device`.
    /// `Ok(None)` when the ring is full or its reaper is gone, or the device has no file
    /// descriptor ([`BlockDevice::raw_fd`]): the caller reads another way. The result is
    /// the bytes read, or the error of a failed or short read.
    pub async fn read(
        &self,
        device: &Arc<dyn BlockDevice>,
        offset: u64,
        len: usize,
    ) -> io::Result<Option<Bytes>> {
        let Some(done) = self.submit(device, offset, len)? else {
            return Ok(None);
        };
        let Ok((result, buf)) = done.await else {
            // The reaper dropped the sender without answering: it is shutting down.
            return Ok(None);
        };
        // Reads that completed since are answered now, not when the reactor next runs
        // (under load the workers poll it only between batches of tasks).
        self.complete_posted();
        if result < 0 {
            return Err(io::Error::from_raw_os_error(-result));
        }
        if result as usize != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("short read: {result} of {len} bytes at {offset}"),
            ));
        }
        Ok(Some(Bytes::from_owner(PooledBuf {
            buf: Some(buf),
            pool: Arc::clone(&self.pool),
        })))
    }

    /// Queues a read and submits it (one system call per read: deferring submissions to
    /// batch reads that arrive together was measured slower), and answers the completions
    /// posted meanwhile, all under one hold of the ring's lock. `Ok(None)`: the ring is
    /// full or gone, or the submission failed (not the copy's fault: the caller reads
    /// another way; the entry stays queued, with its buffer, until a later submission
    /// completes it).
    fn submit(
        &self,
        device: &Arc<dyn BlockDevice>,
        offset: u64,
        len: usize,
    ) -> io::Result<Option<oneshot::Receiver<Completion>>> {
        if !self.is_alive() {
            return Ok(None);
        }
        let Some(fd) = device.raw_fd() else {
            return Ok(None);
        };
        let Ok(len32) = u32::try_from(len) else {
            return Ok(None);
        };
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > device.len_bytes())
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("read of {len} bytes at {offset} is past the device's end"),
            ));
        }
        // Allocations happen before the lock: it is shared by every reader and the reaper.
        // SAFETY: the bytes are handed out (`read`) only after a read filled all `len` of
        // them; a failed or short read's buffer is only dropped.
        let mut buf = unsafe { self.pool.take(len) };
        let (done, receiver) = oneshot::channel();
        let mut inner = self.inner.lock().expect("uring lock");
        let Some(index) = inner.free.pop() else {
            return Ok(None);
        };
        let sqe = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len32)
            .offset(offset)
            .build()
            .user_data(u64::from(index));
        // The buffer moves into the slot; its heap memory (what the kernel writes) stays put.
        inner.slots[index as usize] = Some(Pending {
            buf,
            _device: Arc::clone(device),
            done,
        });
        // SAFETY: the entry's buffer and descriptor stay valid until its completion is
        // reaped: both are owned by the slot, which only `reap` (after the completion) or
        // Drop (after waiting for every completion) empties.
        let pushed = unsafe { inner.ring.submission().push(&sqe) };
        if pushed.is_err() {
            // Cannot happen with at most URING_DEPTH slots, but never leave a slot behind.
            inner.slots[index as usize] = None;
            inner.free.push(index);
            return Ok(None);
        }
        let submitted = inner.ring.submit();
        // Completions the reaper has not seen yet are answered now: their tasks need not
        // wait for the eventfd's wake-up to go through the reactor.
        let finished = inner.reap();
        drop(inner);
        answer(finished);
        Ok(submitted.is_ok().then_some(receiver))
    }

    /// Submits every queued read. On failure the entries stay queued (a later call
    /// submits them) and keep their slots, so no buffer is freed under a read that did
    /// start; the caller reads another way.
    fn submit_queued(&self) -> io::Result<()> {
        let mut inner = self.inner.lock().expect("uring lock");
        if inner.ring.submission().is_empty() {
            return Ok(());
        }
        inner.ring.submit().map(drop)
    }

    fn complete_posted(&self) {
        let finished = self.inner.lock().expect("uring lock").reap();
        answer(finished);
    }
}

/// Hands reaped completions to their readers (outside the ring's lock: it wakes them).
fn answer(finished: Vec<(Pending, i32)>) {
    for (pending, result) in finished {
        // A dropped receiver means the reader gave up waiting; the buffer is freed here.
        let _ = pending.done.send((result, pending.buf));
    }
}

impl Drop for UringReader {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        // The kernel may still write into buffers of reads in flight: wait for them all.
        while inner.in_flight() > 0 {
            // (A local ring's completions are posted by this wait: the reader lives on
            // the thread that owns it.)
            match inner.ring.submit_and_wait(1) {
                Ok(_) => drop(inner.reap()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Cannot wait: leak the buffers rather than free memory the kernel
                    // may still write.
                    std::mem::forget(std::mem::take(&mut inner.slots));
                    break;
                }
            }
        }
        // Wake the reaper so that it sees the reader gone and ends.
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to a descriptor we own.
        unsafe {
            libc::write(
                self.event.get_ref().as_raw_fd(),
                (&one as *const u64).cast(),
                8,
            );
        }
    }
}

async fn reap_forever(event: Arc<AsyncFd<OwnedFd>>, reader: Weak<UringReader>, _alive: AliveGuard) {
    loop {
        let Ok(mut ready) = event.readable().await else {
            return;
        };
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a valid buffer from a descriptor we own. The
        // descriptor is non-blocking: EAGAIN (nothing to read) is fine.
        unsafe {
            libc::read(event.get_ref().as_raw_fd(), count.as_mut_ptr().cast(), 8);
        }
        ready.clear_ready();
        let Some(reader) = reader.upgrade() else {
            return;
        };
        // Reads left queued by a failed submission get another chance.
        let _ = reader.submit_queued();
        reader.complete_posted();
    }
}

thread_local! {
    /// This thread's local ring ([`local_reader`]).
    static LOCAL: std::cell::RefCell<Option<Arc<UringReader>>> =
        const { std::cell::RefCell::new(None) };
    /// Setting a local ring up failed on this thread: not tried again.
    static LOCAL_REFUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The local ring of this thread, set up on first use (again if its runtime ended), when
/// the current runtime is single-threaded; `None` on other runtimes (use a shared ring),
/// and on a thread where setting one up failed (kernels before 6.1: no `DEFER_TASKRUN`).
pub fn local_reader() -> Option<Arc<UringReader>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread
        || LOCAL_REFUSED.get()
    {
        return None;
    }
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        // Only a ring whose reaper runs on the runtime driving this thread now: a thread may
        // run another runtime while its ring's still exists, undriven.
        if let Some(reader) = local
            .as_ref()
            .filter(|r| r.is_alive() && r.runtime == runtime.id())
        {
            return Some(Arc::clone(reader));
        }
        // The old reader (its runtime ended or is not this one) waits for its reads as it
        // drops, if nothing else holds it.
        *local = None;
        match UringReader::local() {
            Ok(reader) => {
                *local = Some(Arc::clone(&reader));
                Some(reader)
            }
            Err(_) => {
                LOCAL_REFUSED.set(true);
                None
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local ring's completion wakes its own thread through the eventfd, and the read
    /// returns the file's bytes (the kernel holds such completions until asked: if the
    /// eventfd stayed quiet, the read would wait for ever and the test time out).
    #[test]
    fn a_local_ring_reads_and_its_thread_is_woken() {
        let dir = std::env::temp_dir().join(format!("larch-uring-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dev");
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let device: Arc<dyn BlockDevice> = Arc::new(
                larch_io::FileDevice::open(&path, &larch_io::FileOptions::default()).unwrap(),
            );
            let reader = local_reader().expect(
                "a current-thread runtime gets a local ring (io_uring with deferred completions)",
            );
            assert!(reader.inner.lock().unwrap().deferred);
            let again = local_reader().unwrap();
            assert!(Arc::ptr_eq(&reader, &again), "one ring per thread");
            for round in 0..50u64 {
                let offset = (round * 4096) % (60 * 1024);
                let read = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    reader.read(&device, offset, 4096),
                )
                .await
                .expect("the completion woke the thread")
                .unwrap()
                .expect("submitted");
                assert_eq!(&read[..], &data[offset as usize..offset as usize + 4096]);
            }
        });
        // A multi-threaded runtime gets none: its tasks move between threads.
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        multi.block_on(async { assert!(local_reader().is_none()) });
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn read_buffers_come_back_to_the_pool_up_to_its_cap() {
        let pool = Arc::new(BufPool::default());
        // SAFETY: the test fills the buffer before reading it.
        let mut first = unsafe { pool.take(8192) };
        let addr = first.as_mut_ptr();
        // SAFETY: writes all 8192 bytes of the buffer.
        unsafe { std::ptr::write_bytes(addr, 7, 8192) };
        let bytes = Bytes::from_owner(PooledBuf {
            buf: Some(first),
            pool: Arc::clone(&pool),
        });
        let copy = bytes.slice(100..200);
        drop(bytes);
        assert_eq!(pool.free.lock().unwrap().bytes, 0, "a slice still holds it");
        assert!(copy.iter().all(|&b| b == 7));
        drop(copy);
        assert_eq!(
            pool.free.lock().unwrap().bytes,
            8192,
            "back once unreferenced"
        );
        // SAFETY: not read.
        let mut other = unsafe { pool.take(4096) };
        assert_ne!(other.as_mut_ptr(), addr, "another size allocates");
        // SAFETY: not read.
        let mut again = unsafe { pool.take(8192) };
        assert_eq!(again.as_mut_ptr(), addr, "the same size reuses it");
        assert_eq!(pool.free.lock().unwrap().bytes, 0);
        // The cap: buffers beyond it are freed, not kept.
        for _ in 0..(POOL_MAX_BYTES / 8192 + 10) {
            pool.give(AlignedBuf::zeroed(8192));
        }
        assert_eq!(pool.free.lock().unwrap().bytes, POOL_MAX_BYTES);
        pool.give(other);
        assert_eq!(pool.free.lock().unwrap().bytes, POOL_MAX_BYTES);
        drop(again);
    }
}
