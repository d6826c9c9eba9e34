//! The remote endpoint of `larch serve --http-remote`: the loopback endpoint's routes for
//! other machines, over TLS, reading only (`GET` and `HEAD`; every management request is a
//! `POST`), every request with the endpoint's own view token (never the management token
//! of `daemon.json`). A first visit's `?token=` sets a cookie and redirects to the address
//! without the token.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::{
    Context, LiveSlots, MAX_CONNECTIONS, REQUEST_TIMEOUT, accept_loop, api_error, connection,
    routes, same_token,
};

/// Connections the remote endpoint serves at once from one address, of its
/// [`MAX_CONNECTIONS`], so that one peer (with the token or without it) cannot take them all
/// and lock the page and Prometheus's scrapes out from everywhere else. A browser opens
/// about six connections to a site and a scraper one, well under it.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 16;

/// The remote endpoint's open connections, by the exact address of their peer.
#[derive(Default)]
struct PerAddress(Mutex<HashMap<IpAddr, AddressCount>>);

/// One address's open connections, and the connections refused since it last had none.
struct AddressCount {
    open: usize,
    refused: u64,
}

/// A connection's place in [`PerAddress`], given back when dropped.
struct AddressSlot {
    table: Arc<PerAddress>,
    address: IpAddr,
}

impl PerAddress {
    /// Counts a connection from `address`, or refuses it (`None`) when the address has
    /// [`MAX_CONNECTIONS_PER_ADDRESS`] open already. A refusal is logged once per burst,
    /// the burst lasting until the address has no connection left: a peer that keeps
    /// trying while it holds its connections would otherwise write a line per attempt.
    fn admit(table: &Arc<PerAddress>, address: IpAddr) -> Option<AddressSlot> {
        let first_refusal = {
            // Nothing panics while the lock is held; a poisoned table is still consistent.
            let mut counts = table.0.lock().unwrap_or_else(PoisonError::into_inner);
            let count = counts.entry(address).or_insert(AddressCount {
                open: 0,
                refused: 0,
            });
            if count.open < MAX_CONNECTIONS_PER_ADDRESS {
                count.open += 1;
                return Some(AddressSlot {
                    table: Arc::clone(table),
                    address,
                });
            }
            count.refused += 1;
            count.refused == 1
        };
        if first_refusal {
            eprintln!(
                "larch serve: --http-remote: refusing connections from {address}: \
                 {MAX_CONNECTIONS_PER_ADDRESS} are open from it (not logged again until they \
                 have all closed)"
            );
        }
        None
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = self.table.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.address) {
            count.open -= 1;
            // Forgotten once it has nothing open: the table holds only addresses that are
            // connected now, however many have come and gone.
            if count.open == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

/// What the remote endpoint checks: its own token (not the management token of
/// `daemon.json`'s `token`: whoever may look may not change), and whether it is served over
/// TLS (the cookie is `Secure` only then, or browsers would drop it).
#[derive(Clone)]
pub struct RemoteAuth {
    /// The token every request must carry.
    pub view_token: String,
    /// Whether the endpoint is served over TLS.
    pub tls: bool,
}

/// The routes of the remote endpoint (`--http-remote`): the same, reading only (`GET` and
/// `HEAD`; the management requests are all `POST`s, refused here whoever sends them), every
/// request with the view token, and `/api/v1/live` streams counted apart from the loopback
/// endpoint's. The `Host` check is not needed there: a page elsewhere that reaches the
/// endpoint has no token, and the cookie is bound to this site.
fn remote_router(ctx: Arc<Context>, auth: RemoteAuth) -> Router {
    routes()
        .layer(axum::Extension(Arc::new(LiveSlots::default())))
        .layer(axum::middleware::from_fn_with_state(auth, remote_auth))
        .with_state(ctx)
}

/// The cookie the remote endpoint sets once `?token=` was right, so that the page's own
/// requests carry the token.
const TOKEN_COOKIE: &str = "larch_view";

/// The tokens a request carries, the query's first (a link someone was just given beats a
/// cookie left from an earlier start of the daemon): `?token=`, `Authorization: Bearer`, and
/// the cookie.
fn request_tokens(request: &axum::extract::Request) -> (Option<String>, Vec<String>) {
    let query = request.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("token="))
            .map(str::to_string)
    });
    let headers = request.headers();
    let mut others = Vec::new();
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("Bearer "))
    {
        others.push(bearer.trim().to_string());
    }
    for cookies in headers.get_all(header::COOKIE) {
        let Ok(cookies) = cookies.to_str() else {
            continue;
        };
        for cookie in cookies.split(';') {
            if let Some((TOKEN_COOKIE, value)) = cookie.trim().split_once('=') {
                others.push(value.to_string());
            }
        }
    }
    (query, others)
}

/// The request's path and query without `token=`: where a first visit is sent once its
/// cookie is set, so that the token leaves the address bar and the history.
fn without_token(uri: &axum::http::Uri) -> String {
    let rest: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.starts_with("token="))
        .collect();
    // One leading slash: a path of `//host/...` (or `/\host`) in `Location` is an address
    // on another host, where browsers would follow it.
    let path = format!("/{}", uri.path().trim_start_matches(['/', '\\']));
    if rest.is_empty() {
        path
    } else {
        format!("{path}?{}", rest.join("&"))
    }
}

