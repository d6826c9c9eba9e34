//! The Analytics page in a real browser: a pool with an injected backing-store latency and
//! a cache device, served by the real binary, read by fio through its NBD engine, and the
//! page loaded in headless Chromium (Debian's `chromium`, driven by playwright-core from
//! npm: `tests/browser/analytics.mjs`, which holds the checks and says what they are).
//!
//! `scripts/test` installs Chromium, Node's playwright-core (`npm ci` in tests/browser)
//! and fio; when one is missing this test fails and says so (it never skips).

mod common;
use common::scratch;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The injected backing-store read latency, ms.
const BACKING_LATENCY_MS: u64 = 4;

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Fails the test, naming what to install, unless `found`.
fn require(found: bool, what: &str) {
    assert!(
        found,
        "{what} is missing: run scripts/test, which installs what the browser test needs"
    );
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn larch(state: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_larch"))
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "larch {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Kills a child process when dropped (the test may fail halfway).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_analytics_page_shows_the_pool_and_its_switch_works() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    require(
        Path::new(&chromium).exists(),
        "Chromium (Debian's chromium)",
    );
    require(on_path("node"), "node");
    require(on_path("fio"), "fio");
    require(
        browser_dir().join("node_modules/playwright-core").exists(),
        "playwright-core (npm ci in crates/larch/tests/browser)",
    );

    let dir = scratch("analytics-page");
    let state = dir.join("pool");
    let backing = dir.join("vol0.img");
    let cache = dir.join("cache0.img");
    larch(&state, &["pool", "create", "page", "--arc-max", "16M"]);
    let latency = BACKING_LATENCY_MS.to_string();
    larch(
        &state,
        &[
            "volume",
            "add",
            "vol0",
            "--backing",
            backing.to_str().unwrap(),
            "--size",
            "256M",
            "--volblocksize",
            "8K",
            "--read-latency-ms",
            &latency,
        ],
    );
    larch(
        &state,
        &["cache", "add", cache.to_str().unwrap(), "--size", "128M"],
    );
    let socket = dir.join("nbd.sock");
    let daemon = Reaped(
        Command::new(env!("CARGO_BIN_EXE_larch"))
            .args(["serve", "--state-dir"])
            .arg(&state)
            .arg("--socket")
            .arg(&socket)
            .args(["--http", "127.0.0.1:0"])
            .stderr(Stdio::null())
            .spawn()
            .expect("start larch serve"),
    );
    let pid = daemon.0.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let record = loop {
        let record = std::fs::read_to_string(state.join("daemon.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
        if let Some(r) = record
            && r["pid"] == pid
            && socket.exists()
        {
            break r;
        }
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    let addr = record["http"]
        .as_str()
        .expect("an HTTP address")
        .to_string();
    let token = record["page_token"]
        .as_str()
        .expect("the page's token")
        .to_string();
    assert_ne!(Some(token.as_str()), record["token"].as_str());
    // The page's address as a user gets it.
    let url = Command::new(env!("CARGO_BIN_EXE_larch"))
        .args(["analytics", "url", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(url.status.success(), "{url:?}");
    let url = String::from_utf8(url.stdout).unwrap().trim().to_string();
    assert_eq!(url, format!("http://{addr}/#token={token}"));

    // Random 8K reads over 96 MiB: more than the 16 MiB ARC, within ARC + the cache device,
    // so there are ARC hits, misses at the injected latency, and L2 hits once it is fed.
    let _fio = Reaped(
        Command::new("fio")
            .args([
                "--name=page",
                "--ioengine=nbd",
                &format!("--uri=nbd+unix:///vol0?socket={}", socket.display()),
                "--rw=randread",
                "--bs=8k",
                "--size=96M",
                "--numjobs=2",
                "--iodepth=4",
                "--time_based",
                "--runtime=600",
                "--norandommap",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fio"),
    );
    // Let the ARC fill and the feed write to the cache device.
    std::thread::sleep(Duration::from_secs(10));

    let shots = std::env::var("LARCH_PAGE_SHOTS").ok();
    let mut node = Command::new("node");
    node.current_dir(browser_dir())
        .arg("analytics.mjs")
        .args(["--page", &url])
        .args(["--latency-us", &(BACKING_LATENCY_MS * 1000).to_string()])
        .env("CHROMIUM", &chromium);
    if let Some(shots) = &shots {
        node.args(["--shots", shots]);
    }
    let out = node.output().expect("run node");
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the page failed its checks:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: serde_json::Value = serde_json::from_str(&report).expect("the report is JSON");
    assert_eq!(parsed["failures"], serde_json::json!([]));
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
