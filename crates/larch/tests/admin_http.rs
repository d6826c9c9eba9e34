//! Managing a running `larch serve` through its loopback HTTP endpoint, end to end with the
//! real binary: `larch set`, `larch get` and `larch cache add|remove` go through the daemon
//! (applied at once, saved, refused with the daemon's reason), the latency histograms fill
//! from reads by real NBD clients and show in /metrics (which `promtool check metrics`
//! passes), /status and `larch iostat -l`, bad requests leave the daemon serving, and
//! `larch analytics export` writes the history from the daemon and, once it has stopped,
//! from its saved file.

mod common;
use common::{pattern, require, scratch};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use std::time::{Duration, Instant};

/// Runs `larch ARGS --state-dir STATE`.
fn larch(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_larch"))
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Fails the test, with the command's standard error, unless it exited 0.
fn succeeded(out: &Output, what: &str) {
    assert!(out.status.success(), "{what} failed: {}", stderr(out));
}

/// Checks that a command was refused (exit 2) with every one of `words` in its message.
fn refused(out: &Output, words: &[&str]) {
    let text = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "not refused: {text}{}",
        stdout(out)
    );
    for word in words {
        assert!(text.contains(word), "{word:?} missing from: {text}");
    }
}

/// One HTTP/1.1 request; the status code and body.
fn http(addr: &str, method: &str, path: &str, headers: &str, body: &[u8]) -> (u16, String) {
    common::http_request(addr, method, path, headers, body)
}

/// A `larch serve` of a demo pool (created on first start), HTTP on a free port.
struct Daemon {
    child: Option<Child>,
    state: PathBuf,
    socket: PathBuf,
    addr: String,
    token: String,
    page_token: String,
}

impl Daemon {
    fn start(state: &Path) -> Daemon {
        Daemon::start_sized(state, "16M", "16M", "1M")
    }

