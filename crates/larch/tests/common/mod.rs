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
