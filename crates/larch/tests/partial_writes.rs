//! Writes of every size and offset through `larch serve`, checked against a model of the
//! volume (`model_check.py`, python3-libnbd): most of them cover part of a 16K block, so
//! they are acknowledged before their block is read (`txg::partial`). Three connections
//! share the blocks where their thirds of the volume meet; every read is checked as it is
//! answered; the ARC (1 MiB) is far smaller than the volume, so blocks leave it, go to the
//! cache device and come back. The run ends without a FLUSH, the daemon is stopped with
//! SIGTERM, and after a restart (which rebuilds the cache device's index) the whole
//! volume must read back as the model: a clean shutdown keeps every acknowledged write.

mod common;
use common::{Daemon, pattern, run_ok, scratch};

use std::path::Path;
use std::process::Command;

use common::PYTHON;
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/model_check.py");
const VOLUME_BYTES: usize = 4 << 20;

fn python(args: &[&str]) -> (bool, String) {
    let out = Command::new(PYTHON)
        .arg(SCRIPT)
        .args(args)
        .output()
        .expect("run model_check.py");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A stat from the status.json the daemon wrote when it stopped.
fn last_stat(state: &Path, name: &str) -> u64 {
    fn find(v: &serde_json::Value, name: &str) -> Option<u64> {
        match v {
            serde_json::Value::Object(map) => map
                .get(name)
                .and_then(|x| x.as_u64())
                .or_else(|| map.values().find_map(|x| find(x, name))),
            serde_json::Value::Array(list) => list.iter().find_map(|x| find(x, name)),
            _ => None,
        }
    }
    let text = std::fs::read_to_string(state.join("status.json")).expect("status.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("status.json parses");
    find(&json, name).unwrap_or_else(|| panic!("{name} not in status.json"))
}

#[test]
fn writes_of_every_size_read_back_as_written_and_survive_a_clean_restart() {
    common::require_python_nbd();
    let state = scratch("partial-writes");
    let dir = state.to_str().expect("utf-8").to_string();
    let backing = state.join("vol0.img");
    let image = state.join("model.img");
    let before = pattern(VOLUME_BYTES, 18);
    std::fs::write(&backing, &before).expect("backing file");
    std::fs::write(&image, &before).expect("model image");
    run_ok(&[
        "pool",
        "create",
        "partial",
        "--state-dir",
        &dir,
        "--arc-max",
        "1M",
    ]);
    run_ok(&[
        "volume",
        "add",
        "vol0",
        "--backing",
        backing.to_str().expect("utf-8"),
        "--volblocksize",
        "16K",
        "--read-latency-ms",
        "1",
        "--state-dir",
        &dir,
    ]);
    let cache = state.join("cache.img");
    run_ok(&[
        "cache",
        "add",
        cache.to_str().expect("utf-8"),
        "--size",
        "16M",
        "--state-dir",
        &dir,
    ]);
    run_ok(&["set", "--state-dir", &dir, "zfs_txg_timeout=1"]);

    let daemon = Daemon::start(&state, "off");
    let (ok, report) = python(&["run", &daemon.uri(), image.to_str().unwrap(), "7", "4000"]);
    assert!(ok, "during the run: {report}");
    let status = daemon.stop();
    assert!(status.success(), "larch serve exited with {status}");
    let deferred = last_stat(&state, "write_partial_deferred");
    assert!(
        deferred > 100,
        "only {deferred} writes were acknowledged before their block's read"
    );
    assert_eq!(last_stat(&state, "write_partial_pending"), 0);

    let daemon = Daemon::start(&state, "off");
    let model = format!("{}.new", image.display());
    let (ok, report) = python(&["check", &daemon.uri(), &model]);
    assert!(ok, "after the restart: {report}");
    let status = daemon.stop();
    assert!(status.success(), "larch serve exited with {status}");
    let _ = std::fs::remove_dir_all(&state);
}
