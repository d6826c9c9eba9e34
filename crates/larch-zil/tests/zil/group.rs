//! Group commit: concurrent callers share blocks and flushes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use larch_io::{BlockDevice, IoError, MemDevice};
use larch_zil::{LogDevice, Record};

use crate::{DEV, POOL, Rng, record, reopen, views};

/// A memory device whose flushes can be held at a gate, so a test can line commits up
/// behind a leader deterministically, without relying on timing.
struct GateDevice {
    inner: MemDevice,
    gate: Mutex<Gate>,
    changed: Condvar,
}

#[derive(Default)]
struct Gate {
    hold: bool,
    waiting: u32,
}

impl GateDevice {
    fn set_hold(&self, hold: bool) {
        self.gate.lock().unwrap().hold = hold;
        self.changed.notify_all();
    }

    fn wait_for_waiters(&self, n: u32) {
        let mut gate = self.gate.lock().unwrap();
        while gate.waiting < n {
            gate = self.changed.wait(gate).unwrap();
        }
    }
}

impl BlockDevice for GateDevice {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        let mut gate = self.gate.lock().unwrap();
        gate.waiting += 1;
        self.changed.notify_all();
        while gate.hold {
            gate = self.changed.wait(gate).unwrap();
        }
        gate.waiting -= 1;
        Ok(())
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

/// Polls `done` until it holds. The deadline only turns a hang into a failure; nothing
/// asserts how fast anything is.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn waiting_commits_share_one_block_and_one_flush() {
    let dev = Arc::new(GateDevice {
        inner: MemDevice::new(4 << 20),
        gate: Mutex::new(Gate::default()),
        changed: Condvar::new(),
    });
    let log = Arc::new(LogDevice::create(dev.clone(), POOL, DEV).unwrap());
    let before = log.stats();
    dev.set_hold(true);
    let records: Vec<Record> = (0..8u64)
        .map(|i| Record {
            txg: 1,
            volume_id: i,
            offset_bytes: i * 4096,
            data: vec![i as u8; 4096],
        })
        .collect();
    let spawn = |i: usize| {
        let log = log.clone();
        let r = records[i].clone();
        std::thread::spawn(move || log.commit(&[r.view()]))
    };
    // Commit 0 becomes the leader and is held in its flush; 1..8 queue behind it.
    let first = spawn(0);
    dev.wait_for_waiters(1);
    let rest: Vec<_> = (1..8).map(spawn).collect();
    wait_until("seven queued commits", || log.stats().queued_commits == 7);
    dev.set_hold(false);

    let first = first.join().unwrap().unwrap();
    assert_eq!((first.group_commits, first.group_records), (1, 1));
    let infos: Vec<_> = rest
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    for info in &infos {
        assert_eq!(info.group_commits, 7, "{info:?}");
        assert_eq!(info.group_records, 7);
        assert_eq!(info.block_sequence, infos[0].block_sequence);
    }
    assert_eq!(infos[0].block_sequence, first.block_sequence + 1);
    let stats = log.stats();
    assert_eq!(stats.zil_commit_count, 8);
    assert_eq!(stats.zil_commit_writer_count, 2, "8 commits, 2 blocks");
    assert_eq!(stats.flushes - before.flushes, 2, "8 commits, 2 flushes");
    assert_eq!(stats.group_commits_max, 7);
    assert_eq!(stats.group_size_hist, [1, 0, 0, 1, 0, 0]);

    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.records[0], records[0]);
    let mut rest: Vec<Record> = replay.records[1..].to_vec();
    rest.sort_by_key(|r| r.volume_id);
    assert_eq!(rest, records[1..]);
}

/// A memory device whose flush takes a while, like a real one.
struct SlowFlush {
    inner: MemDevice,
    flushes: AtomicU64,
}

