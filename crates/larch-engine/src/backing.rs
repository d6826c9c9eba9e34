//! Backing stores: the slow primary storage a volume's bytes live on. A backing store is a
//! plain file or block device whose bytes are exactly the volume's (no larch header), so it
//! stays usable without larch, or a volume on an object store ([`larch_object`]: S3 and
//! the stores that speak its API), whose writes are staged and made durable together by a
//! flush (one commit per TXG).
//!
//! A file or block device is written by the syncer with `O_DIRECT` (a second handle on
//! the same file): a TXG's runs go to the device without passing through the page cache,
//! so the disk's bandwidth is not halved by the kernel's copy and its writeback (issue
//! 18). Blocks whose buffers are page-aligned whole pages (the NBD server reads payload
//! pieces of 16 KiB and more into such) are written from their own buffers; the others are
//! copied into aligned buffers kept for the next TXG. Reads, the log replay's
//! writes and the unaligned ends of a run (a volume's short last block, blocks smaller
//! than the alignment) keep the buffered handle; the two never share a page, since the
//! direct part of a run is whole pages (but for the page a short direct write ended in,
//! whose rest the same write then finishes buffered). A file system that refuses
//! `O_DIRECT` (at open, or with EINVAL at a direct write of whole pages at a page-aligned
//! offset) leaves the store buffered, and `larch status` says why.
//!
//! For tests and benchmarks a backing store can carry a **latency model**: a fixed delay,
//! or a delay drawn uniformly from a range, added to every read and write. It is a device
//! model, off by default, and the only way to make a local file behave like a disk.
//!
//! One file with its unit tests (the code is under 800 lines): the tests drive the private
//! write path (runs, aligned buffers, the `O_DIRECT` fallback) directly.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use larch_io::{AlignedBuf, BlockDevice};
use larch_object::ObjectVolume;

use serde::{Deserialize, Serialize};

use crate::latency::{IoQueue, LatencyHistogram};
use crate::lock::RankedMutex;

/// Delay added to each backing-store I/O (microseconds). `max_us > min_us` draws uniformly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyModel {
    /// Smallest delay of a read.
    pub read_min_us: u64,
    /// Largest delay of a read (equal to `read_min_us` for a fixed delay).
    pub read_max_us: u64,
    /// Smallest delay of a write.
    pub write_min_us: u64,
    /// Largest delay of a write.
    pub write_max_us: u64,
}

impl LatencyModel {
    /// True when the model adds no delay.
    pub fn is_off(&self) -> bool {
        self.read_max_us == 0 && self.write_max_us == 0
    }
}

/// Counters of one backing store.
#[derive(Debug, Default)]
pub struct BackingStats {
    /// Reads issued.
    pub reads: AtomicU64,
    /// Bytes read.
    pub read_bytes: AtomicU64,
    /// Writes issued.
    pub writes: AtomicU64,
    /// Bytes written.
    pub write_bytes: AtomicU64,
    /// Flushes (fdatasync) issued.
    pub flushes: AtomicU64,
    /// Failed operations.
    pub errors: AtomicU64,
    /// Time of each read (the latency model's delay included: it stands for the device).
    pub read_latency: LatencyHistogram,
    /// Time of each write (the latency model's delay included).
    pub write_latency: LatencyHistogram,
    /// Time of each flush.
    pub flush_latency: LatencyHistogram,
    /// Reads waiting for an I/O thread (clients' misses and prefetches go to the blocking
    /// pool) and reads at the store.
    pub read_queue: Arc<IoQueue>,
    /// The runs of a TXG's writes waiting for one of the `zfs_vdev_async_write_max_active`
    /// writers, and runs being written (not for a volume on an object store, whose TXG is
    /// one commit).
    pub write_queue: Arc<IoQueue>,
    /// Bytes written with `O_DIRECT` (part of `write_bytes`).
    pub direct_write_bytes: AtomicU64,
    /// Bytes of the aligned buffers kept for the next `O_DIRECT` writes (at most 2 MiB).
    pub direct_buffer_bytes: AtomicU64,
    /// Ranges zeroed (TRIM, WRITE_ZEROES) by the syncer, whichever way.
    pub zeroes: AtomicU64,
    /// Bytes of those ranges.
    pub zeroed_bytes: AtomicU64,
    /// Bytes of them zeroed by writing zeros (part of `write_bytes` too): the store could
    /// not punch or zero a range in place.
    pub zeroes_written_bytes: AtomicU64,
}

/// How a range of a backing store is zeroed (NBD TRIM and WRITE_ZEROES).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroMode {
    /// The range's space is given back: a hole in a file, a discard that reads as zeros on
    /// a block device (`fallocate` `PUNCH_HOLE`).
    Punch,
    /// The range stays allocated (NBD's `NO_HOLE`): `fallocate` `ZERO_RANGE`.
    Allocate,
}

impl ZeroMode {
    /// The `fallocate` mode that does it without changing the file's size.
    fn fallocate_mode(self) -> libc::c_int {
        match self {
            ZeroMode::Punch => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            ZeroMode::Allocate => libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        }
    }
}

/// Zeroes `len` bytes of `file` at `offset` in place with `fallocate` (blocking): `Ok(true)`
/// when done, `Ok(false)` when the file system or device cannot (EOPNOTSUPP, ENOSYS,
/// EINVAL for a range a device will not take), and the error of any other failure. The
/// one `fallocate` of the workspace: the engine's syncer and `larch serve-file` use it.
pub fn fallocate_zero(file: &File, offset: u64, len: u64, mode: ZeroMode) -> io::Result<bool> {
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Ok(false);
    };
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate takes a descriptor `file` owns and plain integers.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode.fallocate_mode(), off, n) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(false),
        _ => Err(err),
    }
}

/// The alignment of the direct part of a run: offsets and lengths in whole pages (4 KiB,
/// or the page size if larger), which satisfies `O_DIRECT` on 512-byte and 4K-sector
/// devices and keeps a buffered neighbour out of every page a direct write touches.
fn direct_align() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).unwrap_or(4096).max(4096)
}

/// Largest `O_DIRECT` write, and the size of each aligned buffer a run is copied into.
const DIRECT_CHUNK_BYTES: usize = 256 << 10;

/// Most aligned buffers a store keeps for its next writes (2 MiB); writers beyond that
/// many at once allocate their own and free them after.
const DIRECT_BUFFERS_KEPT: usize = 8;

/// How a write of `len` bytes at `offset` splits: `(head, middle)` byte counts, where the
/// middle starts and ends on `align` and goes direct; the head before it and the rest
/// after it go through the page cache. The middle is 0 when no aligned page fits.
fn direct_split(offset: u64, len: u64, align: u64) -> (u64, u64) {
    let start = offset.next_multiple_of(align);
    let end = (offset + len) / align * align;
    if end <= start {
        return (len, 0);
    }
    (start - offset, end - start)
}

