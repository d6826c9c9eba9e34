//! The block-map pages of a segments volume, read from the store when a lookup needs one
//! and kept in a cache the caller chooses: the engine's ARC, where they are metadata as
//! ZFS's indirect blocks are (`larch-engine`'s `MapPagesInArc`), or a bounded cache of
//! this crate's own ([`LocalMapCache`]) until one is attached (at open, and for the tools
//! that open a volume without an engine). So a volume's map need not fit in DRAM: what
//! stays in memory for good is a ref per page (the tree), the pointers changed since the
//! last checkpoint, and a count per segment (`segments::BlockMap`).
//!
//! A page in a cache is its verified pointers behind a tag naming the page object they
//! came from ([`Page`]): pages are never rewritten under their names, so a tag that
//! matches the ref the tree holds means the bytes are that page's, and a cached copy of
//! an older version is simply not used (and replaced). A page is verified (envelope,
//! checksum against its ref, every pointer) once, when it is read from the store.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::path::Path as ObjPath;

use super::{ObjectStats, WholeGetError, get_whole, run_on};
use crate::layout::{self, BlockPtr, PAGE_BLOCKS, PageRef};

/// Bytes of a page's head: the seq, token and checksum of the page object, and the
/// number of pointers it keeps ([`DENSE`]: all).
const HEAD_BYTES: usize = 28;

/// The count of a page kept whole.
const DENSE: u32 = u32::MAX;

/// Bytes of a pointer a sparse page keeps: its index in the page, then the pointer.
const SPARSE_ENTRY_BYTES: usize = 4 + layout::BLOCK_PTR_BYTES;

/// The most bytes a cached page takes: its head and every pointer.
pub const CACHED_PAGE_BYTES: u64 = HEAD_BYTES as u64 + PAGE_BLOCKS * layout::BLOCK_PTR_BYTES as u64;

/// Bytes a cached page of `stored` pointers that are not holes takes: sparse pages (the
/// pages of a volume written here and there) keep those only, as ZFS's compressed ARC
/// keeps an indirect block of few pointers in a few bytes.
pub fn cached_page_bytes(stored: usize) -> u64 {
    let sparse = (HEAD_BYTES + stored * SPARSE_ENTRY_BYTES) as u64;
    sparse.min(CACHED_PAGE_BYTES)
}

/// The length of the cached page at the start of `bytes` (its head says how many pointers
/// follow), if `bytes` holds that much: a cache may keep a page with padding after it (the
/// engine's cache devices keep every page at [`CACHED_PAGE_BYTES`]).
pub fn cached_page_len(bytes: &[u8]) -> Option<usize> {
    let count = u32::from_le_bytes(bytes.get(24..HEAD_BYTES)?.try_into().ok()?);
    let len = match count {
        DENSE => CACHED_PAGE_BYTES as usize,
        n => HEAD_BYTES.checked_add((n as usize).checked_mul(SPARSE_ENTRY_BYTES)?)?,
    };
    (len <= bytes.len()).then_some(len)
}

/// The default bound of a volume's own page cache ([`LocalMapCache`]): 1,600 dense pages
/// (the map of 1.6M blocks, 6.4 GiB of 4 KiB blocks), many more sparse ones.
pub const LOCAL_MAP_CACHE_BYTES: u64 = 64 << 20;

/// Where a volume keeps the block-map pages it read (see the module comment). Keys are
/// page numbers; a value is a [`Page`]'s bytes, which the volume checks itself.
pub trait MapCache: Send + Sync {
    /// The bytes kept for page `page`, if any (an access: a hit for the cache's policy).
    fn get(&self, page: u64) -> Option<Bytes>;
    /// Keeps `bytes` for page `page` in place of what was kept (it may drop it at once).
    fn insert(&self, page: u64, bytes: Bytes);
}

/// A bounded cache of pages by CLOCK: each page has a referenced bit that a hit sets, and
/// the hand clears bits until it meets a page whose bit is clear, which goes.
pub struct LocalMapCache {
    max_bytes: u64,
    inner: Mutex<Clock>,
}

#[derive(Default)]
struct Clock {
    pages: HashMap<u64, (Bytes, bool)>,
    ring: std::collections::VecDeque<u64>,
    bytes: u64,
}

impl LocalMapCache {
    /// A cache of at most `max_bytes` of pages (at least one page is kept).
    pub fn new(max_bytes: u64) -> LocalMapCache {
        LocalMapCache {
            max_bytes,
            inner: Mutex::new(Clock::default()),
        }
    }

