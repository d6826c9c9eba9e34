//! How the CLI finds a running `larch serve` of a state directory and talks to it.
//!
//! The daemon records itself in `daemon.json` in its state directory when it starts (pid,
//! HTTP address, a random token) and removes the file when it exits cleanly. Only the
//! file's owner can read it, and the daemon refuses changes (`POST /admin/...`) without
//! the token, so changing a running pool takes the same permission as changing its files.
//!
//! A recorded daemon is live when its pid exists and it answers `GET /admin/ping` with that
//! pid. Otherwise (no file, a stale file after a crash, `--http off`) the CLI edits the
//! files, and a daemon that runs all the same picks them up within a second. Once a
//! request has been sent to a live daemon the CLI never falls back: the daemon may have
//! applied it.
//!
//! The client is blocking and minimal (one request per connection, `Connection: close`):
//! the CLI sends a request or two and exits, and it connects to loopback addresses only.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::api::{Ping, TOKEN_HEADER, TunablesAnswer};

/// Name of the daemon's record in the state directory.
pub const DAEMON_FILE: &str = "daemon.json";

/// Longest answer the CLI reads.
const MAX_ANSWER_BYTES: u64 = 16 << 20;

/// What `daemon.json` holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct DaemonRecord {
    /// The daemon's process id.
    pub pid: u32,
    /// Its loopback HTTP address; `None` with `--http off`.
    pub http: Option<String>,
    /// The secret that `POST /admin/...` requests must carry in [`TOKEN_HEADER`].
    pub token: String,
    /// When it started (seconds since the epoch).
    pub started: u64,
}

/// A fresh 128-bit token, in hex.
pub fn new_token() -> String {
    format!(
        "{:016x}{:016x}",
        larch_engine::new_guid(),
        larch_engine::new_guid()
    )
}

/// Writes `daemon.json` (owner-only, atomically and durably).
pub fn write_record(state_dir: &Path, record: &DaemonRecord) -> io::Result<()> {
    let text = serde_json::to_string_pretty(record)?;
    larch_engine::write_private_state_file(state_dir, DAEMON_FILE, text.as_bytes())
}

fn read_record(state_dir: &Path) -> Option<DaemonRecord> {
    let text = std::fs::read_to_string(state_dir.join(DAEMON_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Removes `daemon.json` if it still records this process (a daemon started later on the
/// same directory keeps its own record).
pub fn remove_record(state_dir: &Path) {
    if read_record(state_dir).is_some_and(|r| r.pid == std::process::id()) {
        let _ = std::fs::remove_file(state_dir.join(DAEMON_FILE));
    }
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A live daemon, ready for requests.
pub struct Daemon {
    addr: SocketAddr,
    token: String,
    /// Its process id.
    pub pid: u32,
}

/// The pid of a live daemon of a state directory, whether or not it serves HTTP.
pub fn running_pid(state_dir: &Path) -> Option<u32> {
    let record = read_record(state_dir)?;
    pid_alive(record.pid).then_some(record.pid)
}

/// The live daemon of a state directory, or `None` when none answers (see the module
/// documentation).
pub fn find(state_dir: &Path) -> Option<Daemon> {
    let record = read_record(state_dir)?;
    if !pid_alive(record.pid) {
        return None;
    }
    let addr: SocketAddr = record.http.as_deref()?.parse().ok()?;
    if !addr.ip().is_loopback() {
        return None;
    }
    let daemon = Daemon {
        addr,
        token: record.token,
        pid: record.pid,
    };
    let (code, body) = daemon.request("GET", "/admin/ping", "").ok()?;
    let answer: Ping = serde_json::from_str(&body).ok()?;
    (code == 200 && answer.pid == record.pid).then_some(daemon)
}

impl Daemon {
    /// One HTTP/1.1 request; returns the status code and the body.
    fn request(&self, method: &str, path: &str, body: &str) -> io::Result<(u16, String)> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
        // Adding a cache device formats it: give the daemon time.
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{TOKEN_HEADER}: {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        )?;
        let mut answer = Vec::new();
        stream.take(MAX_ANSWER_BYTES).read_to_end(&mut answer)?;
        parse_answer(&answer)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an HTTP answer"))
    }

    /// `GET path`: the body of a 200 answer.
    pub fn get(&self, path: &str) -> anyhow::Result<String> {
        let (code, body) = self
            .request("GET", path, "")
            .with_context(|| format!("asking the daemon (pid {}) for {path}", self.pid))?;
        if code != 200 {
            bail!(
                "the daemon (pid {}) answered {code}: {}",
                self.pid,
                body.trim()
            );
        }
        Ok(body)
    }

    /// The tunables in force in the daemon (`GET /admin/tunables`).
    pub fn tunables(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let answer: TunablesAnswer = serde_json::from_str(&self.get("/admin/tunables")?)
            .context("the daemon's /admin/tunables")?;
        Ok(answer.tunables)
    }

    /// `POST path` with one `KEY=VALUE` line per item: the body of a 200 answer, or the
    /// daemon's reason as the error.
    pub fn change(&self, path: &str, lines: &[String]) -> anyhow::Result<String> {
        if let Some(line) = lines.iter().find(|l| l.contains(['\n', '\r'])) {
            bail!("{line:?}: a line break cannot be sent to the daemon");
        }
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let (code, answer) = self
            .request("POST", path, &body)
            .with_context(|| format!("sending {path} to the daemon (pid {})", self.pid))?;
        match code {
            200 => Ok(answer),
            400..=499 => bail!("the daemon (pid {}) refused: {}", self.pid, answer.trim()),
            _ => bail!("the daemon (pid {}) failed: {}", self.pid, answer.trim()),
        }
    }
}

/// The status code and body of an HTTP/1.x answer.
fn parse_answer(answer: &[u8]) -> Option<(u16, String)> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let mut status = head.lines().next()?.split(' ');
    if !status.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = status.next()?.parse().ok()?;
    Some((
        code,
        String::from_utf8_lossy(&answer[end + 4..]).to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn answers_parse_and_garbage_does_not() {
        let ok = parse_answer(b"HTTP/1.1 409 Conflict\r\nContent-Length: 3\r\n\r\nno\n");
        assert_eq!(ok, Some((409, "no\n".to_string())));
        for bad in [
            &b""[..],
            b"HTTP/1.1 200 OK\r\n",
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.1 x\r\n\r\n",
        ] {
            assert_eq!(parse_answer(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_live_processes_count() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }

    #[test]
    fn the_record_is_owner_only_and_removed_only_by_its_daemon() {
        let dir = std::env::temp_dir().join(format!("larch-daemon-{}-record", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let record = DaemonRecord {
            pid: std::process::id(),
            http: None,
            token: new_token(),
            started: 1,
        };
        write_record(&dir, &record).unwrap();
        let path = dir.join(DAEMON_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
        assert_eq!(read_record(&dir).unwrap().token, record.token);
        // No HTTP address: the daemon runs, but the CLI edits the files.
        assert_eq!(running_pid(&dir), Some(std::process::id()));
        assert!(find(&dir).is_none());
        let other = DaemonRecord {
            pid: std::process::id() + 1,
            ..record
        };
        write_record(&dir, &other).unwrap();
        remove_record(&dir);
        assert!(path.exists(), "another daemon's record was removed");
        write_record(
            &dir,
            &DaemonRecord {
                pid: std::process::id(),
                ..other
            },
        )
        .unwrap();
        remove_record(&dir);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
