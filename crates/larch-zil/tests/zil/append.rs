//! Appended records: logged in append order by whoever commits through them, a place's
//! queued record replaced rather than repeated, dropped once their TXG is committed, and
//! unlogged (not lost, not written) when the ring has no room.

use std::sync::Arc;

use bytes::Bytes;
use larch_io::MemDevice;
use larch_zil::{LogDevice, LogError, QueuedRecord, Record};

use crate::{DEV, POOL, Rng, reopen};

fn queued(txg: u64, volume_id: u64, offset_bytes: u64, data: &[u8]) -> QueuedRecord {
    QueuedRecord {
        txg,
        volume_id,
        offset_bytes,
        data: Bytes::copy_from_slice(data),
    }
}

fn replayed(r: &QueuedRecord) -> Record {
    Record {
        txg: r.txg,
        volume_id: r.volume_id,
        offset_bytes: r.offset_bytes,
        data: r.data.to_vec(),
    }
}

#[test]
fn appended_records_replay_in_append_order_and_one_commit_writes_them_all() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
    let mut rng = Rng(7);
    let records: Vec<QueuedRecord> = (0..20)
        .map(|i| queued(1 + i / 10, 1 + i % 3, i * 4096 + 512, &rng.bytes(4096)))
        .collect();
    let mut tickets = Vec::new();
    for r in &records {
        tickets.push(log.append(r.clone()).unwrap());
    }
    assert_eq!(log.queued(), 20);
    // Committing through the fifth record writes every record queued: one block.
    let led = log.commit_through(tickets[4]).unwrap();
    assert_eq!((led.blocks, led.records), (1, 20));
    assert_eq!(log.queued(), 0);
    // Everything up to the last is durable now: no second block.
    assert_eq!(log.commit_through(tickets[19]).unwrap().blocks, 0);
    assert_eq!(log.commit_all().unwrap().blocks, 0);
    drop(log);
    let (_, replay) = reopen(dev);
    assert_eq!(
        replay.records,
        records.iter().map(replayed).collect::<Vec<_>>()
    );
}

#[test]
fn a_place_queued_again_in_its_txg_keeps_one_record_with_the_newest_bytes() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
    let first = log.append(queued(3, 1, 8192, &[1; 4096])).unwrap();
    let other = log.append(queued(3, 1, 0, &[2; 4096])).unwrap();
    let again = log.append(queued(3, 1, 8192, &[3; 4096])).unwrap();
    assert_eq!(again, first, "the queued record took the new bytes");
    // Another TXG, or another length, is another record.
    let next_txg = log.append(queued(4, 1, 8192, &[4; 4096])).unwrap();
    let shorter = log.append(queued(4, 1, 8192, &[5; 512])).unwrap();
    assert!(next_txg > other && shorter > next_txg);
    assert_eq!(log.queued(), 4);
    log.commit_all().unwrap();
    drop(log);
    let (_, replay) = reopen(dev);
    let got: Vec<(u64, u64, u8, usize)> = replay
        .records
        .iter()
        .map(|r| (r.txg, r.offset_bytes, r.data[0], r.data.len()))
        .collect();
    assert_eq!(
        got,
        [
            (3, 8192, 3, 4096),
            (3, 0, 2, 4096),
            (4, 8192, 4, 4096),
            (4, 8192, 5, 512)
        ]
    );
}

#[test]
fn records_of_a_committed_txg_leave_the_queue_unwritten() {
    let dev = Arc::new(MemDevice::new(4 << 20));
    let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
    let old = log.append(queued(1, 1, 0, &[1; 4096])).unwrap();
    log.append(queued(2, 1, 4096, &[2; 4096])).unwrap();
    log.forget_through(1);
    assert_eq!(log.queued(), 1);
    // Its commit returns at once: the backing stores hold it.
    assert_eq!(log.commit_through(old).unwrap().blocks, 0);
    log.txg_committed(2).unwrap();
    assert_eq!(log.queued(), 0);
    assert_eq!(log.commit_all().unwrap().blocks, 0);
    assert_eq!(log.stats().zil_commit_writer_count, 0);
}

