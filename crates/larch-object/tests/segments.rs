//! The segments format (copy-on-write segments and a map of block pointers) against
//! object_store's in-process store: commits that never read back, holes, merged reads,
//! repacking, damage and crashes.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use larch_object::layout::{self, Format, Root};
use larch_object::{LocalState, ObjectVolume, Options};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

mod common;
use common::{delete, get, names, put, rt};

const BS: usize = 4096;

fn under<'a>(all: &'a [String], dir: &str) -> Vec<&'a String> {
    all.iter()
        .filter(|n| n.starts_with(&format!("vols/a/{dir}/")))
        .collect()
}

/// A new segments volume of `blocks` blocks, `per_segment` records a segment at most.
fn new_volume(blocks: u64, per_segment: u32) -> Arc<dyn ObjectStore> {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut root = Root::new(0x5e6, blocks * BS as u64, BS as u32, per_segment);
    root.format = Format::Segments;
    larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
    store
}

fn options(repack_percent: u8) -> Options {
    Options {
        lease: Duration::from_secs(30),
        repack_percent,
        ..Options::default()
    }
}

fn open(store: &Arc<dyn ObjectStore>, opts: Options) -> Arc<ObjectVolume> {
    ObjectVolume::open(
        Arc::clone(store),
        "vols/a",
        "mem://vols/a",
        "node-a",
        LocalState::default(),
        opts,
        Box::new(|_| Ok(())),
    )
    .unwrap()
}

fn block_of(byte: u8) -> Bytes {
    Bytes::from(vec![byte; BS])
}

fn read(vol: &ObjectVolume, block: u64) -> Vec<u8> {
    let mut buf = vec![0u8; BS];
    vol.read_at(&mut buf, block * BS as u64).unwrap();
    buf
}

fn gets(vol: &ObjectVolume) -> u64 {
    vol.stats.gets.load(Ordering::Relaxed)
}

/// Waits for the background deletions of superseded objects.
fn settle(store: &Arc<dyn ObjectStore>, dir: &str, want: usize) -> Vec<String> {
    for _ in 0..100 {
        let all = names(store);
        if under(&all, dir).len() == want {
            return all;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    names(store)
}

/// A commit packs its blocks into new segments and never reads the store; a partial
/// overwrite leaves the rest of the first commit's segment in place, and a restart (no
/// release: a crash) reads both commits' blocks back.
#[test]
fn commits_write_new_segments_and_never_read_back() {
    let store = new_volume(64, 16);
    let vol = open(&store, options(0));
    vol.stage_blocks((0..20).map(|b| (b, block_of(b as u8 + 1))))
        .unwrap();
    vol.flush().unwrap();
    let all = names(&store);
    assert_eq!(
        under(&all, "seg").len(),
        2,
        "20 blocks in segments of 16: {all:?}"
    );
    // The pointers it changed go in its map log; pages wait for a checkpoint.
    assert_eq!(under(&all, "blog").len(), 1, "{all:?}");
    assert!(under(&all, "bmap").is_empty(), "{all:?}");
    assert!(under(&all, "data").is_empty() && under(&all, "map").is_empty());
    // Overwrite 3 blocks of the first segment, one block at a time apart.
    vol.write_at(&[0xaa; BS], 2 * BS as u64).unwrap();
    vol.write_at(&[0xbb; BS], 7 * BS as u64).unwrap();
    vol.write_at(&[0xcc; 10], 11 * BS as u64 + 5).unwrap(); // partial: reads block 11 first
    let before = gets(&vol);
    vol.flush().unwrap();
    assert_eq!(gets(&vol), before, "a commit reads nothing back");
    assert_eq!(vol.stats.objects_merged.load(Ordering::Relaxed), 0);
    drop(vol);
    let vol = open(&store, options(0));
    for b in 0..20u64 {
        let want = match b {
            2 => vec![0xaa; BS],
            7 => vec![0xbb; BS],
            11 => {
                let mut v = vec![12u8; BS];
                v[5..15].fill(0xcc);
                v
            }
            _ => vec![b as u8 + 1; BS],
        };
        assert_eq!(read(&vol, b), want, "block {b}");
    }
    assert_eq!(read(&vol, 40), vec![0u8; BS], "never written: zeros");
    let (stored, live, segments) = vol.segment_usage().unwrap();
    let rec = (BS + layout::TRAILER_BYTES) as u64;
    assert_eq!((stored, live, segments), (23 * rec, 20 * rec, 3));
    vol.release().unwrap();
}

/// Blocks that are neighbours in one segment come back with one ranged GET; a read
/// across two segments takes two.
#[test]
fn neighbours_in_a_segment_are_one_get() {
    let store = new_volume(256, 64);
    let vol = open(&store, options(0));
    vol.stage_blocks((0..100).map(|b| (b, block_of(b as u8))))
        .unwrap();
    vol.flush().unwrap();
    drop(vol);
    let vol = open(&store, options(0));
    let before = gets(&vol);
    let got = vol.read_blocks(0, 64).unwrap();
    assert_eq!(gets(&vol) - before, 1);
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, b)| b[..] == [i as u8; BS][..])
    );
    let before = gets(&vol);
    let got = vol.read_blocks(60, 10).unwrap();
    assert_eq!(
        gets(&vol) - before,
        2,
        "blocks 60-63 and 64-69 are in two segments"
    );
    assert!(
        got.iter()
            .zip(60..)
            .all(|(b, i)| b[..] == [i as u8; BS][..])
    );
    vol.release().unwrap();
}

