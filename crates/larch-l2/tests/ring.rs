//! The ring, its log and the rebuild, driven through crashes, corruption and I/O errors.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use larch_io::{BlockDevice, CrashMode, FaultyDevice, IoError, MemDevice};
use larch_l2::{
    ArcState, BlockError, BlockKey, Compression, ContentType, CreateOptions, L2Device, L2Error,
    RebuildOptions, RebuildOutcome, Record, StopReason, forget_log, read_verified,
};

const POOL: u64 = 0x5eed_0001;
const DEVICE: u64 = 0x5eed_0002;

/// Deterministic generator for the tests (no dependency).
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

/// The bytes a block holds at a generation: a function of both, so a record that comes
/// back with the wrong bytes is caught even if its entry looks right.
fn content(key: BlockKey, generation: u64, len: usize) -> Vec<u8> {
    let mut rng =
        Rng(key.volume_guid ^ key.block_number.rotate_left(17) ^ generation.rotate_left(41));
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

fn key(block_number: u64) -> BlockKey {
    BlockKey {
        volume_guid: 7,
        block_number,
    }
}

fn record(key: BlockKey, generation: u64, bytes: &[u8]) -> Record<'_> {
    Record {
        key,
        generation,
        bytes,
        logical_size: bytes.len() as u32,
        compression: Compression::Off,
        content: ContentType::Data,
        arc_state: ArcState::Mru,
        prefetch: false,
    }
}

fn small_options(entries_per_block: u32, chain_count: u32) -> CreateOptions {
    CreateOptions {
        pool_guid: POOL,
        device_guid: DEVICE,
        sector_bytes: 512,
        entries_per_block,
        chain_count,
    }
}

/// 1.5 MiB: big enough for the minimum ring, small enough to wrap often.
const SMALL_DEVICE_BYTES: u64 = 1536 * 1024;

fn reopen<D: BlockDevice>(
    dev: D,
    prefetch: bool,
) -> Result<(L2Device<D>, RebuildOutcome), L2Error> {
    let mut options = RebuildOptions {
        prefetch,
        ..RebuildOptions::default()
    };
    L2Device::open(dev, Some((POOL, DEVICE)), &mut options)
}

/// Checks that every restored entry reads back with a matching checksum and exactly the
/// bytes its (key, generation) should hold.
fn assert_entries_verify<D: BlockDevice>(l2: &L2Device<D>, outcome: &RebuildOutcome) {
    let geo = l2.geometry();
    for restored in &outcome.entries {
        let e = &restored.entry;
        let bytes = read_verified(l2.device(), &geo, e)
            .unwrap_or_else(|err| panic!("entry {e:?} does not verify: {err}"));
        let k = BlockKey {
            volume_guid: e.volume_guid,
            block_number: e.block_number,
        };
        assert_eq!(
            bytes,
            content(k, e.generation, bytes.len()),
            "wrong bytes for {e:?}"
        );
    }
}

/// Writes `batches` random batches of records of 512..=4096 bytes over `blocks` keys.
fn fill<D: BlockDevice>(
    l2: &mut L2Device<D>,
    rng: &mut Rng,
    batches: usize,
    blocks: u64,
    generation: &mut u64,
) {
    for _ in 0..batches {
        let n = 1 + rng.below(12) as usize;
        let datas: Vec<(BlockKey, u64, Vec<u8>)> = (0..n)
            .map(|_| {
                *generation += 1;
                let k = key(rng.below(blocks));
                let len = 512 * (1 + rng.below(8) as usize) - rng.below(100) as usize;
                (k, *generation, content(k, *generation, len))
            })
            .collect();
        let records: Vec<Record<'_>> = datas.iter().map(|(k, g, b)| record(*k, *g, b)).collect();
        l2.write_batch(&records).unwrap();
        l2.check_invariants();
    }
}

