//! Round trips, refusals, reclaim, Full, wrap-around and the chain rules, each on a
//! deterministic scenario.

use std::sync::Arc;

use larch_format::zil::{ZilHeaderPhys, layout};
use larch_format::{DevHeaderPhys, FormatError, LogBlockPtrPhys, checksum};
use larch_io::{BlockDevice, FaultyDevice, MemDevice};
use larch_zil::{LogDevice, LogError, Record, RecordRef, ReplayEnd, SlotState, describe};

use crate::{DEV, POOL, Rng, new_log, record, reopen, sectors, views};

#[test]
fn records_come_back_exactly_and_in_order() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
    let mut rng = Rng(1);
    let max = log.max_commit_bytes() as usize - 64;
    // (records, bytes each): empty, odd and padded sizes, many small, the largest.
    let sizes = [
        (1, 0usize),
        (1, 1),
        (3, 7),
        (2, 8),
        (1, 9),
        (5, 511),
        (2, 4096),
        (3, 100_000),
        (1, max),
    ];
    let mut all = Vec::new();
    for (i, &(count, len)) in sizes.iter().enumerate() {
        let batch: Vec<Record> = (0..count)
            .map(|_| record(&mut rng, 1 + i as u64, len))
            .collect();
        let info = log.commit(&views(&batch)).unwrap();
        assert_eq!(info.group_commits, 1);
        assert_eq!(info.group_records as usize, batch.len());
        all.extend(batch);
    }
    let stats = log.stats();
    assert_eq!(stats.zil_commit_count, sizes.len() as u64);
    assert_eq!(stats.zil_itx_count, all.len() as u64);
    assert_eq!(
        stats.zil_itx_copied_bytes,
        all.iter().map(|r| r.data.len() as u64).sum::<u64>()
    );
    drop(log);
    for epoch in [2, 3] {
        let (log, replay) = reopen(dev.clone());
        assert_eq!(log.epoch(), epoch);
        assert_eq!(replay.committed_txg, 0);
        assert_eq!(replay.records, all, "epoch {epoch}");
        assert_eq!(replay.blocks, sizes.len() as u64);
        assert_eq!(replay.end, ReplayEnd::NoBlock);
        assert_eq!(replay.damaged_header_slots, 0);
        assert_eq!(replay.max_txg(), Some(sizes.len() as u64));
    }
}

#[test]
fn commits_after_a_reopen_continue_the_log() {
    let (dev, first) = new_log(64 << 10, 512);
    let mut rng = Rng(2);
    let mut all = Vec::new();
    let mut log = first;
    for run in 0..4u64 {
        if run > 0 {
            drop(log);
            let (reopened, replay) = reopen(dev.clone());
            assert_eq!(replay.records, all, "run {run}");
            log = reopened;
        }
        for i in 0..3 {
            let batch = vec![record(&mut rng, 1 + run * 10 + i, 300)];
            log.commit(&views(&batch)).unwrap();
            all.extend(batch);
        }
    }
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.records, all);
}

