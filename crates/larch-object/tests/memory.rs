//! The commit protocol and the lease against object_store's in-process store (the Ceph
//! gateway tests in crates/larch/tests/object_store.rs run the same paths over HTTP).

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use larch_object::layout::{self, Root};
use larch_object::{LocalState, ObjectVolume, Options};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

const BS: usize = 4096;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn names(store: &Arc<dyn ObjectStore>) -> Vec<String> {
    use futures_util::StreamExt;
    let store = Arc::clone(store);
    rt().block_on(async move {
        let mut out = Vec::new();
        let mut list = store.list(None);
        while let Some(meta) = list.next().await {
            out.push(meta.unwrap().location.to_string());
        }
        out.sort();
        out
    })
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

fn new_volume(size: u64, object_blocks: u32) -> Arc<dyn ObjectStore> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x1234, size, BS as u32, object_blocks);
    larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
    let again = larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap_err();
    assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
    store
}

fn short_lease() -> Options {
    Options {
        lease: Duration::from_millis(400),
        skew: Duration::from_millis(100),
        uploads: 4,
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
    let body = layout::build_object((0..4u64).map(|b| (b, &[2u8; BS][..])), BS, 0x1234, 2);
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
}
