//! Writes smaller than a block into blocks that are not in the ARC: acknowledged before
//! the block is read (`txg::partial`), yet every read, FLUSH, sync write and shutdown
//! after them sees them. The backing store is an in-memory device whose reads can be
//! held shut, so that "before the read" is a fact of the test, not a matter of timing.
//! (Merges that never started, and pieces covering a whole block, are tested in
//! `txg::partial` itself, where the merge threads can be kept from starting.)

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use larch_engine::{BackingStore, Engine, LatencyModel, Volume, VolumeError, VolumeSpec};
use larch_io::{BlockDevice, IoError, MemDevice};

const BLOCK: usize = 8 << 10;
const BLOCKS: u64 = 512;
const VOLUME: u64 = 0x7e57_9001;

/// A device whose reads wait while the gate is shut, and fail while `broken`.
struct Gated {
    inner: MemDevice,
    shut: Mutex<bool>,
    opened: Condvar,
    broken: Mutex<bool>,
    /// Writes fail while set.
    write_broken: Mutex<bool>,
}

impl Gated {
    fn new() -> Gated {
        let mut all = Vec::with_capacity(BLOCK * BLOCKS as usize);
        for b in 0..BLOCKS {
            all.extend(old(b));
        }
        Gated {
            inner: MemDevice::from_bytes(all),
            shut: Mutex::new(false),
            opened: Condvar::new(),
            broken: Mutex::new(false),
            write_broken: Mutex::new(false),
        }
    }

    fn shut(&self) {
        *self.shut.lock().unwrap() = true;
    }

    fn open(&self) {
        *self.shut.lock().unwrap() = false;
        self.opened.notify_all();
    }

    /// What the device holds now (what a restart would read).
    fn bytes(&self, block: u64) -> Vec<u8> {
        let mut buf = vec![0u8; BLOCK];
        self.inner
            .read_at(&mut buf, block * BLOCK as u64)
            .expect("device read");
        buf
    }
}

impl BlockDevice for Gated {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        let mut shut = self.shut.lock().unwrap();
        while *shut {
            shut = self.opened.wait(shut).unwrap();
        }
        drop(shut);
        if *self.broken.lock().unwrap() {
            return Err(IoError::Os {
                op: "read",
                offset_bytes,
                len_bytes: buf.len() as u64,
                source: std::io::Error::other("injected read error"),
            });
        }
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        if *self.write_broken.lock().unwrap() {
            return Err(IoError::Os {
                op: "write",
                offset_bytes,
                len_bytes: buf.len() as u64,
                source: std::io::Error::other("injected write error"),
            });
        }
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        self.inner.flush()
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

/// Block `b`'s contents before the test writes it.
fn old(b: u64) -> Vec<u8> {
    (0..BLOCK).map(|i| (i as u64 * 7 + b * 13) as u8).collect()
}

fn piece(len: usize, v: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8) ^ v).collect()
}

struct Setup {
    engine: Arc<Engine>,
    device: Arc<Gated>,
    volume: Arc<Volume>,
}

impl Setup {
    fn new() -> Setup {
        let engine = Engine::new(64 << 20);
        let device = Arc::new(Gated::new());
        let store = BackingStore::on_device(
            "gated",
            Arc::clone(&device) as Arc<dyn BlockDevice>,
            LatencyModel::default(),
        );
        let entry = engine
            .add_volume(VolumeSpec::new(VOLUME, BLOCK as u32), Arc::new(store))
            .expect("volume");
        let volume = Arc::new(Volume::new("v".into(), entry, Arc::clone(&engine)));
        Setup {
            engine,
            device,
            volume,
        }
    }

