//! Power loss, in process: the engine's backing store and log device are fault-injecting
//! devices with a volatile write cache. A random mix of async writes, sync (FUA) writes
//! and FLUSHes runs (with the TXG syncer working beside it), then the power is cut at a
//! random point: every unflushed write is lost, kept or torn, at random. A new engine
//! opens the surviving images (replaying the log) and every block must hold a whole
//! version of itself no older than the last one acknowledged as durable. Some rounds
//! also make the log device's flushes fail at a random moment: the engine must fall
//! back to syncing TXGs without losing anything it acknowledged.
//!
//! `LARCH_POWER_ITERATIONS` sets the rounds (default 300; `scripts/test` runs 2000).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use larch_engine::{BackingStore, CacheMode, Engine, LatencyModel, SyncMode, VolumeInfo};
use larch_io::{BlockDevice, CrashMode, FaultyDevice, IoError};

const BLOCK: u32 = 4096;
const BLOCKS: u64 = 32;
const POOL: u64 = 0x90_0001;
const LOG: u64 = 0x90_0002;
const VOLUME: u64 = 0x90_0003;
const LOG_BYTES: u64 = 1 << 20;

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

/// The power of one round's machine. Every device operation (and the pool's record of
/// the committed TXG) runs while holding it shared; the cut takes it exclusively, so all
/// devices lose power at one instant, between operations, as in a real power loss. After
/// the cut every operation fails.
#[derive(Default)]
struct Power {
    off: RwLock<bool>,
}

/// A device on a [`Power`] line.
struct Powered {
    dev: Arc<FaultyDevice>,
    power: Arc<Power>,
}

impl Powered {
    fn check(&self, op: &'static str, offset_bytes: u64, len: usize) -> Result<(), IoError> {
        Err(IoError::Injected {
            op,
            offset_bytes,
            len_bytes: len as u64,
        })
    }
}

