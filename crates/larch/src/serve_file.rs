//! `larch serve-file PATH`: serve a plain file or block device over NBD with no cache,
//! like `qemu-nbd` or `nbdkit file`. It exercises the protocol layer before the engine
//! exists and stays as a handy tool.
//!
//! TRIM punches holes (`fallocate(PUNCH_HOLE)`) where the file system supports it,
//! WRITE_ZEROES punches or zero-ranges before falling back to writing zeroes, and block
//! status comes from `SEEK_DATA`/`SEEK_HOLE`. Every connection shares one descriptor
//! and the page cache, so FLUSH (`fdatasync`) covers writes from every connection and
//! multi-conn is advertised.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use larch_nbd::proto::{STATE_HOLE, STATE_ZERO};
use larch_nbd::{
    BlockSizes, Errno, Export, ExportResult, Extent, Features, Listener, NamedExport, ReadData,
    Server, ServerLimits, ZeroFlags,
};

use larch_engine::backing::{ZeroMode, fallocate_zero};
use larch_engine::units::parse_size;

use crate::nbd_security::NbdSecurityArgs;

/// Arguments of `larch serve-file`.
#[derive(clap::Args)]
pub struct ServeFileArgs {
    /// The file or block device to serve.
    pub path: PathBuf,
    /// Everything else, boxed so the CLI's command enum stays small.
    #[command(flatten)]
    pub options: Box<ServeFileOptions>,
}

/// Options of `larch serve-file`.
#[derive(clap::Args)]
pub struct ServeFileOptions {
    /// Listen on this Unix socket (a stale socket file there is replaced).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP address (default 127.0.0.1:10809 when no --socket is given;
    /// port 0 picks a free port, printed on stderr).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// Serve one connection on stdin/stdout, then exit (for fuzzers and
    /// `nbd_connect_command`).
    #[arg(long, conflicts_with_all = ["socket", "listen"])]
    pub stdio: bool,
    /// Refuse writes (the file is opened read-only).
    #[arg(long)]
    pub read_only: bool,
    /// The export's name ("" is the default export clients get without a name).
    #[arg(long, default_value = "", value_name = "NAME")]
    pub export_name: String,
    /// Description shown by `nbdinfo --list`.
    #[arg(long, default_value = "", value_name = "TEXT")]
    pub description: String,
    /// Minimum block size: offsets and lengths must be multiples of it (a power of two that
    /// divides the size of the file).
    #[arg(long, default_value = "1", value_name = "BYTES")]
    pub min_block_size: String,
    /// Largest READ/WRITE request accepted.
    #[arg(long, default_value = "32M", value_name = "BYTES")]
    pub max_request_size: String,
    /// Longest option payload accepted during the handshake.
    #[arg(long, default_value = "64K", value_name = "BYTES")]
    pub max_option_size: String,
    /// Connections served at once.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 128)]
    pub max_inflight: usize,
    /// Seconds a connection may stay open after SIGTERM/SIGINT.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub shutdown_grace: f64,
    /// Seconds a client may take to finish the handshake.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub handshake_timeout: f64,
    /// Seconds a client may go without progress in the middle of a request, or without
    /// reading replies it has queued, before it is disconnected.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub stall_timeout: f64,
    /// Where file I/O runs: `inline` on the network threads (fast when the file is in
    /// memory), `threads` on a blocking pool (a slow disk then stalls no other request),
    /// or `auto`: inline on tmpfs/ramfs, page-cache hits inline (`RWF_NOWAIT`) and the
    /// rest on the pool elsewhere.
    #[arg(long, value_enum, default_value_t = IoMode::Auto)]
    pub io: IoMode,
    /// Worker threads of the async runtime (default: one per CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// TLS, access rules and connection limits.
    #[command(flatten)]
    pub security: NbdSecurityArgs,
}

/// Where the file export does its system calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IoMode {
    /// Inline where it cannot block on a device, on the pool otherwise.
    Auto,
    /// On the runtime's worker threads.
    Inline,
    /// On tokio's blocking thread pool.
    Threads,
}

