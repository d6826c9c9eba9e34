//! The write path under kill -9: several NBD connections write with a mix of async
//! writes, FUA writes and FLUSHes (`write_crash.py`, python3-libnbd) while the daemon is
//! killed at a random moment; after a restart every write that was durable by the NBD
//! contract reads back, and nothing reads back older (from the ARC, the L2ARC or the
//! backing store). Half the rounds run with a log device (SLOG), half without; every
//! fourth round removes the log device (`larch log remove`) under load before the kill.
//! Rounds 2-3 of every four serve a volume of 16K blocks, so that every 4K write is a
//! partial-block write (acknowledged before its block is read, `txg::partial`), and the
//! four connections' writes share volume blocks.
//!
//! `LARCH_CRASH_ITERATIONS` sets the rounds (default 20; `scripts/test` runs 100).

mod common;
use common::{Daemon, run_ok, scratch};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::PYTHON;
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/write_crash.py");
const CONNS: u32 = 4;
const BLOCK_BYTES: u64 = 4096;
const BLOCKS: u64 = 512;

fn python(mode: &str, uri: &str, dir: &Path, seed: u64) -> Command {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(SCRIPT).arg(mode).arg(uri).arg(dir).args([
        CONNS.to_string(),
        seed.to_string(),
        BLOCKS.to_string(),
        BLOCK_BYTES.to_string(),
    ]);
    cmd
}

