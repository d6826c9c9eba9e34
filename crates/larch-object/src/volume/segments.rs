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
//! Memory: the map keeps a ref per saved block-map page (the pages themselves are read
//! through a cache, `pages`: the engine's ARC, as metadata), the pointers changed since
//! the last checkpoint ([`CHANGED_PTR_MEM`] bytes each), and [`SEGMENT_MEM`] bytes a
//! segment. A writer reads every page once after an open, to count each segment's live
//! records (before the open returns, or in the background for a large map: [`Count`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt};
use object_store::ObjectStoreExt;

use super::pages::{MapPages, Page};
use super::{Committed, Hazard, LogEdit, ObjectVolume, TreeEdit, store_error, uploads_at_once};
use crate::layout::{self, BlockPtr, PAGE_BLOCKS, PageRef, SegmentId};

/// Bytes a changed pointer takes in memory (the pointer, its block number, and the
/// tree's share).
pub const CHANGED_PTR_MEM: u64 = std::mem::size_of::<BlockPtr>() as u64 + 24;

/// Bytes a segment's count takes in memory.
pub const SEGMENT_MEM: u64 = 32;

/// Bytes a saved page's ref takes in memory.
const SAVED_REF_MEM: u64 = std::mem::size_of::<PageRef>() as u64 + 16;

/// Pages read at once while an open counts the segments: what the count holds besides
/// the cache. Also a background count's round (see `Options::count_round_pages`).
pub const COUNT_BATCH: usize = 256;

/// Block-map pages a look for holes covers per hold of the map's lock (the pages it read
/// for them are held until the next).
const HOLE_PAGES: u64 = 64;

/// What the map knows of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    /// Records it holds.
    pub records: u32,
    /// Of those, records some pointer of the map names.
    pub live: u32,
}

/// The block pointers of a segments volume (see the module comment): the saved pages by
/// their refs (a page never written is absent: its blocks are holes), the pointers changed
/// since they were written, and the live count of every segment they name.
pub(super) struct BlockMap {
    /// The refs of the saved pages: the tree's map pages, as the last checkpoint left them.
    saved: BTreeMap<u64, PageRef>,
    /// Pointers that differ, or may, from the saved pages' (the map logs changed them, or
    /// a commit pinned them before changing them): what the next checkpoint writes.
    changed: BTreeMap<u64, BlockPtr>,
    pages: Arc<MapPages>,
    segments: HashMap<SegmentId, Segment>,
    stored_records: u64,
    live_records: u64,
    /// The map counts. A follower does not (it neither repacks nor deletes), and reports
    /// no counts.
    counted: bool,
    /// Counting in the background after an open: the pages below this one are counted
    /// (their pointers' changes are counted as they are made), the others will be, with
    /// the pointers they hold then. `None`: every page is.
    count_below: Option<u64>,
}

/// How an open counts the segments' live records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Count {
    /// Every page read and counted before the open returns.
    Now,
    /// Counted by a thread of the volume's after the open returns
    /// ([`ObjectVolume::count_step`]); until then nothing is repacked, no segment is
    /// deleted, and no live share is reported.
    Later,
    /// Not counted (a follower).
    Never,
}

/// Looks pointers up, keeping the last page it used: a run of neighbouring blocks looks
/// its page up once. [`Pointers::want`] never reads the store: it notes the pages no cache
/// has, which [`ObjectVolume::with_pointers`] reads without the map's lock before it looks
/// again; [`Pointers::get`] reads them on the spot (opens, and followers' swaps, which
/// read their pages beforehand).
pub(super) struct Pointers<'a> {
    map: &'a BlockMap,
    last: Option<(u64, Option<Page>)>,
    /// Pages read for this lookup beforehand.
    held: &'a [Page],
    /// Pages `want` needed that neither a cache nor `held` had.
    missing: Vec<PageRef>,
}