impl BlockDevice for Powered {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        let off = self.power.off.read().expect("power");
        if *off {
            return self.check("read", offset_bytes, buf.len());
        }
        self.dev.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        let off = self.power.off.read().expect("power");
        if *off {
            return self.check("write", offset_bytes, buf.len());
        }
        self.dev.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        let off = self.power.off.read().expect("power");
        if *off {
            return self.check("flush", 0, 0);
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

/// Opens an engine over the devices. `floor` is the pool's record of the committed TXG
/// (a state-directory file in `larch serve`); it survives the power cut, as a file that
/// was fsynced would.
fn open(
    backing: &Arc<FaultyDevice>,
    log: Option<&Arc<FaultyDevice>>,
    create: bool,
    floor: &Arc<AtomicU64>,
    power: &Arc<Power>,
) -> (Arc<Engine>, VolumeInfo, Arc<BackingStore>) {
    let engine = Engine::new(1 << 20);
    let (sink_floor, sink_power) = (Arc::clone(floor), Arc::clone(power));
    engine.set_committed_txg_sink(
        floor.load(Ordering::SeqCst),
        Box::new(move |txg| {
            let off = sink_power.off.read().expect("power");
            if *off {
                return Err(std::io::Error::other("power is off"));
            }
            sink_floor.fetch_max(txg, Ordering::SeqCst);
            Ok(())
        }),
    );
    let powered = |dev: &Arc<FaultyDevice>| -> Arc<dyn BlockDevice> {
        Arc::new(Powered {
            dev: Arc::clone(dev),
            power: Arc::clone(power),
        })
    };
    let store = BackingStore::on_device("backing", powered(backing), LatencyModel::default());
    let slot = engine
        .register_volume(VOLUME, BLOCK, store.size_bytes())
        .expect("slot");
    let store = Arc::new(store);
    engine.attach_backing(VOLUME, Arc::clone(&store));
    if let Some(log) = log {
        engine
            .attach_log_device(powered(log), Path::new("log"), POOL, LOG, create)
            .expect("attach the log device");
    }
    let vol = VolumeInfo {
        guid: VOLUME,
        slot,
        size_bytes: BLOCKS * u64::from(BLOCK),
        block_bytes: BLOCK,
        primarycache: CacheMode::All,
        secondarycache: CacheMode::All,
        sync: SyncMode::Standard,
    };
    (engine, vol, store)
}

/// A fresh device holding `image` durably.
fn restored(image: &[u8]) -> Arc<FaultyDevice> {
    let dev = FaultyDevice::new(image.len() as u64);
    dev.write_at(image, 0).expect("restore image");
    dev.flush().expect("restore flush");
    Arc::new(dev)
}

/// One round; returns how many blocks had a durable version to check.
fn round(seed: u64, runtime: &tokio::runtime::Runtime) -> u64 {
    let mut rng = Rng(seed);
    let slog = rng.below(2) == 0;
    let failing_log = slog && rng.below(3) == 0;
    let backing = Arc::new(FaultyDevice::new(BLOCKS * u64::from(BLOCK)));
    let log = slog.then(|| Arc::new(FaultyDevice::new(LOG_BYTES)));
    let floor = Arc::new(AtomicU64::new(0));
    let power = Arc::new(Power::default());
    let (engine, vol, _) = open(&backing, log.as_ref(), true, &floor, &power);
    let mut durable = vec![0u64; BLOCKS as usize];
    let mut latest = vec![0u64; BLOCKS as usize];
    let mut unflushed: Vec<(u64, u64)> = Vec::new();
    let ops = 5 + rng.below(80);
    let fail_at = rng.below(ops);
    for op in 0..ops {
        if failing_log && op == fail_at {
            log.as_ref().expect("a log").fail_flushes(true);
        }
        let r = rng.below(100);
        if r < 15 {
            if engine.flush_writes(&vol).is_ok() {
                for (b, v) in unflushed.drain(..) {
                    durable[b as usize] = durable[b as usize].max(v);
                }
            }
            continue;
        }
        let b = rng.below(BLOCKS);
        latest[b as usize] += 1;
        let v = latest[b as usize];
        let fua = r < 45;
        let data = Bytes::from(contents(seed, b, v));
        if engine.write_blocks(&vol, &[(b, data)], fua).is_ok() {
            if fua {
                durable[b as usize] = durable[b as usize].max(v);
            } else {
                unflushed.push((b, v));
            }
        }
    }
    // The power goes, on every device at once: each unflushed write is lost, kept or torn.
    let (backing_image, log_image, floor) = {
        let mut off = power.off.write().expect("power");
        let mode = CrashMode::Random(seed ^ 0x5eed);
        backing.crash(mode);
        if let Some(log) = &log {
            log.crash(mode);
        }
        *off = true;
        (
            backing.durable_snapshot(),
            log.as_ref().map(|l| l.durable_snapshot()),
            Arc::new(AtomicU64::new(floor.load(Ordering::SeqCst))),
        )
    };
    engine.shutdown(); // every device operation fails from now on
    drop(engine);

    let backing = restored(&backing_image);
    let log = log_image.map(|image| restored(&image));
    let (engine, vol, store) = open(
        &backing,
        log.as_ref(),
        false,
        &floor,
        &Arc::new(Power::default()),
    );
    let mut checked = 0;
    for b in 0..BLOCKS {
        let data = runtime
            .block_on(engine.read_block(&store, &vol, b, false))
            .expect("read after restart");
        let want = durable[b as usize];
        match version_of(seed, b, &data) {
            Some(v) => assert!(
                v >= want && v <= latest[b as usize],
                "seed {seed} (log device {slog}, failing {failing_log}): block {b} holds version {v}, {want} was durable, {} was the last written",
                latest[b as usize]
            ),
            None => panic!("seed {seed}: block {b} holds bytes that are no version of it"),
        }
        if want > 0 {
            checked += 1;
        }
    }
    engine.shutdown();
    checked
}

#[test]
fn acknowledged_writes_survive_power_loss_at_random_points() {
    let rounds: u64 = std::env::var("LARCH_POWER_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut checked = 0;
    for seed in 0..rounds {
        checked += round(seed, &runtime);
    }
    assert!(
        checked > rounds,
        "too few durable versions were checked ({checked} in {rounds} rounds)"
    );
}
