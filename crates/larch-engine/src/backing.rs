//! Backing stores: the slow primary storage a volume's bytes live on. A backing store is a
//! plain file or block device whose bytes are exactly the volume's (no larch header), so it
//! stays usable without larch, or a volume on an object store ([`larch_object`]: S3 and
//! the stores that speak its API), whose writes are staged and made durable together by a
//! flush (one commit per TXG).
//!
//! For tests and benchmarks a backing store can carry a **latency model**: a fixed delay,
//! or a delay drawn uniformly from a range, added to every read and write. It is a device
//! model, off by default, and the only way to make a local file behave like a disk.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use larch_io::BlockDevice;
use larch_object::ObjectVolume;

use serde::{Deserialize, Serialize};

use crate::latency::LatencyHistogram;

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
}

/// Where a backing store's bytes are.
enum Media {
    /// A file or block device (the normal case).
    File(File),
    /// Any [`BlockDevice`]: in-process tests put a fault-injecting device here.
    Device(Arc<dyn BlockDevice>),
    /// A volume on an object store.
    Object(Arc<ObjectVolume>),
}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Media::File(file) => f.debug_tuple("File").field(file).finish(),
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
    size_bytes: u64,
    latency: LatencyModel,
    /// State of the delay generator (deterministic per store).
    rng: AtomicU64,
    /// The counters.
    pub stats: BackingStats,
}

impl BackingStore {
    /// Opens `path` for reading (and writing unless `read_only`).
    pub fn open(path: &Path, read_only: bool, latency: LatencyModel) -> io::Result<BackingStore> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        let size_bytes = file_size(&file)?;
        Ok(BackingStore {
            path: path.to_path_buf(),
            media: Media::File(file),
            size_bytes,
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
            size_bytes,
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
            size_bytes,
            latency,
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15 ^ size_bytes),
            stats: BackingStats::default(),
        }
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

    /// Records durably that this volume's log records up to `txg` were dropped (see
    /// [`larch_object::ObjectVolume::note_log_discarded`]); nothing for a file.
    pub fn note_log_discarded(&self, txg: u64) -> io::Result<()> {
        match self.object() {
            Some(vol) => vol.note_log_discarded(txg),
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
                self.stats
                    .writes
                    .fetch_add(blocks.len() as u64, Ordering::Relaxed);
                self.stats.write_bytes.fetch_add(total, Ordering::Relaxed);
                vol.stage_blocks(blocks);
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

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
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

    /// Reads exactly `buf.len()` bytes at `offset` (blocking).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let started = Instant::now();
        self.delay(self.latency.read_min_us, self.latency.read_max_us);
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.stats
            .read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        let result = match &self.media {
            Media::File(file) => file.read_exact_at(buf, offset),
            Media::Device(dev) => dev.read_at(buf, offset).map_err(io::Error::other),
            Media::Object(vol) => vol.read_at(buf, offset),
        };
        self.stats.read_latency.record(started.elapsed());
        result.inspect_err(|_| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Writes all of `buf` at `offset` (blocking).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let started = Instant::now();
        self.delay(self.latency.write_min_us, self.latency.write_max_us);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .write_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        let result = match &self.media {
            Media::File(file) => file.write_all_at(buf, offset),
            Media::Device(dev) => dev.write_at(buf, offset).map_err(io::Error::other),
            Media::Object(vol) => vol.write_at(buf, offset),
        };
        self.stats.write_latency.record(started.elapsed());
        result.inspect_err(|_| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Writes the concatenation of `parts` at `offset` (blocking) as one write: one
    /// `pwritev` on a file, so a TXG's run of blocks needs no copy into one buffer.
    pub fn write_vectored_at(&self, parts: &[&[u8]], offset: u64) -> io::Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let started = Instant::now();
        self.delay(self.latency.write_min_us, self.latency.write_max_us);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .write_bytes
            .fetch_add(total as u64, Ordering::Relaxed);
        let result = match &self.media {
            Media::File(file) => pwritev_all(file, parts, offset),
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

    /// Makes every completed write durable (fdatasync).
    pub fn flush(&self) -> io::Result<()> {
        let started = Instant::now();
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        let result = match &self.media {
            Media::File(file) => file.sync_data(),
            Media::Device(dev) => dev.flush().map_err(io::Error::other),
            Media::Object(vol) => vol.flush(),
        };
        self.stats.flush_latency.record(started.elapsed());
        result.inspect_err(|_| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        })
    }
}

/// Most buffers one `pwritev` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Writes every byte of `parts`, in order, at `offset`, retrying after short writes and
/// interruptions.
fn pwritev_all(file: &File, parts: &[&[u8]], mut offset: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut parts: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    let mut first = 0;
    while first < parts.len() {
        let iov: Vec<libc::iovec> = parts[first..]
            .iter()
            .take(IOV_MAX)
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        let Ok(at) = libc::off_t::try_from(offset) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // SAFETY: every iovec points at a live slice of `parts` for the call's duration.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), iov.len() as i32, at) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        let mut written = n as usize;
        offset += written as u64;
        while written > 0 {
            let head = parts[first];
            if written >= head.len() {
                written -= head.len();
                first += 1;
            } else {
                parts[first] = &head[written..];
                written = 0;
            }
        }
    }
    Ok(())
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
}