#[test]
fn clean_reopen_restores_exactly_the_committed_records() {
    for chain_count in [1, 2] {
        let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
        let mut l2 = L2Device::create(dev.clone(), &small_options(16, chain_count)).unwrap();
        let mut rng = Rng(chain_count.into());
        let mut generation = 0;
        // Enough to wrap the ring several times.
        fill(&mut l2, &mut rng, 600, 400, &mut generation);
        assert!(
            l2.write_hand_pos() > 3 * l2.geometry().ring_bytes(),
            "the ring did not wrap: hand {}",
            l2.write_hand_pos()
        );
        l2.commit_log().unwrap();
        // Newest record per key among the writer's live records.
        let mut expect: HashMap<BlockKey, (u64, u64)> = HashMap::new();
        for (&pos, rec) in l2.live_records() {
            let slot = expect.entry(rec.key).or_insert((pos, rec.generation));
            if pos > slot.0 {
                *slot = (pos, rec.generation);
            }
        }
        let (l2b, outcome) = reopen(dev.clone(), true).unwrap();
        assert!(outcome.stop.is_clean(), "{:?}", outcome.stop);
        assert_eq!(outcome.stats.l2_rebuild_success, 1);
        let got: HashMap<BlockKey, (u64, u64)> = outcome
            .entries
            .iter()
            .map(|r| {
                let k = BlockKey {
                    volume_guid: r.entry.volume_guid,
                    block_number: r.entry.block_number,
                };
                (k, (r.ring_pos, r.entry.generation))
            })
            .collect();
        assert_eq!(got.len(), outcome.entries.len(), "one entry per key");
        assert_eq!(got, expect, "chains={chain_count}");
        // Newest first.
        assert!(
            outcome
                .entries
                .windows(2)
                .all(|w| w[0].ring_pos > w[1].ring_pos)
        );
        assert_entries_verify(&l2b, &outcome);
        assert_eq!(l2b.header().log_block_count, outcome.blocks.len() as u64);
        l2b.check_invariants();
    }
}

#[test]
fn prefetching_and_sequential_walks_agree() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(8, 2)).unwrap();
    let mut generation = 0;
    fill(&mut l2, &mut Rng(99), 300, 1000, &mut generation);
    l2.commit_log().unwrap();
    let (_, with) = reopen(dev.clone(), true).unwrap();
    let (_, without) = reopen(dev.clone(), false).unwrap();
    assert!(
        with.entries.len() > 100,
        "only {} entries",
        with.entries.len()
    );
    assert_eq!(with.entries, without.entries);
    assert_eq!(with.blocks, without.blocks);
}

#[test]
fn evict_hand_reports_each_overwritten_record_once() {
    let dev = MemDevice::new(SMALL_DEVICE_BYTES);
    let mut l2 = L2Device::create(dev, &small_options(32, 2)).unwrap();
    let mut rng = Rng(5);
    let mut written: BTreeMap<u64, u64> = BTreeMap::new();
    let mut evicted: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..1500u64 {
        let bytes = content(key(i), i, 512 * (1 + rng.below(8) as usize));
        let out = l2.write_batch(&[record(key(i), i, &bytes)]).unwrap();
        written.insert(out.placements[0].ring_pos, i);
        let floor = l2
            .evict_hand_pos()
            .saturating_sub(l2.geometry().ring_bytes());
        for e in out.evicted {
            assert!(
                e.ring_pos < floor,
                "evicted {} above floor {floor}",
                e.ring_pos
            );
            assert_eq!(written.get(&e.ring_pos), Some(&e.generation));
            assert!(
                evicted.insert(e.ring_pos, e.generation).is_none(),
                "evicted twice"
            );
        }
        l2.check_invariants();
    }
    assert!(!evicted.is_empty(), "nothing was evicted");
    // Every record is either still live or was reported evicted, never both.
    for (pos, generation) in &written {
        let live = l2.live_records().get(pos).map(|r| r.generation);
        assert!(
            live.is_some() != evicted.contains_key(pos),
            "record at {pos} (generation {generation}) live={live:?}"
        );
    }
}

