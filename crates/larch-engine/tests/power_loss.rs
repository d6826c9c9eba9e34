//! Power loss, in process: the engine's backing store, log device and cache device are
//! fault-injecting devices with a volatile write cache, on one power line. A random mix of
//! reads, async writes, sync (FUA) writes, zeroings (TRIM and WRITE_ZEROES, which read as
//! zeros at once and are zeroed on the store by their TXG), FLUSHes and L2 feeds runs (with the TXG syncer
//! working beside it), then the power is cut at a random point: every unflushed write of
//! every device is lost, kept or torn, at random. A new engine opens the surviving images
//! (replaying the log, rebuilding the cache device's index), and then:
//! - every block holds a whole version of itself no older than the last one acknowledged
//!   as durable (nothing acknowledged is lost);
//! - every block read through the engine (from the ARC, the cache device or the backing
//!   store) is exactly what the backing store holds (no stale or foreign read, ever).
//!
//! Some rounds cut the power a second time while the cache device is still rebuilding and
//! writes go on (its reads are held back), which is when a log's older copies are most
//! at risk. Some rounds make the log device's flushes fail: the engine must fall back to
//! syncing TXGs without losing anything it acknowledged. Some make the backing store's
//! writes or flushes fail: the volume fails, and every block whose acknowledged version
//! did not reach the store must read as an error, before and after the power cut (the
//! pool's record of the failure survives it, as its state directory does).
//!
//! With the `fault-injection` feature, the syncer can be told to skip its tombstone
//! commit: the last test shows that the checks above then catch stale reads, so they are
//! not a test that cannot fail.
//!
//! `LARCH_POWER_ITERATIONS` sets the rounds (default 300; `scripts/test` runs 2000);
//! `LARCH_POWER_DEBUG=1` prints each round's setup.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use larch_engine::{
    BackingStore, BlockBuf, CacheDevice, DeviceState, Engine, LatencyModel, VolumeEntry,
    VolumeFailure, VolumeSpec, ZeroMode,
};
use larch_io::{BlockDevice, CrashMode, FaultyDevice, IoError};

const BLOCK: u32 = 4096;
const BLOCKS: u64 = 48;
const POOL: u64 = 0x90_0001;
const LOG: u64 = 0x90_0002;
const VOLUME: u64 = 0x90_0003;
const CACHE: u64 = 0x90_0004;
const LOG_BYTES: u64 = 1 << 20;
const CACHE_BYTES: u64 = 2 << 20;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The power of one round's machine. Every device operation (and the pool's records in
/// its state directory) runs while holding it shared; the cut takes it exclusively, so all
/// devices lose power at one instant, between operations, as in a real power loss. After
/// the cut every operation fails.
#[derive(Default)]
struct Power {
    off: RwLock<bool>,
}

/// Holds a device's reads back (after a number of them pass), to keep a rebuild running
/// while the test writes.
#[derive(Default)]
struct ReadHold {
    held: Mutex<bool>,
    released: Condvar,
    /// Reads that pass before the hold applies.
    pass: AtomicI64,
}

impl ReadHold {
    fn hold_after(&self, reads: i64) {
        self.pass.store(reads, Ordering::SeqCst);
        *self.held.lock().expect("hold") = true;
    }

    fn release(&self) {
        *self.held.lock().expect("hold") = false;
        self.released.notify_all();
    }

    fn wait(&self) {
        if self.pass.fetch_sub(1, Ordering::SeqCst) > 0 {
            return;
        }
        let mut held = self.held.lock().expect("hold");
        while *held {
            held = self.released.wait(held).expect("hold");
        }
    }
}

/// A device on a [`Power`] line.
struct Powered {
    dev: Arc<FaultyDevice>,
    power: Arc<Power>,
    hold: Arc<ReadHold>,
}

fn power_off(op: &'static str, offset_bytes: u64, len: usize) -> IoError {
    IoError::Injected {
        op,
        offset_bytes,
        len_bytes: len as u64,
    }
}

impl BlockDevice for Powered {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        self.hold.wait();
        let off = self.power.off.read().expect("power");
        if *off {
            return Err(power_off("read", offset_bytes, buf.len()));
        }
        self.dev.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        let off = self.power.off.read().expect("power");
        if *off {
            return Err(power_off("write", offset_bytes, buf.len()));
        }
        self.dev.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        let off = self.power.off.read().expect("power");
        if *off {
            return Err(power_off("flush", 0, 0));
        }
        self.dev.flush()
    }
    fn len_bytes(&self) -> u64 {
        self.dev.len_bytes()
    }
}

