//! The one way a cached copy is read: from the device (through io_uring where it can, on
//! the blocking pool otherwise), verified by [`larch_l2::verify_copy`], counted once.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use larch_io::IoError;
use larch_l2::{CopyRef, ReadError};

use super::index::L2Loc;
use super::{CacheDevice, L2Arc};
use crate::latency::Queued;

/// What reading a cached copy gave.
#[derive(Debug)]
pub(crate) enum L2Read {
    /// The block's bytes, verified.
    Hit(Bytes),
    /// The copy failed (I/O error or checksum): it is marked bad and counted; the
    /// backing store has the block.
    BadCopy,
    /// The ring's evict hand passed the copy while it was read, and the bytes read did
    /// not verify: a feed wrote over it meanwhile. Counted as such, not as a device
    /// error; the index has dropped the copy already. The backing store has the block.
    Evicted,
    /// The device is not online (faulted, removed): nothing was read or counted.
    Unavailable,
}

impl L2Arc {
    /// Reads the copy at `loc` of a block of `psize` bytes whose index key is
    /// `index_key` (in the shard of `key`).
    pub(crate) async fn read_l2(
        &self,
        key: &larch_policy::BlockKey,
        index_key: u64,
        psize: usize,
        loc: L2Loc,
    ) -> L2Read {
        let Some((device, geometry, copy)) = self.copy_at(psize, &loc) else {
            return L2Read::Unavailable;
        };
        let started = Instant::now();
        let read = self.read_copy(&device, &geometry, &copy).await;
        device.io.read_latency.record(started.elapsed());
        self.settle_read(&device, key, index_key, psize, &loc, read)
    }

    /// [`L2Arc::read_l2`] done on this thread, blocking it for the device's read: for a
    /// caller that cannot wait otherwise (a volume looking a block-map page up).
    pub(crate) fn read_l2_now(
        &self,
        key: &larch_policy::BlockKey,
        index_key: u64,
        psize: usize,
        loc: L2Loc,
    ) -> L2Read {
        let Some((device, geometry, copy)) = self.copy_at(psize, &loc) else {
            return L2Read::Unavailable;
        };
        let started = Instant::now();
        let read = copy.check_range(&geometry).and_then(|()| {
            let _active = device.io.read_queue.enter().issue();
            let read = larch_l2::read_copy(&**device.dev(), &geometry, &copy)?;
            let mut bytes = Bytes::from_owner(read);
            bytes.truncate(psize);
            Ok(bytes)
        });
        device.io.read_latency.record(started.elapsed());
        self.settle_read(&device, key, index_key, psize, &loc, read)
    }

    /// The device of the copy at `loc` (of `psize` bytes), its geometry and where the
    /// copy is, if the device can be read now.
    fn copy_at(
        &self,
        psize: usize,
        loc: &L2Loc,
    ) -> Option<(Arc<CacheDevice>, larch_l2::Geometry, CopyRef)> {
        let device = self.devices.get(loc.device)?;
        let geometry = device.readable_geometry()?;
        let copy = CopyRef {
            daddr: loc.copy.daddr,
            size_bytes: psize as u32,
            checksum: loc.copy.checksum,
        };
        Some((device, geometry, copy))
    }

    /// Counts a read of the copy at `loc` and settles a failed one (see
    /// [`L2Arc::settle_failed`]).
    fn settle_read(
        &self,
        device: &CacheDevice,
        key: &larch_policy::BlockKey,
        index_key: u64,
        psize: usize,
        loc: &L2Loc,
        read: Result<Bytes, ReadError>,
    ) -> L2Read {
        device.io.reads.fetch_add(1, Ordering::Relaxed);
        device
            .io
            .read_bytes
            .fetch_add(psize as u64, Ordering::Relaxed);
        match read {
            Ok(bytes) => {
                self.stats.l2_hits.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .l2_read_bytes
                    .fetch_add(psize as u64, Ordering::Relaxed);
                L2Read::Hit(bytes)
            }
            Err(err) => {
                if self.settle_failed(key, index_key, loc, err.is_checksum()) {
                    self.stats
                        .l2_evicted_in_flight
                        .fetch_add(1, Ordering::Relaxed);
                    return L2Read::Evicted;
                }
                device.io.read_errors.fetch_add(1, Ordering::Relaxed);
                let counter = if err.is_checksum() {
                    &self.stats.l2_cksum_bad
                } else {
                    &self.stats.l2_io_error
                };
                counter.fetch_add(1, Ordering::Relaxed);
                L2Read::BadCopy
            }
        }
    }

    /// A read of the copy at `loc` failed (`checksum`: its bytes did not verify); settled
    /// in one hold of the shard's lock. Returns whether the evict hand passed the copy
    /// since it was looked up: the read holds no lock while the device works, so a feed
    /// can move the hand past the copy and write over its space before the read gets
    /// there, and bytes that fail verification then say nothing about the device.
    /// Otherwise the copy is marked bad: the index keeps it, unread, until the block is
    /// overwritten (which then tombstones it) or the ring passes it. Dropping it at once
    /// would let a later overwrite skip the tombstone, and a restart could then restore
    /// this copy if its failure was transient.
    fn settle_failed(
        &self,
        key: &larch_policy::BlockKey,
        index_key: u64,
        loc: &L2Loc,
        checksum: bool,
    ) -> bool {
        let mut shard = self.arc.shard(key);
        let Some(d) = shard.l2.device_mut(loc.device) else {
            return false;
        };
        if checksum && d.passed(loc.copy.ring_pos) {
            return true;
        }
        d.mark_bad(index_key, loc.copy.ring_pos);
        false
    }

