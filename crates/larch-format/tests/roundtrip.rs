//! Property tests: every structure survives encode → decode unchanged, decoders never
//! panic on arbitrary bytes, and single-byte damage is caught.

use larch_format::{
    ArcState, Compression, ContentType, DevHeaderPhys, EntryKind, FormatError,
    LOG_BLOCK_MAX_ENTRIES, LogBlockPhys, LogBlockPtrPhys, LogEntryPhys, VERSION,
};
use proptest::prelude::*;

fn any_enum<T: Copy + std::fmt::Debug + 'static>(all: &'static [T]) -> impl Strategy<Value = T> {
    (0..all.len()).prop_map(move |i| all[i])
}

prop_compose! {
    fn data_entry()(
        volume_guid in any::<u64>(), block_number in any::<u64>(), generation in any::<u64>(),
        daddr in any::<u64>(), data_checksum in any::<u64>(),
        physical_size in 1u32..=(16 << 20), extra in 0u32..4096,
        compressed in any::<bool>(), content in any_enum(ContentType::ALL),
        arc_state in any_enum(ArcState::ALL), prefetch in any::<bool>(),
    ) -> LogEntryPhys {
        let (compression, logical_size) = if compressed {
            (Compression::Lz4, (physical_size + extra).min(16 << 20))
        } else {
            (Compression::Off, physical_size)
        };
        LogEntryPhys {
            kind: EntryKind::Data, volume_guid, block_number, generation, daddr, data_checksum,
            logical_size, physical_size, compression, content, arc_state, prefetch,
        }
    }
}

fn entry() -> impl Strategy<Value = LogEntryPhys> {
    prop_oneof![
        3 => data_entry(),
        1 => (any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(v, b, g)| LogEntryPhys::tombstone(v, b, g)),
    ]
}

prop_compose! {
    fn pointer()(
        sequence in 1u64.., payload_start_pos in 0u64..(1 << 50), payload_bytes in 0u64..(1 << 30),
        checksum in any::<u64>(), entries in 0usize..=LOG_BLOCK_MAX_ENTRIES, lz4 in any::<bool>(),
        shrink in 1u32..100,
    ) -> LogBlockPtrPhys {
        let logical_size = LogBlockPhys::logical_size(entries) as u32;
        let (compression, physical_size) = if lz4 {
            (Compression::Lz4, logical_size.saturating_sub(shrink).max(1))
        } else {
            (Compression::Off, logical_size)
        };
        LogBlockPtrPhys {
            sequence, block_pos: payload_start_pos + payload_bytes, payload_start_pos, payload_bytes,
            checksum, logical_size, physical_size, compression,
        }
    }
}

fn pointer_or_null() -> impl Strategy<Value = LogBlockPtrPhys> {
    prop_oneof![4 => pointer(), 1 => Just(LogBlockPtrPhys::NULL)]
}

prop_compose! {
    fn header()(
        flags in 0u32..2, pool_guid in any::<u64>(), device_guid in any::<u64>(),
        ring_start in any::<u64>(), ring_end in any::<u64>(), sector_shift in 9u32..16,
        entries_per_block in 1u32..=1022, write_hand_pos in any::<u64>(), evict_hand_pos in any::<u64>(),
        log_block_count in any::<u64>(), log_block_bytes in any::<u64>(), sequence in any::<u64>(),
        chain_count in 1u32..=2, newest0 in pointer_or_null(), newest1 in pointer_or_null(),
    ) -> DevHeaderPhys {
        DevHeaderPhys {
            version: VERSION, flags, pool_guid, device_guid, ring_start, ring_end,
            sector_bytes: 1 << sector_shift, entries_per_block, write_hand_pos, evict_hand_pos,
            log_block_count, log_block_bytes, sequence, chain_count, newest: [newest0, newest1],
        }
    }
}

