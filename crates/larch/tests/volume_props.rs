//! A served volume's properties and size changed at run time, end to end with the real
//! binary and real NBD clients: `larch volume set vol0 volsize=...` grows a volume that
//! nbdinfo then sees on a new connection, refuses a shrink without --force, and with it
//! cuts the tail so that a connection made before gets errors past the new end and a grow
//! back reads zeros, never the old tail, also from a warm cache device after a restart;
//! `larch set vol0 sync=... logbias=... primarycache=... secondarycache=...` under fio's
//! verifying writes; `larch get vol0`; bad input through the CLI and HTTP; and the
//! properties after a restart.

mod common;
use common::{PYTHON, pattern, require, require_python_nbd, scratch};

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

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

/// `larch ARGS`, which must succeed; its standard output.
fn larch_ok(state: &Path, args: &[&str]) -> String {
    let out = larch(state, args);
    assert!(
        out.status.success(),
        "larch {args:?} failed: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// `larch ARGS`, which must be refused (exit 2) with every one of `words` in its message.
fn larch_refused(state: &Path, args: &[&str], words: &[&str]) {
    let out = larch(state, args);
    let text = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "larch {args:?} not refused: {text}"
    );
    for word in words {
        assert!(text.contains(word), "{word:?} missing from: {text}");
    }
}

/// One HTTP/1.1 request to the daemon, with its token if given; the status code and body.
fn http(addr: &str, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let token = token.map_or(String::new(), |t| format!("X-Larch-Token: {t}\r\n"));
    common::http_request(addr, method, path, &token, body.as_bytes())
}

/// A `larch serve` of a demo pool (a 16 MiB volume of 16K blocks, a 16 MiB cache device,
/// a 1 MiB ARC; created at the first start), HTTP on a free port, its standard error in
/// `serve.log` beside the state directory.
struct Daemon {
    child: Option<Child>,
    state: PathBuf,
    socket: PathBuf,
    addr: String,
    token: String,
}

impl Daemon {
    fn start(state: &Path) -> Daemon {
        let socket = state.with_extension("sock");
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(state.join("daemon.json"));
        let log = std::fs::File::create(state.with_extension("log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_larch"))
            .args(["serve", "--state-dir"])
            .arg(state)
            .arg("--socket")
            .arg(&socket)
            .args([
                "--demo-volume-size",
                "16M",
                "--demo-cache-size",
                "16M",
                "--demo-arc-max",
                "1M",
                "--http",
                "127.0.0.1:0",
            ])
            .stderr(log)
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
            assert!(Instant::now() < deadline, "the daemon never started");
            std::thread::sleep(Duration::from_millis(50));
        };
        Daemon {
            child: Some(child),
            state: state.to_path_buf(),
            socket,
            addr: record["http"].as_str().unwrap().to_string(),
            token: record["token"].as_str().unwrap().to_string(),
        }
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///vol0?socket={}", self.socket.display())
    }

    /// `/status`, asked now.
    fn status(&self) -> serde_json::Value {
        let (code, body) = http(&self.addr, "GET", "/status", None, "");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The volume's size on a new NBD connection, as nbdinfo reports it.
    fn nbd_size(&self) -> u64 {
        let out = Command::new("nbdinfo")
            .args(["--size", &self.uri()])
            .output()
            .unwrap();
        assert!(out.status.success(), "nbdinfo: {}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    }

    /// SIGTERM, and a clean exit.
    fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = child.wait().unwrap();
        let log = std::fs::read_to_string(self.state.with_extension("log")).unwrap_or_default();
        assert!(exit.success(), "larch serve exited {exit:?}: {log}");
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

fn run(command: &mut Command, what: &str) -> Output {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{what} failed: {}", stderr(&out));
    out
}

/// Writes `bytes` over the start of the volume (nbdcopy).
fn write_image(daemon: &Daemon, dir: &Path, bytes: &[u8]) {
    let file = dir.join("in.img");
    std::fs::write(&file, bytes).unwrap();
    run(
        Command::new("nbdcopy")
            .arg(&file)
            .arg(daemon.uri())
            .arg("--flush"),
        "nbdcopy to the volume",
    );
}

/// The whole volume as a new connection reads it (nbdcopy).
fn read_image(daemon: &Daemon, dir: &Path) -> Vec<u8> {
    let file = dir.join("out.img");
    let _ = std::fs::remove_file(&file);
    run(
        Command::new("nbdcopy").arg(daemon.uri()).arg(&file),
        "nbdcopy from the volume",
    );
    std::fs::read(&file).unwrap()
}

/// Whether every byte of `bytes` is zero (asserted without printing megabytes).
fn zeros(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// A libnbd connection kept open across changes, driven line by line: `read OFFSET LEN`
/// and `write OFFSET LEN` answer `ok ...` or `error ERRNO`.
struct Connection {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

const CLIENT: &str = r#"
import errno, nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
print("size", h.get_size(), flush=True)
for line in sys.stdin:
    op, offset, length = line.split()
    offset, length = int(offset), int(length)
    try:
        if op == "read":
            data = h.pread(length, offset)
            print("ok", "zeros" if data.count(0) == length else "data", flush=True)
        else:
            h.pwrite(b"\x5a" * length, offset)
            print("ok", flush=True)
    except nbd.Error as e:
        print("error", errno.errorcode.get(e.errno, e.errno), flush=True)
"#;

impl Connection {
    fn open(uri: &str) -> (Connection, u64) {
        let mut child = Command::new(PYTHON)
            .args(["-c", CLIENT, uri])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        let size = line
            .strip_prefix("size ")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("the client said {line:?}"));
        (
            Connection {
                child,
                input,
                output,
            },
            size,
        )
    }

    fn ask(&mut self, op: &str, offset: u64, length: u64) -> String {
        writeln!(self.input, "{op} {offset} {length}").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads at random over the volume until the cache device holds copies (the ARC is 1M).
fn warm_l2(daemon: &Daemon, span: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        run(
            Command::new("fio").args([
                "--name=warm",
                "--ioengine=nbd",
                &format!("--uri={}", daemon.uri()),
                "--rw=randread",
                "--bs=16k",
                &format!("--size={span}"),
                "--time_based",
                "--runtime=1",
            ]),
            "fio randread",
        );
        if daemon.status()["arcstats"]["l2_size"].as_u64().unwrap_or(0) > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nothing reached the cache device"
        );
    }
}

/// Grow, a refused shrink, a forced shrink (an older connection gets EINVAL and ENOSPC
/// past the new end, never old bytes), a grow back over the cut tail (zeros, also from a
/// warm cache device, also after a restart).
#[test]
fn a_served_volume_grows_and_shrinks_and_never_shows_its_old_tail() {
    require("nbdinfo");
    require("nbdcopy");
    require("fio");
    require_python_nbd();
    let dir = scratch("volprops-resize");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    let image = pattern((16 * MIB) as usize, 7);
    write_image(&daemon, &dir, &image);
    assert_eq!(daemon.nbd_size(), 16 * MIB);
    let (mut before_grow, size) = Connection::open(&daemon.uri());
    assert_eq!(size, 16 * MIB);

    let done = larch_ok(&state, &["volume", "set", "vol0", "volsize=32M"]);
    assert!(done.contains("volsize 16M -> 32M"), "{done}");
    assert_eq!(
        daemon.nbd_size(),
        32 * MIB,
        "a new connection sees the new size"
    );
    assert_eq!(
        before_grow.ask("read", 16 * MIB, 4096),
        "error EINVAL",
        "an older connection keeps the size it was told"
    );
    let back = read_image(&daemon, &dir);
    assert_eq!(back.len() as u64, 32 * MIB);
    assert!(
        back[..image.len()] == image[..],
        "the data before the old end"
    );
    assert!(
        zeros(&back[image.len()..]),
        "the grown range reads as zeros"
    );
    // Data in the grown range too, and the cache device warm over all of it.
    write_image(&daemon, &dir, &pattern((32 * MIB) as usize, 9));
    warm_l2(&daemon, "32M");

    larch_refused(
        &state,
        &["volume", "set", "vol0", "volsize=8M"],
        &["smaller than volume vol0", "--force"],
    );
    assert_eq!(
        daemon.nbd_size(),
        32 * MIB,
        "a refused shrink changed the size"
    );
    let (mut before_shrink, _) = Connection::open(&daemon.uri());
    let done = larch_ok(&state, &["set", "vol0", "volsize=8M", "--force"]);
    assert!(done.contains("volsize 32M -> 8M"), "{done}");
    assert_eq!(daemon.nbd_size(), 8 * MIB);
    assert_eq!(before_shrink.ask("read", 12 * MIB, 4096), "error EINVAL");
    assert_eq!(before_shrink.ask("write", 12 * MIB, 4096), "error ENOSPC");
    assert_eq!(before_shrink.ask("read", 0, 4096), "ok data");
    assert_eq!(
        std::fs::metadata(state.join("vol0.img")).unwrap().len(),
        8 * MIB,
        "the backing file is cut"
    );

    larch_ok(&state, &["volume", "set", "vol0", "volsize=16M"]);
    let grown = read_image(&daemon, &dir);
    let kept = pattern((32 * MIB) as usize, 9);
    assert!(grown[..(8 * MIB) as usize] == kept[..(8 * MIB) as usize]);
    assert!(
        zeros(&grown[(8 * MIB) as usize..]),
        "the old tail came back"
    );
    daemon.stop();

    // The cache device is rebuilt: none of its copies of the old tail may serve.
    let daemon = Daemon::start(&state);
    assert_eq!(daemon.nbd_size(), 16 * MIB, "the size is kept in pool.json");
    let deadline = Instant::now() + Duration::from_secs(60);
    while daemon.status()["cache_devices"][0]["state"] != "online" {
        assert!(
            Instant::now() < deadline,
            "the cache device never came online"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = read_image(&daemon, &dir);
    assert!(after[..(8 * MIB) as usize] == kept[..(8 * MIB) as usize]);
    assert!(
        zeros(&after[(8 * MIB) as usize..]),
        "the old tail came back after a restart"
    );
    daemon.stop();
}

/// fio writes and verifies (crc32c, a FLUSH every 16 writes) while the volume's `sync`,
/// `logbias`, `primarycache` and `secondarycache` change over and over under it, with a
/// log device in the pool; every change is applied, and every byte verifies, then once
/// more from the store and the caches.
#[test]
fn properties_change_under_verified_fio_load() {
    require("fio");
    let dir = scratch("volprops-load");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    let log = dir.join("log.img");
    std::fs::File::create(&log)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    larch_ok(&state, &["log", "add", log.to_str().unwrap()]);
    // Each run writes the same blocks (fio's default random seed) and verifies them.
    let fio = |extra: &[&str]| {
        Command::new("fio")
            .args([
                "--name=verify",
                "--ioengine=nbd",
                &format!("--uri={}", daemon.uri()),
                "--rw=randwrite",
                "--bs=16k",
                "--size=12M",
                "--iodepth=8",
                "--fsync=16",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--verify_state_save=0",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let changes = [
        "sync=always",
        "logbias=throughput",
        "primarycache=none",
        "secondarycache=none",
        "sync=disabled",
        "primarycache=metadata",
        "logbias=latency",
        "sync=standard",
        "secondarycache=all",
        "primarycache=all",
    ];
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            for run in 0..4 {
                let out = fio(&[]);
                assert!(out.status.success(), "fio run {run}: {}", stderr(&out));
            }
        });
        let (mut applied, mut under_load) = (0, 0);
        while !writer.is_finished() || applied < changes.len() {
            let change = changes[applied % changes.len()];
            let running = !writer.is_finished();
            let done = larch_ok(&state, &["set", "vol0", change]);
            assert!(done.contains(&format!("volume vol0: {change}")), "{done}");
            applied += 1;
            under_load += usize::from(running && !writer.is_finished());
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.join().unwrap();
        assert!(
            under_load >= changes.len(),
            "{under_load} of {applied} changes under load"
        );
    });
    // The last change of the list leaves every property at its default.
    larch_ok(&state, &["set", "vol0", "sync=standard", "logbias=latency"]);
    larch_ok(
        &state,
        &["set", "vol0", "primarycache=all", "secondarycache=all"],
    );
    let props = &daemon.status()["volumes"][0];
    assert_eq!(props["sync"], "standard", "{props}");
    assert_eq!(props["logbias"], "latency", "{props}");
    assert_eq!(props["primarycache"], "all", "{props}");
    assert_eq!(props["secondarycache"], "all", "{props}");
    let check = fio(&["--verify_only"]);
    assert!(check.status.success(), "fio verify: {}", stderr(&check));
    daemon.stop();
}

/// `larch get vol0` lists the properties with their defaults and sources; bad input is refused with
/// its reason by the CLI and with 400/404/409 by the daemon, which keeps serving; the
/// properties survive a restart, and tunables keep working.
#[test]
fn get_bad_input_and_a_restart() {
    require("nbdinfo");
    let dir = scratch("volprops-get");
    let state = dir.join("pool");
    let daemon = Daemon::start(&state);
    let table = larch_ok(&state, &["get", "vol0"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let want: &[&[&str]] = &[
        &["NAME", "PROPERTY", "VALUE", "DEFAULT", "SOURCE"],
        &["vol0", "volsize", "16M", "-", "-"],
        &["vol0", "volblocksize", "16K", "-", "-"],
        &["vol0", "readonly", "off", "-", "-"],
        &["vol0", "primarycache", "all", "all", "default"],
        &["vol0", "secondarycache", "all", "all", "default"],
        &["vol0", "sync", "standard", "standard", "default"],
        &["vol0", "logbias", "latency", "latency", "default"],
    ];
    assert_eq!(rows, want, "{table}");
    larch_ok(
        &state,
        &["set", "vol0", "sync=always", "primarycache=metadata"],
    );
    let json: serde_json::Value = serde_json::from_str(&larch_ok(
        &state,
        &["get", "vol0", "sync", "logbias", "--json"],
    ))
    .unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"name": "vol0", "property": "sync", "value": "always", "default": "standard", "source": "local"},
            {"name": "vol0", "property": "logbias", "value": "latency", "default": "latency", "source": "default"},
        ])
    );
    let status = &daemon.status()["volumes"][0];
    assert_eq!(status["primarycache"], "metadata");
    assert_eq!(status["sync"], "always");

    for (args, words) in [
        (
            &["set", "vol0", "bogus=1"][..],
            &["unknown volume property \"bogus\""][..],
        ),
        (
            &["set", "vol0", "sync=maybe"],
            &["expected standard, always, disabled"],
        ),
        (&["set", "vol0", "volblocksize=8K"], &["read-only"]),
        (&["set", "nope", "sync=always"], &["no volume \"nope\""]),
        (
            &["volume", "set", "vol0", "volsize=1000"],
            &["not a multiple"],
        ),
        (
            &["get", "nope"],
            &["unknown tunable \"nope\"", "nor is it a volume"],
        ),
        (&["get", "vol0", "bogus"], &["unknown volume property"]),
        (
            &["set", "l2arc_write_max=1M", "--force"],
            &["--force is for a volume"],
        ),
    ] {
        larch_refused(&state, args, words);
    }
    let post = |body: &str| {
        http(
            &daemon.addr,
            "POST",
            "/admin/volume/set",
            Some(&daemon.token),
            body,
        )
    };
    assert_eq!(post("volume=vol0\nbogus=1\n").0, 400);
    assert_eq!(post("sync=always\n").0, 400);
    assert_eq!(post("volume=nope\nsync=always\n").0, 404);
    let (code, body) = post("volume=vol0\nvolsize=1M\n");
    assert_eq!(code, 409, "{body}");
    assert_eq!(
        http(
            &daemon.addr,
            "POST",
            "/admin/volume/set",
            None,
            "volume=vol0\nsync=always\n"
        )
        .0,
        403
    );
    let get = |path: &str| http(&daemon.addr, "GET", path, None, "").0;
    assert_eq!(get("/admin/volume/get?volume=nope"), 404);
    assert_eq!(get("/admin/volume/get?volume=vol0&property=nope"), 400);
    assert_eq!(get("/admin/volume/get?volume=vol0&bogus=1"), 400);
    assert_eq!(get("/admin/volume/get?volume=vol0&property=sync"), 200);
    // Still serving, unchanged.
    assert_eq!(daemon.nbd_size(), 16 * MIB);
    assert_eq!(daemon.status()["volumes"][0]["sync"], "always");
    // Tunables as before.
    assert_eq!(
        larch_ok(&state, &["set", "l2arc_write_max=16M"]),
        "l2arc_write_max=16M\n"
    );
    assert!(larch_ok(&state, &["get", "l2arc_write_max"]).contains("16M"));
    daemon.stop();

    let daemon = Daemon::start(&state);
    let status = &daemon.status()["volumes"][0];
    assert_eq!(
        (&status["sync"], &status["primarycache"]),
        (&"always".into(), &"metadata".into())
    );
    let table = larch_ok(&state, &["get", "vol0", "sync", "primarycache"]);
    assert!(
        table.contains("always") && table.contains("metadata"),
        "{table}"
    );
    assert_eq!(table.matches("local").count(), 2, "{table}");
    daemon.stop();
    // Stopped: `larch get` reads pool.json, and `larch set` writes it.
    larch_ok(&state, &["set", "vol0", "logbias=throughput"]);
    let table = larch_ok(&state, &["get", "vol0", "logbias"]);
    assert!(
        table.contains("throughput") && table.contains("local"),
        "{table}"
    );
}

/// A loop device over a file of `bytes`, detached when dropped; `None` (the test is
/// skipped, as nbd_clients' loop-device test is) where this user cannot make one.
struct LoopDevice(String);

impl LoopDevice {
    fn over(file: &Path) -> Option<LoopDevice> {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file)
            .output()
            .ok()?;
        let device = stdout(&out).trim().to_string();
        (out.status.success() && device.starts_with("/dev/")).then_some(LoopDevice(device))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

/// A volume on a block device grows up to the device's size and no further (the refusal
/// names both sizes); a shrink leaves the device's bytes past the end in place, and a grow
/// back over them reads zeros.
#[test]
fn a_volume_on_a_block_device_grows_to_the_device_s_size_at_most() {
    require("losetup");
    require("nbdcopy");
    let dir = scratch("volprops-bdev");
    let file = dir.join("device.img");
    let image = pattern((16 * MIB) as usize, 11);
    std::fs::write(&file, &image).unwrap();
    let Some(device) = LoopDevice::over(&file) else {
        println!(
            "SKIPPED a_volume_on_a_block_device_grows_to_the_device_s_size_at_most: losetup failed"
        );
        return;
    };
    let state = dir.join("pool");
    larch_ok(&state, &["pool", "create", "tank"]);
    larch_ok(&state, &["volume", "add", "vol0", "--backing", &device.0]);
    let daemon = Daemon::start(&state);
    assert_eq!(daemon.nbd_size(), 16 * MIB);
    larch_ok(&state, &["volume", "set", "vol0", "volsize=8M", "--force"]);
    assert_eq!(daemon.nbd_size(), 8 * MIB);
    let mut on_device = vec![0u8; (16 * MIB) as usize];
    std::fs::File::open(&device.0)
        .unwrap()
        .read_exact(&mut on_device)
        .unwrap();
    assert!(on_device == image, "a shrink wrote the device");
    larch_refused(
        &state,
        &["volume", "set", "vol0", "volsize=32M"],
        &["has 16777216 bytes", "33554432"],
    );
    larch_ok(&state, &["volume", "set", "vol0", "volsize=16M"]);
    let back = read_image(&daemon, &dir);
    assert!(back[..(8 * MIB) as usize] == image[..(8 * MIB) as usize]);
    assert!(zeros(&back[(8 * MIB) as usize..]), "the old tail came back");
    daemon.stop();
    drop(device);
}
