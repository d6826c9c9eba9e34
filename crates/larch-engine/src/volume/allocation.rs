//! Which parts of a volume hold data and which are holes (NBD `base:allocation`), so
//! that `nbdcopy`, `qemu-img convert` and `nbdinfo --map` skip what was never written.
//!
//! A byte range is a hole when the backing store does not hold it (a file's hole, as its
//! file system says: [`BackingStore::holes`]) and no newer bytes of it are anywhere else:
//! a block dirty in the ARC (written since the backing store was asked, unless it is a
//! zeroed block waiting for its TXG; a clean block holds what the store holds), one with an acknowledged partial write waiting for its merge,
//! or one lost to a failed TXG (which reads as an error) counts as data. The answer is
//! built from two looks at the store's holes, one before and one after the blocks are
//! looked at: a block whose TXG reached the store (and whose buffer the ARC then dropped)
//! in between shows as data in the second look. A write that races the request may or may
//! not show, as for any request sent before the write's reply.
//!
//! Looking at the ARC costs a lock per block, so one answer looks at no more than
//! [`HOLE_SCAN_BLOCKS`] blocks of holes and ends where it stopped (the protocol lets an
//! answer cover less than asked; clients ask again from its end). An object volume's
//! holes are its objects never written or cleared (`larch_object::ObjectVolume::holes`);
//! block devices and devices given in process report data everywhere.

use std::ops::Range;
use std::sync::Arc;

use super::{Volume, VolumeError};

/// Blocks of holes one answer looks at most (16384: 64 MiB of 4 KiB blocks, 2 GiB of
/// 128 KiB ones; a few milliseconds of lock holds).
pub const HOLE_SCAN_BLOCKS: u64 = 16384;

/// A run of bytes of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Bytes of the run.
    pub length_bytes: u64,
    /// A hole: reads as zeros and holds nothing.
    pub hole: bool,
}

impl Volume {
    /// The runs of data and holes from `offset`, covering at least one byte and at most
    /// `length` (see the module documentation).
    pub async fn allocation(
        &self,
        offset: u64,
        length: u32,
    ) -> Result<Vec<Allocation>, VolumeError> {
        let length = u64::from(length).max(1);
        self.check_range(offset, length)?;
        let end = offset + length;
        let first = self.store_holes(offset, end).await?;
        if first.is_empty() {
            return Ok(vec![Allocation {
                length_bytes: length,
                hole: false,
            }]);
        }
        let (runs, answered_to) = self.runs_between(offset, end, &first);
        let second = self.store_holes(offset, answered_to).await?;
        Ok(merged(confirmed(&runs, &second)))
    }

    /// The backing store's holes in `offset..end`, asked on the blocking pool.
    async fn store_holes(&self, offset: u64, end: u64) -> Result<Vec<Range<u64>>, VolumeError> {
        let backing = Arc::clone(&self.entry.backing);
        let asked = self
            .engine
            .background
            .spawn_blocking(move || backing.holes(offset, end))
            .await
            .map_err(|e| VolumeError::Io(e.to_string()))?;
        asked.map_err(|e| VolumeError::Io(format!("finding the backing store's holes: {e}")))
    }

    /// The runs of `offset..end` given the store's `holes`: the blocks of a hole that hold
    /// newer bytes elsewhere are data. Returns them and where they end (before `end` when
    /// [`HOLE_SCAN_BLOCKS`] blocks were looked at).
    fn runs_between(
        &self,
        offset: u64,
        end: u64,
        holes: &[Range<u64>],
    ) -> (Vec<(Range<u64>, bool)>, u64) {
        let bs = u64::from(self.entry.info().block_bytes);
        let mut runs = Vec::new();
        let mut at = offset;
        let mut looked = 0;
        for hole in holes {
            if hole.start > at {
                runs.push((at..hole.start, false));
            }
            let mut from = hole.start;
            let mut block = hole.start / bs;
            while block * bs < hole.end {
                if looked == HOLE_SCAN_BLOCKS {
                    if from < block * bs {
                        runs.push((from..block * bs, true));
                    }
                    return (runs, (block * bs).max(offset + 1));
                }
                looked += 1;
                let here = (block * bs).max(hole.start)..((block + 1) * bs).min(hole.end);
                if self.holds_newer_bytes(block) {
                    if from < here.start {
                        runs.push((from..here.start, true));
                    }
                    runs.push((here.clone(), false));
                    from = here.end;
                }
                block += 1;
            }
            if from < hole.end {
                runs.push((from..hole.end, true));
            }
            at = hole.end;
        }
        if at < end {
            runs.push((at..end, false));
        }
        (runs, end)
    }