proptest! {
    #[test]
    fn entry_round_trips(e in entry()) {
        prop_assert_eq!(LogEntryPhys::decode(&e.encode()), Ok(e));
    }

    #[test]
    fn pointer_round_trips(p in pointer_or_null()) {
        prop_assert_eq!(LogBlockPtrPhys::decode(&p.encode()), Ok(p));
    }

    #[test]
    fn header_round_trips(h in header()) {
        prop_assert_eq!(DevHeaderPhys::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn header_single_byte_damage_is_detected(h in header(), at in 0usize..512, mask in 1u8..) {
        let mut bytes = h.encode();
        bytes[at] ^= mask;
        prop_assert!(DevHeaderPhys::decode(&bytes).is_err());
    }

    #[test]
    fn log_block_round_trips(
        entries in proptest::collection::vec(entry(), 0..64),
        prev in pointer_or_null(),
        sector_shift in 9u32..13,
        repeat in 0usize..900,
    ) {
        // Many identical entries make blocks that compress; random ones make blocks that
        // do not. Both paths must round-trip.
        let mut entries = entries;
        if let Some(&first) = entries.first() {
            entries.extend(std::iter::repeat_n(first, repeat));
        }
        let block = LogBlockPhys { prev, entries };
        let sector = 1u64 << sector_shift;
        let enc = block.encode_physical(sector);
        prop_assert_eq!(enc.bytes.len() as u64 % sector, 0);
        let ptr = LogBlockPtrPhys {
            sequence: 7, block_pos: 1 << 20, payload_start_pos: 1 << 19, payload_bytes: 1 << 19,
            checksum: enc.checksum, logical_size: enc.logical_size,
            physical_size: enc.physical_size, compression: enc.compression,
        };
        prop_assert_eq!(LogBlockPtrPhys::decode(&ptr.encode()), Ok(ptr));
        prop_assert_eq!(LogBlockPhys::decode_physical(&enc.bytes, &ptr), Ok(block.clone()));
        prop_assert_eq!(LogBlockPhys::decode_logical(&block.encode_logical()), Ok(block));
    }

    #[test]
    fn log_block_damage_is_detected(
        entries in proptest::collection::vec(entry(), 1..40),
        at in any::<prop::sample::Index>(), mask in 1u8..,
    ) {
        let block = LogBlockPhys { prev: LogBlockPtrPhys::NULL, entries };
        let enc = block.encode_physical(512);
        let ptr = LogBlockPtrPhys {
            sequence: 1, block_pos: 4096, payload_start_pos: 0, payload_bytes: 4096,
            checksum: enc.checksum, logical_size: enc.logical_size,
            physical_size: enc.physical_size, compression: enc.compression,
        };
        let mut bytes = enc.bytes.clone();
        let i = at.index(enc.physical_size as usize);
        bytes[i] ^= mask;
        let is_checksum_error =
            matches!(LogBlockPhys::decode_physical(&bytes, &ptr), Err(FormatError::BadChecksum { .. }));
        prop_assert!(is_checksum_error);
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
        let _ = DevHeaderPhys::decode(&bytes);
        let _ = LogBlockPtrPhys::decode(&bytes);
        let _ = LogEntryPhys::decode(&bytes);
        let _ = LogBlockPhys::decode_logical(&bytes);
        if let Ok(ptr) = LogBlockPtrPhys::decode(&bytes) {
            let _ = LogBlockPhys::decode_physical(&bytes, &ptr);
        }
    }
}

#[test]
fn compressible_block_is_stored_lz4_and_saves_a_sector() {
    let entries = vec![LogEntryPhys::tombstone(1, 2, 3); LOG_BLOCK_MAX_ENTRIES];
    let block = LogBlockPhys {
        prev: LogBlockPtrPhys::NULL,
        entries,
    };
    let enc = block.encode_physical(4096);
    assert_eq!(enc.compression, Compression::Lz4);
    assert!(enc.bytes.len() < 65536, "stored {} bytes", enc.bytes.len());
}

#[test]
fn tiny_block_is_stored_raw() {
    // 128 + 64 bytes fit one sector either way, so compression saves nothing.
    let block = LogBlockPhys {
        prev: LogBlockPtrPhys::NULL,
        entries: vec![LogEntryPhys::tombstone(9, 9, 9)],
    };
    assert_eq!(block.encode_physical(4096).compression, Compression::Off);
}

#[test]
fn malformed_fields_are_refused() {
    let mut tomb = LogEntryPhys::tombstone(1, 2, 3);
    tomb.daddr = 5;
    assert!(
        LogEntryPhys::decode(&tomb.encode()).is_err(),
        "tombstone with an address"
    );
    let mut bytes = LogEntryPhys::tombstone(1, 2, 3).encode();
    bytes[48] = 9;
    assert!(matches!(
        LogEntryPhys::decode(&bytes),
        Err(FormatError::BadField {
            field: "kind",
            value: 9,
            ..
        })
    ));
    let mut ptr = LogBlockPtrPhys::NULL;
    ptr.block_pos = 1;
    assert!(
        LogBlockPtrPhys::decode(&ptr.encode()).is_err(),
        "null pointer with a position"
    );
}
