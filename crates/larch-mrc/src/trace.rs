//! Block traces as sampler accesses (feature `trace`), read by `larch-sim`'s readers.

use std::path::{Path, PathBuf};

use larch_policy::BlockKey;
use larch_sim::replay::UNTIMED_TICK_MS;
use larch_sim::trace::RecordError;
use larch_sim::{Format, Op, TraceError, TraceReader};

use crate::Access;

/// Most blocks one record may touch.
pub const MAX_BLOCKS_PER_RECORD: u64 = 1 << 20;

/// What reading a trace found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRead {
    /// Records read.
    pub records: u64,
    /// Some record had a time. When none had, the accesses' clock is the simulator's tick
    /// per record, not the trace's: rates from it are fiction.
    pub timed: bool,
}

/// Why a trace's accesses could not all be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceAccessError {
    /// The trace could not be opened or a record could not be parsed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A record parsed but cannot be split into blocks ([`larch_sim::Record::blocks`]).
    #[error("{}: record {record}: {source}", path.display())]
    Record {
        /// The trace file.
        path: PathBuf,
        /// The record's number, 1-based.
        record: u64,
        /// What is wrong with it.
        source: RecordError,
    },
}

/// Reads a trace and calls `each` with every block access, in order, split into blocks
/// of `block_size_bytes`; a trace without times advances by the simulator's tick per
/// record. A request continuing where the previous one of its volume ended is
/// sequential. A malformed record is an error naming it.
pub fn for_each_access(
    path: &Path,
    format: Option<Format>,
    block_size_bytes: u32,
    mut each: impl FnMut(&Access),
) -> Result<TraceRead, TraceAccessError> {
    let mut reader = TraceReader::open(path, format)?;
    let mut origin: Option<u64> = None;
    let mut now_ms = 0u64;
    let mut records = 0u64;
    let mut next_of: std::collections::HashMap<u64, u64> = Default::default();
    while let Some(record) = reader.next_record()? {
        records += 1;
        let (first, count, bytes) = record
            .blocks(block_size_bytes, MAX_BLOCKS_PER_RECORD)
            .map_err(|source| TraceAccessError::Record {
                path: path.to_path_buf(),
                record: records,
                source,
            })?;
        match record.time_ms {
            Some(t) => {
                let o = *origin.get_or_insert(t);
                now_ms = now_ms.max(t.saturating_sub(o));
            }
            None => now_ms += UNTIMED_TICK_MS,
        }
        let sequential = next_of.get(&record.volume) == Some(&first);
        // `count` is at least 1; the last block may be 2^64 - 1, which has no next one.
        let last = first + (count - 1);
        match last.checked_add(1) {
            Some(next) => next_of.insert(record.volume, next),
            None => next_of.remove(&record.volume),
        };
        if next_of.len() > 1 << 16 {
            next_of.clear();
        }
        for block in first..=last {
            each(&Access {
                key: BlockKey::new(record.volume, block),
                bytes,
                write: record.op == Op::Write,
                sequential,
                metadata: false,
                now_ms,
            });
        }
    }
    Ok(TraceRead {
        records,
        timed: reader.any_timed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Block number 2^64 - 1 is a block like any other, as in the simulator's replay: the
    /// sampler added the record's block count to it and overflowed (a panic in a debug
    /// build, a skipped record in a release one).
    #[test]
    fn the_last_block_number_is_read_like_any_other() {
        let path = std::env::temp_dir().join(format!("larch-mrc-last-{}.txt", std::process::id()));
        std::fs::write(&path, "7\n18446744073709551615\n18446744073709551615\n").unwrap();
        let mut seen = Vec::new();
        let read = for_each_access(&path, Some(Format::Text), 8192, |a| seen.push(a.key.block));
        let _ = std::fs::remove_file(&path);
        assert_eq!(read.unwrap().records, 3);
        assert_eq!(seen, vec![7, u64::MAX, u64::MAX]);
    }
}