#[test]
fn invalid_commits_are_refused_without_harm() {
    let (dev, log) = new_log(32 << 10, 512);
    let zero_txg = [RecordRef {
        txg: 0,
        volume_id: 1,
        offset_bytes: 0,
        data: b"x",
    }];
    assert!(matches!(
        log.commit(&zero_txg),
        Err(LogError::InvalidRecord(_))
    ));
    let big = vec![0u8; log.max_commit_bytes() as usize];
    let too_large = [RecordRef {
        txg: 1,
        volume_id: 1,
        offset_bytes: 0,
        data: &big,
    }];
    match log.commit(&too_large) {
        Err(LogError::TooLarge { bytes, max_bytes }) => {
            assert!(bytes > max_bytes, "{bytes} <= {max_bytes}");
            assert_eq!(max_bytes, log.max_commit_bytes());
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // The limits are exact: the largest record fits alone, one byte more does not, and
    // records adding up to the commit limit fit together.
    let largest = vec![7u8; log.max_record_data_bytes() as usize];
    log.commit(&[RecordRef {
        txg: 1,
        volume_id: 1,
        offset_bytes: 0,
        data: &largest,
    }])
    .unwrap();
    log.txg_committed(1).unwrap();
    let pieces = [1000usize, 13, 0];
    let used: u64 = pieces
        .iter()
        .map(|&n| larch_zil::encoded_record_bytes(n))
        .sum();
    assert_eq!(used, (64 + 1000) + (64 + 16) + 64);
    let filler = (log.max_commit_bytes() - used - 64) as usize;
    let exact: Vec<RecordRef> = pieces
        .iter()
        .chain([&filler])
        .map(|&n| RecordRef {
            txg: 2,
            volume_id: 2,
            offset_bytes: 0,
            data: &largest[..n],
        })
        .collect();
    log.commit(&exact).unwrap();
    log.txg_committed(2).unwrap();
    let mut over = exact.clone();
    over[3].data = &largest[..filler + 1];
    assert!(matches!(log.commit(&over), Err(LogError::TooLarge { .. })));
    // An empty commit is a barrier: nothing is pending, so it returns at once.
    let info = log.commit(&[]).unwrap();
    assert_eq!(info.group_commits, 0);
    let ok = vec![record(&mut Rng(3), 3, 10)];
    log.commit(&views(&ok)).unwrap();
    assert!(!log.is_poisoned());
    drop(log);
    assert_eq!(reopen(dev).1.records, ok);
}

#[test]
fn txg_committed_reclaims_and_replay_skips_committed_records() {
    let (dev, log) = new_log(64 << 10, 512);
    let mut rng = Rng(4);
    let mut all = Vec::new();
    for txg in 1..=6 {
        let batch = vec![record(&mut rng, txg, 1000), record(&mut rng, txg, 10)];
        log.commit(&views(&batch)).unwrap();
        all.extend(batch);
    }
    let before = log.stats();
    assert_eq!(before.live_blocks, 6);
    log.txg_committed(3).unwrap();
    let after = log.stats();
    assert_eq!(after.live_blocks, 3, "blocks of TXGs 1..=3 reclaimed");
    assert!(after.used_bytes < before.used_bytes);
    assert_eq!(after.free_bytes, after.ring_bytes - after.used_bytes);
    assert_eq!(after.committed_txg, 3);
    // Lower or equal TXGs change nothing and write nothing.
    let headers = after.header_writes;
    log.txg_committed(2).unwrap();
    log.txg_committed(3).unwrap();
    assert_eq!(log.stats().header_writes, headers);
    drop(log);

    let (log, replay) = reopen(dev.clone());
    assert_eq!(replay.committed_txg, 3);
    assert_eq!(replay.blocks, 3, "the walk starts at the reclaimed tail");
    let newer: Vec<Record> = all.iter().filter(|r| r.txg > 3).cloned().collect();
    assert_eq!(replay.records, newer);
    // The engine syncs the replayed TXGs; everything is then reclaimed.
    log.txg_committed(replay.max_txg().unwrap()).unwrap();
    assert_eq!(log.stats().used_bytes, 0);
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.committed_txg, 6);
    assert!(replay.records.is_empty());
    assert_eq!(replay.blocks, 0);
}

#[test]
fn a_block_with_committed_and_newer_records_is_kept_and_filtered() {
    let (dev, log) = new_log(64 << 10, 512);
    let mut rng = Rng(5);
    let batch = vec![record(&mut rng, 4, 100), record(&mut rng, 5, 100)];
    log.commit(&views(&batch)).unwrap();
    log.txg_committed(4).unwrap();
    assert_eq!(
        log.stats().live_blocks,
        1,
        "a block is reclaimed only whole"
    );
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.records, batch[1..]);
    assert_eq!(replay.records_skipped, 1);
}

