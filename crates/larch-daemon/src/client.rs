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
//! The client is `ureq`, blocking: the CLI sends a request or two and exits. It connects
//! to loopback addresses only (a record naming another address is no daemon of ours, and a
//! request to one is refused), takes no proxy from the environment and follows no
//! redirect, gives up on a connection after 2 s and on a request after 120 s, and reads
//! answers of at most [`MAX_ANSWER_BYTES`] unless the caller asks for more.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::api::{EventsAnswer, Ping, TOKEN_HEADER, TunablesAnswer, VolumePropertiesAnswer};

/// Name of the daemon's record in the state directory.
pub const DAEMON_FILE: &str = "daemon.json";

/// Longest answer the CLI reads, unless it asks for more ([`Daemon::get_with`]).
pub const MAX_ANSWER_BYTES: u64 = 16 << 20;
/// Time the CLI waits for a connection to the daemon.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time one request may take, answer included: adding a cache device formats it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// What `daemon.json` holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct DaemonRecord {
    /// The daemon's process id.
    pub pid: u32,
    /// Its loopback HTTP address; `None` with `--http off`.
    pub http: Option<String>,
    /// The secret that `POST /admin/...` requests must carry in [`TOKEN_HEADER`].
    pub token: String,
    /// The Analytics page's token: it may change tunables (`POST /api/v1/tunables`, the
    /// page's live switches) and nothing else, so that a page's session storage never
    /// holds the secret that adds, formats and removes devices. `None` in the records of
    /// daemons from before it (the page then gets the management token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
    /// When it started (seconds since the epoch).
    pub started: u64,
    /// The remote endpoint (`--http-remote`), if served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteEndpoint>,
}

/// The remote endpoint of a daemon, as `daemon.json` records it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoteEndpoint {
    /// Its base address, `https://ADDR:PORT/` (`http://` with `--allow-remote-plaintext`).
    pub url: String,
    /// The token its requests need (it lets one read, never change).
    pub view_token: String,
}

/// The remote endpoint of the live daemon of a state directory, if it serves one.
pub fn remote_endpoint(state_dir: &Path) -> Option<RemoteEndpoint> {
    let record = read_record(state_dir)?;
    if !pid_alive(record.pid) {
        return None;
    }
    record.remote
}

/// A fresh 128-bit token, in hex, from the kernel's random source. An error when that
/// cannot be read: a token guessed from the time and the pid (both published in the
/// status files) would let any local user change the pool, so the daemon does not start
/// without a real one.
pub fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| io::Error::new(e.kind(), format!("reading /dev/urandom for a token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
    /// The token the Analytics page gets (see [`DaemonRecord::page_token`]).
    page_token: Option<String>,
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
        page_token: record.page_token,
        pid: record.pid,
    };
    let (code, body) = daemon
        .request("/admin/ping", &[], None, MAX_ANSWER_BYTES)
        .ok()?;
    let answer: Ping = serde_json::from_str(&body).ok()?;
    (code == 200 && answer.pid == record.pid).then_some(daemon)
}

impl Daemon {
    /// The Analytics page's address, with the page's token (which may change tunables
    /// only) in its fragment when `with_token`: the page keeps it for changes (in the
    /// tab's session storage, and removes it from the address bar), and a browser never
    /// sends a fragment to a server.
    pub fn page_url(&self, with_token: bool) -> String {
        if with_token {
            let token = self.page_token.as_deref().unwrap_or(&self.token);
            format!("http://{}/#token={token}", self.addr)
        } else {
            format!("http://{}/", self.addr)
        }
    }