/// A log commit that needs space moves the evict hand like a batch does, and tells its
/// caller the new floor before it overwrites anything: the engine drops its index entries
/// there (before, commits of tombstones alone moved the hand silently, and the engine's
/// index kept entries for overwritten records until the next feed).
#[test]
fn log_commits_that_move_the_evict_hand_report_the_floor_first() {
    let dev = MemDevice::new(SMALL_DEVICE_BYTES);
    let mut l2 = L2Device::create(dev, &small_options(8, 1)).unwrap();
    let mut rng = Rng(11);
    let mut generation = 0;
    // Fill the ring until the evict hand has moved at least once.
    while l2.evict_floor() == 0 {
        fill(&mut l2, &mut rng, 1, 64, &mut generation);
    }
    let mut moved = 0;
    let mut reported = Vec::new();
    for i in 0..4000u64 {
        let before = l2.evict_floor();
        let mut floor_seen = None;
        if i % 3 == 0 {
            l2.tombstone_with(key(i % 64), generation + i, |floor| {
                floor_seen = Some(floor)
            })
            .unwrap();
        } else {
            l2.tombstone(key(i % 64), generation + i).unwrap();
            l2.commit_log_with(|floor| floor_seen = Some(floor))
                .unwrap();
        }
        if l2.evict_floor() > before {
            moved += 1;
            // The floor was reported, and it was the new one.
            assert_eq!(floor_seen, Some(l2.evict_floor()), "commit {i}");
            reported.push(l2.evict_floor());
        }
        l2.check_invariants();
    }
    assert!(moved > 0, "no log commit moved the evict hand");
    assert!(reported.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn tombstones_hide_older_entries_of_the_same_block() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(64, 2)).unwrap();
    let (a, b, c) = (key(1), key(2), key(3));
    let bytes_a1 = content(a, 1, 1000);
    let bytes_b1 = content(b, 1, 1000);
    let bytes_c1 = content(c, 1, 1000);
    l2.write_batch(&[record(a, 1, &bytes_a1), record(b, 1, &bytes_b1)])
        .unwrap();
    l2.commit_log().unwrap();
    // A tombstone in a later block hides a; a tombstone in the same open block as c's
    // entry hides c (order inside a block counts).
    l2.write_batch(&[record(c, 1, &bytes_c1)]).unwrap();
    l2.tombstone(a, 2).unwrap();
    l2.tombstone(c, 2).unwrap();
    l2.commit_log().unwrap();
    let keys = |o: &RebuildOutcome| -> Vec<(u64, u64)> {
        o.entries
            .iter()
            .map(|r| (r.entry.block_number, r.entry.generation))
            .collect()
    };
    let (mut l2, outcome) = reopen(dev.clone(), true).unwrap();
    assert_eq!(keys(&outcome), vec![(2, 1)]);
    assert_eq!(outcome.stats.l2_rebuild_superseded, 2);
    // A newer copy after the tombstone is live again.
    let bytes_a3 = content(a, 3, 3000);
    l2.write_batch(&[record(a, 3, &bytes_a3)]).unwrap();
    l2.commit_log().unwrap();
    let (l2, outcome) = reopen(dev.clone(), true).unwrap();
    assert_eq!(keys(&outcome), vec![(1, 3), (2, 1)]);
    assert_entries_verify(&l2, &outcome);
}

/// A data entry the restorer drops (the engine tombstones it instead of restoring it)
/// hides its key's older entries like a restored one, but the restored counters leave it
/// out: they count what the restorer restored (a review's finding: they counted every
/// first entry, so "restored N blocks" included copies that were tombstoned).
#[test]
fn entries_the_restorer_drops_hide_older_ones_but_are_not_counted_restored() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(64, 2)).unwrap();
    let olds: Vec<Vec<u8>> = (1..=3).map(|b| content(key(b), 1, 1000)).collect();
    let news: Vec<Vec<u8>> = (1..=3).map(|b| content(key(b), 2, 2000)).collect();
    fn records(generation: u64, all: &[Vec<u8>]) -> Vec<Record<'_>> {
        (1..=3)
            .zip(all)
            .map(|(b, bytes)| record(key(b), generation, bytes))
            .collect()
    }
    l2.write_batch(&records(1, &olds)).unwrap();
    l2.write_batch(&records(2, &news)).unwrap();
    l2.commit_log().unwrap();
    let header = larch_l2::read_header(&*dev).unwrap().header;
    let mut seen = std::collections::HashSet::new();
    let end = larch_l2::rebuild_with(
        &*dev,
        &header,
        &mut RebuildOptions::default(),
        &mut |s: larch_l2::Sighting<'_>| {
            if !seen.insert(s.key()) {
                larch_l2::Seen::Again
            } else if s.key() == key(2) {
                larch_l2::Seen::Dropped
            } else {
                larch_l2::Seen::First
            }
        },
    );
    assert!(end.stop.is_clean(), "{:?}", end.stop);
    assert_eq!(end.stats.l2_rebuild_bufs, 2, "blocks 1 and 3, not 2");
    assert_eq!(end.stats.l2_rebuild_size, 2 * 2000);
    assert_eq!(
        end.stats.l2_rebuild_superseded, 3,
        "the old copies, 2's too"
    );
}