/// Blocks of zeros are holes: not stored, reported by `holes`, read as zeros, and a
/// segment whose blocks all became holes is deleted.
#[test]
fn zeros_become_holes_and_empty_segments_go() {
    let store = new_volume(64, 8);
    let vol = open(&store, options(0));
    vol.stage_blocks((8..16).map(|b| (b, block_of(9)))).unwrap();
    vol.flush().unwrap();
    let seg_bytes = 8 * BS as u64;
    assert_eq!(
        vol.holes(0, 64 * BS as u64),
        vec![0..seg_bytes, 2 * seg_bytes..64 * BS as u64]
    );
    vol.stage_blocks((8..16).map(|b| (b, block_of(0)))).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.holes(0, 64 * BS as u64), vec![0..64 * BS as u64]);
    assert_eq!(read(&vol, 9), vec![0u8; BS]);
    assert_eq!(vol.stats.segments_freed.load(Ordering::Relaxed), 1);
    let all = settle(&store, "seg", 0);
    assert!(under(&all, "seg").is_empty(), "{all:?}");
    // A block of zeros over a hole changes nothing on the store but the root.
    vol.stage_blocks([(3, block_of(0))]).unwrap();
    vol.flush().unwrap();
    assert!(under(&names(&store), "seg").is_empty());
    vol.release().unwrap();
}

/// A segment whose live share falls below the threshold is repacked: its live blocks
/// move into the next commit's segments and it is deleted; the bytes stay.
#[test]
fn sparse_segments_are_repacked_into_the_next_commit() {
    let store = new_volume(128, 32);
    let vol = open(&store, options(50));
    vol.stage_blocks((0..32).map(|b| (b, block_of(b as u8 + 1))))
        .unwrap();
    vol.flush().unwrap();
    let first = under(&names(&store), "seg")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(first.len(), 1);
    // 20 of 32 overwritten: 12 live, 37.5 %, below 50 %. That commit finds it sparse only
    // after it landed; the next one moves the 12 live blocks.
    vol.stage_blocks((0..20).map(|b| (b, block_of(0xee))))
        .unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats.repacked_segments.load(Ordering::Relaxed), 0);
    vol.stage_blocks([(100, block_of(7))]).unwrap();
    vol.flush().unwrap();
    assert_eq!(vol.stats.repacked_segments.load(Ordering::Relaxed), 1);
    assert_eq!(
        vol.stats.repack_bytes.load(Ordering::Relaxed),
        12 * BS as u64
    );
    let (stored, live, _) = vol.segment_usage().unwrap();
    assert_eq!(stored, live, "every stored record is live after the repack");
    let all = settle(&store, "seg", 2);
    assert!(
        !all.contains(&first[0]),
        "the sparse segment is deleted: {all:?}"
    );
    drop(vol);
    let vol = open(&store, options(50));
    for b in 0..32u64 {
        let want = if b < 20 { 0xee } else { b as u8 + 1 };
        assert_eq!(read(&vol, b), vec![want; BS], "block {b}");
    }
    assert_eq!(read(&vol, 100), vec![7; BS]);
    vol.release().unwrap();
}