async fn remote_auth(
    State(auth): State<RemoteAuth>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    ) {
        return closing(api_error(
            StatusCode::FORBIDDEN,
            "the remote endpoint only reads: changes go through the loopback endpoint".to_string(),
            None,
        ));
    }
    let (query, others) = request_tokens(&request);
    if let Some(token) = query {
        if !same_token(&token, &auth.view_token) {
            return unauthorized();
        }
        let cookie = format!(
            "{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{}",
            if auth.tls { "; Secure" } else { "" }
        );
        let mut response = StatusCode::SEE_OTHER.into_response();
        if let (Ok(cookie), Ok(location)) = (
            header::HeaderValue::from_str(&cookie),
            header::HeaderValue::from_str(&without_token(request.uri())),
        ) {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
            response.headers_mut().insert(header::LOCATION, location);
        }
        return response;
    }
    if others.iter().any(|t| same_token(t, &auth.view_token)) {
        next.run(request).await
    } else {
        unauthorized()
    }
}

fn unauthorized() -> Response {
    let mut response = api_error(
        StatusCode::UNAUTHORIZED,
        "this endpoint needs its token (larch analytics url --remote prints the address with \
         it): Authorization: Bearer TOKEN, or ?token=TOKEN once"
            .to_string(),
        None,
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"larch\""),
    );
    closing(response)
}

/// `response` with `Connection: close`, which makes hyper close the connection once it is
/// sent. The endpoint's refusals (401, 403) carry it: a peer without the token must not
/// keep a connection, and its place among the endpoint's [`MAX_CONNECTIONS`], by sending a
/// request now and then and getting a refusal each time. A browser or a scraper that is
/// refused opens a new connection for its next try, which costs it one TLS handshake.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