impl Pointers<'_> {
    /// The page `r` names, if a cache or the held pages have it.
    fn cached(&self, r: &PageRef) -> Option<Page> {
        let held = self.held.iter().find(|p| p.is(r)).cloned();
        held.or_else(|| self.map.pages.cached(r))
    }

    /// Where `block` lives (a hole: the default pointer), or the ref of the page that
    /// says, which no cache has.
    fn find(&mut self, block: u64) -> Result<BlockPtr, PageRef> {
        if let Some(ptr) = self.map.changed.get(&block) {
            return Ok(*ptr);
        }
        let page = block / PAGE_BLOCKS;
        if !matches!(&self.last, Some((p, _)) if *p == page) {
            let found = match self.map.saved.get(&page) {
                Some(r) => Some(self.cached(r).ok_or(*r)?),
                None => None,
            };
            self.last = Some((page, found));
        }
        Ok(match &self.last {
            Some((_, Some(p))) => p.ptr((block % PAGE_BLOCKS) as usize),
            _ => BlockPtr::default(),
        })
    }

    /// Where `block` lives; `None` when its page is in no cache (noted as missing).
    pub fn want(&mut self, block: u64) -> Option<BlockPtr> {
        match self.find(block) {
            Ok(ptr) => Some(ptr),
            Err(r) => {
                self.note_missing(r);
                None
            }
        }
    }

    fn note_missing(&mut self, r: PageRef) {
        if !self.missing.iter().any(|m| m.page == r.page) {
            self.missing.push(r);
        }
    }

    /// The pointers of page `page` (all holes when it was never written); `None` when
    /// its saved page is in no cache (noted as missing).
    pub fn entries(&mut self, page: u64) -> Option<Vec<BlockPtr>> {
        let mut entries = match self.map.saved.get(&page) {
            Some(r) => match self.cached(r) {
                Some(p) => p.entries(),
                None => {
                    self.note_missing(*r);
                    return None;
                }
            },
            None => vec![BlockPtr::default(); PAGE_BLOCKS as usize],
        };
        let first = page * PAGE_BLOCKS;
        for (&block, ptr) in self.map.changed.range(first..first + PAGE_BLOCKS) {
            entries[(block - first) as usize] = *ptr;
        }
        Some(entries)
    }

    /// Where `block` lives, reading its page from the store if no cache has it.
    pub fn get(&mut self, block: u64) -> io::Result<BlockPtr> {
        match self.find(block) {
            Ok(ptr) => Ok(ptr),
            Err(r) => {
                let page = self.map.pages.page(&r)?;
                let ptr = page.ptr((block % PAGE_BLOCKS) as usize);
                self.last = Some((r.page, Some(page)));
                Ok(ptr)
            }
        }
    }

    /// The pages `want` and `entries` found missing.
    pub fn missing(self) -> Vec<PageRef> {
        self.missing
    }
}

impl BlockMap {
    /// An empty map whose pages `pages` reads.
    pub fn new(pages: Arc<MapPages>) -> BlockMap {
        BlockMap {
            saved: BTreeMap::new(),
            changed: BTreeMap::new(),
            pages,
            segments: HashMap::new(),
            stored_records: 0,
            live_records: 0,
            counted: true,
            count_below: None,
        }
    }