    /// Bytes of the pages it holds.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().expect("page cache lock").bytes
    }

    /// Takes every page it holds out, the least recently used first.
    fn drain(&self) -> Vec<(u64, Bytes)> {
        let mut clock = self.inner.lock().expect("page cache lock");
        let mut clock = std::mem::take(&mut *clock);
        let ring = std::mem::take(&mut clock.ring);
        ring.into_iter()
            .filter_map(|page| clock.pages.remove(&page).map(|(bytes, _)| (page, bytes)))
            .collect()
    }
}

impl MapCache for LocalMapCache {
    fn get(&self, page: u64) -> Option<Bytes> {
        let mut clock = self.inner.lock().expect("page cache lock");
        let (bytes, referenced) = clock.pages.get_mut(&page)?;
        *referenced = true;
        Some(bytes.clone())
    }

    fn insert(&self, page: u64, bytes: Bytes) {
        let mut clock = self.inner.lock().expect("page cache lock");
        let len = bytes.len() as u64;
        match clock.pages.insert(page, (bytes, false)) {
            Some((old, _)) => clock.bytes -= old.len() as u64,
            None => clock.ring.push_back(page),
        }
        clock.bytes += len;
        while clock.bytes > self.max_bytes && clock.ring.len() > 1 {
            let Some(at) = clock.ring.pop_front() else {
                break;
            };
            let Some((bytes, referenced)) = clock.pages.get_mut(&at) else {
                continue;
            };
            if std::mem::take(referenced) || at == page {
                clock.ring.push_back(at);
                continue;
            }
            let freed = bytes.len() as u64;
            clock.pages.remove(&at);
            clock.bytes -= freed;
        }
    }
}

/// A block-map page as a cache keeps it (verified when it was read): a head naming the
/// page object it was read from and how many pointers follow, then either every pointer
/// (40 bytes each: a dense page) or those that are not holes, each after its index in
/// the page (a sparse page: [`cached_page_bytes`]).
#[derive(Clone)]
pub(super) struct Page(Bytes);

impl Page {
    /// The page of `entries` read from (or written as) the page object `r` names.
    pub fn new(r: &PageRef, entries: &[BlockPtr]) -> Page {
        let stored = entries.iter().filter(|p| p.exists()).count();
        let dense = cached_page_bytes(stored) == CACHED_PAGE_BYTES;
        let mut out = BytesMut::with_capacity(cached_page_bytes(stored) as usize);
        out.put_u64_le(r.version.seq);
        out.put_u64_le(r.version.token);
        out.put_u64_le(r.checksum);
        if dense {
            out.put_u32_le(DENSE);
            for p in entries {
                layout::put_ptr_into(&mut out, p);
            }
        } else {
            out.put_u32_le(stored as u32);
            for (i, p) in entries.iter().enumerate().filter(|(_, p)| p.exists()) {
                out.put_u32_le(i as u32);
                layout::put_ptr_into(&mut out, p);
            }
        }
        Page(out.freeze())
    }

    /// Whether it is the page `r` names.
    pub fn is(&self, r: &PageRef) -> bool {
        Page::tag_is(&self.0, r)
    }

    fn tag_is(bytes: &[u8], r: &PageRef) -> bool {
        if cached_page_len(bytes) != Some(bytes.len()) {
            return false;
        }
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        word(0) == r.version.seq && word(8) == r.version.token && word(16) == r.checksum
    }

    /// The cached bytes `bytes` as the page `r` names, if they are that page's.
    fn of(r: &PageRef, bytes: Bytes) -> Option<Page> {
        Page::tag_is(&bytes, r).then_some(Page(bytes))
    }

    /// The pointers a sparse page keeps (`None`: a dense page).
    fn sparse(&self) -> Option<usize> {
        match u32::from_le_bytes(self.0[24..28].try_into().expect("4 bytes")) {
            DENSE => None,
            n => Some(n as usize),
        }
    }

    /// The index in the page of a sparse page's `k`th pointer.
    fn index_at(&self, k: usize) -> usize {
        let at = HEAD_BYTES + k * SPARSE_ENTRY_BYTES;
        u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes")) as usize
    }

    fn ptr_at(&self, at: usize) -> BlockPtr {
        layout::read_ptr(&self.0[at..at + layout::BLOCK_PTR_BYTES])
    }

    /// The pointer of the page's `i`th block.
    pub fn ptr(&self, i: usize) -> BlockPtr {
        let Some(n) = self.sparse() else {
            return self.ptr_at(HEAD_BYTES + i * layout::BLOCK_PTR_BYTES);
        };
        // The indices are in order: a binary search.
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.index_at(mid).cmp(&i) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return self.ptr_at(HEAD_BYTES + mid * SPARSE_ENTRY_BYTES + 4);
                }
            }
        }
        BlockPtr::default()
    }

    /// Its pointers.
    pub fn entries(&self) -> Vec<BlockPtr> {
        let Some(n) = self.sparse() else {
            return (0..PAGE_BLOCKS as usize).map(|i| self.ptr(i)).collect();
        };
        let mut entries = vec![BlockPtr::default(); PAGE_BLOCKS as usize];
        for k in 0..n {
            // An index past the page is not one this code wrote: no pointer there.
            if let Some(slot) = entries.get_mut(self.index_at(k)) {
                *slot = self.ptr_at(HEAD_BYTES + k * SPARSE_ENTRY_BYTES + 4);
            }
        }
        entries
    }
}