/// A repack with nothing staged: a volume left idle reclaims its space too (the lease's
/// renewer does it between renewals; here a short lease makes that quick).
#[test]
fn an_idle_volume_repacks_between_renewals() {
    let store = new_volume(64, 16);
    let opts = Options {
        lease: Duration::from_millis(400),
        skew: Duration::from_millis(100),
        ..options(50)
    };
    let vol = open(&store, opts);
    vol.stage_blocks((0..16).map(|b| (b, block_of(1)))).unwrap();
    vol.flush().unwrap();
    vol.stage_blocks((0..12).map(|b| (b, block_of(2)))).unwrap();
    vol.flush().unwrap();
    // The repack counter moves when the segment is read, the usage when the commit lands.
    let repacked = || {
        let (stored, live, _) = vol.segment_usage().unwrap();
        vol.stats.repacked_segments.load(Ordering::Relaxed) > 0 && stored == live
    };
    for _ in 0..100 {
        if repacked() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(repacked(), "no repack while idle");
    for b in 0..16u64 {
        assert_eq!(read(&vol, b), vec![if b < 12 { 2 } else { 1 }; BS]);
    }
    vol.release().unwrap();
}

/// A segment whose bytes are not what the map says is an error naming the object, never
/// zeros or the wrong bytes: damage in the middle of a record, and a record swapped for
/// another block's.
#[test]
fn a_damaged_segment_is_an_error_naming_it() {
    let store = new_volume(64, 16);
    let vol = open(&store, options(0));
    vol.stage_blocks((0..4).map(|b| (b, block_of(b as u8 + 1))))
        .unwrap();
    vol.flush().unwrap();
    vol.release().unwrap();
    let seg = under(&names(&store), "seg")[0].clone();
    let path = Path::from(seg.as_str());
    let original = rt().block_on(async { store.get(&path).await.unwrap().bytes().await.unwrap() });
    let rec = BS + layout::TRAILER_BYTES;
    let put = |bytes: Vec<u8>| {
        let (s, p) = (Arc::clone(&store), path.clone());
        rt().block_on(async move { s.put(&p, PutPayload::from(bytes)).await.unwrap() });
    };
    let mut flipped = original.to_vec();
    flipped[rec + 100] ^= 1;
    put(flipped);
    let vol = open(&store, options(0));
    let mut buf = vec![0u8; BS];
    let err = vol.read_at(&mut buf, BS as u64).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains(&seg["vols/a/".len()..]), "{err}");
    assert_eq!(read(&vol, 0), vec![1u8; BS], "the other records still read");
    vol.release().unwrap();
    // Records 0 and 1 swapped: each verifies on its own, but not as the block asked for.
    let mut swapped = original[rec..2 * rec].to_vec();
    swapped.extend_from_slice(&original[..rec]);
    swapped.extend_from_slice(&original[2 * rec..]);
    put(swapped);
    let vol = open(&store, options(0));
    let err = vol.read_at(&mut buf, 0).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    vol.release().unwrap();
}

/// Segments and pages a crashed commit uploaded without its root are garbage to the next
/// run, which deletes them at open; the committed ones stay.
#[test]
fn a_crashed_commits_uploads_are_collected_at_the_next_open() {
    let store = new_volume(64, 16);
    let vol = open(&store, options(0));
    vol.stage_blocks((0..4).map(|b| (b, block_of(3)))).unwrap();
    vol.flush().unwrap();
    drop(vol);
    let kept = names(&store);
    // What a commit of a later run that died before its root write leaves behind.
    let orphan_seg = "vols/a/seg/00000000000000ff-0000000000000001-00000000";
    let orphan_page = "vols/a/bmap/00000000-00000000000000ff-0000000000000001";
    for name in [orphan_seg, orphan_page] {
        let (s, p) = (Arc::clone(&store), Path::from(name));
        rt().block_on(async move { s.put(&p, PutPayload::from(vec![1u8; 10])).await.unwrap() });
    }
    let vol = open(&store, options(0));
    let mut left = names(&store);
    for _ in 0..100 {
        if !left.iter().any(|n| n == orphan_seg || n == orphan_page) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        left = names(&store);
    }
    assert!(
        !left.iter().any(|n| n == orphan_seg || n == orphan_page),
        "{left:?}"
    );
    for name in under(&kept, "seg").into_iter().chain(under(&kept, "bmap")) {
        assert!(left.contains(name), "{name} was deleted: {left:?}");
    }
    assert_eq!(read(&vol, 2), vec![3u8; BS]);
    vol.release().unwrap();
}

fn open_follower(
    store: &Arc<dyn ObjectStore>,
    local: LocalState,
) -> io::Result<(Arc<ObjectVolume>, Arc<std::sync::Mutex<LocalState>>)> {
    let record = Arc::new(std::sync::Mutex::new(local));
    let sink = Arc::clone(&record);
    let vol = ObjectVolume::open_follower(
        Arc::clone(store),
        "vols/a",
        "mem://vols/a",
        "node-f",
        local,
        Options {
            // Followed by hand in these tests.
            poll: Duration::from_secs(3600),
            ..options(50)
        },
        Box::new(move |state| {
            *sink.lock().unwrap() = *state;
            Ok(())
        }),
    )?;
    Ok((vol, record))
}