#[test]
fn a_forgotten_log_restores_nothing_until_its_writer_commits_again() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(64, 2)).unwrap();
    let (a, b) = (key(1), key(2));
    let (bytes_a, bytes_b) = (content(a, 1, 1000), content(b, 1, 1000));
    l2.write_batch(&[record(a, 1, &bytes_a)]).unwrap();
    l2.commit_log().unwrap();
    forget_log(&*dev).unwrap();
    let (_, outcome) = reopen(dev.clone(), true).unwrap();
    assert!(outcome.entries.is_empty(), "{:?}", outcome.entries);
    // The writer that held the device on (a rebuild that then commits its tombstones)
    // writes its own header over the empty one, and its log is back.
    l2.tombstone(a, 2).unwrap();
    l2.write_batch(&[record(b, 1, &bytes_b)]).unwrap();
    l2.commit_log().unwrap();
    let (l2, outcome) = reopen(dev.clone(), true).unwrap();
    let found: Vec<u64> = outcome
        .entries
        .iter()
        .map(|r| r.entry.block_number)
        .collect();
    assert_eq!(found, vec![2]);
    assert_entries_verify(&l2, &outcome);
    // Forgetting a log twice is as good as once; a blank device has none to forget.
    let first = forget_log(&*dev).unwrap();
    let second = forget_log(&*dev).unwrap();
    assert_eq!(second.sequence, first.sequence + 1);
    assert!(reopen(dev.clone(), true).unwrap().1.entries.is_empty());
    let blank = MemDevice::new(SMALL_DEVICE_BYTES);
    assert!(matches!(forget_log(&blank), Err(L2Error::NoHeader)));
}

#[test]
fn uncommitted_entries_are_not_restored() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(64, 2)).unwrap();
    let bytes = content(key(1), 1, 512);
    l2.write_batch(&[record(key(1), 1, &bytes)]).unwrap();
    assert_eq!(l2.open_entries(), 1);
    let (l2, outcome) = reopen(dev, true).unwrap();
    assert!(outcome.entries.is_empty());
    assert!(l2.live_records().is_empty());
}

/// A device whose power is cut after a number of operations: later writes and flushes
/// fail without reaching the cache, as if the machine stopped.
struct CutDevice {
    inner: Arc<FaultyDevice>,
    ops_left: AtomicI64,
}

impl CutDevice {
    fn take(&self, op: &'static str) -> Result<(), IoError> {
        if self.ops_left.fetch_sub(1, Ordering::SeqCst) <= 0 {
            Err(IoError::Injected {
                op,
                offset_bytes: 0,
                len_bytes: 0,
            })
        } else {
            Ok(())
        }
    }
}

