//! The loopback HTTP endpoint of `larch serve`, on axum and hyper (the tokio runtime the
//! NBD server runs on).
//!
//! Reading, open to any local client: `/` (the Analytics page, with `/app.js` and
//! `/style.css`, compiled into the binary), `/metrics` (Prometheus text), `/arcstats`
//! (kstat style), `/status` (the JSON of `larch status --json`), `/admin/ping`,
//! `/admin/tunables`, the history's JSON API under `/api/v1/` (`docs/analytics.md`), and
//! the pool's events, `/api/v1/events` (`larch events`).
//! `GET /admin/volume/get?volume=NAME[&property=P,Q]` answers a volume's properties (JSON,
//! `larch get VOLUME`).
//! Management, with the token of `daemon.json` in the `X-Larch-Token` header and from a
//! loopback peer only: `POST /admin/set` (body: `NAME=VALUE` lines), `/admin/cache/add`
//! (`path=ABSOLUTE-PATH`, optional `force=1`), `/admin/cache/remove`, `/admin/log/add`,
//! `/admin/log/remove`, `/admin/volume/set` (`volume=NAME`, optional `force=1`, then
//! `PROPERTY=VALUE` lines), and `POST /api/v1/tunables` (JSON; it also takes the Analytics
//! page's own token, `page_token`, which changes nothing else). A change is checked, applied
//! and saved before the answer: 200 with what was done, or 400 (bad request), 403 (no
//! token), 404 (no such volume), 409 (refused by the pool's state) or 500 (I/O) with the
//! reason.
//!
//! The remote endpoint (`--http-remote`, [`serve_remote`], in `http/remote.rs`) serves the
//! same routes to other machines, over TLS, `GET` and `HEAD` only, every request with its
//! own view token ([`RemoteAuth`]).
//!
//! The routes, their handlers and the limits are one file because every handler is a few
//! lines over the same `Context` and error helpers, with the tests of the accept loop and
//! the bounds at the end.
//!
//! No request stops or stalls the daemon: a head must arrive within
//! [`REQUEST_TIMEOUT`] and fit in 16 KiB (hyper's limits), a body within the same time
//! and [`MAX_BODY_BYTES`], the peer must take 64 KiB of a waiting answer within each
//! [`WRITE_STALL_TIMEOUT`], answers built from the history are built and sent at most
//! [`MAX_HISTORY_ANSWERS`] at a time, and at most [`MAX_CONNECTIONS`] connections are served at once
//! by each endpoint (more wait in the kernel's backlog), of which the remote endpoint serves
//! at most [`MAX_CONNECTIONS_PER_ADDRESS`] from one address (more are closed at accept). When accepting fails (out of file descriptors,
//! most likely, which a burst of NBD clients can cause), the server waits before trying
//! again, 10 ms doubling to 1 s, rather than retry at once and pin a core.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use larch_engine::manage::{self, ManageError, Target};
use larch_engine::{Pool, tunables};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};

use crate::api::{EventsAnswer, Ping, TOKEN_HEADER, TunablesAnswer, VolumePropertiesAnswer};
use crate::page::{APP_JS, CHART_JS, INDEX_HTML, STYLE_CSS};
use crate::recorder::{MINUTES_KEPT, QueryError, Range, Recorder, SECONDS_KEPT};
use crate::status::StatusReport;
use crate::{history, metrics};

mod remote;
mod stall;
pub use remote::{MAX_CONNECTIONS_PER_ADDRESS, RemoteAuth, serve_remote};
pub use stall::WRITE_STALL_TIMEOUT;

/// Longest request body accepted (management requests are a few short lines).
pub const MAX_BODY_BYTES: usize = 64 << 10;
/// Time a client has to send a request's head, and then its body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once, by each endpoint.
pub const MAX_CONNECTIONS: usize = 256;
/// `/api/v1/live` streams open at once on each endpoint: a stream holds its connection for
/// as long as its page is open, and pages that never close must not take every connection.
pub const MAX_LIVE_STREAMS: usize = 32;

/// What the handlers need of the daemon.
pub struct Context {
    /// The running pool.
    pub pool: Arc<Pool>,
    /// The token of `daemon.json`.
    pub token: String,
    /// The Analytics page's token (`daemon.json`'s `page_token`): accepted by
    /// `POST /api/v1/tunables` only.
    pub page_token: String,
    /// The address the endpoint listens on, as `/status` reports it.
    pub addr: String,
    /// The pool's history.
    pub recorder: Arc<Mutex<Recorder>>,
    /// Each new second of the history, as `/api/v1/live` sends it (JSON).
    pub live: broadcast::Sender<Arc<str>>,
    /// Places for answers built from the history ([`MAX_HISTORY_ANSWERS`]).
    pub answers: Arc<Semaphore>,
}

/// Answers built from the history (`/api/v1/series`, `/heatmap`, `/export`) that are
/// built or being sent at once, across both endpoints. Each is whole in memory until
/// sent, and a long range's is several times the history's own size (its JSON or CSV
/// text), while any local client may ask and an endpoint serves 256 connections: without
/// a bound, clients asking together could make the daemon hold hundreds of copies. The
/// others wait for a place (the page asks for one range at a time).
pub const MAX_HISTORY_ANSWERS: usize = 2;

/// The places for [`Context::answers`].
pub fn history_answers() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_HISTORY_ANSWERS))
}

