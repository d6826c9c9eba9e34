//! The commit protocol and the lease against object_store's in-process store (the Ceph
//! gateway tests in crates/larch/tests/object_store.rs run the same paths over HTTP).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use larch_object::layout::{self, Root, Version};
use larch_object::{LeaseChange, LocalState, ObjectVolume, Options};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

mod common;
use common::{get, names, put, rt};

const BS: usize = 4096;

/// What [`Faulty`] does to the requests that pass through it.
#[derive(Debug, Default)]
struct Faults {
    /// Root PUTs still to be applied with their answer lost: the store writes the root,
    /// the caller gets an error (what a timeout after the request went out looks like).
    lose_root_replies: AtomicUsize,
    /// Root PUTs still to be answered with an error at once and applied 200 ms later (a
    /// request delayed in the network past its timeout and the caller's look at the root).
    land_root_late: AtomicUsize,
    /// Root PUTs still to be answered with an error at once and never applied.
    fail_root_puts: AtomicUsize,
    /// While set, GETs of the root are answered with the object at this path instead (a
    /// replica or cache lagging behind the writes it acknowledged).
    stale_root: Mutex<Option<Path>>,
    /// Listings wait while this is set.
    hold_listings: AtomicBool,
    /// Listings still to fail at once (a listing error after the client's retries).
    fail_listings: AtomicUsize,
    /// Deletes still to fail (an error after the client's retries).
    fail_deletes: AtomicUsize,
    /// How long each PUT of a data object takes, ms.
    data_put_delay_ms: AtomicU64,
    /// PUTs of data objects started.
    data_puts: AtomicUsize,
    /// PUTs of data objects started and not yet answered.
    data_puts_now: AtomicUsize,
    /// The most PUTs of data objects that were in flight at once.
    data_puts_most: AtomicUsize,
    /// Objects whose body a whole-object GET started to read.
    bodies_read: Mutex<Vec<String>>,
}

