//! The segments format of an object-backed volume (`layout::Format::Segments`): the map
//! of block pointers, commits that pack changed blocks into new segments, reads that
//! follow the pointers, and the repacking of segments most of whose blocks are dead.
//!
//! A commit never reads a segment back to rewrite it: its blocks (client writes, and live
//! blocks moved out of sparse segments) are written in block order into new segments of
//! at most `object_blocks` records, the block-map pages that changed are written as new
//! objects, and then the root, conditionally, as in the objects format. A block of zeros
//! is not stored: its pointer is cleared (a hole), as ZFS stores no all-zero block.
//! A segment whose last live block a commit replaced is deleted once that commit landed.
//!
//! Memory: the map holds every block-map page the root names, [`BLOCK_PTR_MEM`] bytes a
//! block of the pages written (a 1 TiB volume of 8 KiB blocks, all written: 5 GiB), and
//! 16 bytes a segment. Keeping map pages in the ARC as metadata, so that a volume's map
//! need not fit in DRAM, is not done yet (docs/object-store.md, "Limits").

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt};
use object_store::ObjectStoreExt;

use super::{Committed, Hazard, LogEdit, ObjectVolume, TreeEdit, store_error, uploads_at_once};
use crate::layout::{self, BlockPtr, PAGE_BLOCKS, SegmentId};

/// Bytes one block pointer takes in memory.
pub const BLOCK_PTR_MEM: u64 = std::mem::size_of::<BlockPtr>() as u64;

/// What the map knows of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    /// Records it holds.
    pub records: u32,
    /// Of those, records some pointer of the map names.
    pub live: u32,
}

/// The block pointers of a segments volume, page by page (pages never written are absent:
/// their blocks are holes), and the live count of every segment they name.
#[derive(Default)]
pub(super) struct BlockMap {
    pub pages: BTreeMap<u64, Box<[BlockPtr]>>,
    /// Pages whose pointers differ from the page objects the root names (the map logs
    /// changed them): what the next checkpoint writes.
    pub unsaved: BTreeSet<u64>,
    segments: HashMap<SegmentId, Segment>,
    stored_records: u64,
    live_records: u64,
}

impl BlockMap {
    /// Where `block` lives (a hole: the default pointer).
    pub fn get(&self, block: u64) -> BlockPtr {
        match self.pages.get(&(block / PAGE_BLOCKS)) {
            Some(entries) => entries[(block % PAGE_BLOCKS) as usize],
            None => BlockPtr::default(),
        }
    }

    /// The pointers of page `page` (all holes when it was never written).
    pub fn page_entries(&self, page: u64) -> Vec<BlockPtr> {
        match self.pages.get(&page) {
            Some(entries) => entries.to_vec(),
            None => vec![BlockPtr::default(); PAGE_BLOCKS as usize],
        }
    }

    /// Adds a page read from the store. A pointer whose segment another pointer names with
    /// another record count is refused: one of them is damaged.
    pub fn load_page(&mut self, page: u64, entries: Vec<BlockPtr>) -> Result<(), SegmentId> {
        for p in entries.iter().filter(|p| p.exists()) {
            self.count(*p)?;
        }
        self.pages.insert(page, entries.into_boxed_slice());
        Ok(())
    }

    fn count(&mut self, p: BlockPtr) -> Result<(), SegmentId> {
        let id = p.segment();
        let seg = self.segments.entry(id).or_insert_with(|| {
            self.stored_records += u64::from(p.records);
            Segment {
                records: p.records,
                live: 0,
            }
        });
        if seg.records != p.records || seg.live >= seg.records {
            return Err(id);
        }
        seg.live += 1;
        self.live_records += 1;
        Ok(())
    }