    fn stat(&self, name: &str) -> u64 {
        let stats: HashMap<String, u64> = self.engine.arcstats().into_iter().collect();
        stats[name]
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn read(volume: &Volume, offset: u64, len: u32) -> Vec<u8> {
    volume.read(offset, len).await.expect("read").concat()
}

#[test]
fn a_partial_write_is_acknowledged_before_its_block_is_read_and_read_back_merged() {
    let s = Setup::new();
    let rt = runtime();
    let block = 5u64;
    let base = block * BLOCK as u64;
    s.device.shut();
    rt.block_on(async {
        // Neither write can have read the block: the device's reads are shut.
        s.volume
            .write(base + 100, &piece(3000, 1), false)
            .await
            .expect("first write");
        s.volume
            .write(base + 5000, &piece(1000, 2), false)
            .await
            .expect("second write");
    });
    assert_eq!(s.stat("write_partial_deferred"), 2);
    assert_eq!(s.stat("write_partial_pending"), 1, "one block waits");
    // What it holds is dirty for the throttle: the block and both pieces, each piece with
    // the 96 bytes its bookkeeping holds (partial.rs, PIECE_OVERHEAD_BYTES).
    assert_eq!(
        s.engine.txg_state().0,
        (BLOCK + 3000 + 1000 + 2 * 96) as u64
    );
    // A read of the block waits for the merge, which waits for the device.
    let reader = {
        let volume = Arc::clone(&s.volume);
        rt.spawn(async move { read(&volume, base, BLOCK as u32).await })
    };
    std::thread::sleep(Duration::from_millis(50));
    s.device.open();
    let seen = rt.block_on(reader).expect("reader");
    let mut want = old(block);
    want[100..3100].copy_from_slice(&piece(3000, 1));
    want[5000..6000].copy_from_slice(&piece(1000, 2));
    assert!(seen == want, "the read saw both acknowledged writes");
    assert_eq!(s.stat("write_partial_pending"), 0);
    assert_eq!(s.stat("write_partial_merges"), 1);
    // A FLUSH puts it on the device.
    rt.block_on(s.volume.flush()).expect("flush");
    assert!(
        s.device.bytes(block) == want,
        "the device holds the merged block"
    );
    assert_eq!(s.engine.txg_state().0, 0, "nothing reserved is left");
    s.engine.shutdown();
}

#[test]
fn a_flush_waits_for_every_pending_partial_write() {
    let s = Setup::new();
    let rt = runtime();
    s.device.shut();
    let blocks = [1u64, 9, 33, 63];
    rt.block_on(async {
        for (i, b) in blocks.iter().enumerate() {
            s.volume
                .write(b * BLOCK as u64 + 512, &piece(4096, i as u8), false)
                .await
                .expect("write");
        }
    });
    assert_eq!(s.stat("write_partial_pending"), blocks.len() as u64);
    let flush = {
        let volume = Arc::clone(&s.volume);
        rt.spawn(async move { volume.flush().await })
    };
    std::thread::sleep(Duration::from_millis(50));
    s.device.open();
    rt.block_on(flush).expect("task").expect("flush");
    for (i, b) in blocks.iter().enumerate() {
        let mut want = old(*b);
        want[512..512 + 4096].copy_from_slice(&piece(4096, i as u8));
        assert!(
            s.device.bytes(*b) == want,
            "block {b} on the device after FLUSH"
        );
    }
    s.engine.shutdown();
}

#[test]
fn a_sync_write_of_a_block_with_pending_partial_writes_lands_after_them() {
    let s = Setup::new();
    let rt = runtime();
    let block = 12u64;
    let base = block * BLOCK as u64;
    s.device.shut();
    rt.block_on(s.volume.write(base, &piece(4096, 3), false))
        .expect("async write");
    // FUA over part of the same range: it must win, and be durable when acknowledged.
    let fua = {
        let volume = Arc::clone(&s.volume);
        rt.spawn(async move { volume.write(base + 2048, &piece(4096, 4), true).await })
    };
    std::thread::sleep(Duration::from_millis(50));
    s.device.open();
    rt.block_on(fua).expect("task").expect("sync write");
    let mut want = old(block);
    want[..4096].copy_from_slice(&piece(4096, 3));
    want[2048..2048 + 4096].copy_from_slice(&piece(4096, 4));
    assert!(
        s.device.bytes(block) == want,
        "the device holds both, the sync write's bytes on top"
    );
    s.engine.shutdown();
}

#[test]
fn shutdown_waits_for_a_merge_whose_read_is_in_flight() {
    let s = Setup::new();
    let rt = runtime();
    let block = 40u64;
    s.device.shut();
    rt.block_on(
        s.volume
            .write(block * BLOCK as u64 + 10, &piece(20, 1), false),
    )
    .expect("write");
    assert_eq!(s.stat("write_partial_pending"), 1);
    // Past the merge's 5 ms grace, a merge thread has taken it and waits at the shut
    // device (had it not, the shutdown merges it itself, and the test still holds).
    std::thread::sleep(Duration::from_millis(50));
    let opener = {
        let device = Arc::clone(&s.device);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            device.open();
        })
    };
    // The merge is reading (shut): the shutdown must wait for it, then sync its block.
    s.engine.shutdown();
    opener.join().unwrap();
    let mut want = old(block);
    want[10..30].copy_from_slice(&piece(20, 1));
    assert!(
        s.device.bytes(block) == want,
        "the shutdown synced the merged block"
    );
    assert_eq!(s.stat("write_partial_pending"), 0);
}