/// Runs `larch serve-file` until SIGTERM/SIGINT (or, with `--stdio`, the end of the
/// connection); exits 0 after a graceful shutdown.
pub fn run(args: ServeFileArgs) -> anyhow::Result<ExitCode> {
    // Standard error stays writable whatever happens to its reader (servers ignore
    // SIGPIPE, and eprintln! panics when a write fails).
    let _stderr = larch_daemon::stderr::StderrShield::install()
        .map_err(|err| eprintln!("larch serve-file: standard error not shielded: {err}"))
        .ok();
    let ServeFileArgs { path, options } = args;
    let args = *options;
    let min_block = parse_size(&args.min_block_size)?;
    let min_block = u32::try_from(min_block).context("--min-block-size too large")?;
    let max_request_bytes = u32::try_from(parse_size(&args.max_request_size)?)
        .context("--max-request-size too large")?;
    let limits = ServerLimits {
        max_option_bytes: u32::try_from(parse_size(&args.max_option_size)?)
            .context("--max-option-size too large")?,
        max_request_bytes,
        // The payload budget holds at least one request of the largest size, in its 4 KiB
        // units.
        max_payload_bytes_in_flight: ServerLimits::default()
            .max_payload_bytes_in_flight
            .max(u64::from(max_request_bytes).next_multiple_of(4096)),
        max_connections: args.max_connections,
        max_connections_per_address: args.security.max_connections_per_client,
        max_inflight_per_connection: args.max_inflight,
        shutdown_grace: Duration::try_from_secs_f64(args.shutdown_grace)
            .context("--shutdown-grace")?,
        handshake_timeout: Duration::try_from_secs_f64(args.handshake_timeout)
            .context("--handshake-timeout")?,
        stall_timeout: Duration::try_from_secs_f64(args.stall_timeout)
            .context("--stall-timeout")?,
    };
    let security = args.security.security()?;
    let export = FileExport::open(&path, args.read_only, min_block, args.io)?;
    let size_bytes = export.size_bytes;
    let server = Server::with_security(
        limits,
        vec![NamedExport {
            name: args.export_name.clone(),
            description: args.description.clone(),
            export: Arc::new(export),
        }],
        security,
    )?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(n) = args.threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime.build().context("starting the async runtime")?;
    let code = runtime.block_on(serve(server, &path, &args, size_bytes));
    // Every connection has ended; do not wait for a blocking read of stdin (--stdio)
    // that only the client closing its end would finish.
    runtime.shutdown_background();
    code
}

async fn serve(
    server: Server<FileExport>,
    path: &Path,
    args: &ServeFileOptions,
    size_bytes: u64,
) -> anyhow::Result<ExitCode> {
    let what = format!(
        "{} ({size_bytes} bytes{}) as export {:?}",
        path.display(),
        if args.read_only { ", read-only" } else { "" },
        args.export_name
    );
    if args.stdio {
        let result = server
            .serve_stream(tokio::io::stdin(), tokio::io::stdout())
            .await;
        return Ok(match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("larch serve-file: {err}");
                ExitCode::from(1)
            }
        });
    }
    let mut listeners = Vec::new();
    if let Some(path) = &args.socket {
        remove_stale_socket(path)?;
        let listener = tokio::net::UnixListener::bind(path)
            .with_context(|| format!("binding {}", path.display()))?;
        eprintln!(
            "larch serve-file: serving {what} on unix:{}",
            path.display()
        );
        listeners.push(Listener::Unix(listener));
    }
    if args.listen.is_some() || args.socket.is_none() {
        let addr = args.listen.as_deref().unwrap_or("127.0.0.1:10809");
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        args.security.check_bind(listener.local_addr()?)?;
        eprintln!(
            "larch serve-file: serving {what} on tcp:{}",
            listener.local_addr()?
        );
        listeners.push(Listener::Tcp(listener));
    }

    let signaller = server.clone();
    tokio::spawn(async move {
        if wait_for_signal().await.is_ok() {
            eprintln!("larch serve-file: shutting down");
            signaller.shutdown();
        }
    });
    let mut tasks = Vec::new();
    for listener in listeners {
        let server = server.clone();
        tasks.push(tokio::spawn(async move { server.serve(listener).await }));
    }
    let mut failed = false;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                eprintln!("larch serve-file: listener failed: {err}");
                server.shutdown();
                failed = true;
            }
            Err(err) => {
                eprintln!("larch serve-file: listener task failed: {err}");
                failed = true;
            }
        }
    }
    server.wait_idle().await;
    if let Some(path) = &args.socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn wait_for_signal() -> io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// Removes a socket file left by an earlier run; refuses to remove anything else.