    /// Replaces page `page` with `entries` read from the store (a follower following a
    /// commit). A pointer whose segment another page names with another record count is
    /// refused, and the map is left as it was.
    pub fn replace_page(&mut self, page: u64, entries: Vec<BlockPtr>) -> Result<(), SegmentId> {
        let old = self.pages.remove(&page);
        for p in old.iter().flat_map(|e| e.iter()).filter(|p| p.exists()) {
            self.uncount(*p);
        }
        for (counted, p) in entries.iter().filter(|p| p.exists()).enumerate() {
            if let Err(id) = self.count(*p) {
                for q in entries.iter().filter(|p| p.exists()).take(counted) {
                    self.uncount(*q);
                }
                if let Some(old) = old {
                    for q in old.iter().filter(|p| p.exists()) {
                        self.count(*q).expect("the page counted before");
                    }
                    self.pages.insert(page, old);
                }
                return Err(id);
            }
        }
        self.pages.insert(page, entries.into_boxed_slice());
        Ok(())
    }

    /// Applies a map log read from the store (an open, a follower following a commit):
    /// each block pointed where the log says. Returns the blocks whose pointers changed.
    /// A pointer whose segment the map names with another record count, or that would
    /// count more live records than its segment holds, is refused; the entries before it
    /// stay applied (the caller drops the map).
    pub fn apply_log(&mut self, entries: &[(u64, BlockPtr)]) -> Result<Vec<u64>, SegmentId> {
        let mut changed = Vec::new();
        for &(block, ptr) in entries {
            let now = self.get(block);
            if now == ptr {
                continue;
            }
            if ptr.exists() {
                let fits = self
                    .segments
                    .get(&ptr.segment())
                    .is_none_or(|s| s.records == ptr.records && s.live < s.records);
                if !fits {
                    return Err(ptr.segment());
                }
            }
            self.set(block, ptr);
            changed.push(block);
        }
        Ok(changed)
    }

    /// Takes one live record of `p`'s segment off its count; returns the segment when
    /// that was its last.
    fn uncount(&mut self, p: BlockPtr) -> Option<SegmentId> {
        let id = p.segment();
        let seg = self.segments.get_mut(&id)?;
        seg.live -= 1;
        self.live_records -= 1;
        if seg.live > 0 {
            return None;
        }
        self.stored_records -= u64::from(seg.records);
        self.segments.remove(&id);
        Some(id)
    }

    /// Points `block` at `ptr` (a hole: the default). Returns the segment that no pointer
    /// names any more, if the block's old one was its last.
    pub fn set(&mut self, block: u64, ptr: BlockPtr) -> Option<SegmentId> {
        self.unsaved.insert(block / PAGE_BLOCKS);
        let page = self
            .pages
            .entry(block / PAGE_BLOCKS)
            .or_insert_with(|| vec![BlockPtr::default(); PAGE_BLOCKS as usize].into());
        let slot = &mut page[(block % PAGE_BLOCKS) as usize];
        let old = std::mem::replace(slot, ptr);
        if ptr.exists() {
            // A new segment's records are all counted as they are pointed at.
            self.count(ptr)
                .expect("a commit's pointers name its own new segments");
        }
        if !old.exists() {
            return None;
        }
        self.uncount(old)
    }

    /// Whether the map names segment `id`.
    pub fn names(&self, id: SegmentId) -> bool {
        self.segments.contains_key(&id)
    }

    /// Segments whose live records are below `percent` % of their records, the sparsest
    /// first.
    pub fn sparse(&self, percent: u8) -> Vec<(SegmentId, Segment)> {
        let mut found: Vec<(SegmentId, Segment)> = self
            .segments
            .iter()
            .filter(|(_, s)| u64::from(s.live) * 100 < u64::from(s.records) * u64::from(percent))
            .map(|(id, s)| (*id, *s))
            .collect();
        found.sort_by_key(|(id, s)| {
            (
                u64::from(s.live) * 1_000_000 / u64::from(s.records.max(1)),
                *id,
            )
        });
        found
    }

    /// Bytes it takes in memory.
    pub fn bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_BLOCKS * BLOCK_PTR_MEM + self.segments.len() as u64 * 32
    }

    /// Records in the segments the map names, and of those the live ones.
    pub fn records(&self) -> (u64, u64) {
        (self.stored_records, self.live_records)
    }

    /// Segments the map names.
    pub fn segments(&self) -> u64 {
        self.segments.len() as u64
    }
}