#[test]
fn records_without_room_are_unlogged_until_their_txg_is_committed() {
    // The smallest ring: two records of 48 KiB fill it.
    let dev = Arc::new(MemDevice::new(8192 + (128 << 10)));
    let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
    let big = vec![9u8; 48 << 10];
    let a = log.append(queued(1, 1, 0, &big)).unwrap();
    log.commit_through(a).unwrap();
    let b = log.append(queued(1, 1, 1 << 20, &big)).unwrap();
    log.commit_through(b).unwrap();
    // No room for a third until TXG 1 is committed: nothing written, the log usable.
    let c = log.append(queued(2, 1, 2 << 20, &big)).unwrap();
    let blocks = log.stats().zil_commit_writer_count;
    match log.commit_through(c) {
        Err(LogError::Unlogged { txg: 2 }) => {}
        other => panic!("expected Unlogged through TXG 2, got {other:?}"),
    }
    assert_eq!(log.stats().zil_commit_writer_count, blocks);
    assert!(!log.is_poisoned());
    // A later record's commit covers the unlogged one: not durable either.
    let d = log.append(queued(2, 1, 3 << 20, &[1; 512])).unwrap();
    assert!(matches!(
        log.commit_through(d),
        Err(LogError::Unlogged { txg: 2 })
    ));
    // TXG 1 committed frees the ring; TXG 2 committed makes the unlogged ones durable.
    log.txg_committed(1).unwrap();
    let e = log.append(queued(3, 1, 0, &big)).unwrap();
    assert!(matches!(
        log.commit_through(e),
        Err(LogError::Unlogged { txg: 2 })
    ));
    log.txg_committed(2).unwrap();
    let f = log.append(queued(3, 1, 4096, &[2; 512])).unwrap();
    log.commit_through(f).unwrap();
    drop(log);
    let (_, replay) = reopen(dev);
    let txgs: Vec<(u64, u64)> = replay
        .records
        .iter()
        .map(|r| (r.txg, r.offset_bytes))
        .collect();
    assert_eq!(txgs, [(3, 0), (3, 4096)]);
}

#[test]
fn a_record_longer_than_the_log_takes_is_queued_in_pieces() {
    let dev = Arc::new(MemDevice::new(8192 + (128 << 10)));
    let log = LogDevice::create(dev.clone(), POOL, DEV).unwrap();
    let max = log.max_record_data_bytes() as usize;
    let mut rng = Rng(3);
    let data = rng.bytes(max + 1000);
    let t = log.append(queued(1, 2, 4096, &data)).unwrap();
    assert_eq!(log.queued(), 2);
    // Two records of more than half the ring each cannot share it: one is unlogged.
    let committed = log.commit_through(t);
    drop(log);
    let (_, replay) = reopen(dev);
    let mut joined = Vec::new();
    for r in &replay.records {
        assert_eq!(r.offset_bytes, 4096 + joined.len() as u64);
        joined.extend_from_slice(&r.data);
    }
    match committed {
        Ok(_) => assert_eq!(joined, data),
        Err(LogError::Unlogged { txg: 1 }) => assert!(joined.len() < data.len()),
        Err(other) => panic!("{other}"),
    }
    assert_eq!(&joined[..], &data[..joined.len()]);
}

#[test]
fn concurrent_appenders_each_return_once_their_own_record_is_durable() {
    let dev = Arc::new(MemDevice::new(16 << 20));
    let log = Arc::new(LogDevice::create(dev.clone(), POOL, DEV).unwrap());
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (log, order) = (Arc::clone(&log), Arc::clone(&order));
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let record = queued(1, t + 1, i * 4096, &[t as u8; 4096]);
                    // Appended under the lock that orders the writes, as the engine does.
                    let ticket = {
                        let mut order = order.lock().unwrap();
                        order.push((t + 1, i * 4096));
                        log.append(record).unwrap()
                    };
                    log.commit_through(ticket).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = log.stats();
    assert_eq!(stats.zil_itx_count, 400);
    assert!(stats.zil_commit_writer_count <= 400);
    drop(log);
    let (_, replay) = reopen(dev);
    let got: Vec<(u64, u64)> = replay
        .records
        .iter()
        .map(|r| (r.volume_id, r.offset_bytes))
        .collect();
    assert_eq!(got, *order.lock().unwrap());
}
