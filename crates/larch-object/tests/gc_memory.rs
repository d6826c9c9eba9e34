//! The memory the collection of garbage at open takes, counted by a global allocator: it
//! must not grow with the number of data objects the map names (the map's own 16 bytes
//! per object aside). Its own test binary, with a single test, so that no other test's
//! allocations are counted with it.
//!
//! The store is made up: the root and the map pages are real objects, the data objects
//! exist only in the listing, made as it is read. A store of a few hundred thousand real
//! objects would hold their listing in memory (object_store's in-process store lists
//! from a copy of its keys) and drown what is measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::stream::{self, BoxStream, StreamExt};
use larch_object::layout::{self, PAGE_OBJECTS, Root, Version};
use larch_object::{LocalState, ObjectVolume, Options};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Counts the bytes allocated now and the most allocated at once since the last reset.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = NOW.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; only counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from the system's, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and `new_size` is the caller's to vouch for.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            NOW.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

const BS: u64 = 4096;
/// The commit that wrote every live object (and every map page).
const LIVE: Version = Version { seq: 1, token: 1 };
/// Earlier uploads no root names.
const GARBAGE: Version = Version { seq: 9, token: 1 };
/// One object in this many has a garbage version next to its live one.
const GARBAGE_EVERY: u64 = 64;

/// A store whose `data/` listing is made up as it is read: every object of a volume of
/// `objects`, written by [`LIVE`], and a [`GARBAGE`] version of every
/// [`GARBAGE_EVERY`]th. Everything else is `inner`'s. Deletions of data objects are only
/// counted.
#[derive(Debug)]
struct MadeUp {
    inner: Arc<dyn ObjectStore>,
    objects: u64,
    /// A listed object's metadata, to copy (its time cannot be made without chrono).
    template: ObjectMeta,
    garbage_deleted: Arc<AtomicU64>,
    live_deleted: Arc<AtomicU64>,
}

impl std::fmt::Display for MadeUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MadeUp({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for MadeUp {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = Arc::clone(&self.inner);
        let garbage = Arc::clone(&self.garbage_deleted);
        let live = Arc::clone(&self.live_deleted);
        locations
            .then(move |location| {
                let (inner, garbage, live) =
                    (Arc::clone(&inner), Arc::clone(&garbage), Arc::clone(&live));
                async move {
                    let location = location?;
                    let name = location.as_ref().strip_prefix("vols/a/").unwrap_or("");
                    match layout::parse_name(name) {
                        Some((_, _, v)) if v == GARBAGE => garbage.fetch_add(1, Ordering::Relaxed),
                        _ => live.fetch_add(1, Ordering::Relaxed),
                    };
                    if name.starts_with("map/") {
                        inner.delete(&location).await?;
                    }
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if prefix.is_none_or(|p| p.as_ref() != "vols/a/data") {
            return self.inner.list(prefix);
        }
        let template = self.template.clone();
        stream::iter(0..self.objects)
            .flat_map(move |object| {
                let extra = (object % GARBAGE_EVERY == 0).then_some(GARBAGE);
                let template = template.clone();
                stream::iter([Some(LIVE), extra].into_iter().flatten().map(move |v| {
                    Ok(ObjectMeta {
                        location: Path::from(format!("vols/a/{}", layout::data_name(object, v))),
                        ..template.clone()
                    })
                }))
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// What an open of a volume whose map names `objects` data objects, and whose collection
/// of garbage runs to its end, allocates at most beyond the map: bytes.
fn collection_overhead(objects: u64) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let put = |name: String, bytes: Vec<u8>| {
        let (s, p) = (Arc::clone(&inner), Path::from(format!("vols/a/{name}")));
        runtime.block_on(async move { s.put(&p, PutPayload::from(bytes)).await.unwrap() });
    };
    // The root of an earlier run (token 1, lease given up) whose commit wrote them all.
    let mut root = Root::new(0x1234, objects * BS, BS as u32, 1);
    root.commit_seq = LIVE.seq;
    root.committed_by = LIVE.token;
    root.lease.token = LIVE.token;
    for page in 0..objects.div_ceil(PAGE_OBJECTS) {
        let mut entries = vec![Version::default(); PAGE_OBJECTS as usize];
        let first = page * PAGE_OBJECTS;
        let written = (objects - first).min(PAGE_OBJECTS) as usize;
        entries[..written].fill(LIVE);
        let sealed = layout::encode_page(&entries);
        root.pages.push(layout::PageRef {
            page,
            version: LIVE,
            checksum: layout::page_checksum(&sealed),
        });
        put(layout::page_name(page, LIVE), sealed);
    }
    // A page no root names: garbage in map/ too.
    put(layout::page_name(0, GARBAGE), vec![0u8; 64]);
    put(layout::ROOT_NAME.to_string(), root.encode());
    let template = {
        let s = Arc::clone(&inner);
        let p = Path::from(format!("vols/a/{}", layout::ROOT_NAME));
        runtime.block_on(async move { s.head(&p).await.unwrap() })
    };
    let garbage_deleted = Arc::new(AtomicU64::new(0));
    let live_deleted = Arc::new(AtomicU64::new(0));
    let store: Arc<dyn ObjectStore> = Arc::new(MadeUp {
        inner: Arc::clone(&inner),
        objects,
        template,
        garbage_deleted: Arc::clone(&garbage_deleted),
        live_deleted: Arc::clone(&live_deleted),
    });
    let garbage = objects.div_ceil(GARBAGE_EVERY) + 1;

    let before = NOW.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let vol = ObjectVolume::open(
        Arc::clone(&store),
        "vols/a",
        "mem://vols/a",
        "node-a",
        LocalState::default(),
        Options::default(),
        Box::new(|_| Ok::<(), io::Error>(())),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while vol.stats.garbage_deleted.load(Ordering::Relaxed) < garbage {
        assert!(Instant::now() < deadline, "the collection did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A release waits for the collection's task to end.
    vol.release().unwrap();
    let peak = (PEAK.load(Ordering::Relaxed) - before) as u64;

    assert_eq!(garbage_deleted.load(Ordering::Relaxed), garbage);
    assert_eq!(
        live_deleted.load(Ordering::Relaxed),
        0,
        "a live object deleted"
    );
    assert_eq!(vol.stats.garbage_deleted.load(Ordering::Relaxed), garbage);
    let map = vol.map_bytes();
    // The pages' entries, and a ref of 48 bytes a page in the tree of pages.
    let pages = objects.div_ceil(PAGE_OBJECTS);
    assert_eq!(map, pages * PAGE_OBJECTS * 16 + pages * 48);
    drop(vol);
    peak.saturating_sub(map)
}

/// From 64 Ki to 384 Ki data objects (16 to 96 map pages, so that the open reads 16 pages
/// at once in both), what the open and its collection take beside the map grows by less
/// than a byte per object. The set of every object's name the collection used to build
/// grew by about 84 bytes per object here (the allocator counts the bytes asked for). That
/// the garbage is held a batch at a time is checked by a unit test in `volume.rs`.
#[test]
fn the_collection_takes_no_memory_per_live_object() {
    let small_objects = 16 * PAGE_OBJECTS;
    let large_objects = 96 * PAGE_OBJECTS;
    let small = collection_overhead(small_objects);
    let large = collection_overhead(large_objects);
    let per_object = large.saturating_sub(small) as f64 / (large_objects - small_objects) as f64;
    eprintln!(
        "beside the map: {small} bytes for {small_objects} objects, {large} for \
         {large_objects}: {per_object:.3} bytes more per object"
    );
    assert!(per_object < 1.0, "{per_object:.3} bytes per object");
}
