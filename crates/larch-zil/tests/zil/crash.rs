//! Power cuts at random points, thousands of seeded iterations.
//!
//! Each iteration formats a small log (wrap-around and `Full` come quickly), then runs
//! rounds of: open and replay, check the replay against a model, random commits and
//! `txg_committed` calls, and a power cut at a random write or flush, which drops, keeps
//! or tears (per 512-byte sector) the writes not yet flushed. The model is the list of
//! records whose commit returned `Ok`, plus the one commit that was in flight at the cut.
//!
//! `LARCH_ZIL_ITERATIONS` sets the number of iterations (default 5000, a few seconds in
//! a debug build); `LARCH_ZIL_SEED` runs one iteration with that seed.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use larch_io::{BlockDevice, CrashMode, FaultyDevice, IoError};
use larch_zil::{LogDevice, LogError, Record, Replay, ReplayEnd};

use crate::{DEV, POOL, Rng, injected, record, sectors, views};

/// A device that dies at its n-th write or flush: the power cut happens instead of that
/// operation, and every later operation fails, as for a process whose machine is off.
/// Operations are serialised, so none completes after the cut (a flush that started
/// before the cut on another thread must not report success for writes the cut lost).
struct CutDevice {
    inner: Arc<FaultyDevice>,
    serial: Mutex<()>,
    /// Writes and flushes left before the cut; negative: never.
    ops_left: AtomicI64,
    mode: CrashMode,
    cut: AtomicBool,
}

impl CutDevice {
    fn new(inner: Arc<FaultyDevice>, ops_left: Option<i64>, mode: CrashMode) -> Self {
        Self {
            inner,
            serial: Mutex::new(()),
            ops_left: AtomicI64::new(ops_left.unwrap_or(-1)),
            mode,
            cut: AtomicBool::new(false),
        }
    }

    fn tick(&self, op: &'static str) -> Result<(), IoError> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(injected(op));
        }
        if self.ops_left.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.inner.crash(self.mode);
            self.cut.store(true, Ordering::SeqCst);
            return Err(injected(op));
        }
        Ok(())
    }

    fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