    /// The map of the saved pages `refs` (an open). With [`Count::Now`] (a writer, which
    /// repacks and deletes segments by their counts), every page is read once to count the
    /// segments' live records, and a pointer whose segment another pointer names with
    /// another record count, or that counts more live records than its segment holds, is
    /// refused; otherwise no page is read now (see [`Count`]).
    pub fn load(&mut self, refs: &[PageRef], display: &str, count: Count) -> io::Result<()> {
        for r in refs {
            self.saved.insert(r.page, *r);
        }
        match count {
            Count::Now => {}
            Count::Later => {
                self.count_below = Some(0);
                return Ok(());
            }
            Count::Never => {
                self.counted = false;
                return Ok(());
            }
        }
        for batch in refs.chunks(COUNT_BATCH) {
            for (r, page) in batch.iter().zip(self.pages.pages(batch)?) {
                let page = page.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "{display}/{}: missing, though the root names it",
                            layout::block_page_name(r.page, r.version)
                        ),
                    )
                })?;
                for i in 0..PAGE_BLOCKS as usize {
                    let p = page.ptr(i);
                    if p.exists() {
                        self.count(p).map_err(|segment| {
                            io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "{display}/{}: its pointers into {} disagree with the other \
                                     pages' on the segment's size, or name more records than it \
                                     holds",
                                    layout::block_page_name(r.page, r.version),
                                    layout::segment_name(segment)
                                ),
                            )
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A lookup of pointers that also finds the pages `held` (read beforehand).
    pub fn pointers_with<'a>(&'a self, held: &'a [Page]) -> Pointers<'a> {
        Pointers {
            map: self,
            last: None,
            held,
            missing: Vec::new(),
        }
    }

    /// Whether page `page` holds no pointer for sure: never saved and none changed.
    pub fn page_is_hole(&self, page: u64) -> bool {
        let first = page * PAGE_BLOCKS;
        !self.saved.contains_key(&page)
            && self
                .changed
                .range(first..first + PAGE_BLOCKS)
                .next()
                .is_none()
    }

    /// Pages holding changed pointers: what the next checkpoint writes.
    pub fn unsaved(&self) -> BTreeSet<u64> {
        self.changed.keys().map(|b| b / PAGE_BLOCKS).collect()
    }

    /// Pins the pointers of `blocks` in memory (reading their pages as needed), so that
    /// [`BlockMap::set`] knows what each replaces without a read.
    pub fn pin(&mut self, blocks: &[u64]) -> io::Result<()> {
        let mut found = Vec::new();
        let mut lookup = self.pointers_with(&[]);
        for &block in blocks {
            if !self.changed.contains_key(&block) {
                found.push((block, lookup.get(block)?));
            }
        }
        self.pin_found(found);
        Ok(())
    }

    /// The pointers [`BlockMap::pin`] would pin, looked up in `lookup` (which notes the
    /// pages it lacks; the list is then partial).
    pub fn to_pin(&self, blocks: &[u64], lookup: &mut Pointers<'_>) -> Vec<(u64, BlockPtr)> {
        blocks
            .iter()
            .filter(|b| !self.changed.contains_key(b))
            .filter_map(|&b| lookup.want(b).map(|ptr| (b, ptr)))
            .collect()
    }

    /// Pins pointers [`BlockMap::to_pin`] found, unless the map changed them since.
    pub fn pin_found(&mut self, found: Vec<(u64, BlockPtr)>) {
        for (block, ptr) in found {
            self.changed.entry(block).or_insert(ptr);
        }
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

    /// Replaces saved page `r.page` with the page `r` names, `new` (a follower following
    /// commits after commit `since`, a checkpoint among them; its map keeps no counts);
    /// `old` is the page it replaces, as read. Changed pointers of the page are dropped (a
    /// checkpoint wrote them). Returns the blocks whose pointers may have changed: those
    /// that differ from `old`'s; or, when `old` is gone from the store (its writer deleted
    /// it, and no cache holds it), those born after `since` and the holes (a hole carries
    /// no birth).
    pub fn replace_page(
        &mut self,
        r: &PageRef,
        new: &Page,
        old: Option<&Page>,
        since: u64,
    ) -> Vec<u64> {
        debug_assert!(!self.counted, "only a follower's map swaps pages");
        let first = r.page * PAGE_BLOCKS;
        let changed: Vec<(u64, BlockPtr)> = self
            .changed
            .range(first..first + PAGE_BLOCKS)
            .map(|(b, p)| (*b, *p))
            .collect();
        let was_saved = self.saved.contains_key(&r.page);
        let before = |i: usize| -> Option<BlockPtr> {
            let block = first + i as u64;
            if let Ok(at) = changed.binary_search_by_key(&block, |(b, _)| *b) {
                return Some(changed[at].1);
            }
            match old {
                Some(page) => Some(page.ptr(i)),
                None if was_saved => None,
                None => Some(BlockPtr::default()),
            }
        };
        let differs = |i: usize| {
            let now = new.ptr(i);
            match before(i) {
                Some(before) => before != now,
                None => !now.exists() || now.seq > since,
            }
        };
        let blocks: Vec<u64> = (0..PAGE_BLOCKS as usize)
            .filter(|&i| differs(i))
            .map(|i| first + i as u64)
            .collect();
        self.saved.insert(r.page, *r);
        for (block, _) in &changed {
            self.changed.remove(block);
        }
        blocks
    }

    /// Applies a map log read from the store (an open, a follower following a commit):
    /// each block pointed where the log says. Returns the blocks whose pointers changed.
    /// A map that counts (a writer's) reads the pointers the log replaces; a pointer whose
    /// segment the map names with another record count, or that would count more live
    /// records than its segment holds, is refused, and the entries before it stay applied
    /// (the caller drops the map). A follower's map reads nothing: every block the log
    /// names counts as changed.
    pub fn apply_log(
        &mut self,
        entries: &[(u64, BlockPtr)],
    ) -> io::Result<Result<Vec<u64>, SegmentId>> {
        if !self.counted {
            self.changed.extend(entries.iter().copied());
            return Ok(Ok(entries.iter().map(|&(block, _)| block).collect()));
        }
        let blocks: Vec<u64> = entries.iter().map(|&(block, _)| block).collect();
        self.pin(&blocks)?;
        let mut changed = Vec::new();
        for &(block, ptr) in entries {
            let now = self.changed[&block];
            if now == ptr {
                continue;
            }
            if ptr.exists() {
                let fits = self
                    .segments
                    .get(&ptr.segment())
                    .is_none_or(|s| s.records == ptr.records && s.live < s.records);
                if !fits {
                    return Ok(Err(ptr.segment()));
                }
            }
            self.set(block, ptr);
            changed.push(block);
        }
        Ok(Ok(changed))
    }

    /// Takes one live record of `p`'s segment off its count; returns the segment when
    /// that was its last.
    fn uncount(&mut self, p: BlockPtr) -> Option<SegmentId> {
        let id = p.segment();
        let complete = self.count_below.is_none();
        let seg = self.segments.get_mut(&id)?;
        seg.live -= 1;
        self.live_records -= 1;
        // While the count is not complete, pages not counted yet may still point into it.
        if seg.live > 0 || !complete {
            return None;
        }
        self.stored_records -= u64::from(seg.records);
        self.segments.remove(&id);
        Some(id)
    }

    /// Points `block`, pinned before ([`BlockMap::pin`]), at `ptr` (a hole: the default).
    /// Returns the segment that no pointer names any more, if the block's old one was its
    /// last.
    pub fn set(&mut self, block: u64, ptr: BlockPtr) -> Option<SegmentId> {
        let old = self
            .changed
            .insert(block, ptr)
            .expect("a block is pinned before it is set");
        // A page the background count has not reached is counted with the pointers it
        // holds when it is.
        if !self.counted || !self.page_counted(block / PAGE_BLOCKS) {
            return None;
        }
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

    /// Whether a page from `c` on holds pointers (saved, or changed since).
    fn has_pages_from(&self, c: u64) -> bool {
        self.saved.range(c..).next().is_some()
            || self
                .changed
                .range(c.saturating_mul(PAGE_BLOCKS)..)
                .next()
                .is_some()
    }

    /// Whether page `page`'s pointers are counted.
    fn page_counted(&self, page: u64) -> bool {
        self.count_below.is_none_or(|c| page < c)
    }

    /// Whether the counts are complete and trusted.
    fn complete(&self) -> bool {
        self.counted && self.count_below.is_none()
    }

    /// The saved pages the background count needs next (at most `round`, in order);
    /// empty when it needs none (done, or not counting).
    pub fn count_wants(&self, round: usize) -> Vec<PageRef> {
        match self.count_below {
            Some(c) if self.counted => self.saved.range(c..).take(round).map(|(_, r)| *r).collect(),
            _ => Vec::new(),
        }
    }

    /// Counts the pages from where the background count stands, in order, with the
    /// pointers they hold now, as far as `held` (pages read for it) and the cache have
    /// them. Returns the segments found dead once every page is counted (`Some`, and the
    /// count is complete); `None` while pages remain. A count that finds the pages
    /// disagreeing (damage) stops: the map counts no more, so nothing is repacked or
    /// deleted by its counts; the error says which page.
    pub fn count_some(
        &mut self,
        held: &[Page],
        round: usize,
        display: &str,
    ) -> io::Result<Option<Vec<SegmentId>>> {
        // Nothing to count (done, or a map that does not count): done.
        let (true, Some(mut c)) = (self.counted, self.count_below) else {
            return Ok(Some(Vec::new()));
        };
        // At most a round's pages per call: the caller holds the map's lock.
        for _ in 0..round {
            // The next page holding pointers: saved, or with pointers changed since.
            let saved = self.saved.range(c..).next().map(|(p, r)| (*p, *r));
            let changed = self
                .changed
                .range(c.saturating_mul(PAGE_BLOCKS)..)
                .next()
                .map(|(b, _)| b / PAGE_BLOCKS);
            let page = match (saved.map(|(p, _)| p), changed) {
                (None, None) => {
                    c = u64::MAX;
                    break;
                }
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
            };
            let entries = {
                let mut lookup = self.pointers_with(held);
                match lookup.entries(page) {
                    Some(entries) => entries,
                    // Not read yet (or replaced by a checkpoint since): the next round.
                    None => {
                        self.count_below = Some(page);
                        return Ok(None);
                    }
                }
            };
            for p in entries.into_iter().filter(|p| p.exists()) {
                if let Err(segment) = self.count(p) {
                    self.counted = false;
                    self.count_below = None;
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{display}: block-map page {page}: its pointers into {} disagree \
                             with the other pages' on the segment's size, or name more \
                             records than it holds; the volume's segments are not counted, \
                             so none is repacked or deleted",
                            layout::segment_name(segment)
                        ),
                    ));
                }
            }
            c = page + 1;
            self.count_below = Some(c);
        }
        if self.has_pages_from(c) {
            return Ok(None);
        }
        // Every page counted: the segments no pointer names are dead.
        self.count_below = None;
        let dead: Vec<SegmentId> = self
            .segments
            .iter()
            .filter(|(_, s)| s.live == 0)
            .map(|(id, _)| *id)
            .collect();
        for id in &dead {
            let seg = self.segments.remove(id).expect("listed above");
            self.stored_records -= u64::from(seg.records);
        }
        Ok(Some(dead))
    }

    /// A checkpoint landed that saved pages `refs` (with `entries`, the pointers they
    /// hold): they replace the saved pages, and no pointer is changed any more. The pages
    /// are kept in the cache, which would otherwise read them back.
    pub fn checkpointed(&mut self, refs: &[PageRef], entries: &BTreeMap<u64, Vec<BlockPtr>>) {
        for r in refs {
            self.saved.insert(r.page, *r);
            if let Some(entries) = entries.get(&r.page) {
                self.pages.keep(r, entries);
            }
        }
        self.changed.clear();
    }

    /// Whether the map names segment `id`.
    pub fn names(&self, id: SegmentId) -> bool {
        // Counts not complete or not trusted: every segment may be named.
        !self.complete() || self.segments.contains_key(&id)
    }

    /// Segments whose live records are below `percent` % of their records, the sparsest
    /// first.
    pub fn sparse(&self, percent: u8) -> Vec<(SegmentId, Segment)> {
        if !self.complete() {
            return Vec::new();
        }
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

    /// Bytes it takes in memory (the volume's own page cache included; an attached cache
    /// counts its own).
    pub fn bytes(&self) -> u64 {
        self.saved.len() as u64 * SAVED_REF_MEM
            + self.changed.len() as u64 * CHANGED_PTR_MEM
            + self.segments.len() as u64 * SEGMENT_MEM
            + self.pages.local_bytes()
    }

    /// Records in the segments the map names, and of those the live ones (`None` when a
    /// follower lost the count).
    pub fn records(&self) -> Option<(u64, u64)> {
        self.complete()
            .then_some((self.stored_records, self.live_records))
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
    /// One round of the background count ([`Count::Later`]): the next pages read (without
    /// the map's lock) and counted (under it). Returns whether the count is done; the
    /// segments it then finds dead are deleted.
    pub(super) fn count_step(&self) -> io::Result<bool> {
        let round = self.options.count_round_pages.max(1);
        let wants = self
            .map
            .read()
            .expect("map lock")
            .blocks()
            .count_wants(round);
        let held: Vec<Page> = self
            .map_pages
            .pages(&wants)?
            .into_iter()
            .flatten()
            .collect();
        let dead = self
            .map
            .write()
            .expect("map lock")
            .blocks_mut()
            .count_some(&held, round, &self.display)?;
        let Some(dead) = dead else {
            return Ok(false);
        };
        if !dead.is_empty() {
            self.stats
                .segments_freed
                .fetch_add(dead.len() as u64, Ordering::Relaxed);
            self.delete_later(dead.into_iter().map(layout::segment_name).collect());
        }
        Ok(true)
    }

    /// Runs `f` on the map with a lookup of pointers under a shared hold of the map's
    /// lock, and returns what it returns once it ran with every page it looked for: the
    /// pages its lookup found in no cache are read from the store without the lock (all
    /// of a round's at once), held for the next round, and `f` runs again. So no request
    /// to the store waits under the map's lock, which commits and follows need.
    pub(super) fn with_pointers<T>(
        &self,
        mut f: impl FnMut(&BlockMap, &mut Pointers<'_>) -> T,
    ) -> io::Result<T> {
        let mut held: Vec<Page> = Vec::new();
        let mut fruitless = 0;
        loop {
            let missing = {
                let map = self.map.read().expect("map lock");
                let blocks = map.blocks();
                let mut lookup = blocks.pointers_with(&held);
                let out = f(blocks, &mut lookup);
                let missing = lookup.missing();
                if missing.is_empty() {
                    return Ok(out);
                }
                missing
            };
            let before = held.len();
            // A page gone from the store was superseded since: by a checkpoint of this
            // node's (the next round finds the map's new ref), or of the writer a follower
            // follows (the follower follows the root at once, as when it meets a segment
            // gone). Three rounds in a row without one page read: an error.
            held.extend(self.map_pages.pages(&missing)?.into_iter().flatten());
            if held.len() == before {
                if self.follower {
                    let _ = self.follow();
                }
                fruitless += 1;
                if fruitless == 3 {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "{}/{}: missing, though the map names it",
                            self.display,
                            layout::block_page_name(missing[0].page, missing[0].version)
                        ),
                    ));
                }
            } else {
                fruitless = 0;
            }
        }
    }

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
        let (writes, holes) = self.changes(staged, moves)?;
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
        // The pointers the commit replaces are pinned, so that applying it once the root
        // landed reads nothing.
        let blocks: Vec<u64> = pointers.iter().map(|&(block, _)| block).collect();
        let found = self.with_pointers(|map, lookup| map.to_pin(&blocks, lookup))?;
        self.map
            .write()
            .expect("map lock")
            .blocks_mut()
            .pin_found(found);
        let (edit, log, map_jobs, saved) = self.map_uploads(&pointers, version, checkpoint)?;
        let saved_refs = edit.written.first().cloned().unwrap_or_default();
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
                blocks.checkpointed(&saved_refs, &saved);
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
    fn changes(
        &self,
        staged: &BTreeMap<u64, Bytes>,
        moves: Vec<Write>,
    ) -> io::Result<(Vec<Write>, Vec<u64>)> {
        let mut writes: Vec<Write> = Vec::with_capacity(staged.len() + moves.len());
        for (&block, data) in staged {
            if !is_zeros(data) {
                writes.push(Write {
                    block,
                    data: data.clone(),
                });
            }
        }
        let holes = self.with_pointers(|_, lookup| {
            staged
                .iter()
                .filter(|(_, data)| is_zeros(data))
                .filter(|&(&block, _)| lookup.want(block).is_some_and(|p| p.exists()))
                .map(|(&block, _)| block)
                .collect::<Vec<u64>>()
        })?;
        writes.extend(moves);
        writes.sort_unstable_by_key(|w| w.block);
        Ok((writes, holes))
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
    /// does with its logs, the uploads, and the pointers of the pages a checkpoint writes.
    #[allow(clippy::type_complexity)]
    fn map_uploads(
        &self,
        pointers: &[(u64, BlockPtr)],
        version: layout::Version,
        checkpoint: bool,
    ) -> io::Result<(
        TreeEdit,
        LogEdit,
        Vec<BoxFuture<'static, io::Result<()>>>,
        BTreeMap<u64, Vec<BlockPtr>>,
    )> {
        if checkpoint {
            let mut pages: BTreeMap<u64, Vec<BlockPtr>> =
                self.with_pointers(|blocks, lookup| {
                    let mut wanted = blocks.unsaved();
                    wanted.extend(pointers.iter().map(|&(block, _)| block / PAGE_BLOCKS));
                    wanted
                        .into_iter()
                        .filter_map(|page| lookup.entries(page).map(|e| (page, e)))
                        .collect()
                })?;
            for &(block, ptr) in pointers {
                let entries = pages.get_mut(&(block / PAGE_BLOCKS)).expect("read above");
                entries[(block % PAGE_BLOCKS) as usize] = ptr;
            }
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
            return Ok((edit, LogEdit::Clear, jobs, pages));
        }
        if pointers.is_empty() {
            return Ok((
                TreeEdit::default(),
                LogEdit::Keep,
                Vec::new(),
                BTreeMap::new(),
            ));
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
        Ok((
            TreeEdit::default(),
            LogEdit::Append(next),
            vec![job],
            BTreeMap::new(),
        ))
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
        let mut read: Vec<(SegmentId, String, Bytes)> = Vec::with_capacity(answers.len());
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
            read.push((id, name, bytes));
        }
        // The live records: (segment read, record, block, its pointer).
        let live = self.with_pointers(|_, lookup| {
            let mut live: Vec<(usize, usize, u64, BlockPtr)> = Vec::new();
            for (i, (id, _, bytes)) in read.iter().enumerate() {
                for (slot, record) in bytes.chunks_exact(rec as usize).enumerate() {
                    let Some(block) = layout::record_block(record, bs) else {
                        continue;
                    };
                    let Some(ptr) = lookup.want(block) else {
                        continue;
                    };
                    let is_live = ptr.exists()
                        && ptr.segment() == *id
                        && ptr.slot as usize == slot
                        && !staged.contains_key(&block);
                    if is_live {
                        live.push((i, slot, block, ptr));
                    }
                }
            }
            live
        })?;
        let mut moves = Vec::with_capacity(live.len());
        for (i, slot, block, ptr) in live {
            let (_, name, bytes) = &read[i];
            let record = &bytes[slot * rec as usize..(slot + 1) * rec as usize];
            let data = self.verified_record(bytes, record, block, ptr, name)?;
            moves.push(Write { block, data });
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
            // The pointers of the blocks not read yet (`None`: read).
            let found: Vec<Vec<Option<BlockPtr>>> = self.with_pointers(|_, lookup| {
                runs.iter()
                    .zip(&out)
                    .map(|(run, done)| {
                        run.clone()
                            .zip(done)
                            .map(|(block, done)| match done {
                                Some(_) => None,
                                None => Some(lookup.want(block).unwrap_or_default()),
                            })
                            .collect()
                    })
                    .collect()
            })?;
            // (run, first block's index in it, pointers of the piece)
            let mut pieces: Vec<(usize, usize, Vec<BlockPtr>)> = Vec::new();
            for (i, run) in runs.iter().enumerate() {
                for (j, block) in run.clone().enumerate() {
                    let Some(ptr) = found[i][j] else {
                        continue;
                    };
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
    pub(super) fn holes_segments(&self, offset: u64, end: u64) -> io::Result<Vec<Range<u64>>> {
        let bs = self.block_bytes();
        let last = end.div_ceil(bs);
        let mut holes: Vec<Range<u64>> = Vec::new();
        let mut from_block = offset / bs;
        // [`HOLE_PAGES`] block-map pages at a time: the pages read for a round are held
        // until it ends.
        while from_block < last {
            let to_block = ((from_block / PAGE_BLOCKS + HOLE_PAGES) * PAGE_BLOCKS).min(last);
            let found = self.with_pointers(|blocks, lookup| {
                let staged = self.staged.lock().expect("staged lock");
                let mut found: Vec<Range<u64>> = Vec::new();
                let mut block = from_block;
                while block < to_block {
                    let page = block / PAGE_BLOCKS;
                    let page_end = ((page + 1) * PAGE_BLOCKS).min(to_block);
                    let whole_page_hole = blocks.page_is_hole(page);
                    for b in block..page_end {
                        let hole = whole_page_hole || lookup.want(b).is_some_and(|p| !p.exists());
                        if hole && !staged.contains_key(&b) {
                            let from = (b * bs).max(offset);
                            let to = ((b + 1) * bs).min(end);
                            super::push_run(&mut found, from..to);
                        }
                    }
                    block = page_end;
                }
                found
            })?;
            for run in found {
                super::push_run(&mut holes, run);
            }
            from_block = to_block;
        }
        Ok(holes)
    }

    /// The blocks of `window` around `block` (which it holds) whose records sit next to
    /// `block`'s in its segment, in the same order: one ranged GET reads them all. Just
    /// `block` when it is a hole.
    pub(super) fn record_neighbours_segments(&self, block: u64, window: Range<u64>) -> Range<u64> {
        // A pointer that cannot be read now is no neighbour: the block is read alone.
        self.with_pointers(|_, lookup| neighbours(lookup, block, window.clone()))
            .unwrap_or(block..block + 1)
    }

    /// The live share of a segments volume: bytes of records the map's segments hold, and
    /// of those the bytes of live ones; and the segments.
    pub fn segment_usage(&self) -> Option<(u64, u64, u64)> {
        let map = self.map.read().expect("map lock");
        let blocks = map.segments_map()?;
        let rec = self.geometry.record_bytes();
        let (stored, live) = blocks.records()?;
        Some((stored * rec, live * rec, blocks.segments()))
    }
}

/// [`ObjectVolume::record_neighbours_segments`] with `lookup` (a page it lacks: the block
/// alone, and the page noted).
fn neighbours(lookup: &mut Pointers<'_>, block: u64, window: Range<u64>) -> Range<u64> {
    let Some(ptr) = lookup.want(block) else {
        return block..block + 1;
    };
    if !ptr.exists() {
        return block..block + 1;
    }
    // Whether block `b`'s record is record `slot` of `block`'s segment.
    let mut at = |b: u64, slot: u32| {
        lookup
            .want(b)
            .is_some_and(|p| p.exists() && p.segment() == ptr.segment() && p.slot == slot)
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