#[test]
fn a_merge_whose_read_fails_fails_the_volume_instead_of_losing_writes_silently() {
    let s = Setup::new();
    let rt = runtime();
    s.device.shut();
    *s.device.broken.lock().unwrap() = true;
    rt.block_on(s.volume.write(3 * BLOCK as u64, &piece(512, 1), false))
        .expect("acknowledged before the read");
    s.device.open();
    let flushed = rt.block_on(s.volume.flush());
    assert!(
        matches!(&flushed, Err(VolumeError::Io(why)) if why.contains("block 3")),
        "the FLUSH reports the lost write: {flushed:?}"
    );
    assert_eq!(s.stat("write_partial_errors"), 1);
    let later = rt.block_on(s.volume.write(7 * BLOCK as u64, &piece(BLOCK, 2), false));
    assert!(matches!(later, Err(VolumeError::Io(_))), "{later:?}");
    assert_eq!(s.engine.txg_state().0, 0, "nothing reserved is left");
    // The store answers again: the block whose acknowledged piece was lost reads as an
    // error, not as the store's older bytes (the I/O review's finding); others read.
    *s.device.broken.lock().unwrap() = false;
    let lost = rt.block_on(s.volume.read(3 * BLOCK as u64, BLOCK as u32));
    assert!(
        matches!(lost, Err(VolumeError::Io(_))),
        "the block read as {:?}",
        lost.map(|_| "bytes")
    );
    assert!(rt.block_on(read(&s.volume, 4 * BLOCK as u64, BLOCK as u32)) == old(4));
    s.engine.shutdown();
}

/// A TXG that fails to reach the backing store loses acknowledged writes; the store still
/// has the older bytes. A read of such a block fails: before, it returned those older
/// bytes as if they were current (an ARC review's finding). Other blocks read as ever.
#[test]
fn a_block_whose_acknowledged_write_a_failed_txg_lost_reads_as_an_error() {
    let s = Setup::new();
    let rt = runtime();
    let at = 5 * BLOCK as u64;
    rt.block_on(s.volume.write(at, &piece(BLOCK, 4), false))
        .expect("acknowledged");
    *s.device.write_broken.lock().unwrap() = true;
    let flushed = rt.block_on(s.volume.flush());
    assert!(matches!(flushed, Err(VolumeError::Io(_))), "{flushed:?}");
    *s.device.write_broken.lock().unwrap() = false;
    assert_eq!(s.device.bytes(5), old(5), "the store has the older bytes");
    let lost = rt.block_on(s.volume.read(at, BLOCK as u32));
    assert!(matches!(lost, Err(VolumeError::Io(_))), "{lost:?}");
    assert!(rt.block_on(read(&s.volume, 6 * BLOCK as u64, BLOCK as u32)) == old(6));
    s.engine.shutdown();
}

