//! Fuzz log device open/replay (`larch_zil`): arbitrary bytes as a device image must never
//! panic `describe` or `LogDevice::open`. A device that opens must return only records of
//! TXGs above its committed TXG, keep working, hold a commit that returned `Ok` across a
//! reopen, and open again (only a log whose counters reached the end of their range may
//! refuse, and only if it acknowledged nothing).
//!
//! The first input byte picks how the rest becomes an image:
//! - 0: the bytes are the whole image (any size, so geometry checks are reached);
//! - 1: a valid log (several blocks, one wrapping the ring end) with the bytes applied as
//!   XOR patches, each `offset (u16 LE) | len (u8) | len bytes`;
//! - 2: the same, then every header and known block head gets its checksum repaired, so
//!   the field checks behind the checksums are reached;
//! - 3: the valid log's header slots, with the bytes as the ring.
#![no_main]

use std::sync::{Arc, OnceLock};

use larch_format::checksum;
use larch_format::zil::layout;
use larch_io::MemDevice;
use larch_zil::{CreateOptions, LogDevice, LogError, Record, RecordRef};
use libfuzzer_sys::fuzz_target;

const POOL: u64 = 0xf0_0d;
const RING_START: usize = 8192;
const RING_BYTES: usize = 32 << 10;

/// A valid log image and the device offsets of its live block heads.
fn base() -> &'static (Vec<u8>, Vec<usize>) {
    static BASE: OnceLock<(Vec<u8>, Vec<usize>)> = OnceLock::new();
    BASE.get_or_init(|| {
        let dev = Arc::new(MemDevice::new((RING_START + RING_BYTES) as u64));
        let options = CreateOptions { sector_bytes: 512 };
        let log = LogDevice::create_with(dev.clone(), POOL, 0xd1, &options).expect("create");
        for txg in 1..=30u64 {
            let data = vec![txg as u8; 300 + 97 * txg as usize];
            let records = [
                RecordRef {
                    txg,
                    volume_id: txg % 3,
                    offset_bytes: txg * 4096,
                    data: &data,
                },
                RecordRef {
                    txg,
                    volume_id: 7,
                    offset_bytes: 0,
                    data: &data[..txg as usize],
                },
            ];
            log.commit(&records).expect("commit");
            log.txg_committed(txg.saturating_sub(4)).expect("txg_committed");
        }
        drop(log);
        let description = larch_zil::describe(&*dev).expect("describe");
        let heads = description.blocks.iter().map(|b| b.daddr as usize).collect();
        (dev.snapshot(), heads)
    })
}

fn patch(image: &mut [u8], mut patches: &[u8]) {
    while let [lo, hi, len, rest @ ..] = patches {
        let offset = usize::from(u16::from_le_bytes([*lo, *hi])) % image.len();
        let len = usize::from(*len).min(rest.len());
        for (i, &b) in rest[..len].iter().enumerate() {
            if let Some(byte) = image.get_mut(offset + i) {
                *byte ^= b;
            }
        }
        patches = &rest[len..];
    }
}

fn reseal(image: &mut [u8], heads: &[usize]) {
    for slot in [0usize, 4096] {
        let sum = checksum(&image[slot..slot + layout::header::CHECKSUM.offset]);
        image[slot + 504..slot + 512].copy_from_slice(&sum.to_le_bytes());
    }
    for &head in heads {
        let sum_at = head + layout::block::CHECKSUM.offset;
        let sum = checksum(&image[head..sum_at]);
        image[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
    }
}

fn image(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    let (base, heads) = base();
    Some(match mode % 4 {
        0 => rest.to_vec(),
        1 | 2 => {
            let mut image = base.clone();
            patch(&mut image, rest);
            if mode % 4 == 2 {
                reseal(&mut image, heads);
            }
            image
        }
        _ => {
            let mut image = base.clone();
            image[RING_START..].fill(0);
            let n = rest.len().min(RING_BYTES);
            image[RING_START..RING_START + n].copy_from_slice(&rest[..n]);
            image
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some(image) = image(data) else {
        return;
    };
    let dev = Arc::new(MemDevice::from_bytes(image));
    if let Ok(description) = larch_zil::describe(&*dev) {
        let _ = description.to_string();
    }
    let Ok((log, replay)) = LogDevice::open(dev.clone(), POOL) else {
        return;
    };
    for r in &replay.records {
        assert!(r.txg > replay.committed_txg, "replayed a committed record");
    }
    let Some(txg) = replay
        .max_txg()
        .unwrap_or(0)
        .max(replay.committed_txg)
        .checked_add(1)
    else {
        return;
    };
    let record = Record {
        txg,
        volume_id: 9,
        offset_bytes: 512,
        data: b"fuzz".to_vec(),
    };
    let committed = log.commit(&[record.view()]).is_ok();
    let _ = log.txg_committed(txg - 1);
    drop(log);
    match LogDevice::open(dev, POOL) {
        Ok((_, again)) => {
            if committed {
                assert_eq!(again.records.last(), Some(&record), "a committed record was lost");
            }
        }
        // Each open takes a new epoch, so a log whose counters reached the end of their
        // range stops opening; it must have stopped acknowledging records before that.
        Err(LogError::CounterExhausted { .. }) if !committed => {}
        Err(err) => panic!("a log that opened once opens again (acknowledged: {committed}): {err}"),
    }
});