    /// Whether `block` has bytes the backing store may not hold yet: dirty in the ARC (a
    /// zeroed block's zeros are no bytes), in a partial write waiting to merge, or lost to
    /// a failed TXG.
    fn holds_newer_bytes(&self, block: u64) -> bool {
        let entry = &self.entry;
        entry.is_lost(block)
            || entry.partials.has(block)
            || self.engine.arc.holds_dirty_data(&entry.info().key(block))
    }
}

/// `runs` with every hole byte that is not a hole in `second` too made data.
fn confirmed(runs: &[(Range<u64>, bool)], second: &[Range<u64>]) -> Vec<(Range<u64>, bool)> {
    let mut out = Vec::new();
    for (range, hole) in runs {
        if !hole {
            out.push((range.clone(), false));
            continue;
        }
        let mut at = range.start;
        for h in second
            .iter()
            .filter(|h| h.end > range.start && h.start < range.end)
        {
            let start = h.start.max(range.start);
            let end = h.end.min(range.end);
            if start > at {
                out.push((at..start, false));
            }
            out.push((start..end, true));
            at = end;
        }
        if at < range.end {
            out.push((at..range.end, false));
        }
    }
    out
}

/// Adjacent runs of one kind joined, as lengths.
fn merged(runs: Vec<(Range<u64>, bool)>) -> Vec<Allocation> {
    let mut out: Vec<Allocation> = Vec::new();
    for (range, hole) in runs.into_iter().filter(|(r, _)| r.end > r.start) {
        let length_bytes = range.end - range.start;
        match out.last_mut() {
            Some(last) if last.hole == hole => last.length_bytes += length_bytes,
            _ => out.push(Allocation { length_bytes, hole }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::{BackingStore, LatencyModel};
    use crate::engine::Engine;
    use crate::volumes::VolumeSpec;

    /// A hole longer than one answer looks at ends the answer where the look stopped;
    /// asked again from there, the rest comes, and a block the ARC holds is data.
    #[test]
    fn a_long_hole_is_answered_in_pieces_and_cached_blocks_are_data() {
        const BLOCK: u64 = 4096;
        let dir = std::env::temp_dir().join(format!("larch-holes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vol.img");
        let blocks = 2 * HOLE_SCAN_BLOCKS + 100;
        std::fs::File::create(&path)
            .unwrap()
            .set_len(blocks * BLOCK)
            .unwrap();
        let engine = Engine::new(16 << 20);
        let store = BackingStore::open(&path, false, LatencyModel::default()).unwrap();
        let entry = engine
            .add_volume(VolumeSpec::new(0x78, BLOCK as u32), Arc::new(store))
            .unwrap();
        let volume = Volume::new("v".into(), entry, Arc::clone(&engine));
        let rt = tokio::runtime::Runtime::new().unwrap();
        // As the NBD server asks: never past the end.
        let ask = |offset: u64| {
            let length = (blocks * BLOCK - offset).min(u64::from(u32::MAX)) as u32;
            rt.block_on(volume.allocation(offset, length)).unwrap()
        };
        let scanned = HOLE_SCAN_BLOCKS * BLOCK;
        let hole = |length_bytes| Allocation {
            length_bytes,
            hole: true,
        };
        let data = |length_bytes| Allocation {
            length_bytes,
            hole: false,
        };
        assert_eq!(ask(0), [hole(scanned)]);
        // Block 5 written (dirty in the ARC, the file still a hole there).
        rt.block_on(volume.write(5 * BLOCK, &[7; BLOCK as usize], false))
            .unwrap();
        assert_eq!(
            ask(0),
            [hole(5 * BLOCK), data(BLOCK), hole(scanned - 6 * BLOCK)]
        );
        assert_eq!(ask(scanned), [hole(scanned)]);
        let rest = (blocks - 2 * HOLE_SCAN_BLOCKS) * BLOCK;
        assert_eq!(ask(2 * scanned), [hole(rest)]);
        engine.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_hole_byte_the_second_look_finds_written_is_data() {
        let runs = vec![(0..4096, false), (4096..16384, true), (16384..20480, false)];
        // Between the looks, 8192..12288 was written.
        let second = vec![4096..8192, 12288..16384];
        let got = merged(confirmed(&runs, &second));
        let want = [
            (4096, false),
            (4096, true),
            (4096, false),
            (4096, true),
            (4096, false),
        ];
        let want: Vec<Allocation> = want
            .iter()
            .map(|&(length_bytes, hole)| Allocation { length_bytes, hole })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn runs_of_one_kind_are_joined_and_empty_ones_dropped() {
        let got = merged(vec![
            (0..10, true),
            (10..10, false),
            (10..30, true),
            (30..40, false),
        ]);
        assert_eq!(
            got,
            [
                Allocation {
                    length_bytes: 30,
                    hole: true
                },
                Allocation {
                    length_bytes: 10,
                    hole: false
                }
            ]
        );
    }
}
