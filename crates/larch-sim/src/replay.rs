//! Replay of trace records through a policy: records are split into blocks, each block is
//! one access, and the policy's answers are counted.

use larch_policy::{Access, Action, BlockKey, Policy};

use crate::trace::{Op, Record, RecordError};

/// What to do with write records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// A write is an access like a read (write-allocate): counted and cached.
    Access,
    /// Writes are not replayed.
    Skip,
    /// A write drops the blocks it covers from the cache (write-around).
    Invalidate,
}

impl std::str::FromStr for WriteMode {
    type Err = UnknownWriteMode;
    fn from_str(s: &str) -> Result<WriteMode, UnknownWriteMode> {
        match s {
            "access" => Ok(WriteMode::Access),
            "skip" => Ok(WriteMode::Skip),
            "invalidate" => Ok(WriteMode::Invalidate),
            _ => Err(UnknownWriteMode(s.to_string())),
        }
    }
}

/// A write mode name that is not one of [`WriteMode`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown write mode {0:?} (one of: access, skip, invalidate)")]
pub struct UnknownWriteMode(pub String);

/// How to replay.
#[derive(Clone, Copy, Debug)]
pub struct ReplayConfig {
    /// Size of a block; byte ranges are split into blocks of this size.
    pub block_size_bytes: u32,
    /// What writes do.
    pub writes: WriteMode,
    /// Largest number of blocks one record may touch; more is a malformed record.
    pub max_blocks_per_record: u64,
    /// Run the policy's invariant walk every this many accesses (0: never). Slow; for tests.
    pub check_every_accesses: u64,
}

/// Most blocks one record may touch before it counts as malformed (8 GiB of 8K blocks),
/// in a replay and in `larch sim run` alike.
pub const MAX_BLOCKS_PER_RECORD: u64 = 1 << 20;

impl ReplayConfig {
    /// Defaults for `block_size_bytes`: writes are accesses, at most
    /// [`MAX_BLOCKS_PER_RECORD`] blocks a record.
    pub fn new(block_size_bytes: u32) -> ReplayConfig {
        ReplayConfig {
            block_size_bytes,
            writes: WriteMode::Access,
            max_blocks_per_record: MAX_BLOCKS_PER_RECORD,
            check_every_accesses: 0,
        }
    }
}

/// Milliseconds between consecutive requests of a trace without times. Larger than
/// `ARC_MINTIME`, so an untimed trace promotes to MFU on every re-reference, as the paper does.
pub const UNTIMED_TICK_MS: u64 = 1000;

/// Counts of a replay so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayCounts {
    /// Trace records replayed.
    pub records: u64,
    /// Block accesses (the unit of hits and misses).
    pub requests: u64,
    /// Accesses served from the cache.
    pub hits: u64,
    /// Accesses that missed.
    pub misses: u64,
    /// Bytes of the accesses that hit.
    pub hit_bytes: u64,
    /// Bytes of the accesses that missed.
    pub miss_bytes: u64,
    /// Write records seen (replayed or not, per the write mode).
    pub write_records: u64,
}

impl ReplayCounts {
    /// Hits over requests, 0 when there were none.
    pub fn hit_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.hits as f64 / self.requests as f64
        }
    }
}

/// Drives a policy with trace records.
pub struct Replayer<'p> {
    policy: &'p mut dyn Policy,
    cfg: ReplayConfig,
    counts: ReplayCounts,
    actions: Vec<Action>,
    now_ms: u64,
    /// The first record time seen, so that replays start at time 0.
    time_origin_ms: Option<u64>,
}

