//! The block map of a segments volume: where each block lives (the saved block-map pages
//! by their refs, read through `pages` when a lookup needs one, and the pointers changed
//! since the last checkpoint), the live count of every segment, and lookups of pointers
//! that never wait for the store under the map's lock. The commits, reads and repacking
//! that use it are in `segments`.
//!
//! Memory: a ref per saved page, [`CHANGED_PTR_MEM`] bytes per pointer changed since the
//! last checkpoint, and [`SEGMENT_MEM`] bytes a segment. A writer reads every page once
//! after an open, to count each segment's live records (before the open returns, or in
//! the background for a large map: [`Count`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::Arc;

use super::pages::{MapPages, Page};
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
    /// (`ObjectVolume::count_step`); until then nothing is repacked, no segment is
    /// deleted, and no live share is reported.
    Later,
    /// Not counted (a follower).
    Never,
}

/// Looks pointers up, keeping the last page it used: a run of neighbouring blocks looks
/// its page up once. [`Pointers::want`] never reads the store: it notes the pages no cache
/// has, which `ObjectVolume::with_pointers` reads without the map's lock before it looks
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
                let what = format!("{display}/{}", layout::block_page_name(r.page, r.version));
                self.count_page(page.entries(), &what)?;
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

    /// Counts the pointers of a page (`what` names it in the error): one whose segment
    /// another pointer names with another record count, or that counts more live records
    /// than its segment holds, is an error.
    fn count_page(&mut self, entries: Vec<BlockPtr>, what: &str) -> io::Result<()> {
        for p in entries.into_iter().filter(BlockPtr::exists) {
            self.count(p).map_err(|segment| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{what}: its pointers into {} disagree with the other pages' on the \
                         segment's size, or name more records than it holds",
                        layout::segment_name(segment)
                    ),
                )
            })?;
        }
        Ok(())
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
            let what = format!("{display}: block-map page {page}");
            if let Err(err) = self.count_page(entries, &what) {
                self.counted = false;
                self.count_below = None;
                return Err(io::Error::new(
                    err.kind(),
                    format!(
                        "{err}; the volume's segments are not counted, so none is repacked or \
                         deleted"
                    ),
                ));
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