#[test]
fn a_later_block_raises_the_committed_txg_of_an_older_header() {
    // The header says 0, but a block written after txg_committed(5) says 5: replay
    // trusts the block (the engine said the backing stores hold TXG 5).
    let (dev, log) = new_log(64 << 10, 512);
    let mut rng = Rng(6);
    let old = vec![record(&mut rng, 5, 100)];
    log.commit(&views(&old)).unwrap();
    let header_before = read_slot(&dev, 0);
    log.txg_committed(5).unwrap();
    let newer = vec![record(&mut rng, 6, 100)];
    log.commit(&views(&newer)).unwrap();
    drop(log);
    // Put the pre-update header back in both slots, as if the update had been lost.
    for slot in 0..2 {
        dev.write_at(&header_before, slot * 4096).unwrap();
    }
    dev.flush().unwrap();
    let (_, replay) = reopen(dev);
    assert_eq!(replay.committed_txg, 5);
    assert_eq!(replay.records, newer);
    assert_eq!(replay.records_skipped, 1);
}

fn read_slot<D: BlockDevice>(dev: &D, slot: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 512];
    dev.read_at(&mut buf, slot * 4096).unwrap();
    buf
}

#[test]
fn full_is_reported_before_anything_is_written_and_nothing_is_overwritten() {
    let (dev, log) = new_log(16 << 10, 512);
    let mut rng = Rng(7);
    let mut acked = Vec::new();
    let full = loop {
        let batch = vec![record(&mut rng, 1 + acked.len() as u64, 1000)];
        let writes = dev.stats().writes;
        match log.commit(&views(&batch)) {
            Ok(_) => acked.extend(batch),
            Err(err) => {
                assert_eq!(dev.stats().writes, writes, "a refused commit wrote");
                break err;
            }
        }
    };
    let LogError::Full {
        needed_bytes,
        free_bytes,
    } = full
    else {
        panic!("expected Full, got {full:?}");
    };
    assert_eq!(needed_bytes, 1536, "128 + 64 + 1000 rounded to 512");
    assert!(free_bytes < needed_bytes);
    assert_eq!(acked.len(), 10, "16 KiB holds ten 1536-byte blocks");
    let stats = log.stats();
    assert_eq!(stats.full_errors, 1);
    assert_eq!(stats.free_bytes, free_bytes);
    assert!(!log.is_poisoned(), "Full does not poison");
    drop(log);

    let (log, replay) = reopen(dev.clone());
    assert_eq!(
        replay.records, acked,
        "every acknowledged record survives a full ring"
    );
    assert!(matches!(
        log.commit(&views(&[record(&mut rng, 20, 1000)])),
        Err(LogError::Full { .. })
    ));
    // Committing the TXGs frees the ring.
    log.txg_committed(5).unwrap();
    let next = vec![record(&mut rng, 20, 1000)];
    log.commit(&views(&next)).unwrap();
    drop(log);
    let (_, replay) = reopen(dev);
    let mut expected: Vec<Record> = acked.into_iter().filter(|r| r.txg > 5).collect();
    expected.extend(next);
    assert_eq!(replay.records, expected);
}

/// Blocks of exactly 2048 bytes in a 16 KiB ring: after a few laps the position after
/// the newest block holds a valid block from the previous lap.
#[test]
fn stale_blocks_from_an_earlier_lap_are_never_replayed() {
    let (dev, log) = new_log(16 << 10, 512);
    let mut rng = Rng(8);
    let mut last = Vec::new();
    for txg in 1..=60u64 {
        last = vec![record(&mut rng, txg, 2048 - 128 - 64)];
        log.commit(&views(&last)).unwrap();
        log.txg_committed(txg - 1).unwrap();
    }
    let stats = log.stats();
    assert!(stats.laps >= 7, "laps {}", stats.laps);
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.committed_txg, 59);
    assert_eq!(replay.records, last);
    assert_eq!(
        replay.end,
        ReplayEnd::Stale {
            sequence: 60 - 7,
            reason: "position"
        },
        "the next position holds block 53 from the previous lap"
    );
}