/// A pool of one 2 MiB volume in `volblocksize` blocks, a cache device, and (`slog`) a
/// log device.
fn make_pool(state: &Path, slog: bool, volblocksize: &str) {
    let dir = state.to_str().expect("utf-8 path");
    run_ok(&[
        "pool",
        "create",
        "crash",
        "--state-dir",
        dir,
        "--arc-max",
        "1M",
    ]);
    let vol = state.join("vol0.img");
    run_ok(&[
        "volume",
        "add",
        "vol0",
        "--backing",
        vol.to_str().expect("utf-8"),
        "--size",
        "2M",
        "--volblocksize",
        volblocksize,
        // Reads that take a while keep partial writes pending long enough for FLUSHes
        // and the kill to land while they are.
        "--read-latency-ms",
        "2",
        "--state-dir",
        dir,
    ]);
    let cache = state.join("cache.img");
    run_ok(&[
        "cache",
        "add",
        cache.to_str().expect("utf-8"),
        "--size",
        "16M",
        "--state-dir",
        dir,
    ]);
    if slog {
        let log = state.join("log.img");
        run_ok(&[
            "log",
            "add",
            log.to_str().expect("utf-8"),
            "--size",
            "8M",
            "--state-dir",
            dir,
        ]);
    }
    // Short TXGs so that crashes land in every phase: open, syncing, synced.
    run_ok(&["set", "--state-dir", dir, "zfs_txg_timeout=1"]);
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn acknowledged_durable_writes_survive_kill_9_at_random_moments() {
    common::require_python_nbd();
    let rounds: u64 = std::env::var("LARCH_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut rng = 0x5eed_c0de_u64;
    let mut durable_blocks = 0u64;
    let top = scratch("crash");
    for round in 0..rounds {
        // Odd rounds have a log device. Each round gets a fresh pool, so earlier
        // rounds' data (on the volume, the cache device or the log) cannot mix in.
        let slog = round % 2 == 1;
        let state = top.join(format!("round-{round}"));
        std::fs::create_dir_all(&state).expect("round dir");
        // Writes of 4K: whole blocks, or a quarter of one (partial-block writes).
        let volblocksize = if (round / 2) % 2 == 1 { "16K" } else { "4K" };
        make_pool(&state, slog, volblocksize);
        let logs = state.join("durable");
        std::fs::create_dir_all(&logs).expect("durable dir");
        let seed = round + 1;
        let daemon = Daemon::start(&state, "127.0.0.1:0");
        let mut writer = python("write", &daemon.uri(), &logs, seed)
            .stdout(Stdio::null())
            .spawn()
            .expect("start the writer");
        let run_ms = 200 + xorshift(&mut rng) % 1800;
        // Every fourth round removes the log device under load, then crashes.
        let remove_log = round % 4 == 3;
        if remove_log {
            std::thread::sleep(Duration::from_millis(run_ms / 2));
            run_ok(&[
                "log",
                "remove",
                "--state-dir",
                state.to_str().expect("utf-8"),
            ]);
            std::thread::sleep(Duration::from_millis(run_ms / 2));
        } else {
            std::thread::sleep(Duration::from_millis(run_ms));
        }
        daemon.kill9();
        let _ = writer.wait();
        let daemon = Daemon::start(&state, "127.0.0.1:0");
        let out = python("check", &daemon.uri(), &logs, seed)
            .output()
            .expect("run the checker");
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "round {round} (volblocksize {volblocksize}, log device: {slog}, removed under load: {remove_log}, killed after {run_ms} ms): {report}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        durable_blocks += report
            .split(", ")
            .find_map(|part| part.strip_suffix(" with durable writes"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("the checker's report: {report}"));
        let _ = daemon.stop();
        let _ = std::fs::remove_dir_all(&state);
    }
    let _ = std::fs::remove_dir_all(&top);
    assert!(
        durable_blocks > 0,
        "no write became durable in any round: the test checked nothing"
    );
}

/// `larch volume remove` refuses while the pool is served, and while the log device holds
/// acknowledged writes a restart must replay (after a kill -9): a replay that finds
/// records of a volume the pool no longer has cannot put them anywhere, and the pool
/// would not open (a reviewer's finding). `larch log remove` refuses then too, and `larch
/// pool destroy` says the writes would be lost. After a clean start and stop it succeeds.
#[test]
fn a_volume_cannot_be_removed_while_the_log_holds_its_writes() {
    let state = scratch("volume-remove-log");
    make_pool(&state, true, "4K");
    let dir = state.to_str().expect("utf-8");
    // TXGs that do not sync on their own: the FUA writes stay in the log only.
    run_ok(&["set", "--state-dir", dir, "zfs_txg_timeout=600"]);
    let remove = || {
        common::larch()
            .args(["volume", "remove", "vol0", "--state-dir", dir])
            .output()
            .expect("run larch")
    };
    let daemon = Daemon::start(&state, "off");
    let out = remove();
    assert!(!out.status.success(), "removed while served");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("open in another process"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let write = Command::new(PYTHON)
        .arg("-c")
        .arg(
            "import nbd, sys\n\
             h = nbd.NBD()\n\
             h.connect_uri(sys.argv[1])\n\
             for i in range(8):\n    h.pwrite(bytes([i + 1]) * 4096, i * 4096, nbd.CMD_FLAG_FUA)\n\
             h.shutdown()\n",
        )
        .arg(daemon.uri())
        .status()
        .expect("run python3");
    assert!(write.success(), "FUA writes failed");
    daemon.kill9();
    let out = remove();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "removed with unreplayed log records");
    assert!(stderr.contains("not yet replayed"), "{stderr}");
    // Nor is the log device removed, nor the pool destroyed without saying so (before,
    // `larch log remove` dropped the records without a word).
    for args in [
        &["log", "remove", "--state-dir", dir][..],
        &["pool", "destroy", "--state-dir", dir],
    ] {
        let out = common::larch().args(args).output().expect("run larch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} went through");
        assert!(
            stderr.contains("acknowledged writes not yet replayed") && stderr.contains("--force"),
            "{args:?}: {stderr}"
        );
    }
    // A clean start (replay) and stop, then the removal goes through.
    let daemon = Daemon::start(&state, "off");
    assert!(daemon.stop().success());
    let out = remove();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&state);
}

/// `larch pool destroy` removes every state file the pool kept, so that a new pool made in
/// the directory starts with none of the old one's (its analytics history, a record that
/// a cache device must be formatted, its committed TXG); volume and device data stay.
#[test]
fn a_destroyed_pool_leaves_no_state_for_the_next_one() {
    let state = scratch("destroy");
    make_pool(&state, true, "4K");
    let dir = state.to_str().expect("utf-8");
    let daemon = Daemon::start(&state, "127.0.0.1:0");
    assert!(daemon.stop().success());
    // What a pool can leave besides pool.json (some only after failures).
    for (file, text) in [
        ("committed-txg", "7\n"),
        ("l2-format", "[1]\n"),
        ("failed-volumes.json", "[]\n"),
    ] {
        std::fs::write(state.join(file), text).unwrap();
    }
    run_ok(&["pool", "destroy", "--state-dir", dir, "--force"]);
    for file in [
        "pool.json",
        "tunables.json",
        "status.json",
        "history",
        "committed-txg",
        "l2-format",
        "l2-sequences.json",
        "failed-volumes.json",
        "analytics.bin",
        "daemon.json",
        "config.lock",
    ] {
        assert!(!state.join(file).exists(), "{file} is left after destroy");
    }
    for data in ["vol0.img", "cache.img", "log.img"] {
        assert!(state.join(data).exists(), "{data} was removed");
    }
    let _ = std::fs::remove_dir_all(&state);
}