    /// Reads and verifies `copy` from `device`: through io_uring when it is on and the
    /// device has a descriptor, else (or when the ring is full) on the blocking pool.
    /// Returns the record's bytes.
    async fn read_copy(
        &self,
        device: &Arc<CacheDevice>,
        geometry: &larch_l2::Geometry,
        copy: &CopyRef,
    ) -> Result<Bytes, ReadError> {
        copy.check_range(geometry)?;
        let size = copy.size_bytes as usize;
        let len = copy.read_len(geometry);
        // Queued until it is submitted to io_uring or an I/O thread takes it; a read that
        // io_uring could not take goes on to the thread as the same request.
        let mut queued = Some(device.io.read_queue.enter());
        let mut active = None;
        let reader = self
            .devices
            .uring_reader(self.tunables.l2arc_io_uring(), self.background.runtime());
        if let Some(reader) = reader {
            active = queued.take().map(Queued::issue);
            match reader.read(device.dev(), copy.daddr, len).await {
                Ok(Some(mut bytes)) => {
                    larch_l2::verify_copy(copy, &bytes)?;
                    // The record without its sector padding: in place, where a slice
                    // would take and drop a reference to the buffer.
                    bytes.truncate(size);
                    return Ok(bytes);
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
            .background
            .spawn_blocking(move || {
                let _active = active.or_else(|| queued.map(Queued::issue));
                larch_l2::read_copy(&**device.dev(), &geometry, &copy)
            })
            .await
            .map_err(|e| {
                ReadError::Io(IoError::Os {
                    op: "read",
                    offset_bytes: copy.daddr,
                    len_bytes: len as u64,
                    source: std::io::Error::other(e.to_string()),
                })
            })??;
        let mut bytes = Bytes::from_owner(read);
        bytes.truncate(size);
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use larch_io::BlockDevice;

    use super::*;
    use crate::arc::index_key;
    use crate::engine::Engine;
    use crate::testing::{VolumeAndCache, contents};

    const BLOCK: u64 = 4096;
    const BLOCKS: u64 = 4096;

    /// A read that looked its copy up before the ring came round to it finds other bytes:
    /// that is a race with the feed, counted as `l2_evicted_in_flight`, not a checksum
    /// error of the device (a review's finding: it counted as `l2_cksum_bad` and a device
    /// read error). A copy the hand has not passed whose bytes are wrong is still one.
    #[test]
    fn a_copy_the_ring_wrote_over_during_its_read_is_not_a_device_error() {
        let engine = Engine::new(1 << 20);
        engine.tunables.set("l2arc_io_uring", "0").unwrap();
        let VolumeAndCache {
            vol,
            device,
            cache: mem,
            runtime,
        } = VolumeAndCache::new(&engine, BLOCK, BLOCKS);
        let read = |b: u64| runtime.block_on(engine.read_block(&vol, b, false));
        let stat = |counter: &AtomicU64| counter.load(Ordering::Relaxed);

        // Block 0 is fed; a reader looks its copy up.
        read(0).expect("read");
        engine.feed_once(&device, 1 << 20);
        let key = vol.info().key(0);
        let ik = index_key(&key);
        let loc = engine
            .arc
            .shard(&key)
            .l2
            .get_for_read(ik)
            .expect("block 0 is fed");
        // Before its read reaches the device, feeds go round the ring past the copy.
        let mut next = 1;
        loop {
            let mut bytes = vec![0u8; BLOCK as usize];
            mem.read_at(&mut bytes, loc.copy.daddr)
                .expect("device read");
            if !engine.arc.shard(&key).l2.contains(ik) && bytes != contents(0, BLOCK) {
                break;
            }
            assert!(next < BLOCKS, "the ring never came round to block 0's copy");
            for b in next..next + 64 {
                read(b).expect("read");
            }
            next += 64;
            engine.feed_once(&device, 1 << 20);
        }
        let got = runtime.block_on(engine.l2.read_l2(&key, ik, BLOCK as usize, loc));
        assert!(matches!(got, L2Read::Evicted), "{got:?}");
        assert_eq!(stat(&engine.stats.l2_evicted_in_flight), 1);
        assert_eq!(stat(&engine.stats.l2_cksum_bad), 0);
        assert_eq!(stat(&device.io.read_errors), 0);

        // The newest copy, damaged on the device while indexed: a device error.
        let last = vol.info().key(next - 1);
        let ik = index_key(&last);
        let loc = engine
            .arc
            .shard(&last)
            .l2
            .get_for_read(ik)
            .expect("fed last");
        mem.write_at(&[0xff; 64], loc.copy.daddr)
            .expect("damage it");
        let got = runtime.block_on(engine.l2.read_l2(&last, ik, BLOCK as usize, loc));
        assert!(matches!(got, L2Read::BadCopy), "{got:?}");
        assert_eq!(stat(&engine.stats.l2_cksum_bad), 1);
        assert_eq!(stat(&device.io.read_errors), 1);
        assert_eq!(stat(&engine.stats.l2_evicted_in_flight), 1);
        engine.shutdown();
    }
}