#[test]
fn blocks_wrap_around_the_ring_end_and_replay_whole() {
    // 1536-byte blocks do not divide the 16 KiB ring, so some straddle its end.
    let (dev, log) = new_log(16 << 10, 512);
    let mut rng = Rng(9);
    let mut live = Vec::new();
    let ring = 16 << 10;
    for txg in 1.. {
        let batch = vec![record(&mut rng, txg, 1000)];
        log.commit(&views(&batch)).unwrap();
        live.extend(batch);
        log.txg_committed(txg.saturating_sub(3)).unwrap();
        live.retain(|r| r.txg > txg.saturating_sub(3));
        let d = describe(&*dev).unwrap();
        let straddles = d.blocks.iter().any(|b| b.pos % ring + b.asize > ring);
        if straddles && log.stats().laps >= 2 {
            break;
        }
        assert!(txg < 1000, "no block ever straddled the ring end");
    }
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.records, live);
    assert_eq!(replay.blocks, 3);
}

#[test]
fn a_damaged_block_ends_the_replay_and_later_blocks_are_ignored() {
    for damage_head in [false, true] {
        let (dev, log) = new_log(64 << 10, 512);
        let mut rng = Rng(10);
        let batches: Vec<Vec<Record>> = (1..=3).map(|t| vec![record(&mut rng, t, 700)]).collect();
        for b in &batches {
            log.commit(&views(b)).unwrap();
        }
        drop(log);
        let d = describe(&*dev).unwrap();
        assert_eq!(d.blocks.len(), 3);
        let offset = if damage_head { 50 } else { 300 };
        dev.corrupt_byte(d.blocks[1].daddr + offset, 0x40);
        let (_, replay) = reopen(dev);
        assert_eq!(replay.records, batches[0], "damage_head {damage_head}");
        assert!(
            matches!(
                replay.end,
                ReplayEnd::Damaged(FormatError::BadChecksum { .. })
            ),
            "{:?}",
            replay.end
        );
    }
}

/// A crashed run's leftovers must not rejoin the log: block 3 of run 1 is valid and sits
/// right after the rewritten block 2 of run 2, with the sequence number run 2 expects.
#[test]
fn leftovers_of_an_earlier_run_never_rejoin_the_log() {
    let (dev, log) = new_log(64 << 10, 512);
    let mut rng = Rng(11);
    let batches: Vec<Vec<Record>> = (1..=3).map(|t| vec![record(&mut rng, t, 700)]).collect();
    for b in &batches {
        log.commit(&views(b)).unwrap();
    }
    drop(log);
    let d = describe(&*dev).unwrap();
    dev.corrupt_byte(d.blocks[1].daddr + 300, 0x01);
    let (log, replay) = reopen(dev.clone());
    assert_eq!(replay.records, batches[0]);
    // Run 2 writes the very same records again: same size, same place, same sequence.
    log.commit(&views(&batches[1])).unwrap();
    drop(log);
    let d2 = describe(&*dev).unwrap();
    assert_eq!(d2.blocks.len(), 2);
    assert_eq!(d2.blocks[1].pos, d.blocks[1].pos);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.records, [&batches[0][..], &batches[1][..]].concat());
    assert_eq!(
        replay.end,
        ReplayEnd::Stale {
            sequence: 3,
            reason: "prev_checksum"
        }
    );
}