/// Reads a volume's block-map pages through its cache (see the module comment).
pub(super) struct MapPages {
    handle: tokio::runtime::Handle,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    display: String,
    cache: RwLock<Arc<dyn MapCache>>,
    /// The volume's own cache while no other is attached (its bytes are reported).
    local: RwLock<Option<Arc<LocalMapCache>>>,
    stats: Arc<ObjectStats>,
}

impl MapPages {
    /// Pages of the volume under `prefix`, in a cache of its own of `cache_bytes`.
    pub fn new(
        handle: &tokio::runtime::Handle,
        store: &Arc<dyn ObjectStore>,
        prefix: &str,
        display: &str,
        cache_bytes: u64,
        stats: &Arc<ObjectStats>,
    ) -> MapPages {
        let local = Arc::new(LocalMapCache::new(cache_bytes));
        MapPages {
            handle: handle.clone(),
            store: Arc::clone(store),
            prefix: prefix.to_string(),
            display: display.to_string(),
            cache: RwLock::new(Arc::clone(&local) as Arc<dyn MapCache>),
            local: RwLock::new(Some(local)),
            stats: Arc::clone(stats),
        }
    }

    /// Keeps pages in `cache` from now on; the pages of the volume's own cache move to it.
    pub fn attach(&self, cache: Arc<dyn MapCache>) {
        *self.cache.write().expect("page cache lock") = Arc::clone(&cache);
        let local = self.local.write().expect("page cache lock").take();
        for (page, bytes) in local.iter().flat_map(|l| l.drain()) {
            cache.insert(page, bytes);
        }
    }

    /// Bytes of the volume's own cache (0 once another is attached: that one counts its
    /// own).
    pub fn local_bytes(&self) -> u64 {
        self.local
            .read()
            .expect("page cache lock")
            .as_ref()
            .map_or(0, |c| c.bytes())
    }

    fn cache(&self) -> Arc<dyn MapCache> {
        Arc::clone(&self.cache.read().expect("page cache lock"))
    }

    /// Keeps page `r` of `entries` (a page a checkpoint of this node's just wrote).
    pub fn keep(&self, r: &PageRef, entries: &[BlockPtr]) {
        self.cache().insert(r.page, Page::new(r, entries).0);
    }

    /// The page `r` names if the cache has it (no I/O).
    pub fn cached(&self, r: &PageRef) -> Option<Page> {
        let bytes = self.cache().get(r.page)?;
        Page::of(r, bytes)
    }

