//! `larch`: the command-line front door. Each subcommand lives in its own module, parses
//! its arguments, prints, and returns the process exit code; errors are printed once,
//! here. The daemon itself (`larch serve`) is the library `larch_daemon`.

/// jemalloc instead of glibc's malloc: block buffers are allocated by connection threads
/// and freed by the syncer's and the ARC's, and glibc's arenas spent a third of the async
/// write path's CPU on that (locks, chunk coalescing); jemalloc took 8K-block async writes
/// 1.4x faster with the same peak resident memory (BENCHMARKS.md, "Issue 18: jemalloc").
///
/// Wrapped in [`HugePages`], which the simulator's commands turn on.
#[global_allocator]
static ALLOCATOR: HugePages = HugePages(tikv_jemallocator::Jemalloc);

/// Whether [`HugePages`] asks for huge pages: set once, by a command that simulates.
static HUGE_PAGES_ON: AtomicBool = AtomicBool::new(false);

/// The size of a transparent huge page on x86-64 and on most arm64 kernels; a
/// different one only makes the advice cover less or more.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Allocations from this size up are advised (smaller ones are too many to pay a system
/// call each, and hold little of the simulator's memory).
const ADVISED_BYTES: usize = 64 << 10;

/// An allocator that asks the kernel for transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`) under every allocation of [`ADVISED_BYTES`] or more once
/// [`HUGE_PAGES_ON`] is set. Why: the simulator's tables (the ARC's header slabs and key
/// indices, the cache devices' block maps) are read at random addresses, so with 4 KiB
/// pages nearly every lookup also misses the TLB, and in a virtual machine a TLB miss walks
/// the guest's and the host's page tables (seed 000 at 1/100 about 1.08x faster on the
/// 2-vCPU VM, peak memory a seventh more: docs/simulator.md, "Speed and memory of the
/// simulator", 2026-12-07). The advice covers the whole huge pages around the allocation:
/// jemalloc carves most tables out of larger mappings, few of them from a 2 MiB boundary,
/// and advice changes no contents, so covering a neighbour's bytes is harmless. Only the
/// simulator's commands turn it on: the daemon's block buffers come and go, jemalloc gives
/// their pages back (`purge_free_memory`), and how huge pages would change its resident
/// memory has not been measured.
struct HugePages(tikv_jemallocator::Jemalloc);

impl HugePages {
    /// Advises the huge pages that `len` bytes from `ptr` touch.
    fn advise(ptr: *mut u8, len: usize) {
        if len < ADVISED_BYTES || ptr.is_null() || !HUGE_PAGES_ON.load(Ordering::Relaxed) {
            return;
        }
        let start = ptr as usize / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
        let end = (ptr as usize + len).next_multiple_of(HUGE_PAGE_BYTES);
        // Best effort: a kernel without transparent huge pages says EINVAL and the pages
        // stay small; a part of the range not mapped (ENOMEM) leaves the rest advised.
        // SAFETY: advice is a hint to the kernel about a range of addresses; it changes no
        // memory the program sees, mapped or not.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

// SAFETY: every call goes to jemalloc unchanged; `advise` only adds a hint on the range
// jemalloc returned.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { self.0.alloc(layout) };
        HugePages::advise(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { self.0.alloc_zeroed(layout) };
        HugePages::advise(ptr, layout.size());
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { self.0.realloc(ptr, layout, new_size) };
        HugePages::advise(ptr, new_size);
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }
}

/// Gives the pages jemalloc holds free back to the system (every arena's `purge`): the
/// engine calls it where it would call glibc's `malloc_trim`, when resident memory is far
/// above what the cache accounts for.
fn purge_free_memory() {
    // MALLCTL_ARENAS_ALL: every arena.
    const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
    // Best effort: an error (none is expected) leaves the pages where they are.
    // SAFETY: a NUL-terminated name of a control that takes and returns nothing (all
    // pointers null, length 0), as jemalloc's mallctl documents for `arena.<i>.purge`.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

mod advise;
mod analytics;
mod arcstat;
mod cache;
mod demo;
mod dump;
mod events;
mod files;
mod generate;
mod get;
mod iostat;
mod log;
mod nbd_security;
mod pool;
mod serve;
mod serve_file;
mod set;
mod sim;
mod sim_run;
mod size;
mod status;
mod volume;

#[cfg(test)]
mod testing;

use std::alloc::{GlobalAlloc, Layout};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{CommandFactory, Parser, Subcommand};

/// larch: ZFS's ARC, L2ARC and write path as a userspace block cache.
///
/// With no subcommand, larch runs `larch serve`: it creates (or opens) a demo pool in
/// ./larch-data and serves its volume over NBD on 127.0.0.1:10809.
#[derive(Parser)]
#[command(name = "larch", version = VERSION, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Replay the built-in demo workload: Zipf reads with a large scan in the middle, ARC vs LRU.
    Demo(demo::DemoArgs),
    /// Simulate the cache: replay block traces through a policy.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Show what is on a larch cache device (the `zdb -l` of larch).
    Dump(dump::DumpArgs),
    /// Serve a pool's volumes over NBD through the ARC and its cache devices (creates a
    /// demo pool in ./larch-data when there is none).
    Serve(serve::ServeArgs),
    /// Create or destroy a pool (its state directory).
    #[command(subcommand)]
    Pool(pool::PoolCommand),
    /// Add or remove volumes of a pool, or set their properties and size (also while
    /// served).
    #[command(subcommand)]
    Volume(volume::VolumeCommand),
    /// Add or remove cache devices (L2ARC) of a pool, also while it is served.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
    /// Add or remove the log device (SLOG) of a pool, also while it is served.
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Show what a running (or the last) `larch serve` of a pool reports.
    Status(status::StatusArgs),
    /// Print arcstat-style lines (reads, hit ratios, ARC and L2 sizes) of a running pool.
    Arcstat(arcstat::ArcstatArgs),
    /// Print operations and bandwidth of a running pool's devices, as `zpool iostat` does:
    /// the averages since it opened, then per interval; -v per device, -l wait times, -q
    /// queue depths.
    Iostat(iostat::IostatArgs),
    /// List what happened to a pool, with times, as `zpool events` does: cache devices
    /// faulted and back, L2ARC rebuilds, switch flips, tunable and property changes, log
    /// devices, stalled TXGs, failed volumes, leases; -f follows.
    Events(events::EventsArgs),
    /// The Analytics page: its address (with the token), and its history as CSV or JSON.
    #[command(subcommand)]
    Analytics(analytics::AnalyticsCommand),
    /// Set tunables of a pool (`NAME=VALUE...`) or properties of a volume (`VOLUME
    /// NAME=VALUE...`); a running daemon applies them at once.
    #[command(after_help = set::properties_help())]
    Set(set::SetArgs),
    /// Show tunables of a pool (value, default, source), or properties of a volume (`larch
    /// get VOLUME [PROPERTY...]`: value, default and source), like `zfs get`.
    #[command(after_help = set::properties_help())]
    Get(get::GetArgs),
    /// What an L2ARC would do for a workload: a table of L2ARC sizes and device counts,
    /// simulated, with seed 002's key ratios, header DRAM, IOPS, latency, warm-up and advice.
    Size(Box<size::SizeArgs>),
    /// Know your workload: the miss-ratio curves of a running pool (or of a trace), where
    /// its caches sit on them, and what a bigger ARC or an L2ARC would buy.
    Advise(Box<advise::AdviseArgs>),
    /// Serve a plain file or block device over NBD, with no cache.
    ServeFile(serve_file::ServeFileArgs),
    /// Write the man pages or a shell's completion script (for packages).
    ///
    /// `larch generate man DIR` writes larch.1 and a page per subcommand, and `larch
    /// generate completions bash|zsh|fish [--out DIR]` prints or writes a completion
    /// script; both are made from the definitions --help shows. scripts/build-deb runs them.
    #[command(subcommand)]
    Generate(generate::GenerateCommand),
}

/// `larch --version`: the package's version and the commit it was built from, with its
/// date (`0.1.0 (commit 1a2b3c4d5e6f, 2026-11-25)`; `-dirty` after the hash when tracked
/// files had changes; see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LARCH_COMMIT_INFO"),
    ")"
);