#[test]
fn a_new_format_never_replays_an_older_format() {
    let (dev, log) = new_log(64 << 10, 512);
    log.commit(&views(&[record(&mut Rng(12), 1, 100)])).unwrap();
    drop(log);
    // Same pool, same device guid: only the chain seed tells the formats apart.
    let log = LogDevice::create_with(dev.clone(), POOL, DEV, &sectors(512)).unwrap();
    drop(log);
    let (_, replay) = reopen(dev);
    assert!(replay.records.is_empty());
    assert!(
        matches!(
            replay.end,
            ReplayEnd::Stale {
                sequence: 1,
                reason: "prev_checksum"
            }
        ),
        "{:?}",
        replay.end
    );
}

fn open_err<D: BlockDevice>(dev: D) -> LogError {
    match LogDevice::open(dev, POOL) {
        Ok(_) => panic!("open succeeded"),
        Err(err) => err,
    }
}

#[test]
fn open_refuses_devices_that_are_not_this_pools_log() {
    let len = 1 << 20;
    assert!(matches!(
        open_err(MemDevice::new(len)),
        LogError::Unformatted
    ));

    let cache = DevHeaderPhys {
        version: larch_format::VERSION,
        flags: 0,
        pool_guid: POOL,
        device_guid: 5,
        ring_start: 8192,
        ring_end: len,
        sector_bytes: 4096,
        entries_per_block: 1022,
        write_hand_pos: 0,
        evict_hand_pos: 0,
        log_block_count: 0,
        log_block_bytes: 0,
        sequence: 1,
        chain_count: 2,
        newest: [LogBlockPtrPhys::NULL; 2],
    };
    let dev = MemDevice::new(len);
    dev.write_at(&cache.encode(), 4096).unwrap();
    let err = open_err(dev);
    assert!(matches!(err, LogError::CacheDevice), "{err}");
    assert!(err.to_string().contains("cache (L2ARC) device"));

    let mut rng = Rng(13);
    let dev = MemDevice::from_bytes(rng.bytes(len as usize));
    assert!(matches!(open_err(dev), LogError::NotALogDevice { .. }));

    let dev = Arc::new(MemDevice::new(len));
    drop(LogDevice::create(dev.clone(), POOL + 1, DEV).unwrap());
    match open_err(dev.clone()) {
        LogError::ForeignPool { expected, found } => {
            assert_eq!((expected, found), (POOL, POOL + 1));
        }
        other => panic!("expected ForeignPool, got {other}"),
    }
    // Another device of the same pool: refused before anything is written to it.
    let before = dev.snapshot();
    match LogDevice::open_device(dev.clone(), POOL + 1, DEV + 1) {
        Err(LogError::ForeignDevice { expected, found }) => {
            assert_eq!((expected, found), (DEV + 1, DEV));
        }
        Err(other) => panic!("expected ForeignDevice, got {other}"),
        Ok(_) => panic!("another device's log was opened"),
    }
    assert!(dev.snapshot() == before, "the refused device was written");
    // A larger device than the header describes is refused, not misread.
    let mut image = dev.snapshot();
    image.extend_from_slice(&[0; 8192]);
    let resized = MemDevice::from_bytes(image);
    let err = LogDevice::open(resized, POOL + 1).unwrap_err();
    assert!(matches!(err, LogError::Geometry(_)), "{err}");

    assert!(matches!(
        LogDevice::create_with(MemDevice::new(8192 + 8192), POOL, DEV, &sectors(512)),
        Err(LogError::DeviceTooSmall { .. })
    ));
}

/// Rewrites header slot `slot` with `edit` applied to its bytes, resealing the checksum.
fn patch_slot(dev: &MemDevice, slot: u64, edit: impl Fn(&mut [u8])) {
    let mut raw = read_slot(dev, slot);
    edit(&mut raw);
    let sum = checksum(&raw[..layout::header::CHECKSUM.offset]);
    raw[504..512].copy_from_slice(&sum.to_le_bytes());
    dev.write_at(&raw, slot * 4096).unwrap();
}

