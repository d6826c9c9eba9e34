//! `larch events` against a real daemon: changes made to the pool (tunables, the L2ARC
//! switch, cache devices), its opens and closes and its cache devices' rebuilds are events
//! with times; `-f` prints each new one as it happens; the events survive a clean stop, a
//! kill -9 and a torn last line of the file; and a cache device whose writes fail in the
//! kernel (the daemon runs under `prlimit --fsize`) is a `cache.fault` event.

mod common;
use common::{Daemon, larch, require, run_ok, scratch};

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a test waits for something the daemon does within a second or two.
const PATIENCE: Duration = Duration::from_secs(60);

/// `larch events --json` of the pool in `state`, parsed.
fn events(state: &Path) -> Vec<Value> {
    let out = larch()
        .args(["events", "--json", "--state-dir"])
        .arg(state)
        .output()
        .expect("run larch events");
    assert!(
        out.status.success(),
        "larch events: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn classes(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["class"].as_str().unwrap())
        .collect()
}

/// Waits until `larch events` lists an event `found` accepts; returns all of them.
fn wait_for_event(state: &Path, what: &str, found: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let all = events(state);
        if all.iter().any(&found) {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} event in {:?}",
            classes(&all)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `larch events -f --json` running beside the test, its lines read as they come.
struct Follower {
    child: Child,
    lines: Receiver<String>,
}

impl Follower {
    fn start(state: &Path) -> Follower {
        let mut child = larch()
            .args(["events", "-f", "--json", "--state-dir"])
            .arg(state)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run larch events -f");
        let out = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Follower { child, lines }
    }

    /// The events it prints until one that `found` accepts (that one included).
    fn until(&self, what: &str, found: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let event: Value = serde_json::from_str(&line).unwrap();
                    let done = found(&event);
                    seen.push(event);
                    if done {
                        return seen;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("larch events -f printed no {what}: {:?}", classes(&seen))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("larch events -f ended before {what}: {:?}", classes(&seen))
                }
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn class_is(class: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["class"] == class
}

/// Waits until the daemon of `state` answers on its HTTP endpoint (its `daemon.json`
/// written), so that `larch` commands go through it.
fn wait_for_daemon_record(state: &Path) {
    let deadline = Instant::now() + PATIENCE;
    while !state.join("daemon.json").exists() {
        assert!(Instant::now() < deadline, "daemon.json never appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A pool with one 8 MiB volume and one cache device, made with the CLI.
fn new_pool(state: &Path) {
    std::fs::create_dir_all(state).unwrap();
    let dir = state.to_str().unwrap();
    run_ok(&[
        "pool",
        "create",
        "ev",
        "--arc-max",
        "1M",
        "--state-dir",
        dir,
    ]);
    let backing = state.join("vol0.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(8 << 20))
        .unwrap();
    run_ok(&[
        "volume",
        "add",
        "vol0",
        "--backing",
        backing.to_str().unwrap(),
        "--state-dir",
        dir,
    ]);
    let cache = state.join("cache0.img");
    run_ok(&[
        "cache",
        "add",
        cache.to_str().unwrap(),
        "--size",
        "16M",
        "--state-dir",
        dir,
    ]);
}

#[test]
fn changes_are_events_that_survive_restarts_and_follow_prints_new_ones() {
    let state = scratch("events");
    let dir = state.to_str().unwrap().to_string();
    new_pool(&state);
    // A change to a stopped pool is recorded in its event file.
    run_ok(&["set", "l2arc_write_max=8M", "--state-dir", &dir]);
    let before = events(&state);
    assert_eq!(classes(&before), ["cache.add", "tunable.set"]);
    assert_eq!(before[1]["name"], "l2arc_write_max");
    assert_eq!(before[1]["value"], "8M");

    let daemon = Daemon::start(&state, "127.0.0.1:0");
    wait_for_daemon_record(&state);
    let follower = Follower::start(&state);
    // It prints what happened so far first, then what happens.
    follower.until("the pool's open", class_is("pool.open"));
    run_ok(&["set", "l2arc_enabled=0", "--state-dir", &dir]);
    let seen = follower.until("the switch flip", class_is("l2arc.switch"));
    assert_eq!(seen.last().unwrap()["enabled"], false);
    let extra = state.join("extra.img");
    let extra_path = extra.to_str().unwrap();
    run_ok(&[
        "cache",
        "add",
        extra_path,
        "--size",
        "8M",
        "--state-dir",
        &dir,
    ]);
    run_ok(&["cache", "remove", extra_path, "--state-dir", &dir]);
    run_ok(&["set", "l2arc_enabled=1", "--state-dir", &dir]);
    let seen = follower.until("the switch back on", |e| {
        e["class"] == "l2arc.switch" && e["enabled"] == true
    });
    assert_eq!(
        classes(&seen),
        ["cache.add", "cache.remove", "l2arc.switch"],
        "{seen:?}"
    );
    assert_eq!(seen[0]["device"], extra_path);

    // The table: time, class, the event in words.
    let out = larch()
        .args(["events", "--state-dir", &dir])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(table.starts_with("TIME "), "{table}");
    for words in [
        "tunable.set",
        "l2arc_write_max=8M (was 32M)",
        "L2ARC off (l2arc_enabled=0)",
        &format!("cache device {extra_path} removed"),
        "pool opened",
    ] {
        assert!(table.contains(words), "{words:?} not in:\n{table}");
    }

    // A clean stop: `pool.close`, which the follower reads from the file once the daemon
    // is gone, as `larch events` does.
    assert!(daemon.stop().success());
    follower.until("the pool's close", class_is("pool.close"));
    let stopped = events(&state);
    assert_eq!(stopped.last().unwrap()["class"], "pool.close");
    let seqs: Vec<u64> = stopped.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());

    // A restart keeps them and numbers on; the cache device's log is rebuilt.
    let daemon = Daemon::start(&state, "127.0.0.1:0");
    wait_for_daemon_record(&state);
    let after = wait_for_event(&state, "rebuild end", class_is("l2arc.rebuild_end"));
    assert_eq!(after[..stopped.len()], stopped[..]);
    let new = classes(&after[stopped.len()..]);
    assert_eq!(
        new[..3],
        ["pool.open", "l2arc.rebuild_start", "l2arc.rebuild_end"]
    );
    let rebuilt = after
        .iter()
        .find(|e| e["class"] == "l2arc.rebuild_end")
        .unwrap();
    assert_eq!(rebuilt["success"], true, "{rebuilt}");
    follower.until("the second open", class_is("l2arc.rebuild_end"));

    // A kill -9 after a change has reached the file: nothing of it is lost, and a torn
    // line at the end (an append cut short) is skipped and written away.
    run_ok(&["set", "l2arc_headroom=4", "--state-dir", &dir]);
    let file = state.join("events");
    let deadline = Instant::now() + PATIENCE;
    while !std::fs::read_to_string(&file)
        .unwrap()
        .contains("l2arc_headroom")
    {
        assert!(
            Instant::now() < deadline,
            "the change never reached the file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon.kill9();
    let killed = events(&state);
    assert_eq!(killed.last().unwrap()["name"], "l2arc_headroom");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    f.write_all(b"0123456789abcdef {\"seq\":99,\"time_ms\":1,\"cla")
        .unwrap();
    drop(f);
    assert_eq!(events(&state), killed, "the torn line is not an event");
    let daemon = Daemon::start(&state, "127.0.0.1:0");
    wait_for_daemon_record(&state);
    let again = wait_for_event(&state, "the third open", |e| {
        e["class"] == "pool.open" && e["seq"].as_u64() > killed.last().unwrap()["seq"].as_u64()
    });
    assert_eq!(again[..killed.len()], killed[..]);
    assert!(daemon.stop().success());
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap()
            .contains("\"time_ms\":1,\"cla"),
        "the torn line is still in the file"
    );
    let _ = std::fs::remove_dir_all(&state);
}

/// A volume's property changed with `larch set VOLUME` is an event, on a stopped pool (in
/// its file) and on a running one, with its value before; setting a value it has already
/// is none.
#[test]
fn volume_property_changes_are_events() {
    let state = scratch("events-props");
    let dir = state.to_str().unwrap().to_string();
    new_pool(&state);
    run_ok(&["set", "vol0", "sync=always", "--state-dir", &dir]);
    let stopped = events(&state);
    let last = stopped.last().unwrap();
    assert_eq!(last["class"], "volume.property", "{stopped:?}");
    assert_eq!(
        (
            &last["volume"],
            &last["property"],
            &last["value"],
            &last["previous"]
        ),
        (
            &Value::from("vol0"),
            &Value::from("sync"),
            &Value::from("always"),
            &Value::from("standard")
        )
    );
    let daemon = Daemon::start(&state, "127.0.0.1:0");
    wait_for_daemon_record(&state);
    run_ok(&[
        "set",
        "vol0",
        "secondarycache=none",
        "sync=always",
        "--state-dir",
        &dir,
    ]);
    let seen = wait_for_event(&state, "the secondarycache change", |e| {
        e["class"] == "volume.property" && e["property"] == "secondarycache"
    });
    let changed: Vec<&Value> = seen
        .iter()
        .filter(|e| e["class"] == "volume.property")
        .collect();
    assert_eq!(
        changed.len(),
        2,
        "sync=always again is no change: {changed:?}"
    );
    assert_eq!(changed[1]["previous"], "all");
    assert!(daemon.stop().success());
    let _ = std::fs::remove_dir_all(&state);
}

/// A cache device whose feed writes fail in the kernel (past the daemon's file-size limit,
/// `prlimit --fsize`, with SIGXFSZ ignored so the write returns EFBIG) is faulted, and the
/// event says which device and why; `larch iostat -v` still lists it.
#[test]
fn a_cache_device_whose_writes_fail_is_a_fault_event() {
    require("prlimit");
    require("fio");
    let state = scratch("events-fault");
    std::fs::create_dir_all(&state).unwrap();
    let dir = state.to_str().unwrap().to_string();
    run_ok(&[
        "pool",
        "create",
        "ev",
        "--arc-max",
        "1M",
        "--state-dir",
        &dir,
    ]);
    // Read only: the volume may lie past the limit. Real bytes, so every read is one.
    let backing = state.join("vol0.img");
    let bytes: Vec<u8> = (0..48u32 << 20).map(|i| (i / 4096) as u8 | 1).collect();
    std::fs::write(&backing, bytes).unwrap();
    run_ok(&[
        "volume",
        "add",
        "vol0",
        "--backing",
        backing.to_str().unwrap(),
        "--state-dir",
        &dir,
    ]);
    let cache = state.join("cache0.img");
    let cache_path = cache.to_str().unwrap().to_string();
    run_ok(&[
        "cache",
        "add",
        &cache_path,
        "--size",
        "64M",
        "--state-dir",
        &dir,
    ]);
    let fsize = format!("--fsize={}", 16 << 20);
    let wrapper = [
        "sh",
        "-c",
        "trap '' XFSZ; exec \"$@\"",
        "sh",
        "prlimit",
        &fsize,
    ];
    let daemon = Daemon::start_under(&state, "127.0.0.1:0", &wrapper);
    wait_for_daemon_record(&state);
    // Random reads of the whole volume: the feed writes what they bring into the ARC to
    // the ring, whose write hand reaches the limit after 16 MiB.
    let deadline = Instant::now() + Duration::from_secs(180);
    let fault = loop {
        let out = std::process::Command::new("fio")
            .args([
                "--name=fill",
                "--ioengine=nbd",
                &format!("--uri={}", daemon.uri()),
                "--rw=randread",
                "--bs=16k",
                "--size=48M",
                "--time_based",
                "--runtime=3",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fio: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(fault) = events(&state)
            .into_iter()
            .find(|e| e["class"] == "cache.fault")
        {
            break fault;
        }
        assert!(
            Instant::now() < deadline,
            "no cache.fault: {:?}",
            classes(&events(&state))
        );
    };
    assert_eq!(fault["device"], cache_path.as_str(), "{fault}");
    let why = fault["why"].as_str().unwrap();
    assert!(why.contains("feed write failed"), "{why}");
    let out = larch()
        .args(["events", "--state-dir", &dir])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        table.contains(&format!(
            "cache device {cache_path} faulted: feed write failed"
        )),
        "{table}"
    );
    assert!(daemon.stop().success());
    let _ = std::fs::remove_dir_all(&state);
}