fn remove_stale_socket(path: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))
        }
        Ok(_) => bail!("{} exists and is not a socket", path.display()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err).with_context(|| format!("inspecting {}", path.display())),
    }
}

/// A file or block device served as one export.
pub struct FileExport {
    file: Arc<File>,
    /// The `flock` on a regular file for as long as it is served (exclusive when
    /// writable, shared when read-only), as a pool locks its backing files: a pool and
    /// serve-file, or two serve-files, never write one file without knowing of each other.
    _lock: Option<File>,
    size_bytes: u64,
    read_only: bool,
    regular: bool,
    min_block_bytes: u32,
    io: IoMode,
    /// The file lives in memory (tmpfs, ramfs): no operation waits for a device.
    memory_backed: bool,
    /// `preadv2(RWF_NOWAIT)` works here; cleared on the first `EOPNOTSUPP`.
    nowait_ok: AtomicBool,
    /// Cleared the first time the file system says it cannot punch holes, so later
    /// requests skip the failing system call.
    punch_hole_ok: AtomicBool,
    /// Same for `FALLOC_FL_ZERO_RANGE`.
    zero_range_ok: AtomicBool,
    /// Read buffers handed back by the socket path once sent.
    buffers: Arc<BufferPool>,
}

impl FileExport {
    /// Opens `path` for serving.
    pub fn open(
        path: &Path,
        read_only: bool,
        min_block_bytes: u32,
        io: IoMode,
    ) -> anyhow::Result<FileExport> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        let file_type = file.metadata()?.file_type();
        let regular = file_type.is_file();
        if !regular && !file_type.is_block_device() {
            bail!(
                "{} is neither a regular file nor a block device",
                path.display()
            );
        }
        let lock = larch_engine::lock_file(path, read_only).map_err(|err| {
            if err.kind() == std::io::ErrorKind::WouldBlock {
                anyhow::anyhow!(
                    "{} is in use: a running larch pool serves it as a volume, or another \
                     larch serve-file{} serves it; stop that first",
                    path.display(),
                    if read_only { " that writes" } else { "" }
                )
            } else {
                anyhow::anyhow!("locking {}: {err}", path.display())
            }
        })?;
        // Works for block devices too, where the metadata length is 0.
        let size_bytes = file.seek(SeekFrom::End(0))?;
        let memory_backed = regular && is_memory_backed(&file);
        let export = FileExport {
            file: Arc::new(file),
            _lock: lock,
            size_bytes,
            read_only,
            regular,
            min_block_bytes,
            io,
            memory_backed,
            nowait_ok: AtomicBool::new(regular),
            punch_hole_ok: AtomicBool::new(regular),
            zero_range_ok: AtomicBool::new(regular),
            buffers: Arc::new(BufferPool::default()),
        };
        export
            .block_sizes()
            .validate()
            .map_err(|e| anyhow::anyhow!("--min-block-size: {e}"))?;
        let tail = size_bytes % u64::from(min_block_bytes);
        if tail != 0 {
            // Every request must be a multiple of the minimum, so the tail could never be
            // read or written (nbdcopy fails on it).
            anyhow::bail!(
                "--min-block-size {min_block_bytes}: {} has {size_bytes} bytes, not a multiple \
                 of it, and clients could never reach its last {tail}; give a block size that \
                 divides the size, or resize the file",
                path.display()
            );
        }
        Ok(export)
    }

    /// Whether blocking calls may run on the network threads.
    fn inline(&self) -> bool {
        match self.io {
            IoMode::Inline => true,
            IoMode::Threads => false,
            IoMode::Auto => self.memory_backed,
        }
    }

    /// Runs a blocking file operation where `--io` says.
    async fn io<T, F>(&self, op: F) -> ExportResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&File) -> io::Result<T> + Send + 'static,
    {
        if self.inline() {
            return op(&self.file).map_err(|err| Errno::from_io_error(&err));
        }
        self.pool(op).await
    }

    /// Runs a blocking file operation on the blocking pool.
    async fn pool<T, F>(&self, op: F) -> ExportResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&File) -> io::Result<T> + Send + 'static,
    {
        let file = Arc::clone(&self.file);
        match tokio::task::spawn_blocking(move || op(&file)).await {
            Ok(result) => result.map_err(|err| Errno::from_io_error(&err)),
            Err(_) => Err(Errno::Io),
        }
    }

    /// In `auto` mode on a disk-backed file: reads what the page cache holds without
    /// blocking (`RWF_NOWAIT`), so hits stay on the network thread and only misses pay
    /// for the hop to the pool.
    async fn read_nowait_then_pool(&self, offset: u64, length: u32) -> ExportResult<ReadData> {
        let mut buf = self.buffers.take(length as usize);
        let done = match preadv2_nowait(&self.file, &mut buf, offset) {
            Ok(n) => n,
            Err(err) if err.raw_os_error() == Some(libc::EAGAIN) => 0,
            Err(err) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                self.nowait_ok.store(false, Ordering::Relaxed);
                0
            }
            Err(err) => return Err(Errno::from_io_error(&err)),
        };
        if done == buf.len() {
            return Ok(buf.into_read_data());
        }
        self.pool(move |file| {
            file.read_exact_at(&mut buf[done..], offset + done as u64)?;
            Ok(buf.into_read_data())
        })
        .await
    }

    /// Tries to zero a range in place as `mode` says; `Ok(false)` if the file system does
    /// not support it (remembered in `supported` so it is not asked again).
    fn try_fallocate(
        file: &File,
        mode: ZeroMode,
        offset: u64,
        length: u32,
        supported: &AtomicBool,
    ) -> io::Result<bool> {
        if !supported.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let done = fallocate_zero(file, offset, u64::from(length), mode)?;
        if !done {
            supported.store(false, Ordering::Relaxed);
        }
        Ok(done)
    }
}