#[test]
fn header_slots_one_damaged_slot_is_survived_two_are_refused() {
    let mut rng = Rng(14);
    let batch = vec![record(&mut rng, 1, 3000)];
    let build = || {
        let dev = Arc::new(MemDevice::new(1 << 20));
        let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
        log.commit(&views(&batch)).unwrap();
        dev
    };
    for slot in 0..2 {
        let dev = build();
        dev.write_at(&[0xee; 100], slot * 4096 + 200).unwrap();
        let (_, replay) = reopen(dev);
        assert_eq!(replay.records, batch, "slot {slot} damaged");
        assert_eq!(replay.damaged_header_slots, 1);
        // Garbage in a slot is damage too, not a foreign device, when the other is ours.
        let dev = build();
        dev.write_at(&[0x5a; 512], slot * 4096).unwrap();
        assert_eq!(reopen(dev).1.records, batch);
    }
    let dev = build();
    dev.write_at(&[1], 300).unwrap();
    dev.write_at(&[1], 4096 + 300).unwrap();
    let err = open_err(dev.clone());
    assert!(matches!(err, LogError::DamagedHeader { .. }), "{err}");
    let d = describe(&*dev).unwrap();
    assert!(matches!(d.slots[0], SlotState::Damaged(_)));
    assert!(d.refusal.is_some());
    assert!(d.to_string().contains("DAMAGED"));

    // A newer format version is refused by name, even beside a valid slot.
    let dev = build();
    patch_slot(&dev, 1, |raw| raw[8] = 2);
    assert!(matches!(
        open_err(dev),
        LogError::UnsupportedVersion { found: 2 }
    ));

    // A header whose counters leave a writer no room is refused, not trusted.
    let dev = build();
    for slot in 0..2 {
        patch_slot(&dev, slot, |raw| {
            raw[64..72].copy_from_slice(&(1u64 << 62).to_le_bytes())
        });
    }
    assert!(matches!(
        open_err(dev),
        LogError::CounterExhausted { field: "epoch", .. }
    ));

    // Two valid slots naming different devices are refused.
    let dev = build();
    patch_slot(&dev, 1, |raw| raw[24] ^= 1);
    assert!(matches!(open_err(dev), LogError::InconsistentHeader(_)));

    // The newer slot wins: an older sequence in slot 1 is ignored.
    let dev = build();
    let old = ZilHeaderPhys::decode(&read_slot(&*dev, 1)).unwrap();
    patch_slot(&dev, 1, |raw| {
        raw[56..64].copy_from_slice(&(old.sequence - 1).to_le_bytes());
        raw[80..88].copy_from_slice(&(old.tail_pos + 512).to_le_bytes());
    });
    assert_eq!(reopen(dev).1.records, batch);
}

#[test]
fn describe_shows_the_chain_without_changing_the_device() {
    let (dev, log) = new_log(64 << 10, 512);
    let mut rng = Rng(15);
    for txg in 1..=4 {
        log.commit(&views(&[
            record(&mut rng, txg, 200),
            record(&mut rng, txg, 20),
        ]))
        .unwrap();
    }
    log.txg_committed(2).unwrap();
    drop(log);
    let before = dev.durable_snapshot();
    let d = describe(&*dev).unwrap();
    assert_eq!(dev.durable_snapshot(), before, "describe wrote");
    assert!(d.refusal.is_none());
    assert_eq!(d.blocks.len(), 2);
    assert_eq!(d.committed_txg, 2);
    assert_eq!(d.records_to_replay, 4);
    assert_eq!(d.blocks[0].txg_range, (3, 3));
    assert_eq!(d.blocks[1].records, 2);
    assert_eq!(d.blocks[1].data_bytes, 220);
    let text = d.to_string();
    for needle in [
        "committed_txg      2",
        "2 blocks",
        "4 records to replay",
        "end: no block",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from\n{text}");
    }
    let garbage = FaultyDevice::new(1 << 16);
    let d = describe(&garbage).unwrap();
    assert!(d.refusal.unwrap().contains("not formatted"));
}