impl<'p> Replayer<'p> {
    /// A replayer of `policy`.
    pub fn new(policy: &'p mut dyn Policy, cfg: ReplayConfig) -> Replayer<'p> {
        assert!(cfg.block_size_bytes > 0, "block size must be positive");
        Replayer {
            policy,
            cfg,
            counts: ReplayCounts::default(),
            actions: Vec::with_capacity(64),
            now_ms: 0,
            time_origin_ms: None,
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> ReplayCounts {
        self.counts
    }

    /// The policy being driven.
    pub fn policy(&self) -> &dyn Policy {
        &*self.policy
    }

    /// The blocks a record touches: (first block, count, size of each).
    fn blocks(&self, record: &Record) -> Result<(u64, u64, u32), RecordError> {
        record.blocks(self.cfg.block_size_bytes, self.cfg.max_blocks_per_record)
    }

    /// Tells the policy that `record` comes next ([`Policy::hint_next`] with its first
    /// block), for a caller that reads one record ahead: the policy's first memory loads
    /// for it then overlap the work of the record before.
    pub fn hint_next(&self, record: &Record) {
        if (record.op == Op::Read || self.cfg.writes != WriteMode::Skip)
            && let Ok((first, _, _)) = self.blocks(record)
        {
            self.policy.hint_next(&BlockKey::new(record.volume, first));
        }
    }

    /// Replays one record. An `Err` means the record is malformed; nothing was replayed.
    pub fn record(&mut self, record: &Record) -> Result<(), RecordError> {
        let (first, count, size_bytes) = self.blocks(record)?;
        self.advance_clock(record.time_ms);
        self.counts.records += 1;
        let mode = match record.op {
            Op::Read => WriteMode::Access,
            Op::Write => {
                self.counts.write_records += 1;
                self.cfg.writes
            }
        };
        let last = first + (count - 1);
        for block in first..=last {
            let key = BlockKey::new(record.volume, block);
            if block < last {
                self.policy
                    .hint_next(&BlockKey::new(record.volume, block + 1));
            }
            match mode {
                WriteMode::Access => self.access(key, size_bytes),
                WriteMode::Skip => {}
                WriteMode::Invalidate => {
                    self.policy.remove(&key, &mut self.actions);
                    self.actions.clear();
                }
            }
        }
        Ok(())
    }

    fn advance_clock(&mut self, time_ms: Option<u64>) {
        match time_ms {
            Some(t) => {
                let origin = *self.time_origin_ms.get_or_insert(t);
                // Traces are not always sorted; time never goes backwards for the policy.
                self.now_ms = self.now_ms.max(t.saturating_sub(origin));
            }
            None => self.now_ms += UNTIMED_TICK_MS,
        }
    }

    fn access(&mut self, key: BlockKey, size_bytes: u32) {
        let access = Access::data(key, size_bytes, self.now_ms);
        let outcome = self.policy.access(&access, &mut self.actions);
        self.actions.clear();
        self.counts.requests += 1;
        if outcome.is_hit() {
            self.counts.hits += 1;
            self.counts.hit_bytes += u64::from(size_bytes);
        } else {
            self.counts.misses += 1;
            self.counts.miss_bytes += u64::from(size_bytes);
        }
        let every = self.cfg.check_every_accesses;
        if every > 0 && self.counts.requests.is_multiple_of(every) {
            self.policy.check_invariants();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Extent;
    use larch_policy::{Arc, ArcConfig, Lru};

    fn read(offset_bytes: u64, length_bytes: u64) -> Record {
        Record::read_bytes(offset_bytes, length_bytes)
    }

    #[test]
    fn ranges_split_into_blocks() {
        let mut lru = Lru::new(1 << 20);
        let mut r = Replayer::new(&mut lru, ReplayConfig::new(4096));
        r.record(&read(0, 8192)).unwrap();
        r.record(&read(4095, 2)).unwrap(); // blocks 0 and 1 again
        r.record(&read(100, 0)).unwrap(); // a zero-length request touches its block
        let c = r.counts();
        assert_eq!((c.records, c.requests, c.hits, c.misses), (3, 5, 3, 2));
    }

    #[test]
    fn absurd_records_are_errors() {
        let mut lru = Lru::new(1 << 20);
        let mut r = Replayer::new(&mut lru, ReplayConfig::new(512));
        assert!(r.record(&read(u64::MAX - 10, 100)).is_err());
        assert!(r.record(&read(0, 1 << 40)).is_err());
        assert_eq!(r.counts().records, 0);
    }

    #[test]
    fn the_last_block_number_is_usable() {
        let mut lru = Lru::new(1 << 20);
        let mut r = Replayer::new(&mut lru, ReplayConfig::new(512));
        let object = Record {
            extent: Extent::Object {
                id: u64::MAX,
                size_bytes: None,
            },
            ..read(0, 0)
        };
        r.record(&object).unwrap();
        r.record(&read(u64::MAX - 511, 511)).unwrap();
        assert_eq!(r.counts().requests, 2);
    }

    #[test]
    fn write_modes() {
        let write = Record {
            op: Op::Write,
            ..read(0, 512)
        };
        for (mode, hits) in [
            (WriteMode::Access, 2),
            (WriteMode::Skip, 1),
            (WriteMode::Invalidate, 0),
        ] {
            let mut arc = Arc::new(ArcConfig::fixed(1 << 20)).unwrap();
            let cfg = ReplayConfig {
                writes: mode,
                ..ReplayConfig::new(512)
            };
            let mut r = Replayer::new(&mut arc, cfg);
            r.record(&read(0, 512)).unwrap();
            r.record(&write).unwrap();
            r.record(&read(0, 512)).unwrap();
            assert_eq!(r.counts().hits, hits, "{mode:?}");
            assert_eq!(r.counts().write_records, 1);
        }
    }
}