/// A follower serves what the writer committed, is told which blocks each followed
/// commit changed, serves the new bytes after it, and refuses writes.
#[test]
fn a_follower_follows_the_writers_commits_and_refuses_writes() {
    let store = new_volume(64, 8);
    let writer = open(&store, options(0));
    writer
        .stage_blocks((0..16).map(|b| (b, block_of(1))))
        .unwrap();
    writer.flush().unwrap();
    let (follower, local) = open_follower(&store, LocalState::default()).unwrap();
    assert!(follower.is_follower());
    assert_eq!(read(&follower, 3), vec![1u8; BS]);
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&told);
    follower.watch_commits(Box::new(move |blocks| {
        seen.lock().unwrap().extend_from_slice(blocks);
        Ok(())
    }));
    writer
        .stage_blocks([(3, block_of(2)), (40, block_of(3))])
        .unwrap();
    writer.stage_blocks([(5, block_of(0))]).unwrap();
    writer.flush().unwrap();
    assert_eq!(read(&follower, 3), vec![1u8; BS], "not followed yet");
    let followed = follower.follow().unwrap();
    assert_eq!(followed.commit_seq, writer.commit_seq());
    assert_eq!(followed.changed_blocks, 3);
    assert_eq!(*told.lock().unwrap(), vec![3, 5, 40]);
    assert_eq!(local.lock().unwrap().seen_seq, writer.commit_seq());
    assert_eq!(read(&follower, 3), vec![2u8; BS]);
    assert_eq!(read(&follower, 5), vec![0u8; BS]);
    assert_eq!(read(&follower, 40), vec![3u8; BS]);
    // Nothing new: nothing changed.
    assert_eq!(follower.follow().unwrap().changed_blocks, 0);
    let err = follower.write_at(&[9u8; BS], 0).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    let err = follower.stage_blocks([(0, block_of(9))]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    follower.flush().unwrap();
    follower.release().unwrap();
    // The follower wrote nothing: the root is still the writer's, lease and all.
    assert_eq!(writer.unusable(), None);
    writer.stage_blocks([(6, block_of(6))]).unwrap();
    writer.flush().unwrap();
    writer.release().unwrap();
}

/// A follower that meets a segment the writer's repack deleted follows the root at once
/// and reads the block where it lives now.
#[test]
fn a_follower_reads_through_a_repack_that_deleted_its_segment() {
    let store = new_volume(64, 16);
    let writer = open(&store, options(50));
    writer
        .stage_blocks((0..16).map(|b| (b, block_of(b as u8 + 1))))
        .unwrap();
    writer.flush().unwrap();
    let (follower, _) = open_follower(&store, LocalState::default()).unwrap();
    // 12 of 16 overwritten, then a commit that repacks the old segment and deletes it.
    writer
        .stage_blocks((0..12).map(|b| (b, block_of(0x77))))
        .unwrap();
    writer.flush().unwrap();
    writer.stage_blocks([(60, block_of(5))]).unwrap();
    writer.flush().unwrap();
    assert_eq!(writer.stats.repacked_segments.load(Ordering::Relaxed), 1);
    settle(&store, "seg", 2);
    // Block 14 lived in the deleted segment; the follower's map still says so.
    assert_eq!(read(&follower, 14), vec![15u8; BS]);
    assert_eq!(read(&follower, 2), vec![0x77u8; BS]);
    assert_eq!(follower.commit_seq(), writer.commit_seq());
    follower.release().unwrap();
    writer.release().unwrap();
}

/// A follower restarted after the writer committed distrusts its cached copies of the
/// blocks those commits changed, and only those.
#[test]
fn a_restarted_follower_distrusts_only_what_changed_since() {
    let store = new_volume(64, 8);
    let writer = open(&store, options(0));
    writer
        .stage_blocks((0..16).map(|b| (b, block_of(1))))
        .unwrap();
    writer.flush().unwrap();
    let (follower, local) = open_follower(&store, LocalState::default()).unwrap();
    writer.stage_blocks([(8, block_of(3))]).unwrap();
    writer.flush().unwrap();
    assert_eq!(follower.follow().unwrap().changed_blocks, 1);
    follower.release().unwrap();
    // Recorded only once a followed commit's changes were handed on: a follow that found
    // nothing new records nothing, so a restart distrusts at least what this one did.
    let recorded = *local.lock().unwrap();
    assert_eq!(recorded.seen_seq, writer.commit_seq());
    writer.stage_blocks([(9, block_of(2))]).unwrap();
    writer.flush().unwrap();
    let (again, _) = open_follower(&store, recorded).unwrap();
    assert!(again.cached_copy_stale(9));
    assert!(!again.cached_copy_stale(8) && !again.cached_copy_stale(0));
    again.release().unwrap();
    // A follower new to the volume trusts nothing it may hold.
    let (fresh, _) = open_follower(&store, LocalState::default()).unwrap();
    assert!(fresh.cached_copy_stale(0));
    fresh.release().unwrap();
    writer.release().unwrap();
}

/// Followers refuse what they cannot follow: no volume there, an objects-layout volume.
#[test]
fn followers_refuse_a_missing_volume_and_the_objects_layout() {
    let empty: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let err = open_follower(&empty, LocalState::default()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x0b, 64 * BS as u64, BS as u32, 8);
    larch_object::create(&objects, "vols/a/", "mem://vols/a", &root).unwrap();
    let err = open_follower(&objects, LocalState::default()).unwrap_err();
    assert!(err.to_string().contains("segments layout"), "{err}");
}

