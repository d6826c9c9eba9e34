//! Tests of the compact L2 index: entries, pushes at both ends, removal, eviction, the
//! bulk fill, and laps of the ring against a model.

use super::*;

fn index() -> DeviceIndex {
    DeviceIndex::new(4096, 1 << 30, 512).expect("valid geometry")
}

#[test]
fn entries_are_20_bytes_and_round_trip() {
    assert_eq!(size_of::<Entry>(), 20);
    let key = pack_key(VOLUME_SLOTS as u16 - 1, MAX_BLOCK);
    let e = Entry::new(key, POS_MASK, u64::MAX - 5, BAD | READ);
    assert_eq!(
        (e.key(), e.pos34(), e.checksum(), e.flags()),
        (key, POS_MASK, u64::MAX - 5, BAD | READ)
    );
    assert_eq!(unpack_key(key), (VOLUME_SLOTS as u16 - 1, MAX_BLOCK));
}

#[test]
fn push_get_remove_evict() {
    let mut ix = index();
    for i in 0..10_000u64 {
        let flags = if i % 2 == 0 { MFU } else { PREFETCH };
        assert!(ix.push(pack_key(1, i), i * 8192, i ^ 0xabc, flags));
    }
    ix.check();
    let c = ix.get(pack_key(1, 77)).expect("indexed");
    assert_eq!(c.ring_pos, 77 * 8192);
    assert_eq!(c.daddr, 4096 + 77 * 8192);
    assert_eq!((c.checksum, c.flags), (77 ^ 0xabc, PREFETCH));
    assert!(ix.get(pack_key(2, 77)).is_none());
    assert_eq!(
        ix.remove(pack_key(1, 77)).map(|c| c.ring_pos),
        Some(77 * 8192)
    );
    assert!(ix.get(pack_key(1, 77)).is_none());
    assert!(ix.remove(pack_key(1, 77)).is_none());
    assert_eq!(ix.get(pack_key(1, 78)).map(|c| c.flags), Some(MFU));
    assert_eq!(
        ix.get_for_read(pack_key(1, 78)).map(|c| c.flags),
        Some(READ | MFU),
        "marked read as it is handed out"
    );
    assert_eq!(ix.get(pack_key(1, 78)).map(|c| c.flags), Some(READ | MFU));
    ix.check();
    let mut gone = Vec::new();
    ix.evict_below(100 * 8192, |k, c| {
        assert_eq!(unpack_key(k), (1, c.ring_pos / 8192));
        gone.push(c.ring_pos / 8192);
    });
    assert_eq!(gone.len(), 99, "the dead entry is not reported");
    assert!(!gone.contains(&77));
    assert_eq!(ix.len(), 9900);
    assert!(ix.get(pack_key(1, 99)).is_none());
    assert!(ix.get(pack_key(1, 100)).is_some());
    ix.check();
}

#[test]
fn refuses_what_does_not_fit() {
    let mut ix = index();
    assert!(ix.push(pack_key(0, 1), 8192, 0, 0));
    assert!(!ix.push(pack_key(0, 2), 4096, 0, 0), "backwards");
    assert!(!ix.push(1 << 60, 16384, 0, 0), "key too wide");
    assert!(!ix.push(pack_key(0, 4), 16385, 0, 0), "unaligned");
    assert!(ix.get_for_read(pack_key(0, 1)).is_some());
    assert!(
        !ix.mark_bad(pack_key(0, 1), 4096),
        "another copy's position"
    );
    assert!(ix.mark_bad(pack_key(0, 1), 8192));
    assert!(ix.get(pack_key(0, 1)).is_none(), "bad copies are not read");
    assert!(ix.get_for_read(pack_key(0, 1)).is_none());
    assert!(ix.contains(pack_key(0, 1)), "but stay until overwritten");
    assert_eq!(ix.remove(pack_key(0, 1)).map(|c| c.flags), Some(READ));
    assert!(!ix.contains(pack_key(0, 1)));
    assert!(DeviceIndex::new(0, 1 << 50, 512).is_none());
    assert!(DeviceIndex::new(0, 1 << 40, 3).is_none());
    ix.check();
}

