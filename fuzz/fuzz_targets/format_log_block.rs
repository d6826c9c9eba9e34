//! Fuzz `LogBlockPhys::decode_logical` and `decode_physical`: never panic, and whatever
//! decodes survives encode → decode. The first two input bytes (little-endian) describe
//! the stored form: bit 0 is LZ4 or raw, the rest the entry count; the checksum is made to
//! match so decompression and field checks are reached.
#![no_main]

use larch_format::{Compression, LogBlockPhys, LogBlockPtrPhys, checksum};
use libfuzzer_sys::fuzz_target;

fn round_trip(block: &LogBlockPhys) {
    assert_eq!(
        LogBlockPhys::decode_logical(&block.encode_logical()).as_ref(),
        Ok(block)
    );
    let stored = block.encode_physical(512);
    let ptr = LogBlockPtrPhys {
        sequence: 1,
        block_pos: 0,
        payload_start_pos: 0,
        payload_bytes: 0,
        checksum: stored.checksum,
        logical_size: stored.logical_size,
        physical_size: stored.physical_size,
        compression: stored.compression,
    };
    assert_eq!(
        LogBlockPhys::decode_physical(&stored.bytes, &ptr).as_ref(),
        Ok(block)
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((mode, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let mode = u16::from_le_bytes(*mode);
    if let Ok(block) = LogBlockPhys::decode_logical(body) {
        round_trip(&block);
    }
    // Describe `body` as a stored block; the claimed logical size comes from the input.
    let entries = usize::from(mode >> 1) % 1023;
    let logical_size = LogBlockPhys::logical_size(entries) as u32;
    let compression = if mode & 1 == 1 {
        Compression::Lz4
    } else {
        Compression::Off
    };
    let physical_size = match compression {
        Compression::Off => logical_size,
        Compression::Lz4 => (body.len() as u32)
            .min(logical_size.saturating_sub(1))
            .max(1),
    };
    let ptr = LogBlockPtrPhys {
        sequence: 1,
        block_pos: 0,
        payload_start_pos: 0,
        payload_bytes: 0,
        checksum: checksum(&body[..(physical_size as usize).min(body.len())]),
        logical_size,
        physical_size,
        compression,
    };
    if let Ok(block) = LogBlockPhys::decode_physical(body, &ptr) {
        round_trip(&block);
    }
});