impl BlockDevice for CutDevice {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        self.take("write")?;
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        self.take("flush")?;
        self.inner.flush()
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

/// The engine's side of the no-stale-read rule, as a model: the newest generation of
/// each block whose tombstone is durable.
#[derive(Default)]
struct Model {
    /// Generation of the last durable tombstone per key.
    durable_tombstone: HashMap<BlockKey, u64>,
    /// Highest generation ever written to the device per key.
    newest_written: HashMap<BlockKey, u64>,
}

impl Model {
    fn check(&self, outcome: &RebuildOutcome) {
        for r in &outcome.entries {
            let k = BlockKey {
                volume_guid: r.entry.volume_guid,
                block_number: r.entry.block_number,
            };
            let g = r.entry.generation;
            if let Some(&t) = self.durable_tombstone.get(&k) {
                assert!(
                    g >= t,
                    "stale entry {k:?} generation {g} behind durable tombstone {t}"
                );
            }
            assert!(
                self.newest_written.get(&k).is_some_and(|&w| g <= w),
                "entry {k:?} generation {g} was never written"
            );
        }
    }
}

/// Runs writes, rewrites with tombstones, and commits against a device that loses power
/// after a random number of operations; then crashes the volatile cache (dropping,
/// keeping or tearing each unflushed write), reopens, checks, and continues on the same
/// device. Returns the number of entries verified.
fn crash_cycle(seed: u64) -> usize {
    let faulty = Arc::new(FaultyDevice::new(SMALL_DEVICE_BYTES));
    let mut rng = Rng(seed);
    let mut model = Model::default();
    let mut verified = 0;
    let options = small_options(1 + rng.below(24) as u32, 1 + rng.below(2) as u32);
    let mut dev = Arc::new(CutDevice {
        inner: faulty.clone(),
        ops_left: AtomicI64::new(i64::MAX),
    });
    let mut l2 = L2Device::create(dev.clone(), &options).unwrap();
    // Start from a ring that has wrapped, so that cuts land while live records are
    // being overwritten.
    let mut generation = 0u64;
    fill(&mut l2, &mut rng, 300, 150, &mut generation);
    for (k, g) in l2.live_records().values().map(|r| (r.key, r.generation)) {
        let newest = model.newest_written.entry(k).or_insert(g);
        *newest = (*newest).max(g);
    }
    for _cycle in 0..6 {
        // The smallest evict step moves the evict hand (and writes a header first) in
        // nearly every batch: the ordering that matters is exercised at every cut.
        l2.set_evict_ahead_bytes(0);
        dev.ops_left
            .store(1 + rng.below(300) as i64, Ordering::SeqCst);
        // Run until the power cut stops the writer.
        loop {
            generation += 1;
            let k = key(rng.below(150));
            let is_tombstone = rng.below(5) == 0;
            let result = if is_tombstone {
                // Overwrite of a cached block: tombstone, then make it durable.
                l2.tombstone(k, generation)
                    .and_then(|()| l2.commit_log())
                    .map(|_| ())
            } else {
                let len = 512 * (1 + rng.below(8) as usize) - rng.below(64) as usize;
                let bytes = content(k, generation, len);
                let rec = record(k, generation, &bytes);
                model.newest_written.insert(k, generation);
                l2.write_batch(&[rec]).map(|_| ())
            };
            match result {
                // Only a commit that returned makes a tombstone durable.
                Ok(()) if is_tombstone => {
                    model.durable_tombstone.insert(k, generation);
                }
                Ok(()) => {}
                Err(L2Error::Io(_)) => break,
                Err(other) => panic!("seed {seed}: unexpected error {other}"),
            }
            if rng.below(7) == 0 {
                match l2.commit_log() {
                    Ok(_) => {}
                    Err(L2Error::Io(_)) => break,
                    Err(other) => panic!("seed {seed}: unexpected error {other}"),
                }
            }
        }
        assert!(l2.is_poisoned());
        assert!(matches!(l2.commit_log(), Err(L2Error::Poisoned)));
        drop(l2);
        faulty.crash(CrashMode::Random(rng.next()));
        dev = Arc::new(CutDevice {
            inner: faulty.clone(),
            ops_left: AtomicI64::new(i64::MAX),
        });
        let (reopened, outcome) = match reopen(dev.clone(), rng.below(2) == 0) {
            Ok(pair) => pair,
            // Only possible if the crash hit the very first header writes.
            Err(L2Error::NoHeader) if generation < 50 => (
                L2Device::create(dev.clone(), &options).unwrap(),
                empty_outcome(),
            ),
            Err(other) => panic!("seed {seed}: reopen failed: {other}"),
        };
        assert!(outcome.stop.is_clean(), "seed {seed}: {:?}", outcome.stop);
        model.check(&outcome);
        assert_entries_verify(&reopened, &outcome);
        reopened.check_invariants();
        verified += outcome.entries.len();
        l2 = reopened;
    }
    verified
}

fn empty_outcome() -> RebuildOutcome {
    RebuildOutcome {
        entries: Vec::new(),
        blocks: Vec::new(),
        stop: StopReason::ChainEnd,
        stats: Default::default(),
    }
}

#[test]
fn power_cuts_at_random_points_never_return_overwritten_or_stale_records() {
    let mut verified = 0;
    for seed in 0..24 {
        verified += crash_cycle(seed);
    }
    assert!(
        verified > 500,
        "crash runs verified only {verified} entries"
    );
}

#[test]
fn single_byte_corruption_anywhere_never_yields_a_bad_entry() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(12, 2)).unwrap();
    let mut generation = 0;
    fill(&mut l2, &mut Rng(3), 400, 300, &mut generation);
    l2.commit_log().unwrap();
    let log_blocks: Vec<(u64, u64)> = l2
        .live_log_blocks()
        .map(|p| (l2.geometry().daddr(p.block_pos), p.asize(512)))
        .collect();
    let image = dev.snapshot();
    let (_, clean) = reopen(Arc::new(MemDevice::from_bytes(image.clone())), true).unwrap();
    let clean_entries: std::collections::HashSet<_> = clean
        .entries
        .iter()
        .map(|r| (r.entry, r.ring_pos))
        .collect();
    let mut rng = Rng(11);
    let (mut refused_blocks, mut refused_headers) = (0, 0);
    for i in 0..400 {
        // A third of the damage goes to log blocks, a sixth to the headers, the rest
        // anywhere on the device.
        let offset = match i % 6 {
            0 | 1 => {
                let (at, len) = log_blocks[rng.below(log_blocks.len() as u64) as usize];
                at + rng.below(len)
            }
            2 => rng.below(2) * 4096 + rng.below(512),
            _ => rng.below(SMALL_DEVICE_BYTES),
        };
        let mask = 1 + rng.below(255) as u8;
        let mut damaged = image.clone();
        damaged[offset as usize] ^= mask;
        let dev = Arc::new(MemDevice::from_bytes(damaged));
        let (l2, outcome) = match reopen(dev, rng.below(2) == 0) {
            Ok(pair) => pair,
            Err(L2Error::DamagedHeader { .. } | L2Error::Unsupported(_)) => {
                refused_headers += 1;
                continue;
            }
            Err(other) => panic!("offset {offset}: {other}"),
        };
        if let StopReason::Invalid { error, .. } = &outcome.stop {
            assert!(
                matches!(error, BlockError::Checksum(_)),
                "single-byte damage should fail the checksum, got {error}"
            );
            assert_eq!(outcome.stats.l2_rebuild_cksum_lb_errors, 1);
            refused_blocks += 1;
        }
        let geo = l2.geometry();
        for r in &outcome.entries {
            assert!(
                clean_entries.contains(&(r.entry, r.ring_pos)),
                "offset {offset}: entry {:?} was not in the undamaged log",
                r.entry
            );
            let hit =
                (r.entry.daddr..r.entry.daddr + u64::from(r.entry.physical_size)).contains(&offset);
            match read_verified(l2.device(), &geo, &r.entry) {
                Ok(_) => assert!(!hit, "offset {offset}: damaged record verified"),
                Err(e) => assert!(hit, "offset {offset}: undamaged record failed: {e}"),
            }
        }
    }
    assert!(
        refused_blocks > 50,
        "only {refused_blocks} damaged blocks refused"
    );
    // Damage to either header slot refuses the device (never a fallback that could skip
    // a durable tombstone).
    assert!(
        refused_headers >= 30,
        "only {refused_headers} damaged headers refused"
    );
}