/// Every `map_log_commits` commits, a checkpoint writes the block-map pages the logs
/// changed and the root names no log; the logs are deleted; an open and a follower read
/// the same map across checkpoints as between them.
#[test]
fn checkpoints_fold_the_map_logs_into_pages() {
    let store = new_volume(4096, 8);
    let opts = Options {
        map_log_commits: 2,
        ..options(0)
    };
    let writer = open(&store, opts);
    let (follower, _) = open_follower(&store, LocalState::default()).unwrap();
    let mut want = vec![0u8; 4096];
    for round in 0..7u64 {
        // Blocks in three block-map pages (1,024 blocks each).
        let blocks = [round, 1024 + round * 3, 3000 + round];
        for &b in &blocks {
            want[b as usize] = round as u8 + 1;
        }
        writer
            .stage_blocks(blocks.map(|b| (b, block_of(round as u8 + 1))))
            .unwrap();
        writer.flush().unwrap();
        // Commits 1-2 write logs, 3 checkpoints, 4-5 logs, 6 checkpoints, 7 a log.
        let expect_logs = [1, 2, 0, 1, 2, 0, 1][round as usize];
        let all = settle(&store, "blog", expect_logs);
        assert_eq!(
            under(&all, "blog").len(),
            expect_logs,
            "round {round}: {all:?}"
        );
        if round >= 2 {
            assert_eq!(under(&all, "bmap").len(), 3, "round {round}: {all:?}");
        }
        follower.follow().unwrap();
        for b in [round, 1024 + round * 3, 3000 + round, 0, 3000] {
            assert_eq!(
                read(&follower, b),
                vec![want[b as usize]; BS],
                "follower, block {b}"
            );
        }
    }
    drop(writer);
    let again = open(&store, opts);
    for b in 0..4096u64 {
        if want[b as usize] != 0 || b % 97 == 0 {
            assert_eq!(read(&again, b), vec![want[b as usize]; BS], "block {b}");
        }
    }
    again.release().unwrap();
    follower.release().unwrap();
}

/// The root of the volume under `vols/a/`.
fn root_of(store: &Arc<dyn ObjectStore>) -> Root {
    Root::decode(&get(store, "vols/a/larch-volume")).unwrap()
}

/// Blocks of a volume whose map needs a level of index pages: 3,072 block-map pages.
const TREE_BLOCKS: u64 = 3 * 1024 * 1024;