impl BlockDevice for CutDevice {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        let _serial = self.serial.lock().unwrap();
        if self.is_cut() {
            return Err(injected("read"));
        }
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        let _serial = self.serial.lock().unwrap();
        self.tick("write")?;
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        let _serial = self.serial.lock().unwrap();
        self.tick("flush")?;
        self.inner.flush()
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

/// What the log must hold.
#[derive(Default)]
struct Model {
    /// Records whose commit returned `Ok` (or that a replay returned), in log order,
    /// of TXGs above `durable_committed`.
    acked: Vec<Record>,
    /// The records of the commit that was in flight at the cut: replay may return them
    /// whole after the acknowledged ones, or not at all.
    inflight: Option<Vec<Record>>,
    /// Highest TXG whose `txg_committed` returned `Ok` (or that a replay reported).
    durable_committed: u64,
    /// Highest TXG ever passed to `txg_committed`, durable or not.
    requested_committed: u64,
    /// The TXG new records get.
    txg: u64,
}

/// What the iterations exercised, so the test fails if the harness stops reaching the
/// interesting cases.
#[derive(Default, Debug)]
struct Totals {
    cuts: u64,
    opens_cut: u64,
    inflight_landed: u64,
    inflight_lost: u64,
    damaged_ends: u64,
    stale_ends: u64,
    full: u64,
    too_large: u64,
    laps: u64,
    raised_by_stamp: u64,
}

fn check_replay(seed: u64, round: u32, replay: &Replay, model: &mut Model, totals: &mut Totals) {
    let ctx = format!("seed {seed} round {round}");
    let c = replay.committed_txg;
    assert!(
        c >= model.durable_committed,
        "{ctx}: committed txg {c} fell below the durable {}",
        model.durable_committed
    );
    assert!(
        c <= model.requested_committed.max(model.durable_committed),
        "{ctx}: committed txg {c} was never passed to txg_committed (max {})",
        model.requested_committed
    );
    let expected: Vec<&Record> = model.acked.iter().filter(|r| r.txg > c).collect();
    assert!(
        replay.records.len() >= expected.len(),
        "{ctx}: replay returned {} records, {} were acknowledged (end {:?})",
        replay.records.len(),
        expected.len(),
        replay.end
    );
    for (i, (got, want)) in replay.records.iter().zip(&expected).enumerate() {
        assert_eq!(got, *want, "{ctx}: record {i} differs");
    }
    let extra = &replay.records[expected.len()..];
    match &model.inflight {
        Some(inflight) => {
            let tail: Vec<&Record> = inflight.iter().filter(|r| r.txg > c).collect();
            if extra.is_empty() {
                totals.inflight_lost += 1;
            } else {
                assert_eq!(
                    extra.iter().collect::<Vec<_>>(),
                    tail,
                    "{ctx}: the in-flight commit came back in part or wrong"
                );
                totals.inflight_landed += 1;
            }
        }
        None => assert!(
            extra.is_empty(),
            "{ctx}: replay returned {} records that were never committed: {extra:?}",
            extra.len()
        ),
    }
    match replay.end {
        ReplayEnd::Damaged(_) => totals.damaged_ends += 1,
        ReplayEnd::Stale { .. } => totals.stale_ends += 1,
        _ => {}
    }
    if c > model.durable_committed {
        totals.raised_by_stamp += 1;
    }
    model.acked = replay.records.clone();
    model.inflight = None;
    model.durable_committed = c;
    model.requested_committed = model.requested_committed.max(c);
    let newest = replay.max_txg().unwrap_or(0);
    model.txg = model.txg.max(c + 1).max(newest + 1);
}

fn crash_mode(rng: &mut Rng) -> CrashMode {
    match rng.below(4) {
        0 => CrashMode::DropAll,
        1 => CrashMode::Prefix(rng.below(3) as usize),
        _ => CrashMode::Random(rng.next_u64()),
    }
}

/// One round of random operations on an open log, until the cut or the round's end.
fn run_ops(
    seed: u64,
    rng: &mut Rng,
    log: &LogDevice<CutDevice>,
    model: &mut Model,
    totals: &mut Totals,
) {
    let ops = 5 + rng.below(40);
    for _ in 0..ops {
        match rng.below(10) {
            0..=6 => {
                let count = 1 + rng.below(4) as usize;
                let max_len = [64u64, 700, 3000][rng.below(3) as usize];
                let batch: Vec<Record> = (0..count)
                    .map(|_| {
                        let len = rng.below(max_len + 1) as usize;
                        record(rng, model.txg, len)
                    })
                    .collect();
                if !commit(seed, log, model, totals, batch) {
                    return;
                }
            }
            7 | 8 => {
                let txg = if rng.below(2) == 0 {
                    let t = model.txg;
                    model.txg += 1;
                    t
                } else {
                    model.durable_committed + rng.below(model.txg - model.durable_committed)
                };
                model.requested_committed = model.requested_committed.max(txg);
                match log.txg_committed(txg) {
                    Ok(()) => model.durable_committed = model.durable_committed.max(txg),
                    Err(err) => {
                        assert!(log.device().is_cut(), "seed {seed}: txg_committed: {err}");
                        return;
                    }
                }
            }
            _ => model.txg += 1,
        }
    }
}

/// Commits `batch`; on `Full`, commits the open TXG and retries once, as the engine
/// would. Returns false once the device is cut.
fn commit(
    seed: u64,
    log: &LogDevice<CutDevice>,
    model: &mut Model,
    totals: &mut Totals,
    batch: Vec<Record>,
) -> bool {
    for attempt in 0..2 {
        match log.commit(&views(&batch)) {
            Ok(_) => {
                model.acked.extend(batch);
                return true;
            }
            Err(LogError::Full {
                needed_bytes,
                free_bytes,
            }) => {
                assert!(
                    needed_bytes > free_bytes && attempt == 0,
                    "seed {seed}: Full (needs {needed_bytes}, {free_bytes} free) on attempt {attempt}"
                );
                totals.full += 1;
                let txg = model.txg;
                model.requested_committed = model.requested_committed.max(txg);
                if log.txg_committed(txg).is_err() {
                    assert!(log.device().is_cut(), "seed {seed}");
                    return false;
                }
                model.durable_committed = txg;
                model.txg += 1;
                // The batch keeps its TXG, now committed: it must still be logged and
                // acknowledged, and replay must skip it.
            }
            Err(LogError::TooLarge { bytes, max_bytes }) => {
                assert!(bytes > max_bytes, "seed {seed}");
                assert_eq!(max_bytes, log.max_commit_bytes(), "seed {seed}");
                totals.too_large += 1;
                return true;
            }
            Err(err) => {
                assert!(log.device().is_cut(), "seed {seed}: commit failed: {err}");
                assert!(
                    log.is_poisoned(),
                    "seed {seed}: a failed commit left the log usable"
                );
                model.inflight = Some(batch);
                return false;
            }
        }
    }
    unreachable!("the retry after Full returns")
}

fn run_iteration(seed: u64, totals: &mut Totals) {
    let mut rng = Rng(seed);
    let sector = if rng.below(4) == 0 { 4096 } else { 512 };
    let rings: &[u64] = if sector == 4096 {
        &[32 << 10, 64 << 10, 128 << 10]
    } else {
        &[16 << 10, 24 << 10, 48 << 10, 128 << 10]
    };
    let ring = rings[rng.below(rings.len() as u64) as usize];
    let ring_start = 8192u64.next_multiple_of(sector);
    let faulty = Arc::new(FaultyDevice::new(ring_start + ring + rng.below(sector)));
    drop(
        LogDevice::create_with(faulty.clone(), POOL, DEV, &sectors(sector))
            .unwrap_or_else(|err| panic!("seed {seed}: create: {err}")),
    );
    let mut model = Model {
        txg: 1,
        ..Model::default()
    };
    let rounds = 1 + rng.below(4) as u32;
    for round in 0..=rounds {
        let last = round == rounds;
        let cut_at = (!last && rng.below(5) != 0).then(|| 1 + rng.below(50) as i64);
        let mode = crash_mode(&mut rng);
        let dev = CutDevice::new(faulty.clone(), cut_at, mode);
        let (log, replay) = match LogDevice::open(dev, POOL) {
            Ok(opened) => opened,
            Err(err) => {
                // The cut hit the open's header update: nothing logical changed.
                assert!(!last, "seed {seed}: final open failed: {err}");
                totals.opens_cut += 1;
                totals.cuts += 1;
                continue;
            }
        };
        check_replay(seed, round, &replay, &mut model, totals);
        if last {
            break;
        }
        if let Some(newest) = replay.max_txg().filter(|_| rng.below(3) == 0) {
            // The engine replays the records and syncs their TXGs.
            model.requested_committed = model.requested_committed.max(newest);
            if log.txg_committed(newest).is_ok() {
                model.durable_committed = newest;
            }
        }
        if !log.device().is_cut() {
            run_ops(seed, &mut rng, &log, &mut model, totals);
        }
        totals.laps += log.stats().laps;
        if log.device().is_cut() {
            totals.cuts += 1;
        } else {
            // A clean stop: nothing is pending, but cut anyway.
            faulty.crash(mode);
        }
    }
}

fn iterations() -> u64 {
    std::env::var("LARCH_ZIL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

#[test]
fn power_cuts_never_lose_acknowledged_records_nor_invent_any() {
    if let Some(seed) = std::env::var("LARCH_ZIL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        run_iteration(seed, &mut Totals::default());
        return;
    }
    let mut totals = Totals::default();
    let n = iterations();
    for seed in 0..n {
        run_iteration(seed, &mut totals);
    }
    eprintln!("{n} iterations: {totals:?}");
    // The harness must keep reaching the cases it exists for.
    assert!(totals.cuts > n / 2, "{totals:?}");
    assert!(totals.opens_cut > 0, "{totals:?}");
    assert!(
        totals.inflight_landed > 0 && totals.inflight_lost > 0,
        "{totals:?}"
    );
    assert!(
        totals.damaged_ends > 0 && totals.stale_ends > 0,
        "{totals:?}"
    );
    assert!(totals.full > 0 && totals.too_large > 0, "{totals:?}");
    assert!(totals.laps > n, "{totals:?}");
}

/// Power cuts while several threads commit (group commit) and a syncer reclaims: each
/// thread's acknowledged records come back in its order, followed at most by its one
/// failed commit, whole; nothing else comes back.
#[test]
fn power_cuts_under_group_commit_keep_every_acknowledged_record() {
    use std::collections::HashMap;
    use std::sync::atomic::AtomicU64;

    const WRITERS: u64 = 4;
    let iterations = (iterations() / 5).max(20);
    let mut landed = 0;
    for seed in 0..iterations {
        let mut rng = Rng(0x6c0c + seed);
        let faulty = Arc::new(FaultyDevice::new(8192 + (32 << 10)));
        drop(LogDevice::create_with(faulty.clone(), POOL, DEV, &sectors(512)).unwrap());
        // The open's header update takes four operations; cut after it.
        let cut_at = 5 + rng.below(150) as i64;
        let dev = CutDevice::new(faulty.clone(), Some(cut_at), crash_mode(&mut rng));
        let log = Arc::new(LogDevice::open(dev, POOL).unwrap().0);
        let open_txg = Arc::new(AtomicU64::new(1));
        let durable = Arc::new(AtomicU64::new(0));
        let requested = Arc::new(AtomicU64::new(0));
        let writers_left = Arc::new(AtomicU64::new(WRITERS));
        let syncer = {
            let (log, open_txg, durable, requested, writers_left) = (
                log.clone(),
                open_txg.clone(),
                durable.clone(),
                requested.clone(),
                writers_left.clone(),
            );
            std::thread::spawn(move || {
                while writers_left.load(Ordering::SeqCst) > 0 {
                    let closed = open_txg.fetch_add(1, Ordering::SeqCst);
                    requested.fetch_max(closed, Ordering::SeqCst);
                    if log.txg_committed(closed).is_err() {
                        return;
                    }
                    durable.fetch_max(closed, Ordering::SeqCst);
                    std::thread::yield_now();
                }
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (log, open_txg, writers_left) =
                    (log.clone(), open_txg.clone(), writers_left.clone());
                let mut rng = Rng(rng.next_u64());
                std::thread::spawn(move || {
                    let mut acked = Vec::new();
                    let mut inflight = None;
                    'commits: for i in 0..40u64 {
                        let batch: Vec<Record> = (0..1 + rng.below(2))
                            .map(|j| {
                                let len = rng.below(1500) as usize;
                                Record {
                                    volume_id: t,
                                    offset_bytes: i * 2 + j,
                                    ..crate::record(&mut rng, open_txg.load(Ordering::SeqCst), len)
                                }
                            })
                            .collect();
                        loop {
                            match log.commit(&views(&batch)) {
                                Ok(_) => break,
                                Err(LogError::Full { .. }) => std::thread::yield_now(),
                                Err(_) => {
                                    inflight = Some(batch);
                                    break 'commits;
                                }
                            }
                        }
                        acked.extend(batch);
                    }
                    writers_left.fetch_sub(1, Ordering::SeqCst);
                    (acked, inflight)
                })
            })
            .collect();
        let results: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        syncer.join().unwrap();
        if !log.device().is_cut() {
            faulty.crash(CrashMode::DropAll);
        }
        drop(log);

        let (_, replay) = crate::reopen(faulty.clone());
        let c = replay.committed_txg;
        let (durable, requested) = (
            durable.load(Ordering::SeqCst),
            requested.load(Ordering::SeqCst),
        );
        assert!(
            (durable..=requested.max(durable)).contains(&c),
            "seed {seed}: committed {c} outside [{durable}, {requested}]"
        );
        let mut by_writer: HashMap<u64, Vec<Record>> = HashMap::new();
        for r in replay.records {
            by_writer.entry(r.volume_id).or_default().push(r);
        }
        for (t, (acked, inflight)) in results.into_iter().enumerate() {
            let got = by_writer.remove(&(t as u64)).unwrap_or_default();
            let expected: Vec<Record> = acked.into_iter().filter(|r| r.txg > c).collect();
            assert!(
                got.len() >= expected.len(),
                "seed {seed} writer {t}: records lost"
            );
            assert_eq!(got[..expected.len()], expected, "seed {seed} writer {t}");
            let extra = &got[expected.len()..];
            if !extra.is_empty() {
                let tail: Vec<Record> = inflight
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|r| r.txg > c)
                    .collect();
                assert_eq!(
                    extra, tail,
                    "seed {seed} writer {t}: in-flight commit in part"
                );
                landed += 1;
            }
        }
        assert!(by_writer.is_empty(), "seed {seed}: records of no writer");
    }
    eprintln!("{iterations} concurrent iterations, {landed} in-flight commits landed");
}
