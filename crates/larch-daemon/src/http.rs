//! The loopback HTTP endpoint of `larch serve`.
//!
//! Reading, open to any local client: `/metrics` (Prometheus text), `/arcstats` (kstat
//! style: name, type, value), `/status` (the JSON of `larch status --json`),
//! `/admin/ping` and `/admin/tunables`. Management, with the token of `daemon.json` in the
//! `X-Larch-Token` header: `POST /admin/set` (body: `NAME=VALUE` lines),
//! `POST /admin/cache/add` (`path=ABSOLUTE-PATH`, optional `force=1`),
//! `POST /admin/cache/remove` (`path=...`), `POST /admin/log/add` (`path=...`, optional
//! `force=1`) and `POST /admin/log/remove` (empty body). A change is checked, applied and saved before
//! the answer: 200 with what was done, or 400 (bad request), 403 (no token), 409 (refused
//! by the pool's state) or 500 (I/O) with the reason, as one line of text.
//!
//! A minimal HTTP/1.1 server: one request per connection, bounded head and body, a
//! deadline for the whole request. No input panics it: a request is parsed into a
//! `Request` or refused with a status. Nothing stops it either: when accepting fails
//! (out of file descriptors, most likely, which a burst of NBD clients can cause), it
//! waits before trying again, 10 ms doubling to 1 s, rather than retry at once and pin a
//! core until descriptors come back. What it shows of the pool comes from the pool's
//! report ([`crate::status`], [`crate::metrics`]); what it changes goes through
//! `larch_engine::manage`, as the CLI's edits of the files do.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use larch_engine::manage::{self, ManageError, Target};
use larch_engine::{Pool, tunables};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::api::{Ping, TOKEN_HEADER, TunablesAnswer};
use crate::status::StatusReport;
use crate::{history, metrics};

/// Longest request head accepted.
const MAX_HEAD_BYTES: usize = 8192;
/// Longest request body accepted (management requests are a few short lines).
const MAX_BODY_BYTES: usize = 64 << 10;
/// Time a client has to send its whole request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// After answering, how long and how much of what a client still sends is read and
/// dropped: closing a socket with unread bytes resets the connection, and the client
/// may lose the answer (a 413 or 431 sent before the request ended).
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 1 << 20;

/// What the handlers need of the daemon.
pub struct Context {
    /// The running pool.
    pub pool: Arc<Pool>,
    /// The token of `daemon.json`.
    pub token: String,
    /// The address the endpoint listens on, as `/status` reports it.
    pub addr: String,
}

/// An answer: status code, content type, body.
#[derive(Debug, PartialEq)]
struct Response {
    code: u16,
    kind: &'static str,
    body: String,
}

impl Response {
    fn text(code: u16, body: impl Into<String>) -> Response {
        let mut body = body.into();
        if !body.ends_with('\n') {
            body.push('\n');
        }
        Response {
            code,
            kind: "text/plain",
            body,
        }
    }

    fn json(value: &impl Serialize) -> Response {
        match serde_json::to_string(value) {
            Ok(body) => Response {
                code: 200,
                kind: "application/json",
                body,
            },
            Err(err) => Response::text(500, format!("encoding the answer: {err}")),
        }
    }

    fn reason(&self) -> &'static str {
        match self.code {
            200 => "OK",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            409 => "Conflict",
            413 => "Payload Too Large",
            431 => "Request Header Fields Too Large",
            501 => "Not Implemented",
            _ => "Internal Server Error",
        }
    }
}

impl From<ManageError> for Response {
    fn from(err: ManageError) -> Response {
        let code = match err {
            ManageError::Invalid(_) => 400,
            ManageError::Refused(_) => 409,
            ManageError::Io(_) => 500,
        };
        Response::text(code, err.to_string())
    }
}

/// A parsed request head.
#[derive(Debug, PartialEq)]
struct Request {
    method: String,
    /// The path, without the query.
    path: String,
    content_length: usize,
    token: Option<String>,
}

