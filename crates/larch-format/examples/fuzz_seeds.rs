//! Writes valid encodings of every structure as seed corpora for the `format_*` fuzz
//! targets: `cargo run -p larch-format --example fuzz_seeds -- fuzz/seeds`.

use std::path::{Path, PathBuf};

use larch_format::{
    ArcState, Compression, ContentType, DevHeaderPhys, EntryKind, FLAG_FIRST_SWEEP, LogBlockPhys,
    LogBlockPtrPhys, LogEntryPhys, VERSION,
};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(name), bytes)
}

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/seeds".into()),
    );
    let data = LogEntryPhys {
        kind: EntryKind::Data,
        volume_guid: 0x1234,
        block_number: 42,
        generation: 7,
        daddr: 1 << 20,
        data_checksum: 0xdead_beef,
        logical_size: 16384,
        physical_size: 9000,
        compression: Compression::Lz4,
        content: ContentType::Metadata,
        arc_state: ArcState::Mfu,
        prefetch: true,
    };
    let tomb = LogEntryPhys::tombstone(0x1234, 43, 8);
    write(&dir, "format_log_entry", "data", &data.encode())?;
    write(&dir, "format_log_entry", "tombstone", &tomb.encode())?;

    let mut entries = vec![data; 300];
    entries.push(tomb);
    let block = LogBlockPhys {
        prev: LogBlockPtrPhys::NULL,
        entries,
    };
    let stored = block.encode_physical(512);
    let ptr = LogBlockPtrPhys {
        sequence: 3,
        block_pos: 5 << 20,
        payload_start_pos: 4 << 20,
        payload_bytes: 1 << 20,
        checksum: stored.checksum,
        logical_size: stored.logical_size,
        physical_size: stored.physical_size,
        compression: stored.compression,
    };
    write(&dir, "format_log_block_ptr", "lz4", &ptr.encode())?;
    write(
        &dir,
        "format_log_block_ptr",
        "null",
        &LogBlockPtrPhys::NULL.encode(),
    )?;
    // format_log_block's first two bytes describe the stored bytes (bit 0: LZ4; the rest:
    // the entry count).
    let mut logical = vec![0u8, 0];
    logical.extend(block.encode_logical());
    write(&dir, "format_log_block", "logical", &logical)?;
    let mut small = vec![0u8, 0];
    small.extend(
        LogBlockPhys {
            prev: ptr,
            entries: vec![tomb],
        }
        .encode_logical(),
    );
    write(&dir, "format_log_block", "small", &small)?;
    let mode = (301u16 << 1) | 1;
    let mut compressed = mode.to_le_bytes().to_vec();
    compressed.extend(&stored.bytes[..stored.physical_size as usize]);
    write(&dir, "format_log_block", "lz4", &compressed)?;

    let header = DevHeaderPhys {
        version: VERSION,
        flags: FLAG_FIRST_SWEEP,
        pool_guid: 1,
        device_guid: 2,
        ring_start: 8192,
        ring_end: 1 << 30,
        sector_bytes: 4096,
        entries_per_block: 1022,
        write_hand_pos: 6 << 20,
        evict_hand_pos: 70 << 20,
        log_block_count: 3,
        log_block_bytes: 3 * 8192,
        sequence: 9,
        chain_count: 2,
        newest: [ptr, LogBlockPtrPhys { sequence: 2, ..ptr }],
    };
    write(&dir, "format_dev_header", "header", &header.encode())?;
    Ok(())
}