/// Whether every byte of `data` is zero (16 bytes at a time, no early exit: a block is
/// read whole either way, and the loop vectorises).
fn is_zeros(data: &[u8]) -> bool {
    let chunks = data.chunks_exact(16);
    let tail = chunks.remainder();
    let any = chunks.fold(0u128, |acc, c| {
        acc | u128::from_ne_bytes(c.try_into().expect("16 bytes"))
    });
    any == 0 && tail.iter().all(|&b| b == 0)
}

/// A block to write in a commit, from a client or moved out of a sparse segment.
#[derive(Clone)]
struct Write {
    block: u64,
    data: Bytes,
}

impl ObjectVolume {
    /// One attempt at committing `staged` to a segments volume (see the module comment),
    /// moving up to `repack_budget` bytes of live blocks out of sparse segments with it.
    pub(super) fn commit_segments(
        &self,
        staged: &BTreeMap<u64, Bytes>,
        next_seq: &mut u64,
        repack_budget: u64,
    ) -> io::Result<Option<Committed>> {
        let (base_seq, base_logs) = {
            let state = self.state.lock().expect("state lock");
            (state.root.commit_seq, state.root.logs.len())
        };
        let version = self.next_version(base_seq, next_seq)?;
        let moves = self.repack_moves(staged, repack_budget)?;
        let moved_bytes: u64 = moves.iter().map(|w| w.data.len() as u64).sum();
        let (writes, holes) = self.changes(staged, moves);
        // 1. The segments, in block order, `object_blocks` records each.
        let (mut pointers, jobs) = self.segment_uploads(&writes, version)?;
        let parts = jobs.len() as u64;
        let segment_bytes =
            u64::from(self.geometry.object_blocks) * u64::from(self.geometry.block_bytes);
        let segments_at_once = uploads_at_once(segment_bytes, self.options.uploads);
        pointers.extend(holes.iter().map(|&b| (b, BlockPtr::default())));
        pointers.sort_unstable_by_key(|&(block, _)| block);
        // 2. The commit's map log, or at a checkpoint the block-map pages.
        let checkpoint = !pointers.is_empty()
            && (base_logs >= self.options.map_log_commits as usize
                || (pointers.len() * layout::LOG_ENTRY_BYTES) as u64 + 32 > layout::MAX_LOG_BYTES);
        let (edit, log, map_jobs) = self.map_uploads(&pointers, version, checkpoint);
        let root_first = self.options.hazard == Hazard::RootFirst;
        // Segments and the map's objects go up at the same time, each kind with its own
        // bound: only the root must wait for them all, and a round of map uploads after
        // the segments would add one more request time to every commit.
        let mut uploads = Some((jobs, map_jobs));
        let upload = |uploads: &mut Option<(Vec<_>, Vec<_>)>| -> io::Result<()> {
            let (jobs, map_jobs) = uploads.take().expect("uploaded once");
            self.upload_together(
                (jobs, segments_at_once),
                (map_jobs, self.options.uploads.max(1)),
            )
        };
        if !root_first {
            upload(&mut uploads)?;
        }
        // 3. The root; the map follows it under the same hold of `state`.
        let mut dead: Vec<SegmentId> = Vec::new();
        let Some(superseded) = self.commit_root(base_seq, version.seq, edit, log, |map| {
            let blocks = map.blocks_mut();
            for &(block, ptr) in &pointers {
                dead.extend(blocks.set(block, ptr));
            }
            if checkpoint {
                blocks.unsaved.clear();
            }
        })?
        else {
            return Ok(None);
        };
        if root_first {
            upload(&mut uploads)?;
        }
        let s = &self.stats;
        s.objects_written.fetch_add(parts, Ordering::Relaxed);
        if moved_bytes > 0 {
            s.repack_bytes.fetch_add(moved_bytes, Ordering::Relaxed);
        }
        s.segments_freed
            .fetch_add(dead.len() as u64, Ordering::Relaxed);
        let mut garbage: Vec<String> = dead.into_iter().map(layout::segment_name).collect();
        garbage.extend(superseded.pages.iter().map(|&(level, p)| match level {
            0 => layout::block_page_name(p.page, p.version),
            _ => layout::index_page_name(level, p.page, p.version),
        }));
        garbage.extend(
            superseded
                .logs
                .iter()
                .map(|l| layout::block_log_name(l.version)),
        );
        Ok(Some(Committed {
            seq: version.seq,
            garbage,
        }))
    }