const PUNCH: ZeroMode = ZeroMode::Punch;
const ZERO_RANGE: ZeroMode = ZeroMode::Allocate;

/// `lseek` with `SEEK_DATA`/`SEEK_HOLE`; `Ok(None)` means "no more data" (ENXIO).
fn seek_whence(file: &File, offset: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: lseek on a valid descriptor with plain integers; it does not touch memory.
    let rc = unsafe { libc::lseek(file.as_raw_fd(), off, whence) };
    if rc >= 0 {
        return Ok(Some(rc as u64));
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(err)
    }
}

/// Read buffers recycled between requests. A fresh buffer costs a zeroing pass and, for
/// large ones, page faults on new memory; both showed up in profiles of 128 KiB reads.
/// Buffers go back to the pool when the reply has been written (the `Bytes` handed to
/// the server owns a [`PooledBuffer`]).
#[derive(Default)]
struct BufferPool {
    /// Free buffers by size class: class `c` holds buffers of exactly `4 KiB << c`.
    free: std::sync::Mutex<Vec<Vec<Vec<u8>>>>,
}

/// Buffers kept per size class; beyond that they are freed.
const POOL_BUFFERS_PER_CLASS: usize = 64;
/// Size classes: 4 KiB … 32 MiB.
const POOL_CLASSES: usize = 14;

impl BufferPool {
    fn class_of(len: usize) -> usize {
        let rounded = len.max(4096).next_power_of_two();
        (rounded.trailing_zeros() - 12) as usize
    }

    /// A buffer of exactly `len` bytes (contents unspecified).
    fn take(self: &Arc<Self>, len: usize) -> PooledBuffer {
        let class = Self::class_of(len);
        let recycled = if class < POOL_CLASSES {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            free.get_mut(class).and_then(Vec::pop)
        } else {
            None
        };
        let mut buf = recycled.unwrap_or_else(|| vec![0u8; 4096 << class.min(POOL_CLASSES)]);
        // Shrinking an initialised vector writes nothing; the capacity stays.
        buf.truncate(len);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        PooledBuffer {
            buf,
            pool: Arc::clone(self),
        }
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        let class = Self::class_of(buf.capacity());
        if class >= POOL_CLASSES || buf.capacity() != 4096 << class {
            return;
        }
        // Restore the full length: the bytes are initialised, so this is free.
        buf.resize(buf.capacity(), 0);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < POOL_CLASSES {
            free.resize_with(POOL_CLASSES, Vec::new);
        }
        if free[class].len() < POOL_BUFFERS_PER_CLASS {
            free[class].push(buf);
        }
    }
}