/// A place for one answer built from the history; `None` once the daemon is closing them.
async fn answer_place(ctx: &Context) -> Option<OwnedSemaphorePermit> {
    Arc::clone(&ctx.answers).acquire_owned().await.ok()
}

/// An answer's body that keeps its place until it has been sent (or the connection
/// dropped it): handed to the connection in 64 KiB pieces of the one buffer, with its
/// length known (a `Content-Length`, not a chunked body).
fn placed_body(bytes: Bytes, place: OwnedSemaphorePermit) -> Body {
    Body::new(PlacedBody {
        rest: bytes,
        _place: place,
    })
}

/// See [`placed_body`].
struct PlacedBody {
    rest: Bytes,
    _place: OwnedSemaphorePermit,
}

impl hyper::body::Body for PlacedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        const PIECE_BYTES: usize = 64 << 10;
        let this = self.get_mut();
        if this.rest.is_empty() {
            return std::task::Poll::Ready(None);
        }
        let piece = this.rest.split_to(PIECE_BYTES.min(this.rest.len()));
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// A JSON answer that keeps its place ([`placed_body`]).
fn placed_json(value: &impl Serialize, place: OwnedSemaphorePermit) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            placed_body(Bytes::from(body), place),
        )
            .into_response(),
        Err(err) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the answer: {err}"),
        ),
    }
}

/// The answer when no place can be had (the daemon is stopping).
fn no_place() -> Response {
    text(StatusCode::SERVICE_UNAVAILABLE, "the daemon is stopping")
}

/// The `/api/v1/live` streams one endpoint has open (at most [`MAX_LIVE_STREAMS`]), in
/// each router's own extension rather than the shared [`Context`]: the loopback and the
/// remote endpoint count apart, so that whoever holds the remote view token cannot take
/// every stream from the Analytics page on this machine.
#[derive(Default)]
struct LiveSlots(AtomicUsize);

/// The peer of a connection.
#[derive(Clone, Copy)]
struct Peer(SocketAddr);

fn text(code: StatusCode, body: impl Into<String>) -> Response {
    let mut body = body.into();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn json(value: &impl Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(err) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the answer: {err}"),
        ),
    }
}

/// A JSON error of the API: `{"error": ..., "parameter": ...}`.
fn api_error(code: StatusCode, error: String, parameter: Option<&str>) -> Response {
    #[derive(Serialize)]
    struct ApiError<'a> {
        error: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parameter: Option<&'a str>,
    }
    let body = serde_json::to_string(&ApiError { error, parameter }).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A refused API request, before it becomes its answer.
struct Refusal {
    code: StatusCode,
    error: String,
    parameter: Option<String>,
}

impl Refusal {
    fn bad(error: impl Into<String>, parameter: &str) -> Refusal {
        Refusal {
            code: StatusCode::BAD_REQUEST,
            error: error.into(),
            parameter: Some(parameter.to_string()),
        }
    }

    fn answer(self) -> Response {
        api_error(self.code, self.error, self.parameter.as_deref())
    }
}

impl From<QueryError> for Refusal {
    fn from(err: QueryError) -> Refusal {
        Refusal::bad(err.why, err.parameter)
    }
}

fn manage_code(err: &ManageError) -> StatusCode {
    match err {
        ManageError::Invalid(_) => StatusCode::BAD_REQUEST,
        ManageError::NotFound(_) => StatusCode::NOT_FOUND,
        ManageError::Refused(_) => StatusCode::CONFLICT,
        ManageError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
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

/// The lines of a volume request: `volume=NAME` (first), `force=0|1`, and the
/// `PROPERTY=VALUE` assignments.
fn volume_fields(lines: &[String]) -> Result<(String, bool, Vec<String>), ManageError> {
    let mut lines = lines.iter();
    let name = match lines.next().and_then(|l| l.strip_prefix("volume=")) {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => {
            return Err(ManageError::Invalid(
                "the first line must be volume=NAME".to_string(),
            ));
        }
    };
    let mut force = false;
    let mut assignments = Vec::new();
    for line in lines {
        match line.as_str() {
            "force=0" => force = false,
            "force=1" => force = true,
            _ => assignments.push(line.clone()),
        }
    }
    Ok((name, force, assignments))
}

/// Whether a request may change the pool: from this machine, with the management token
/// (or, for a tunable, the page's token when `page_may` is set).
fn guard(ctx: &Context, peer: Peer, headers: &HeaderMap, page_may: bool) -> Result<(), Forbidden> {
    if !peer.0.ip().is_loopback() {
        return Err(Forbidden::NotLocal);
    }
    match headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()) {
        Some(token) if same_token(token.trim(), &ctx.token) => Ok(()),
        Some(token) if page_may && same_token(token.trim(), &ctx.page_token) => Ok(()),
        Some(token) if same_token(token.trim(), &ctx.page_token) => Err(Forbidden::PageToken),
        _ => Err(Forbidden::NoToken),
    }
}

/// Why [`guard`] refuses a change (the answer is a 403 saying so).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
enum Forbidden {
    /// Not from a loopback address.
    #[error("management only from this machine")]
    NotLocal,
    /// The page's token, for a change it may not make.
    #[error(
        "the Analytics page's token may change tunables only; this change needs the token \
         of daemon.json in {TOKEN_HEADER}"
    )]
    PageToken,
    /// No token, or a wrong one.
    #[error("changes need the token of daemon.json in {TOKEN_HEADER}")]
    NoToken,
}

