//! Helpers shared by the integration-test binaries of `larch`.

/// Deterministic pseudo-random bytes (xorshift; a different image per seed), so failures
/// reproduce (not every test binary uses it).
#[allow(dead_code)]
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A new, empty scratch directory for one test: `larch-<what>-<pid>-<n>` in the temporary
/// directory (not every test binary uses it).
#[allow(dead_code)]
pub fn scratch(what: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "larch-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Fails the test unless `tool` is on the PATH (scripts/test installs the tools the tests
/// drive; a missing one is a failure, never a skip). Not every test binary uses it.
#[allow(dead_code)]
pub fn require(tool: &str) {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{tool} is missing: run scripts/test, which installs it"
    );
}

/// The Python the tests drive libnbd from (python3-libnbd). Not every test binary uses it.
#[allow(dead_code)]
pub const PYTHON: &str = "/usr/bin/python3";

/// Fails the test unless [`PYTHON`] can import libnbd's bindings (scripts/test installs
/// python3-libnbd). Not every test binary uses it.
#[allow(dead_code)]
pub fn require_python_nbd() {
    let ok = std::process::Command::new(PYTHON)
        .args(["-c", "import nbd"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{PYTHON} cannot import nbd: run scripts/test, or apt-get install -y python3-libnbd"
    );
}

/// One `GET` over HTTP/1.1 to `addr` (`HOST:PORT`) with `Connection: close`; the whole
/// answer, head included. Not every test binary uses it.
#[allow(dead_code)]
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

/// One HTTP/1.1 request to `addr` (`HOST:PORT`) with `Connection: close`, `headers` (whole
/// lines, each ending in CRLF) and `body`: the status code and the body of the answer. Not
/// every test binary uses it.
#[allow(dead_code)]
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let code = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The `larch` binary under test, as a command. Not every test binary uses it.
#[allow(dead_code)]
pub fn larch() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_larch"))
}

/// Runs `larch ARGS` and fails the test, with its stderr, unless it succeeds. Not every
/// test binary uses it.
#[allow(dead_code)]
pub fn run_ok(args: &[&str]) {
    let out = larch().args(args).output().expect("run larch");
    assert!(
        out.status.success(),
        "larch {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `larch serve` of the pool in a state directory, on `STATE/nbd.sock`; killed
/// if the test fails while it runs (a daemon left behind would keep the test binary's
/// output open, and the run would hang instead of failing). Not every test binary uses it.
#[allow(dead_code)]
pub struct Daemon {
    child: Option<std::process::Child>,
    socket: std::path::PathBuf,
    /// Where its standard error goes.
    stderr: std::path::PathBuf,
}

#[allow(dead_code)]
impl Daemon {
    /// Starts `larch serve --http HTTP` on the pool in `state`; returns once its NBD
    /// socket exists.
    pub fn start(state: &std::path::Path, http: &str) -> Daemon {
        Daemon::start_under(state, http, &[])
    }

    /// [`Daemon::start`] through a wrapper command (`WRAPPER... larch serve ...`, such as
    /// `prlimit --fsize=N`), which must exec larch.
    pub fn start_under(state: &std::path::Path, http: &str, wrapper: &[&str]) -> Daemon {
        use std::process::Stdio;
        use std::time::{Duration, Instant};
        let socket = state.join("nbd.sock");
        let _ = std::fs::remove_file(&socket);
        let larch_path = env!("CARGO_BIN_EXE_larch");
        let mut command = match wrapper.split_first() {
            None => larch(),
            Some((program, args)) => {
                let mut c = std::process::Command::new(program);
                c.args(args).arg(larch_path);
                c
            }
        };
        // Its standard error goes to STATE.stderr, beside the state directory, for a
        // failure to show ([`Daemon::stop`]).
        let stderr = std::fs::File::create(state.with_extension("stderr"))
            .expect("the daemon's stderr file");
        let child = command
            .args(["serve", "--http", http, "--state-dir"])
            .arg(state)
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start larch serve");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the NBD socket never appeared");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon {
            child: Some(child),
            socket,
            stderr: state.with_extension("stderr"),
        }
    }

    /// What it wrote to its standard error so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The NBD URI of the pool's volume `vol0`.
    pub fn uri(&self) -> String {
        format!("nbd+unix:///vol0?socket={}", self.socket.display())
    }

    /// SIGKILL: a crash.
    pub fn kill9(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and its exit status once it exited (its standard error printed when that
    /// is not success, for the failing test's output).
    pub fn stop(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait().expect("wait for larch serve");
        if !status.success() {
            eprintln!(
                "larch serve exited {status}; its stderr:\n{}",
                self.stderr()
            );
        }
        status
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