/// A read buffer that returns to its pool when dropped.
struct PooledBuffer {
    buf: Vec<u8>,
    pool: Arc<BufferPool>,
}

impl PooledBuffer {
    fn into_read_data(self) -> ReadData {
        ReadData::from_bytes(Bytes::from_owner(self))
    }
}

impl std::ops::Deref for PooledBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl std::ops::DerefMut for PooledBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl AsRef<[u8]> for PooledBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

/// Whether `file` lives on tmpfs or ramfs, where no call waits for a device.
fn is_memory_backed(file: &File) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    // SAFETY: fstatfs fills the zero-initialised struct we own; the descriptor is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    #[allow(clippy::useless_conversion)]
    let fs_type = libc::c_long::from(st.f_type);
    rc == 0 && (fs_type == TMPFS_MAGIC || fs_type == RAMFS_MAGIC)
}

/// One `preadv2(RWF_NOWAIT)`: reads only what needs no device I/O. Returns the bytes
/// read (possibly fewer than asked, possibly 0), or `EAGAIN` when nothing was cached.
fn preadv2_nowait(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec describing `buf`, which outlives the call; valid descriptor.
    let rc = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Most extents gathered per block status request (the client asks again for the rest).
const MAX_EXTENTS: usize = 1024;

/// Allocation map of `[offset, offset+length)` from `SEEK_DATA`/`SEEK_HOLE`.
fn allocation_extents(file: &File, offset: u64, length: u32) -> io::Result<Vec<Extent>> {
    let end = offset + u64::from(length);
    let mut pos = offset;
    let mut extents = Vec::new();
    let hole = STATE_HOLE | STATE_ZERO;
    while pos < end && extents.len() < MAX_EXTENTS {
        let Some(data) = seek_whence(file, pos, libc::SEEK_DATA)? else {
            extents.push(Extent {
                length_bytes: end - pos,
                flags: hole,
            });
            break;
        };
        if data > pos {
            let stop = data.min(end);
            extents.push(Extent {
                length_bytes: stop - pos,
                flags: hole,
            });
            pos = stop;
            continue;
        }
        // `pos` is in data; the file's end counts as a hole, so this always answers.
        let next_hole = seek_whence(file, pos, libc::SEEK_HOLE)?.unwrap_or(end);
        let stop = next_hole.min(end).max(pos + 1);
        extents.push(Extent {
            length_bytes: stop - pos,
            flags: 0,
        });
        pos = stop;
    }
    Ok(extents)
}

/// Writes zeroes the slow way, a megabyte at a time.
fn write_zeroes_slowly(file: &File, offset: u64, length: u32) -> io::Result<()> {
    let zeroes = vec![0u8; (1 << 20).min(length as usize)];
    let mut done = 0u64;
    while done < u64::from(length) {
        let n = (u64::from(length) - done).min(zeroes.len() as u64) as usize;
        file.write_all_at(&zeroes[..n], offset + done)?;
        done += n as u64;
    }
    Ok(())
}

impl Export for FileExport {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum_bytes: self.min_block_bytes,
            preferred_bytes: 4096.max(self.min_block_bytes),
            maximum_bytes: 32 << 20,
        }
    }

    fn features(&self) -> Features {
        Features {
            read_only: self.read_only,
            flush: true,
            trim: self.regular,
            write_zeroes: true,
            fast_zero: true,
            cache: true,
            block_status: self.regular,
            // One descriptor and one page cache for every connection: fdatasync on any
            // connection covers the writes of all of them.
            multi_conn: true,
            rotational: false,
        }
    }

    async fn read(&self, offset: u64, length: u32) -> ExportResult<ReadData> {
        if self.io == IoMode::Auto && !self.memory_backed && self.nowait_ok.load(Ordering::Relaxed)
        {
            return self.read_nowait_then_pool(offset, length).await;
        }
        let mut buf = self.buffers.take(length as usize);
        self.io(move |file| {
            file.read_exact_at(&mut buf, offset)?;
            Ok(buf.into_read_data())
        })
        .await
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> ExportResult<()> {
        self.io(move |file| {
            file.write_all_at(&data, offset)?;
            if fua {
                file.sync_data()?;
            }
            Ok(())
        })
        .await
    }

    async fn flush(&self) -> ExportResult<()> {
        self.io(|file| file.sync_data()).await
    }

    async fn trim(&self, offset: u64, length: u32, fua: bool) -> ExportResult<()> {
        if !self.punch_hole_ok.load(Ordering::Relaxed) {
            // TRIM is advisory; doing nothing is a valid answer.
            return Ok(());
        }
        let works = self
            .io(move |f| {
                let flag = AtomicBool::new(true);
                if FileExport::try_fallocate(f, PUNCH, offset, length, &flag)? && fua {
                    f.sync_data()?;
                }
                Ok(flag.load(Ordering::Relaxed))
            })
            .await?;
        if !works {
            self.punch_hole_ok.store(false, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, length: u32, flags: ZeroFlags) -> ExportResult<()> {
        let punch_ok = flags.may_trim && self.punch_hole_ok.load(Ordering::Relaxed);
        let zero_range_ok = self.zero_range_ok.load(Ordering::Relaxed);
        let (fast_done, punch_works, zero_range_works) = self
            .io(move |f| {
                let punch_flag = AtomicBool::new(punch_ok);
                let zero_flag = AtomicBool::new(zero_range_ok);
                let done = FileExport::try_fallocate(f, PUNCH, offset, length, &punch_flag)?
                    || FileExport::try_fallocate(f, ZERO_RANGE, offset, length, &zero_flag)?;
                Ok((
                    done,
                    punch_flag.load(Ordering::Relaxed),
                    zero_flag.load(Ordering::Relaxed),
                ))
            })
            .await?;
        // Remember what the file system refused (the closures worked on copies because
        // blocking-pool closures must own their data).
        if flags.may_trim && !punch_works {
            self.punch_hole_ok.store(false, Ordering::Relaxed);
        }
        if !zero_range_works {
            self.zero_range_ok.store(false, Ordering::Relaxed);
        }
        if !fast_done && flags.fast_only {
            return Err(Errno::NotSup);
        }
        let fua = flags.fua;
        self.io(move |f| {
            if !fast_done {
                write_zeroes_slowly(f, offset, length)?;
            }
            if fua {
                f.sync_data()?;
            }
            Ok(())
        })
        .await
    }

    async fn cache(&self, offset: u64, length: u32) -> ExportResult<()> {
        let Ok(off) = libc::off_t::try_from(offset) else {
            return Ok(());
        };
        // SAFETY: posix_fadvise on a valid descriptor with plain integers.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                off,
                libc::off_t::from(length),
                libc::POSIX_FADV_WILLNEED,
            )
        };
        Ok(())
    }

    async fn block_status(&self, offset: u64, length: u32) -> ExportResult<Vec<Extent>> {
        if !self.regular {
            return Ok(vec![Extent {
                length_bytes: u64::from(length),
                flags: 0,
            }]);
        }
        self.io(move |f| match allocation_extents(f, offset, length) {
            Ok(extents) => Ok(extents),
            // A file system without SEEK_DATA: everything is data, which is always true.
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => Ok(vec![Extent {
                length_bytes: u64::from(length),
                flags: 0,
            }]),
            Err(err) => Err(err),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file whose size is not a multiple of `--min-block-size` is refused at start, naming
    /// the bytes clients could never reach (a tester's finding: its tail answered EINVAL to
    /// every request, and nbdcopy failed); sizes that divide are served.
    #[test]
    fn a_size_not_a_multiple_of_the_minimum_block_is_refused() {
        let dir = std::env::temp_dir().join(format!("larch-serve-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open = |bytes: usize, min_block: u32| {
            let path = dir.join(format!("{bytes}-{min_block}.img"));
            std::fs::write(&path, vec![7u8; bytes]).unwrap();
            FileExport::open(&path, true, min_block, IoMode::Auto).map(|e| e.size_bytes)
        };
        let err = open(20_000, 4096).unwrap_err().to_string();
        assert!(
            err.contains("has 20000 bytes, not a multiple") && err.contains("last 3616"),
            "{err}"
        );
        assert_eq!(open(20_000, 1).unwrap(), 20_000);
        assert_eq!(open(16_384, 4096).unwrap(), 16_384);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