/// Takes one from `count` if it is not 0: whether there was one.
fn take_one(count: &AtomicUsize) -> bool {
    count
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

impl Faults {
    fn body_read(&self, name: &str) -> bool {
        self.bodies_read.lock().unwrap().iter().any(|n| n == name)
    }
}

/// A store in front of another that injects faults real stores and networks cause.
#[derive(Debug)]
struct Faulty {
    inner: Arc<dyn ObjectStore>,
    faults: Arc<Faults>,
}

impl std::fmt::Display for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let name = location.to_string();
        let data = name.contains("/data/");
        if data {
            self.faults.data_puts.fetch_add(1, Ordering::Relaxed);
            let now = self.faults.data_puts_now.fetch_add(1, Ordering::Relaxed) + 1;
            self.faults.data_puts_most.fetch_max(now, Ordering::Relaxed);
            let delay = self.faults.data_put_delay_ms.load(Ordering::Relaxed);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
        }
        let root = name.ends_with(layout::ROOT_NAME);
        if root && take_one(&self.faults.fail_root_puts) {
            return Err(object_store::Error::Generic {
                store: "Faulty",
                source: "refused (503) and not retried".into(),
            });
        }
        if root && take_one(&self.faults.land_root_late) {
            let (inner, location) = (Arc::clone(&self.inner), location.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let _ = inner.put_opts(&location, payload, opts).await;
            });
            return Err(object_store::Error::Generic {
                store: "Faulty",
                source: "no answer (timed out); the request is still on its way".into(),
            });
        }
        let put = self.inner.put_opts(location, payload, opts).await;
        if data {
            self.faults.data_puts_now.fetch_sub(1, Ordering::Relaxed);
        }
        let put = put?;
        if root && take_one(&self.faults.lose_root_replies) {
            return Err(object_store::Error::Generic {
                store: "Faulty",
                source: "the answer was lost (timed out)".into(),
            });
        }
        Ok(put)
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
        let whole = options.range.is_none() && !options.head;
        let stale = self.faults.stale_root.lock().unwrap().clone();
        let location = match stale {
            Some(stale) if location.to_string().ends_with(layout::ROOT_NAME) => stale,
            _ => location.clone(),
        };
        let location = &location;
        let result = self.inner.get_opts(location, options).await?;
        if !whole {
            return Ok(result);
        }
        // The body is handed on as it is read, and the read noted.
        let (meta, range) = (result.meta.clone(), result.range.clone());
        let (attributes, extensions) = (result.attributes.clone(), result.extensions.clone());
        let faults = Arc::clone(&self.faults);
        let name = location.to_string();
        let body = result.into_stream().inspect(move |_| {
            let mut read = faults.bodies_read.lock().unwrap();
            if !read.contains(&name) {
                read.push(name.clone());
            }
        });
        Ok(GetResult {
            payload: GetResultPayload::Stream(body.boxed()),
            meta,
            range,
            attributes,
            extensions,
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = Arc::clone(&self.inner);
        let faults = Arc::clone(&self.faults);
        locations
            .then(move |location| {
                let (inner, faults) = (Arc::clone(&inner), Arc::clone(&faults));
                async move {
                    let location = location?;
                    if take_one(&faults.fail_deletes) {
                        return Err(object_store::Error::Generic {
                            store: "Faulty",
                            source: "delete refused (503)".into(),
                        });
                    }
                    inner.delete(&location).await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let inner = Arc::clone(&self.inner);
        let faults = Arc::clone(&self.faults);
        let prefix = prefix.cloned();
        if take_one(&self.faults.fail_listings) {
            let err = object_store::Error::Generic {
                store: "Faulty",
                source: "listing refused (503)".into(),
            };
            return stream::once(async move { Err(err) }).boxed();
        }
        // The listing starts (and the store is looked at) only once the hold is lifted.
        stream::once(async move {
            while faults.hold_listings.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            inner.list(prefix.as_ref())
        })
        .flatten()
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

/// `memory` behind a [`Faulty`] of its own.
fn faulty(memory: &Arc<dyn ObjectStore>) -> (Arc<dyn ObjectStore>, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let store = Faulty {
        inner: Arc::clone(memory),
        faults: Arc::clone(&faults),
    };
    (Arc::new(store), faults)
}

/// Makes the root's lease look long expired (what an operator's forced takeover does),
/// behind the back of the node that holds it.
fn expire_lease(store: &Arc<dyn ObjectStore>) {
    let mut root = Root::decode(&get(store, "vols/a/larch-volume")).unwrap();
    root.lease.expires_ms = 1;
    put(store, "vols/a/larch-volume", root.encode());
}

/// Waits (up to 10 s) until `done` holds.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Node {
    name: &'static str,
    local: Arc<Mutex<LocalState>>,
}

impl Node {
    fn new(name: &'static str) -> Node {
        Node {
            name,
            local: Arc::default(),
        }
    }

    fn open(
        &self,
        store: &Arc<dyn ObjectStore>,
        options: Options,
    ) -> io::Result<Arc<ObjectVolume>> {
        let local = Arc::clone(&self.local);
        let state = *self.local.lock().unwrap();
        ObjectVolume::open(
            Arc::clone(store),
            "vols/a",
            "mem://vols/a",
            self.name,
            state,
            options,
            Box::new(move |s| {
                *local.lock().unwrap() = *s;
                Ok(())
            }),
        )
    }
}

impl Node {
    /// Opens the volume, writes `byte` over block `block`, commits and gives the lease up.
    fn commit_block(&self, store: &Arc<dyn ObjectStore>, block: u64, byte: u8) {
        let vol = self.open(store, short_lease()).unwrap();
        vol.write_at(&[byte; BS], block * BS as u64).unwrap();
        vol.flush().unwrap();
        vol.release().unwrap();
    }
}

fn new_volume(size: u64, object_blocks: u32) -> Arc<dyn ObjectStore> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x1234, size, BS as u32, object_blocks);
    larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
    let again = larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap_err();
    assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
    store
}

/// A create whose PUT landed but whose answer was lost (a connection dropped under the
/// request: the client does not retry a conditional PUT), or whose PUT failed without
/// landing, still creates the volume; a root another creator put there is still refused.
#[test]
fn a_create_whose_answer_was_lost_or_whose_put_failed_still_creates_the_volume() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (store, faults) = faulty(&memory);
    let root = Root::new(0x1234, 1 << 20, BS as u32, 4);
    faults.lose_root_replies.store(1, Ordering::Relaxed);
    larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
    assert_eq!(faults.lose_root_replies.load(Ordering::Relaxed), 0);
    assert_eq!(get(&memory, "vols/a/larch-volume"), root.encode());
    faults.fail_root_puts.store(1, Ordering::Relaxed);
    larch_object::create(&store, "vols/b/", "mem://vols/b", &root).unwrap();
    assert_eq!(faults.fail_root_puts.load(Ordering::Relaxed), 0);
    assert_eq!(get(&memory, "vols/b/larch-volume"), root.encode());
    let other = Root::new(0x5678, 1 << 20, BS as u32, 4);
    faults.fail_root_puts.store(1, Ordering::Relaxed);
    let err = larch_object::create(&store, "vols/a/", "mem://vols/a", &other).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
    assert_eq!(get(&memory, "vols/a/larch-volume"), root.encode());
}

fn short_lease() -> Options {
    Options {
        lease: Duration::from_millis(400),
        skew: Duration::from_millis(100),
        uploads: 4,
        ..Options::default()
    }
}

#[test]
fn writes_commit_and_read_back_after_reopen() {
    let store = new_volume(40 * BS as u64 + 100, 8);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    assert_eq!(vol.size_bytes(), 40 * BS as u64 + 100);
    // Never written: zeros.
    let mut buf = vec![1u8; 3 * BS];
    vol.read_at(&mut buf, 5 * BS as u64).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    // Unaligned write across blocks and objects; the short tail block.
    let data: Vec<u8> = (0..3 * BS + 77).map(|i| (i % 251) as u8).collect();
    vol.write_at(&data, 7 * BS as u64 + 5).unwrap();
    vol.write_at(&[9u8; 100], 40 * BS as u64).unwrap();
    let mut back = vec![0u8; data.len()];
    vol.read_at(&mut back, 7 * BS as u64 + 5).unwrap();
    assert_eq!(back, data, "staged bytes are read back before the commit");
    vol.flush().unwrap();
    assert_eq!(vol.commit_seq(), 1);
    assert_eq!(
        vol.stats
            .objects_written
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    vol.release().unwrap();
    drop(vol);
    let vol = node.open(&store, Options::default()).unwrap();
    assert!(!vol.discards_log_record(1));
    assert!(!vol.cached_copy_stale(7));
    let mut back = vec![0u8; data.len()];
    vol.read_at(&mut back, 7 * BS as u64 + 5).unwrap();
    assert_eq!(back, data);
    let mut tail = vec![0u8; 100];
    vol.read_at(&mut tail, 40 * BS as u64).unwrap();
    assert_eq!(tail, vec![9u8; 100]);
    // Past the end: refused.
    assert!(vol.read_at(&mut [0u8; 2], 40 * BS as u64 + 99).is_err());
    // A partial rewrite of an object keeps its other blocks.
    vol.write_at(&[7u8; BS], 8 * BS as u64).unwrap();
    vol.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    vol.read_at(&mut back, 7 * BS as u64 + 5).unwrap();
    let mut expect = data.clone();
    expect[BS - 5..2 * BS - 5].fill(7);
    assert_eq!(back, expect);
    assert!(
        vol.stats
            .objects_merged
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    vol.release().unwrap();
}

#[test]
fn an_upload_without_its_commit_is_invisible_and_collected() {
    let store = new_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    vol.write_at(&[1u8; BS], 0).unwrap();
    vol.flush().unwrap();
    let token = vol.token();
    vol.release().unwrap();
    drop(vol);
    // What a crash after the upload and before the root leaves: a data object for commit
    // 2 that no root names.
    let orphan = format!(
        "vols/a/{}",
        layout::data_name(0, layout::Version { seq: 2, token })
    );
    let geometry = Root::new(0x1234, 16 * BS as u64, BS as u32, 4);
    let body = layout::build_object((0..4u64).map(|b| (b, &[2u8; BS][..])), &geometry, 2).unwrap();
    let s = Arc::clone(&store);
    let p = Path::from(orphan.clone());
    rt().block_on(async move { s.put(&p, PutPayload::from(body)).await.unwrap() });
    let vol = node.open(&store, Options::default()).unwrap();
    let mut buf = vec![0u8; BS];
    vol.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, vec![1u8; BS], "the uncommitted upload is not read");
    // The collection runs in the background.
    for _ in 0..100 {
        if !names(&store).contains(&orphan) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!names(&store).contains(&orphan), "{:?}", names(&store));
    vol.release().unwrap();
}

/// Under a prefix with a character object_store percent-encodes, the keys are stored
/// encoded (`vols/a%7Eb/...`); the collection still finds the garbage there. Before, it
/// compared the listed, encoded keys with the prefix as given, matched none of them and
/// deleted nothing. (`Location::parse` refuses such prefixes; this crate's callers may
/// still give one.)
#[test]
fn garbage_under_a_prefix_the_store_encodes_is_collected() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let geometry = Root::new(0x1234, 16 * BS as u64, BS as u32, 4);
    larch_object::create(&store, "vols/a~b/", "mem://vols/a~b", &geometry).unwrap();
    let local = Arc::new(Mutex::new(LocalState::default()));
    let open = || {
        let sink = Arc::clone(&local);
        let state = *local.lock().unwrap();
        ObjectVolume::open(
            Arc::clone(&store),
            "vols/a~b",
            "mem://vols/a~b",
            "a",
            state,
            Options::default(),
            Box::new(move |s| {
                *sink.lock().unwrap() = *s;
                Ok(())
            }),
        )
        .unwrap()
    };
    let vol = open();
    vol.write_at(&[1u8; BS], 0).unwrap();
    vol.flush().unwrap();
    let token = vol.token();
    vol.release().unwrap();
    drop(vol);
    let committed = names(&store);
    assert!(
        committed.iter().all(|n| n.starts_with("vols/a%7Eb/")),
        "{committed:?}"
    );
    // An upload of commit 2 that no root names (a crash before its root write).
    let orphan = Path::from(format!(
        "vols/a~b/{}",
        layout::data_name(0, layout::Version { seq: 2, token })
    ));
    let body = layout::build_object((0..4u64).map(|b| (b, &[2u8; BS][..])), &geometry, 2).unwrap();
    let (s, p) = (Arc::clone(&store), orphan.clone());
    rt().block_on(async move { s.put(&p, PutPayload::from(body)).await.unwrap() });
    let orphan = orphan.to_string();
    assert!(names(&store).contains(&orphan), "{orphan}");
    let vol = open();
    let mut buf = vec![0u8; BS];
    vol.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, vec![1u8; BS]);
    // The collection runs in the background.
    for _ in 0..100 {
        if !names(&store).contains(&orphan) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(names(&store), committed, "only the orphan is gone");
    vol.release().unwrap();
}

#[test]
fn damaged_or_missing_objects_are_errors_never_zeros() {
    let store = new_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    vol.write_at(&[5u8; 8 * BS], 0).unwrap();
    vol.flush().unwrap();
    let listed = names(&store);
    let first = listed
        .iter()
        .find(|n| n.contains("/data/000000000000-"))
        .unwrap()
        .clone();
    let second = listed
        .iter()
        .find(|n| n.contains("/data/000000000001-"))
        .unwrap()
        .clone();
    // Flip a byte of object 0's block 1; delete object 1.
    let (s, p) = (Arc::clone(&store), Path::from(first.clone()));
    rt().block_on(async move {
        let mut bytes = s.get(&p).await.unwrap().bytes().await.unwrap().to_vec();
        bytes[BS + layout::TRAILER_BYTES + 10] ^= 1;
        s.put(&p, PutPayload::from(bytes)).await.unwrap();
    });
    let (s, p) = (Arc::clone(&store), Path::from(second.clone()));
    rt().block_on(async move { s.delete(&p).await.unwrap() });
    let mut buf = vec![0u8; BS];
    vol.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, vec![5u8; BS]);
    let err = vol.read_at(&mut buf, BS as u64).unwrap_err();
    assert!(
        err.to_string().contains("checksum") && err.to_string().contains(&first[8..]),
        "{err}"
    );
    let err = vol.read_at(&mut buf, 4 * BS as u64).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
    // A commit that must merge the damaged object fails instead of spreading it.
    vol.write_at(&[6u8; BS], 2 * BS as u64).unwrap();
    assert!(vol.flush().is_err());
    vol.release().unwrap();
    // A root that does not parse: the open names it.
    let (s, p) = (Arc::clone(&store), Path::from("vols/a/larch-volume"));
    rt().block_on(async move {
        s.put(&p, PutPayload::from(Bytes::from_static(b"garbage")))
            .await
            .unwrap()
    });
    let err = node.open(&store, Options::default()).unwrap_err();
    assert!(err.to_string().contains("larch-volume"), "{err}");
    // No volume at all.
    let empty: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let err = node.open(&empty, Options::default()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
}

#[test]
fn one_writer_at_a_time_and_no_stale_copy_after_a_takeover() {
    let store = new_volume(16 * BS as u64, 4);
    let a = Node::new("node-a");
    let b = Node::new("node-b");
    let va = a.open(&store, short_lease()).unwrap();
    va.write_at(&[1u8; 16 * BS], 0).unwrap();
    va.flush().unwrap();
    // B is refused while A's lease is live (A renews it).
    std::thread::sleep(Duration::from_millis(700));
    let err = b.open(&store, short_lease()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "{err}");
    assert!(err.to_string().contains("node-a"), "{err}");
    // A stops renewing without releasing (a crash, or a lost network): B takes over once
    // the lease and the skew have passed.
    let a_token = va.token();
    drop(va); // no release: its renewals just stop, as a dead node's do
    let a_state = *a.local.lock().unwrap();
    assert_eq!(a_state.token, a_token);
    let vb = loop {
        match b.open(&store, short_lease()) {
            Ok(v) => break v,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert!(vb.token() > a_token);
    vb.write_at(&[2u8; BS], 4 * BS as u64).unwrap();
    vb.flush().unwrap();
    vb.release().unwrap();
    drop(vb);
    // A comes back: B committed since A's last run, so A's cached copies of object 1 are
    // stale and A's intent log must not be replayed; object 0 is A's own.
    let va = a.open(&store, short_lease()).unwrap();
    assert!(va.discards_log_record(1) && va.discards_log_record(u64::MAX));
    assert!(va.cached_copy_stale(4) && va.cached_copy_stale(7));
    assert!(!va.cached_copy_stale(0) && !va.cached_copy_stale(15));
    let mut buf = vec![0u8; BS];
    va.read_at(&mut buf, 4 * BS as u64).unwrap();
    assert_eq!(buf, vec![2u8; BS]);
    // The drop is recorded before A commits again, and outlives that commit: a crash
    // between A's next commit and its log forgetting the records must not replay them.
    va.note_log_discarded(7).unwrap();
    assert_eq!(a.local.lock().unwrap().log_discard_through, 7);
    va.write_at(&[3u8; BS], 15 * BS as u64).unwrap();
    va.flush().unwrap();
    drop(va); // a crash: no release
    let va = a.open(&store, short_lease()).unwrap();
    assert!(va.discards_log_record(7) && !va.discards_log_record(8));
    assert!(
        !va.cached_copy_stale(4),
        "A's own commit is the last: nothing stale"
    );
    va.release().unwrap();
}

/// A run that took the volume over records the commit it caught up with: its own log
/// records (above the TXG it caught up at) are replayed by a later run while no other node
/// committed since, even if it died before committing itself; its cached copies stay
/// distrusted.
#[test]
fn a_run_that_caught_up_keeps_its_log_records_until_another_commit() {
    let store = new_volume(16 * BS as u64, 4);
    let a = Node::new("node-a");
    let b = Node::new("node-b");
    a.commit_block(&store, 0, 1);
    b.commit_block(&store, 4, 2);
    // A comes back: every record is dropped until it caught up (after its replay).
    let va = a.open(&store, short_lease()).unwrap();
    assert!(va.discards_log_record(u64::MAX));
    va.catch_up(7).unwrap();
    assert!(va.discards_log_record(7) && !va.discards_log_record(8));
    drop(va); // a crash before A commits
    let va = a.open(&store, short_lease()).unwrap();
    assert!(
        va.discards_log_record(7) && !va.discards_log_record(8),
        "the records of the run that caught up would be dropped"
    );
    assert!(va.cached_copy_stale(4), "B's object is stale in A's caches");
    va.release().unwrap();
    drop(va);
    // B commits again: A's log is older than the store once more.
    b.commit_block(&store, 4, 3);
    let va = a.open(&store, short_lease()).unwrap();
    assert!(va.discards_log_record(u64::MAX));
    va.release().unwrap();
}

/// A volume deleted and created again at the same address is a new volume to a node that
/// knew the old one: none of its cached copies are trusted and its intent log is dropped,
/// even when the new volume's tokens happen to repeat the old one's. Before, the node's
/// local state (which did not name the volume) made the new volume look like its own.
#[test]
fn a_volume_created_again_at_the_same_address_is_new_to_a_node_that_knew_the_old_one() {
    let old = new_volume(16 * BS as u64, 4);
    let a = Node::new("node-a");
    let va = a.open(&old, short_lease()).unwrap();
    for byte in 1..=3 {
        va.write_at(&[byte; BS], 0).unwrap();
        va.flush().unwrap();
    }
    va.release().unwrap();
    drop(va);
    let saved = *a.local.lock().unwrap();
    assert_eq!((saved.volume, saved.token, saved.seen_seq), (0x1234, 1, 3));
    // The new volume, with another id; B commits one block of object 0 once, with token
    // 1 as A's old run had.
    let new: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x5678, 16 * BS as u64, BS as u32, 4);
    larch_object::create(&new, "vols/a/", "mem://vols/a", &root).unwrap();
    Node::new("node-b").commit_block(&new, 1, 9);
    let va = a.open(&new, short_lease()).unwrap();
    assert!(
        va.cached_copy_stale(0) && va.cached_copy_stale(15),
        "the old volume's cached copies are trusted"
    );
    assert!(
        va.discards_log_record(u64::MAX),
        "the old volume's log is replayed"
    );
    va.catch_up(3).unwrap();
    let now = *a.local.lock().unwrap();
    assert_eq!((now.volume, now.token, now.seen_seq), (0x5678, 0, 0));
    va.release().unwrap();
}

/// A root older than the last commit this node saw (a store that went back in time) is
/// refused before anything is written or deleted; before, the node took it for its own,
/// kept its newer cached copies and its collection deleted the newer commit's objects.
#[test]
fn a_root_behind_the_commits_this_node_saw_is_refused() {
    let store = new_volume(16 * BS as u64, 4);
    let a = Node::new("node-a");
    let va = a.open(&store, short_lease()).unwrap();
    va.write_at(&[1u8; BS], 0).unwrap();
    va.flush().unwrap();
    let first = get(&store, "vols/a/larch-volume");
    va.write_at(&[2u8; BS], 0).unwrap();
    va.flush().unwrap();
    va.release().unwrap();
    drop(va);
    let before = names(&store);
    put(&store, "vols/a/larch-volume", first.to_vec());
    let err = a.open(&store, short_lease()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("at commit 1") && text.contains("seen commit 2"),
        "{text}"
    );
    assert!(text.contains("remove this node's local state"), "{text}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(names(&store), before, "objects deleted or written");
    assert_eq!(
        get(&store, "vols/a/larch-volume"),
        first,
        "the root was written"
    );
}

/// An absurd lease or skew (a hand-edited pool.json) is refused with a clear error; before,
/// computing the lease's end panicked ("overflow when adding duration to instant").
#[test]
fn absurd_options_are_refused_without_a_panic() {
    let store = new_volume(16 * BS as u64, 4);
    let a = Node::new("node-a");
    for options in [
        Options {
            lease: Duration::from_secs(u64::MAX),
            ..Options::default()
        },
        Options {
            lease: Duration::ZERO,
            ..Options::default()
        },
        Options {
            skew: Duration::from_secs(u64::MAX),
            ..Options::default()
        },
        Options {
            uploads: 0,
            ..Options::default()
        },
    ] {
        let err = a.open(&store, options).unwrap_err();
        assert_eq!(
            err.kind(),
            io::ErrorKind::InvalidInput,
            "{options:?}: {err}"
        );
    }
    // Nothing was taken: another node opens at once.
    Node::new("node-b")
        .open(&store, short_lease())
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn a_fenced_node_cannot_commit_or_read() {
    let store = new_volume(16 * BS as u64, 4);
    let a = Node::new("node-a");
    let b = Node::new("node-b");
    let opts = Options {
        lease: Duration::from_secs(3600),
        ..short_lease()
    };
    let va = a.open(&store, opts).unwrap();
    let a_saw = watch(&va);
    va.write_at(&[1u8; BS], 0).unwrap();
    va.flush().unwrap();
    // Someone rewrites the root behind A's back (an operator's forced takeover): B opens
    // after the lease is made to look expired.
    let s = Arc::clone(&store);
    rt().block_on(async move {
        let p = Path::from("vols/a/larch-volume");
        let bytes = s.get(&p).await.unwrap().bytes().await.unwrap();
        let mut root = Root::decode(&bytes).unwrap();
        root.lease.expires_ms = 1;
        s.put(&p, PutPayload::from(root.encode())).await.unwrap();
    });
    let vb = b.open(&store, opts).unwrap();
    assert!(vb.taken_over(), "A committed since B's last run");
    assert!(!va.taken_over());
    let b_saw = watch(&vb);
    vb.write_at(&[2u8; BS], 0).unwrap();
    vb.flush().unwrap();
    va.write_at(&[3u8; BS], 0).unwrap();
    let err = va.flush().unwrap_err();
    assert!(
        err.to_string().contains("no longer holds its lease"),
        "{err}"
    );
    assert!(va.unusable().is_some());
    assert!(va.read_at(&mut [0u8; 16], 0).is_err());
    let mut buf = vec![0u8; BS];
    vb.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, vec![2u8; BS], "the fenced node's write never landed");
    vb.release().unwrap();
    // A's watcher heard of the loss once (its later failed requests say nothing new),
    // and B's of the release.
    let a_saw = a_saw.lock().unwrap().clone();
    assert!(
        matches!(&a_saw[..], [LeaseChange::Lost(why)] if why.contains("no longer holds its lease")),
        "{a_saw:?}"
    );
    assert_eq!(*b_saw.lock().unwrap(), [LeaseChange::Released]);
}

/// The changes of `vol`'s lease, as its watcher hears them.
fn watch(vol: &ObjectVolume) -> Arc<Mutex<Vec<LeaseChange>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&seen);
    vol.watch_lease(Box::new(move |change| into.lock().unwrap().push(change)));
    seen
}

/// Renewals that fail until the lease runs out: the watcher hears it lapse, once, and
/// resume once a renewal is answered again.
#[test]
fn a_lease_that_lapses_and_comes_back_is_told_to_its_watcher() {
    let (_, store, faults) = faulty_volume(16 * BS as u64, 4);
    let vol = Node::new("node-a").open(&store, short_lease()).unwrap();
    let seen = watch(&vol);
    faults.fail_root_puts.store(usize::MAX, Ordering::Relaxed);
    wait_for("the lease to lapse", || !seen.lock().unwrap().is_empty());
    assert!(vol.unusable().is_some_and(|why| why.contains("lapsed")));
    // Still failing: no second word of it.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(*seen.lock().unwrap(), [LeaseChange::Lapsed]);
    faults.fail_root_puts.store(0, Ordering::Relaxed);
    wait_for("a renewal", || seen.lock().unwrap().len() == 2);
    assert_eq!(
        *seen.lock().unwrap(),
        [LeaseChange::Lapsed, LeaseChange::Resumed]
    );
    assert_eq!(vol.unusable(), None);
    vol.release().unwrap();
}

/// A store of `size` bytes in objects of `object_blocks` blocks: the store itself, and
/// the same behind a [`Faulty`].
fn faulty_volume(
    size: u64,
    object_blocks: u32,
) -> (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>, Arc<Faults>) {
    let memory = new_volume(size, object_blocks);
    let (store, faults) = faulty(&memory);
    (memory, store, faults)
}

fn read_block(vol: &ObjectVolume, block: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BS];
    vol.read_at(&mut buf, block * BS as u64).unwrap();
    buf
}