/// A large volume's map is a tree: its checkpoints write the index pages above the
/// block-map pages they write and no other, the root names the index pages, superseded
/// ones are deleted, a follower reads only the index and block-map pages that changed,
/// and an open reads the tree back.
#[test]
fn a_large_volumes_map_is_a_tree_of_index_pages() {
    let store = new_volume(TREE_BLOCKS, 8);
    let opts = Options {
        map_log_commits: 0,
        ..options(0)
    };
    let writer = open(&store, opts);
    let (follower, _) = open_follower(&store, LocalState::default()).unwrap();
    // Block-map pages 0, 1,500 and 3,000: under index pages 0, 1 and 2.
    let first = [5u64, 1500 * 1024 + 7, 3000 * 1024 + 9];
    writer
        .stage_blocks(first.map(|b| (b, block_of(1))))
        .unwrap();
    writer.flush().unwrap();
    let all = names(&store);
    assert_eq!(under(&all, "bmap").len(), 3, "{all:?}");
    assert_eq!(under(&all, "bidx").len(), 3, "{all:?}");
    assert!(
        under(&all, "blog").is_empty(),
        "every commit checkpoints: {all:?}"
    );
    let root = root_of(&store);
    assert_eq!(root.levels, 1);
    assert_eq!(
        root.pages.iter().map(|p| p.page).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    follower.follow().unwrap();
    for b in first {
        assert_eq!(read(&follower, b), vec![1u8; BS], "block {b}");
    }
    // A block in page 1,501: one block-map page and the index page above it.
    writer.stage_blocks([(1501 * 1024, block_of(2))]).unwrap();
    writer.flush().unwrap();
    let all = settle(&store, "bidx", 3);
    assert_eq!(
        under(&all, "bidx").len(),
        3,
        "the old index page 1 is gone: {all:?}"
    );
    assert_eq!(under(&all, "bmap").len(), 4, "{all:?}");
    let root = root_of(&store);
    let seq = writer.commit_seq();
    assert_eq!(
        root.pages.iter().map(|p| p.version.seq).collect::<Vec<_>>(),
        [seq - 1, seq, seq - 1]
    );
    let before = gets(&follower);
    assert_eq!(follower.follow().unwrap().changed_blocks, 1);
    assert_eq!(
        gets(&follower) - before,
        2,
        "index page 1 and block-map page 1,501"
    );
    assert_eq!(read(&follower, 1501 * 1024), vec![2u8; BS]);
    assert_eq!(read(&follower, first[1]), vec![1u8; BS]);
    // A restart (no release) reads the tree back.
    drop(writer);
    let again = open(&store, opts);
    for b in first {
        assert_eq!(read(&again, b), vec![1u8; BS], "block {b}");
    }
    assert_eq!(read(&again, 1501 * 1024), vec![2u8; BS]);
    assert_eq!(read(&again, 1501 * 1024 + 1), vec![0u8; BS]);
    again.release().unwrap();
    follower.release().unwrap();
}

/// A volume whose root names its block-map pages itself (as every root did before
/// index pages) opens and reads back; its writer's next checkpoint moves it to the tree.
#[test]
fn a_root_without_index_pages_opens_and_moves_to_the_tree() {
    let store = new_volume(TREE_BLOCKS, 8);
    let opts = Options {
        map_log_commits: 0,
        ..options(0)
    };
    let blocks = [3u64, 1100 * 1024, 2200 * 1024 + 5];
    let writer = open(&store, opts);
    writer
        .stage_blocks(blocks.map(|b| (b, block_of(4))))
        .unwrap();
    writer.flush().unwrap();
    writer.release().unwrap();
    // Flatten it: the root names the block-map pages, and no index page exists.
    let mut root = root_of(&store);
    let mut leaves = Vec::new();
    for index in &root.pages {
        let name = format!(
            "vols/a/{}",
            layout::index_page_name(1, index.page, index.version)
        );
        let span = index.page * 1024..(index.page + 1) * 1024;
        let bytes = get(&store, &name);
        leaves.extend(layout::decode_index_page(&bytes, index.checksum, span).unwrap());
        delete(&store, &name);
    }
    root.levels = 0;
    root.pages = leaves;
    put(&store, "vols/a/larch-volume", root.encode());
    assert!(under(&names(&store), "bidx").is_empty());
    let (follower, _) = open_follower(&store, LocalState::default()).unwrap();
    let writer = open(&store, opts);
    for b in blocks {
        assert_eq!(read(&writer, b), vec![4u8; BS], "block {b}");
        assert_eq!(read(&follower, b), vec![4u8; BS], "follower, block {b}");
    }
    writer.stage_blocks([(7, block_of(5))]).unwrap();
    writer.flush().unwrap();
    let root = root_of(&store);
    assert_eq!(root.levels, 1);
    assert_eq!(under(&names(&store), "bidx").len(), 3);
    follower.follow().unwrap();
    for (b, byte) in [(7, 5u8), (blocks[1], 4), (blocks[2], 4), (8, 0)] {
        assert_eq!(read(&follower, b), vec![byte; BS], "follower, block {b}");
    }
    drop(writer);
    let again = open(&store, opts);
    assert_eq!(read(&again, blocks[2]), vec![4u8; BS]);
    assert_eq!(read(&again, 7), vec![5u8; BS]);
    again.release().unwrap();
    follower.release().unwrap();
}

/// A segments volume grows while served: the new blocks read as zeros and take writes, a
/// follower keeps following (at its size until it opens the volume again), and an open
/// given a larger size than the root's completes a grow recorded before it reached the
/// store. An objects volume, a shrink and a follower's grow are refused.
#[test]
fn a_segments_volume_grows_while_served() {
    let store = new_volume(64, 8);
    let writer = open(&store, options(0));
    writer.stage_blocks([(63, block_of(1))]).unwrap();
    writer.flush().unwrap();
    let (follower, _) = open_follower(&store, LocalState::default()).unwrap();
    writer.grow(128 * BS as u64).unwrap();
    assert_eq!(writer.size_bytes(), 128 * BS as u64);
    assert_eq!(root_of(&store).size_bytes, 128 * BS as u64);
    assert_eq!(read(&writer, 100), vec![0u8; BS]);
    writer.stage_blocks([(100, block_of(2))]).unwrap();
    writer.flush().unwrap();
    assert_eq!(read(&writer, 100), vec![2u8; BS]);
    // The follower follows the grown volume's commits, at its own size.
    assert_eq!(follower.follow().unwrap().changed_blocks, 1);
    assert_eq!(follower.size_bytes(), 64 * BS as u64);
    assert_eq!(read(&follower, 63), vec![1u8; BS]);
    let err = follower.grow(256 * BS as u64).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    // A follower that knew 64 blocks opens the grown volume at its new size.
    let (again, _) = open_follower(&store, LocalState::default()).unwrap();
    assert_eq!(again.size_bytes(), 128 * BS as u64);
    assert_eq!(read(&again, 100), vec![2u8; BS]);
    again.release().unwrap();
    follower.release().unwrap();
    // No shrink.
    let err = writer.grow(32 * BS as u64).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Unsupported, "{err}");
    writer.release().unwrap();
    // An open told of a grow to 192 blocks (recorded, not yet on the store) completes
    // it; one told of another size than the root's, and of no grow to it, refuses the
    // root.
    let sized = |blocks: u64, grow: Option<u64>| Options {
        size_bytes: Some(blocks * BS as u64),
        grow_to: grow.map(|g| g * BS as u64),
        ..options(0)
    };
    let grown = open(&store, sized(128, Some(192)));
    assert_eq!(grown.size_bytes(), 192 * BS as u64);
    assert_eq!(root_of(&store).size_bytes, 192 * BS as u64);
    assert_eq!(read(&grown, 100), vec![2u8; BS]);
    grown.release().unwrap();
    // The grow landed before its record was updated: the root's size is the grow's.
    open(&store, sized(128, Some(192))).release().unwrap();
    for (blocks, grow) in [(128, None), (256, None), (128, Some(256))] {
        let err = ObjectVolume::open(
            Arc::clone(&store),
            "vols/a",
            "mem://vols/a",
            "node-a",
            LocalState::default(),
            sized(blocks, grow),
            Box::new(|_| Ok(())),
        )
        .unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
    }
    // An objects volume keeps its size.
    let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x0b, 64 * BS as u64, BS as u32, 8);
    larch_object::create(&objects, "vols/a/", "mem://vols/a", &root).unwrap();
    let vol = open(&objects, options(0));
    let err = vol.grow(128 * BS as u64).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("segments"), "{err}");
    vol.release().unwrap();
}

