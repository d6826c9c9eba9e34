//! The sequential-read detector: a small `dmu_zfetch` that notices reads continuing where
//! an earlier one ended and reads ahead of them, farther the longer the stream runs
//! (`zfs_prefetch_disable`, `zfetch_max_distance`). The engine keeps one per volume and
//! the simulator one per simulated volume, so both prefetch alike.

/// Sequential streams per volume the prefetcher follows at once.
const STREAMS: usize = 8;

/// Most blocks one read can start prefetching (the rest follow with the next reads).
const PREFETCH_BLOCKS_PER_READ: u64 = 64;

/// One sequential stream: where its next read should start and how far ahead it has
/// already been prefetched.
#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    next_block: u64,
    reads: u64,
    prefetched_until: u64,
    last_use: u64,
}

/// A small `dmu_zfetch`: detects reads that continue where an earlier one ended and reads
/// ahead of them, farther the longer the stream runs.
#[derive(Debug, Default)]
pub struct Prefetcher {
    streams: [Stream; STREAMS],
    clock: u64,
}

impl Prefetcher {
    /// Whether a read starting at `first` continues one of the streams followed (before
    /// [`Prefetcher::observe`] records it): how the miss-ratio sampler tells sequential
    /// accesses from the others.
    pub fn continues(&self, first: u64) -> bool {
        self.streams
            .iter()
            .any(|s| s.reads > 0 && s.next_block == first)
    }

    /// Records a demand read of blocks `first..=last`; returns the blocks to prefetch, at
    /// most `max_blocks` ahead of the read, in pieces of at least `chunk_blocks` (at most
    /// half the distance, so that a piece goes out while the stream has the rest to read): a store that answers each request slowly
    /// but many at once (an object store) is read ahead in a few large requests rather
    /// than a small one per demand read. A chunk of one block prefetches at every read,
    /// as `dmu_zfetch` does.
    pub fn observe(
        &mut self,
        first: u64,
        last: u64,
        max_blocks: u64,
        chunk_blocks: u64,
    ) -> Option<std::ops::Range<u64>> {
        self.clock += 1;
        let clock = self.clock;
        if let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.reads > 0 && s.next_block == first)
        {
            s.reads += 1;
            s.next_block = last + 1;
            s.last_use = clock;
            let distance = (s.reads * (last - first + 1) * 2).min(max_blocks);
            // At most half the distance: the next piece goes out while the stream still has
            // the other half to read.
            let chunk = chunk_blocks.clamp(1, (distance / 2).max(1));
            let start = s.prefetched_until.max(last + 1);
            let end = (last + 1 + distance).min(start + PREFETCH_BLOCKS_PER_READ.max(chunk));
            if end >= start + chunk {
                s.prefetched_until = end;
                return Some(start..end);
            }
            return None;
        }
        let victim = self
            .streams
            .iter_mut()
            .min_by_key(|s| s.last_use)
            .expect("streams is not empty");
        *victim = Stream {
            next_block: last + 1,
            reads: 1,
            prefetched_until: last + 1,
            last_use: clock,
        };
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetcher_follows_sequential_streams_only() {
        let mut p = Prefetcher::default();
        assert_eq!(
            p.observe(0, 3, 512, 1),
            None,
            "a first read starts a stream"
        );
        assert!(p.continues(4) && !p.continues(5));
        let ahead = p
            .observe(4, 7, 512, 1)
            .expect("the second read continues it");
        assert_eq!(ahead.start, 8);
        assert!(ahead.end > 8);
        // A random read elsewhere does not prefetch, and does not break the stream.
        assert_eq!(p.observe(1000, 1000, 512, 1), None);
        let next = p.observe(8, 11, 512, 1).expect("the stream goes on");
        assert!(next.start >= ahead.end, "nothing is prefetched twice");
        // The distance is capped.
        let mut q = Prefetcher::default();
        q.observe(0, 0, 4, 1);
        let mut end = 0;
        for b in 1..100 {
            if let Some(r) = q.observe(b, b, 4, 1) {
                end = r.end;
            }
            assert!(end <= b + 1 + 4, "prefetched {end} at block {b}");
        }
    }

    /// With a chunk, a stream is read ahead in pieces of at least that many blocks (half
    /// the distance while that is shorter), each block once, never beyond the distance.
    #[test]
    fn prefetcher_reads_ahead_in_chunks() {
        let mut p = Prefetcher::default();
        p.observe(0, 15, 1024, 512);
        let mut issued: Vec<std::ops::Range<u64>> = Vec::new();
        for read in 1..200u64 {
            let (first, last) = (read * 16, read * 16 + 15);
            if let Some(r) = p.observe(first, last, 1024, 512) {
                assert!(
                    r.end <= last + 1 + 1024,
                    "beyond the distance: {r:?} at {last}"
                );
                let distance = ((read + 1) * 16 * 2).min(1024);
                assert!(
                    r.end - r.start >= 512.min(distance / 2),
                    "a piece of {r:?} at read {read}"
                );
                issued.push(r);
            }
        }
        for pair in issued.windows(2) {
            assert_eq!(pair[0].end, pair[1].start, "each block once, none left out");
        }
        // 13 pieces growing to 512 blocks, where a chunk of one block issues one at
        // nearly every one of the 199 reads.
        assert!(issued.len() <= 16, "few large pieces: {issued:?}");
        assert!(
            issued.last().unwrap().end > 199 * 16,
            "the stream stays ahead"
        );
    }
}