#[test]
fn records_the_log_could_not_replay_are_refused_before_they_are_acknowledged() {
    let (dev, log) = new_log(64 << 10, 512);
    let top = 1u64 << 62;
    let mut rng = Rng(21);
    for (txg, offset, why) in [
        (0, 0, "txg 0"),
        (top + 1, 0, "txg above"),
        (u64::MAX, 0, "txg above"),
        (1, top + 1, "offset above"),
    ] {
        let bad = Record {
            offset_bytes: offset,
            ..record(&mut rng, txg, 10)
        };
        match log.commit(&[bad.view()]) {
            Err(LogError::InvalidRecord(msg)) => assert!(msg.starts_with(why), "{msg}"),
            other => panic!("txg {txg} offset {offset}: {other:?}"),
        }
        let queued = larch_zil::QueuedRecord {
            txg,
            volume_id: 1,
            offset_bytes: offset,
            data: bad.data.clone().into(),
        };
        assert!(matches!(
            log.append(queued),
            Err(LogError::InvalidRecord(_))
        ));
    }
    // The ends of the ranges are accepted and come back.
    let edge = Record {
        offset_bytes: top,
        ..record(&mut rng, top, 10)
    };
    log.commit(&[edge.view()]).unwrap();
    drop(log);
    let (log, replay) = reopen(dev.clone());
    assert_eq!(replay.records, [edge]);
    // A committed TXG beyond every record's range commits them all, and the header it
    // writes opens again.
    log.txg_committed(u64::MAX).unwrap();
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.committed_txg, top);
    assert!(replay.records.is_empty());
}

#[test]
fn a_log_at_the_end_of_its_counters_stops_acknowledging_before_it_stops_opening() {
    let mut rng = Rng(22);
    let batch = vec![record(&mut rng, 1, 500)];
    // A log whose header epoch (bytes 64..72) was left at `epoch` by its last open.
    let build = |epoch: u64| {
        let dev = Arc::new(MemDevice::new(1 << 20));
        let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
        log.commit(&views(&batch)).unwrap();
        drop(log);
        for slot in 0..2 {
            patch_slot(&dev, slot, |raw| {
                raw[64..72].copy_from_slice(&epoch.to_le_bytes())
            });
        }
        dev
    };
    let usable = 1u64 << 61;
    let headroom = 1u64 << 32;
    // Room left: the new open acknowledges, and what it acknowledged is replayed.
    let dev = build(usable - headroom - 1);
    let (log, replay) = reopen(dev.clone());
    assert_eq!(replay.records, batch);
    let more = vec![record(&mut rng, 2, 700)];
    log.commit(&views(&more)).unwrap();
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(replay.records, [batch.clone(), more].concat());
    // Within the headroom: it still opens and replays, refuses new records (commit and
    // append alike), and keeps opening.
    let dev = build(usable - headroom);
    let (log, replay) = reopen(dev.clone());
    assert_eq!(replay.records, batch);
    let refused = log.commit(&views(&[record(&mut rng, 2, 10)])).unwrap_err();
    assert!(
        matches!(refused, LogError::CounterExhausted { field: "epoch", .. }),
        "{refused}"
    );
    let queued = larch_zil::QueuedRecord {
        txg: 2,
        volume_id: 1,
        offset_bytes: 0,
        data: vec![1u8; 10].into(),
    };
    assert!(matches!(
        log.append(queued),
        Err(LogError::CounterExhausted { .. })
    ));
    drop(log);
    assert_eq!(reopen(dev).1.records, batch);
    // At the end: the open is refused before it writes a header it could not open again.
    let dev = build(usable);
    let before = dev.snapshot();
    assert!(matches!(
        open_err(dev.clone()),
        LogError::CounterExhausted { field: "epoch", .. }
    ));
    assert_eq!(dev.snapshot(), before, "a refused open wrote");
}