/// At the dirty limit an async partial write is not deferred: it reads its block and goes
/// through the throttle. Before, every one was counted as dirty and acknowledged, and
/// dirty data passed the limit by as much as the partial writes in flight (an ARC
/// review's finding).
#[test]
fn partial_writes_do_not_take_dirty_data_past_the_limit() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let s = Setup::new();
    let rt = runtime();
    let limit = 1u64 << 20;
    let t = &s.engine.tunables;
    t.set("zfs_dirty_data_max", &limit.to_string()).unwrap();
    // No delays below the limit: the writers run into it at once.
    t.set("zfs_delay_min_dirty_percent", "100").unwrap();
    // Reads wait: the merges cannot free anything for now.
    s.device.shut();
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (engine, peak, done) = (Arc::clone(&s.engine), Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(engine.txg_state().0, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(100));
            }
        })
    };
    // 32 writers, each of 10 blocks of its own: 320 pending partials would be 2.7 MiB.
    let writers: Vec<_> = (0..32u64)
        .map(|w| {
            let volume = Arc::clone(&s.volume);
            rt.spawn(async move {
                for b in (w * 10)..(w * 10 + 10) {
                    volume
                        .write(b * BLOCK as u64 + 100, &piece(512, 5), false)
                        .await
                        .expect("write");
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    s.device.open();
    for w in writers {
        rt.block_on(w).expect("writer");
    }
    rt.block_on(s.volume.flush()).expect("flush");
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= limit,
        "dirty data peaked at {peak}, past the limit {limit}"
    );
    assert!(peak > limit / 2, "the writes reached the limit: {peak}");
    for b in [0u64, 155, 319] {
        let mut want = old(b);
        want[100..612].copy_from_slice(&piece(512, 5));
        assert!(s.device.bytes(b) == want, "block {b} on the device");
    }
    s.engine.shutdown();
}

#[test]
fn with_write_partial_defer_off_a_partial_write_reads_its_block_first() {
    let s = Setup::new();
    let rt = runtime();
    s.engine.tunables.set("write_partial_defer", "0").unwrap();
    let block = 9u64;
    rt.block_on(
        s.volume
            .write(block * BLOCK as u64 + 7, &piece(70, 3), false),
    )
    .expect("write");
    assert_eq!(s.stat("write_partial_deferred"), 0);
    assert_eq!(s.stat("write_partial_pending"), 0);
    assert_eq!(
        s.stat("backing_reads"),
        1,
        "read before the acknowledgement"
    );
    let mut want = old(block);
    want[7..77].copy_from_slice(&piece(70, 3));
    let seen = rt.block_on(read(&s.volume, block * BLOCK as u64, BLOCK as u32));
    assert!(seen == want);
    s.engine.shutdown();
}

#[test]
fn a_partial_write_of_a_cached_block_is_merged_at_once() {
    let s = Setup::new();
    let rt = runtime();
    let block = 2u64;
    rt.block_on(async {
        read(&s.volume, block * BLOCK as u64, BLOCK as u32).await;
        s.volume
            .write(block * BLOCK as u64 + 1, &piece(10, 1), false)
            .await
            .unwrap();
    });
    assert_eq!(s.stat("write_partial_deferred"), 0);
    let mut want = old(block);
    want[1..11].copy_from_slice(&piece(10, 1));
    let seen = rt.block_on(read(&s.volume, block * BLOCK as u64, BLOCK as u32));
    assert!(seen == want);
    s.engine.shutdown();
}

/// A write whose client went away (its future dropped, as the NBD server drops a dead
/// connection's requests) while its merged block waits in the throttle still holds the
/// block's write lock until that block is dirty: a later write of the same block, which
/// is acknowledged, is merged on top of it instead of being overwritten by bytes merged
/// before it. The first write is held in the throttle's delay (100 ms), and the second
/// has no delay, so without the lock it would land first and be lost.
#[test]
fn a_dropped_write_still_holding_its_merged_block_cannot_overwrite_a_later_write() {
    let s = Setup::new();
    let rt = runtime();
    let t = &s.engine.tunables;
    t.set("zfs_txg_timeout", "600").unwrap();
    rt.block_on(async {
        // Block 0 cached (so that partial writes of it merge at once); 256 KiB dirty.
        read(&s.volume, 0, 8).await;
        for b in 10..42u64 {
            s.volume
                .write(b * BLOCK as u64, &piece(BLOCK, b as u8), false)
                .await
                .unwrap();
        }
    });
    // Every write is now delayed 100 ms (1% of a 1 MiB dirty limit is passed, and the
    // scale is at its largest). The sync threshold goes up first: the other way round,
    // the syncer could see 256 KiB past 20% of 1 MiB in between and sync it all away.
    t.set("zfs_dirty_data_sync_percent", "100").unwrap();
    t.set("zfs_dirty_data_max", "1M").unwrap();
    t.set("zfs_delay_min_dirty_percent", "1").unwrap();
    t.set("zfs_delay_scale", "1000000000").unwrap();
    let first = piece(4096, 1);
    let second = piece(4096, 2);
    rt.block_on(async {
        // The throttle paces writes from the previous delayed one (not from a quiet
        // spell): one goes first, so that the next is held its whole delay however long
        // the setup took (on a loaded machine, it took longer than the delay and the
        // first write went through at once).
        s.volume
            .write(60 * BLOCK as u64, &piece(BLOCK, 9), false)
            .await
            .unwrap();
        let dropped =
            tokio::time::timeout(Duration::from_millis(20), s.volume.write(0, &first, false)).await;
        assert!(dropped.is_err(), "the first write was held in the throttle");
        t.set("zfs_delay_scale", "0").unwrap();
        s.volume.write(4096, &second, false).await.unwrap();
    });
    // The dropped write's blocking step has ended by now, whichever way it went.
    std::thread::sleep(Duration::from_millis(300));
    let block = rt.block_on(read(&s.volume, 0, BLOCK as u32));
    assert!(
        block[4096..] == second[..],
        "the acknowledged second write was overwritten by the dropped first one's block"
    );
    s.engine.shutdown();
}