#[test]
fn read_error_on_a_log_block_stops_the_rebuild_cleanly() {
    let faulty = Arc::new(FaultyDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(faulty.clone(), &small_options(8, 2)).unwrap();
    let mut generation = 0;
    fill(&mut l2, &mut Rng(21), 100, 500, &mut generation);
    l2.commit_log().unwrap();
    let blocks: Vec<_> = l2.live_log_blocks().copied().collect();
    // Fail the third-newest block: the two newer ones are restored, nothing older.
    let victim = blocks[blocks.len() - 3];
    let at = l2.geometry().daddr(victim.block_pos);
    faulty.fail_reads(at..at + 1);
    let (_, outcome) = reopen(faulty.clone(), true).unwrap();
    assert!(matches!(
        outcome.stop,
        StopReason::Invalid {
            error: BlockError::Io(_),
            ..
        }
    ));
    assert_eq!(outcome.stats.l2_rebuild_io_errors, 1);
    assert_eq!(outcome.blocks.len(), 2);
    let newest_two: Vec<u64> = blocks[blocks.len() - 2..]
        .iter()
        .rev()
        .map(|b| b.sequence)
        .collect();
    assert_eq!(
        outcome
            .blocks
            .iter()
            .map(|b| b.sequence)
            .collect::<Vec<_>>(),
        newest_two
    );
}

#[test]
fn headers_that_do_not_fit_are_refused() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(8, 2)).unwrap();
    let bytes = content(key(1), 1, 512);
    l2.write_batch(&[record(key(1), 1, &bytes)]).unwrap();
    l2.commit_log().unwrap();
    let mut options = RebuildOptions::default();
    assert!(matches!(
        L2Device::open(dev.clone(), Some((POOL, DEVICE + 1)), &mut options),
        Err(L2Error::Unsupported(_))
    ));
    // The same bytes on a larger device: the geometry no longer matches.
    let mut bigger = dev.snapshot();
    bigger.resize(bigger.len() + 4096, 0);
    assert!(matches!(
        reopen(Arc::new(MemDevice::from_bytes(bigger)), true),
        Err(L2Error::Unsupported(_))
    ));
    assert!(matches!(
        reopen(Arc::new(MemDevice::new(SMALL_DEVICE_BYTES)), true),
        Err(L2Error::NoHeader)
    ));
    // Re-creating invalidates the old log even though its header had a higher sequence.
    drop(l2);
    let l2 = L2Device::create(dev.clone(), &small_options(8, 2)).unwrap();
    drop(l2);
    let (_, outcome) = reopen(dev, true).unwrap();
    assert!(outcome.entries.is_empty());
}