/// The bytes `[from, from + len)` of the concatenation of `parts`, as slices of them.
fn parts_range<'a>(parts: &[&'a [u8]], mut from: usize, mut len: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    for part in parts {
        if len == 0 {
            break;
        }
        if from >= part.len() {
            from -= part.len();
            continue;
        }
        let take = (part.len() - from).min(len);
        out.push(&part[from..from + take]);
        len -= take;
        from = 0;
    }
    out
}

/// A file or block device: reads and unaligned writes through the page cache, the
/// syncer's aligned writes through a second handle opened with `O_DIRECT`.
struct FileMedia {
    file: File,
    /// The `O_DIRECT` handle, if the file system took it.
    direct: Option<File>,
    /// Why writes go through the page cache, once they do (set once, never cleared).
    buffered_why: OnceLock<String>,
    /// Aligned buffers of [`DIRECT_CHUNK_BYTES`] for the direct writes, kept between TXGs
    /// (at most [`DIRECT_BUFFERS_KEPT`]).
    bounce: RankedMutex<Vec<AlignedBuf>>,
    /// Why ranges are zeroed by writing zeros, once `fallocate` could not zero one in place
    /// (set once, never cleared: NBD's FAST_ZERO is refused from then on).
    slow_zeroes_why: OnceLock<String>,
    /// Tests: direct writes fail with EINVAL, as on a file system that takes `O_DIRECT` at
    /// open and refuses it at write.
    #[cfg(test)]
    refuse_direct_writes: bool,
    /// Tests: the next direct write moves only this many bytes (0: no cut), as one that
    /// runs out of space part way may.
    #[cfg(test)]
    cut_next_direct_write: std::sync::atomic::AtomicUsize,
}

/// Why an `O_DIRECT` write did not complete.
enum DirectWriteError {
    /// EINVAL from a direct write of whole pages at a page-aligned offset: the file system
    /// refuses `O_DIRECT`.
    Refused {
        offset: u64,
        len: usize,
        source: io::Error,
    },
    /// Any other failure: the write's own error, which going buffered would not mend.
    Failed(io::Error),
}

impl FileMedia {
    fn open(path: &Path, read_only: bool, try_direct: bool) -> io::Result<FileMedia> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        let buffered_why = OnceLock::new();
        let direct = if read_only {
            None
        } else if !try_direct {
            let _ = buffered_why.set("O_DIRECT not tried".to_string());
            None
        } else {
            match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
            {
                Ok(direct) => Some(direct),
                Err(err) => {
                    let _ = buffered_why.set(format!("the file system refused O_DIRECT: {err}"));
                    None
                }
            }
        };
        Ok(FileMedia {
            file,
            direct,
            buffered_why,
            slow_zeroes_why: OnceLock::new(),
            bounce: RankedMutex::leaf(Vec::new()),
            #[cfg(test)]
            refuse_direct_writes: false,
            #[cfg(test)]
            cut_next_direct_write: Default::default(),
        })
    }

    /// The `O_DIRECT` handle, unless writes went back to the page cache.
    fn direct(&self) -> Option<&File> {
        self.direct
            .as_ref()
            .filter(|_| self.buffered_why.get().is_none())
    }

    /// Writes the concatenation of `parts` at `offset`: its whole pages with `O_DIRECT`,
    /// the rest buffered. Returns the bytes that went direct.
    fn write_parts(&self, parts: &[&[u8]], offset: u64, stats: &BackingStats) -> io::Result<u64> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let Some(direct) = self.direct() else {
            pwritev_all(&self.file, parts, offset)?;
            return Ok(0);
        };
        let (head, middle) = direct_split(offset, total as u64, direct_align());
        if middle == 0 {
            pwritev_all(&self.file, parts, offset)?;
            return Ok(0);
        }
        let (head, middle) = (head as usize, middle as usize);
        if head > 0 {
            pwritev_all(&self.file, &parts_range(parts, 0, head), offset)?;
        }
        let align = direct_align() as usize;
        let mut done = 0;
        let mut direct_bytes = 0;
        while done < middle {
            let at = offset + (head + done) as u64;
            // Parts in page-aligned buffers of whole pages (large WRITE payloads are read
            // into such, see `larch_nbd`'s `read_payload`) go as they are, in one write;
            // anything else is copied into a kept aligned buffer first.
            let rest = parts_range(parts, head + done, middle - done);
            let aligned = rest
                .iter()
                .take(IOV_MAX)
                .take_while(|p| {
                    (p.as_ptr() as usize).is_multiple_of(align) && p.len().is_multiple_of(align)
                })
                .count();
            let (len, written) = if aligned > 0 {
                let len = rest[..aligned].iter().map(|p| p.len()).sum();
                (len, self.pwritev_direct(direct, &rest[..aligned], at))
            } else {
                let len = (middle - done).min(DIRECT_CHUNK_BYTES);
                let chunk = parts_range(parts, head + done, len);
                (len, self.write_direct(direct, &chunk, at, stats))
            };
            match written {
                Ok(n) => direct_bytes += n,
                Err(DirectWriteError::Failed(err)) => return Err(err),
                Err(DirectWriteError::Refused {
                    offset: refused_at,
                    len: refused_len,
                    source,
                }) => {
                    // Accepted at open, refused at write (an alignment this file system
                    // wants larger, say): the rest of this write, and every later one, is
                    // buffered (rewriting all of it is right whatever part reached the
                    // file).
                    let _ = self.buffered_why.set(format!(
                        "the file system refused an O_DIRECT write of {refused_len} bytes at \
                         {refused_at}: {source}"
                    ));
                    let rest = parts_range(parts, head + done, total - head - done);
                    pwritev_all(&self.file, &rest, at)?;
                    return Ok(direct_bytes);
                }
            }
            done += len;
        }
        if head + middle < total {
            let tail = parts_range(parts, head + middle, total - head - middle);
            pwritev_all(&self.file, &tail, offset + (head + middle) as u64)?;
        }
        Ok(direct_bytes)
    }

    /// Writes `parts` at `offset` through the `O_DIRECT` handle: each part's address and
    /// length are multiples of the alignment, and so is `offset`. Returns the bytes
    /// written direct.
    ///
    /// A short write can end off a page boundary (a file system that allocates in blocks
    /// smaller than a page, running out of space part way). Another direct write from
    /// there fails with EINVAL whenever that offset is not a multiple of the device's
    /// logical block, which says nothing about the file system's support of `O_DIRECT`,
    /// so the rest goes through the page cache, and its error, if any, is the real one.
    /// Only an EINVAL from a direct write at a page-aligned offset, whose parts are then
    /// whole pages too, means the file system refuses `O_DIRECT`.
    fn pwritev_direct(
        &self,
        direct: &File,
        parts: &[&[u8]],
        offset: u64,
    ) -> Result<u64, DirectWriteError> {
        let mut rest = Unwritten::new(parts, offset);
        let mut direct_bytes = 0;
        while !rest.is_empty() {
            if !rest.offset.is_multiple_of(direct_align()) {
                pwritev_all(&self.file, rest.parts(), rest.offset)
                    .map_err(DirectWriteError::Failed)?;
                break;
            }
            let at = rest.offset;
            match self.direct_once(direct, &mut rest) {
                Ok(n) => direct_bytes += n as u64,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                    return Err(DirectWriteError::Refused {
                        offset: at,
                        len: rest.len(),
                        source: err,
                    });
                }
                Err(err) => return Err(DirectWriteError::Failed(err)),
            }
        }
        Ok(direct_bytes)
    }

    /// One `pwritev` of what is left of `rest` through the `O_DIRECT` handle (tests can
    /// make it fail or fall short).
    fn direct_once(&self, direct: &File, rest: &mut Unwritten<'_>) -> io::Result<usize> {
        #[cfg(test)]
        {
            if self.refuse_direct_writes {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let cut = self
                .cut_next_direct_write
                .swap(0, std::sync::atomic::Ordering::Relaxed);
            if cut > 0 {
                // The kernel may refuse a direct write of this unaligned length: the
                // page cache takes the bytes the short write would have written.
                return rest.write_once(&self.file, cut);
            }
        }
        rest.write_once(direct, usize::MAX)
    }

    /// One `O_DIRECT` write of `chunk`'s bytes (a multiple of the alignment, at most
    /// [`DIRECT_CHUNK_BYTES`]) at the aligned `offset`, through a kept aligned buffer.
    /// Returns the bytes written direct.
    fn write_direct(
        &self,
        direct: &File,
        chunk: &[&[u8]],
        offset: u64,
        stats: &BackingStats,
    ) -> Result<u64, DirectWriteError> {
        let kept = self.bounce.lock().pop();
        let mut buf = match kept {
            Some(buf) => {
                stats
                    .direct_buffer_bytes
                    .fetch_sub(DIRECT_CHUNK_BYTES as u64, Ordering::Relaxed);
                buf
            }
            None => AlignedBuf::zeroed(DIRECT_CHUNK_BYTES),
        };
        let mut len = 0;
        for part in chunk {
            buf[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        let result = self.pwritev_direct(direct, &[&buf[..len]], offset);
        let mut kept = self.bounce.lock();
        if kept.len() < DIRECT_BUFFERS_KEPT {
            kept.push(buf);
            stats
                .direct_buffer_bytes
                .fetch_add(DIRECT_CHUNK_BYTES as u64, Ordering::Relaxed);
        }
        result
    }
}

/// A read or a write, for [`BackingStore`]'s counters.
#[derive(Clone, Copy)]
enum Op {
    Read,
    Write,
}

/// Where a backing store's bytes are.
enum Media {
    /// A file or block device (the normal case).
    File(FileMedia),
    /// Any [`BlockDevice`]: in-process tests put a fault-injecting device here.
    Device(Arc<dyn BlockDevice>),
    /// A volume on an object store.
    Object(Arc<ObjectVolume>),
}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Media::File(m) => f.debug_tuple("File").field(&m.file).finish(),
            Media::Device(_) => f.write_str("Device"),
            Media::Object(vol) => f.debug_tuple("Object").field(&vol.display()).finish(),
        }
    }
}