/// Version `v` of block `b` in round `seed`: a header naming all three, then a pattern.
fn contents(seed: u64, b: u64, v: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK as usize];
    buf[..8].copy_from_slice(b"LARCHPWR");
    buf[8..16].copy_from_slice(&seed.to_le_bytes());
    buf[16..24].copy_from_slice(&b.to_le_bytes());
    buf[24..32].copy_from_slice(&v.to_le_bytes());
    let mut x = seed ^ (b << 32) ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for byte in &mut buf[32..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *byte = x as u8;
    }
    buf
}

/// The version a block holds: 0 for zeros, `None` for anything that is not a whole
/// version of this block.
fn version_of(seed: u64, b: u64, data: &[u8]) -> Option<u64> {
    if data.iter().all(|&x| x == 0) {
        return Some(0);
    }
    let v = u64::from_le_bytes(data.get(24..32)?.try_into().ok()?);
    (data == contents(seed, b, v).as_slice()).then_some(v)
}

/// The images that survive a power cut, and the pool's records in its state directory
/// (fsynced files survive too).
#[derive(Clone)]
struct Images {
    backing: Vec<u8>,
    log: Option<Vec<u8>>,
    cache: Option<Vec<u8>>,
    floor: Arc<AtomicU64>,
    distrusted: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<VolumeFailure>>>,
}

/// The devices of one power-on period.
struct Machine {
    power: Arc<Power>,
    backing: Arc<FaultyDevice>,
    log: Option<Arc<FaultyDevice>>,
    cache: Option<Arc<FaultyDevice>>,
    cache_hold: Arc<ReadHold>,
    floor: Arc<AtomicU64>,
    distrusted: Arc<AtomicBool>,
    /// The pool's record of the volume's failure (`failed-volumes.json`).
    failure: Arc<Mutex<Option<VolumeFailure>>>,
}

/// A fresh device holding `image` durably.
fn restored(image: &[u8]) -> Arc<FaultyDevice> {
    let dev = FaultyDevice::new(image.len() as u64);
    dev.write_at(image, 0).expect("restore image");
    dev.flush().expect("restore flush");
    Arc::new(dev)
}

impl Machine {
    fn new(slog: bool, l2: bool) -> Machine {
        Machine {
            power: Arc::default(),
            backing: Arc::new(FaultyDevice::new(BLOCKS * u64::from(BLOCK))),
            log: slog.then(|| Arc::new(FaultyDevice::new(LOG_BYTES))),
            cache: l2.then(|| Arc::new(FaultyDevice::new(CACHE_BYTES))),
            cache_hold: Arc::default(),
            floor: Arc::default(),
            distrusted: Arc::default(),
            failure: Arc::default(),
        }
    }

    fn from_images(images: &Images) -> Machine {
        Machine {
            power: Arc::default(),
            backing: restored(&images.backing),
            log: images.log.as_deref().map(restored),
            cache: images.cache.as_deref().map(restored),
            cache_hold: Arc::default(),
            floor: Arc::new(AtomicU64::new(images.floor.load(Ordering::SeqCst))),
            distrusted: Arc::new(AtomicBool::new(images.distrusted.load(Ordering::SeqCst))),
            failure: Arc::new(Mutex::new(images.failure.lock().expect("record").clone())),
        }
    }

    fn powered(&self, dev: &Arc<FaultyDevice>, hold: &Arc<ReadHold>) -> Arc<dyn BlockDevice> {
        Arc::new(Powered {
            dev: Arc::clone(dev),
            power: Arc::clone(&self.power),
            hold: Arc::clone(hold),
        })
    }