/// A volume whose block-map pages do not fit in its page cache reads them from the store
/// as lookups need them: at open (once, to count the segments), then on demand; what it
/// holds in memory stays near one page however many pages the map has; commits,
/// checkpoints, a reopen and a follower all serve the right bytes.
#[test]
fn a_map_larger_than_its_cache_is_read_on_demand() {
    let store = new_volume(16 * 1024, 4);
    let one_page = Options {
        map_log_commits: 2,
        // One page kept, whatever its size.
        map_cache_bytes: 1,
        ..options(0)
    };
    let page_gets = |vol: &ObjectVolume| vol.stats.map_page_gets.load(Ordering::Relaxed);
    // Blocks in each of 16 block-map pages, every commit a checkpoint.
    let blocks: Vec<u64> = (0..16u64)
        .flat_map(|p| [p * 1024 + 3, p * 1024 + 4])
        .collect();
    let writer = open(
        &store,
        Options {
            map_log_commits: 0,
            ..one_page
        },
    );
    writer
        .stage_blocks(blocks.iter().map(|&b| (b, block_of(b as u8 | 1))))
        .unwrap();
    writer.flush().unwrap();
    for &b in &blocks {
        assert_eq!(read(&writer, b), vec![b as u8 | 1; BS], "block {b}");
    }
    writer.release().unwrap();

    let vol = open(&store, one_page);
    assert_eq!(page_gets(&vol), 16, "the open reads each page once");
    assert!(
        vol.map_bytes() < 2 * larch_object::CACHED_PAGE_BYTES,
        "{} bytes of map in memory",
        vol.map_bytes()
    );
    let before = page_gets(&vol);
    for &b in &blocks {
        assert_eq!(read(&vol, b), vec![b as u8 | 1; BS], "block {b}");
    }
    assert!(
        page_gets(&vol) - before >= 15,
        "pages read again: {}",
        page_gets(&vol) - before
    );
    // Commits that log (two of them), then a checkpoint, over blocks of every page.
    let (follower, _) = open_follower(&store, LocalState::default()).unwrap();
    assert_eq!(page_gets(&follower), 0, "a follower's open reads no page");
    assert_eq!(follower.segment_usage(), None, "nor counts the segments");
    for round in 0..3u8 {
        vol.stage_blocks(
            (0..16u64).map(|p| (p * 1024 + 4 + u64::from(round), block_of(0x40 + round))),
        )
        .unwrap();
        vol.flush().unwrap();
        let followed = follower.follow().unwrap();
        assert_eq!(followed.commit_seq, vol.commit_seq());
        if round < 2 {
            assert_eq!(followed.changed_blocks, 16, "round {round}");
        } else {
            // The checkpoint replaced 16 pages whose old versions the writer deleted and
            // the follower's one-page cache no longer holds: the blocks born since and
            // every hole count as changed (the 16 written and the 16 * 1,020 holes).
            assert_eq!(followed.changed_blocks, 16 + 16 * 1020, "round {round}");
        }
    }
    let expect = |b: u64| -> u8 {
        match b % 1024 {
            3 => b as u8 | 1,
            4 => 0x40,
            5 => 0x41,
            6 => 0x42,
            _ => 0,
        }
    };
    for p in 0..16u64 {
        for b in p * 1024 + 2..p * 1024 + 8 {
            assert_eq!(read(&vol, b), vec![expect(b); BS], "writer, block {b}");
            assert_eq!(
                read(&follower, b),
                vec![expect(b); BS],
                "follower, block {b}"
            );
        }
    }
    assert!(vol.map_bytes() < 2 * larch_object::CACHED_PAGE_BYTES);
    let (stored, live, _) = vol.segment_usage().unwrap();
    let record = (BS + layout::TRAILER_BYTES) as u64;
    assert_eq!(
        live,
        16 * 4 * record,
        "live records: blocks 3 to 6 of 16 pages"
    );
    assert!(stored >= live);
    // A restart (no release) counts the same and reads the same.
    drop(vol);
    let again = open(&store, one_page);
    assert_eq!(again.segment_usage().unwrap().1, live);
    for p in 0..16u64 {
        for b in p * 1024 + 2..p * 1024 + 8 {
            assert_eq!(read(&again, b), vec![expect(b); BS], "reopened, block {b}");
        }
    }
    again.release().unwrap();
    follower.release().unwrap();
}

