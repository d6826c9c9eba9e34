//! Volumes on an object store, against a real one: a single-node Ceph cluster with a RADOS
//! Gateway started by `scripts/ceph-rgw` (installed with apt-get when missing; a gateway
//! that cannot start fails the test). One test function runs every scenario in order
//! against one gateway (starting Ceph takes ~14 s):
//!
//! - round trips with nbdcopy and fio verify, a clean restart that reads everything back
//!   from the store and warm from the persistent L2ARC;
//! - kill -9 at random moments under async, FUA and FLUSH writes (write_crash.py), with
//!   and without a log device: every durable write reads back after the restart;
//! - the gateway stopped mid-TXG and started again: fio sees latency, not errors, and
//!   verifies; stopped for longer than the volume's stall bound: EIO, and `larch status`
//!   says why;
//! - a loopback proxy adding latency and a bandwidth limit between larch and the gateway;
//! - two daemons (two pools) on one volume: the second is refused while the first holds
//!   the lease, takes over once it has expired, and after that the first, restarted,
//!   serves none of its stale L2ARC copies;
//! - bad input: unknown bucket, bad credentials, an unreachable endpoint at `volume add`; a
//!   root that does not parse and a damaged data object at start and on read.

mod common;
use common::{require, scratch};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::PYTHON;
const CRASH_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/write_crash.py");
const CEPH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/ceph-rgw");

fn larch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_larch"))
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The gateway: started once, stopped when dropped (also when a step panics).
struct Gateway {
    dir: PathBuf,
    env: Vec<(String, String)>,
    mon_port: String,
}

impl Gateway {
    /// Starts the cluster, up to five times on other ports, a few seconds apart: on a
    /// developer's machine another cluster may race it for a port, and a loaded machine
    /// has seen Ceph's first OSD start fail three times within seconds (its monitor
    /// refusing the OSD's first commands), then start at the next try.
    fn start() -> Gateway {
        let mut failures = Vec::new();
        for attempt in 0..5u64 {
            match Gateway::try_start() {
                Ok(gateway) => return gateway,
                Err(why) => failures.push(why),
            }
            std::thread::sleep(Duration::from_secs(2 * (attempt + 1)));
        }
        panic!("scripts/ceph-rgw start failed five times: {failures:#?}");
    }

    fn try_start() -> Result<Gateway, String> {
        let dir = scratch("rgw");
        // A free port, not the default: a developer's own cluster may hold that one.
        let mon_port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
            .to_string();
        let mut gateway = Gateway {
            dir: dir.clone(),
            env: Vec::new(),
            mon_port,
        };
        let out = Command::new("bash")
            .arg(CEPH)
            .arg("start")
            .arg(&dir)
            .env("MON_PORT", &gateway.mon_port)
            .output()
            .expect("run scripts/ceph-rgw");
        if !out.status.success() {
            // The script's stderr says which step failed, with the logs' ends and the free space.
            return Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        gateway.env = std::fs::read_to_string(dir.join("s3.env"))
            .expect("s3.env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(gateway)
    }

    fn var(&self, name: &str) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name} not in s3.env"))
    }

    fn endpoint(&self) -> String {
        self.var("AWS_ENDPOINT_URL")
    }

    fn script(&self, args: &[&str]) {
        let out = Command::new("bash")
            .arg(CEPH)
            .arg(args[0])
            .arg(&self.dir)
            .args(&args[1..])
            .env("MON_PORT", &self.mon_port)
            .output()
            .expect("run scripts/ceph-rgw");
        ok(out, &format!("scripts/ceph-rgw {args:?}"));
    }

    fn bucket(&self, name: &str) {
        self.script(&["bucket", name]);
    }

