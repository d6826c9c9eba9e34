//! `larch dump`: output and exit status against devices built with the library.

use std::path::{Path, PathBuf};
use std::process::Command;

use larch_io::{FileDevice, FileOptions};
use larch_l2::{ArcState, BlockKey, Compression, ContentType, CreateOptions, L2Device, Record};

const DEVICE_BYTES: u64 = 4 << 20;

fn temp_device(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("larch-dump-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Formats a device file and writes `records` records of 4 KiB with one tombstone;
/// returns the number of live log blocks the writer knows of and the entries written.
fn build_device(path: &Path, records: u64) -> (u64, u64) {
    let options = FileOptions {
        create_len_bytes: Some(DEVICE_BYTES),
        ..FileOptions::default()
    };
    let dev = FileDevice::open(path, &options).unwrap();
    let mut l2 = L2Device::create(
        dev,
        &CreateOptions {
            pool_guid: 0xabc,
            device_guid: 0xdef,
            sector_bytes: 4096,
            entries_per_block: 10,
            chain_count: 2,
        },
    )
    .unwrap();
    let payload = vec![0x5a; 4096];
    for i in 0..records {
        let rec = Record {
            key: BlockKey {
                volume_guid: 1,
                block_number: i,
            },
            generation: i + 1,
            bytes: &payload,
            logical_size: 4096,
            compression: Compression::Off,
            content: ContentType::Data,
            arc_state: ArcState::Mfu,
            prefetch: i % 2 == 0,
        };
        l2.write_batch(&[rec]).unwrap();
    }
    l2.tombstone(
        BlockKey {
            volume_guid: 1,
            block_number: 0,
        },
        99,
    )
    .unwrap();
    l2.commit_log().unwrap();
    (l2.live_log_blocks().count() as u64, records + 1)
}

fn dump(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_larch"))
        .arg("dump")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn healthy_device_shows_header_blocks_and_entries() {
    let path = temp_device("healthy");
    let (blocks, entries) = build_device(&path, 45);
    assert!(blocks >= 5, "only {blocks} blocks");
    let p = path.to_str().unwrap();

    let (code, out, err) = dump(&[p]);
    assert_eq!(code, 0, "stderr: {err}");
    assert!(out.contains("pool_guid: 0x0000000000000abc"), "{out}");
    assert!(out.contains(&format!("log_block_count: {blocks}")), "{out}");
    assert!(
        out.contains(&format!(
            "{blocks} log blocks with valid checksum, 0 invalid"
        )),
        "{out}"
    );
    assert!(!out.contains("lb["), "-l alone must not list blocks");

    let (code, out, _) = dump(&["-ll", p]);
    assert_eq!(code, 0);
    assert_eq!(
        out.matches("checksum: valid").count() as u64,
        blocks,
        "{out}"
    );

    let (code, out, _) = dump(&["-lll", p]);
    assert_eq!(code, 0);
    let entry_lines = out
        .lines()
        .filter(|l| l.trim_start().starts_with('['))
        .count() as u64;
    assert_eq!(entry_lines, entries, "{out}");
    assert_eq!(out.matches("tombstone volume").count(), 1);

    let (code, out, _) = dump(&["-lll", "--json", p]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["summary"]["log_blocks_valid"], blocks);
    assert_eq!(doc["summary"]["log_blocks_invalid"], 0);
    assert_eq!(doc["header"]["device_guid"], 0xdef);
    let listed: u64 = doc["log_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["entries"].as_array().unwrap().len() as u64)
        .sum();
    assert_eq!(listed, entries);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn damaged_log_block_is_reported_and_exits_one() {
    let path = temp_device("damaged");
    let (blocks, _) = build_device(&path, 45);
    let p = path.to_str().unwrap();
    let (_, out, _) = dump(&["-ll", "--json", p]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Damage the third-newest block: two blocks stay valid, one is refused.
    let victim = doc["log_blocks"][2]["pointer"]["daddr"].as_u64().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[victim as usize + 17] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();

    let (code, out, _) = dump(&["-ll", p]);
    assert_eq!(code, 1, "header counts exceed the walk: {out}");
    assert!(
        out.contains("2 log blocks with valid checksum, 1 invalid"),
        "{out}"
    );
    assert!(out.contains("INVALID"), "{out}");
    assert!(
        out.contains(&format!("header claims {blocks} log blocks")),
        "{out}"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn not_a_cache_device_is_an_error() {
    let path = temp_device("zeros");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let (code, _, err) = dump(&[path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("neither a larch cache device nor a log device"),
        "{err}"
    );
    std::fs::remove_file(&path).unwrap();
    let (code, _, err) = dump(&["/nonexistent/larch-device"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot open"), "{err}");
}

#[test]
fn a_log_device_is_described() {
    let path = temp_device("slog");
    let options = FileOptions {
        create_len_bytes: Some(DEVICE_BYTES),
        ..FileOptions::default()
    };
    let dev = FileDevice::open(&path, &options).unwrap();
    let log = larch_zil::LogDevice::create(dev, 0xabc, 0x10f).unwrap();
    let data = vec![7u8; 4096];
    log.commit(&[larch_zil::RecordRef {
        txg: 3,
        volume_id: 9,
        offset_bytes: 8192,
        data: &data,
    }])
    .unwrap();
    drop(log);
    let (code, out, err) = dump(&[path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("larch log device"), "{out}");
    assert!(out.contains("1 records to replay"), "{out}");
    std::fs::remove_file(&path).unwrap();
}
