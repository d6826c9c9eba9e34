//! A backing store that fails a TXG loses writes that were acknowledged: the volume
//! refuses writes from then on and the lost blocks read as EIO, not as the older bytes the
//! store still has. This must hold across a restart too (the pool records the failure in
//! its state directory) until the operator clears it with `larch volume clear`.
//!
//! The failure is real: the daemon runs with a file-size limit (`prlimit --fsize`, and
//! SIGXFSZ ignored so that the write returns EFBIG instead of killing the process), so its
//! writes past the limit into the backing file fail in the kernel. The failure is one
//! `volume.fail` event (`larch events`), not repeated when a restart restores it.

mod common;
use common::{Daemon, larch, require, run_ok, scratch};

use std::path::Path;
use std::process::Command;

use common::PYTHON;
const VOLUME: u64 = 64 << 20;
const BLOCK: u64 = 16 << 10;
/// Writes past this offset fail while the daemon runs under the limit.
const LIMIT: u64 = 32 << 20;
/// A block past the limit, and one below it.
const HIGH: u64 = 48 << 20;
const LOW: u64 = 1 << 20;

/// Runs a libnbd script on the daemon's volume; returns (succeeded, its output). The
/// script has `h`, connected.
fn nbd(uri: &str, script: &str) -> (bool, String) {
    let program = format!("import nbd, sys\nh = nbd.NBD()\nh.connect_uri(sys.argv[1])\n{script}\n");
    let out = Command::new(PYTHON)
        .args(["-c", &program, uri])
        .output()
        .expect("run python3");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// What a read of `len` bytes at `at` gives: its first byte, or the error's text.
fn read(uri: &str, at: u64) -> Result<u8, String> {
    let (ok, out) = nbd(uri, &format!("print(h.pread({BLOCK}, {at})[0])"));
    if ok {
        Ok(out.trim().parse().expect("a byte"))
    } else {
        Err(out)
    }
}

/// Writes a block of `byte` at `at` and flushes; `Err` with the error's text.
fn write_flush(uri: &str, at: u64, byte: u8) -> Result<(), String> {
    let (ok, out) = nbd(
        uri,
        &format!("h.pwrite(bytes([{byte}]) * {BLOCK}, {at})\nh.flush()"),
    );
    if ok { Ok(()) } else { Err(out) }
}

fn is_eio(result: &Result<impl std::fmt::Debug, String>) -> bool {
    matches!(result, Err(e) if e.contains("Input/output error") || e.contains("EIO"))
}

/// The daemon's own status.json (rewritten every second): its first volume's entry.
fn volume_status(state: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(state.join("status.json")).expect("status.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("status.json parses");
    json["volumes"][0].clone()
}

/// The `volume.fail` events `larch events` lists.
fn volume_failures(dir: &str) -> Vec<serde_json::Value> {
    let out = larch()
        .args(["events", "--json", "--state-dir", dir])
        .output()
        .expect("run larch events");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["class"] == "volume.fail")
        .collect()
}

#[test]
fn a_failed_volume_stays_failed_across_a_restart_until_cleared() {
    require("prlimit");
    common::require_python_nbd();
    let state = scratch("volume-failure");
    let dir = state.to_str().expect("utf-8").to_string();
    let backing = state.join("vol0.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(VOLUME))
        .expect("backing file");
    run_ok(&["pool", "create", "failing", "--state-dir", &dir]);
    run_ok(&[
        "volume",
        "add",
        "vol0",
        "--backing",
        backing.to_str().expect("utf-8"),
        "--volblocksize",
        "16K",
        "--state-dir",
        &dir,
    ]);

    // 1. Under the limit: the TXG holding a block past it fails, and so does the FLUSH.
    let fsize = format!("--fsize={LIMIT}");
    let wrapper = [
        "sh",
        "-c",
        "trap '' XFSZ; exec \"$@\"",
        "sh",
        "prlimit",
        &fsize,
    ];
    let daemon = Daemon::start_under(&state, "off", &wrapper);
    let uri = daemon.uri();
    write_flush(&uri, LOW, 1).expect("a block below the limit is stored");
    let failed = write_flush(&uri, HIGH, 2);
    assert!(is_eio(&failed), "the FLUSH over a failed TXG: {failed:?}");
    assert!(
        is_eio(&read(&uri, HIGH)),
        "the lost block reads as an error"
    );
    assert_eq!(read(&uri, LOW), Ok(1));
    let status = daemon.stop();
    assert!(status.success(), "larch serve exited with {status}");
    let recorded = std::fs::read_to_string(state.join("failed-volumes.json"))
        .expect("the failure is recorded in the state directory");
    assert!(recorded.contains(&(HIGH / BLOCK).to_string()), "{recorded}");
    // And it is an event, once.
    let failures = volume_failures(&dir);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["volume"], "vol0");
    assert!(
        failures[0]["why"]
            .as_str()
            .unwrap()
            .contains("File too large"),
        "{failures:?}"
    );

    // 2. Restarted with no limit: still failed. The store holds zeros at HIGH, but the
    // write acknowledged there was lost, so the read fails rather than step back in time.
    let daemon = Daemon::start(&state, "off");
    let uri = daemon.uri();
    assert!(
        is_eio(&read(&uri, HIGH)),
        "after the restart the lost block reads as an error"
    );
    assert_eq!(read(&uri, LOW), Ok(1), "other blocks read as ever");
    assert!(
        is_eio(&write_flush(&uri, LOW, 3)),
        "writes are still refused"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let vol = loop {
        let vol = volume_status(&state);
        if vol["write_failure"].is_string() || std::time::Instant::now() > deadline {
            break vol;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(vol["write_failure"].is_string(), "{vol}");
    assert!(vol["lost_blocks"].as_u64() >= Some(1), "{vol}");
    let out = larch()
        .args(["volume", "clear", "vol0", "--state-dir", &dir])
        .output()
        .expect("run larch");
    assert!(!out.status.success(), "cleared while the pool is served");
    let status = daemon.stop();
    assert!(status.success(), "larch serve exited with {status}");
    // Restored from the record, not failed anew: no second event (all saved at the stop).
    assert_eq!(volume_failures(&dir).len(), 1);

    // 3. Cleared: the loss is accepted, the block reads as the store's bytes, writes work.
    let out = larch()
        .args(["volume", "clear", "vol0", "--state-dir", &dir])
        .output()
        .expect("run larch");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&(HIGH / BLOCK).to_string()),
        "names the lost blocks: {text}"
    );
    assert!(!state.join("failed-volumes.json").exists());
    let daemon = Daemon::start(&state, "off");
    let uri = daemon.uri();
    assert_eq!(read(&uri, HIGH), Ok(0), "the store's older bytes");
    write_flush(&uri, HIGH, 4).expect("writes work again");
    assert_eq!(read(&uri, HIGH), Ok(4));
    let status = daemon.stop();
    assert!(status.success(), "larch serve exited with {status}");
    let _ = std::fs::remove_dir_all(&state);
}