/// Reads a request body within [`REQUEST_TIMEOUT`] and [`MAX_BODY_BYTES`].
async fn read_body(body: Body) -> Result<Vec<u8>, Response> {
    match tokio::time::timeout(REQUEST_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(bytes)) => Ok(bytes.to_vec()),
        Ok(Err(_)) => Err(text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("bodies are at most {MAX_BODY_BYTES} bytes"),
        )),
        Err(_) => Err(text(StatusCode::REQUEST_TIMEOUT, "the body took too long")),
    }
}

/// Runs a change off the async workers (it does file and device I/O) and logs what a
/// device or volume change did (on standard error and in the history), as the daemon's
/// polling of `pool.json` does.
async fn change(
    ctx: &Arc<Context>,
    op: impl FnOnce(Target<'_>) -> Result<String, ManageError> + Send + 'static,
    logged: bool,
) -> Result<String, (StatusCode, String)> {
    let ctx = Arc::clone(ctx);
    let joined = tokio::task::spawn_blocking(move || {
        let result = op(Target::Running(&ctx.pool));
        if let (Ok(done), true) = (&result, logged) {
            // One history line per step (a volume's change may report several).
            for line in done.lines() {
                eprintln!("larch serve: {line}");
                history::append(&ctx.pool.state_dir, line);
            }
        }
        result
    })
    .await;
    match joined {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(err)) => Err((manage_code(&err), err.to_string())),
        Err(err) => Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the change failed: {err}"),
        )),
    }
}

/// `POST /admin/...`: a management request in `NAME=VALUE` lines.
async fn admin(
    ctx: Arc<Context>,
    peer: Peer,
    path: &'static str,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(why) = guard(&ctx, peer, &headers, false) {
        return text(StatusCode::FORBIDDEN, why.to_string());
    }
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let Ok(body) = String::from_utf8(body) else {
        return text(StatusCode::BAD_REQUEST, "the body is not UTF-8");
    };
    let lines: Vec<String> = body
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let result = match path {
        "/admin/set" => {
            let set = move |target: Target<'_>| -> Result<String, ManageError> {
                let saved = manage::set_tunables(target, &lines)?;
                Ok(saved.iter().map(|(k, v)| format!("{k}={v}\n")).collect())
            };
            change(&ctx, set, false).await
        }
        "/admin/cache/add" => match cache_fields(&lines, true) {
            Ok((path, force)) => {
                change(
                    &ctx,
                    move |t: Target<'_>| manage::add_cache_device(t, &path, force),
                    true,
                )
                .await
            }
            Err(err) => Err((manage_code(&err), err.to_string())),
        },
        "/admin/cache/remove" => match cache_fields(&lines, false) {
            Ok((path, _)) => {
                change(
                    &ctx,
                    move |t: Target<'_>| manage::remove_cache_device(t, &path),
                    true,
                )
                .await
            }
            Err(err) => Err((manage_code(&err), err.to_string())),
        },
        "/admin/volume/set" => match volume_fields(&lines) {
            Ok((name, force, assignments)) => {
                let set = move |t: Target<'_>| {
                    manage::set_volume_properties(t, &name, &assignments, force)
                };
                change(&ctx, set, true).await
            }
            Err(err) => Err((manage_code(&err), err.to_string())),
        },
        "/admin/log/add" => match cache_fields(&lines, true) {
            Ok((path, force)) => {
                change(
                    &ctx,
                    move |t: Target<'_>| manage::add_log_device(t, &path, force),
                    true,
                )
                .await
            }
            Err(err) => Err((manage_code(&err), err.to_string())),
        },
        _ => change(&ctx, manage::remove_log_device, true).await,
    };
    match result {
        Ok(done) => text(StatusCode::OK, done),
        Err((code, why)) => text(code, why),
    }
}

