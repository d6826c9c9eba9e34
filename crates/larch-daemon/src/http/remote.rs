//! The remote endpoint of `larch serve --http-remote`: the loopback endpoint's routes for
//! other machines, over TLS, reading only (`GET` and `HEAD`; every management request is a
//! `POST`), every request with the endpoint's own view token (never the management token
//! of `daemon.json`). A first visit's `?token=` sets a cookie and redirects to the address
//! without the token.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::{
    Context, MAX_CONNECTIONS, REQUEST_TIMEOUT, accept_loop, api_error, connection, routes,
    same_token,
};

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
/// request with the view token. The `Host` check is not needed there: a page elsewhere that
/// reaches the endpoint has no token, and the cookie is bound to this site.
fn remote_router(ctx: Arc<Context>, auth: RemoteAuth) -> Router {
    routes()
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
        return api_error(
            StatusCode::FORBIDDEN,
            "the remote endpoint only reads: changes go through the loopback endpoint".to_string(),
            None,
        );
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
    response
}

/// Serves the remote endpoint on `listener` until the task is aborted: every connection
/// through TLS when `tls` is given (a failed handshake closes it), every request with
/// `view_token`, reading only.
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
    accept_loop(listener, slots, move |stream, peer, slot| {
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
            drop(slot);
        });
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redirect_stays_on_this_host() {
        let at = |uri: &str| without_token(&uri.parse::<axum::http::Uri>().unwrap());
        assert_eq!(at("/api/v1/catalog?token=abc"), "/api/v1/catalog");
        assert_eq!(at("/?a=1&token=abc&b=2"), "/?a=1&b=2");
        assert_eq!(at("//evil.example/x?token=abc"), "/evil.example/x");
        assert_eq!(at("/\\evil.example?token=abc"), "/evil.example");
    }
}
