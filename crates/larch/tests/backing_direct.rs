//! A backing file on a file system that refuses `O_DIRECT` (ramfs) is still served, its
//! TXGs written through the page cache, and `larch status` says so; a backing file on the
//! scratch directory's file system, in the same pool, is written with `O_DIRECT`.
//!
//! ramfs is mounted in a private mount namespace (`unshare`; a user namespace as well when
//! not root), so nothing is left mounted whatever happens to the test.

mod common;
use common::{require, scratch};

use std::process::Command;

/// The test's body, run inside the namespace: $1 the larch binary, $2 the scratch
/// directory. Prints `status.json`'s volumes last.
const SCRIPT: &str = r#"
set -eu
L=$1; D=$2
mkdir -p "$D/ram"
mount -t ramfs ramfs "$D/ram"
truncate -s 64M "$D/ram/vol.img"
truncate -s 64M "$D/disk.img"
"$L" pool create t --state-dir "$D/pool" --arc-max 64M >/dev/null
"$L" volume add onram --backing "$D/ram/vol.img" --state-dir "$D/pool" >/dev/null
"$L" volume add ondisk --backing "$D/disk.img" --state-dir "$D/pool" >/dev/null
"$L" serve --state-dir "$D/pool" --socket "$D/nbd.sock" --http off 2>"$D/serve.log" &
pid=$!
for _ in $(seq 300); do [ -S "$D/nbd.sock" ] && break; sleep 0.1; done
head -c $((24 << 20)) /dev/urandom >"$D/data"
for vol in onram ondisk; do
    nbdcopy "$D/data" "nbd+unix:///$vol?socket=$D/nbd.sock"
done
# Written through the syncer (nbdcopy's FLUSH waited for the TXG), then the status file
# is rewritten every second.
sleep 2.5
"$L" status --state-dir "$D/pool" >"$D/status.txt"
kill -TERM $pid
wait $pid
for img in "$D/ram/vol.img" "$D/disk.img"; do
    head -c $((24 << 20)) "$img" | cmp - "$D/data"
done
echo "--- status"
cat "$D/status.txt"
"#;

#[test]
fn a_backing_file_where_o_direct_is_refused_is_written_through_the_page_cache() {
    require("nbdcopy");
    require("unshare");
    let dir = scratch("no-direct");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut unshare = Command::new("unshare");
    if !root {
        unshare.arg("--user").arg("--map-root-user");
    }
    let out = unshare
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            SCRIPT,
            "sh",
        ])
        .arg(env!("CARGO_BIN_EXE_larch"))
        .arg(&dir)
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the script failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}\nserve.log:\n{log}",
        out.status
    );
    let status = stdout.split("--- status").nth(1).unwrap_or_default();
    let lines: Vec<&str> = status.lines().collect();
    let after = |volume: &str| -> Vec<&str> {
        lines
            .iter()
            .skip_while(|l| !l.contains(&format!("volume {volume}:")))
            .skip(1)
            .take_while(|l| !l.trim_start().starts_with("volume "))
            .copied()
            .collect()
    };
    let on_ram = after("onram");
    assert!(
        on_ram
            .iter()
            .any(|l| l.contains("backing writes: buffered (the file system refused O_DIRECT")),
        "status does not say the ramfs volume is written buffered:\n{status}"
    );
    assert!(
        !after("ondisk")
            .iter()
            .any(|l| l.contains("backing writes:")),
        "the volume on the scratch file system should be written with O_DIRECT:\n{status}"
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("pool/status.json")).expect("status.json"),
    )
    .expect("status.json parses");
    let mode = |name: &str| {
        json["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == name))
            .map(|v| v["backing_write_mode"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert_eq!(mode("ondisk"), "O_DIRECT");
    assert!(mode("onram").starts_with("buffered ("), "{}", mode("onram"));
    let _ = std::fs::remove_dir_all(&dir);
}
