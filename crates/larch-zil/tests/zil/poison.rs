//! A failed write or flush poisons the log; nothing acknowledged is lost.

use std::sync::Arc;

use larch_io::CrashMode;
use larch_zil::{LogError, Record};

use crate::{Rng, new_log, record, reopen, views};

fn commit_some(
    log: &larch_zil::LogDevice<Arc<larch_io::FaultyDevice>>,
    rng: &mut Rng,
) -> Vec<Record> {
    let mut acked = Vec::new();
    for txg in 1..=5 {
        let batch = vec![record(rng, txg, 500), record(rng, txg, 50)];
        log.commit(&views(&batch)).unwrap();
        acked.extend(batch);
    }
    acked
}

#[test]
fn a_failed_flush_poisons_and_loses_nothing_acknowledged() {
    for seed in 0..40u64 {
        let (dev, log) = new_log(64 << 10, 512);
        let mut rng = Rng(seed);
        let acked = commit_some(&log, &mut rng);
        dev.fail_flushes(true);
        let failed = vec![record(&mut rng, 6, 700)];
        let err = log.commit(&views(&failed)).unwrap_err();
        assert!(matches!(err, LogError::Io(_)), "{err}");
        assert!(log.is_poisoned());
        assert!(log.stats().poisoned);
        let reason = log.poison_reason().unwrap();
        assert!(reason.contains("flush"), "{reason}");
        // Every later call fails, even once the device works again: no silent retry.
        dev.clear_faults();
        let later = vec![record(&mut rng, 7, 10)];
        assert!(matches!(
            log.commit(&views(&later)),
            Err(LogError::Poisoned { .. })
        ));
        assert!(matches!(log.commit(&[]), Err(LogError::Poisoned { .. })));
        assert!(matches!(
            log.txg_committed(5),
            Err(LogError::Poisoned { .. })
        ));
        let writes = dev.stats().writes;
        drop(log);
        assert_eq!(dev.stats().writes, writes, "a poisoned log wrote");

        let mode = if seed == 0 {
            CrashMode::DropAll
        } else {
            CrashMode::Random(seed)
        };
        dev.crash(mode);
        let (_, replay) = reopen(dev);
        let n = acked.len();
        assert_eq!(
            replay.records[..n.min(replay.records.len())],
            acked[..],
            "seed {seed}"
        );
        assert!(
            replay.records[n..].is_empty() || replay.records[n..] == failed[..],
            "seed {seed}: the failed commit came back in part"
        );
    }
}

#[test]
fn a_failed_write_poisons_every_waiting_and_later_commit() {
    let (dev, log) = new_log(64 << 10, 512);
    let mut rng = Rng(77);
    let acked = commit_some(&log, &mut rng);
    dev.fail_writes(0..u64::MAX);
    let log = Arc::new(log);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let log = log.clone();
            let r = record(&mut Rng(t), 9, 100);
            std::thread::spawn(move || log.commit(&[r.view()]))
        })
        .collect();
    for t in threads {
        let err = t.join().unwrap().unwrap_err();
        assert!(
            matches!(err, LogError::Io(_) | LogError::Poisoned { .. }),
            "{err}"
        );
    }
    assert!(log.poison_reason().unwrap().contains("write"));
    drop(log);
    dev.clear_faults();
    dev.crash(CrashMode::Random(5));
    assert_eq!(reopen(dev).1.records, acked);
}

#[test]
fn a_failed_header_update_poisons() {
    let (dev, log) = new_log(64 << 10, 512);
    let mut rng = Rng(78);
    let acked = commit_some(&log, &mut rng);
    dev.fail_writes(0..4096);
    assert!(matches!(log.txg_committed(2), Err(LogError::Io(_))));
    assert!(log.is_poisoned());
    assert!(matches!(
        log.commit(&views(&[record(&mut rng, 9, 1)])),
        Err(LogError::Poisoned { .. })
    ));
    drop(log);
    dev.clear_faults();
    let (_, replay) = reopen(dev);
    // The committed TXG may or may not have reached the device; records above it remain.
    let expected: Vec<Record> = acked
        .into_iter()
        .filter(|r| r.txg > replay.committed_txg)
        .collect();
    assert!(replay.committed_txg <= 2);
    assert_eq!(replay.records, expected);
}