    /// The HTTP client of one request: loopback only, bounded in time, and nothing taken
    /// from the environment.
    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_TIMEOUT))
            // Callers turn the status codes into their own errors (a 409's reason is the
            // answer's body).
            .http_status_as_error(false)
            // A proxy named by the environment must never see the token, and the request
            // must reach the daemon's own address, not another host a redirect names.
            .proxy(None)
            .max_redirects(0)
            .build()
            .into()
    }

    /// One request, `GET` without a body and `POST` with one: the status code and at most
    /// `max_bytes` of the answer's body (a longer answer is an error).
    fn request(
        &self,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&str>,
        max_bytes: u64,
    ) -> anyhow::Result<(u16, String)> {
        if !self.addr.ip().is_loopback() {
            bail!(
                "refusing to connect to {}: the daemon's HTTP endpoint is on loopback addresses only",
                self.addr
            );
        }
        let url = format!("http://{}{path}", self.addr);
        let agent = Self::agent();
        // The token goes with changes only: reads need none, and a `GET /admin/ping` may
        // be answered by whatever now listens on a dead daemon's port.
        let answer = match body {
            None => agent.get(&url).query_pairs(query.iter().copied()).call(),
            Some(body) => agent
                .post(&url)
                .header(TOKEN_HEADER, &self.token)
                .query_pairs(query.iter().copied())
                .content_type("text/plain")
                .send(body),
        };
        let mut answer = answer?;
        let code = answer.status().as_u16();
        let text = answer
            .body_mut()
            .with_config()
            .limit(max_bytes)
            .lossy_utf8(true)
            .read_to_string()?;
        Ok((code, text))
    }

    /// `GET path`: the body of a 200 answer.
    pub fn get(&self, path: &str) -> anyhow::Result<String> {
        self.get_with(path, &[], MAX_ANSWER_BYTES)
    }

    /// `GET path?query` (the values percent-encoded): the body of a 200 answer of at most
    /// `max_bytes`, or the daemon's answer as the error.
    pub fn get_with(
        &self,
        path: &str,
        query: &[(&str, &str)],
        max_bytes: u64,
    ) -> anyhow::Result<String> {
        let (code, body) = self
            .request(path, query, None, max_bytes)
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

    /// The pool's events after `after` (`GET /api/v1/events`; all kept for 0).
    pub fn events(&self, after: u64) -> anyhow::Result<EventsAnswer> {
        let after = after.to_string();
        let body = self.get_with("/api/v1/events", &[("after", &after)], MAX_ANSWER_BYTES)?;
        serde_json::from_str(&body).context("the daemon's /api/v1/events")
    }

    /// The tunables in force in the daemon (`GET /admin/tunables`).
    pub fn tunables(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let answer: TunablesAnswer = serde_json::from_str(&self.get("/admin/tunables")?)
            .context("the daemon's /admin/tunables")?;
        Ok(answer.tunables)
    }

    /// The properties `names` (all when empty) of volume `name` in the daemon
    /// (`GET /admin/volume/get`); the daemon's answer as the error (no such volume, an
    /// unknown property).
    pub fn volume_properties(
        &self,
        name: &str,
        names: &[String],
    ) -> anyhow::Result<Vec<larch_engine::manage::VolumeProperty>> {
        let list = names.join(",");
        let mut query = vec![("volume", name)];
        if !list.is_empty() {
            query.push(("property", list.as_str()));
        }
        let body = self.get_with("/admin/volume/get", &query, MAX_ANSWER_BYTES)?;
        let answer: VolumePropertiesAnswer =
            serde_json::from_str(&body).context("the daemon's /admin/volume/get")?;
        Ok(answer.properties)
    }

    /// `POST path` with one `KEY=VALUE` line per item: the body of a 200 answer, or the
    /// daemon's reason as the error.
    pub fn change(&self, path: &str, lines: &[String]) -> anyhow::Result<String> {
        if let Some(line) = lines.iter().find(|l| l.contains(['\n', '\r'])) {
            bail!("{line:?}: a line break cannot be sent to the daemon");
        }
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let (code, answer) = self
            .request(path, &[], Some(&body), MAX_ANSWER_BYTES)
            .with_context(|| format!("sending {path} to the daemon (pid {})", self.pid))?;
        match code {
            200 => Ok(answer),
            _ => Err(NotDone {
                pid: self.pid,
                refused: (400..=499).contains(&code),
                answer: answer.trim().to_string(),
            }
            .into()),
        }
    }
}