#[test]
fn push_front_builds_the_same_index_as_push() {
    let mut back = index();
    let mut front = index();
    for i in 0..5000u64 {
        assert!(back.push(pack_key(2, i), i * 4096, i, MFU));
    }
    for i in (0..5000u64).rev() {
        assert!(front.push_front(pack_key(2, i), i * 4096, i, MFU));
    }
    front.check();
    assert_eq!((front.len(), front.live()), (back.len(), back.live()));
    for i in 0..5000u64 {
        assert_eq!(
            front.get(pack_key(2, i)),
            back.get(pack_key(2, i)),
            "block {i}"
        );
    }
    // Equal positions are allowed (the ring writes nothing at one position twice, but
    // the index does not need to know); forwards and unaligned ones are not.
    assert!(front.push_front(pack_key(3, 0), 0, 7, 0));
    assert!(!front.push_front(pack_key(3, 1), 4096, 7, 0), "forwards");
    assert!(front.push_front(pack_key(3, 1), 0, 7, 0), "equal again");
    let mut fresh = index();
    assert!(!fresh.push_front(pack_key(3, 2), 513, 0, 0), "unaligned");
    assert!(!fresh.push_front(1 << 60, 0, 0, 0), "key too wide");
    front.check();
    // Newer copies then go to the back, and the evict hand pops the front.
    assert!(front.push(pack_key(4, 0), 5000 * 4096, 1, 0));
    assert!(!front.push(pack_key(4, 1), 4999 * 4096, 1, 0), "backwards");
    let mut gone = 0;
    front.evict_below(100 * 4096, |_, _| gone += 1);
    assert_eq!(gone, 102, "blocks 0..100 and the two at position 0");
    front.check();
}

/// An index queued without its table and then built in bulk holds what one built
/// entry by entry holds; of two entries of a key the newer (nearer the back) wins.
#[test]
fn index_unindexed_builds_the_table_push_front_builds() {
    let mut bulk = DeviceIndex::new(0, 1 << 30, 512).expect("valid");
    let mut single = DeviceIndex::new(0, 1 << 30, 512).expect("valid");
    let mut rng = 0x2545_f491u64;
    let mut pos = 1u64 << 29;
    let mut seen = std::collections::HashSet::new();
    let mut dups = 0;
    for _ in 0..(5 * CHUNK) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = pack_key(1, rng % 4000);
        pos -= 512 * (1 + rng % 3);
        assert!(bulk.push_front_unindexed(key, pos, key ^ pos, MFU));
        if seen.insert(key) {
            assert!(single.push_front(key, pos, key ^ pos, MFU));
        } else {
            dups += 1;
        }
    }
    assert!(dups > 100, "the test needs duplicates: {dups}");
    assert!(
        !bulk.push_front_unindexed(pack_key(1, 1), pos + 512, 0, 0),
        "forwards"
    );
    let mut reported = Vec::new();
    bulk.index_unindexed(|key, copy| reported.push((key, copy.ring_pos)));
    bulk.check();
    assert_eq!(reported.len(), dups);
    assert_eq!(bulk.live(), single.live());
    for key in &seen {
        assert_eq!(bulk.get(*key), single.get(*key), "key {key:#x}");
    }
    for (key, ring_pos) in reported {
        let kept = bulk.get(key).expect("the newer copy is indexed");
        assert!(
            kept.ring_pos > ring_pos,
            "{key:#x}: {} kept over {ring_pos}",
            kept.ring_pos
        );
    }
    // Then it takes newer copies at the back and evicts at the front as usual.
    assert!(bulk.push(pack_key(2, 0), 1 << 29, 1, 0));
    bulk.evict_below(pos + 512 * 100, |_, _| {});
    bulk.check();
}

#[test]
fn push_front_refuses_a_span_the_position_field_cannot_hold() {
    let mut ix = DeviceIndex::new(0, 1 << 40, 512).expect("valid");
    let newest = 1u64 << 42;
    assert!(ix.push_front(pack_key(0, 0), newest, 0, 0));
    let limit = newest - (1u64 << (POS_BITS - 1)) * 512;
    assert!(!ix.push_front(pack_key(0, 1), limit, 0, 0));
    assert!(ix.push_front(pack_key(0, 1), limit + 512, 0, 0));
    assert_eq!(
        ix.get(pack_key(0, 1)).map(|c| c.ring_pos),
        Some(limit + 512)
    );
    ix.check();
}