    /// Opens an engine over the devices (`create`: format them).
    fn open(&self, create: bool) -> Opened {
        let engine = Engine::new(1 << 20);
        // Feeds are driven by the test; the feeder threads only rebuild.
        engine.tunables.set("l2arc_feed_secs", "3600").unwrap();
        engine.tunables.set("l2arc_nowrite", "0").unwrap();
        let (sink_floor, sink_power) = (Arc::clone(&self.floor), Arc::clone(&self.power));
        engine.set_committed_txg_sink(
            self.floor.load(Ordering::SeqCst),
            Box::new(move |txg| {
                if *sink_power.off.read().expect("power") {
                    return Err(std::io::Error::other("power is off"));
                }
                sink_floor.fetch_max(txg, Ordering::SeqCst);
                Ok(())
            }),
        );
        let (sink_distrust, sink_power) = (Arc::clone(&self.distrusted), Arc::clone(&self.power));
        engine.set_distrust_sink(Box::new(move |_guid| {
            if *sink_power.off.read().expect("power") {
                return Err(std::io::Error::other("power is off"));
            }
            sink_distrust.store(true, Ordering::SeqCst);
            Ok(())
        }));
        // As `Pool::open`: a replay that applied records marks the cache device to be
        // formatted, before the log can forget the records.
        let (sink_distrust, sink_power) = (Arc::clone(&self.distrusted), Arc::clone(&self.power));
        engine.set_replayed_sink(Box::new(move || {
            if *sink_power.off.read().expect("power") {
                return Err(std::io::Error::other("power is off"));
            }
            if sink_distrust.load(Ordering::SeqCst) {
                return Ok(());
            }
            sink_distrust.store(true, Ordering::SeqCst);
            Ok(())
        }));
        let no_hold = Arc::new(ReadHold::default());
        let store = BackingStore::on_device(
            "backing",
            self.powered(&self.backing, &no_hold),
            LatencyModel::default(),
        );
        let vol = engine
            .add_volume(VolumeSpec::new(VOLUME, BLOCK), Arc::new(store))
            .expect("volume");
        // As `Pool::open`: a recorded failure first, then failures recorded as they come.
        if let Some(failure) = self.failure.lock().expect("record").as_ref() {
            engine.restore_volume_failure(failure).expect("restore");
        }
        let (sink_failure, sink_power) = (Arc::clone(&self.failure), Arc::clone(&self.power));
        engine.set_volume_failure_sink(Box::new(move |failure| {
            let off = sink_power.off.read().expect("power");
            if *off {
                return Err(std::io::Error::other("power is off"));
            }
            *sink_failure.lock().expect("record") = Some(failure.clone());
            Ok(())
        }));
        if let Some(log) = &self.log {
            engine
                .attach_log_device(
                    self.powered(log, &no_hold),
                    Path::new("log"),
                    POOL,
                    LOG,
                    create,
                )
                .expect("attach the log device");
        }
        let cache = self.cache.as_ref().and_then(|dev| {
            // A device the pool recorded as distrusted is formatted, as `Pool::open` does.
            let format = create || self.distrusted.swap(false, Ordering::SeqCst);
            engine
                .add_cache_device_on(
                    self.powered(dev, &self.cache_hold),
                    Path::new("cache"),
                    POOL,
                    CACHE,
                    format,
                )
                .ok()
        });
        Opened { engine, vol, cache }
    }

