//! `larch serve` under systemd's protocols, without systemd itself: socket activation
//! through `systemd-socket-activate` (the NBD and HTTP sockets passed by name, served
//! instead of bound, the first connection waiting in the backlog while the pool opens),
//! readiness and stopping notifications on a `NOTIFY_SOCKET` the test reads, a clear
//! refusal of a passed descriptor that is not a socket, and the rule of bound addresses
//! (beyond loopback only with TLS) kept for passed ones.

mod common;
use common::{http_get, scratch};

use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn larch_bin() -> PathBuf {
    std::env::var_os("LARCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_larch")))
}

/// Fails the test unless `tool` is installed, naming the package that provides it.
fn require(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    assert!(
        found,
        "{tool} is missing: run scripts/test, or apt-get install -y {package}"
    );
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The messages the daemon sends to its `NOTIFY_SOCKET`, as the service manager reads them.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    fn bind(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        NotifySocket { socket, path }
    }

    /// Reads messages until one has the line `line`; returns everything read.
    fn wait_for(&self, line: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let message = String::from_utf8_lossy(&buf[..n]).to_string();
                seen.push_str(&message);
                seen.push('\n');
                if message.lines().any(|l| l == line) {
                    return seen;
                }
            }
        }
        panic!("no {line} on the notify socket within {within:?}; got: {seen:?}");
    }
}

/// A child process killed when the test ends, whether it passes or panics, so that no
/// server outlives a failed test.
struct KillOnDrop(Child);

impl KillOnDrop {
    /// Waits for the process to exit; its status and all it wrote on standard error.
    fn finish(&mut self) -> (std::process::ExitStatus, String) {
        let mut stderr = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            pipe.read_to_string(&mut stderr).unwrap();
        }
        (self.0.wait().unwrap(), stderr)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn socket_activation_serves_the_passed_sockets_and_tells_the_manager_when_ready() {
    require("systemd-socket-activate", "systemd");
    require("nbdinfo", "libnbd-bin");
    let dir = scratch("systemd-activate");
    let notify = NotifySocket::bind(&dir);
    let (nbd_port, http_port) = (free_port(), free_port());
    // Without --accept, systemd-socket-activate listens, and on the first connection execs
    // larch in its own process with LISTEN_PID, LISTEN_FDS=2 and LISTEN_FDNAMES=nbd:http.
    let mut child = KillOnDrop(
        Command::new("systemd-socket-activate")
            .arg(format!("--listen=127.0.0.1:{nbd_port}"))
            .arg(format!("--listen=127.0.0.1:{http_port}"))
            .arg("--fdname=nbd:http")
            .arg(format!("--setenv=NOTIFY_SOCKET={}", notify.path.display()))
            .arg(larch_bin())
            .args(["serve", "--state-dir"])
            .arg(dir.join("pool"))
            .args([
                "--demo-volume-size",
                "16M",
                "--demo-cache-size",
                "16M",
                "--demo-arc-max",
                "4M",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start systemd-socket-activate"),
    );

    // The first connection starts the daemon and waits in the backlog while it opens the
    // pool; nbdinfo sees the volume through the socket systemd-socket-activate bound.
    // Until that socket is bound, connections are refused and start nothing: try again.
    let uri = format!("nbd://127.0.0.1:{nbd_port}/vol0");
    let deadline = Instant::now() + Duration::from_secs(30);
    let info = loop {
        let info = Command::new("nbdinfo")
            .args(["--size", &uri])
            .output()
            .unwrap();
        if info.status.success() || Instant::now() > deadline {
            break info;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        info.status.success(),
        "nbdinfo {uri}: {}",
        String::from_utf8_lossy(&info.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&info.stdout).trim(), "16777216");

    let ready = notify.wait_for("READY=1", Duration::from_secs(30));
    assert!(ready.contains("STATUS=serving pool"), "{ready}");
    // The HTTP endpoint is on the passed socket, not on --http's default address.
    let metrics = http_get(&format!("127.0.0.1:{http_port}"), "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("larch_"), "{metrics}");

    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    notify.wait_for("STOPPING=1", Duration::from_secs(30));
    let (exit, stderr) = child.finish();
    assert!(exit.success(), "larch serve exited {exit:?}: {stderr}");
    assert!(
        stderr.contains(&format!(
            "NBD on tcp:127.0.0.1:{nbd_port} (passed by systemd)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("HTTP on the socket systemd passed"),
        "{stderr}"
    );
    assert!(stderr.contains("stopped cleanly"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_passed_descriptor_that_is_not_a_socket_is_refused_by_name() {
    let dir = scratch("systemd-not-socket");
    let plain = dir.join("plain");
    std::fs::write(&plain, b"not a socket").unwrap();
    // The shell's exec keeps its pid, so LISTEN_PID=$$ names larch; fd 3 is a file.
    let out = Command::new("sh")
        .arg("-c")
        .arg(concat!(
            "export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=nbd; ",
            r#"exec "$0" serve --state-dir "$1" 3<"$2""#
        ))
        .arg(larch_bin())
        .arg(dir.join("pool"))
        .arg(&plain)
        .output()
        .unwrap();
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the sockets systemd passed: fd 3 (nbd): not a socket (a regular file)"),
        "{stderr}"
    );
    // Refused before anything else: no pool was created.
    assert!(!dir.join("pool").exists(), "a pool was created");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_passed_socket_beyond_loopback_needs_tls_as_a_bound_one_does() {
    require("systemd-socket-activate", "systemd");
    require("nbdinfo", "libnbd-bin");
    let dir = scratch("systemd-remote");
    let port = free_port();
    let mut child = KillOnDrop(
        Command::new("systemd-socket-activate")
            .arg(format!("--listen=0.0.0.0:{port}"))
            .arg("--fdname=nbd")
            .arg(larch_bin())
            .args(["serve", "--http", "off", "--state-dir"])
            .arg(dir.join("pool"))
            .args(["--demo-volume-size", "16M", "--demo-cache-size", "16M"])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start systemd-socket-activate"),
    );
    // Connect until systemd-socket-activate has bound the socket and started larch, which
    // then refuses to serve it in plaintext and exits.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "port {port} never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (exit, stderr) = child.finish();
    assert_eq!(exit.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "NBD (passed by systemd) on 0.0.0.0:{port}, which is not a loopback address"
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