/// Parses a request head (without the blank line that ends it).
fn parse_head(head: &[u8]) -> Result<Request, Response> {
    let bad = |why: &str| Response::text(400, why);
    let text = std::str::from_utf8(head).map_err(|_| bad("the request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (first.next(), first.next(), first.next(), first.next())
    else {
        return Err(bad("expected METHOD PATH HTTP/1.1"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(bad("expected METHOD PATH HTTP/1.1"));
    }
    let mut request = Request {
        method: method.to_string(),
        path: target.split('?').next().unwrap_or("").to_string(),
        content_length: 0,
        token: None,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(bad("a header line without a colon"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            request.content_length = value
                .parse()
                .map_err(|_| bad("Content-Length is not a number"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Response::text(501, "only bodies with a Content-Length"));
        } else if name.eq_ignore_ascii_case(TOKEN_HEADER) {
            request.token = Some(value.to_string());
        }
    }
    if request.content_length > MAX_BODY_BYTES {
        return Err(Response::text(
            413,
            format!("bodies are at most {MAX_BODY_BYTES} bytes"),
        ));
    }
    Ok(request)
}

/// Reads one request: its head and its body.
async fn read_request(
    stream: &mut (impl AsyncRead + Unpin),
) -> Result<(Request, Vec<u8>), Response> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(Response::text(
                431,
                format!("request heads are at most {MAX_HEAD_BYTES} bytes"),
            ));
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(Response::text(400, "the request ended early")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let request = parse_head(&buf[..end])?;
    let mut body = buf.split_off(end + 4);
    while body.len() < request.content_length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(Response::text(400, "the body ended early")),
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    body.truncate(request.content_length);
    Ok((request, body))
}

/// Compares two tokens in time that does not depend on where they differ.
fn same_token(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

/// The `path=...` and `force=0|1` lines of a cache request.
fn cache_fields(lines: &[String], allow_force: bool) -> Result<(PathBuf, bool), ManageError> {
    let mut path = None;
    let mut force = false;
    for line in lines {
        match line.split_once('=') {
            Some(("path", p)) if !p.is_empty() => path = Some(PathBuf::from(p)),
            Some(("force", "0")) if allow_force => force = false,
            Some(("force", "1")) if allow_force => force = true,
            _ => {
                let expected = if allow_force {
                    "path=ABSOLUTE-PATH or force=0|1"
                } else {
                    "path=ABSOLUTE-PATH"
                };
                return Err(ManageError::Invalid(format!(
                    "{line:?}: expected {expected}"
                )));
            }
        }
    }
    let path = path.ok_or_else(|| ManageError::Invalid("no path=... line".to_string()))?;
    Ok((path, force))
}

/// Runs a change off the async workers (it does file and device I/O) and logs what a
/// cache change did, as the daemon's polling of `pool.json` does.
async fn change(
    ctx: &Arc<Context>,
    op: impl FnOnce(Target<'_>) -> Result<String, ManageError> + Send + 'static,
    logged: bool,
) -> Response {
    let ctx = Arc::clone(ctx);
    let joined = tokio::task::spawn_blocking(move || {
        let result = op(Target::Running(&ctx.pool));
        if let (Ok(line), true) = (&result, logged) {
            eprintln!("larch serve: {line}");
            history::append(&ctx.pool.state_dir, line);
        }
        result
    })
    .await;
    match joined {
        Ok(Ok(done)) => Response::text(200, done),
        Ok(Err(err)) => err.into(),
        Err(err) => Response::text(500, format!("the change failed: {err}")),
    }
}

/// A management request (the token checked already).
async fn manage(ctx: &Arc<Context>, path: &str, body: &[u8]) -> Response {
    let Ok(text) = std::str::from_utf8(body) else {
        return Response::text(400, "the body is not UTF-8");
    };
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    match path {
        "/admin/set" => {
            let set = move |target: Target<'_>| -> Result<String, ManageError> {
                let saved = manage::set_tunables(target, &lines)?;
                Ok(saved.iter().map(|(k, v)| format!("{k}={v}\n")).collect())
            };
            change(ctx, set, false).await
        }
        "/admin/cache/add" => match cache_fields(&lines, true) {
            Ok((path, force)) => {
                let add = move |target: Target<'_>| -> Result<String, ManageError> {
                    manage::add_cache_device(target, &path, force)
                };
                change(ctx, add, true).await
            }
            Err(err) => err.into(),
        },
        "/admin/cache/remove" => match cache_fields(&lines, false) {
            Ok((path, _)) => {
                let remove = move |target: Target<'_>| -> Result<String, ManageError> {
                    manage::remove_cache_device(target, &path)
                };
                change(ctx, remove, true).await
            }
            Err(err) => err.into(),
        },
        "/admin/log/add" => match cache_fields(&lines, true) {
            Ok((path, force)) => {
                let add = move |target: Target<'_>| -> Result<String, ManageError> {
                    manage::add_log_device(target, &path, force)
                };
                change(ctx, add, true).await
            }
            Err(err) => err.into(),
        },
        "/admin/log/remove" => {
            let remove = move |target: Target<'_>| -> Result<String, ManageError> {
                manage::remove_log_device(target)
            };
            change(ctx, remove, true).await
        }
        _ => Response::text(404, "not found"),
    }
}

async fn respond(ctx: &Arc<Context>, request: &Request, body: &[u8], peer: SocketAddr) -> Response {
    let pool = &ctx.pool;
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/metrics") => Response {
            code: 200,
            kind: "text/plain; version=0.0.4",
            body: metrics::prometheus(&pool.report()),
        },
        ("GET", "/arcstats") => Response::text(200, metrics::kstat(&pool.report())),
        ("GET", "/status") => Response::json(&StatusReport::of(pool, true, Some(ctx.addr.clone()))),
        ("GET", "/admin/ping") => Response::json(&Ping {
            pid: std::process::id(),
            pool: pool.config.name.clone(),
            pool_guid: pool.config.guid,
        }),
        ("GET", "/admin/tunables") => Response::json(&TunablesAnswer {
            pid: std::process::id(),
            tunables: tunables::values(&pool.engine.tunables),
        }),
        ("GET", "/") => Response::text(
            200,
            "larch: GET /metrics /arcstats /status /admin/ping /admin/tunables; \
             POST /admin/set /admin/cache/add /admin/cache/remove /admin/log/add /admin/log/remove",
        ),
        (
            "POST",
            path @ ("/admin/set"
            | "/admin/cache/add"
            | "/admin/cache/remove"
            | "/admin/log/add"
            | "/admin/log/remove"),
        ) => {
            if !peer.ip().is_loopback() {
                return Response::text(403, "management only from this machine");
            }
            match &request.token {
                Some(token) if same_token(token, &ctx.token) => manage(ctx, path, body).await,
                _ => Response::text(
                    403,
                    format!("changes need the token of daemon.json in {TOKEN_HEADER}"),
                ),
            }
        }
        (_, "/metrics" | "/arcstats" | "/status" | "/" | "/admin/ping" | "/admin/tunables")
        | (_, "/admin/set" | "/admin/cache/add" | "/admin/cache/remove") => {
            Response::text(405, format!("{} is not allowed here", request.method))
        }
        _ => Response::text(404, "not found"),
    }
}

async fn connection(
    ctx: Arc<Context>,
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    peer: SocketAddr,
) {
    let response = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut stream)).await {
        Ok(Ok((request, body))) => respond(&ctx, &request, &body, peer).await,
        Ok(Err(refused)) => refused,
        Err(_) => Response::text(408, "the request took too long"),
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.code,
        response.reason(),
        response.kind,
        response.body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(response.body.as_bytes()).await;
    let _ = stream.shutdown().await;
    let drain = async {
        let mut chunk = [0u8; 4096];
        let mut drained = 0;
        while drained < LINGER_BYTES {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// Where connections come from: the endpoint's TCP listener, or a stand-in in tests.
trait Acceptor {
    /// A connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// The next connection and its peer's address.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;
}

impl Acceptor for TcpListener {
    type Stream = TcpStream;

    fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }
}

/// Serves HTTP on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, ctx: Arc<Context>) {
    accept_loop(listener, |stream, peer| {
        tokio::spawn(connection(Arc::clone(&ctx), stream, peer));
    })
    .await
}

/// The wait after the first failed accept of a streak; it doubles with every failure.
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
/// The longest wait between two failed accepts.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Hands every connection `acceptor` accepts to `serve`, forever. A failed accept is
/// retried after a wait that starts at [`ACCEPT_BACKOFF_FIRST`] and doubles up to
/// [`ACCEPT_BACKOFF_MAX`], and starts over after a success: the usual failure is running
/// out of file descriptors, which retrying at once cannot cure and which would pin a core.
/// A streak of failures is logged once, when it starts and when it ends.
async fn accept_loop<A: Acceptor>(mut acceptor: A, mut serve: impl FnMut(A::Stream, SocketAddr)) {
    let mut failures = 0u64;
    let mut backoff = ACCEPT_BACKOFF_FIRST;
    loop {
        match acceptor.accept().await {
            Ok((stream, peer)) => {
                if failures > 0 {
                    eprintln!("larch serve: HTTP accepts again after {failures} failed attempts");
                    failures = 0;
                    backoff = ACCEPT_BACKOFF_FIRST;
                }
                serve(stream, peer);
            }
            Err(err) => {
                if failures == 0 {
                    eprintln!(
                        "larch serve: HTTP accept failed: {err} (retrying, at most once a second)"
                    );
                }
                failures += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::DemoPool;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::DuplexStream;
    use tokio::sync::mpsc;

    /// Attempts after which [`OutOfDescriptors`] stops answering: an accept loop that
    /// retries at once never lets the paused clock advance, and would spin forever.
    const SPIN_LIMIT: u64 = 100_000;

    /// An acceptor out of file descriptors: every attempt fails with EMFILE, counted,
    /// until a connection is handed to it.
    struct OutOfDescriptors {
        attempts: Arc<AtomicU64>,
        connections: mpsc::UnboundedReceiver<DuplexStream>,
    }

    impl Acceptor for OutOfDescriptors {
        type Stream = DuplexStream;

        async fn accept(&mut self) -> io::Result<(DuplexStream, SocketAddr)> {
            let attempt = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
            if let Ok(stream) = self.connections.try_recv() {
                return Ok((stream, SocketAddr::from(([127, 0, 0, 1], 40000))));
            }
            if attempt >= SPIN_LIMIT {
                std::future::pending::<()>().await;
            }
            tokio::task::yield_now().await;
            Err(io::Error::from_raw_os_error(libc::EMFILE))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn accept_errors_back_off_and_a_later_connection_is_served() {
        let demo = DemoPool::new("http-accept");
        let ctx = Arc::new(Context {
            pool: Arc::clone(&demo.pool),
            token: "token".to_string(),
            addr: "127.0.0.1:1".to_string(),
        });
        let attempts = Arc::new(AtomicU64::new(0));
        let (connect, connections) = mpsc::unbounded_channel();
        let acceptor = OutOfDescriptors {
            attempts: Arc::clone(&attempts),
            connections,
        };
        let server = tokio::spawn(accept_loop(acceptor, move |stream, peer| {
            tokio::spawn(connection(Arc::clone(&ctx), stream, peer));
        }));
        tokio::time::sleep(Duration::from_secs(10)).await;
        let failed = attempts.load(Ordering::Relaxed);
        assert!(
            (5..=40).contains(&failed),
            "{failed} accept attempts in 10 s out of file descriptors"
        );
        // Descriptors are back: the next connection is served.
        let (mut client, stream) = tokio::io::duplex(64 << 10);
        connect.send(stream).unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_string(&mut answer))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("GET /metrics"), "{answer}");
        // The success reset the back-off: the next failures are retried after 10, 20 and
        // 40 ms, not after a second.
        let before = attempts.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let retried = attempts.load(Ordering::Relaxed) - before;
        assert!(
            retried >= 3,
            "{retried} attempts in the 100 ms after a success"
        );
        server.abort();
    }

    #[test]
    fn heads_parse_and_bad_ones_are_refused_with_a_status() {
        let ok = parse_head(
            b"POST /admin/set?x=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 12\r\nx-larch-token:  abc ",
        )
        .unwrap();
        assert_eq!(
            ok,
            Request {
                method: "POST".to_string(),
                path: "/admin/set".to_string(),
                content_length: 12,
                token: Some("abc".to_string()),
            }
        );
        let cases: [(&[u8], u16); 9] = [
            (b"", 400),
            (b"GET /", 400),
            (b"GET / HTTP/1.1 extra", 400),
            (b"GET nothing HTTP/1.1", 400),
            (b"GET / SPDY/3", 400),
            (b"GET / HTTP/1.1\r\nno colon", 400),
            (b"POST / HTTP/1.1\r\nContent-Length: -1", 400),
            (b"POST / HTTP/1.1\r\nContent-Length: 99999999", 413),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked", 501),
        ];
        for (head, code) in cases {
            let refused = parse_head(head).unwrap_err();
            assert_eq!(refused.code, code, "{:?}", String::from_utf8_lossy(head));
        }
        assert_eq!(parse_head(&[0xff, 0xfe]).unwrap_err().code, 400);
    }

    #[test]
    fn cache_requests_need_a_path_and_nothing_unknown() {
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            cache_fields(&lines(&["path=/a b=c", "force=1"]), true).unwrap(),
            (PathBuf::from("/a b=c"), true)
        );
        for (bad, allow_force) in [
            (&["force=1"][..], true),
            (&["path=/x", "force=yes"], true),
            (&["path=/x", "force=1"], false),
            (&["path="], true),
            (&["nonsense"], true),
        ] {
            let err = cache_fields(&lines(bad), allow_force).unwrap_err();
            assert!(matches!(err, ManageError::Invalid(_)), "{bad:?}: {err}");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abd", "abc"));
        assert!(!same_token("ab", "abc"));
        assert!(!same_token("", "abc"));
    }
}