    /// A demo pool of these sizes (volume, cache device, ARC).
    fn start_sized(state: &Path, volume: &str, cache: &str, arc: &str) -> Daemon {
        let socket = state.with_extension("sock");
        let _ = std::fs::remove_file(&socket);
        let child = Command::new(env!("CARGO_BIN_EXE_larch"))
            .args(["serve", "--state-dir"])
            .arg(state)
            .arg("--socket")
            .arg(&socket)
            .args([
                "--demo-volume-size",
                volume,
                "--demo-cache-size",
                cache,
                "--demo-arc-max",
                arc,
                "--http",
                "127.0.0.1:0",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start larch serve");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        let record = loop {
            let record = std::fs::read_to_string(state.join("daemon.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
            if let Some(record) = record
                && record["pid"] == pid
                && socket.exists()
            {
                break record;
            }
            assert!(
                Instant::now() < deadline,
                "daemon.json never named pid {pid}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Daemon {
            child: Some(child),
            state: state.to_path_buf(),
            socket,
            addr: record["http"]
                .as_str()
                .expect("an HTTP address")
                .to_string(),
            token: record["token"].as_str().expect("a token").to_string(),
            page_token: record["page_token"]
                .as_str()
                .expect("a page token")
                .to_string(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///vol0?socket={}", self.socket.display())
    }

    fn get(&self, path: &str) -> String {
        let (code, body) = http(&self.addr, "GET", path, "", b"");
        assert_eq!(code, 200, "GET {path}: {body}");
        body
    }

    /// `/status`, asked now (not the status file, which is a second old at most).
    fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.get("/status")).unwrap()
    }

    fn post(&self, path: &str, body: &[u8]) -> (u16, String) {
        let token = format!("X-Larch-Token: {}\r\n", self.token);
        http(&self.addr, "POST", path, &token, body)
    }

    /// SIGTERM; returns its standard error, after checking it exited 0 and removed
    /// daemon.json.
    fn stop(mut self) -> String {
        let child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            out.status.success(),
            "larch serve exited {:?}: {text}",
            out.status
        );
        assert!(
            !self.state.join("daemon.json").exists(),
            "daemon.json outlived a clean exit"
        );
        text
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `larch get NAME --json`: (value, source).
fn get_one(state: &Path, name: &str) -> (u64, String) {
    let out = larch(state, &["get", name, "--json"]);
    succeeded(&out, "larch get");
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    let row = &rows[0];
    assert_eq!(row["property"], name, "{row}");
    (
        row["value"].as_u64().unwrap(),
        row["source"].as_str().unwrap().to_string(),
    )
}

#[test]
fn set_through_the_daemon_applies_at_once_persists_and_refuses_with_its_reason() {
    let dir = scratch("admin");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    assert_eq!(
        get_one(&state, "l2arc_write_max"),
        (32 << 20, "default".into())
    );
    let out = larch(&state, &["set", "l2arc_write_max=8M", "l2arc_mfuonly=1"]);
    succeeded(&out, "larch set");
    assert_eq!(stdout(&out), "l2arc_mfuonly=1\nl2arc_write_max=8M\n");
    // At once: the daemon answered after applying, so no wait for its polling here.
    let tunables = &daemon.status()["tunables"];
    assert_eq!(tunables["l2arc_write_max"], 8 << 20, "{tunables}");
    assert_eq!(tunables["l2arc_mfuonly"], 1, "{tunables}");
    assert_eq!(
        get_one(&state, "l2arc_write_max"),
        (8 << 20, "tunables.json".into())
    );
    let pid = daemon.pid().to_string();
    // Refused by the daemon, with its reason, and nothing changed (all or nothing).
    let out = larch(&state, &["set", "l2arc_headroom=2", "l2arc_mfuonly=7"]);
    refused(
        &out,
        &[
            "daemon",
            &pid,
            "refused",
            "l2arc_mfuonly is 0, 1 or 2, not 7",
        ],
    );
    refused(
        &larch(&state, &["set", "nope=1"]),
        &["daemon", "unknown tunable \"nope\""],
    );
    refused(
        &larch(&state, &["set", "l2arc_write_max"]),
        &["daemon", "NAME=VALUE"],
    );
    refused(
        &larch(&state, &["set", "l2arc_write_max=1"]),
        &["daemon", "between 64K and 1G"],
    );
    let tunables = &daemon.status()["tunables"];
    assert_eq!(tunables["l2arc_mfuonly"], 1, "{tunables}");
    assert_eq!(tunables["l2arc_headroom"], 8, "{tunables}");
    let saved = std::fs::read_to_string(state.join("tunables.json")).unwrap();
    assert!(!saved.contains("l2arc_headroom"), "{saved}");
    // `larch get`: unknown names are an error; all names print in zfs get's columns.
    refused(
        &larch(&state, &["get", "nope"]),
        &["unknown tunable \"nope\""],
    );
    let out = larch(&state, &["get"]);
    succeeded(&out, "larch get");
    let text = stdout(&out);
    assert!(text.starts_with("NAME"), "{text}");
    assert!(text.contains("SOURCE"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["demo", "l2arc_write_max", "8M", "32M", "tunables.json"]),
        "{text}"
    );
    assert_eq!(
        text.lines().count(),
        larch_engine::tunables::TUNABLES.len() + 1,
        "{text}"
    );
    // A value the daemon refused to take from the file: the running value's source is the
    // daemon itself.
    std::fs::write(
        state.join("tunables.json"),
        r#"{"l2arc_write_max": "8M", "l2arc_mfuonly": "7"}"#,
    )
    .unwrap();
    assert_eq!(get_one(&state, "l2arc_mfuonly"), (1, "daemon".into()));
    let out = larch(&state, &["set", "l2arc_mfuonly=2"]);
    succeeded(&out, "larch set");
    daemon.stop();
    // Without a daemon: the files.
    assert_eq!(
        get_one(&state, "l2arc_mfuonly"),
        (2, "tunables.json".into())
    );
    refused(&larch(&state, &["set", "l2arc_mfuonly=9"]), &["0, 1 or 2"]);
    // Saved: the next start runs with them.
    let daemon = Daemon::start(&state);
    let tunables = &daemon.status()["tunables"];
    assert_eq!(tunables["l2arc_write_max"], 8 << 20, "{tunables}");
    assert_eq!(tunables["l2arc_mfuonly"], 2, "{tunables}");
    assert_eq!(
        get_one(&state, "l2arc_write_max"),
        (8 << 20, "tunables.json".into())
    );
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cache_devices_are_checked_added_and_removed_by_the_daemon_at_once() {
    let dir = scratch("admin");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    let pid = daemon.pid().to_string();
    let foreign = dir.join("foreign.img");
    let contents = pattern(16 << 20, 3);
    std::fs::write(&foreign, &contents).unwrap();
    let devices = |s: &serde_json::Value| s["cache_devices"].as_array().unwrap().clone();
    let configured = || {
        let text = std::fs::read_to_string(state.join("pool.json")).unwrap();
        let config: serde_json::Value = serde_json::from_str(&text).unwrap();
        config["cache_devices"].as_array().unwrap().len()
    };
    let out = larch(&state, &["cache", "add", foreign.to_str().unwrap()]);
    refused(&out, &["daemon", &pid, "refused", "not blank", "--force"]);
    assert!(
        std::fs::read(&foreign).unwrap() == contents,
        "a refused device was written"
    );
    assert_eq!(devices(&daemon.status()).len(), 1);
    assert_eq!(configured(), 1);
    // The demo's own device, by an absolute path, is already in the pool.
    let own = std::fs::canonicalize(state.join("cache0.img")).unwrap();
    refused(
        &larch(&state, &["cache", "add", own.to_str().unwrap()]),
        &["daemon", "already a cache device"],
    );
    // A blank one is online when the command returns.
    let blank = dir.join("blank.img");
    let out = larch(
        &state,
        &["cache", "add", blank.to_str().unwrap(), "--size", "16M"],
    );
    succeeded(&out, "larch cache add");
    let status = daemon.status();
    let added = &devices(&status)[1];
    assert_eq!(added["path"], blank.to_str().unwrap(), "{status}");
    assert_eq!(added["state"], "online", "{status}");
    assert_eq!(configured(), 2);
    let history = std::fs::read_to_string(state.join("history")).unwrap();
    assert!(
        history.contains(&format!("cache device {} added", blank.display())),
        "{history}"
    );
    let out = larch(&state, &["cache", "remove", blank.to_str().unwrap()]);
    succeeded(&out, "larch cache remove");
    assert_eq!(devices(&daemon.status())[1]["state"], "removed");
    assert_eq!(configured(), 1);
    refused(
        &larch(&state, &["cache", "remove", blank.to_str().unwrap()]),
        &["daemon", "not a cache device of this pool"],
    );
    daemon.stop();
    // Without a daemon the same check refuses it; --force formats it.
    let out = larch(&state, &["cache", "add", foreign.to_str().unwrap()]);
    refused(&out, &["not blank"]);
    assert!(!stderr(&out).contains("daemon"), "{}", stderr(&out));
    let out = larch(
        &state,
        &["cache", "add", foreign.to_str().unwrap(), "--force"],
    );
    succeeded(&out, "larch cache add --force");
    assert_eq!(configured(), 2);
    let daemon = Daemon::start(&state);
    let status = daemon.status();
    assert_eq!(devices(&status)[1]["state"], "online", "{status}");
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of one Prometheus sample line that starts with `series`.
fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{metrics}"))
        .parse()
        .unwrap()
}

/// Random reads over the first half of the volume for `seconds`.
fn fio_randread(daemon: &Daemon, seconds: u32) -> Output {
    Command::new("fio")
        .args([
            "--name=lat",
            "--ioengine=nbd",
            &format!("--uri={}", daemon.uri()),
            "--rw=randread",
            "--bs=16k",
            "--size=8M",
            "--iodepth=4",
            "--time_based",
            &format!("--runtime={seconds}"),
        ])
        .output()
        .unwrap()
}

/// Random reads over twice the ARC until the feeder has written and some reads hit L2.
fn read_until_the_cache_device_serves(daemon: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while daemon.status()["cache_devices"][0]["read_latency"]["count"] == 0 {
        succeeded(&fio_randread(daemon, 2), "fio");
        assert!(
            Instant::now() < deadline,
            "no L2 reads: {}",
            daemon.status()
        );
    }
}

#[test]
fn latency_histograms_fill_from_nbd_reads_and_show_in_metrics_status_and_iostat() {
    require("nbdcopy");
    require("fio");
    let dir = scratch("admin");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    let image = dir.join("image");
    std::fs::write(&image, pattern(16 << 20, 5)).unwrap();
    let out = Command::new("nbdcopy")
        .arg("--flush")
        .arg(&image)
        .arg(daemon.uri())
        .output()
        .unwrap();
    succeeded(&out, "nbdcopy");
    read_until_the_cache_device_serves(&daemon);
    let metrics = daemon.get("/metrics");
    let device = format!("device=\"{}\"", state.join("cache0.img").display());
    for (family, labels) in [
        ("larch_backing_read_latency_seconds", "volume=\"vol0\""),
        ("larch_backing_write_latency_seconds", "volume=\"vol0\""),
        ("larch_backing_flush_latency_seconds", "volume=\"vol0\""),
        ("larch_cache_device_read_latency_seconds", device.as_str()),
        ("larch_cache_device_write_latency_seconds", device.as_str()),
    ] {
        assert!(
            metrics.contains(&format!("# TYPE {family} histogram\n")),
            "{family}"
        );
        let count = sample(&metrics, &format!("{family}_count{{{labels}}}"));
        assert!(count > 0, "{family}{{{labels}}} counted nothing");
        let inf = sample(
            &metrics,
            &format!("{family}_bucket{{{labels},le=\"+Inf\"}}"),
        );
        assert_eq!(inf, count, "{family}");
        let fast = sample(
            &metrics,
            &format!("{family}_bucket{{{labels},le=\"0.000001\"}}"),
        );
        assert!(fast <= count, "{family}");
        assert!(
            metrics.contains(&format!("{family}_sum{{{labels}}} ")),
            "{family}"
        );
    }
    // /status: percentiles and buckets that add up to the count.
    let status = daemon.status();
    for latency in [
        &status["volumes"][0]["backing_read_latency"],
        &status["cache_devices"][0]["read_latency"],
        &status["cache_devices"][0]["write_latency"],
    ] {
        let count = latency["count"].as_u64().unwrap();
        let buckets: u64 = latency["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .sum();
        assert!(count > 0 && buckets >= count, "{latency}");
        let (p50, p99) = (
            latency["p50_us"].as_f64().unwrap(),
            latency["p99_us"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99, "{latency}");
    }
    // iostat -l while fio reads: the existing columns and the wait columns, filled.
    let reader = std::thread::spawn({
        let uri = daemon.uri();
        move || {
            Command::new("fio")
                .args([
                    "--name=lat",
                    "--ioengine=nbd",
                    &format!("--uri={uri}"),
                    "--rw=randread",
                    "--bs=16k",
                    "--size=16M",
                    "--time_based",
                    "--runtime=4",
                ])
                .output()
                .unwrap()
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let out = larch(&state, &["iostat", "-v", "-l", "1", "2"]);
    succeeded(&out, "larch iostat -l");
    succeeded(&reader.join().unwrap(), "fio");
    let text = stdout(&out);
    assert!(
        text.contains("operations") && text.contains("bandwidth"),
        "{text}"
    );
    assert!(
        text.contains("total_wait") && text.contains("p99_wait"),
        "{text}"
    );
    // The second report (the first is the averages since the start): vol0's backing store
    // and the cache device. Whichever served the reads shows their waits (total, disk,
    // queue, p99); one with no reads shows "-".
    let report = text.split("\n\n").nth(1).expect("two reports");
    let mut reads = 0;
    for name in ["vol0", "cache0.img"] {
        let row: Vec<&str> = report
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row: {text}"))
            .split_whitespace()
            .collect();
        assert_eq!(row.len(), 13, "{text}");
        let n: u64 = row[1].parse().unwrap();
        reads += n;
        for wait in [row[5], row[7], row[9], row[11]] {
            if n >= 10 {
                assert!(wait.ends_with('s'), "{name}: read wait {wait:?}: {text}");
            } else if n == 0 {
                assert_eq!(wait, "-", "{name}: {text}");
            }
        }
    }
    assert!(reads > 0, "no reads in the interval: {text}");
    let plain = stdout(&larch(&state, &["iostat", "1", "1"]));
    assert!(
        plain.contains("bandwidth") && !plain.contains("total_wait"),
        "{plain}"
    );
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value columns of the line of `report` whose name (its text before the columns) is
/// `name`.
fn columns<'a>(report: &'a str, name: &str) -> Vec<&'a str> {
    report
        .lines()
        .find(|l| l.split("  ").find(|s| !s.is_empty()) == Some(name))
        .unwrap_or_else(|| panic!("no line {name:?} in:\n{report}"))
        .split_whitespace()
        .skip(1)
        .collect()
}

/// Each form of `larch iostat` against a daemon whose clients read and write: one report
/// of the averages since the start without an interval, that and more with one, the tree
/// with -v, the waits with -l and the queue depths with -q.
#[test]
fn iostat_forms_against_a_daemon_serving_reads_and_writes() {
    require("nbdcopy");
    require("fio");
    let dir = scratch("iostat");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    succeeded(&larch(&state, &["set", "zfs_txg_timeout=1"]), "larch set");
    let image = dir.join("image");
    std::fs::write(&image, pattern(16 << 20, 9)).unwrap();
    let out = Command::new("nbdcopy")
        .arg("--flush")
        .arg(&image)
        .arg(daemon.uri())
        .output()
        .unwrap();
    succeeded(&out, "nbdcopy");
    let client = std::thread::spawn({
        let uri = daemon.uri();
        move || {
            Command::new("fio")
                .args([
                    "--name=mixed",
                    "--ioengine=nbd",
                    &format!("--uri={uri}"),
                    "--rw=randrw",
                    "--rwmixread=70",
                    "--bs=16k",
                    "--size=16M",
                    "--iodepth=8",
                    "--time_based",
                    "--runtime=8",
                ])
                .output()
                .unwrap()
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let reports = |text: &str| text.matches("operations").count();

    // No interval: one report, the pool's line, of everything since the start (the
    // image nbdcopy wrote reached the backing store).
    let out = larch(&state, &["iostat"]);
    succeeded(&out, "larch iostat");
    let text = stdout(&out);
    assert_eq!(reports(&text), 1, "{text}");
    let pool = columns(&text, "demo");
    assert_eq!(pool.len(), 4, "{text}");
    assert!(
        pool[1].parse::<u64>().unwrap() > 0,
        "no writes since the start: {text}"
    );
    assert!(!text.contains("vol0"), "{text}");

    // An interval and a count: that report, then one per interval, the count in all.
    let out = larch(&state, &["iostat", "1", "3"]);
    succeeded(&out, "larch iostat 1 3");
    assert_eq!(reports(&stdout(&out)), 3, "{}", stdout(&out));

    // -v: the pool, its backing store, its cache device under `cache`; no log device.
    let text = stdout(&larch(&state, &["iostat", "-v"]));
    let names: Vec<&str> = text
        .lines()
        .skip(3)
        .filter(|l| !l.is_empty() && !l.starts_with('-'))
        .map(|l| l.split("   ").next().unwrap().trim_end())
        .collect();
    assert_eq!(names, ["demo", "  vol0", "cache", "  cache0.img"], "{text}");
    assert!(!text.contains("logs"), "{text}");

    // -l over an interval of reads and writes: vol0's reads wait in a queue for an I/O
    // thread, so total, disk and queue times show; its writes go through the TXG's
    // writers (a queue too); every wait has a unit or is "-".
    let out = larch(&state, &["iostat", "-v", "-l", "1", "2"]);
    succeeded(&out, "larch iostat -v -l");
    let text = stdout(&out);
    for group in ["total_wait", "disk_wait", "queue_wait", "p99_wait"] {
        assert!(text.contains(group), "{group}: {text}");
    }
    let second = text.split("\n\n").nth(1).expect("two reports");
    let vol0 = columns(second, "vol0");
    assert_eq!(vol0.len(), 12, "{second}");
    for wait in &vol0[4..] {
        assert!(*wait == "-" || wait.ends_with('s'), "{wait}: {second}");
    }
    let cache = columns(second, "cache0.img");
    assert_eq!(cache[9], "-", "feeds have no queue: {second}");

    // -q: pending and active requests, numbers where larch has a queue, "-" where not.
    let out = larch(&state, &["iostat", "-v", "-q"]);
    succeeded(&out, "larch iostat -q");
    let text = stdout(&out);
    assert!(text.contains("readq") && text.contains("writeq"), "{text}");
    let vol0 = columns(&text, "vol0");
    assert_eq!(vol0.len(), 8, "{text}");
    for depth in &vol0[4..] {
        depth
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("{depth}: {text}"));
    }
    let cache = columns(&text, "cache0.img");
    cache[4].parse::<u64>().unwrap();
    assert_eq!(&cache[6..], ["-", "-"], "{text}");
    succeeded(&client.join().unwrap(), "fio");
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `promtool check metrics` on `text`: whether it passed, and what it printed (its
/// findings). Fails the test when promtool is not installed: the check must run.
fn promtool_check(text: &str) -> (bool, String) {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = child.unwrap_or_else(|err| {
        panic!(
            "promtool cannot run ({err}): install Debian's prometheus package \
             (apt-get install --no-install-recommends prometheus), as scripts/test does"
        )
    });
    // promtool reads all of its input before it writes, so one write and then the wait
    // cannot deadlock.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}

/// The `Content-Type` of a `GET path`'s answer.
fn content_type(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let head = answer.split("\r\n\r\n").next().unwrap();
    head.lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no content type: {head}"))
}

#[test]
fn metrics_pass_promtool_check_metrics_with_volumes_devices_and_histograms() {
    require("nbdcopy");
    require("fio");
    // The check can fail: a family without help is a finding.
    let (passed, findings) = promtool_check("# TYPE x_total counter\nx_total 1\n");
    assert!(!passed && findings.contains("no help text"), "{findings}");
    let dir = scratch("promtool");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    let image = dir.join("image");
    std::fs::write(&image, pattern(16 << 20, 11)).unwrap();
    let out = Command::new("nbdcopy")
        .arg("--flush")
        .arg(&image)
        .arg(daemon.uri())
        .output()
        .unwrap();
    succeeded(&out, "nbdcopy");
    read_until_the_cache_device_serves(&daemon);
    let metrics = daemon.get("/metrics");
    // What is checked: volumes, a cache device and latency histograms, with counts.
    let device = format!("device=\"{}\"", state.join("cache0.img").display());
    for series in [
        "larch_arcstats_hits_total".to_string(),
        "larch_arcstats_l2_hits_total".to_string(),
        "larch_backing_writes_total{volume=\"vol0\"}".to_string(),
        "larch_backing_write_latency_seconds_count{volume=\"vol0\"}".to_string(),
        format!("larch_cache_device_reads_total{{{device}}}"),
        format!("larch_cache_device_read_latency_seconds_count{{{device}}}"),
    ] {
        assert!(sample(&metrics, &series) > 0, "{series} is 0");
    }
    let (passed, findings) = promtool_check(&metrics);
    assert!(
        passed && findings.is_empty(),
        "promtool check metrics found:\n{findings}\nin /metrics:\n{metrics}"
    );
    // The content type names the format written: Prometheus's text format 0.0.4.
    let kind = content_type(&daemon.addr, "/metrics");
    assert!(
        kind.starts_with("text/plain") && kind.contains("version=0.0.4"),
        "{kind}"
    );
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_requests_are_refused_and_the_daemon_keeps_serving() {
    require("nbdinfo");
    let dir = scratch("admin");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    // Changes need the token.
    let (code, body) = http(&daemon.addr, "POST", "/admin/set", "", b"l2arc_mfuonly=1");
    assert_eq!(code, 403, "{body}");
    let wrong = "X-Larch-Token: 0123\r\n";
    let (code, _) = http(
        &daemon.addr,
        "POST",
        "/admin/set",
        wrong,
        b"l2arc_mfuonly=1",
    );
    assert_eq!(code, 403);
    // The Analytics page's token changes tunables through /api/v1/tunables only.
    let page = format!("X-Larch-Token: {}\r\n", daemon.page_token);
    let (code, body) = http(
        &daemon.addr,
        "POST",
        "/admin/set",
        &page,
        b"l2arc_mfuonly=1",
    );
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("tunables only"), "{body}");
    let (code, body) = http(
        &daemon.addr,
        "POST",
        "/admin/cache/remove",
        &page,
        b"path=/nonexistent.img",
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(daemon.status()["tunables"]["l2arc_mfuonly"], 0);
    // Bad bodies: a status and a reason each.
    let tiny = dir.join("tiny.img");
    std::fs::write(&tiny, b"x").unwrap();
    let tiny = format!("path={}", tiny.display());
    for (path, body, code) in [
        ("/admin/set", &b""[..], 400),
        ("/admin/set", b"l2arc_mfuonly", 400),
        ("/admin/set", b"\xff\xfe=1", 400),
        ("/admin/set", b"l2arc_mfuonly=99999999999999999999999", 400),
        ("/admin/cache/add", b"path=relative.img", 400),
        ("/admin/cache/add", b"force=1", 400),
        ("/admin/cache/add", b"path=/nonexistent/x.img", 400),
        ("/admin/cache/add", b"path=/", 400),
        ("/admin/cache/add", tiny.as_bytes(), 409),
        ("/admin/cache/remove", b"path=/nonexistent/x.img", 409),
        ("/admin/nope", b"", 404),
    ] {
        let (got, reason) = daemon.post(path, body);
        assert_eq!(got, code, "{path} {body:?}: {reason}");
        assert!(!reason.trim().is_empty(), "{path} {body:?}: no reason");
    }
    let (code, _) = http(&daemon.addr, "PUT", "/admin/set", "", b"");
    assert_eq!(code, 405);
    // Malformed requests on the wire.
    for raw in [
        &b"GARBAGE\r\n\r\n"[..],
        b"POST /admin/set HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
        b"POST /admin/set HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /admin/set HTTP/1.1\r\nContent-Length: 100\r\n\r\nshort",
        b"\x00\x01\x02\r\n\r\n",
    ] {
        let mut stream = TcpStream::connect(&daemon.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(raw).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 4") || answer.starts_with("HTTP/1.1 5"),
            "{raw:?}: {answer}"
        );
    }
    // A request for another host (a page elsewhere, through DNS rebinding) gets nothing.
    let mut stream = TcpStream::connect(&daemon.addr).unwrap();
    stream
        .write_all(
            b"GET /status HTTP/1.1\r\nHost: rebound.example:9920\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    assert!(!answer.contains("arcstats"), "{answer}");
    // A head that never ends is cut off at its size limit.
    let mut stream = TcpStream::connect(&daemon.addr).unwrap();
    let _ = stream.write_all(&[b'a'; 16 << 10]);
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // Still serving, still taking good changes.
    let (code, body) = daemon.post("/admin/set", b"l2arc_mfuonly=2\n");
    assert_eq!((code, body.as_str()), (200, "l2arc_mfuonly=2\n"));
    assert_eq!(daemon.status()["tunables"]["l2arc_mfuonly"], 2);
    let out = Command::new("nbdinfo")
        .arg("--size")
        .arg(daemon.uri())
        .output()
        .unwrap();
    succeeded(&out, "nbdinfo");
    assert_eq!(stdout(&out).trim(), (16u64 << 20).to_string());
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls the history until `ready` holds for a series answer (the recorder samples once a
/// second), or fails after 30 s.
fn series_until(
    daemon: &Daemon,
    query: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer: serde_json::Value =
            serde_json::from_str(&daemon.get(&format!("/api/v1/series?{query}"))).unwrap();
        if ready(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "never ready: {answer}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn sum(answer: &serde_json::Value, id: &str) -> f64 {
    answer["series"][id]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_f64())
        .sum()
}

#[test]
fn the_history_api_shows_reads_by_source_heat_maps_and_the_l2arc_switch() {
    require("nbdcopy");
    require("fio");
    let dir = scratch("analytics");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    let image = dir.join("image");
    std::fs::write(&image, pattern(16 << 20, 9)).unwrap();
    succeeded(
        &Command::new("nbdcopy")
            .arg(&image)
            .arg(daemon.uri())
            .output()
            .unwrap(),
        "nbdcopy",
    );
    // The page and its files come from the binary.
    let page = daemon.get("/");
    assert!(
        page.contains("<html") || page.contains("<!doctype"),
        "{page}"
    );
    assert!(!daemon.get("/app.js").trim().is_empty());
    // Reads of a working set larger than the ARC (1M) until the cache device serves some.
    let query = "ids=volume/vol0/read_l2_ops,volume/vol0/read_backing_ops,volume/vol0/read_ops,arc/l2_hits&from=-30";
    let mut rounds = 0;
    let warm = loop {
        fio_randread(&daemon, 2);
        let answer = series_until(&daemon, query, |a| sum(a, "volume/vol0/read_ops") > 0.0);
        if sum(&answer, "volume/vol0/read_l2_ops") > 0.0 {
            break answer;
        }
        rounds += 1;
        assert!(
            rounds < 20,
            "no read was served by the cache device: {answer}"
        );
    };
    let catalog: serde_json::Value = serde_json::from_str(&daemon.get("/api/v1/catalog")).unwrap();
    let ids: Vec<&str> = catalog["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    for id in [
        "arc/hits",
        "volume/vol0/read_ops",
        "pool/l2arc_enabled",
        "recorder/bytes",
    ] {
        assert!(ids.contains(&id), "{id} not in {ids:?}");
    }
    assert!(catalog["bytes"].as_u64().unwrap() <= catalog["max_bytes"].as_u64().unwrap());
    assert!(sum(&warm, "volume/vol0/read_backing_ops") > 0.0, "{warm}");
    // Heat maps hold the reads: the backing store's reads are the slow ones.
    let heat: serde_json::Value =
        serde_json::from_str(&daemon.get("/api/v1/heatmap?id=frontend/vol0/read_backing&from=-60"))
            .unwrap();
    assert_eq!(heat["bounds_us"].as_array().unwrap().len(), 97);
    let counted: u64 = heat["cells"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c.as_array()
                .unwrap()
                .chunks(2)
                .map(|p| p[1].as_u64().unwrap())
        })
        .sum();
    assert!(counted > 0, "{heat}");
    // Bad questions: 400 naming the parameter.
    for (query, parameter) in [
        ("series?ids=nope", "ids"),
        ("series?ids=arc/hits&from=x", "from"),
        ("series?ids=arc/hits&step=7", "step"),
        ("series?ids=arc/hits&frm=1", "frm"),
        ("heatmap?id=nope", "id"),
        ("export?ids=arc/hits&format=xml", "format"),
    ] {
        let (code, body) = http(&daemon.addr, "GET", &format!("/api/v1/{query}"), "", b"");
        assert_eq!(code, 400, "{query}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["parameter"], parameter, "{query}: {body}");
    }
    let clipped: serde_json::Value =
        serde_json::from_str(&daemon.get("/api/v1/series?ids=arc/hits&from=-7200&step=1")).unwrap();
    assert!(clipped["clipped"].is_string(), "{clipped}");
    let csv = daemon.get("/api/v1/export?ids=arc/hits,arc/size&from=-60&format=csv");
    assert!(csv.starts_with("time,arc/hits,arc/size\n"), "{csv}");
    // An id named again is one column: a repeated id cannot multiply the answer.
    let repeated = format!(
        "/api/v1/export?ids=arc/hits{}&from=-60&format=csv",
        ",arc/hits".repeat(500)
    );
    let csv = daemon.get(&repeated);
    assert!(
        csv.starts_with("time,arc/hits\n"),
        "{}",
        &csv[..csv.len().min(200)]
    );
    // The switch: without the token, refused; with it, L2 reads stop, and resume.
    let switch = |value: &str, token: &str| {
        http(
            &daemon.addr,
            "POST",
            "/api/v1/tunables",
            token,
            format!("{{\"name\": \"l2arc_enabled\", \"value\": \"{value}\"}}").as_bytes(),
        )
    };
    assert_eq!(switch("0", "").0, 403);
    // The page's own token (what `larch analytics url` gives the page) may flip it.
    assert_ne!(daemon.page_token, daemon.token);
    let page_token = format!("X-Larch-Token: {}\r\n", daemon.page_token);
    let (code, body) = switch("0", &page_token);
    assert_eq!(code, 200, "{body}");
    let token = format!("X-Larch-Token: {}\r\n", daemon.token);
    std::thread::sleep(Duration::from_millis(1500));
    fio_randread(&daemon, 2);
    let off = series_until(
        &daemon,
        "ids=volume/vol0/read_ops,volume/vol0/read_l2_ops,pool/l2arc_enabled&from=-2",
        |a| sum(a, "volume/vol0/read_ops") > 0.0,
    );
    assert_eq!(sum(&off, "volume/vol0/read_l2_ops"), 0.0, "{off}");
    let events: serde_json::Value =
        serde_json::from_str(&daemon.get("/api/v1/series?ids=arc/hits&from=-60")).unwrap();
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "switch" && e["text"] == "l2arc_enabled=0"),
        "{events}"
    );
    assert_eq!(switch("1", &token).0, 200);
    // Spaces around the name are ignored by the change and by its answer alike.
    let (code, body) = http(
        &daemon.addr,
        "POST",
        "/api/v1/tunables",
        &token,
        b"{\"name\": \" l2arc_enabled \", \"value\": \"1\"}",
    );
    assert_eq!(code, 200, "{body}");
    let mut rounds = 0;
    loop {
        fio_randread(&daemon, 2);
        let on = series_until(
            &daemon,
            "ids=volume/vol0/read_ops,volume/vol0/read_l2_ops&from=-2",
            |a| sum(a, "volume/vol0/read_ops") > 0.0,
        );
        if sum(&on, "volume/vol0/read_l2_ops") > 0.0 {
            break;
        }
        rounds += 1;
        assert!(rounds < 10, "L2 reads never resumed: {on}");
    }
    // The live stream sends a sample a second.
    let mut stream = TcpStream::connect(&daemon.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /api/v1/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"arc/hits\"") {
        let n = stream.read(&mut chunk).expect("a sample within 10 s");
        assert!(
            n > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&chunk[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).contains("event: sample"));
    drop(stream);
    // The history is saved at a clean stop and comes back with the restart marked.
    daemon.stop();
    assert!(state.join("analytics.bin").exists());
    let daemon = Daemon::start(&state);
    let back = series_until(&daemon, "ids=arc/size&from=-300", |a| {
        a["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "restart")
            && a["times"].as_array().unwrap().len() > 20
    });
    assert!(back["series"]["arc/size"].as_array().unwrap().len() > 20);
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `larch analytics export ARGS --state-dir STATE`, which must succeed: its output and
/// what it said on standard error.
fn export(state: &Path, args: &[&str]) -> (String, String) {
    let out = larch(state, &[&["analytics", "export"], args].concat());
    succeeded(&out, "larch analytics export");
    (stdout(&out), stderr(&out))
}

/// The column `id` of a CSV export: the values of the rows that have one.
fn column(csv: &str, id: &str) -> Vec<f64> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let k = header
        .iter()
        .position(|h| *h == id)
        .unwrap_or_else(|| panic!("no column {id}: {header:?}"));
    lines
        .filter_map(|l| l.split(',').nth(k).filter(|v| !v.is_empty()))
        .map(|v| v.parse().unwrap())
        .collect()
}

#[test]
fn analytics_export_asks_the_running_daemon_then_reads_the_saved_history() {
    require("nbdcopy");
    let dir = scratch("export");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    // A counter's first sample is the base the next ones count from: writes before it
    // would be in no second. The export waits for that first sample.
    let (first, _) = export(&state, &["--ids", "volume/vol0/write_bytes"]);
    assert!(
        first.starts_with("time,volume/vol0/write_bytes\n"),
        "{first}"
    );
    let image = dir.join("image");
    std::fs::write(&image, pattern(16 << 20, 13)).unwrap();
    succeeded(
        &Command::new("nbdcopy")
            .arg(&image)
            .arg(daemon.uri())
            .output()
            .unwrap(),
        "nbdcopy",
    );
    // The recorder samples once a second: wait for the seconds that hold all the writes.
    let ids = "volume/vol0/write_bytes,arc/size";
    let deadline = Instant::now() + Duration::from_secs(30);
    let (csv, said) = loop {
        let (csv, said) = export(&state, &["--ids", ids, "--from", "-120"]);
        if column(&csv, "volume/vol0/write_bytes").iter().sum::<f64>() >= (16 << 20) as f64 {
            break (csv, said);
        }
        assert!(Instant::now() < deadline, "no writes in the export: {csv}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        csv.starts_with("time,volume/vol0/write_bytes,arc/size\n"),
        "{csv}"
    );
    let written = column(&csv, "volume/vol0/write_bytes").iter().sum::<f64>();
    assert!(
        said.contains(&format!("the running daemon (pid {})", daemon.pid())),
        "{said}"
    );
    // JSON, to a file: the answer of /api/v1/series.
    let file = dir.join("export.json");
    let path = file.to_str().unwrap();
    let args = [
        "--ids", ids, "--from", "-120", "--format", "json", "-o", path,
    ];
    let (printed, said) = export(&state, &args);
    assert!(printed.is_empty(), "{printed}");
    assert!(said.contains("the running daemon"), "{said}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let times = json["times"].as_array().unwrap().len();
    let sizes = json["series"]["arc/size"].as_array().unwrap();
    assert!(times > 0 && sizes.len() == times, "{json}");
    assert!(
        sizes.iter().any(|v| v.as_f64().is_some_and(|v| v > 0.0)),
        "{json}"
    );
    let json_written: f64 = json["series"]["volume/vol0/write_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_f64())
        .sum();
    assert!(json_written >= (16 << 20) as f64, "{json}");
    // Without --ids: every series of the catalog, in its order.
    let catalog: serde_json::Value = serde_json::from_str(&daemon.get("/api/v1/catalog")).unwrap();
    let all: Vec<&str> = catalog["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let (everything, _) = export(&state, &["--from", "-10"]);
    let header = everything.lines().next().unwrap();
    assert_eq!(header, format!("time,{}", all.join(",")));
    // Mistakes: refused with the option at fault, whichever the source.
    for (args, words) in [
        (&["--ids", "arc/size,nope"][..], &["--ids", "\"nope\""][..]),
        (&["--from", "yesterday"], &["--from", "expected seconds"]),
        (&["--from", "200", "--to", "100"], &["--from", "empty"]),
        (&["--step", "7"], &["--step", "1 or 60"]),
        (&["--format", "xml"], &["xml"]),
    ] {
        refused(
            &larch(&state, &[&["analytics", "export"], args].concat()),
            words,
        );
    }
    // Stopped: the saved history, with the same writes.
    daemon.stop();
    let (csv, said) = export(&state, &["--ids", ids, "--from", "-600"]);
    assert!(
        said.contains("analytics.bin") && said.contains("no daemon"),
        "{said}"
    );
    assert!(
        csv.starts_with("time,volume/vol0/write_bytes,arc/size\n"),
        "{csv}"
    );
    let saved = column(&csv, "volume/vol0/write_bytes").iter().sum::<f64>();
    assert_eq!(saved, written, "{csv}");
    refused(
        &larch(&state, &["analytics", "export", "--ids", "nope"]),
        &["--ids", "\"nope\""],
    );
    // No history at all: refused, saying so.
    std::fs::remove_file(state.join("analytics.bin")).unwrap();
    refused(
        &larch(&state, &["analytics", "export"]),
        &["no history", "analytics.bin"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn advice(daemon: &Daemon) -> serde_json::Value {
    serde_json::from_str(&daemon.get("/api/v1/advise")).unwrap()
}

/// Random 16K reads, each block as likely as any other at every read (no fio random map:
/// a pass over every block in turn would be a loop), over the first `size` of the volume.
fn fio_uniform(daemon: &Daemon, size: &str, seconds: u32) -> Output {
    Command::new("fio")
        .args([
            "--name=uniform",
            "--ioengine=nbd",
            &format!("--uri={}", daemon.uri()),
            "--rw=randread",
            "--norandommap",
            "--bs=16k",
            &format!("--size={size}"),
            "--iodepth=4",
            "--time_based",
            &format!("--runtime={seconds}"),
        ])
        .output()
        .unwrap()
}

#[test]
fn advise_answers_from_the_pools_sampled_accesses_and_refuses_bad_sizes() {
    require("fio");
    let dir = scratch("advise");
    let state = dir.join("pool");
    let daemon = Daemon::start_sized(&state, "64M", "64M", "8M");
    // A pool that has seen nothing says so rather than guess, in the API and the CLI.
    let young = advice(&daemon);
    assert!(
        young["too_young"].as_str().unwrap().contains("too young"),
        "{young}"
    );
    let out = larch(&state, &["advise"]);
    succeeded(&out, "larch advise");
    assert!(stdout(&out).contains("too young"), "{}", stdout(&out));
    for (query, parameter) in [
        ("arc=abc", "arc"),
        ("arc=0", "arc"),
        ("l2=2P", "l2"),
        ("device=floppy", "device"),
        ("size=1G", "size"),
    ] {
        let (code, body) = http(
            &daemon.addr,
            "GET",
            &format!("/api/v1/advise?{query}"),
            "",
            b"",
        );
        assert_eq!(code, 400, "{query}: {body}");
        assert!(body.contains(parameter), "{query}: {body}");
    }
    refused(&larch(&state, &["advise", "--arc", "1Q"]), &["--arc"]);

    // Uniform random reads over the first 32 MiB (four times the ARC) until the sample is
    // enough and the ARC is warm.
    let mut rounds = 0;
    let a = loop {
        succeeded(&fio_uniform(&daemon, "32M", 3), "fio");
        let a = advice(&daemon);
        if a["too_young"].is_null() && rounds >= 1 {
            break a;
        }
        rounds += 1;
        assert!(rounds < 15, "still too young: {a}");
    };
    let c = &a["curves"];
    let minute = c["working_set"][0][1].as_f64().unwrap();
    assert!(
        (26.0 * 1048576.0..38.0 * 1048576.0).contains(&minute),
        "working set of the last minute: {minute} ({c})"
    );
    assert_eq!(c["write_share"], 0.0);
    // Where today's ARC (8 MiB of the 32 read uniformly: a quarter) sits on the curve,
    // against what the pool measured.
    let predicted = a["current"]["arc_hit_ratio"].as_f64().unwrap();
    let measured = a["today"]["arc_hit_ratio"].as_f64().unwrap();
    assert!(
        (predicted - measured).abs() < 0.1 && (0.15..0.4).contains(&predicted),
        "predicted {predicted}, measured {measured}: {a}"
    );
    // ARC + L2ARC (72 MiB) hold the 32 MiB read: nearly every miss is the L2ARC's.
    assert!(a["current"]["misses_served"].as_f64().unwrap() > 0.8, "{a}");
    assert_eq!(a["volumes"][0]["name"], "vol0");
    // A configuration asked about, through the CLI: an ARC of 16 MiB holds half.
    let out = larch(&state, &["advise", "--arc", "16M", "--l2", "0", "--json"]);
    succeeded(&out, "larch advise --arc 16M");
    let asked: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let h16 = asked["asked"]["arc_hit_ratio"].as_f64().unwrap();
    assert!(
        (0.38..0.62).contains(&h16),
        "an ARC of 16 MiB over 32 MiB: {h16}"
    );
    // The sampler's memory is in the arcstats, and bounded.
    let stats = daemon.get("/arcstats");
    let size: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("mrc_size"))
        .and_then(|rest| rest.split_whitespace().last())
        .unwrap_or_else(|| panic!("no mrc_size in {stats}"))
        .parse()
        .unwrap();
    assert!(size > 0 && size < 8 << 20, "mrc_size {size}");
    // mrc_sample=0 stops the sampling.
    succeeded(&larch(&state, &["set", "mrc_sample=0"]), "larch set");
    let before = advice(&daemon)["curves"]["sampled"].as_u64().unwrap();
    succeeded(&fio_uniform(&daemon, "32M", 1), "fio");
    assert_eq!(
        advice(&daemon)["curves"]["sampled"].as_u64().unwrap(),
        before
    );
    succeeded(&larch(&state, &["set", "mrc_sample=1"]), "larch set");
    succeeded(&fio_uniform(&daemon, "32M", 1), "fio");
    assert!(advice(&daemon)["curves"]["sampled"].as_u64().unwrap() > before);
    daemon.stop();
}
