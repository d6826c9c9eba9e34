//! Integration tests of the intent log: format refusals, replay rules, reclaim and Full,
//! power cuts (seeded, thousands of iterations), group commit, poisoning, and the
//! documentation's layout tables.

mod append;
mod basic;
mod crash;
mod doc;
mod group;
mod poison;

use std::sync::Arc;

use larch_io::{BlockDevice, FaultyDevice, IoError};
use larch_zil::{CreateOptions, LogDevice, Record, RecordRef};

/// The pool every test log belongs to.
pub const POOL: u64 = 0x7001_0000_0000_0001;
/// The log device guid of every test log.
pub const DEV: u64 = 0x7001_0000_0000_00d1;

/// A small deterministic generator (SplitMix64), so every failure names a seed.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// A record of `len` random bytes.
pub fn record(rng: &mut Rng, txg: u64, len: usize) -> Record {
    Record {
        txg,
        volume_id: 1 + rng.below(4),
        offset_bytes: rng.below(1 << 20) * 512,
        data: rng.bytes(len),
    }
}

pub fn views(records: &[Record]) -> Vec<RecordRef<'_>> {
    records.iter().map(Record::view).collect()
}

pub fn sectors(sector_bytes: u64) -> CreateOptions {
    CreateOptions { sector_bytes }
}

/// A fresh faulty device holding a new log with `ring_bytes` of ring.
pub fn new_log(
    ring_bytes: u64,
    sector_bytes: u64,
) -> (Arc<FaultyDevice>, LogDevice<Arc<FaultyDevice>>) {
    let ring_start = 8192u64.next_multiple_of(sector_bytes);
    let dev = Arc::new(FaultyDevice::new(ring_start + ring_bytes));
    let log =
        LogDevice::create_with(dev.clone(), POOL, DEV, &sectors(sector_bytes)).expect("create log");
    (dev, log)
}

/// Reopens a log device, failing the test on any error.
pub fn reopen<D: BlockDevice>(dev: D) -> (LogDevice<D>, larch_zil::Replay) {
    LogDevice::open(dev, POOL).unwrap_or_else(|err| panic!("reopen: {err}"))
}

/// The error a simulated device returns.
pub fn injected(op: &'static str) -> IoError {
    IoError::Injected {
        op,
        offset_bytes: 0,
        len_bytes: 0,
    }
}