/// A rebuild's order against a model: copies arrive newest first (positions falling),
/// some keys twice (the older one is refused by the caller, as a rebuild does), then
/// the built index serves removals, newer pushes and evictions like one built by
/// `push`; chunk boundaries are crossed in both directions.
#[test]
fn push_front_against_a_model() {
    use std::collections::BTreeMap;
    let ring = 1u64 << 30;
    let mut ix = DeviceIndex::new(0, ring, 512).expect("valid");
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let mut rng = 0x9e37_79b9u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Newest first, from the middle of the second lap downwards.
    let mut pos = ring + (ring / 2);
    for _ in 0..(3 * CHUNK + 17) {
        let key = pack_key(1, next() % 5000);
        pos -= 512 * (1 + next() % 4);
        if model.contains_key(&key) {
            continue;
        }
        assert!(ix.push_front(key, pos, key ^ pos, 0));
        model.insert(key, pos);
    }
    ix.check();
    assert_eq!(ix.live(), model.len());
    let mut pos = ring + (ring / 2);
    for step in 0..20_000u64 {
        let key = pack_key(1, next() % 5000);
        match step % 3 {
            0 => assert_eq!(ix.remove(key).map(|c| c.ring_pos), model.remove(&key)),
            _ => {
                if let Some(old) = ix.remove(key) {
                    assert_eq!(model.remove(&key), Some(old.ring_pos));
                }
                assert!(ix.push(key, pos, key ^ pos, 0));
                model.insert(key, pos);
                pos += 512;
            }
        }
        let floor = pos.saturating_sub(ring / 256);
        ix.evict_below(floor, |k, c| {
            assert_eq!(model.remove(&k), Some(c.ring_pos), "evicted copy in model");
        });
        if step % 1009 == 0 {
            ix.check();
        }
    }
    ix.check();
    for (key, p) in &model {
        let c = ix.get(*key).expect("model copy indexed");
        assert_eq!((c.ring_pos, c.checksum), (*p, key ^ p));
    }
    assert_eq!(ix.live(), model.len());
}

/// Many laps of a small ring: positions wrap the position field, sequence numbers
/// past 2^32 would take too long, so the test checks the position arithmetic
/// and that the queue, the table and a model agree throughout.
#[test]
fn laps_against_a_model() {
    use std::collections::HashMap;
    let ring = 64 * 8192u64;
    let mut ix = DeviceIndex::new(0, ring, 512).expect("valid");
    // Start near the wrap of the sector position field.
    let mut pos = ((1u64 << POS_BITS) - 40) * 512;
    let mut model: HashMap<u64, u64> = HashMap::new();
    let mut rng = 0x1234_5678u64;
    for step in 0..20_000u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = pack_key(3, rng % 200);
        if rng.is_multiple_of(5) {
            assert_eq!(ix.remove(key).map(|c| c.ring_pos), model.remove(&key));
            continue;
        }
        if let Some(old) = ix.remove(key) {
            assert_eq!(model.remove(&key), Some(old.ring_pos));
        }
        let floor = (pos + 8192).saturating_sub(ring);
        ix.evict_below(floor, |_, c| {
            let k = model
                .iter()
                .find(|(_, p)| **p == c.ring_pos)
                .map(|(k, _)| *k)
                .expect("evicted copy in model");
            model.remove(&k);
        });
        assert!(ix.push(key, pos, step, 0));
        model.insert(key, pos);
        pos += 8192;
        if step % 997 == 0 {
            ix.check();
        }
    }
    ix.check();
    for (key, p) in &model {
        let c = ix.get(*key).expect("model copy indexed");
        assert_eq!(c.ring_pos, *p);
        assert_eq!(c.daddr, p % ring);
    }
    assert_eq!(ix.live(), model.len());
}