/// The daemon's answer to a change it did not make (any status but 200): unlike an error
/// on the way, it says that the daemon took nothing into use (a file the command created
/// for the change may go again).
#[derive(Debug)]
pub struct NotDone {
    /// The daemon's pid.
    pub pid: u32,
    /// Refused (4xx) rather than failed (5xx).
    pub refused: bool,
    /// Its reason.
    pub answer: String,
}

impl std::fmt::Display for NotDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.refused { "refused" } else { "failed" };
        write!(f, "the daemon (pid {}) {what}: {}", self.pid, self.answer)
    }
}

impl std::error::Error for NotDone {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::os::unix::fs::PermissionsExt;
    use std::thread::JoinHandle;

    /// A one-thread HTTP server on a loopback port that answers each connection with the
    /// next of `answers` (raw bytes) and hands back the request heads it read.
    fn canned_server(answers: Vec<&'static [u8]>) -> (SocketAddr, JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let mut heads = Vec::new();
            for answer in answers {
                let (mut stream, _) = listener.accept().unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
                    request.push(byte[0]);
                }
                heads.push(String::from_utf8_lossy(&request).to_lowercase());
                stream.write_all(answer).unwrap();
            }
            heads
        });
        (addr, server)
    }

    #[test]
    fn answers_become_bodies_or_the_daemons_reasons_and_garbage_an_error() {
        let (addr, server) = canned_server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nfine\r\n",
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\nConnection: close\r\n\r\nno token\n",
            b"HTTP/1.1 409 Conflict\r\nContent-Length: 3\r\nConnection: close\r\n\r\nno\n",
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\nConnection: close\r\n\r\n01234567890123456789",
        ]);
        let daemon = Daemon {
            addr,
            token: "t0ken".to_string(),
            page_token: None,
            pid: 7,
        };
        assert_eq!(
            daemon
                .get_with("/x", &[("ids", "arc/hits,a b")], 100)
                .unwrap(),
            "fine\r\n"
        );
        let refused = daemon.get("/admin/tunables").unwrap_err().to_string();
        assert_eq!(refused, "the daemon (pid 7) answered 403: no token");
        let lines = ["a=1".to_string()];
        let refused = daemon.change("/admin/set", &lines).unwrap_err().to_string();
        assert_eq!(refused, "the daemon (pid 7) refused: no");
        let garbage = format!("{:#}", daemon.get("/status").unwrap_err());
        assert!(
            garbage.starts_with("asking the daemon (pid 7) for /status: "),
            "{garbage}"
        );
        let long = format!("{:#}", daemon.get_with("/metrics", &[], 10).unwrap_err());
        assert!(
            long.contains("asking the daemon (pid 7) for /metrics"),
            "{long}"
        );
        let heads = server.join().unwrap();
        assert!(
            heads[0].starts_with("get /x?ids=arc%2fhits%2ca+b http/1.1\r\n")
                || heads[0].starts_with("get /x?ids=arc%2fhits%2ca%20b http/1.1\r\n"),
            "{heads:?}"
        );
        // The token goes with the change only, never with a read.
        for head in &heads {
            let post = head.starts_with("post ");
            assert_eq!(head.contains("x-larch-token: t0ken\r\n"), post, "{head}");
        }
        assert!(
            heads[2].starts_with("post /admin/set http/1.1"),
            "{heads:?}"
        );
    }

    #[test]
    fn only_loopback_addresses_are_asked() {
        // 0.0.0.0 is not a loopback address, but a connection to it would reach this
        // machine: even a broken check sends nothing elsewhere.
        let daemon = Daemon {
            addr: "0.0.0.0:9".parse().unwrap(),
            token: String::new(),
            page_token: None,
            pid: 7,
        };
        let refused = format!("{:#}", daemon.get("/status").unwrap_err());
        assert!(
            refused.contains("refusing to connect to 0.0.0.0:9: the daemon's HTTP endpoint is on loopback addresses only"),
            "{refused}"
        );
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
            token: new_token().unwrap(),
            page_token: Some(new_token().unwrap()),
            started: 1,
            remote: None,
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