/// A writer's open of a map larger than `count_at_open_pages` returns before it counts
/// the segments; a thread counts them while the volume serves and commits, and then the
/// counts are what a full count at open finds, the segments that commits emptied
/// meanwhile are deleted, and repacking resumes.
#[test]
fn a_large_map_is_counted_in_the_background() {
    let store = new_volume(64 * 1024, 4);
    let opts = Options {
        map_log_commits: 0,
        ..options(50)
    };
    let later = Options {
        count_at_open_pages: 0,
        count_round_pages: 1,
        ..opts
    };
    let writer = open(&store, opts);
    // Four blocks in each of 32 pages, one segment of four per page.
    for p in 0..32u64 {
        writer
            .stage_blocks((0..4).map(|i| (p * 1024 + i, block_of(p as u8 + 1))))
            .unwrap();
        writer.flush().unwrap();
    }
    let usage = writer.segment_usage().unwrap();
    writer.release().unwrap();
    let counted = |vol: &ObjectVolume| {
        for _ in 0..500 {
            if let Some(usage) = vol.segment_usage() {
                return usage;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the background count did not finish");
    };
    let vol = open(&store, later);
    // Meanwhile the volume serves and commits: page 0's segment is emptied (every block
    // of it overwritten), page 1's thinned.
    vol.stage_blocks((0..4).map(|i| (i, block_of(0x80))))
        .unwrap();
    vol.stage_blocks([(1024, block_of(0x81))]).unwrap();
    vol.flush().unwrap();
    let after = counted(&vol);
    let record = (BS + layout::TRAILER_BYTES) as u64;
    assert_eq!(after.1, usage.1, "live records: as many as before");
    // One emptied; the commit's five blocks went into two new ones (four records each).
    assert_eq!(after.2, usage.2 + 1, "segments");
    assert_eq!(
        after.0,
        usage.0 + record,
        "page 1's old segment holds one dead record"
    );
    // The emptied segment is deleted once the count is done (never before: the count
    // could not know that no page it had not reached pointed into it).
    let segments = settle(&store, "seg", after.2 as usize);
    assert_eq!(under(&segments, "seg").len() as u64, after.2);
    for p in 0..32u64 {
        let want = match p {
            0 => 0x80,
            _ => p as u8 + 1,
        };
        assert_eq!(read(&vol, p * 1024 + 2), vec![want; BS], "page {p}");
    }
    assert_eq!(read(&vol, 1024), vec![0x81; BS]);
    // A reopen that counts at once finds the same.
    vol.release().unwrap();
    let again = open(&store, opts);
    assert_eq!(again.segment_usage().unwrap(), after);
    again.release().unwrap();
}

/// A follower that needs a block-map page its writer superseded and deleted (it reads
/// pages only when a lookup needs them) follows the root at once and reads the block
/// where the new map says, as when it meets a segment gone.
#[test]
fn a_follower_reads_through_a_map_page_its_writer_deleted() {
    let store = new_volume(64, 8);
    let opts = Options {
        map_log_commits: 0,
        ..options(0)
    };
    let writer = open(&store, opts);
    writer.stage_blocks([(3, block_of(1))]).unwrap();
    writer.flush().unwrap();
    let (follower, _) = open_follower(&store, LocalState::default()).unwrap();
    assert_eq!(
        follower.stats.map_page_gets.load(Ordering::Relaxed),
        0,
        "no page read at open"
    );
    // A checkpoint replaces page 0; its old version is deleted once the commit landed.
    writer.stage_blocks([(3, block_of(2))]).unwrap();
    writer.flush().unwrap();
    settle(&store, "bmap", 1);
    assert_eq!(read(&follower, 3), vec![2u8; BS]);
    assert_eq!(follower.commit_seq(), writer.commit_seq());
    follower.release().unwrap();
    writer.release().unwrap();
}