/// `GET /admin/volume/get?volume=NAME[&property=P,Q]`: the volume's properties.
async fn volume_get(ctx: Arc<Context>, params: HashMap<String, String>) -> Response {
    if let Some(unknown) = params
        .keys()
        .find(|k| !["volume", "property"].contains(&k.as_str()))
    {
        return text(
            StatusCode::BAD_REQUEST,
            format!("unknown parameter {unknown:?} (known: volume, property)"),
        );
    }
    let Some(name) = params.get("volume").filter(|n| !n.is_empty()).cloned() else {
        return text(StatusCode::BAD_REQUEST, "give volume=NAME");
    };
    let names: Vec<String> = (params.get("property").map(String::as_str).unwrap_or(""))
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    // Reads pool.json (and a stopped volume's backing file): off the async workers.
    let answer = tokio::task::spawn_blocking(move || {
        manage::volume_properties(Target::Running(&ctx.pool), &name, &names)
    })
    .await;
    match answer {
        Ok(Ok(properties)) => json(&VolumePropertiesAnswer {
            pid: std::process::id(),
            properties,
        }),
        Ok(Err(err)) => text(manage_code(&err), err.to_string()),
        Err(err) => text(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

/// One tunable as `/api/v1/tunables` lists it.
#[derive(Serialize)]
struct TunableView {
    name: &'static str,
    value: u64,
    text: String,
    default: String,
    kind: String,
    help: &'static str,
}

fn tunable_views(pool: &Pool) -> Vec<TunableView> {
    let values = tunables::values(&pool.engine.tunables);
    tunables::TUNABLES
        .iter()
        .map(|def| {
            let value = values.get(def.name).copied().unwrap_or(0);
            TunableView {
                name: def.name,
                value,
                text: tunables::format_value(def.name, value),
                default: tunables::default_text(def),
                kind: format!("{:?}", def.kind).to_lowercase(),
                help: def.help,
            }
        })
        .collect()
}

/// The body of `POST /api/v1/tunables`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetTunable {
    name: String,
    value: String,
}

async fn set_tunable(ctx: Arc<Context>, peer: Peer, headers: HeaderMap, body: Body) -> Response {
    if let Err(why) = guard(&ctx, peer, &headers, true) {
        return api_error(StatusCode::FORBIDDEN, why.to_string(), None);
    }
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let request: SetTunable = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(err) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"name\": ..., \"value\": ...}}: {err}"),
                Some("body"),
            );
        }
    };
    let line = format!("{}={}", request.name, request.value);
    if line.contains(['\n', '\r']) {
        return api_error(
            StatusCode::BAD_REQUEST,
            "a line break in the value".to_string(),
            Some("value"),
        );
    }
    let set = move |target: Target<'_>| -> Result<String, ManageError> {
        manage::set_tunables(target, &[line]).map(|_| String::new())
    };
    match change(&ctx, set, false).await {
        Ok(_) => {
            let views = tunable_views(&ctx.pool);
            // The assignment ignores spaces around the name; so does its answer.
            match views.into_iter().find(|v| v.name == request.name.trim()) {
                Some(view) => json(&view),
                None => api_error(
                    StatusCode::BAD_REQUEST,
                    "no such tunable".to_string(),
                    Some("name"),
                ),
            }
        }
        Err((code, why)) => api_error(code, why, Some("value")),
    }
}

/// The query of an API request.
struct Params(HashMap<String, String>);