    /// What `staged` and the repack's `moves` change: the blocks to store, in block order,
    /// and the blocks that become holes (blocks of zeros where they are not holes already).
    fn changes(&self, staged: &BTreeMap<u64, Bytes>, moves: Vec<Write>) -> (Vec<Write>, Vec<u64>) {
        let mut writes: Vec<Write> = Vec::with_capacity(staged.len() + moves.len());
        let mut holes: Vec<u64> = Vec::new();
        {
            let map = self.map.read().expect("map lock");
            let blocks = map.blocks();
            for (&block, data) in staged {
                if !is_zeros(data) {
                    writes.push(Write {
                        block,
                        data: data.clone(),
                    });
                } else if blocks.get(block).exists() {
                    holes.push(block);
                }
            }
        }
        writes.extend(moves);
        writes.sort_unstable_by_key(|w| w.block);
        (writes, holes)
    }

    /// The pointers of `writes` packed into commit `version`'s segments, `object_blocks`
    /// records each, and the segments' uploads.
    #[allow(clippy::type_complexity)]
    fn segment_uploads(
        &self,
        writes: &[Write],
        version: layout::Version,
    ) -> io::Result<(
        Vec<(u64, BlockPtr)>,
        Vec<impl Future<Output = io::Result<()>> + Send + 'static>,
    )> {
        let per = self.geometry.object_blocks as usize;
        let mut pointers = Vec::with_capacity(writes.len());
        let mut jobs = Vec::new();
        for (part, chunk) in writes.chunks(per).enumerate() {
            let part = u32::try_from(part).map_err(|_| {
                io::Error::other(format!(
                    "{}: a commit of more than 2^32 segments",
                    self.display
                ))
            })?;
            for (slot, w) in chunk.iter().enumerate() {
                let checksum = layout::record_sum(&self.geometry, w.block, &w.data, version.seq);
                pointers.push((
                    w.block,
                    BlockPtr {
                        seq: version.seq,
                        token: version.token,
                        checksum,
                        part,
                        slot: slot as u32,
                        records: chunk.len() as u32,
                    },
                ));
            }
            let id = SegmentId {
                seq: version.seq,
                token: version.token,
                part,
            };
            jobs.push(self.segment_upload(id, chunk.to_vec()));
        }
        Ok((pointers, jobs))
    }

    /// The map's share of commit `version` with `pointers` (in block order): its map log;
    /// or, at a `checkpoint`, the block-map pages every log since the last checkpoint and
    /// this commit changed, each a new object, and the index pages above them
    /// (`tree::Tree::edit`). Returns what the commit writes into the tree, what the root
    /// does with its logs, and the uploads.
    #[allow(clippy::type_complexity)]
    fn map_uploads(
        &self,
        pointers: &[(u64, BlockPtr)],
        version: layout::Version,
        checkpoint: bool,
    ) -> (TreeEdit, LogEdit, Vec<BoxFuture<'static, io::Result<()>>>) {
        if checkpoint {
            let mut pages: BTreeMap<u64, Vec<BlockPtr>> = BTreeMap::new();
            let map = self.map.read().expect("map lock");
            let blocks = map.blocks();
            for &page in &blocks.unsaved {
                pages.insert(page, blocks.page_entries(page));
            }
            for &(block, ptr) in pointers {
                let page = block / PAGE_BLOCKS;
                pages
                    .entry(page)
                    .or_insert_with(|| blocks.page_entries(page))
                    [(block % PAGE_BLOCKS) as usize] = ptr;
            }
            drop(map);
            let (refs, jobs) = self.page_uploads(
                &pages,
                version,
                layout::encode_block_page,
                layout::block_page_name,
            );
            let mut jobs: Vec<_> = jobs.into_iter().map(FutureExt::boxed).collect();
            // The base's tree: `commit_root` refuses the commit if the base moved since.
            let (edit, index) = self.state.lock().expect("state lock").tree.edit(
                refs,
                self.sized().tree_levels(),
                version,
            );
            jobs.extend(
                index
                    .into_iter()
                    .map(|page| self.put_job(page.name, page.bytes).boxed()),
            );
            return (edit, LogEdit::Clear, jobs);
        }
        if pointers.is_empty() {
            return (TreeEdit::default(), LogEdit::Keep, Vec::new());
        }
        let sealed = layout::encode_block_log(pointers);
        let next = layout::LogRef {
            version,
            checksum: layout::page_checksum(&sealed),
            entries: pointers.len() as u64,
        };
        let job = self
            .put_job(layout::block_log_name(version), sealed)
            .boxed();
        (TreeEdit::default(), LogEdit::Append(next), vec![job])
    }