#[test]
fn progress_is_reported_and_can_cancel() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(4, 2)).unwrap();
    let mut generation = 0;
    fill(&mut l2, &mut Rng(8), 60, 10_000, &mut generation);
    l2.commit_log().unwrap();
    let mut calls = Vec::new();
    let mut callback = |p: &larch_l2::RebuildProgress| {
        calls.push(*p);
        if calls.len() == 5 {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    };
    let mut options = RebuildOptions {
        prefetch: true,
        progress: Some(&mut callback),
        ..RebuildOptions::default()
    };
    let (_, outcome) = L2Device::open(dev, None, &mut options).unwrap();
    assert!(matches!(outcome.stop, StopReason::Cancelled));
    assert_eq!(calls.len(), 5);
    assert!(
        calls
            .windows(2)
            .all(|w| w[1].log_blocks == w[0].log_blocks + 1
                && w[1].ring_bytes_walked > w[0].ring_bytes_walked
                && w[1].ring_bytes_walked <= w[1].ring_bytes_total)
    );
}

#[test]
fn entry_limit_stops_the_rebuild_like_the_lowmem_valve() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(10, 2)).unwrap();
    let mut generation = 0;
    fill(&mut l2, &mut Rng(4), 40, 100_000, &mut generation);
    l2.commit_log().unwrap();
    let mut options = RebuildOptions {
        prefetch: true,
        max_entries: Some(25),
        ..RebuildOptions::default()
    };
    let (l2, outcome) = L2Device::open(dev, Some((POOL, DEVICE)), &mut options).unwrap();
    assert!(matches!(outcome.stop, StopReason::EntryLimit));
    assert_eq!(outcome.stats.l2_rebuild_lowmem, 1);
    assert_eq!(outcome.stats.l2_rebuild_success, 0);
    // Whole blocks are restored, so the limit is passed by less than one block.
    assert!(
        (25..35).contains(&outcome.entries.len()),
        "{}",
        outcome.entries.len()
    );
    assert_eq!(l2.live_records().len(), outcome.entries.len());
}

/// Rewrites the newest log block with `forge` applied and a valid checksum, and points
/// the header at the forged copy, so only the walk's range checks can catch it.
fn forge_newest(
    image: &[u8],
    forge: impl FnOnce(&mut larch_format::LogBlockPhys, &larch_l2::Geometry),
) -> Arc<MemDevice> {
    use larch_format::{DevHeaderPhys, LogBlockPhys};
    let dev = Arc::new(MemDevice::from_bytes(image.to_vec()));
    let read = larch_l2::read_header(&*dev).unwrap();
    let mut header: DevHeaderPhys = read.header;
    let geo = larch_l2::validate_header(&header, dev.len_bytes(), None).unwrap();
    let ptr = header.newest[0];
    let mut stored = vec![0u8; ptr.asize(geo.sector_bytes) as usize];
    dev.read_at(&mut stored, geo.daddr(ptr.block_pos)).unwrap();
    let mut block = LogBlockPhys::decode_physical(&stored, &ptr).unwrap();
    forge(&mut block, &geo);
    let enc = block.encode_physical(geo.sector_bytes);
    assert!(
        enc.bytes.len() as u64 <= ptr.asize(geo.sector_bytes),
        "forged block grew"
    );
    dev.write_at(&enc.bytes, geo.daddr(ptr.block_pos)).unwrap();
    header.newest[0].checksum = enc.checksum;
    header.newest[0].logical_size = enc.logical_size;
    header.newest[0].physical_size = enc.physical_size;
    header.newest[0].compression = enc.compression;
    dev.write_at(&header.encode(), read.slot * 4096).unwrap();
    dev
}

#[test]
fn forged_blocks_with_valid_checksums_are_range_checked() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(16, 2)).unwrap();
    let mut generation = 0;
    // Wrap the ring so that entries on both sides of the ring end exist.
    fill(&mut l2, &mut Rng(77), 700, 5000, &mut generation);
    l2.commit_log().unwrap();
    let image = dev.snapshot();
    let (_, clean) = reopen(Arc::new(MemDevice::from_bytes(image.clone())), true).unwrap();
    assert!(clean.stop.is_clean());
    type Forge = Box<dyn Fn(&mut larch_format::LogBlockPhys, &larch_l2::Geometry)>;
    let forges: Vec<(&str, Forge)> = vec![
        (
            "past the ring end",
            Box::new(|b, g| b.entries[0].daddr = g.ring_end),
        ),
        ("before the ring", Box::new(|b, _| b.entries[0].daddr = 0)),
        ("misaligned", Box::new(|b, _| b.entries[0].daddr += 1)),
        (
            "straddles the ring end",
            Box::new(|b, g| {
                let e = &mut b.entries[0];
                e.daddr = g.ring_end - 512;
                e.physical_size = 1024;
                e.logical_size = 1024;
            }),
        ),
        (
            "outside the block's payload",
            Box::new(|b, g| b.entries[0].daddr = g.daddr(g.ring_bytes() / 2 + b.entries[0].daddr)),
        ),
        (
            "overlaps the previous entry",
            Box::new(|b, _| b.entries[1].daddr = b.entries[0].daddr),
        ),
        (
            "too many entries",
            Box::new(|b, _| b.entries.extend(b.entries.clone())),
        ),
        ("wrong prev sequence", Box::new(|b, _| b.prev.sequence += 1)),
    ];
    for (what, forge) in &forges {
        let forged = forge_newest(&image, |b, g| forge(b, g));
        let (_, outcome) = reopen(forged, true).unwrap();
        assert!(
            matches!(
                &outcome.stop,
                StopReason::Invalid {
                    error: BlockError::BadEntry { .. } | BlockError::BadPointer(_),
                    ..
                }
            ),
            "{what}: {:?}",
            outcome.stop
        );
        assert!(outcome.entries.is_empty(), "{what}: entries came back");
        assert_eq!(outcome.stats.l2_rebuild_success, 0, "{what}");
    }
    // The unforged image, re-encoded through the same path, still rebuilds fully.
    let same = forge_newest(&image, |_, _| {});
    let (_, outcome) = reopen(same, true).unwrap();
    assert_eq!(outcome.entries, clean.entries);
}