impl Params {
    /// Refuses parameters other than `known` (a typo must not be silently ignored).
    fn check(&self, known: &[&str]) -> Result<(), Refusal> {
        match self.0.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => Err(Refusal::bad(
                format!("unknown parameter (known: {})", known.join(", ")),
                unknown,
            )),
            None => Ok(()),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn range(&self) -> Result<Range, Refusal> {
        Range::parse(
            self.get("from"),
            self.get("to"),
            self.get("step"),
            crate::unix_time_secs(),
        )
        .map_err(Refusal::from)
    }

    fn ids(&self) -> Result<Vec<String>, Refusal> {
        // Each id once: an answer has a column per id, and a list of one id repeated
        // thousands of times (it fits a request head) would make it as many times larger.
        let mut ids: Vec<String> = Vec::new();
        for id in self.get("ids").unwrap_or("").split(',') {
            if !id.is_empty() && !ids.iter().any(|seen| seen == id) {
                ids.push(id.to_string());
            }
        }
        if ids.is_empty() {
            return Err(Refusal::bad(
                "expected a comma-separated list of series ids",
                "ids",
            ));
        }
        Ok(ids)
    }
}

/// The pool's miss-ratio curves and what they advise (`larch advise`, the page's panel):
/// `arc`, `l2` — a configuration to predict (sizes as `64G`); `device` — the simulator's
/// model of a cache device, for the latency of an L2ARC the pool does not have yet.
async fn api_advise(
    State(ctx): State<Arc<Context>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let answer = (move || {
        let params = Params(params);
        params.check(&["arc", "l2", "device"])?;
        let size = |name: &str, min: u64| -> Result<Option<u64>, Refusal> {
            let Some(text) = params.get(name) else {
                return Ok(None);
            };
            let bytes = larch_engine::units::parse_size(text)
                .map_err(|e| Refusal::bad(format!("{text:?}: {e}"), name))?;
            if bytes < min || bytes > crate::advise::MAX_SIZE {
                return Err(Refusal::bad(
                    format!(
                        "{text} is out of range ({} to {} bytes)",
                        min,
                        crate::advise::MAX_SIZE
                    ),
                    name,
                ));
            }
            Ok(Some(bytes))
        };
        let arc = size("arc", crate::advise::MIN_ARC)?;
        let l2 = size("l2", 0)?;
        let engine = &ctx.pool.engine;
        let curves = engine.access_log.curves(engine.now_ms());
        let report = ctx.pool.report();
        let recent = {
            let now = crate::unix_time_secs();
            let range = Range::parse(Some("-60"), None, Some("1"), now).map_err(Refusal::from)?;
            let ids: Vec<String> = report
                .volumes
                .iter()
                .flat_map(|v| {
                    [
                        format!("volume/{}/read_ops", v.name),
                        format!("backing/{}/read_bytes", v.name),
                    ]
                })
                .collect();
            let recorder = ctx.recorder.lock().expect("recorder lock");
            recorder.series(&ids, range).ok().and_then(|answer| {
                let mean = |prefix: &str, suffix: &str| -> Option<f64> {
                    let mut total = 0.0;
                    let mut any = false;
                    for (id, values) in &answer.series {
                        if !(id.starts_with(prefix) && id.ends_with(suffix)) {
                            continue;
                        }
                        let got: Vec<f64> =
                            values.iter().flatten().map(|&v| f64::from(v)).collect();
                        if !got.is_empty() {
                            any = true;
                            total += got.iter().sum::<f64>() / got.len() as f64;
                        }
                    }
                    any.then_some(total)
                };
                Some((
                    mean("volume/", "/read_ops")?,
                    mean("backing/", "/read_bytes")?,
                ))
            })
        };
        let today = crate::advise::today_of(&report, recent, engine.now_ms() as f64 / 1000.0);
        let device = match params.get("device") {
            Some(spec) => Some((
                spec.to_string(),
                crate::advise::device_read_us(spec, today.block_bytes)
                    .map_err(|e| Refusal::bad(e.to_string(), "device"))?,
            )),
            None if today.l2_hit_us.is_none() => Some((
                "nvme".to_string(),
                crate::advise::device_read_us("nvme", today.block_bytes)
                    .map_err(|e| Refusal::bad(e.to_string(), "device"))?,
            )),
            None => None,
        };
        let device_ref = device.as_ref().map(|(n, us)| (n.as_str(), *us));
        let mut advice = crate::advise::advise(&curves, &today, device_ref);
        let now_ms = engine.now_ms();
        advice.volumes = ctx
            .pool
            .volumes
            .iter()
            .filter_map(|v| {
                let c = engine.access_log.volume_curves(v.info().guid, now_ms)?;
                Some(crate::advise::VolumeView::of(
                    &v.name,
                    c,
                    curves.estimated_accesses,
                    &today,
                ))
            })
            .collect();
        if arc.is_some() || l2.is_some() {
            advice.asked = Some(crate::advise::predict(
                &curves,
                &today,
                arc.unwrap_or(today.arc_bytes),
                l2.unwrap_or(today.l2_bytes),
                device_ref.map(|d| d.1),
            ));
        }
        Ok::<_, Refusal>(advice)
    })();
    match answer {
        Ok(advice) => json(&advice),
        Err(refusal) => refusal.answer(),
    }
}

/// The pool's events after `after` (a sequence number; all kept without it).
async fn api_events(
    State(ctx): State<Arc<Context>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let params = Params(params);
    if let Err(refusal) = params.check(&["after"]) {
        return refusal.answer();
    }
    let after = match params.get("after").map(str::parse::<u64>) {
        None => 0,
        Some(Ok(after)) => after,
        Some(Err(_)) => {
            return Refusal::bad("expected an event number", "after").answer();
        }
    };
    let events = &ctx.pool.engine.events;
    json(&EventsAnswer {
        version: 1,
        pool: ctx.pool.config.name.clone(),
        newest: events.newest_seq(),
        events: events.since(after),
    })
}

async fn api_catalog(State(ctx): State<Arc<Context>>) -> Response {
    #[derive(Serialize)]
    struct Retention {
        step: u64,
        seconds: u64,
    }
    #[derive(Serialize)]
    struct CatalogAnswer {
        version: u32,
        pool: String,
        now: u64,
        #[serde(flatten)]
        catalog: crate::recorder::Catalog,
        retention: [Retention; 2],
    }
    let catalog = ctx.recorder.lock().expect("recorder lock").catalog();
    json(&CatalogAnswer {
        version: 1,
        pool: ctx.pool.config.name.clone(),
        now: crate::unix_time_secs(),
        catalog,
        retention: [
            Retention {
                step: 1,
                seconds: SECONDS_KEPT as u64,
            },
            Retention {
                step: 60,
                seconds: MINUTES_KEPT as u64 * 60,
            },
        ],
    })
}

/// Answers a question to the history while holding one of the answers' places:
/// parameters other than `allowed` are refused; `ask` takes what is asked from the
/// recorder (under its lock), and `answer` makes the response, whose body keeps the place
/// until it is sent.
async fn ask_history<T>(
    ctx: &Context,
    params: HashMap<String, String>,
    allowed: &[&str],
    ask: impl FnOnce(&Params, &Recorder) -> Result<T, Refusal>,
    answer: impl FnOnce(T, OwnedSemaphorePermit) -> Response,
) -> Response {
    let Some(place) = answer_place(ctx).await else {
        return no_place();
    };
    let params = Params(params);
    let asked = params.check(allowed).and_then(|()| {
        let recorder = ctx.recorder.lock().expect("recorder lock");
        ask(&params, &recorder)
    });
    match asked {
        Ok(asked) => answer(asked, place),
        Err(refused) => refused.answer(),
    }
}

async fn api_series(
    State(ctx): State<Arc<Context>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let allowed = ["ids", "from", "to", "step"];
    let ask = |params: &Params, recorder: &Recorder| {
        let (ids, range) = (params.ids()?, params.range()?);
        Ok(recorder.series(&ids, range)?)
    };
    ask_history(&ctx, params, &allowed, ask, |a, place| {
        placed_json(&a, place)
    })
    .await
}

async fn api_heatmap(
    State(ctx): State<Arc<Context>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let allowed = ["id", "from", "to", "step"];
    let ask = |params: &Params, recorder: &Recorder| {
        let id = params
            .get("id")
            .ok_or_else(|| Refusal::bad("expected a heat map id", "id"))?;
        let range = params.range()?;
        Ok(recorder.heatmap(id, range)?)
    };
    ask_history(&ctx, params, &allowed, ask, |a, place| {
        placed_json(&a, place)
    })
    .await
}

async fn api_export(
    State(ctx): State<Arc<Context>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let allowed = ["ids", "from", "to", "step", "format"];
    let ask = |params: &Params, recorder: &Recorder| {
        let (ids, range) = (params.ids()?, params.range()?);
        match params.get("format").unwrap_or("csv") {
            "csv" => Ok((
                "text/csv",
                "attachment; filename=\"larch-analytics.csv\"",
                recorder.csv(&ids, range)?.into_bytes(),
            )),
            "json" => {
                let answer = recorder.series(&ids, range)?;
                let body = serde_json::to_vec(&answer).unwrap_or_default();
                Ok((
                    "application/json",
                    "attachment; filename=\"larch-analytics.json\"",
                    body,
                ))
            }
            _ => Err(Refusal::bad("expected csv or json", "format")),
        }
    };
    let answer = |(content_type, disposition, body): (&'static str, &'static str, Vec<u8>),
                  place| {
        (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, content_type),
                (header::CONTENT_DISPOSITION, disposition),
            ],
            placed_body(Bytes::from(body), place),
        )
            .into_response()
    };
    ask_history(&ctx, params, &allowed, ask, answer).await
}