    /// Cuts the power: each unflushed write of every device is lost, kept or torn.
    fn cut(&self, seed: u64) -> Images {
        let mut off = self.power.off.write().expect("power");
        // A stream of fates of its own for each device: with one seed for all, the
        // devices' first unflushed writes met the same fate together.
        self.backing.crash(CrashMode::Random(seed ^ 0x5eed));
        for (i, dev) in self.log.iter().chain(&self.cache).enumerate() {
            dev.crash(CrashMode::Random(
                (seed ^ 0x5eed).wrapping_add((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            ));
        }
        *off = true;
        drop(off);
        self.cache_hold.release();
        Images {
            backing: self.backing.durable_snapshot(),
            log: self.log.as_ref().map(|l| l.durable_snapshot()),
            cache: self.cache.as_ref().map(|c| c.durable_snapshot()),
            floor: Arc::new(AtomicU64::new(self.floor.load(Ordering::SeqCst))),
            distrusted: Arc::new(AtomicBool::new(self.distrusted.load(Ordering::SeqCst))),
            failure: Arc::new(Mutex::new(self.failure.lock().expect("record").clone())),
        }
    }
}

/// What the workload knows of each block.
struct Versions {
    durable: Vec<u64>,
    latest: Vec<u64>,
    unflushed: Vec<(u64, u64)>,
    /// Versions that were zeroings of their block (TRIM, WRITE_ZEROES): they read as zeros.
    zeroed: std::collections::HashSet<(u64, u64)>,
}

impl Versions {
    fn new() -> Versions {
        Versions {
            durable: vec![0; BLOCKS as usize],
            latest: vec![0; BLOCKS as usize],
            unflushed: Vec::new(),
            zeroed: std::collections::HashSet::new(),
        }
    }

    /// Version `v` of block `b` was acknowledged as durable.
    fn durable(&mut self, b: u64, v: u64) {
        self.durable[b as usize] = self.durable[b as usize].max(v);
    }

    /// A FLUSH succeeded: every write acknowledged before it is durable.
    fn flushed(&mut self) {
        for (b, v) in std::mem::take(&mut self.unflushed) {
            self.durable(b, v);
        }
    }

    /// The power was cut: writes not made durable before it may or may not have survived.
    fn cut(&mut self) {
        self.unflushed.clear();
    }

    /// Whether a block holding zeros is right: nothing durable yet, or a zeroing of it no
    /// older than its durable version and no newer than its last.
    fn zeros_allowed(&self, b: u64) -> bool {
        let (want, latest) = (self.durable[b as usize], self.latest[b as usize]);
        want == 0 || (want..=latest).any(|v| self.zeroed.contains(&(b, v)))
    }
}

/// An engine opened over a machine's devices.
struct Opened {
    engine: Arc<Engine>,
    vol: Arc<VolumeEntry>,
    cache: Option<Arc<CacheDevice>>,
}

impl Opened {
    /// Runs `ops` random operations. Every failure is tolerated (the power may be off, a
    /// device may fail on purpose); only acknowledged durability is recorded.
    fn workload(
        &self,
        seed: u64,
        rng: &mut Rng,
        ops: u64,
        versions: &mut Versions,
        runtime: &tokio::runtime::Runtime,
        mut before_op: impl FnMut(u64),
    ) {
        let (engine, vol) = (&self.engine, &self.vol);
        for op in 0..ops {
            before_op(op);
            let r = rng.below(100);
            if r < 10 {
                self.flush(versions);
                continue;
            }
            if r < 30 {
                let b = rng.below(BLOCKS);
                runtime.block_on(engine.read_block(vol, b, false));
                continue;
            }
            if r < 38 {
                if let Some(cache) = &self.cache
                    && cache.state() == DeviceState::Online
                {
                    engine.feed_once(cache, 1 << 20);
                }
                continue;
            }
            let b = rng.below(BLOCKS);
            versions.latest[b as usize] += 1;
            let v = versions.latest[b as usize];
            // 38-59: FUA writes; 60-91: async writes; 92-99: zeroings (TRIM, WRITE_ZEROES),
            // half of them FUA. A zeroing is the block's next version, reading as zeros.
            let (fua, written) = if r >= 92 {
                versions.zeroed.insert((b, v));
                let mode = [ZeroMode::Punch, ZeroMode::Allocate][(r % 2) as usize];
                let fua = r >= 96;
                (fua, engine.write_zeroed_blocks(vol, &[b], mode, fua))
            } else {
                let data = BlockBuf::from_vec(contents(seed, b, v));
                (r < 60, engine.write_blocks(vol, &[(b, data)], r < 60))
            };
            if written.is_ok() {
                if fua {
                    versions.durable(b, v);
                } else {
                    versions.unflushed.push((b, v));
                }
            }
        }
    }

    /// A FLUSH; recorded when it succeeds.
    fn flush(&self, versions: &mut Versions) {
        if self.engine.flush_writes(&self.vol).is_ok() {
            versions.flushed();
        }
    }

    fn skip_tombstone_commit(&self, on: bool) {
        set_skip(&self.engine, on);
    }
}

fn wait_rebuilt(cache: Option<&Arc<CacheDevice>>) {
    let Some(cache) = cache else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while cache.state() == DeviceState::Rebuilding {
        assert!(Instant::now() < deadline, "the rebuild did not end");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A round's findings: blocks with a durable version checked, and L2 hits after restarts.
#[derive(Default)]
struct Checked {
    durable_blocks: u64,
    l2_hits: u64,
    /// Blocks a failed TXG lost, checked to read as errors.
    lost_blocks: u64,
    /// Blocks holding the zeros of a zeroing after a durable version, checked.
    zeroed_blocks: u64,
}

/// After a restart: every block holds a whole version no older than its durable one, and
/// the engine reads exactly what the backing store holds.
fn check(
    seed: u64,
    what: &str,
    opened: &Opened,
    versions: &Versions,
    runtime: &tokio::runtime::Runtime,
    checked: &mut Checked,
) -> Result<(), String> {
    let (engine, vol) = (&opened.engine, &opened.vol);
    // Blocks whose acknowledged writes a failed TXG lost (as the pool recorded it): they
    // must read as errors, whatever the store holds.
    let lost = vol.failure_record().map(|f| f.lost).unwrap_or_default();
    for b in 0..BLOCKS {
        let mut on_disk = vec![0u8; BLOCK as usize];
        vol.backing
            .read_at(&mut on_disk, b * u64::from(BLOCK))
            .expect("read the backing store");
        let want = versions.durable[b as usize];
        let latest = versions.latest[b as usize];
        if lost.contains(&b) {
            // What the store holds of it does not matter (a write of the failed TXG may
            // even be torn there), as long as nothing reads it.
            if let Some(read) = runtime.block_on(engine.read_block(vol, b, false)) {
                return Err(format!(
                    "seed {seed} ({what}): block {b}, whose acknowledged write a failed TXG \
                     lost, read as version {:?} instead of an error (durable {want})",
                    version_of(seed, b, &read)
                ));
            }
            checked.lost_blocks += 1;
            continue;
        }
        let Some(stored) = version_of(seed, b, &on_disk) else {
            return Err(format!(
                "seed {seed} ({what}): block {b} on the backing store is no version of it"
            ));
        };
        if stored == 0 {
            if !versions.zeros_allowed(b) {
                return Err(format!(
                    "seed {seed} ({what}): block {b} holds zeros; {want} was durable and no zeroing since"
                ));
            }
            if want > 0 {
                checked.zeroed_blocks += 1;
            }
        } else if stored < want || stored > latest || versions.zeroed.contains(&(b, stored)) {
            return Err(format!(
                "seed {seed} ({what}): block {b} holds version {stored}; {want} was durable, {latest} the last written"
            ));
        }
        let read = runtime
            .block_on(engine.read_block(vol, b, false))
            .ok_or_else(|| format!("seed {seed} ({what}): block {b} unreadable"))?;
        if read[..] != on_disk[..] {
            return Err(format!(
                "seed {seed} ({what}): block {b} read as version {:?}, the backing store holds {stored} (stale read)",
                version_of(seed, b, &read)
            ));
        }
        if want > 0 {
            checked.durable_blocks += 1;
        }
    }
    let stats: std::collections::HashMap<String, u64> = engine.arcstats().into_iter().collect();
    checked.l2_hits += stats["l2_hits"];
    Ok(())
}

/// One round; `Err` describes the first violation.
fn round(
    seed: u64,
    runtime: &tokio::runtime::Runtime,
    skip_tombstones: bool,
) -> Result<Checked, String> {
    let mut rng = Rng(seed);
    let slog = rng.below(2) == 0;
    let l2 = skip_tombstones || rng.below(4) != 0;
    let failing_log = slog && rng.below(3) == 0;
    let during_rebuild = l2 && rng.below(3) == 0;
    // The backing store fails its writes (0) or its flushes (1) from some point on.
    let failing_backing = (rng.below(6) == 0).then(|| rng.below(2));
    let mut checked = Checked::default();
    let mut versions = Versions::new();
    if std::env::var_os("LARCH_POWER_DEBUG").is_some() {
        eprintln!(
            "seed {seed}: log device {slog} (failing {failing_log}), cache device {l2}, cut during a rebuild {during_rebuild}, backing store failing {failing_backing:?}"
        );
    }

    // 1. A fresh pool, a workload, a power cut.
    let machine = Machine::new(slog, l2);
    let opened = machine.open(true);
    opened.skip_tombstone_commit(skip_tombstones);
    let ops = 20 + rng.below(100);
    let fail_at = rng.below(ops);
    let backing_fail_at = rng.below(ops);
    let log = machine.log.clone();
    let backing = Arc::clone(&machine.backing);
    opened.workload(seed, &mut rng, ops, &mut versions, runtime, |op| {
        if failing_log && op == fail_at {
            log.as_ref().expect("a log").fail_flushes(true);
        }
        if op == backing_fail_at {
            match failing_backing {
                Some(0) => backing.fail_writes(0..u64::MAX),
                Some(_) => backing.fail_flushes(true),
                None => {}
            }
        }
    });
    // Before the cut too: a block the failure lost reads as an error.
    if failing_backing.is_some() {
        let _ = opened.engine.flush_writes(&opened.vol);
        check_lost_read_as_errors(seed, &opened, runtime)?;
    }
    let images = machine.cut(seed);
    opened.engine.shutdown(); // every device operation fails from now on
    drop(opened);
    versions.cut();

    // 2. Optionally: writes while the cache device is still rebuilding, and a second cut.
    let images = if during_rebuild {
        let machine = Machine::from_images(&images);
        // The header read that checks the device passes; the rebuild's reads wait.
        machine.cache_hold.hold_after(1);
        let opened = machine.open(false);
        opened.skip_tombstone_commit(skip_tombstones);
        let ops = 5 + rng.below(30);
        opened.workload(seed, &mut rng, ops, &mut versions, runtime, |_| {});
        // Make what was written durable, so the backing stores have it before the cut.
        opened.flush(&mut versions);
        let images = machine.cut(seed.rotate_left(7));
        opened.engine.shutdown();
        drop(opened);
        versions.cut();
        images
    } else {
        images
    };

    // 3. Restart: replay, rebuild, and every read must match the backing store.
    let machine = Machine::from_images(&images);
    let opened = machine.open(false);
    wait_rebuilt(opened.cache.as_ref());
    let result = check(
        seed,
        "after restart",
        &opened,
        &versions,
        runtime,
        &mut checked,
    );
    opened.engine.shutdown();
    result.map(|()| checked)
}

/// Every block the volume's failure lost reads as an error (`None`), before any restart.
fn check_lost_read_as_errors(
    seed: u64,
    opened: &Opened,
    runtime: &tokio::runtime::Runtime,
) -> Result<(), String> {
    let lost = (opened.vol.failure_record())
        .map(|f| f.lost)
        .unwrap_or_default();
    for b in lost {
        if let Some(read) = runtime.block_on(opened.engine.read_block(&opened.vol, b, false)) {
            return Err(format!(
                "seed {seed} (before the cut): lost block {b} read as version {:?}",
                version_of(seed, b, &read)
            ));
        }
    }
    Ok(())
}

#[cfg(feature = "fault-injection")]
fn set_skip(engine: &Engine, on: bool) {
    engine.inject_skip_tombstone_commit(on);
}

#[cfg(not(feature = "fault-injection"))]
fn set_skip(_engine: &Engine, on: bool) {
    assert!(
        !on,
        "skipping the tombstone commit needs the fault-injection feature"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn acknowledged_writes_survive_power_loss_and_no_read_is_stale() {
    let rounds: u64 = std::env::var("LARCH_POWER_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let runtime = runtime();
    let mut total = Checked::default();
    for seed in 0..rounds {
        let checked = round(seed, &runtime, false).unwrap_or_else(|why| panic!("{why}"));
        total.durable_blocks += checked.durable_blocks;
        total.l2_hits += checked.l2_hits;
        total.lost_blocks += checked.lost_blocks;
        total.zeroed_blocks += checked.zeroed_blocks;
    }
    assert!(
        total.zeroed_blocks > rounds / 20,
        "too few zeroed blocks were checked ({} in {rounds} rounds)",
        total.zeroed_blocks
    );
    assert!(
        total.lost_blocks > rounds / 50,
        "too few blocks lost by a failing backing store were checked ({} in {rounds} rounds)",
        total.lost_blocks
    );
    assert!(
        total.durable_blocks > rounds,
        "too few durable versions were checked ({} in {rounds} rounds)",
        total.durable_blocks
    );
    assert!(
        total.l2_hits > rounds,
        "too few reads after restarts came from the cache device ({} in {rounds} rounds): the test does not exercise the L2ARC",
        total.l2_hits
    );
}

/// Writes version `v` of block 0; `Err` when the engine refused it.
fn write_version(opened: &Opened, seed: u64, v: u64, fua: bool) -> Result<(), String> {
    let data = BlockBuf::from_vec(contents(seed, 0, v));
    (opened.engine.write_blocks(&opened.vol, &[(0, data)], fua)).map_err(|e| e.to_string())
}

/// Waits until the TXG open now has synced (a 1-second `zfs_txg_timeout` brings it).
fn wait_open_txg_synced(engine: &Engine) {
    engine.tunables.set("zfs_txg_timeout", "1").unwrap();
    let (_, open, _) = engine.txg_state();
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.txg_state().2 < open {
        assert!(Instant::now() < deadline, "TXG {open} did not sync");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A TXG synced while a cache device rebuilds is forgotten by the intent log like any
/// other. Before, the log kept every record while a rebuild ran, so a power cut then
/// replayed a FUA write's record over a newer write of the same block that a FLUSH had
/// acknowledged (a reviewer's finding).
#[test]
fn a_txg_synced_during_a_rebuild_is_not_replayed_over_newer_writes() {
    let runtime = runtime();
    let seed = 0xfeed;
    // 1. A pool with a log device and a cache device holding copies; no writes, so the
    //    next start has nothing to replay and rebuilds the cache device.
    let machine = Machine::new(true, true);
    let opened = machine.open(true);
    for b in 0..BLOCKS {
        runtime.block_on(opened.engine.read_block(&opened.vol, b, false));
    }
    let cache = opened.cache.clone().expect("a cache device");
    opened.engine.feed_once(&cache, 1 << 20);
    let images = machine.cut(seed);
    opened.engine.shutdown();
    drop(opened);

    // 2. Restart with the rebuild held: a FUA write (logged), a newer async write of the
    //    same block, the TXG synced, a FLUSH acknowledged; then the power is cut.
    let machine = Machine::from_images(&images);
    machine.cache_hold.hold_after(1);
    let opened = machine.open(false);
    let cache = opened.cache.clone().expect("a cache device");
    assert_eq!(
        cache.state(),
        DeviceState::Rebuilding,
        "the rebuild is held"
    );
    let mut versions = Versions::new();
    write_version(&opened, seed, 1, true).expect("FUA write");
    write_version(&opened, seed, 2, false).expect("async write");
    versions.latest[0] = 2;
    wait_open_txg_synced(&opened.engine);
    assert_eq!(cache.state(), DeviceState::Rebuilding, "still rebuilding");
    opened.engine.flush_writes(&opened.vol).expect("FLUSH");
    versions.durable(0, 2);
    let images = machine.cut(seed + 1);
    opened.engine.shutdown();
    drop(opened);

    // 3. Restart: block 0 holds version 2.
    restart_and_check(
        &images,
        seed,
        "after a TXG synced during a rebuild",
        &versions,
    );
}

/// Cuts the power of `machine` under `opened`, and checks what a restart finds.
fn cut_restart_and_check(
    machine: &Machine,
    opened: Opened,
    seed: u64,
    what: &str,
    versions: &Versions,
) {
    let images = machine.cut(seed);
    opened.engine.shutdown();
    drop(opened);
    restart_and_check(&images, seed, what, versions);
}

/// Opens a machine from `images` (replay, rebuild) and checks it as [`check`] does,
/// failing the test on the first violation.
fn restart_and_check(images: &Images, seed: u64, what: &str, versions: &Versions) {
    let machine = Machine::from_images(images);
    let opened = machine.open(false);
    wait_rebuilt(opened.cache.as_ref());
    let result = check(
        seed,
        what,
        &opened,
        versions,
        &runtime(),
        &mut Checked::default(),
    );
    opened.engine.shutdown();
    result.unwrap_or_else(|why| panic!("{why}"));
}

/// TXG numbers start above the pool's recorded committed TXG (written when a log device
/// failed) even when the log device is new: before, they restarted at 1, and the next
/// replay skipped every record numbered at or below the record, acknowledged FUA writes
/// included (a reviewer's finding).
#[test]
fn a_new_log_device_numbers_its_records_above_the_pools_committed_txg() {
    let seed = 0xf100;
    let machine = Machine::new(true, false);
    machine.floor.store(1000, Ordering::SeqCst);
    let opened = machine.open(true);
    let mut versions = Versions::new();
    // The first write's TXG began before the log took over: it syncs. The second is
    // acknowledged from the log alone.
    write_version(&opened, seed, 1, true).expect("FUA write");
    write_version(&opened, seed, 2, true).expect("FUA write");
    versions.latest[0] = 2;
    versions.durable(0, 2);
    cut_restart_and_check(
        &machine,
        opened,
        seed,
        "after a cut with a new log device",
        &versions,
    );
}

/// A block written again and again in one TXG keeps one record waiting for the log, with
/// its newest bytes, and a power cut after a FLUSH replays those. Before, every write kept
/// a record and its buffer until the next FLUSH or TXG sync: a hot block rewritten at
/// disk speed pinned gigabytes no stat or limit saw (an ARC review's finding).
#[test]
fn a_block_rewritten_in_one_txg_keeps_one_waiting_record_with_its_newest_bytes() {
    let seed = 0xf200;
    let machine = Machine::new(true, false);
    let opened = machine.open(true);
    opened
        .engine
        .tunables
        .set("zfs_txg_timeout", "600")
        .unwrap();
    let mut versions = Versions::new();
    // The first TXG began before the log took over: this write syncs it.
    write_version(&opened, seed, 1, true).expect("FUA write");
    versions.durable(0, 1);
    for v in 2..=200 {
        write_version(&opened, seed, v, false).expect("async write");
    }
    versions.latest[0] = 200;
    let pending = opened
        .engine
        .arcstats()
        .into_iter()
        .find(|(name, _)| name == "zil_itx_pending")
        .map(|(_, v)| v);
    assert_eq!(pending, Some(1));
    opened.engine.flush_writes(&opened.vol).expect("FLUSH");
    versions.durable(0, 200);
    cut_restart_and_check(
        &machine,
        opened,
        seed,
        "after a cut following 199 rewrites",
        &versions,
    );
}

/// The checks above catch what a missing tombstone commit breaks: with the commit skipped,
/// some rounds read stale copies from the cache device.
#[cfg(feature = "fault-injection")]
#[test]
fn a_skipped_tombstone_commit_is_caught() {
    let runtime = runtime();
    let rounds = 200;
    let caught: Vec<String> = (0..rounds)
        .filter_map(|seed| round(seed, &runtime, true).err())
        .collect();
    assert!(
        caught.iter().any(|why| why.contains("stale read")),
        "no stale read caught in {rounds} rounds with the tombstone commit skipped: {caught:?}"
    );
}

/// A start that replays the log and crashes after the log forgot the records but before
/// the cache device was formatted: the next start must still format the device, not
/// rebuild copies the replayed writes superseded. Before, only the cache device's format
/// at that start stood for the replay, and the pool recorded nothing (an intent-log
/// review's finding): the rebuild then indexed the older copy and served it.
#[test]
fn a_crash_after_a_replay_still_formats_the_cache_device() {
    let runtime = runtime();
    let seed = 0xdead;
    // 1. The blocks as they are (zeros) on the cache device, its log committed; then a FUA
    //    write of version 1 of block 0 (only in the intent log), and the power cut.
    let machine = Machine::new(true, true);
    let opened = machine.open(true);
    for b in 0..BLOCKS {
        runtime.block_on(opened.engine.read_block(&opened.vol, b, false));
    }
    let cache = opened.cache.clone().expect("a cache device");
    assert!(
        opened.engine.feed_once(&cache, 1 << 20) > 0,
        "nothing was fed"
    );
    // A TXG sync commits the cache device's log; then no sync until the cut, so that the
    // tombstone of version 2's write stays queued in memory.
    opened
        .engine
        .tunables
        .set("zfs_txg_timeout", "600")
        .unwrap();
    opened.engine.sync_all().expect("sync");
    write_version(&opened, seed, 1, true).expect("FUA write");
    let images = machine.cut(seed);
    opened.engine.shutdown();
    drop(opened);

    // 2. A start that replays version 1 onto the store, syncs a TXG (the log forgets the
    //    record), and dies before its cache device is formatted (here: never added).
    let mut machine = Machine::from_images(&images);
    let cache_image = images.cache.clone();
    machine.cache = None;
    let opened = machine.open(false);
    opened.engine.sync_all().expect("sync");
    let mut images = machine.cut(seed + 1);
    opened.engine.shutdown();
    drop(opened);
    images.cache = cache_image;

    // 3. The next start has nothing to replay; block 0 must read as version 1.
    let mut versions = Versions::new();
    versions.latest[0] = 1;
    versions.durable(0, 1);
    restart_and_check(&images, seed, "after a replay and a crash", &versions);
}