/// The streaming rebuild meets every live entry and tombstone newest first, with
/// positions falling; a visitor that keeps only a set of keys restores what the collecting
/// rebuild restores, with the same counters, and `open_with` keeps no record index.
#[test]
fn streaming_rebuild_agrees_with_the_collecting_one() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let mut l2 = L2Device::create(dev.clone(), &small_options(8, 2)).unwrap();
    let mut rng = Rng(18);
    let mut generation = 0;
    fill(&mut l2, &mut rng, 60, 40, &mut generation);
    for block in [3, 11, 17] {
        generation += 1;
        l2.tombstone(key(block), generation).unwrap();
    }
    fill(&mut l2, &mut rng, 1, 40, &mut generation);
    l2.commit_log().unwrap();
    drop(l2);

    let (_, collected) = reopen(dev.clone(), true).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut streamed = Vec::new();
    let mut last_pos = u64::MAX;
    let mut tombstones_first = 0;
    let mut options = RebuildOptions {
        prefetch: true,
        ..RebuildOptions::default()
    };
    let (l2, end) = L2Device::open_with(
        dev,
        Some((POOL, DEVICE)),
        &mut options,
        &mut |s: larch_l2::Sighting<'_>| {
            if let Some(pos) = s.ring_pos {
                assert!(pos < last_pos, "position {pos} after {last_pos}");
                last_pos = pos;
            }
            if !seen.insert(s.key()) {
                return larch_l2::Seen::Again;
            }
            match s.ring_pos {
                Some(ring_pos) => streamed.push((s.key(), s.entry.generation, ring_pos)),
                None => tombstones_first += 1,
            }
            larch_l2::Seen::First
        },
    )
    .unwrap();
    assert!(end.stop.is_clean(), "{:?}", end.stop);
    assert_eq!(end.stats, collected.stats);
    assert_eq!(end.blocks, collected.blocks);
    assert!(tombstones_first > 0, "some tombstone hid its key");
    let want: Vec<_> = collected
        .entries
        .iter()
        .map(|r| (key(r.entry.block_number), r.entry.generation, r.ring_pos))
        .collect();
    assert_eq!(streamed, want);
    assert!(l2.live_records().is_empty(), "no record index");
    l2.check_invariants();
}

/// A header whose hands sit near the top of `u64` (only a forged or damaged one can) is
/// refused as unsupported: the walk's position arithmetic would overflow (a panic in
/// debug builds, wrapped range checks in release ones; a review's finding).
#[test]
fn hands_beyond_any_real_device_are_refused() {
    let dev = Arc::new(MemDevice::new(SMALL_DEVICE_BYTES));
    let l2 = L2Device::create(dev.clone(), &small_options(16, 1)).unwrap();
    let mut header = larch_l2::read_header(&*dev).unwrap().header;
    drop(l2);
    let ring = larch_l2::validate_header(&header, dev.len_bytes(), None)
        .unwrap()
        .ring_bytes();
    header.flags &= !larch_format::FLAG_FIRST_SWEEP;
    header.evict_hand_pos = u64::MAX - 1024;
    header.write_hand_pos = header.evict_hand_pos - ring / 4;
    let refused = larch_l2::validate_header(&header, dev.len_bytes(), None);
    assert!(
        matches!(refused, Err(L2Error::Unsupported(ref why)) if why.contains("evict hand")),
        "{refused:?}"
    );
}