/// One open `/api/v1/live` stream, counted in its endpoint's [`LiveSlots`] until dropped.
struct LiveStream(Arc<LiveSlots>);

impl LiveStream {
    fn open(slots: &Arc<LiveSlots>) -> Option<LiveStream> {
        let before = slots.0.fetch_add(1, Ordering::Relaxed);
        let stream = LiveStream(Arc::clone(slots));
        (before < MAX_LIVE_STREAMS).then_some(stream)
    }
}

impl Drop for LiveStream {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn api_live(
    State(ctx): State<Arc<Context>>,
    axum::Extension(slots): axum::Extension<Arc<LiveSlots>>,
) -> Response {
    let Some(open) = LiveStream::open(&slots) else {
        return api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_LIVE_STREAMS} live streams are open already"),
            None,
        );
    };
    let rx = ctx.live.subscribe();
    let stream = futures_util::stream::unfold((rx, open), |(mut rx, open)| async move {
        loop {
            match rx.recv().await {
                Ok(sample) => {
                    let event = SseEvent::default().event("sample").data(&*sample);
                    return Some((Ok::<_, Infallible>(event), (rx, open)));
                }
                // A slow reader missed samples: it gets the next one.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Whether a request's `Host` names this machine: an IP address or `localhost` (with any
/// port). A page elsewhere that reaches the endpoint through DNS rebinding (its own name
/// made to resolve to 127.0.0.1) sends its own name, and is refused.
fn local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

async fn host_check(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let host = request.headers().get(header::HOST).map(|h| h.to_str());
    match host {
        Some(Ok(host)) if !local_host(host) => api_error(
            StatusCode::MISDIRECTED_REQUEST,
            "the endpoint answers requests for this machine's addresses and localhost only"
                .to_string(),
            Some("Host"),
        ),
        Some(Err(_)) => api_error(
            StatusCode::BAD_REQUEST,
            "the Host header is not text".to_string(),
            Some("Host"),
        ),
        _ => next.run(request).await,
    }
}

/// The routes of the loopback endpoint, with its own [`LiveSlots`].
fn router(ctx: Arc<Context>) -> Router {
    routes()
        .layer(axum::Extension(Arc::new(LiveSlots::default())))
        .layer(axum::middleware::from_fn(host_check))
        .with_state(ctx)
}

/// The routes, without the state, the checks in front of them and the [`LiveSlots`]
/// extension `/api/v1/live` needs (each endpoint adds its own).
fn routes() -> Router<Arc<Context>> {
    let admin_route = |path: &'static str| {
        axum::routing::post(
            move |State(ctx): State<Arc<Context>>,
                  axum::Extension(peer): axum::Extension<Peer>,
                  headers: HeaderMap,
                  body: Body| admin(ctx, peer, path, headers, body),
        )
    };
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/chart.js",
            get(|| async { asset("text/javascript; charset=utf-8", CHART_JS) }),
        )
        .route(
            "/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route(
            "/metrics",
            get(|State(ctx): State<Arc<Context>>| async move {
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, metrics::PROMETHEUS_CONTENT_TYPE)],
                    metrics::prometheus(
                        &ctx.pool.report(),
                        Some(
                            ctx.recorder
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .bytes(),
                        ),
                    ),
                )
                    .into_response()
            }),
        )
        .route(
            "/arcstats",
            get(|State(ctx): State<Arc<Context>>| async move {
                text(StatusCode::OK, metrics::kstat(&ctx.pool.report()))
            }),
        )
        .route(
            "/status",
            get(|State(ctx): State<Arc<Context>>| async move {
                json(&StatusReport::of(&ctx.pool, true, Some(ctx.addr.clone())))
            }),
        )
        .route(
            "/admin/ping",
            get(|State(ctx): State<Arc<Context>>| async move {
                json(&Ping {
                    pid: std::process::id(),
                    pool: ctx.pool.config.name.clone(),
                    pool_guid: ctx.pool.config.guid,
                })
            }),
        )
        .route(
            "/admin/tunables",
            get(|State(ctx): State<Arc<Context>>| async move {
                json(&TunablesAnswer {
                    pid: std::process::id(),
                    tunables: tunables::values(&ctx.pool.engine.tunables),
                })
            }),
        )
        .route(
            "/admin/volume/get",
            get(
                |State(ctx): State<Arc<Context>>, Query(params): Query<HashMap<String, String>>| {
                    volume_get(ctx, params)
                },
            ),
        )
        .route("/admin/volume/set", admin_route("/admin/volume/set"))
        .route("/admin/set", admin_route("/admin/set"))
        .route("/admin/cache/add", admin_route("/admin/cache/add"))
        .route("/admin/cache/remove", admin_route("/admin/cache/remove"))
        .route("/admin/log/add", admin_route("/admin/log/add"))
        .route("/admin/log/remove", admin_route("/admin/log/remove"))
        .route("/api/v1/catalog", get(api_catalog))
        .route("/api/v1/series", get(api_series))
        .route("/api/v1/heatmap", get(api_heatmap))
        .route("/api/v1/export", get(api_export))
        .route("/api/v1/live", get(api_live))
        .route("/api/v1/advise", get(api_advise))
        .route("/api/v1/events", get(api_events))
        .route(
            "/api/v1/tunables",
            get(|State(ctx): State<Arc<Context>>| async move {
                #[derive(Serialize)]
                struct Answer {
                    version: u32,
                    tunables: Vec<TunableView>,
                }
                json(&Answer {
                    version: 1,
                    tunables: tunable_views(&ctx.pool),
                })
            })
            .post(
                |State(ctx): State<Arc<Context>>,
                 axum::Extension(peer): axum::Extension<Peer>,
                 headers: HeaderMap,
                 body: Body| set_tunable(ctx, peer, headers, body),
            ),
        )
        .fallback(|| async { text(StatusCode::NOT_FOUND, "not found") })
}