impl BlockDevice for SlowFlush {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        std::thread::sleep(Duration::from_micros(500));
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

#[test]
fn many_threads_commit_and_every_record_is_replayed_in_each_threads_order() {
    const THREADS: u64 = 8;
    const COMMITS: u64 = 100;
    let dev = Arc::new(SlowFlush {
        inner: MemDevice::new(64 << 20),
        flushes: AtomicU64::new(0),
    });
    let log = Arc::new(LogDevice::create(dev.clone(), POOL, DEV).unwrap());
    let start = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = log.clone();
            let start = start.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(1000 + t);
                let mut mine = Vec::new();
                start.wait();
                for i in 0..COMMITS {
                    let batch: Vec<Record> = (0..1 + rng.below(3))
                        .map(|j| {
                            let len = 1 + rng.below(8192) as usize;
                            Record {
                                volume_id: t,
                                // Offsets number the thread's records in commit order.
                                offset_bytes: i * 4 + j,
                                ..record(&mut rng, 1 + i / 10, len)
                            }
                        })
                        .collect();
                    log.commit(&views(&batch)).expect("commit");
                    mine.extend(batch);
                }
                mine
            })
        })
        .collect();
    let committed: Vec<Vec<Record>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let stats = log.stats();
    let total = THREADS * COMMITS;
    assert_eq!(stats.zil_commit_count, total);
    assert!(
        stats.zil_commit_writer_count < total,
        "{} blocks for {total} commits: no commit was ever grouped",
        stats.zil_commit_writer_count
    );
    assert!(stats.group_commits_max > 1);
    let block_flushes = stats.flushes - 2 * stats.header_writes;
    assert_eq!(block_flushes, stats.zil_commit_writer_count);
    eprintln!(
        "{total} commits from {THREADS} threads: {} blocks, {:.2} flushes per commit, \
         largest group {}, groups {:?}",
        stats.zil_commit_writer_count,
        block_flushes as f64 / total as f64,
        stats.group_commits_max,
        stats.group_size_hist
    );

    drop(log);
    let (_, replay) = reopen(dev);
    let mut by_thread: HashMap<u64, Vec<Record>> = HashMap::new();
    for r in replay.records {
        by_thread.entry(r.volume_id).or_default().push(r);
    }
    for (t, mine) in committed.into_iter().enumerate() {
        assert_eq!(
            by_thread.remove(&(t as u64)).unwrap_or_default(),
            mine,
            "thread {t}: replay differs from its commits"
        );
    }
}

/// Writers, a syncer reclaiming under them, a small ring that wraps many times and fills
/// up: replay still holds exactly the acknowledged records of uncommitted TXGs.
#[test]
fn commits_and_reclaim_run_concurrently_on_a_wrapping_ring() {
    const WRITERS: u64 = 4;
    const COMMITS: u64 = 300;
    let (dev, log) = crate::new_log(64 << 10, 512);
    let log = Arc::new(log);
    let open_txg = Arc::new(AtomicU64::new(1));
    let running = Arc::new(AtomicU64::new(WRITERS));
    let syncer = {
        let (log, open_txg, running) = (log.clone(), open_txg.clone(), running.clone());
        std::thread::spawn(move || {
            while running.load(Ordering::SeqCst) > 0 {
                let closed = open_txg.fetch_add(1, Ordering::SeqCst);
                // The engine would write TXG `closed` to the backing stores here.
                log.txg_committed(closed.saturating_sub(1)).unwrap();
                std::thread::yield_now();
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (log, open_txg, running) = (log.clone(), open_txg.clone(), running.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(2000 + t);
                let mut mine = Vec::new();
                let mut fulls = 0u64;
                for i in 0..COMMITS {
                    let len = rng.below(2000) as usize;
                    let r = Record {
                        volume_id: t,
                        offset_bytes: i,
                        ..record(&mut rng, open_txg.load(Ordering::SeqCst), len)
                    };
                    loop {
                        match log.commit(&[r.view()]) {
                            Ok(_) => break,
                            Err(larch_zil::LogError::Full { .. }) => {
                                fulls += 1;
                                std::thread::yield_now();
                            }
                            Err(err) => panic!("writer {t}: {err}"),
                        }
                    }
                    mine.push(r);
                }
                running.fetch_sub(1, Ordering::SeqCst);
                (mine, fulls)
            })
        })
        .collect();
    let results: Vec<(Vec<Record>, u64)> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    syncer.join().unwrap();
    let stats = log.stats();
    assert!(stats.laps >= 5, "laps {}", stats.laps);
    eprintln!(
        "concurrent reclaim: {} laps, {} Full retries, {} header writes",
        stats.laps,
        results.iter().map(|r| r.1).sum::<u64>(),
        stats.header_writes
    );
    drop(log);
    let (_, replay) = reopen(dev);
    let c = replay.committed_txg;
    let mut by_thread: HashMap<u64, Vec<Record>> = HashMap::new();
    for r in replay.records {
        by_thread.entry(r.volume_id).or_default().push(r);
    }
    for (t, (mine, _)) in results.into_iter().enumerate() {
        let expected: Vec<Record> = mine.into_iter().filter(|r| r.txg > c).collect();
        assert_eq!(
            by_thread.remove(&(t as u64)).unwrap_or_default(),
            expected,
            "writer {t}, committed txg {c}"
        );
    }
}
