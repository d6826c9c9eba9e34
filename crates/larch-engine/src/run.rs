//! What the engine's parts share to run, and nothing else: the shutdown signal with the
//! wake-up of threads sleeping until their next round ([`Lifecycle`]), the runtime that
//! blocking I/O and prefetches run on ([`Background`]), and the block generations
//! ([`Generations`]). Each part holds the ones it uses; none of them knows a part.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lock::RankedMutex;

/// Whether the engine is stopping, and whether its syncer still runs.
pub(crate) struct Lifecycle {
    shutdown: AtomicBool,
    /// Wakes threads sleeping until their next round (feeders) at shutdown.
    wake: (RankedMutex<()>, Condvar),
    syncer_done: AtomicBool,
}

impl Lifecycle {
    pub(crate) fn new() -> Lifecycle {
        Lifecycle {
            shutdown: AtomicBool::new(false),
            wake: (RankedMutex::leaf(()), Condvar::new()),
            syncer_done: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// Starts the shutdown and wakes every thread sleeping in
    /// [`Lifecycle::sleep_unless_shutdown`].
    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        let _guard = self.wake.0.lock();
        self.wake.1.notify_all();
    }

    /// Sleeps for `wait`, or until shutdown begins.
    pub(crate) fn sleep_unless_shutdown(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        let mut guard = self.wake.0.lock();
        while !self.is_shutting_down() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            guard = guard.wait_timeout(&self.wake.1, deadline - now);
        }
    }

    pub(crate) fn syncer_running(&self) -> bool {
        !self.syncer_done.load(Ordering::Acquire)
    }

    /// The syncer's loop ended (however: a panic too).
    pub(crate) fn syncer_ended(&self) {
        self.syncer_done.store(true, Ordering::Release);
    }
}

/// The runtime blocking I/O (backing-store reads and writes, cache-device reads without
/// io_uring) and prefetch reads run on, once set ([`Background::set`]); before, the
/// caller's.
#[derive(Default)]
pub(crate) struct Background {
    runtime: OnceLock<tokio::runtime::Handle>,
}

impl Background {
    /// Runs the background work on `runtime` from now on; a second call changes nothing.
    pub(crate) fn set(&self, runtime: tokio::runtime::Handle) {
        let _ = self.runtime.set(runtime);
    }

    /// The runtime set, if any.
    pub(crate) fn runtime(&self) -> Option<&tokio::runtime::Handle> {
        self.runtime.get()
    }

    /// Runs `work` on the blocking pool.
    pub(crate) fn spawn_blocking<F, R>(&self, work: F) -> tokio::task::JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        match self.runtime.get() {
            Some(runtime) => runtime.spawn_blocking(work),
            None => tokio::task::spawn_blocking(work),
        }
    }

    /// Runs `task` in the background.
    pub(crate) fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.runtime.get() {
            Some(runtime) => runtime.spawn(task),
            None => tokio::spawn(task),
        }
    }
}

/// The generations blocks are given when they change (writes) or enter the ARC.
/// Generations only need to differ from those of older copies of the same block:
/// starting from the wall clock in µs keeps them above any earlier run's.
pub(crate) struct Generations {
    next: AtomicU64,
}

impl Generations {
    pub(crate) fn new() -> Generations {
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        Generations {
            next: AtomicU64::new(start),
        }
    }

    /// A generation never issued before.
    pub(crate) fn fresh(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The newest generation issued so far.
    pub(crate) fn newest(&self) -> u64 {
        self.next.load(Ordering::Relaxed).saturating_sub(1)
    }
}
