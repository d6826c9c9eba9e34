//! The one way a cached copy is read: from the device (through io_uring where it can, on
//! the blocking pool otherwise), verified by [`larch_l2::verify_copy`], counted once.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use larch_io::IoError;
use larch_l2::{CopyRef, ReadError};

use super::CacheDevice;
use super::index::L2Loc;
use crate::engine::Engine;

/// What reading a cached copy gave.
#[derive(Debug)]
pub(crate) enum L2Read {
    /// The block's bytes, verified.
    Hit(Bytes),
    /// The copy failed (I/O error or checksum): it is marked bad and counted; the
    /// backing store has the block.
    BadCopy,
    /// The device is not online (faulted, removed): nothing was read or counted.
    Unavailable,
}

impl Engine {
    /// Reads the copy at `loc` of a block of `psize` bytes whose index key is
    /// `index_key` (in the shard of `key`).
    pub(crate) async fn read_l2(
        self: &Arc<Self>,
        key: &larch_policy::BlockKey,
        index_key: u64,
        psize: usize,
        loc: L2Loc,
    ) -> L2Read {
        let Some(device) = self.l2.get(loc.device) else {
            return L2Read::Unavailable;
        };
        let Some(geometry) = device.readable_geometry() else {
            return L2Read::Unavailable;
        };
        let copy = CopyRef {
            daddr: loc.copy.daddr,
            size_bytes: psize as u32,
            checksum: loc.copy.checksum,
        };
        let started = Instant::now();
        let read = self.read_copy(&device, &geometry, &copy).await;
        device.io.reads.fetch_add(1, Ordering::Relaxed);
        device
            .io
            .read_bytes
            .fetch_add(psize as u64, Ordering::Relaxed);
        device.io.read_latency.record(started.elapsed());
        match read {
            Ok(bytes) => {
                self.stats.l2_hits.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .l2_read_bytes
                    .fetch_add(psize as u64, Ordering::Relaxed);
                L2Read::Hit(bytes)
            }
            Err(err) => {
                device.io.read_errors.fetch_add(1, Ordering::Relaxed);
                let counter = if err.is_checksum() {
                    &self.stats.l2_cksum_bad
                } else {
                    &self.stats.l2_io_error
                };
                counter.fetch_add(1, Ordering::Relaxed);
                self.mark_bad(key, index_key, &loc);
                L2Read::BadCopy
            }
        }
    }

    /// Reads and verifies `copy` from `device`: through io_uring when it is on and the
    /// device has a descriptor, else (or when the ring is full) on the blocking pool.
    /// Returns the record's bytes.
    async fn read_copy(
        self: &Arc<Self>,
        device: &Arc<CacheDevice>,
        geometry: &larch_l2::Geometry,
        copy: &CopyRef,
    ) -> Result<Bytes, ReadError> {
        copy.check_range(geometry)?;
        let size = copy.size_bytes as usize;
        let len = copy.read_len(geometry);
        let reader = self
            .l2
            .uring_reader(self.tunables.l2arc_io_uring(), self.background_runtime());
        if let Some(reader) = reader {
            match reader.read(device.dev(), copy.daddr, len).await {
                Ok(Some(bytes)) => {
                    larch_l2::verify_copy(copy, &bytes)?;
                    return Ok(bytes.slice(..size));
                }
                Ok(None) => {}
                // A file system can take O_DIRECT at open and refuse it at I/O. The
                // blocking read below goes through the device, which then falls back to
                // buffered I/O (and gives io_uring its buffered descriptor from then on),
                // so one such read does not cost the copy; an EINVAL with another cause
                // is reported by that read.
                Err(source) if source.raw_os_error() == Some(libc::EINVAL) => {}
                Err(source) => {
                    return Err(ReadError::Io(IoError::Os {
                        op: "read",
                        offset_bytes: copy.daddr,
                        len_bytes: len as u64,
                        source,
                    }));
                }
            }
        }
        let (device, geometry, copy) = (Arc::clone(device), *geometry, *copy);
        let read = self
            .spawn_blocking(move || larch_l2::read_copy(&**device.dev(), &geometry, &copy))
            .await
            .map_err(|e| {
                ReadError::Io(IoError::Os {
                    op: "read",
                    offset_bytes: copy.daddr,
                    len_bytes: len as u64,
                    source: std::io::Error::other(e.to_string()),
                })
            })??;
        Ok(Bytes::from_owner(read).slice(..size))
    }

    /// A copy failed verification: the index marks it bad, so it is not read again, but
    /// keeps it until the block is overwritten (which then tombstones it) or the ring
    /// passes it. Dropping it at once would let a later overwrite skip the tombstone, and
    /// a restart could then restore this copy if its failure was transient.
    fn mark_bad(&self, key: &larch_policy::BlockKey, index_key: u64, loc: &L2Loc) {
        let mut shard = self.arc.shard(key);
        if let Some(d) = shard.l2.device_mut(loc.device) {
            d.mark_bad(index_key, loc.copy.ring_pos);
        }
    }
}