    /// `larch` with the gateway's credentials in its environment.
    fn larch(&self) -> Command {
        let mut cmd = larch();
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    fn run<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(&self, args: &[S]) -> String {
        ok(
            self.larch().args(args).output().expect("run larch"),
            &format!("larch {args:?}"),
        )
    }

    fn fails<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(&self, args: &[S]) -> String {
        let out = self.larch().args(args).output().expect("run larch");
        assert!(!out.status.success(), "larch {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// A signed request with curl (as scripts/ceph-rgw does): `method` on `key` of
    /// `bucket`, with `body` for a PUT. Returns the body of the answer.
    fn curl(&self, method: &str, bucket: &str, key: &str, body: Option<&Path>) -> Vec<u8> {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--fail-with-body", "-X", method])
            .arg("--aws-sigv4")
            .arg(format!("aws:amz:{}:s3", self.var("AWS_REGION")))
            .arg("--user")
            .arg(format!(
                "{}:{}",
                self.var("AWS_ACCESS_KEY_ID"),
                self.var("AWS_SECRET_ACCESS_KEY")
            ))
            .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]);
        if let Some(body) = body {
            cmd.arg("--data-binary").arg(format!("@{}", body.display()));
        }
        if key.starts_with('?') {
            cmd.arg(format!("{}/{bucket}{key}", self.endpoint()));
        } else {
            cmd.arg(format!("{}/{bucket}/{key}", self.endpoint()));
        }
        let out = cmd.output().expect("run curl");
        assert!(out.status.success(), "curl {method} {bucket}/{key} failed");
        out.stdout
    }

    /// The keys under `prefix` in `bucket`.
    fn list(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let prefix = prefix.replace('/', "%2F");
        let body = self.curl(
            "GET",
            bucket,
            &format!("?list-type=2&prefix={prefix}"),
            None,
        );
        let text = String::from_utf8_lossy(&body);
        text.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_string()))
            .collect()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(CEPH)
            .arg("stop")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running `larch serve` on a Unix socket.
struct Daemon {
    child: Child,
    socket: PathBuf,
    state: PathBuf,
}

impl Daemon {
    fn start(gw: &Gateway, state: &Path) -> Daemon {
        Daemon::try_start(gw, state).unwrap_or_else(|e| panic!("larch serve: {e}"))
    }

    /// Starts `larch serve`; `Err` with its standard error when it exits instead.
    fn try_start(gw: &Gateway, state: &Path) -> Result<Daemon, String> {
        let socket = state.join("nbd.sock");
        let _ = std::fs::remove_file(&socket);
        let log = std::fs::File::create(state.join("serve.log")).expect("log file");
        let mut child = gw
            .larch()
            .args(["serve", "--http", "127.0.0.1:0", "--state-dir"])
            .arg(state)
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start larch serve");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !socket.exists() {
            if let Some(status) = child.try_wait().expect("wait") {
                let log = std::fs::read_to_string(state.join("serve.log")).unwrap_or_default();
                return Err(format!("exited ({status}): {log}"));
            }
            assert!(Instant::now() < deadline, "the NBD socket never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Daemon {
            child,
            socket,
            state: state.to_path_buf(),
        })
    }

    fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM: a clean stop (flush, lease given up). Asserts it stopped cleanly.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().expect("wait");
        let log = std::fs::read_to_string(self.state.join("serve.log")).unwrap_or_default();
        assert!(status.success(), "larch serve did not stop cleanly: {log}");
    }

    /// The status once `ready` holds of it (the daemon rewrites it every second); fails
    /// the test after 20 s.
    fn status_when(
        &self,
        gw: &Gateway,
        what: &str,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        // This run's status only: until the daemon writes its first, the state directory
        // still holds the previous run's (its HTTP address closed, its counters met).
        let pid = u64::from(self.child.id());
        loop {
            if !self.state.join("status.json").exists() {
                assert!(Instant::now() < deadline, "{what}: no status written");
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            let status = self.status_json(gw);
            if status["pid"].as_u64() == Some(pid) && ready(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what}: {status}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn status_json(&self, gw: &Gateway) -> serde_json::Value {
        let out = gw.run(&[
            "status",
            "--json",
            "--state-dir",
            self.state.to_str().expect("utf-8"),
        ]);
        serde_json::from_str(&out).expect("status JSON")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pool in `state` with one object-backed volume `vol` at `url` (extra `volume add`
/// flags in `flags`), an ARC of `arc`, and a cache device of `cache` (when given).
fn make_pool(
    gw: &Gateway,
    state: &Path,
    url: &str,
    size: &str,
    flags: &[&str],
    arc: &str,
    cache: Option<&str>,
) {
    std::fs::create_dir_all(state).unwrap();
    let dir = state.to_str().expect("utf-8");
    gw.run(&[
        "pool",
        "create",
        "objtest",
        "--state-dir",
        dir,
        "--arc-max",
        arc,
    ]);
    let mut args = vec!["volume", "add", "vol", "--backing", url, "--state-dir", dir];
    if !size.is_empty() {
        args.extend(["--size", size]);
    }
    args.extend(flags);
    gw.run(&args);
    if let Some(cache) = cache {
        let path = state.join("cache.img");
        gw.run(&[
            "cache",
            "add",
            path.to_str().unwrap(),
            "--size",
            cache,
            "--state-dir",
            dir,
        ]);
    }
}

fn nbdcopy(from: &str, to: &str) {
    let out = Command::new("nbdcopy")
        .arg(from)
        .arg(to)
        .output()
        .expect("nbdcopy");
    ok(out, &format!("nbdcopy {from} {to}"));
}

fn read_all(daemon: &Daemon, out: &Path) -> Vec<u8> {
    let _ = std::fs::remove_file(out);
    nbdcopy(&daemon.uri("vol"), out.to_str().unwrap());
    std::fs::read(out).unwrap()
}

fn fio(uri: &str, args: &[&str]) -> Output {
    Command::new("fio")
        .args(["--name=obj", "--ioengine=nbd", "--output-format=terse"])
        .arg(format!("--uri={uri}"))
        .args(args)
        .output()
        .expect("run fio")
}

#[test]
fn object_backed_volumes_against_ceph_rgw() {
    for tool in ["nbdcopy", "fio", "curl", "promtool"] {
        require(tool);
    }
    common::require_python_nbd();
    let gw = Gateway::start();
    gw.bucket("larch");
    bad_input(&gw);
    round_trip_restart_and_warm_l2(&gw);
    crashes_lose_no_durable_write(&gw);
    gateway_outage(&gw);
    slow_store_through_a_proxy(&gw);
    one_writer_and_no_stale_read_after_takeover(&gw);
    a_follower_follows_the_writer(&gw);
}

fn bad_input(gw: &Gateway) {
    let state = scratch("obj-bad");
    let dir = state.to_str().unwrap();
    gw.run(&["pool", "create", "bad", "--state-dir", dir]);
    let add = |url: &str, extra: &[&str]| {
        let mut args = vec!["volume", "add", "v", "--backing", url, "--state-dir", dir];
        args.extend(extra);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let err = gw.fails(&add("s3://no-such-bucket/v", &["--size", "16M"]));
    assert!(err.contains("NoSuchBucket"), "{err}");
    let err = gw.fails(&add("s3://larch/v", &[]));
    assert!(err.contains("give --size"), "{err}");
    let err = gw.fails(&add("s3://Bad_Bucket/v", &["--size", "16M"]));
    assert!(err.contains("bucket name"), "{err}");
    let out = gw
        .larch()
        .env("AWS_SECRET_ACCESS_KEY", "wrong")
        .args(add("s3://larch/creds", &["--size", "16M"]))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SignatureDoesNotMatch") || err.contains("403"),
        "{err}"
    );
    let unreachable = add(
        "s3://larch/far",
        &["--size", "16M", "--s3-endpoint", "http://127.0.0.1:1"],
    );
    let err = gw.fails(&unreachable);
    assert!(err.contains("127.0.0.1:1"), "{err}");
    let err = gw
        .larch()
        .env_remove("AWS_ACCESS_KEY_ID")
        .env("HOME", &state)
        .args(add("s3://larch/anon", &["--size", "16M"]))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&err.stderr).contains("no credentials"));
    // A volume whose root is then damaged: the start names the object.
    gw.run(&add(
        "s3://larch/bad",
        &["--size", "16M", "--volblocksize", "8K"],
    ));
    let same = gw.fails(&add("s3://larch/bad", &["--size", "16M"]));
    assert!(same.contains("already"), "{same}");
    // Another pool adopting it with another size is refused; without one, adopts it.
    let other = state.join("other");
    let odir = other.to_str().unwrap();
    gw.run(&["pool", "create", "other", "--state-dir", odir]);
    let again = gw.fails(&[
        "volume",
        "add",
        "v",
        "--backing",
        "s3://larch/bad",
        "--size",
        "32M",
        "--state-dir",
        odir,
    ]);
    assert!(again.contains("leave --size out"), "{again}");
    let adopted = gw.run(&[
        "volume",
        "add",
        "v",
        "--backing",
        "s3://larch/bad",
        "--state-dir",
        odir,
    ]);
    assert!(
        adopted.contains("adopted") && adopted.contains("16.0M"),
        "{adopted}"
    );
    // A damaged segment on the store: the read that needs it fails (EIO) and the daemon
    // counts it; it is never served, or replaced with zeros.
    let daemon = Daemon::start(gw, &other);
    let image = state.join("image");
    std::fs::write(&image, common::pattern(1 << 20, 7)).unwrap();
    nbdcopy(image.to_str().unwrap(), &daemon.uri("v"));
    daemon.stop();
    let keys = gw.list("larch", "bad/seg/");
    assert!(!keys.is_empty(), "nothing was committed");
    let key = keys[0].clone();
    let mut bytes = gw.curl("GET", "larch", &key, None);
    bytes[100] ^= 0x20;
    let damaged = state.join("damaged");
    std::fs::write(&damaged, &bytes).unwrap();
    gw.curl("PUT", "larch", &key, Some(&damaged));
    let daemon = Daemon::start(gw, &other);
    let out = Command::new("nbdcopy")
        .arg(daemon.uri("v"))
        .arg(state.join("read").to_str().unwrap())
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a damaged object was read without error"
    );
    daemon.status_when(gw, "the failed reads were not counted", |s| {
        s["volumes"][0]["backing_errors"].as_u64().unwrap_or(0) > 0
    });
    daemon.stop();
    let garbage = state.join("garbage");
    std::fs::write(&garbage, b"not a root").unwrap();
    gw.curl("PUT", "larch", "bad/larch-volume", Some(&garbage));
    let err = Daemon::try_start(gw, &state)
        .err()
        .expect("served a volume with a bad root");
    assert!(
        err.contains("larch-volume") && err.contains("not a larch"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&state);
}

fn round_trip_restart_and_warm_l2(gw: &Gateway) {
    let state = scratch("obj-rt");
    make_pool(
        gw,
        &state,
        "s3://larch/rt",
        "32M",
        &["--volblocksize", "8K", "--object-size", "256K"],
        "4M",
        Some("64M"),
    );
    // The size the volume was created with is recorded, and a start whose pool says
    // another size refuses the root before reading its map.
    let config_path = state.join("pool.json");
    let config = std::fs::read_to_string(&config_path).unwrap();
    let mut edited: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        edited["volumes"][0]["object_size_bytes"],
        32 << 20,
        "{config}"
    );
    edited["volumes"][0]["object_size_bytes"] = (64u64 << 20).into();
    std::fs::write(&config_path, edited.to_string()).unwrap();
    let refused = Daemon::try_start(gw, &state)
        .err()
        .expect("a start with the wrong size");
    assert!(
        refused.contains("refused before its map is read"),
        "{refused}"
    );
    std::fs::write(&config_path, &config).unwrap();
    let daemon = Daemon::start(gw, &state);
    let image = state.join("in.img");
    std::fs::write(&image, common::pattern(24 << 20, 19)).unwrap();
    nbdcopy(image.to_str().unwrap(), &daemon.uri("vol"));
    let out = fio(
        &daemon.uri("vol"),
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--offset=24M",
            "--size=8M",
            "--iodepth=8",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
        ],
    );
    ok(out, "fio verify over an object-backed volume");
    let first = read_all(&daemon, &state.join("out1.img"));
    assert_eq!(&first[..24 << 20], &std::fs::read(&image).unwrap()[..]);
    daemon.stop();
    // Everything committed (the clean stop flushed), and a second start reads it all back
    // from the gateway and the cache device.
    let daemon = Daemon::start(gw, &state);
    let second = read_all(&daemon, &state.join("out2.img"));
    assert!(first == second, "the volume changed across a clean restart");
    let status = daemon.status_when(gw, "no read was served from the persistent L2ARC", |s| {
        s["arcstats"]["l2_hits"].as_u64().unwrap_or(0) > 0
            && s["volumes"][0]["object"]["commit_seq"]
                .as_u64()
                .unwrap_or(0)
                >= 1
    });
    // The object store's counters in /metrics, which promtool accepts.
    let addr = status["http"].as_str().expect("the HTTP address");
    let metrics = common::http_get(addr, "/metrics");
    let body = metrics
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(
        body.contains("larch_object_get_bytes_total{volume=\"vol\"}"),
        "{body}"
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (scripts/test installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    ok(
        promtool.wait_with_output().unwrap(),
        "promtool check metrics",
    );
    // The Analytics page's history has the volume's object-store series (its "Object
    // stores" section draws them), with the live bytes of what was written.
    let catalog = common::http_get(addr, "/api/v1/catalog");
    for id in [
        "object/vol/gets",
        "object/vol/put_bytes",
        "object/vol/stored_bytes",
    ] {
        assert!(
            catalog.contains(&format!("\"{id}\"")),
            "{id} not in {catalog}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = common::http_get(addr, "/api/v1/series?ids=object/vol/live_bytes");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        let live = json["series"]["object/vol/live_bytes"]
            .as_array()
            .and_then(|v| v.iter().rev().find_map(|x| x.as_f64()));
        if live.is_some_and(|b| b >= (1 << 20) as f64) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no live bytes in the history: {answer}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Grown while served: the daemon records the size, then writes the root with it; a
    // new connection sees 40 MiB, the new tail reads as zeros and takes writes, and a
    // restart serves the grown volume.
    let out = gw
        .larch()
        .args(["volume", "set", "vol", "volsize=40M", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let said = ok(out, "larch volume set vol volsize=40M");
    assert!(said.contains("volsize 32M -> 40M"), "{said}");
    let grown = read_all(&daemon, &state.join("out3.img"));
    assert_eq!(grown.len(), 40 << 20);
    assert!(
        grown[..32 << 20] == second[..],
        "the grow changed the old blocks"
    );
    assert!(
        grown[32 << 20..].iter().all(|&b| b == 0),
        "the new tail is not zeros"
    );
    let out = fio(
        &daemon.uri("vol"),
        &[
            "--rw=randwrite",
            "--bs=8k",
            "--offset=32M",
            "--size=8M",
            "--iodepth=8",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
        ],
    );
    ok(out, "fio verify over the grown tail");
    let before = read_all(&daemon, &state.join("out4.img"));
    daemon.stop();
    let daemon = Daemon::start(gw, &state);
    let after = read_all(&daemon, &state.join("out5.img"));
    assert!(after == before, "the grown volume changed across a restart");
    // Never shrunk.
    let out = gw
        .larch()
        .args([
            "volume",
            "set",
            "vol",
            "volsize=16M",
            "--force",
            "--state-dir",
        ])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a volume on an object store shrank");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never shrinks"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    daemon.stop();
    let _ = std::fs::remove_dir_all(&state);
}

fn crashes_lose_no_durable_write(gw: &Gateway) {
    let rounds: u64 = std::env::var("LARCH_OBJECT_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let mut rng = 0x0b1e_c7ed_u64;
    let mut durable = 0u64;
    let mut repacked = 0u64;
    for round in 0..rounds {
        let slog = round % 2 == 1;
        let state = scratch("obj-crash");
        let url = format!("s3://larch/crash-{round}");
        make_pool(
            gw,
            &state,
            &url,
            "2M",
            &["--volblocksize", "4K", "--object-size", "64K"],
            "1M",
            Some("16M"),
        );
        let dir = state.to_str().unwrap();
        if slog {
            let log = state.join("log.img");
            gw.run(&[
                "log",
                "add",
                log.to_str().unwrap(),
                "--size",
                "8M",
                "--state-dir",
                dir,
            ]);
        }
        gw.run(&["set", "--state-dir", dir, "zfs_txg_timeout=1"]);
        let logs = state.join("durable");
        std::fs::create_dir_all(&logs).unwrap();
        let seed = 100 + round;
        let script = |mode: &str, uri: &str| {
            let mut cmd = Command::new(PYTHON);
            cmd.arg(CRASH_SCRIPT).arg(mode).arg(uri).arg(&logs).args([
                "4",
                &seed.to_string(),
                "512",
                "4096",
            ]);
            cmd
        };
        let daemon = Daemon::start(gw, &state);
        let mut writer = script("write", &daemon.uri("vol"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Long enough, in most rounds, for the segments to pass 1.5x the live bytes and
        // commits to repack (the last status the daemon wrote says whether they did).
        let run_ms = 300 + rng % 5700;
        std::thread::sleep(Duration::from_millis(run_ms));
        daemon.kill9();
        let last: serde_json::Value =
            serde_json::from_slice(&std::fs::read(state.join("status.json")).unwrap_or_default())
                .unwrap_or_default();
        repacked += last["volumes"][0]["object"]["repacked_segments"]
            .as_u64()
            .unwrap_or(0);
        let _ = writer.wait();
        let daemon = Daemon::start(gw, &state);
        let out = script("check", &daemon.uri("vol")).output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "round {round} (log device: {slog}, killed after {run_ms} ms): {report}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        durable += report
            .split(", ")
            .find_map(|p| p.strip_suffix(" with durable writes"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("the checker's report: {report}"));
        daemon.stop();
        let _ = std::fs::remove_dir_all(&state);
    }
    assert!(durable > 0, "no write became durable in any round");
    // Crashes met repacks in flight or done: the rounds tested more than plain commits.
    assert!(repacked > 0, "no round repacked a segment before its crash");
}

fn gateway_outage(gw: &Gateway) {
    // Within the stall bound (30 s by default): latency, no error, nothing lost.
    let state = scratch("obj-outage");
    make_pool(
        gw,
        &state,
        "s3://larch/outage",
        "16M",
        &["--volblocksize", "8K", "--object-size", "64K"],
        "32M",
        None,
    );
    let dir = state.to_str().unwrap().to_string();
    gw.run(&["set", "--state-dir", &dir, "zfs_txg_timeout=1"]);
    let daemon = Daemon::start(gw, &state);
    let uri = daemon.uri("vol");
    let writer = std::thread::spawn(move || {
        fio(
            &uri,
            &[
                "--rw=randwrite",
                "--bs=8k",
                "--size=16M",
                "--iodepth=4",
                "--fsync=32",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
            ],
        )
    });
    std::thread::sleep(Duration::from_millis(700));
    gw.script(&["gateway-stop"]);
    std::thread::sleep(Duration::from_secs(8));
    gw.script(&["gateway-start"]);
    let out = writer.join().unwrap();
    ok(out, "fio across a gateway outage of 8 s");
    let status = daemon.status_json(gw);
    assert!(
        status["volumes"][0]["write_failure"].is_null(),
        "{}",
        status["volumes"][0]
    );
    daemon.stop();
    // The data is on the store: a fresh pool adopting the volume reads what fio verified.
    let _ = std::fs::remove_dir_all(&state);

    // Past the bound (a 3 s stall bound here): EIO, and the status says why.
    let state = scratch("obj-outage-long");
    make_pool(
        gw,
        &state,
        "s3://larch/outage-long",
        "4M",
        &["--volblocksize", "8K", "--s3-stall-secs", "3"],
        "32M",
        None,
    );
    let daemon = Daemon::start(gw, &state);
    gw.script(&["gateway-stop"]);
    // (fio does not report a failed end_fsync; libnbd's flush does.)
    let out = Command::new(PYTHON)
        .args(["-c", "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); h.pwrite(b'x'*65536, 0); h.flush()"])
        .arg(daemon.uri("vol"))
        .output()
        .unwrap();
    gw.script(&["gateway-start"]);
    assert!(
        !out.status.success(),
        "a flush succeeded with the gateway down past the bound"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Input/output error"),
        "{out:?}"
    );
    // The status (refreshed every second) says why.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = gw.run(&["status", "--state-dir", state.to_str().unwrap()]);
        if text.contains("WRITES FAIL") && text.contains("s3://larch/outage-long") {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(250));
    }
    daemon.stop();
    let _ = std::fs::remove_dir_all(&state);
}

/// A TCP proxy on loopback to `target` that delays each chunk by `delay` and passes at
/// most `bytes_per_sec` in each direction. Runs until `stop`.
fn proxy(target: String, delay: Duration, bytes_per_sec: u64, stop: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((client, _)) => {
                    client.set_nonblocking(false).unwrap();
                    let Ok(server) = TcpStream::connect(&target) else {
                        continue;
                    };
                    for (mut from, mut to) in [
                        (client.try_clone().unwrap(), server.try_clone().unwrap()),
                        (server, client),
                    ] {
                        std::thread::spawn(move || {
                            let mut buf = vec![0u8; 16 << 10];
                            loop {
                                let n = match from.read(&mut buf) {
                                    Ok(0) | Err(_) => break,
                                    Ok(n) => n,
                                };
                                std::thread::sleep(
                                    delay
                                        + Duration::from_micros(
                                            n as u64 * 1_000_000 / bytes_per_sec,
                                        ),
                                );
                                if to.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                            let _ = to.shutdown(std::net::Shutdown::Write);
                        });
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    port
}

fn slow_store_through_a_proxy(gw: &Gateway) {
    let stop = Arc::new(AtomicBool::new(false));
    let target = gw.endpoint().trim_start_matches("http://").to_string();
    let port = proxy(
        target,
        Duration::from_millis(15),
        8 << 20,
        Arc::clone(&stop),
    );
    let state = scratch("obj-proxy");
    let endpoint = format!("http://127.0.0.1:{port}");
    make_pool(
        gw,
        &state,
        "s3://larch/proxy",
        "8M",
        &[
            "--volblocksize",
            "8K",
            "--object-size",
            "128K",
            // The layout of volumes made before segments, kept working end to end.
            "--layout",
            "objects",
            "--s3-endpoint",
            &endpoint,
        ],
        "2M",
        None,
    );
    let daemon = Daemon::start(gw, &state);
    let out = fio(
        &daemon.uri("vol"),
        &[
            "--rw=randrw",
            "--bs=8k",
            "--size=8M",
            "--iodepth=8",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
        ],
    );
    ok(out, "fio verify through a slow, narrow link to the store");
    let status = daemon.status_when(gw, "no commit through the proxy", |s| {
        s["volumes"][0]["object"]["commits"].as_u64().unwrap_or(0) > 0
    });
    let object = &status["volumes"][0]["object"];
    assert_eq!(object["errors"].as_u64(), Some(0), "{object}");
    daemon.stop();
    stop.store(true, Ordering::Relaxed);
    let _ = std::fs::remove_dir_all(&state);
}

fn one_writer_and_no_stale_read_after_takeover(gw: &Gateway) {
    let url = "s3://larch/shared";
    let a = scratch("obj-node-a");
    let b = scratch("obj-node-b");
    // A: a small ARC so that reads go to its cache device; a 6 s lease.
    make_pool(
        gw,
        &a,
        url,
        "16M",
        &[
            "--volblocksize",
            "8K",
            "--object-size",
            "64K",
            "--s3-lease-secs",
            "6",
            "--s3-stall-secs",
            "3",
        ],
        "1M",
        Some("64M"),
    );
    // A also has a log device: its records of writes it never committed must not be
    // replayed over B's commits.
    let log = a.join("log.img");
    gw.run(&[
        "log",
        "add",
        log.to_str().unwrap(),
        "--size",
        "8M",
        "--state-dir",
        a.to_str().unwrap(),
    ]);
    make_pool(
        gw,
        &b,
        url,
        "",
        &["--s3-lease-secs", "6", "--s3-stall-secs", "3"],
        "8M",
        None,
    );
    let old = state_image(&a, 16 << 20, 41);
    let node_a = Daemon::start(gw, &a);
    nbdcopy(old.to_str().unwrap(), &node_a.uri("vol"));
    // Read it all a few times: the ARC (1M) overflows into the cache device.
    for _ in 0..3 {
        read_all(&node_a, &a.join("read.img"));
    }
    node_a.status_when(gw, "node A fed nothing to its cache device", |s| {
        s["arcstats"]["l2_size"].as_u64().unwrap_or(0) > 0
    });
    // B is refused while A holds the lease.
    let err = Daemon::try_start(gw, &b)
        .err()
        .expect("two nodes served one volume");
    assert!(err.contains("holds the volume's lease"), "{err}");
    // A acknowledges FUA writes from its log device, then dies before its next commit
    // (no release); B takes over once the lease has expired.
    let fua = Command::new(PYTHON)
        .args(["-c", "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); [h.pwrite(b'\\xa5'*65536, i*65536, nbd.CMD_FLAG_FUA) for i in range(16)]"])
        .arg(node_a.uri("vol"))
        .output()
        .unwrap();
    ok(fua, "FUA writes on node A");
    node_a.kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    let node_b = loop {
        match Daemon::try_start(gw, &b) {
            Ok(d) => break d,
            Err(e) if e.contains("holds the volume's lease") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("node B could not take over: {e}"),
        }
    };
    let new = state_image(&b, 16 << 20, 42);
    nbdcopy(new.to_str().unwrap(), &node_b.uri("vol"));
    node_b.stop();
    // A comes back with its cache device full of copies B has since overwritten: once
    // its rebuild has read their log, none of them is in its index (B rewrote every
    // object), and none is served. (Copies fed after the restart, of B's bytes, may be
    // hit: blocks a demand read took from a prefetch are fed.)
    let node_a = Daemon::start(gw, &a);
    let pid = u64::from(node_a.child.id());
    // The status of this run (the killed run's file is still there until it writes one).
    let rebuilt = node_a.status_when(gw, "node A's rebuild did not end", |s| {
        s["pid"].as_u64() == Some(pid) && s["cache_devices"][0]["rebuild"].is_object()
    });
    let device = &rebuilt["cache_devices"][0];
    assert_eq!(device["state"], "online", "{device}");
    // Its rebuild restored none of them. (The index itself may already hold a copy fed
    // since the restart: a feed can run between the rebuild's end and this status.)
    assert_eq!(
        device["rebuild"]["bufs"].as_u64(),
        Some(0),
        "node A's rebuild indexed copies node B has overwritten: {device}"
    );
    assert!(
        device["blocks"].as_u64() == Some(0) || device["writes"].as_u64() > Some(0),
        "node A indexes copies it did not write since the restart: {device}"
    );
    assert!(
        device["rebuild"]["log_blocks"].as_u64().unwrap_or(0) > 0,
        "node A's rebuild read no log, so an empty index proves nothing: {device}"
    );
    let back = read_all(&node_a, &a.join("after.img"));
    assert!(
        back == std::fs::read(&new).unwrap(),
        "node A served bytes older than node B's commit"
    );
    let named = node_a.status_json(gw)["volumes"][0]["object"]["segments"]
        .as_u64()
        .expect("a segments volume");
    node_a.stop();
    // Nothing left behind on the store but what the last commit names.
    let keys = gw.list("larch", "shared/seg/");
    assert_eq!(keys.len() as u64, named, "segments left: {keys:?}");
    assert!(named > 0);
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

fn state_image(dir: &Path, len: usize, seed: u64) -> PathBuf {
    let path = dir.join(format!("image-{seed}.img"));
    std::fs::write(&path, common::pattern(len, seed)).unwrap();
    path
}

/// nbdcopy that flushes the destination at the end (the writer's commit is on the store
/// when it returns).
fn nbdcopy_flushed(from: &Path, to: &str) {
    let out = Command::new("nbdcopy")
        .arg("--flush")
        .arg(from)
        .arg(to)
        .output()
        .expect("nbdcopy");
    ok(out, &format!("nbdcopy --flush {} {to}", from.display()));
}

/// Reads the follower's volume until it is `want`, checking that every 8K block of every
/// read is `want`'s or `before`'s (a follower moves from one commit to the next, never to
/// anything else); fails after 30 s.
fn follower_reaches(daemon: &Daemon, dir: &Path, before: &[u8], want: &[u8], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = read_all(daemon, &dir.join("follower.img"));
        assert_eq!(got.len(), want.len());
        for (i, ((g, b), w)) in got
            .chunks(8192)
            .zip(before.chunks(8192))
            .zip(want.chunks(8192))
            .enumerate()
        {
            assert!(g == b || g == w, "{what}: block {i} is neither commit's");
        }
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the follower never caught up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A read-only follower on another pool (`volume add --read-only`, no lease): it serves
/// what the writer flushed within its poll, never a byte the writer has since overwritten
/// (its ARC and cache device held the old ones), refuses writes, and keeps serving through
/// the writer's kill -9 and a takeover by another writer.
fn a_follower_follows_the_writer(gw: &Gateway) {
    let url = "s3://larch/follow";
    let (w, f, w2) = (
        scratch("obj-writer"),
        scratch("obj-follower"),
        scratch("obj-writer2"),
    );
    let writer_flags = [
        "--volblocksize",
        "8K",
        "--object-size",
        "256K",
        "--s3-lease-secs",
        "6",
        "--s3-stall-secs",
        "3",
    ];
    make_pool(gw, &w, url, "16M", &writer_flags, "4M", None);
    let writer = Daemon::start(gw, &w);
    let first = state_image(&w, 16 << 20, 1);
    nbdcopy_flushed(&first, &writer.uri("vol"));
    // The follower: a small ARC and a cache device, so that its reads come from both.
    make_pool(gw, &f, url, "", &["--read-only"], "2M", Some("64M"));
    let follower = Daemon::start(gw, &f);
    let first = std::fs::read(&first).unwrap();
    assert!(read_all(&follower, &f.join("a.img")) == first);
    assert!(read_all(&follower, &f.join("a.img")) == first);
    follower.status_when(gw, "the follower fed nothing to its cache device", |s| {
        s["cache_devices"][0]["blocks"].as_u64().unwrap_or(0) > 0
    });
    // The writer overwrites everything; the follower moves to it.
    let second_path = state_image(&w, 16 << 20, 2);
    nbdcopy_flushed(&second_path, &writer.uri("vol"));
    let second = std::fs::read(&second_path).unwrap();
    follower_reaches(
        &follower,
        &f,
        &first,
        &second,
        "after the writer's overwrite",
    );
    let status = follower.status_json(gw);
    let volume = &status["volumes"][0];
    assert_eq!(
        volume["object"]["token"].as_u64(),
        Some(0),
        "a follower holds no lease"
    );
    // Writes are refused.
    let out = Command::new("nbdcopy")
        .arg(first_image_path(&w))
        .arg(follower.uri("vol"))
        .output()
        .unwrap();
    assert!(!out.status.success(), "a follower took a write");
    // The writer dies; the follower keeps serving its last commit.
    writer.kill9();
    assert!(read_all(&follower, &f.join("b.img")) == second);
    // Another writer takes the volume over once the lease ran out, and writes.
    make_pool(gw, &w2, url, "", &[], "4M", None);
    let deadline = Instant::now() + Duration::from_secs(60);
    let writer2 = loop {
        match Daemon::try_start(gw, &w2) {
            Ok(d) => break d,
            Err(e) if e.contains("holds the volume's lease") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("the second writer could not take over: {e}"),
        }
    };
    let third_path = state_image(&w2, 16 << 20, 3);
    nbdcopy_flushed(&third_path, &writer2.uri("vol"));
    let third = std::fs::read(&third_path).unwrap();
    follower_reaches(&follower, &f, &second, &third, "after the takeover");
    writer2.stop();
    follower.stop();
    for dir in [&w, &f, &w2] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn first_image_path(dir: &Path) -> PathBuf {
    dir.join("image-1.img")
}