/// Drops `vol` as a crash would (no release), opens the volume again on `node`, and
/// checks that both commits of the test are there: block 0 all 1s, block 4 all 2s.
fn both_commits_survive_a_crash(vol: Arc<ObjectVolume>, node: &Node, store: &Arc<dyn ObjectStore>) {
    drop(vol);
    let vol = node.open(store, Options::default()).unwrap();
    assert_eq!(read_block(&vol, 0), vec![1u8; BS]);
    assert_eq!(read_block(&vol, 4), vec![2u8; BS]);
    vol.release().unwrap();
}

#[test]
fn a_commit_whose_root_landed_unanswered_is_neither_lost_nor_overwritten() {
    // Objects 0 and 1 (blocks 0-3, 4-7) share map page 0.
    let (_, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    faults.lose_root_replies.store(1, Ordering::Relaxed);
    vol.write_at(&[1u8; BS], 0).unwrap();
    let first = vol.flush();
    vol.write_at(&[2u8; BS], 4 * BS as u64).unwrap();
    let second = vol.flush();
    drop(vol); // a crash: no release
    // Had the second commit reused the first one's names, the page the landed root names
    // would hold other entries now (and object 0 other bytes under commit 1's name).
    let vol = node
        .open(&store, Options::default())
        .unwrap_or_else(|e| panic!("reopen: {e} (commits: {first:?}, {second:?})"));
    assert_eq!(read_block(&vol, 0), vec![1u8; BS]);
    assert_eq!(read_block(&vol, 4), vec![2u8; BS]);
    assert!(first.is_ok() && second.is_ok(), "{first:?}, {second:?}");
    vol.release().unwrap();
}

#[test]
fn a_commit_that_lands_after_its_failure_is_built_upon() {
    let (memory, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    // Every try of the commit's root write (the first lands late, the others fail their
    // condition when they land).
    faults
        .land_root_late
        .store(larch_object::ROOT_PUT_TRIES as usize, Ordering::Relaxed);
    vol.write_at(&[1u8; BS], 0).unwrap();
    let err = vol.flush().unwrap_err();
    assert!(err.to_string().contains("still on its way"), "{err}");
    let root = || Root::decode(&get(&memory, "vols/a/larch-volume")).unwrap();
    wait_for("the late root write", || root().commit_seq == 1);
    // The next commit finds that root, builds on it, and never writes a name it used: the
    // objects and the page the late root names stay as they were.
    vol.write_at(&[2u8; BS], 4 * BS as u64).unwrap();
    vol.flush().unwrap();
    assert!(vol.commit_seq() > 1, "{}", vol.commit_seq());
    assert_eq!(root().commit_seq, vol.commit_seq());
    both_commits_survive_a_crash(vol, &node, &store);
}

/// A root write that failed without landing (the store was briefly unreachable, and the
/// client does not retry a conditional PUT) is sent again: the commit lands, once.
#[test]
fn a_root_write_that_did_not_land_is_sent_again() {
    let (_, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    faults
        .fail_root_puts
        .store(larch_object::ROOT_PUT_TRIES as usize - 1, Ordering::Relaxed);
    vol.write_at(&[1u8; BS], 0).unwrap();
    let puts = vol.stats.puts.load(Ordering::Relaxed);
    vol.flush().unwrap();
    assert_eq!(vol.commit_seq(), 1);
    assert_eq!(faults.fail_root_puts.load(Ordering::Relaxed), 0);
    // A data object and a map page, then the root's tries.
    assert_eq!(
        vol.stats.puts.load(Ordering::Relaxed) - puts,
        2 + u64::from(larch_object::ROOT_PUT_TRIES)
    );
    // One more failure than the tries: the commit fails, and the next one lands.
    faults
        .fail_root_puts
        .store(larch_object::ROOT_PUT_TRIES as usize, Ordering::Relaxed);
    vol.write_at(&[2u8; BS], 4 * BS as u64).unwrap();
    vol.flush().unwrap_err();
    vol.flush().unwrap();
    both_commits_survive_a_crash(vol, &node, &store);
}

/// A delete of a superseded object that fails is counted (before, it went unseen), and
/// the object is collected at the next open.
#[test]
fn a_failed_delete_is_counted_and_collected_at_the_next_open() {
    let (memory, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    vol.write_at(&[1u8; BS], 0).unwrap();
    vol.flush().unwrap();
    let data = |names: &[String]| names.iter().filter(|n| n.contains("/data/")).count();
    assert_eq!(data(&names(&memory)), 1);
    faults.fail_deletes.store(1, Ordering::Relaxed);
    vol.write_at(&[2u8; BS], 0).unwrap();
    vol.flush().unwrap();
    wait_for("the failed delete", || {
        vol.stats.delete_errors.load(Ordering::Relaxed) == 1
    });
    assert_eq!(faults.fail_deletes.load(Ordering::Relaxed), 0);
    assert_eq!(vol.stats.errors.load(Ordering::Relaxed), 1);
    assert_eq!(data(&names(&memory)), 2, "the superseded object stays");
    vol.release().unwrap();
    let vol = node.open(&store, Options::default()).unwrap();
    wait_for("the collection", || data(&names(&memory)) == 1);
    assert_eq!(vol.stats.garbage_deleted.load(Ordering::Relaxed), 1);
    assert_eq!(read_block(&vol, 0), vec![2u8; BS]);
    vol.release().unwrap();
}

#[test]
fn a_renewal_that_landed_unanswered_keeps_the_lease() {
    let (_, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, short_lease()).unwrap();
    faults.lose_root_replies.store(1, Ordering::Relaxed);
    wait_for("the lost reply", || {
        faults.lose_root_replies.load(Ordering::Relaxed) == 0
    });
    // Several renewals later the node still holds the volume (it read the root back and
    // found its own renewal there, not another node's write).
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(vol.unusable(), None);
    vol.write_at(&[3u8; BS], 0).unwrap();
    vol.flush().unwrap();
    assert_eq!(read_block(&vol, 0), vec![3u8; BS]);
    vol.release().unwrap();
}

#[test]
fn the_collection_of_garbage_never_deletes_a_later_owners_objects() {
    let memory = new_volume(16 * BS as u64, 4);
    // A run before A's (token 1), and an upload of it that no root names: garbage.
    let z = Node::new("node-z");
    let vz = z.open(&memory, Options::default()).unwrap();
    assert_eq!(vz.token(), 1);
    vz.release().unwrap();
    drop(vz);
    let orphan = format!(
        "vols/a/{}",
        layout::page_name(
            0,
            Version {
                seq: 0xffff,
                token: 1
            }
        )
    );
    put(&memory, &orphan, vec![0u8; 64]);
    // A opens; its collection lists the store only once B has taken over and committed.
    let long = Options {
        lease: Duration::from_secs(3600),
        ..Options::default()
    };
    let (store_a, faults_a) = faulty(&memory);
    faults_a.hold_listings.store(true, Ordering::Relaxed);
    let va = Node::new("node-a").open(&store_a, long).unwrap();
    expire_lease(&memory);
    // B's own collection never runs: only A's may delete anything.
    let (store_b, faults_b) = faulty(&memory);
    faults_b.hold_listings.store(true, Ordering::Relaxed);
    let vb = Node::new("node-b").open(&store_b, long).unwrap();
    assert!(vb.token() > va.token());
    vb.write_at(&[2u8; 8 * BS], 0).unwrap();
    vb.flush().unwrap();
    let suffix = format!("-{:016x}", vb.token());
    let b_objects: Vec<String> = names(&memory)
        .into_iter()
        .filter(|n| n.ends_with(&suffix))
        .collect();
    assert_eq!(
        b_objects.len(),
        3,
        "two data objects and a page: {b_objects:?}"
    );
    faults_a.hold_listings.store(false, Ordering::Relaxed);
    // The orphan sorts after B's page: once it is gone, A's collection has passed B's
    // objects.
    wait_for("A's collection", || !names(&memory).contains(&orphan));
    let left = names(&memory);
    for name in &b_objects {
        assert!(left.contains(name), "{name} deleted; left: {left:?}");
    }
    assert_eq!(read_block(&vb, 0), vec![2u8; BS]);
    drop(va);
    drop(vb);
}

#[test]
fn a_node_that_stopped_collects_no_garbage() {
    let memory = new_volume(16 * BS as u64, 4);
    let z = Node::new("node-z");
    z.open(&memory, Options::default())
        .unwrap()
        .release()
        .unwrap();
    let orphan = format!(
        "vols/a/{}",
        layout::page_name(0, Version { seq: 9, token: 1 })
    );
    put(&memory, &orphan, vec![0u8; 64]);
    let (store, faults) = faulty(&memory);
    faults.hold_listings.store(true, Ordering::Relaxed);
    let vol = Node::new("node-a")
        .open(&store, Options::default())
        .unwrap();
    // The collection lists the store only once the node is releasing the volume.
    let lift = {
        let faults = Arc::clone(&faults);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            faults.hold_listings.store(false, Ordering::Relaxed);
        })
    };
    vol.release().unwrap();
    lift.join().unwrap();
    assert!(
        names(&memory).contains(&orphan),
        "deleted after the release"
    );
    assert_eq!(vol.stats.garbage_deleted.load(Ordering::Relaxed), 0);
}

/// A listing that fails ends the collection of its directory, counted as an error; the
/// other directory is still collected (before, the failure went unseen).
#[test]
fn a_listing_error_is_counted_and_the_rest_still_collected() {
    let memory = new_volume(16 * BS as u64, 4);
    let z = Node::new("node-z");
    z.open(&memory, Options::default())
        .unwrap()
        .release()
        .unwrap();
    let old = Version { seq: 9, token: 1 };
    let data = format!("vols/a/{}", layout::data_name(0, old));
    let page = format!("vols/a/{}", layout::page_name(0, old));
    put(&memory, &data, vec![0u8; 64]);
    put(&memory, &page, vec![0u8; 64]);
    let (store, faults) = faulty(&memory);
    // The collection lists data/ first: that listing fails.
    faults.fail_listings.store(1, Ordering::Relaxed);
    let vol = Node::new("node-a")
        .open(&store, Options::default())
        .unwrap();
    for _ in 0..100 {
        if !names(&memory).contains(&page) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = names(&memory);
    assert!(!left.contains(&page), "map/ was not collected: {left:?}");
    assert!(left.contains(&data), "data/ was listed: {left:?}");
    assert_eq!(vol.stats.errors.load(Ordering::Relaxed), 1);
    vol.release().unwrap();
}

/// A geometry whose root would outgrow what a reader accepts once the volume is written
/// (8 TiB in 4 KiB objects) is refused at create, before anything reaches the store; before,
/// it was created and became unopenable once most of it was written.
#[test]
fn a_volume_whose_root_could_outgrow_the_readers_limit_is_not_created() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x1234, 8 << 40, 4096, 1);
    let err = larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("mem://vols/a: ") && text.contains("use objects of at least"),
        "{text}"
    );
    assert!(names(&store).is_empty(), "{:?}", names(&store));
    let blocks = root.smallest_object_blocks().unwrap();
    let fits = Root::new(0x1234, 8 << 40, 4096, blocks);
    larch_object::create(&store, "vols/a/", "mem://vols/a", &fits).unwrap();
}