    /// The upload of segment `id` holding `blocks` (in order). Its body is built when the
    /// upload starts: a commit holds only the bodies of the uploads in flight, besides
    /// the staged blocks themselves.
    fn segment_upload(
        &self,
        id: SegmentId,
        blocks: Vec<Write>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let name = layout::segment_name(id);
        let geometry = self.sized();
        let display = self.display.clone();
        let put = self.put_body(name.clone());
        async move {
            let body = layout::build_object(
                blocks.iter().map(|w| (w.block, &w.data[..])),
                &geometry,
                id.seq,
            )
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{display}/{name}: {e}"),
                )
            })?;
            put.send(body).await
        }
    }

    /// The live blocks of the sparsest segments (live share below the volume's
    /// `repack_percent`), up to `budget` bytes of segments read, that `staged` does not
    /// overwrite anyway: each segment is read whole with one GET (its records say which
    /// blocks they are), and a record is live when the map still points at it.
    fn repack_moves(&self, staged: &BTreeMap<u64, Bytes>, budget: u64) -> io::Result<Vec<Write>> {
        if budget == 0 || self.options.repack_percent == 0 {
            return Ok(Vec::new());
        }
        let rec = self.geometry.record_bytes();
        let chosen: Vec<(SegmentId, Segment)> = {
            let map = self.map.read().expect("map lock");
            let mut spent = 0u64;
            map.blocks()
                .sparse(self.options.repack_percent)
                .into_iter()
                .take_while(|(_, s)| {
                    let first = spent == 0;
                    spent += u64::from(s.records) * rec;
                    first || spent <= budget
                })
                .collect()
        };
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        let gets: Vec<_> = chosen
            .iter()
            .map(|&(id, seg)| {
                let store = Arc::clone(&self.store);
                let path = self.path(&layout::segment_name(id));
                let range = 0..u64::from(seg.records) * rec;
                async move { (id, store.get_range(&path, range).await) }
            })
            .collect();
        let answers = self.run_gets(gets);
        let bs = self.block_bytes() as usize;
        let mut moves = Vec::new();
        let map = self.map.read().expect("map lock");
        let blocks = map.blocks();
        for (id, answer) in answers {
            let name = layout::segment_name(id);
            let bytes = answer.map_err(|e| {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                store_error(&format!("{}/{name} (repacking)", self.display), e)
            })?;
            self.stats
                .get_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            self.stats.repacked_segments.fetch_add(1, Ordering::Relaxed);
            if self.options.hazard == Hazard::DeleteRepackedEarly {
                self.delete_later(vec![name.clone()]);
            }
            for (slot, record) in bytes.chunks_exact(rec as usize).enumerate() {
                let Some(block) = layout::record_block(record, bs) else {
                    continue;
                };
                let ptr = blocks.get(block);
                let live = ptr.exists()
                    && ptr.segment() == id
                    && ptr.slot as usize == slot
                    && !staged.contains_key(&block);
                if !live {
                    continue;
                }
                let data = self.verified_record(&bytes, record, block, ptr, &name)?;
                moves.push(Write { block, data });
            }
        }
        Ok(moves)
    }

    /// The block's bytes in `record` (a slice of `whole`), verified against its pointer.
    fn verified_record(
        &self,
        whole: &Bytes,
        record: &[u8],
        block: u64,
        ptr: BlockPtr,
        name: &str,
    ) -> io::Result<Bytes> {
        let bs = self.block_bytes() as usize;
        let bad = |why: String| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}/{name}: {why}", self.display),
            )
        };
        let data = layout::verify_record(record, bs, self.geometry.volume, block, ptr.seq)
            .map_err(|e| bad(e.to_string()))?;
        if layout::record_checksum_of(record) != ptr.checksum {
            return Err(bad(format!(
                "block {block}: not the record the map names (checksum {:016x}, the map's \
                 {:016x})",
                layout::record_checksum_of(record),
                ptr.checksum
            )));
        }
        Ok(whole.slice_ref(data))
    }

    /// Reads runs of blocks of a segments volume: each run split where its blocks stop
    /// being neighbours in one segment, one ranged GET per piece, [`READS_AT_ONCE`] at a
    /// time, every record verified against its pointer; holes are zeros. A commit may
    /// replace a segment (and delete it) between the map lookup and the GET: then the map
    /// names the new place, and the block is read there.
    pub(super) fn fetch_runs_segments(&self, runs: &[Range<u64>]) -> io::Result<Vec<Vec<Bytes>>> {
        let bs = self.block_bytes() as usize;
        let rec = self.geometry.record_bytes();
        let zeros = Bytes::from(vec![0u8; bs]);
        let mut out: Vec<Vec<Option<Bytes>>> = runs
            .iter()
            .map(|r| vec![None; (r.end - r.start) as usize])
            .collect();
        let mut tried: Vec<Vec<BlockPtr>> = runs
            .iter()
            .map(|r| vec![BlockPtr::default(); (r.end - r.start) as usize])
            .collect();
        let mut met_gone = false;
        for _ in 0..4 {
            // A follower that met a segment gone has an older map than the writer's last
            // commit (which emptied it): it follows the root before it looks again.
            if std::mem::take(&mut met_gone) && self.follower {
                let _ = self.follow();
            }
            // (run, first block's index in it, pointers of the piece)
            let mut pieces: Vec<(usize, usize, Vec<BlockPtr>)> = Vec::new();
            {
                let map = self.map.read().expect("map lock");
                let blocks = map.blocks();
                for (i, run) in runs.iter().enumerate() {
                    for (j, block) in run.clone().enumerate() {
                        if out[i][j].is_some() {
                            continue;
                        }
                        let ptr = blocks.get(block);
                        if !ptr.exists() {
                            out[i][j] = Some(zeros.clone());
                            continue;
                        }
                        if ptr == tried[i][j] {
                            return Err(self.missing_segment(block, ptr));
                        }
                        tried[i][j] = ptr;
                        match pieces.last_mut() {
                            Some((pi, pj, ptrs))
                                if *pi == i
                                    && *pj + ptrs.len() == j
                                    && ptrs.last().is_some_and(|l| {
                                        l.segment() == ptr.segment() && l.slot + 1 == ptr.slot
                                    }) =>
                            {
                                ptrs.push(ptr)
                            }
                            _ => pieces.push((i, j, vec![ptr])),
                        }
                    }
                }
            }
            if pieces.is_empty() {
                break;
            }
            let gets: Vec<_> = pieces
                .into_iter()
                .map(|(i, j, ptrs)| {
                    let store = Arc::clone(&self.store);
                    let path = self.path(&layout::segment_name(ptrs[0].segment()));
                    let first = u64::from(ptrs[0].slot);
                    let range = first * rec..(first + ptrs.len() as u64) * rec;
                    async move { (i, j, ptrs, store.get_range(&path, range).await) }
                })
                .collect();
            let answers = self.run_gets(gets);
            for (i, j, ptrs, answer) in answers {
                let name = layout::segment_name(ptrs[0].segment());
                match answer {
                    Ok(bytes) => {
                        self.stats
                            .get_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        if bytes.len() as u64 != ptrs.len() as u64 * rec {
                            self.stats.errors.fetch_add(1, Ordering::Relaxed);
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "{}/{name}: {} bytes answered for a range of {}",
                                    self.display,
                                    bytes.len(),
                                    ptrs.len() as u64 * rec
                                ),
                            ));
                        }
                        for (k, (record, ptr)) in
                            bytes.chunks_exact(rec as usize).zip(&ptrs).enumerate()
                        {
                            let block = runs[i].start + (j + k) as u64;
                            out[i][j + k] =
                                Some(self.verified_record(&bytes, record, block, *ptr, &name)?);
                        }
                    }
                    Err(object_store::Error::NotFound { .. }) => met_gone = true,
                    Err(err) => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        return Err(store_error(&format!("{}/{name}", self.display), err));
                    }
                }
            }
        }
        out.into_iter()
            .zip(runs)
            .zip(tried)
            .map(|((blocks, run), tried)| {
                blocks
                    .into_iter()
                    .zip(run.clone())
                    .zip(tried)
                    .map(|((b, block), ptr)| b.ok_or_else(|| self.missing_segment(block, ptr)))
                    .collect()
            })
            .collect()
    }

    /// The error of a segment the map names that the store does not have.
    fn missing_segment(&self, block: u64, ptr: BlockPtr) -> io::Error {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{}/{}: missing, though commit {} names it for block {block}",
                self.display,
                layout::segment_name(ptr.segment()),
                ptr.seq
            ),
        )
    }

    /// Byte ranges of `offset..end` (the caller clipped it to the volume) that are holes
    /// in a segments volume: blocks no pointer names, less those staged.
    pub(super) fn holes_segments(&self, offset: u64, end: u64) -> Vec<Range<u64>> {
        let bs = self.block_bytes();
        let map = self.map.read().expect("map lock");
        let blocks = map.blocks();
        let staged = self.staged.lock().expect("staged lock");
        let mut holes: Vec<Range<u64>> = Vec::new();
        let mut block = offset / bs;
        while block * bs < end {
            let page = block / PAGE_BLOCKS;
            let page_end = ((page + 1) * PAGE_BLOCKS).min(end.div_ceil(bs));
            let whole_page_hole = !blocks.pages.contains_key(&page);
            for b in block..page_end {
                let hole = (whole_page_hole || !blocks.get(b).exists()) && !staged.contains_key(&b);
                if hole {
                    let from = (b * bs).max(offset);
                    let to = ((b + 1) * bs).min(end);
                    super::push_run(&mut holes, from..to);
                }
            }
            block = page_end;
        }
        holes
    }

    /// The blocks of `window` around `block` (which it holds) whose records sit next to
    /// `block`'s in its segment, in the same order: one ranged GET reads them all. Just
    /// `block` when it is a hole.
    pub(super) fn record_neighbours_segments(&self, block: u64, window: Range<u64>) -> Range<u64> {
        let map = self.map.read().expect("map lock");
        let blocks = map.blocks();
        let ptr = blocks.get(block);
        if !ptr.exists() {
            return block..block + 1;
        }
        // Whether block `b`'s record is record `slot` of `block`'s segment.
        let at = |b: u64, slot: u32| {
            let p = blocks.get(b);
            p.exists() && p.segment() == ptr.segment() && p.slot == slot
        };
        let (mut start, mut first) = (block, ptr.slot);
        while start > window.start && first > 0 && at(start - 1, first - 1) {
            start -= 1;
            first -= 1;
        }
        let (mut end, mut last) = (block + 1, ptr.slot);
        while end < window.end && last < u32::MAX && at(end, last + 1) {
            end += 1;
            last += 1;
        }
        start..end
    }

    /// The live share of a segments volume: bytes of records the map's segments hold, and
    /// of those the bytes of live ones; and the segments.
    pub fn segment_usage(&self) -> Option<(u64, u64, u64)> {
        let map = self.map.read().expect("map lock");
        let blocks = map.segments_map()?;
        let rec = self.geometry.record_bytes();
        let (stored, live) = blocks.records();
        Some((stored * rec, live * rec, blocks.segments()))
    }
}