/// Serves one connection with hyper: heads within [`REQUEST_TIMEOUT`], keep-alive, and
/// closed when the peer takes less than 64 KiB of a waiting answer in
/// [`WRITE_STALL_TIMEOUT`] (see `http/stall.rs`).
async fn connection(
    router: Router,
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    peer: SocketAddr,
) {
    let app = router.layer(axum::Extension(Peer(peer)));
    let service = hyper_util::service::TowerToHyperService::new(app);
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .max_buf_size(16 << 10)
        .serve_connection(
            hyper_util::rt::TokioIo::new(stall::StallGuard::new(stream)),
            service,
        );
    let _ = served.await;
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
    let router = router(ctx);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    accept_loop(listener, slots, move |stream, peer, slot| {
        let router = router.clone();
        tokio::spawn(async move {
            connection(router, stream, peer).await;
            drop(slot);
        });
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
/// A streak of failures is logged once, when it starts and when it ends. At most as many
/// connections as `slots` has permits are served at once.
async fn accept_loop<A: Acceptor>(
    mut acceptor: A,
    slots: Arc<Semaphore>,
    mut serve: impl FnMut(A::Stream, SocketAddr, tokio::sync::OwnedSemaphorePermit),
) {
    let mut failures = 0u64;
    let mut backoff = ACCEPT_BACKOFF_FIRST;
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match acceptor.accept().await {
            Ok((stream, peer)) => {
                if failures > 0 {
                    eprintln!("larch serve: HTTP accepts again after {failures} failed attempts");
                    failures = 0;
                    backoff = ACCEPT_BACKOFF_FIRST;
                }
                serve(stream, peer, slot);
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
    use std::sync::atomic::AtomicU64;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio::sync::mpsc;

    /// The handlers' context over a demo pool, with the token `token`.
    pub(super) fn context(demo: &DemoPool) -> Arc<Context> {
        Arc::new(Context {
            pool: Arc::clone(&demo.pool),
            token: "token".to_string(),
            page_token: "page".to_string(),
            addr: "127.0.0.1:1".to_string(),
            recorder: Arc::new(Mutex::new(Recorder::new(1 << 20))),
            live: broadcast::channel(4).0,
            answers: history_answers(),
        })
    }

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
        let ctx = context(&demo);
        let router = router(ctx);
        let attempts = Arc::new(AtomicU64::new(0));
        let (connect, connections) = mpsc::unbounded_channel();
        let acceptor = OutOfDescriptors {
            attempts: Arc::clone(&attempts),
            connections,
        };
        let slots = Arc::new(Semaphore::new(4));
        let server = tokio::spawn(accept_loop(acceptor, slots, move |stream, peer, slot| {
            let router = router.clone();
            tokio::spawn(async move {
                connection(router, stream, peer).await;
                drop(slot);
            });
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
            .write_all(b"GET /admin/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_string(&mut answer))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("\"pool_guid\""), "{answer}");
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
    fn volume_requests_name_the_volume_first() {
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (name, force, assignments) = volume_fields(&lines(&[
            "volume=vol0",
            "force=1",
            "volsize=1G",
            "sync=always",
        ]))
        .unwrap();
        assert_eq!((name.as_str(), force), ("vol0", true));
        assert_eq!(assignments, ["volsize=1G", "sync=always"]);
        assert!(
            !volume_fields(&lines(&["volume=v", "sync=always"]))
                .unwrap()
                .1
        );
        for bad in [&["sync=always", "volume=v"][..], &["volume="], &[]] {
            let err = volume_fields(&lines(bad)).unwrap_err();
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

    #[test]
    fn only_this_machine_is_a_host() {
        for host in [
            "127.0.0.1",
            "127.0.0.1:9920",
            "localhost",
            "LOCALHOST:80",
            "[::1]:9920",
            "[::1]",
            "10.0.0.7:9920",
        ] {
            assert!(local_host(host), "{host} refused");
        }
        for host in [
            "evil.example",
            "evil.example:9920",
            "127.0.0.1.nip.io:9920",
            "localhost.evil.example",
            "[evil]:1",
            "",
        ] {
            assert!(!local_host(host), "{host} accepted");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_loses_its_connection() {
        let demo = DemoPool::new("http-stall");
        let ctx = context(&demo);
        // A pipe of 64 bytes: the answer to /metrics cannot fit, and the client reads none.
        let (mut client, stream) = tokio::io::duplex(64);
        let served = tokio::spawn(connection(
            router(ctx),
            stream,
            SocketAddr::from(([127, 0, 0, 1], 40000)),
        ));
        client
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        tokio::time::timeout(WRITE_STALL_TIMEOUT * 2, served)
            .await
            .expect("the connection is closed once its writes stall")
            .unwrap();
    }

    /// Answers built from the history wait for one of the places, and keep it until their
    /// body has been read: at most MAX_HISTORY_ANSWERS are in memory at once.
    #[tokio::test]
    async fn history_answers_wait_for_a_place_and_keep_it_until_sent() {
        let demo = DemoPool::new("http-answers");
        let ctx = context(&demo);
        ctx.recorder
            .lock()
            .unwrap()
            .record(crate::unix_time_secs(), &demo.pool.report());
        let series = || {
            let params = HashMap::from([
                ("ids".to_string(), "arc/hits".to_string()),
                ("from".to_string(), "-60".to_string()),
            ]);
            api_series(State(Arc::clone(&ctx)), Query(params))
        };
        let taken: Vec<_> = (0..MAX_HISTORY_ANSWERS)
            .map(|_| Arc::clone(&ctx.answers).try_acquire_owned().unwrap())
            .collect();
        // Not a speed limit: without a place the answer cannot be built at all.
        let waited = tokio::time::timeout(Duration::from_millis(200), series()).await;
        assert!(waited.is_err(), "answered without a place");
        drop(taken);
        let answer = series().await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(ctx.answers.available_permits(), MAX_HISTORY_ANSWERS - 1);
        let body = axum::body::to_bytes(answer.into_body(), usize::MAX)
            .await
            .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(value["series"]["arc/hits"].is_array(), "{value}");
        assert_eq!(ctx.answers.available_permits(), MAX_HISTORY_ANSWERS);
    }

    /// The history's questions answer with their content type and file name, and refuse
    /// an unknown parameter, a missing heat map id and an unknown export format.
    #[tokio::test]
    async fn history_questions_answer_or_refuse() {
        let demo = DemoPool::new("http-questions");
        let ctx = context(&demo);
        let now = crate::unix_time_secs();
        ctx.recorder
            .lock()
            .unwrap()
            .record(now, &demo.pool.report());
        let params = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let header = |r: &Response, name| r.headers()[name].to_str().unwrap().to_string();
        let export = |format| {
            let asked = params(&[("ids", "arc/hits"), ("from", "-60"), ("format", format)]);
            api_export(State(Arc::clone(&ctx)), Query(asked))
        };
        for (format, content_type) in [("csv", "text/csv"), ("json", "application/json")] {
            let answer = export(format).await;
            assert_eq!(answer.status(), StatusCode::OK, "{format}");
            assert_eq!(header(&answer, header::CONTENT_TYPE), content_type);
            assert_eq!(
                header(&answer, header::CONTENT_DISPOSITION),
                format!("attachment; filename=\"larch-analytics.{format}\"")
            );
        }
        assert_eq!(export("xml").await.status(), StatusCode::BAD_REQUEST);
        let unknown = params(&[("ids", "arc/hits"), ("color", "red")]);
        let refused = api_series(State(Arc::clone(&ctx)), Query(unknown)).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let no_id = api_heatmap(State(Arc::clone(&ctx)), Query(params(&[]))).await;
        assert_eq!(no_id.status(), StatusCode::BAD_REQUEST);
        let no_such = params(&[("id", "cache/none/read")]);
        let refused = api_heatmap(State(Arc::clone(&ctx)), Query(no_such)).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert_eq!(ctx.answers.available_permits(), MAX_HISTORY_ANSWERS);
    }

    #[tokio::test]
    async fn live_streams_are_bounded_and_a_closed_one_frees_its_place() {
        let demo = DemoPool::new("http-live");
        let ctx = context(&demo);
        let slots = Arc::new(LiveSlots::default());
        let live = || api_live(State(Arc::clone(&ctx)), axum::Extension(Arc::clone(&slots)));
        let mut open = Vec::new();
        for _ in 0..MAX_LIVE_STREAMS {
            let answer = live().await;
            assert_eq!(answer.status(), StatusCode::OK);
            open.push(answer);
        }
        let refused = live().await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(refused);
        assert_eq!(slots.0.load(Ordering::Relaxed), MAX_LIVE_STREAMS);
        open.pop();
        assert_eq!(live().await.status(), StatusCode::OK);
    }
}