    /// The page `r` names, from the cache or the store.
    pub fn page(&self, r: &PageRef) -> io::Result<Page> {
        match self.pages(std::slice::from_ref(r))?.pop() {
            Some(Some(page)) => Ok(page),
            _ => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{}/{}: missing, though the map names it",
                    self.display,
                    layout::block_page_name(r.page, r.version)
                ),
            )),
        }
    }

    /// The pages `refs` names, in order, from the cache or the store (16 GETs at once);
    /// `None` for a page the store does not have.
    pub fn pages(&self, refs: &[PageRef]) -> io::Result<Vec<Option<Page>>> {
        let cache = self.cache();
        let mut out: Vec<Option<Page>> = Vec::with_capacity(refs.len());
        let mut missing: Vec<(usize, PageRef)> = Vec::new();
        for (i, r) in refs.iter().enumerate() {
            let found = cache.get(r.page).and_then(|bytes| Page::of(r, bytes));
            if found.is_none() {
                missing.push((i, *r));
            }
            out.push(found);
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let size = layout::BLOCK_PAGE_BYTES;
        let jobs: Vec<_> = missing
            .iter()
            .map(|&(i, r)| {
                let store = Arc::clone(&self.store);
                let name = layout::block_page_name(r.page, r.version);
                let path = ObjPath::from(format!("{}{name}", self.prefix));
                let label = format!("{}/{name}", self.display);
                async move {
                    match get_whole(&store, &path, size..=size).await {
                        Ok((bytes, _)) => layout::decode_block_page(&bytes, r.checksum)
                            .map(|entries| (i, Some(Page::new(&r, &entries))))
                            .map_err(|e| {
                                io::Error::new(io::ErrorKind::InvalidData, format!("{label}: {e}"))
                            }),
                        Err(WholeGetError::Store(object_store::Error::NotFound { .. })) => {
                            Ok((i, None))
                        }
                        Err(e) => {
                            Err(e
                                .into_io(&format!("{label} (a block-map page)"), &size.to_string()))
                        }
                    }
                }
            })
            .collect();
        self.stats
            .gets
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        self.stats
            .map_page_gets
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        let got: Vec<(usize, Option<Page>)> = run_on(&self.handle, async move {
            stream::iter(jobs).buffer_unordered(16).try_collect().await
        })
        .inspect_err(|_| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        })?;
        for (i, page) in got {
            if let Some(page) = &page {
                self.stats
                    .get_bytes
                    .fetch_add(layout::BLOCK_PAGE_BYTES, Ordering::Relaxed);
                cache.insert(refs[i].page, page.0.clone());
            }
            out[i] = page;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_keeps_its_bound_and_the_pages_used_again() {
        let page = |n: u8| Bytes::from(vec![n; 100]);
        let cache = LocalMapCache::new(300);
        for n in 0..3 {
            cache.insert(u64::from(n), page(n));
        }
        assert_eq!(cache.bytes(), 300);
        // Page 0 is used again: the next insert passes it over and drops page 1.
        assert!(cache.get(0).is_some());
        cache.insert(3, page(3));
        assert_eq!(cache.bytes(), 300);
        assert!(cache.get(1).is_none());
        assert_eq!(cache.get(0).as_deref(), Some(&page(0)[..]));
        assert!(cache.get(3).is_some());
        // A page larger than the bound is kept alone.
        cache.insert(9, Bytes::from(vec![9; 1000]));
        assert_eq!(cache.bytes(), 1000);
        assert!(cache.get(9).is_some());
        // Replacing a page counts its new length only.
        cache.insert(9, page(1));
        assert_eq!(cache.bytes(), 100);
    }

    #[test]
    fn a_cached_page_is_used_only_for_the_page_object_it_came_from() {
        let r = PageRef {
            page: 7,
            version: layout::Version { seq: 5, token: 9 },
            checksum: 42,
        };
        let mut entries = vec![BlockPtr::default(); PAGE_BLOCKS as usize];
        entries[3] = BlockPtr {
            seq: 5,
            token: 9,
            checksum: 1,
            part: 0,
            slot: 2,
            records: 4,
        };
        let page = Page::new(&r, &entries);
        assert_eq!(page.0.len() as u64, cached_page_bytes(1), "a sparse page");
        let back = Page::of(&r, page.0.clone()).expect("its own ref");
        assert_eq!(back.entries(), entries);
        assert_eq!(back.ptr(3), entries[3]);
        assert_eq!(back.ptr(2), BlockPtr::default());
        assert_eq!(back.ptr(1023), BlockPtr::default());
        for other in [
            PageRef { checksum: 43, ..r },
            PageRef {
                version: layout::Version { seq: 6, token: 9 },
                ..r
            },
            PageRef {
                version: layout::Version { seq: 5, token: 8 },
                ..r
            },
        ] {
            assert!(Page::of(&other, page.0.clone()).is_none());
        }
        assert!(Page::of(&r, page.0.slice(1..)).is_none());
        assert!(Page::of(&r, page.0.slice(..HEAD_BYTES - 1)).is_none());
    }

    #[test]
    fn pages_are_kept_sparse_or_dense_whichever_is_smaller() {
        let r = PageRef {
            page: 1,
            version: layout::Version { seq: 2, token: 3 },
            checksum: 4,
        };
        let ptr = |slot: u32| BlockPtr {
            seq: 2,
            token: 3,
            checksum: u64::from(slot) * 7,
            part: 1,
            slot,
            records: 1024,
        };
        for stored in [0usize, 1, 2, 500, 930, 931, 1024] {
            // Every other block first, then the rest: indices in order, holes between.
            let mut entries = vec![BlockPtr::default(); PAGE_BLOCKS as usize];
            let order = (0..PAGE_BLOCKS as usize)
                .step_by(2)
                .chain((1..PAGE_BLOCKS as usize).step_by(2));
            for i in order.take(stored) {
                entries[i] = ptr(i as u32);
            }
            let page = Page::new(&r, &entries);
            assert_eq!(page.0.len() as u64, cached_page_bytes(stored), "{stored}");
            let back = Page::of(&r, page.0.clone()).expect("its own ref");
            assert_eq!(back.entries(), entries, "{stored}");
            for (i, p) in entries.iter().enumerate() {
                assert_eq!(back.ptr(i), *p, "{stored}: pointer {i}");
            }
        }
        assert_eq!(cached_page_bytes(1024), CACHED_PAGE_BYTES);
        assert!(cached_page_bytes(2) < 128);
    }
}