/// Serves the remote endpoint on `listener` until the task is aborted: at most
/// [`MAX_CONNECTIONS`] connections at once, [`MAX_CONNECTIONS_PER_ADDRESS`] of them from
/// one address, every connection through TLS when `tls` is given (a failed handshake
/// closes it), every request with `view_token`, reading only.
pub async fn serve_remote(
    listener: TcpListener,
    ctx: Arc<Context>,
    tls: Option<Arc<larch_nbd::tls::ServerConfig>>,
    view_token: String,
) {
    let auth = RemoteAuth {
        view_token,
        tls: tls.is_some(),
    };
    let router = remote_router(ctx, auth);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let per_address = Arc::new(PerAddress::default());
    accept_loop(listener, slots, move |stream, peer, slot| {
        // Counted at accept, before TLS and the token: what a peer could hold without
        // either is what the cap is for.
        let Some(address_slot) = PerAddress::admit(&per_address, peer.ip()) else {
            // Dropping the stream closes it, and dropping `slot` gives its place back.
            return;
        };
        let router = router.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(REQUEST_TIMEOUT, acceptor.accept(stream));
                    if let Ok(Ok(tls)) = handshake.await {
                        connection(router, tls, peer).await;
                    }
                }
                None => connection(router, stream, peer).await,
            }
            drop(address_slot);
            drop(slot);
        });
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::MAX_LIVE_STREAMS;
    use crate::http::tests::context;
    use crate::testing::DemoPool;
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Duration;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::{TcpSocket, TcpStream};

    /// The view token of the endpoints these tests start.
    const VIEW: &str = "view-token";

    /// How long a test waits for an answer, or for the server to close: well under
    /// [`REQUEST_TIMEOUT`], after which hyper would close an idle connection anyway.
    const PATIENCE: Duration = Duration::from_secs(5);

    /// A remote endpoint over plain TCP on 127.0.0.1, and its address.
    async fn start(ctx: Arc<Context>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_remote(listener, ctx, None, VIEW.to_string()));
        (addr, server)
    }

    /// A connection to `to` from the loopback address `from` (Linux routes all of
    /// 127.0.0.0/8 to `lo`, so 127.0.0.2 is another client on the same machine).
    async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        socket.connect(to).await.unwrap()
    }

    /// A `GET` of `path` with the view token.
    fn get(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {VIEW}\r\n\r\n")
    }

    /// Why no answer's head came.
    #[derive(Debug, thiserror::Error)]
    enum NoAnswer {
        /// The request could not be sent.
        #[error(transparent)]
        Send(std::io::Error),
        /// The connection ended after what it holds.
        #[error("closed after {0:?}")]
        Closed(String),
        /// Reading failed after what it holds.
        #[error("{source} after {got:?}")]
        Failed { source: std::io::Error, got: String },
    }

    /// Reads an answer's head (through its blank line); what came of the stream if it
    /// ended or failed first. Panics after [`PATIENCE`].
    async fn head(stream: &mut (impl AsyncRead + Unpin)) -> Result<String, NoAnswer> {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let text = |got: &[u8]| String::from_utf8_lossy(got).into_owned();
            match tokio::time::timeout(PATIENCE, stream.read(&mut buf))
                .await
                .expect("an answer, or the end of the connection, in time")
            {
                Ok(0) => return Err(NoAnswer::Closed(text(&got))),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(source) => {
                    return Err(NoAnswer::Failed {
                        source,
                        got: text(&got),
                    });
                }
            }
        }
        Ok(String::from_utf8_lossy(&got).into_owned())
    }

    /// Sends `request` and reads its answer's head.
    async fn ask(
        stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
        request: &str,
    ) -> Result<String, NoAnswer> {
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(NoAnswer::Send)?;
        head(stream).await
    }

    #[tokio::test]
    async fn one_address_cannot_take_every_remote_connection() {
        let demo = DemoPool::new("remote-per-address");
        let (addr, server) = start(context(&demo)).await;
        let here = Ipv4Addr::new(127, 0, 0, 1);
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            let mut stream = connect_from(here, addr).await;
            let answer = ask(&mut stream, &get("/admin/ping")).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            held.push(stream);
        }
        // One more from the same address is closed at once, unanswered.
        let mut refused = connect_from(here, addr).await;
        let answer = ask(&mut refused, &get("/admin/ping")).await;
        assert!(
            answer.is_err(),
            "the connection past the cap was served: {answer:?}"
        );
        // Another address still gets in.
        let mut other = connect_from(Ipv4Addr::new(127, 0, 0, 2), addr).await;
        let answer = ask(&mut other, &get("/admin/ping")).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // A connection that ends gives its place back (once the server has seen it end).
        drop(held.pop());
        let mut served = false;
        for _ in 0..50 {
            let mut again = connect_from(here, addr).await;
            if let Ok(answer) = ask(&mut again, &get("/admin/ping")).await {
                assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served, "no place given back after a connection ended");
        server.abort();
    }

    #[tokio::test]
    async fn refusals_close_their_connection() {
        let demo = DemoPool::new("remote-refusals");
        let (addr, server) = start(context(&demo)).await;
        let here = Ipv4Addr::new(127, 0, 0, 1);
        for (request, status) in [
            ("GET /metrics HTTP/1.1\r\nHost: h\r\n\r\n", "401"),
            (
                "GET /metrics HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer wrong\r\n\r\n",
                "401",
            ),
            (
                "GET /metrics?token=wrong HTTP/1.1\r\nHost: h\r\n\r\n",
                "401",
            ),
            (
                &format!(
                    "POST /admin/set HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {VIEW}\r\n\
                     Content-Length: 14\r\n\r\nzfs_arc_max=8M"
                ),
                "403",
            ),
        ] {
            let mut stream = connect_from(here, addr).await;
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
                .await
                .unwrap_or_else(|_| panic!("{request:?}: the connection stayed open"))
                .unwrap();
            let answer = String::from_utf8_lossy(&answer).to_lowercase();
            assert!(
                answer.starts_with(&format!("http/1.1 {status}")),
                "{answer}"
            );
            assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
        }
        // A request with the token keeps its connection for the next one (`HEAD`: an
        // answer without a body, so that the next read starts at the next answer).
        let mut stream = connect_from(here, addr).await;
        let head_request = get("/admin/ping").replacen("GET", "HEAD", 1);
        for _ in 0..2 {
            let answer = ask(&mut stream, &head_request).await.unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(
                !answer.to_lowercase().contains("connection: close"),
                "{answer}"
            );
        }
        server.abort();
    }

    #[tokio::test]
    async fn remote_live_streams_leave_the_local_page_its_own() {
        let demo = DemoPool::new("remote-live");
        let ctx = context(&demo);
        let remote = remote_router(
            Arc::clone(&ctx),
            RemoteAuth {
                view_token: VIEW.to_string(),
                tls: false,
            },
        );
        let local = crate::http::router(Arc::clone(&ctx));
        // One stream over `router`, as a connection from `peer`: the client's end, once
        // its answer's head is read, and the head.
        let open = |router: Router, peer: SocketAddr| async move {
            let (mut client, server) = tokio::io::duplex(64 << 10);
            tokio::spawn(connection(router, server, peer));
            let answer = ask(&mut client, &get("/api/v1/live")).await.unwrap();
            (client, answer)
        };
        let far = SocketAddr::from(([192, 0, 2, 1], 40000));
        let mut streams = Vec::new();
        for _ in 0..MAX_LIVE_STREAMS {
            let (client, answer) = open(remote.clone(), far).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            streams.push(client);
        }
        let (_, answer) = open(remote.clone(), far).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        // The loopback page still gets its stream.
        let (_, answer) = open(local, SocketAddr::from(([127, 0, 0, 1], 40000))).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    #[test]
    fn the_redirect_stays_on_this_host() {
        let at = |uri: &str| without_token(&uri.parse::<axum::http::Uri>().unwrap());
        assert_eq!(at("/api/v1/catalog?token=abc"), "/api/v1/catalog");
        assert_eq!(at("/?a=1&token=abc&b=2"), "/?a=1&b=2");
        assert_eq!(at("//evil.example/x?token=abc"), "/evil.example/x");
        assert_eq!(at("/\\evil.example?token=abc"), "/evil.example");
    }
}