#[test]
fn a_volume_of_another_block_size_is_refused() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x1234, 1 << 20, 8192, 4);
    larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
    let node = Node::new("a");
    let expecting = |block_bytes| Options {
        block_bytes: Some(block_bytes),
        ..Options::default()
    };
    let err = node.open(&store, expecting(16384)).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(
        err.to_string().contains("8192") && err.to_string().contains("16384"),
        "{err}"
    );
    // Refused before the lease was taken: another node opens it at once.
    let vol = Node::new("b").open(&store, expecting(8192)).unwrap();
    // Blocks of the wrong length are refused, not cut or padded, and none is staged.
    let whole = Bytes::from(vec![1u8; 8192]);
    for len in [16384, 4096, 100] {
        let wrong = Bytes::from(vec![9u8; len]);
        let err = vol
            .stage_blocks([(0, whole.clone()), (1, wrong)])
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    }
    let mut buf = vec![1u8; 8192];
    vol.read_at(&mut buf, 0).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "nothing was staged");
    vol.release().unwrap();
}

#[test]
fn oversized_objects_are_refused_unread() {
    let (memory, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    vol.write_at(&[1u8; 8 * BS], 0).unwrap();
    vol.flush().unwrap();
    let listed = names(&memory);
    let find = |part: &str| listed.iter().find(|n| n.contains(part)).unwrap().clone();
    let (data, page) = (find("/data/000000000000-"), find("/map/"));
    let grow = |name: &str| {
        let mut bytes = get(&memory, name).to_vec();
        bytes.extend_from_slice(&vec![0u8; 1 << 20]);
        put(&memory, name, bytes);
    };
    // A commit that must merge data object 0 refuses it by its size alone.
    grow(&data);
    vol.write_at(&[2u8; BS], 0).unwrap();
    let err = vol.flush().unwrap_err();
    assert!(err.to_string().contains("not read"), "{err}");
    assert!(!faults.body_read(&data), "the oversized object was read");
    drop(vol);
    // So does an open for a map page.
    grow(&page);
    let err = node.open(&store, Options::default()).unwrap_err();
    assert!(
        err.to_string().contains(&page[7..]) && err.to_string().contains("not read"),
        "{err}"
    );
    assert!(!faults.body_read(&page), "the oversized page was read");
}

#[test]
fn a_crash_before_the_state_is_saved_keeps_the_commit_this_nodes_own() {
    let store = new_volume(16 * BS as u64, 4);
    // The sink keeps the first state it is given and then "crashes": every later save
    // fails, as if the process had died before it.
    let saved: Arc<Mutex<Option<LocalState>>> = Arc::default();
    let sink_saved = Arc::clone(&saved);
    let open = |local: LocalState, sink: larch_object::StateSink| {
        ObjectVolume::open(
            Arc::clone(&store),
            "vols/a",
            "mem://vols/a",
            "node-a",
            local,
            Options::default(),
            sink,
        )
        .unwrap()
    };
    let vol = open(
        LocalState::default(),
        Box::new(move |state| {
            let mut saved = sink_saved.lock().unwrap();
            if saved.is_some() {
                return Err(io::Error::other("killed"));
            }
            *saved = Some(*state);
            Ok(())
        }),
    );
    vol.write_at(&[1u8; BS], 0).unwrap();
    let err = vol.flush().unwrap_err();
    assert!(err.to_string().contains("killed"), "{err}");
    assert_eq!(vol.commit_seq(), 1, "the root was written before the crash");
    let token = vol.token();
    drop(vol); // no release
    let local = saved
        .lock()
        .unwrap()
        .expect("a state saved before the commit");
    assert_eq!((local.token, local.pending_token), (0, token));
    let vol = open(local, Box::new(|_| Ok(())));
    assert!(
        !vol.discards_log_record(1),
        "the node's own commit taken for another node's: its intent log would be dropped"
    );
    assert!(!vol.cached_copy_stale(0));
    assert_eq!(read_block(&vol, 0), vec![1u8; BS]);
    vol.release().unwrap();
}

#[test]
fn renewals_go_on_during_a_long_commit() {
    let (_, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    // Renewed every 250 ms; a commit takes 3 s.
    let options = Options {
        lease: Duration::from_secs(1),
        skew: Duration::from_millis(100),
        ..Options::default()
    };
    let vol = node.open(&store, options).unwrap();
    vol.write_at(&[1u8; 4 * BS], 0).unwrap();
    faults.data_put_delay_ms.store(3000, Ordering::Relaxed);
    let renewed = vol.stats.renewals.load(Ordering::Relaxed);
    let committing = Arc::clone(&vol);
    let commit = std::thread::spawn(move || committing.flush());
    while !commit.is_finished() {
        assert_eq!(vol.unusable(), None, "the lease lapsed during the commit");
        std::thread::sleep(Duration::from_millis(20));
    }
    commit.join().unwrap().unwrap();
    assert!(vol.stats.renewals.load(Ordering::Relaxed) >= renewed + 4);
    faults.data_put_delay_ms.store(0, Ordering::Relaxed);
    assert_eq!(read_block(&vol, 3), vec![1u8; BS]);
    vol.release().unwrap();
}

#[test]
fn a_stale_root_read_back_never_turns_the_volume_back() {
    let (memory, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    // The root as this run first wrote it (its lease, no commit): what a lagging replica
    // answers later.
    put(
        &memory,
        "stale/larch-volume",
        get(&memory, "vols/a/larch-volume").to_vec(),
    );
    vol.write_at(&[1u8; BS], 0).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.commit_seq(), 1);
    // The next commit's root write fails unapplied, and the read-back gets the old root.
    faults.fail_root_puts.store(1, Ordering::Relaxed);
    *faults.stale_root.lock().unwrap() = Some(Path::from("stale/larch-volume"));
    vol.write_at(&[2u8; BS], 4 * BS as u64).unwrap();
    let failed = vol.flush();
    *faults.stale_root.lock().unwrap() = None;
    assert_eq!(vol.commit_seq(), 1, "went back to the stale root's commit");
    assert_eq!(read_block(&vol, 0), vec![1u8; BS], "commit 1's block");
    let err = failed.unwrap_err();
    assert!(err.to_string().contains("stale read"), "{err}");
    // Once the store answers truly again, the next commit builds on commit 1.
    vol.flush().unwrap();
    assert!(vol.commit_seq() > 1);
    both_commits_survive_a_crash(vol, &node, &store);
}

#[test]
fn a_root_with_numbers_that_would_wrap_is_refused_at_open() {
    let store = new_volume(16 * BS as u64, 4);
    let fresh = get(&store, "vols/a/larch-volume").to_vec();
    let fields: [fn(&mut Root) -> &mut u64; 3] = [
        |r| &mut r.commit_seq,
        |r| &mut r.committed_by,
        |r| &mut r.lease.token,
    ];
    for field in fields {
        for n in [u64::MAX, (1 << 62) + 1] {
            let mut root = Root::decode(&fresh).unwrap();
            *field(&mut root) = n;
            put(&store, "vols/a/larch-volume", root.encode());
            let err = Node::new("a").open(&store, Options::default()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{n}: {err}");
            assert!(
                err.to_string().contains("larch-volume") && err.to_string().contains("2^62"),
                "{n}: {err}"
            );
        }
    }
}

#[test]
fn a_release_waits_for_the_commit_in_flight_and_ends_the_writes() {
    let (memory, store, faults) = faulty_volume(16 * BS as u64, 4);
    let vol = Node::new("a").open(&store, Options::default()).unwrap();
    vol.write_at(&[1u8; 4 * BS], 0).unwrap();
    faults.data_put_delay_ms.store(1000, Ordering::Relaxed);
    let committing = Arc::clone(&vol);
    let commit = std::thread::spawn(move || committing.flush());
    wait_for("the commit's upload", || {
        faults.data_puts.load(Ordering::Relaxed) > 0
    });
    vol.release().unwrap();
    let root = || Root::decode(&get(&memory, "vols/a/larch-volume")).unwrap();
    let released = root();
    let flushed = commit.join().unwrap();
    assert!(
        released.lease.owner.is_empty() && released.lease.expires_ms == 0,
        "{released:?}"
    );
    assert_eq!(root(), released, "the root was written after the release");
    // The release waited for the commit: it is in the root the release wrote.
    flushed.unwrap();
    assert_eq!(released.commit_seq, 1);
    // Nothing is committed after the release.
    faults.data_put_delay_ms.store(0, Ordering::Relaxed);
    vol.stage_blocks([(4, Bytes::from(vec![2u8; BS]))]).unwrap();
    let err = vol.flush().unwrap_err();
    assert!(err.to_string().contains("released"), "{err}");
    assert_eq!(root(), released, "a flush after the release wrote the root");
}

#[test]
fn a_volume_of_another_size_is_refused_before_its_map_is_read() {
    let (_, store, faults) = faulty_volume(16 * BS as u64, 4);
    let node = Node::new("a");
    let vol = node.open(&store, Options::default()).unwrap();
    vol.write_at(&[1u8; BS], 0).unwrap();
    vol.flush().unwrap();
    vol.release().unwrap();
    drop(vol);
    faults.bodies_read.lock().unwrap().clear();
    let sized = |size_bytes| Options {
        size_bytes: Some(size_bytes),
        ..Options::default()
    };
    let err = node.open(&store, sized(32 * BS as u64)).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(
        err.to_string().contains(&(16 * BS).to_string())
            && err.to_string().contains(&(32 * BS).to_string()),
        "{err}"
    );
    let read = faults.bodies_read.lock().unwrap().clone();
    assert!(read.iter().all(|n| !n.contains("/map/")), "{read:?}");
    // Refused before the lease was taken: another node opens it at once.
    let vol = Node::new("b").open(&store, sized(16 * BS as u64)).unwrap();
    assert_eq!(read_block(&vol, 0), vec![1u8; BS]);
    vol.release().unwrap();
}

/// A commit keeps the bytes of the objects it uploads at once within 64 MiB: 16 objects of
/// 1 MiB, but only 4 of 16 MiB (before, 16 of any size: on an ordinary link each upload
/// of a large object then took longer than a request may, and none ever got through).
#[test]
fn a_commit_of_large_objects_uploads_fewer_at_once() {
    for (object_blocks, objects, most) in [(256u32, 20u64, 16usize), (4096, 6, 4)] {
        let object_bytes = u64::from(object_blocks) * BS as u64;
        let memory = new_volume(objects * object_bytes, object_blocks);
        let (store, faults) = faulty(&memory);
        let vol = Node::new("a").open(&store, Options::default()).unwrap();
        for object in 0..objects {
            vol.write_at(&[7u8; BS], object * object_bytes).unwrap();
        }
        // Long enough that every upload the commit starts together is in flight at once.
        faults.data_put_delay_ms.store(100, Ordering::Relaxed);
        vol.flush().unwrap();
        assert_eq!(
            faults.data_puts.load(Ordering::Relaxed) as u64,
            objects,
            "{object_bytes}-byte objects"
        );
        assert_eq!(
            faults.data_puts_most.load(Ordering::Relaxed),
            most,
            "{object_bytes}-byte objects"
        );
        vol.release().unwrap();
    }
}