/// A file or block device holding a volume's bytes.
#[derive(Debug)]
pub struct BackingStore {
    path: PathBuf,
    media: Media,
    /// Its size: a file's length (which [`BackingStore::resize`] changes), a device's.
    size_bytes: AtomicU64,
    latency: LatencyModel,
    /// State of the delay generator (deterministic per store).
    rng: AtomicU64,
    /// The counters.
    pub stats: BackingStats,
}

impl BackingStore {
    /// Opens `path` for reading (and writing unless `read_only`).
    pub fn open(path: &Path, read_only: bool, latency: LatencyModel) -> io::Result<BackingStore> {
        Self::open_with(path, read_only, latency, true)
    }

    /// [`BackingStore::open`], with `O_DIRECT` writes only if `try_direct`.
    pub fn open_with(
        path: &Path,
        read_only: bool,
        latency: LatencyModel,
        try_direct: bool,
    ) -> io::Result<BackingStore> {
        let media = FileMedia::open(path, read_only, try_direct)?;
        let size_bytes = file_size(&media.file)?;
        Ok(BackingStore {
            path: path.to_path_buf(),
            media: Media::File(media),
            size_bytes: AtomicU64::new(size_bytes),
            latency,
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15 ^ size_bytes),
            stats: BackingStats::default(),
        })
    }

    /// A backing store on any [`BlockDevice`] (in-process tests use a fault-injecting
    /// one); `name` stands for its path in messages.
    pub fn on_device(name: &str, dev: Arc<dyn BlockDevice>, latency: LatencyModel) -> BackingStore {
        let size_bytes = dev.len_bytes();
        BackingStore {
            path: PathBuf::from(name),
            media: Media::Device(dev),
            size_bytes: AtomicU64::new(size_bytes),
            latency,
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15 ^ size_bytes),
            stats: BackingStats::default(),
        }
    }

    /// A backing store on a volume of an object store; `name` (its `s3://` address) stands
    /// for its path in messages.
    pub fn on_object(name: &str, vol: Arc<ObjectVolume>, latency: LatencyModel) -> BackingStore {
        let size_bytes = vol.size_bytes();
        BackingStore {
            path: PathBuf::from(name),
            media: Media::Object(vol),
            size_bytes: AtomicU64::new(size_bytes),
            latency,
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15 ^ size_bytes),
            stats: BackingStats::default(),
        }
    }

    /// Why [`BackingStore::resize`] from `from` to `to` bytes would be refused, when that
    /// is known without trying: a volume on an object store that cannot grow to `to`
    /// (or would shrink). Files and devices say so only when resized.
    pub fn check_resize(&self, _from: u64, to: u64) -> io::Result<()> {
        match self.object() {
            Some(vol) => vol.check_grow(to),
            None => Ok(()),
        }
    }

    /// Whether a resize's new size is recorded before the store is resized rather than
    /// after: an object-store volume, whose open completes a grow it finds recorded but
    /// not made (a file or device is resized first: a size recorded past its end would
    /// not open).
    pub fn records_size_first(&self) -> bool {
        self.object().is_some()
    }

    /// The object-store volume under it, if it is one.
    pub fn object(&self) -> Option<&Arc<ObjectVolume>> {
        match &self.media {
            Media::Object(vol) => Some(vol),
            _ => None,
        }
    }

    /// Why the volume may not be served now (an object-store volume whose lease another
    /// node took, or lapsed): every request gets EIO meanwhile.
    pub fn unusable(&self) -> Option<String> {
        self.object().and_then(|vol| vol.unusable())
    }

    /// Whether a cache-device copy of `block` made before this run may be stale: another
    /// node committed its object since (object stores only; a file has one writer).
    pub fn cached_copy_stale(&self, block: u64) -> bool {
        self.object()
            .is_some_and(|vol| vol.cached_copy_stale(block))
    }

    /// Whether an intent-log record of this volume from TXG `txg` must be dropped rather
    /// than replayed: another node committed newer data since (object stores only).
    pub fn discards_log_record(&self, txg: u64) -> bool {
        self.object()
            .is_some_and(|vol| vol.discards_log_record(txg))
    }

    /// The TXG up to which this volume's log records are dropped at every replay (0 for a
    /// file): TXG numbers must stay above it.
    pub fn log_discard_through(&self) -> u64 {
        self.object().map_or(0, |vol| vol.log_discard_through())
    }

    /// Records durably that this volume's log records up to `txg` were dropped (see
    /// [`larch_object::ObjectVolume::note_log_discarded`]); nothing for a file.
    pub fn note_log_discarded(&self, txg: u64) -> io::Result<()> {
        match self.object() {
            Some(vol) => vol.note_log_discarded(txg),
            None => Ok(()),
        }
    }

    /// Records durably that this volume's log records of earlier runs end at TXG
    /// `log_through` (see [`larch_object::ObjectVolume::catch_up`]); nothing for a file.
    pub fn catch_up(&self, log_through: u64) -> io::Result<()> {
        match self.object() {
            Some(vol) => vol.catch_up(log_through),
            None => Ok(()),
        }
    }

    /// Stages whole blocks (an object store's syncer path: no copy) for the next
    /// [`BackingStore::flush`]; on a file, writes them.
    pub fn stage_blocks(
        &self,
        offset_of: impl Fn(u64) -> u64,
        blocks: Vec<(u64, Bytes)>,
    ) -> io::Result<u64> {
        let total: u64 = blocks.iter().map(|(_, b)| b.len() as u64).sum();
        match &self.media {
            Media::Object(vol) => {
                let count = blocks.len() as u64;
                vol.stage_blocks(blocks)?;
                self.stats.writes.fetch_add(count, Ordering::Relaxed);
                self.stats.write_bytes.fetch_add(total, Ordering::Relaxed);
            }
            _ => {
                for (block, data) in &blocks {
                    self.write_at(data, offset_of(*block))?;
                }
            }
        }
        Ok(total)
    }

    /// Gives an object-store volume's lease up after a last flush (a clean stop).
    pub fn close(&self) -> io::Result<()> {
        self.flush()?;
        match &self.media {
            Media::Object(vol) => vol.release(),
            _ => Ok(()),
        }
    }

    /// How the syncer writes it: `O_DIRECT`, or `buffered (why)` when the page cache is
    /// used (a file system that refused `O_DIRECT`); `None` for stores that are not
    /// files (object stores, in-process devices) and read-only ones.
    pub fn write_mode(&self) -> Option<String> {
        match &self.media {
            Media::File(m) => match (m.direct(), m.buffered_why.get()) {
                (Some(_), _) => Some("O_DIRECT".to_string()),
                (None, Some(why)) => Some(format!("buffered ({why})")),
                (None, None) => None,
            },
            _ => None,
        }
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes.load(Ordering::Acquire)
    }

    /// Makes room for a volume that goes from `from` to `to` bytes (blocking, durable on
    /// return). Growing, the bytes from `from` to `to` read as zeros afterwards, whatever
    /// the store held there (a tail an earlier shrink left on a device, or a file longer
    /// than its volume after a crash): a file is cut at `from` and extended, a block
    /// device (or in-process device) has that range zeroed and refuses to grow past its
    /// own size. Shrinking, a file is cut at `to`; a device keeps its bytes (nothing reads
    /// past the volume's end). A volume on an object store grows by a root write with the
    /// new size (segments layout only) and never shrinks ([`ObjectVolume::grow`]); its
    /// size should be recorded before ([`BackingStore::records_size_first`]).
    pub fn resize(&self, from: u64, to: u64) -> io::Result<()> {
        let file = match &self.media {
            Media::Object(vol) => {
                vol.grow(to)?;
                self.size_bytes.store(to, Ordering::Release);
                return Ok(());
            }
            Media::File(m) => Some(&m.file),
            Media::Device(_) => None,
        };
        if let Some(file) = file
            && file.metadata()?.is_file()
        {
            if to > from {
                file.set_len(from)?;
            }
            file.set_len(to)?;
            file.sync_all()?;
            self.size_bytes.store(to, Ordering::Release);
            return Ok(());
        }
        let device_bytes = self.size_bytes();
        if to > device_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the device {} has {device_bytes} bytes, fewer than the {to} asked for: a \
                     volume on a device can grow to the device's size at most",
                    self.path.display()
                ),
            ));
        }
        if to > from {
            self.zero_range(from, to - from, ZeroMode::Allocate)?;
            self.flush()?;
        }
        Ok(())
    }

    fn delay(&self, min_us: u64, max_us: u64) {
        if max_us == 0 {
            return;
        }
        let us = if max_us > min_us {
            // SplitMix64 step: cheap, lock-free, good enough to spread delays.
            let z = self
                .rng
                .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
                .wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            min_us + (z ^ (z >> 31)) % (max_us - min_us + 1)
        } else {
            min_us
        };
        std::thread::sleep(Duration::from_micros(us));
    }

    /// The holes of the store in `offset..end`, in order, each a byte range the store
    /// reads as zeros without holding it (blocking). A file asks its file system
    /// (`SEEK_HOLE`/`SEEK_DATA`, lseek(2)); an object volume its map (objects never
    /// written, or cleared by a commit of zeros); a file system or device that cannot say
    /// has no holes, and neither has a block device or an in-process device. Only the
    /// answer of one moment: a write can fill a hole right after.
    pub fn holes(&self, offset: u64, end: u64) -> io::Result<Vec<std::ops::Range<u64>>> {
        let end = end.min(self.size_bytes());
        match &self.media {
            Media::File(m) => file_holes(&m.file, offset, end),
            Media::Object(vol) => Ok(vol.holes(offset, end)),
            Media::Device(_) => Ok(Vec::new()),
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset` (blocking).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len();
        self.measured(Op::Read, len, || match &self.media {
            Media::File(m) => m.file.read_exact_at(buf, offset),
            Media::Device(dev) => dev.read_at(buf, offset).map_err(io::Error::other),
            Media::Object(vol) => vol.read_at(buf, offset),
        })
    }

    /// Reads `bufs`, one after the other, from `offset` on, in one read (blocking): one
    /// `preadv` on a file, one read of the run's GETs on an object volume (copied into
    /// `bufs`: each block keeps a buffer of its own), a read per buffer on an in-process
    /// device. Counted as one read of their total length.
    pub fn read_blocks_at(&self, bufs: &mut [Vec<u8>], offset: u64) -> io::Result<()> {
        if let [buf] = bufs {
            return self.read_at(buf, offset);
        }
        let len = bufs.iter().map(|b| b.len()).sum();
        self.measured(Op::Read, len, || match &self.media {
            Media::File(m) => preadv_all(&m.file, bufs, offset),
            Media::Device(dev) => {
                let mut at = offset;
                for buf in bufs.iter_mut() {
                    dev.read_at(buf, at).map_err(io::Error::other)?;
                    at += buf.len() as u64;
                }
                Ok(())
            }
            // Whole blocks (the engine reads no other): each copied once, from its GET.
            Media::Object(vol) => {
                let bs = u64::from(vol.geometry().block_bytes.max(1));
                let misfit = || io::Error::new(io::ErrorKind::InvalidInput, "not whole blocks");
                if !offset.is_multiple_of(bs) || bufs.iter().any(|b| b.len() as u64 > bs) {
                    return Err(misfit());
                }
                let blocks = vol.read_blocks(offset / bs, bufs.len() as u64)?;
                for (buf, block) in bufs.iter_mut().zip(blocks) {
                    let n = buf.len();
                    buf.copy_from_slice(block.get(..n).ok_or_else(misfit)?);
                }
                Ok(())
            }
        })
    }

    /// The most bytes a read of neighbouring blocks should take at once: 8 MiB on an
    /// object volume (its GETs, one per object, run in parallel), 1 MiB elsewhere (ZFS's
    /// `zfs_vdev_aggregation_limit`).
    pub fn read_run_bytes(&self) -> u64 {
        match &self.media {
            Media::Object(_) => 8 << 20,
            Media::File(_) | Media::Device(_) => 1 << 20,
        }
    }

    /// The smallest piece the prefetcher reads a stream ahead in (0: at every read, as
    /// `dmu_zfetch` does): 4 MiB on an object volume, where each GET waits a round trip
    /// but many run at once, so a stream read ahead in half-segment requests per demand
    /// read pays the round trips and twice the requests (a bill's count) of whole ones.
    pub fn prefetch_chunk_bytes(&self) -> u64 {
        match &self.media {
            Media::Object(_) => 4 << 20,
            Media::File(_) | Media::Device(_) => 0,
        }
    }

    /// The blocks of `window` around `block` one read of the store takes with it at no
    /// extra request (see `ObjectVolume::record_neighbours`): only an object volume's
    /// neighbours are fetched around a miss (`object_read_around`), so just `block` for
    /// the others.
    pub fn record_neighbours(
        &self,
        block: u64,
        window: std::ops::Range<u64>,
    ) -> std::ops::Range<u64> {
        match &self.media {
            Media::Object(vol) => vol.record_neighbours(block, window),
            Media::File(_) | Media::Device(_) => block..block + 1,
        }
    }

    /// Writes all of `buf` at `offset` (blocking).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.measured(Op::Write, buf.len(), || match &self.media {
            Media::File(m) => m.file.write_all_at(buf, offset),
            Media::Device(dev) => dev.write_at(buf, offset).map_err(io::Error::other),
            Media::Object(vol) => vol.write_at(buf, offset),
        })
    }

    /// Runs one read or write of `len` bytes: the latency model's delay first, then the
    /// I/O, counted and timed (errors too).
    fn measured(&self, op: Op, len: usize, io: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let started = Instant::now();
        let s = &self.stats;
        let (count, bytes, latency) = match op {
            Op::Read => {
                self.delay(self.latency.read_min_us, self.latency.read_max_us);
                (&s.reads, &s.read_bytes, &s.read_latency)
            }
            Op::Write => {
                self.delay(self.latency.write_min_us, self.latency.write_max_us);
                (&s.writes, &s.write_bytes, &s.write_latency)
            }
        };
        count.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(len as u64, Ordering::Relaxed);
        let result = io();
        latency.record(started.elapsed());
        result.inspect_err(|_| {
            s.errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Writes the concatenation of `parts` at `offset` (blocking) as one write: on a file
    /// its whole pages with `O_DIRECT` (copied into aligned buffers of up to 256 KiB,
    /// written one after the other) and any unaligned head or tail with one `pwritev` through the page cache.
    pub fn write_vectored_at(&self, parts: &[&[u8]], offset: u64) -> io::Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let started = Instant::now();
        self.delay(self.latency.write_min_us, self.latency.write_max_us);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .write_bytes
            .fetch_add(total as u64, Ordering::Relaxed);
        let result = match &self.media {
            Media::File(m) => m.write_parts(parts, offset, &self.stats).map(|direct| {
                self.stats
                    .direct_write_bytes
                    .fetch_add(direct, Ordering::Relaxed);
            }),
            Media::Device(dev) => dev
                .write_at(&parts.concat(), offset)
                .map_err(io::Error::other),
            Media::Object(vol) => vol.write_at(&parts.concat(), offset),
        };
        self.stats.write_latency.record(started.elapsed());
        result.inspect_err(|_| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Whether ranges are zeroed in place (no zeros written): on a file or block device
    /// whose `fallocate` did not refuse yet. NBD's FAST_ZERO is refused when not.
    pub fn zeroes_fast(&self) -> bool {
        match &self.media {
            Media::File(m) => m.slow_zeroes_why.get().is_none(),
            Media::Device(_) | Media::Object(_) => false,
        }
    }

    /// Zeroes `len` bytes at `offset` (blocking): in place as `mode` says on a file or
    /// block device, else, and where its `fallocate` refuses, by writing zeros (a store
    /// that refused once is written from then on, see [`BackingStore::zeroes_fast`]).
    /// Counted in `zeroes`, and as a write when zeros are written.
    pub fn zero_range(&self, offset: u64, len: u64, mode: ZeroMode) -> io::Result<()> {
        self.stats.zeroes.fetch_add(1, Ordering::Relaxed);
        self.stats.zeroed_bytes.fetch_add(len, Ordering::Relaxed);
        if let Media::File(m) = &self.media
            && m.slow_zeroes_why.get().is_none()
        {
            let started = Instant::now();
            self.delay(self.latency.write_min_us, self.latency.write_max_us);
            let done = fallocate_zero(&m.file, offset, len, mode).inspect_err(|_| {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
            })?;
            self.stats.write_latency.record(started.elapsed());
            if done {
                return Ok(());
            }
            let _ = m.slow_zeroes_why.set(format!(
                "fallocate refused to zero {len} bytes at {offset} ({mode:?})"
            ));
        }
        self.stats
            .zeroes_written_bytes
            .fetch_add(len, Ordering::Relaxed);
        let zeros = crate::arc::shared_zeros();
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let n = (end - at).min(ZERO_WRITE_BYTES);
            let mut parts = Vec::new();
            let mut left = n as usize;
            while left > 0 {
                let piece = left.min(zeros.len());
                parts.push(&zeros[..piece]);
                left -= piece;
            }
            self.write_vectored_at(&parts, at)?;
            at += n;
        }
        Ok(())
    }

    /// Makes every completed write durable (fdatasync).
    pub fn flush(&self) -> io::Result<()> {
        let started = Instant::now();
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        let result = match &self.media {
            Media::File(m) => m.file.sync_data(),
            Media::Device(dev) => dev.flush().map_err(io::Error::other),
            Media::Object(vol) => vol.flush(),
        };
        self.stats.flush_latency.record(started.elapsed());
        result.inspect_err(|_| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        })
    }
}

/// Most bytes of zeros [`BackingStore::zero_range`] writes at once when it must write them.
const ZERO_WRITE_BYTES: u64 = 1 << 20;

/// Most buffers one `pwritev` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Reads `bufs` full, in order, from `offset` on, with `preadv` (at most [`IOV_MAX`]
/// buffers a call), retrying after short reads and interruptions; the end of the file
/// before they are full is an error.
fn preadv_all(file: &File, bufs: &mut [Vec<u8>], offset: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // The first buffer not full yet, and how much of it is.
    let (mut first, mut done) = (0usize, 0usize);
    let mut at = offset;
    loop {
        // Empty buffers need nothing.
        while first < bufs.len() && bufs[first].len() == done {
            first += 1;
            done = 0;
        }
        if first == bufs.len() {
            return Ok(());
        }
        let iov: Vec<libc::iovec> = bufs[first..]
            .iter_mut()
            .take(IOV_MAX)
            .enumerate()
            .map(|(i, buf)| {
                let skip = if i == 0 { done } else { 0 };
                libc::iovec {
                    iov_base: buf[skip..].as_mut_ptr().cast(),
                    iov_len: buf.len() - skip,
                }
            })
            .collect();
        let off = libc::off_t::try_from(at).map_err(io::Error::other)?;
        // SAFETY: every iovec points into a buffer of `bufs`, borrowed mutably for the
        // call, with its length within that buffer; the descriptor is `file`'s.
        let n = unsafe { libc::preadv(file.as_raw_fd(), iov.as_ptr(), iov.len() as i32, off) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut n = n as usize;
        at += n as u64;
        while n > 0 {
            let left = bufs[first].len() - done;
            if n < left {
                done += n;
                n = 0;
            } else {
                n -= left;
                first += 1;
                done = 0;
            }
        }
    }
}

/// Writes every byte of `parts`, in order, at `offset`, retrying after short writes and
/// interruptions.
fn pwritev_all(file: &File, parts: &[&[u8]], offset: u64) -> io::Result<()> {
    let mut rest = Unwritten::new(parts, offset);
    while !rest.is_empty() {
        match rest.write_once(file, usize::MAX) {
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// What is left of a vectored write: its parts not written yet (the first one maybe in
/// part), and where they go.
struct Unwritten<'a> {
    /// The write's non-empty parts; those before `first` are written.
    parts: Vec<&'a [u8]>,
    first: usize,
    offset: u64,
}

impl<'a> Unwritten<'a> {
    fn new(parts: &[&'a [u8]], offset: u64) -> Self {
        Unwritten {
            parts: parts.iter().copied().filter(|p| !p.is_empty()).collect(),
            first: 0,
            offset,
        }
    }

    fn is_empty(&self) -> bool {
        self.first >= self.parts.len()
    }

    /// The parts left.
    fn parts(&self) -> &[&'a [u8]] {
        &self.parts[self.first..]
    }

    /// The bytes left.
    fn len(&self) -> usize {
        self.parts().iter().map(|p| p.len()).sum()
    }

    /// One `pwritev` on `file` of the next bytes (at most `max`, and at most
    /// [`IOV_MAX`] parts), moving past what it wrote. Returns the bytes written; the
    /// system call's error as it is (EINTR included: the caller decides); no progress is
    /// `WriteZero`.
    fn write_once(&mut self, file: &File, max: usize) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        let mut budget = max;
        let iov: Vec<libc::iovec> = self
            .parts()
            .iter()
            .take(IOV_MAX)
            .map_while(|p| {
                let take = p.len().min(budget);
                budget -= take;
                (take > 0).then_some(libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: take,
                })
            })
            .collect();
        let Ok(at) = libc::off_t::try_from(self.offset) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // SAFETY: every iovec points at a live slice of `parts` for the call's duration.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), iov.len() as i32, at) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        let written = n as usize;
        self.offset += written as u64;
        let mut left = written;
        while left > 0 {
            let head = self.parts[self.first];
            if left >= head.len() {
                left -= head.len();
                self.first += 1;
            } else {
                self.parts[self.first] = &head[left..];
                left = 0;
            }
        }
        Ok(written)
    }
}

/// Size of a regular file or a block device.
fn file_size(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    // Block devices report 0 in metadata; seeking to the end gives their size.
    let mut handle = file.try_clone()?;
    handle.seek(SeekFrom::End(0))
}

/// `SEEK_HOLE`/`SEEK_DATA` over `offset..end` of `file` (see [`BackingStore::holes`]).
fn file_holes(file: &File, offset: u64, end: u64) -> io::Result<Vec<std::ops::Range<u64>>> {
    use std::os::fd::AsRawFd;
    // One lseek(2); `None` where there is no hole (or no data) at or after `from`.
    let seek = |from: u64, whence: libc::c_int| -> io::Result<Option<u64>> {
        let from = libc::off_t::try_from(from).map_err(io::Error::other)?;
        // SAFETY: lseek takes the descriptor `file` owns and plain integers; it moves the
        // file's offset, which larch never uses (every read and write gives its own).
        let at = unsafe { libc::lseek(file.as_raw_fd(), from, whence) };
        if at >= 0 {
            return Ok(Some(at as u64));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            // No data after `from` (SEEK_DATA), or past the end.
            Some(libc::ENXIO) => Ok(None),
            _ => Err(err),
        }
    };
    let mut holes = Vec::new();
    let mut at = offset;
    while at < end {
        let hole = match seek(at, libc::SEEK_HOLE) {
            Ok(Some(hole)) => hole,
            Ok(None) => break,
            // A file system without the two whences: no holes known.
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        if hole >= end {
            break;
        }
        let data = seek(hole, libc::SEEK_DATA)?.unwrap_or(end).min(end);
        if data > hole {
            holes.push(hole..data);
        }
        at = data;
    }
    Ok(holes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_writes_land_in_order_at_their_offset() {
        let dir = std::env::temp_dir().join(format!("larch-backing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("vol.img");
        std::fs::write(&path, vec![0xeeu8; 1 << 20]).expect("file");
        let store = BackingStore::open(&path, false, LatencyModel::default()).expect("open");
        // More parts than one pwritev takes, empty ones among them.
        let parts: Vec<Vec<u8>> = (0..IOV_MAX + 300)
            .map(|i| vec![(i % 251) as u8; i % 7])
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        store.write_vectored_at(&refs, 4096).expect("write");
        let all = std::fs::read(&path).expect("read");
        let joined = parts.concat();
        assert_eq!(&all[4096..4096 + joined.len()], &joined[..]);
        assert!(all[..4096].iter().all(|&b| b == 0xee));
        assert!(all[4096 + joined.len()..].iter().all(|&b| b == 0xee));
        assert_eq!(
            store.stats.write_bytes.load(Ordering::Relaxed),
            joined.len() as u64
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file of `len` 0xee bytes in a directory of its own (tests run in parallel, and
    /// one of them removes its directory when it ends).
    fn scratch_file(name: &str, len: usize) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "larch-backing-{}-{}",
            std::process::id(),
            name.trim_end_matches(".img")
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join(name);
        std::fs::write(&path, vec![0xeeu8; len]).expect("file");
        path
    }

    /// A read of several blocks fills each buffer with its own bytes in one `preadv`
    /// (counted as one read), empty buffers included; past the end of the file it fails.
    #[test]
    fn blocks_read_together_each_get_their_bytes() {
        let path = scratch_file("vectored.img", 0);
        let bytes: Vec<u8> = (0..64 << 10).map(|i: u32| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let store = BackingStore::open(&path, true, LatencyModel::default()).unwrap();
        let mut bufs = vec![vec![0u8; 4096], vec![], vec![0u8; 8192], vec![0u8; 100]];
        store.read_blocks_at(&mut bufs, 1000).unwrap();
        assert_eq!(store.stats.reads.load(Ordering::Relaxed), 1);
        assert_eq!(bufs[0], bytes[1000..5096]);
        assert_eq!(bufs[2], bytes[5096..13288]);
        assert_eq!(bufs[3], bytes[13288..13388]);
        let mut past = vec![vec![0u8; 4096], vec![0u8; 4096]];
        let err = store
            .read_blocks_at(&mut past, (64 << 10) - 4096)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn direct_split_keeps_whole_pages_in_the_middle() {
        // Aligned on both ends: all direct.
        assert_eq!(direct_split(8192, 16384, 4096), (0, 16384));
        // Unaligned start and end: head to the first page, tail after the last.
        assert_eq!(direct_split(1536, 10240, 4096), (2560, 4096));
        // Shorter than a page, or inside one: nothing direct.
        assert_eq!(direct_split(4096, 1024, 4096), (1024, 0));
        assert_eq!(direct_split(100, 3000, 4096), (3000, 0));
        // Crosses a page boundary without holding a whole page.
        assert_eq!(direct_split(3072, 2048, 4096), (2048, 0));
        // A volume's short last block: the direct part stops at the last whole page.
        assert_eq!(direct_split(1 << 20, 8192 + 512, 4096), (0, 8192));
        assert_eq!(direct_split(0, 0, 4096), (0, 0));
    }

    #[test]
    fn parts_range_slices_across_parts() {
        let (a, b, c) = (vec![1u8; 3], vec![2u8; 4], vec![3u8; 5]);
        let parts: Vec<&[u8]> = vec![&a, &b, &c];
        assert_eq!(parts_range(&parts, 2, 6).concat(), vec![1, 2, 2, 2, 2, 3]);
        assert_eq!(parts_range(&parts, 7, 5).concat(), vec![3; 5]);
        assert!(parts_range(&parts, 12, 0).is_empty());
        assert_eq!(parts_range(&parts, 0, 12).len(), 3);
    }

    /// Writes each case's parts at its offset through `store`, applies the same writes to
    /// `model` (the file's expected bytes), and checks the file and the store's reads.
    fn write_and_compare(
        store: &BackingStore,
        path: &Path,
        model: &mut [u8],
        cases: &[(u64, Vec<&[u8]>)],
    ) {
        for (offset, parts) in cases {
            store.write_vectored_at(parts, *offset).expect("write");
            let joined = parts.concat();
            model[*offset as usize..*offset as usize + joined.len()].copy_from_slice(&joined);
        }
        store.flush().expect("flush");
        let all = std::fs::read(path).expect("read");
        assert!(all == model, "file differs from the model");
        let mut back = vec![0u8; model.len()];
        store.read_at(&mut back, 0).expect("read through the store");
        assert!(
            back == model,
            "buffered reads see what the direct writes wrote"
        );
    }

    /// Removes the directories of scratch files.
    fn remove_scratch(paths: &[&Path]) {
        for path in paths {
            if let Some(dir) = path.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    fn pattern(seed: u8, n: usize) -> Vec<u8> {
        (0..n).map(|i| seed ^ (i % 251) as u8).collect()
    }

    fn refs(parts: &[Vec<u8>]) -> Vec<&[u8]> {
        parts.iter().map(|p| &p[..]).collect()
    }

    #[test]
    fn direct_writes_with_unaligned_heads_and_a_short_tail() {
        // A volume of 1 MiB + 1536 bytes: its last 512-byte "block" ends off a page.
        let len = (1 << 20) + 1536;
        let path = scratch_file("direct.img", len);
        let mut model = vec![0xeeu8; len];
        let store = BackingStore::open(&path, false, LatencyModel::default()).expect("open");
        assert_eq!(store.write_mode().as_deref(), Some("O_DIRECT"));
        // Off the page by 8 bytes: copied through the kept aligned buffer.
        let backing = pattern(1, 16384 + 8);
        let off = 8 + usize::from((backing[8..].as_ptr() as usize).is_multiple_of(4096));
        let whole_refs = vec![&backing[off..off + 8192], &backing[off + 8192..off + 16384]];
        let small: Vec<Vec<u8>> = (0..24).map(|i| pattern(10 + i as u8, 512)).collect();
        let short = vec![pattern(40, 1024)];
        let tail = vec![pattern(50, 4096 + 1536)];
        let cases = vec![
            // Whole 8K blocks, page-aligned: all direct.
            (8192, whole_refs),
            // 512-byte blocks from 1536 to 13824: a head, two whole pages, a tail.
            (1536, refs(&small)),
            // Less than a page.
            (20480 + 512, refs(&short)),
            // The volume's tail: aligned start, short end.
            ((1 << 20) - 4096, refs(&tail)),
        ];
        write_and_compare(&store, &path, &mut model, &cases);
        let direct = store.stats.direct_write_bytes.load(Ordering::Relaxed);
        // 16384 + 8192 (two whole pages of the 512-byte run) + 4096 (the tail's first
        // page) went direct; the rest through the page cache.
        assert_eq!(direct, 16384 + 8192 + 4096);
        let kept = store.stats.direct_buffer_bytes.load(Ordering::Relaxed);
        assert_eq!(kept, DIRECT_CHUNK_BYTES as u64, "one kept buffer, reused");
        // Longer than one aligned buffer: split into chunks.
        let big: Vec<Vec<u8>> = (0..(DIRECT_CHUNK_BYTES / 4096 + 3))
            .map(|i| pattern(i as u8, 4096))
            .collect();
        let len2 = DIRECT_CHUNK_BYTES * 2;
        let path2 = scratch_file("direct-big.img", len2);
        let mut model2 = vec![0xeeu8; len2];
        let store2 = BackingStore::open(&path2, false, LatencyModel::default()).expect("open");
        write_and_compare(&store2, &path2, &mut model2, &[(4096, refs(&big))]);
        assert_eq!(
            store2.stats.direct_write_bytes.load(Ordering::Relaxed),
            (DIRECT_CHUNK_BYTES + 3 * 4096) as u64
        );
        remove_scratch(&[&path, &path2]);
    }

    #[test]
    fn page_aligned_buffers_are_written_as_they_are() {
        let len = 4 << 20;
        let path = scratch_file("zero-copy.img", len);
        let mut model = vec![0xeeu8; len];
        let store = BackingStore::open(&path, false, LatencyModel::default()).expect("open");
        let aligned = |seed: u8, n: usize| {
            let mut buf = AlignedBuf::zeroed(n);
            buf.copy_from_slice(&pattern(seed, n));
            buf
        };
        // Eight 128K blocks in aligned buffers: one write, no copy.
        let blocks: Vec<AlignedBuf> = (0..8).map(|i| aligned(i, 128 << 10)).collect();
        let block_refs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
        write_and_compare(&store, &path, &mut model, &[(1 << 20, block_refs)]);
        assert_eq!(
            store.stats.direct_write_bytes.load(Ordering::Relaxed),
            1 << 20
        );
        assert_eq!(
            store.stats.direct_buffer_bytes.load(Ordering::Relaxed),
            0,
            "no aligned buffer was needed"
        );
        // Aligned, off the page, aligned again, then a short tail; and a run whose head
        // is off the page (its first part's direct middle starts inside it).
        let off_page = pattern(77, 8192 + 1);
        let tail = pattern(78, 1000);
        let mixed: Vec<&[u8]> = vec![
            &blocks[0][..65536],
            &off_page[1..],
            &blocks[1][..65536],
            &tail,
        ];
        let headed: Vec<&[u8]> = vec![&blocks[2][..8192], &blocks[3][..]];
        write_and_compare(
            &store,
            &path,
            &mut model,
            &[(2 << 20, mixed), ((3 << 20) + 512, headed)],
        );
        remove_scratch(&[&path]);
    }

    #[test]
    fn a_refused_direct_write_falls_back_to_the_page_cache_for_good() {
        let len = 1 << 20;
        let path = scratch_file("refused.img", len);
        let mut store = BackingStore::open(&path, false, LatencyModel::default()).expect("open");
        if let Media::File(m) = &mut store.media {
            m.refuse_direct_writes = true;
        }
        let data: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8 + 1; 8192]).collect();
        let mut model = vec![0xeeu8; len];
        write_and_compare(
            &store,
            &path,
            &mut model,
            &[(8192, refs(&data)), (65536, refs(&data))],
        );
        assert_eq!(store.stats.direct_write_bytes.load(Ordering::Relaxed), 0);
        let mode = store.write_mode().expect("a file");
        assert!(
            mode.starts_with("buffered (the file system refused an O_DIRECT write"),
            "{mode}"
        );
        // Not tried at all: buffered from the start, and said so.
        let refused = path;
        let path = scratch_file("plain.img", len);
        let plain =
            BackingStore::open_with(&path, false, LatencyModel::default(), false).expect("open");
        assert_eq!(
            plain.write_mode().as_deref(),
            Some("buffered (O_DIRECT not tried)")
        );
        let nines = vec![vec![9u8; 8192]];
        write_and_compare(
            &plain,
            &path,
            &mut vec![0xeeu8; len],
            &[(4096, refs(&nines))],
        );
        // Read-only stores are never written.
        let ro = BackingStore::open(&path, true, LatencyModel::default()).expect("open");
        assert_eq!(ro.write_mode(), None);
        remove_scratch(&[&path, &refused]);
    }

    #[test]
    fn a_short_direct_write_off_a_page_is_not_a_refusal() {
        let len = 1 << 20;
        let path = scratch_file("short.img", len);
        let mut store = BackingStore::open(&path, false, LatencyModel::default()).expect("open");
        assert_eq!(store.write_mode().as_deref(), Some("O_DIRECT"));
        if let Media::File(m) = &mut store.media {
            // The first direct write moves 512 bytes of 32 KiB, as one that ran out of
            // space part way on a file system of 512-byte blocks might. Writing on from
            // there direct fails with EINVAL on a device of 4K logical blocks, which used
            // to send the store to the page cache for good, saying the file system
            // refused O_DIRECT.
            *m.cut_next_direct_write.get_mut() = 512;
        }
        // Not page-aligned buffers: copied into a kept aligned buffer, one direct write.
        let data: Vec<Vec<u8>> = (0..4).map(|i| pattern(60 + i as u8, 8192)).collect();
        let mut model = vec![0xeeu8; len];
        write_and_compare(
            &store,
            &path,
            &mut model,
            &[(8192, refs(&data)), (65536, refs(&data))],
        );
        assert_eq!(
            store.write_mode().as_deref(),
            Some("O_DIRECT"),
            "a short write is not a refusal"
        );
        // The cut write's 512 bytes count as direct; the rest of that write went through
        // the page cache, and the second write direct again.
        assert_eq!(
            store.stats.direct_write_bytes.load(Ordering::Relaxed),
            512 + 4 * 8192
        );
        remove_scratch(&[&path]);
    }
}