fn main() -> ExitCode {
    larch_engine::arc::set_free_memory_release(purge_free_memory);
    let cli = Cli::parse();
    let serves = matches!(
        cli.command,
        None | Some(Command::Serve(_)) | Some(Command::ServeFile(_))
    );
    if !serves {
        // A command whose output goes to a pipe that closes (`larch dump dev | head`) ends
        // quietly, as other command-line tools do; servers keep ignoring SIGPIPE and get
        // EPIPE on a closed connection instead.
        // SAFETY: setting a signal disposition to the default has no preconditions.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    if matches!(cli.command, Some(Command::Sim(_)) | Some(Command::Size(_))) {
        HUGE_PAGES_ON.store(true, Ordering::Relaxed);
    }
    let result = match cli.command {
        None => serve::run(serve::ServeArgs::default()),
        Some(Command::Demo(args)) => demo::run(args),
        Some(Command::Sim(cmd)) => sim::run(cmd),
        Some(Command::Dump(args)) => dump::run(args),
        Some(Command::Serve(args)) => serve::run(args),
        Some(Command::Status(args)) => status::run(args),
        Some(Command::Pool(cmd)) => pool::run(cmd),
        Some(Command::Volume(cmd)) => volume::run(cmd),
        Some(Command::Cache(cmd)) => cache::run(cmd),
        Some(Command::Log(cmd)) => log::run(cmd),
        Some(Command::Set(args)) => set::run(args),
        Some(Command::Get(args)) => get::run(args),
        Some(Command::Arcstat(args)) => arcstat::run(args),
        Some(Command::Iostat(args)) => iostat::run(args),
        Some(Command::Events(args)) => events::run(args),
        Some(Command::Analytics(cmd)) => analytics::run(cmd),
        Some(Command::Size(args)) => size::run(*args),
        Some(Command::Advise(args)) => advise::run(*args),
        Some(Command::ServeFile(args)) => serve_file::run(args),
        Some(Command::Generate(cmd)) => generate::run(cmd, Cli::command()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            // Not eprintln!: it panics when standard error is closed, and the exit code
            // would no longer say that the command failed.
            let _ = writeln!(std::io::stderr(), "larch: error: {}", error_text(&err));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes, joined by ": " as anyhow's `{:#}` does, but without a cause
/// whose text an earlier one already carries: the I/O errors of the lower crates say
/// their OS error in their own text and also give it as their source, so `larch dump` of
/// a missing file said "No such file or directory (os error 2)" twice.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let cause = cause.to_string();
        if text.is_empty() {
            text = cause;
        } else if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod error_text_tests {
    use super::error_text;

    /// Causes already in the text are not repeated; new ones are joined as anyhow does.
    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let os = || std::io::Error::from_raw_os_error(2);
        let err = anyhow::Error::from(os())
            .context(format!("read at offset 0: {}", os()))
            .context("cannot open x");
        assert_eq!(
            error_text(&err),
            "cannot open x: read at offset 0: No such file or directory (os error 2)"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&plain), format!("{plain:#}"));
    }
}
