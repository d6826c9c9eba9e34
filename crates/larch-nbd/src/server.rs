//! The async server: listeners, connections, and the request pipeline over an [`Export`].
//!
//! This file holds what reads the server's shared state and limits: building the server,
//! accepting, the negotiation and shutdown. The pieces that stand alone are in `server/`:
//! the accepted streams (`conn`), the queues, request reading (`request`), the socket
//! spin, and the transmission phase of a connection (`transmit`).
//!
//! One connection is one task: on the runtime that accepted it, or, with
//! [`Server::with_connection_threads`], on a thread of its own running a single-threaded
//! runtime (the socket moves to that runtime's reactor). It negotiates, then runs a
//! `Transmission`, whose loop is an event source and a handler of a closed `Event` enum:
//! `next_event` waits (in one biased `select!` of cancel-safe futures) for requests to
//! complete (their replies join the output queue), for the socket to take more output
//! (one `writev` of every queued reply), for the payload budget to admit a waiting
//! request, for a request to arrive, for shutdown, its grace period, or the check that
//! replies keep moving; `handle_event` acts on what it returned, then reads, validates
//! and starts the next request if one is ready (its export future joins the in-flight
//! set). The task polls the in-flight futures itself rather than spawning a task per
//! request: on a machine with few cores the
//! cross-thread wake-ups of spawned tasks and a separate writer task cost more than the
//! protocol work (measured: see BENCHMARKS.md). Only bulk transfers (≥ 64 KiB), which
//! are dominated by copying, get a task of their own so that they use several cores. Requests still run concurrently and
//! replies go out in completion order; an export that does real device I/O parks its
//! future on that I/O (a blocking pool, io_uring) and the connection keeps serving.
//! The in-flight count is capped: at the cap the task stops reading, which pushes back
//! on the client through the socket. WRITE payloads and READ replies take their size
//! from one budget shared by all connections before they run (WRITE_ZEROES and CACHE a
//! step's worth), and a client that stops halfway through a request, or sends it or reads
//! its replies slower than 256 KiB/s, is cut off (see [`ServerLimits::stall_timeout`]) so
//! that it cannot keep its share. Replies of small READs, outside the budget, are capped
//! per connection.
//!
//! TLS and access ([`Server::with_security`]): the handshake runs on the whole stream
//! (a `Conn`, in `server/conn.rs` with the per-address count), so that when the negotiation accepts `STARTTLS` the stream becomes rustls's
//! TLS stream in place; the client's identity (address, verified certificate names) then
//! decides what the negotiation offers it. Transmission runs on the stream's halves.
//! Connections are capped per source address as well as in all.
//!
//! Shutdown ([`Server::shutdown`]): listeners stop accepting; connections still
//! negotiating get `NBD_REP_ERR_SHUTDOWN` for their options and are closed when the
//! client leaves or the grace period ends; connections in transmission answer new requests `ESHUTDOWN`,
//! finish the ones in flight, and close once the client disconnects or the grace period
//! ends.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, watch};

mod conn;
mod queues;
mod request;
mod spin;
mod transmit;
use conn::{
    AddressSlot, Conn, NEGOTIATION_BUFFER_BYTES, accept, into_halves, is_transient_accept_error,
};
use request::{far_future, later_by};
use spin::{Spin, Spinners, SpunRead};
use tokio::time::Instant;
use transmit::Transmission;

use crate::access::{AccessRules, ClientIdentity};
use crate::export::Export;
use crate::handshake::{
    self, ExportInfo, Negotiated, Negotiation, NegotiationError, NegotiationLimits, Step, TlsMode,
};
use crate::tls::TlsSettings;
use crate::transmission::BadRequestMagic;

/// Limits of one server, each configurable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Longest option payload accepted during negotiation (longer: disconnect).
    pub max_option_bytes: u32,
    /// Largest READ/WRITE payload; advertised as the maximum block size when the export
    /// allows more. Larger requests are answered `EINVAL` (a WRITE payload is discarded).
    pub max_request_bytes: u32,
    /// Connections served at once; further ones are closed at once.
    pub max_connections: usize,
    /// Connections served at once from one source address (TCP only); further ones from
    /// it are closed at once, so one client cannot take every slot.
    pub max_connections_per_address: usize,
    /// Requests in flight per connection; the connection stops reading at this count.
    pub max_inflight_per_connection: usize,
    /// Bytes of WRITE payloads and READ replies the server holds at once, over all
    /// connections. A WRITE's payload counts from before it is read until the export has
    /// handled it; a READ's length counts from before the export runs it until its reply
    /// has been written to the socket. A connection whose next request does not fit waits
    /// (reading nothing more, answering what completes) until it does. This bounds the
    /// memory clients can make the server hold, whatever their number, depth and request
    /// sizes. The budget counts in 4 KiB units and must hold one request of
    /// `max_request_bytes` rounded up to them.
    pub max_payload_bytes_in_flight: u64,
    /// How long a connection may stay open after shutdown began.
    pub shutdown_grace: Duration,
    /// How long a client may take from connecting to the end of negotiation; an idle
    /// client would otherwise hold a connection slot for ever.
    pub handshake_timeout: Duration,
    /// How long a connection may go without progress in the middle of a request or with
    /// replies queued: once a request's first byte has arrived, each read of the rest of
    /// its header and of its payload must return some bytes within it, a WRITE payload
    /// must arrive whole within it plus its length at 256 KiB/s, and queued replies must
    /// move into the socket at 256 KiB/s or more over each stall timeout (flushes and the
    /// final close within it too). Otherwise the connection is closed: a client that
    /// stops halfway, or trickles a byte now and then, would hold its share of the
    /// payload budget, and with it every other client's WRITEs and READs, for as long as
    /// it liked. The default, 30 s, is the Linux nbd client's own request timeout; at
    /// most a day.
    pub stall_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_option_bytes: 64 * 1024,
            max_request_bytes: 32 << 20,
            max_connections: 256,
            max_connections_per_address: 128,
            max_inflight_per_connection: 128,
            max_payload_bytes_in_flight: 256 << 20,
            shutdown_grace: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(30),
        }
    }
}

/// The longest a [`ServerLimits`] timeout may be: longer ones are configuration mistakes
/// (and deadlines that far off would not fit in an `Instant`).
const MAX_TIMEOUT: Duration = Duration::from_secs(86400);

/// A named export given to [`Server::new`].
pub struct NamedExport<E> {
    /// The export name (unique per server; "" is the default export).
    pub name: String,
    /// Description shown by `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    pub description: String,
    /// The export itself.
    pub export: Arc<E>,
}

/// Why a server could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ServerError {
    /// Two exports share a name.
    #[error("export name {0:?} is used twice")]
    DuplicateName(String),
    /// An export's name or description breaks the spec's string rules.
    #[error("export {0:?}: name or description is longer than 4096 bytes or contains NUL")]
    BadString(String),
    /// An export advertises impossible block sizes.
    #[error("export {name:?}: {reason}")]
    BadBlockSizes {
        /// The export.
        name: String,
        /// What is wrong.
        #[source]
        reason: crate::export::BlockSizesError,
    },
    /// A limit is out of range.
    #[error("bad limit: {0}")]
    BadLimit(&'static str),
    /// An access rule names an export the server does not have (a typo would otherwise
    /// refuse the export silently).
    #[error("the access rules name export {0:?}, which this server does not serve")]
    UnknownExportInRules(String),
}

/// Why a connection ended abnormally (logged, never returned to a client).
#[derive(Debug, Error)]
pub enum ConnectionError {
    /// Socket error or early end of stream.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The client broke the handshake rules.
    #[error("negotiation: {0}")]
    Negotiation(#[from] NegotiationError),
    /// A request header was not a request header.
    #[error("transmission: {0}")]
    BadRequest(#[from] BadRequestMagic),
    /// The client did not finish negotiating within `ServerLimits::handshake_timeout`.
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// The TLS handshake failed (a certificate refused, a malformed record...).
    #[error("TLS handshake: {0}")]
    Tls(io::Error),
    /// The client sent bytes after `STARTTLS` before the server's answer.
    #[error("client sent data between STARTTLS and the TLS handshake")]
    DataBeforeTls,
}

/// Who may connect and how: TLS and the access rules. The default is no TLS and no rules
/// (every client may use every export).
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// TLS; `None` is [`TlsMode::Off`].
    pub tls: Option<TlsSettings>,
    /// The allow-list.
    pub access: AccessRules,
}

/// A listening socket to serve on.
#[derive(Debug)]
pub enum Listener {
    /// TCP; accepted sockets get `TCP_NODELAY`.
    Tcp(TcpListener),
    /// A Unix domain socket.
    Unix(UnixListener),
}

struct Inner<E> {
    exports: Vec<NamedExport<E>>,
    infos: Vec<ExportInfo>,
    limits: ServerLimits,
    security: Security,
    tls_acceptor: Option<tokio_rustls::TlsAcceptor>,
    connections: Arc<Semaphore>,
    /// Open connections per TCP source address.
    per_address: Mutex<HashMap<IpAddr, usize>>,
    /// The payload budget, in units of [`BUDGET_UNIT_BYTES`].
    payload_budget: Arc<Semaphore>,
    shutdown_tx: watch::Sender<bool>,
    spinners: Arc<Spinners>,
    /// Whether each connection gets a thread of its own ([`Server::with_connection_threads`]).
    connection_threads: AtomicBool,
}

/// An NBD server for exports of type `E`. Cheap to clone; clones share state.
pub struct Server<E> {
    inner: Arc<Inner<E>>,
}

impl<E> Clone for Server<E> {
    fn clone(&self) -> Self {
        Server {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<E: Export> Server<E> {
    /// Builds a server for `exports`, checking names, block sizes and limits; no TLS and
    /// every client may use every export.
    pub fn new(
        limits: ServerLimits,
        exports: Vec<NamedExport<E>>,
    ) -> Result<Server<E>, ServerError> {
        Server::with_security(limits, exports, Security::default())
    }

    /// [`Server::new`] with TLS and access rules.
    pub fn with_security(
        limits: ServerLimits,
        exports: Vec<NamedExport<E>>,
        security: Security,
    ) -> Result<Server<E>, ServerError> {
        let budget_units = check_limits(&limits)?;
        let (infos, names) = export_infos(&exports, &limits)?;
        if security
            .tls
            .as_ref()
            .is_some_and(|t| t.mode == TlsMode::Off)
        {
            return Err(ServerError::BadLimit(
                "TLS settings need mode On or Require",
            ));
        }
        if let Some(unknown) = security
            .access
            .rules()
            .iter()
            .flat_map(|rule| &rule.exports)
            .find(|name| *name != "*" && !names.contains(*name))
        {
            return Err(ServerError::UnknownExportInRules(unknown.clone()));
        }
        let tls_acceptor = security
            .tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(Arc::clone(&t.config)));
        let (shutdown_tx, _) = watch::channel(false);
        Ok(Server {
            inner: Arc::new(Inner {
                exports,
                infos,
                limits,
                security,
                tls_acceptor,
                per_address: Mutex::new(HashMap::new()),
                connections: Arc::new(Semaphore::new(limits.max_connections)),
                payload_budget: Arc::new(Semaphore::new(budget_units)),
                shutdown_tx,
                spinners: Arc::new(Spinners::new()),
                connection_threads: AtomicBool::new(false),
            }),
        })
    }

    /// Serves each accepted connection on a thread of its own (a single-threaded tokio
    /// runtime) instead of the runtime that accepts. On a machine with few cores, many
    /// clients at queue depth 1 wake the server thread of their own connection directly,
    /// as the kernel wakes a blocked reader, rather than through a shared runtime's
    /// reactor and the hand-off between its workers (measured: BENCHMARKS.md, "Issue 18: a
    /// thread per connection"). Bulk transfers still run on the accepting runtime, so that
    /// several use several cores. Connections from [`Server::serve_stream`] stay on the
    /// caller's runtime. Applies to connections accepted from then on (clones included).
    pub fn with_connection_threads(self, on: bool) -> Self {
        self.inner.connection_threads.store(on, Ordering::Relaxed);
        self
    }

    /// Begins a graceful shutdown (idempotent). [`Server::serve`] returns once every
    /// connection has closed.
    pub fn shutdown(&self) {
        self.inner.shutdown_tx.send_replace(true);
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        *self.inner.shutdown_tx.borrow()
    }

    /// Accepts connections on `listener` until shutdown, then waits for every connection
    /// of this server to close.
    pub async fn serve(&self, listener: Listener) -> io::Result<()> {
        let mut shutdown_rx = self.inner.shutdown_tx.subscribe();
        loop {
            if *shutdown_rx.borrow_and_update() {
                break;
            }
            tokio::select! {
                _ = shutdown_rx.changed() => continue,
                accepted = accept(&listener) => match accepted {
                    Ok((conn, address, fd)) => self.spawn_connection(conn, address, Some(fd)),
                    Err(err) if is_transient_accept_error(&err) => {
                        eprintln!("larch-nbd: accept: {err}");
                        // Running out of descriptors: back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(err) => return Err(err),
                },
            }
        }
        drop(listener);
        self.wait_idle().await;
        Ok(())
    }

    /// Waits until no connection is open.
    pub async fn wait_idle(&self) {
        let all = self.inner.limits.max_connections as u32;
        // Every open connection holds a permit, so holding all of them means none is open.
        if let Ok(permits) = self.inner.connections.acquire_many(all).await {
            drop(permits);
        }
    }

    fn spawn_connection(&self, conn: Conn, address: Option<IpAddr>, spin_fd: Option<RawFd>) {
        let Ok(permit) = Arc::clone(&self.inner.connections).try_acquire_owned() else {
            eprintln!(
                "larch-nbd: refusing connection: {} connections open",
                self.inner.limits.max_connections
            );
            return;
        };
        let Some(slot) = AddressSlot::take(self, address) else {
            eprintln!(
                "larch-nbd: refusing connection from {}: {} connections open from it",
                address.map(|a| a.to_string()).unwrap_or_default(),
                self.inner.limits.max_connections_per_address
            );
            return;
        };
        let server = self.clone();
        if !self.inner.connection_threads.load(Ordering::Relaxed) {
            tokio::spawn(async move {
                server.serve_and_log(conn, address, spin_fd, None).await;
                drop(slot);
                drop(permit);
            });
            return;
        }
        let accepting = tokio::runtime::Handle::current();
        let threaded = conn::serve_on_thread(conn, (slot, permit), move |conn| async move {
            server
                .serve_and_log(conn, address, spin_fd, Some(accepting))
                .await
        });
        if let Err(err) = threaded {
            eprintln!("larch-nbd: refusing connection: {err}");
        }
    }

    /// Serves one connection to its end and logs why it ended, unless the client simply
    /// hung up (its right, not an error worth a log line). `bulk`: the runtime bulk
    /// transfers run on (`None`: this one).
    async fn serve_and_log(
        &self,
        conn: Conn,
        address: Option<IpAddr>,
        spin_fd: Option<RawFd>,
        bulk: Option<tokio::runtime::Handle>,
    ) {
        match self.serve_connection(conn, address, spin_fd, bulk).await {
            Ok(()) => {}
            Err(ConnectionError::Io(err)) if is_hang_up(&err) => {}
            Err(err) => eprintln!("larch-nbd: connection closed: {err}"),
        }
    }

    /// Serves one already-connected stream (for example stdin/stdout) to its end.
    pub async fn serve_stream<R, W>(&self, reader: R, writer: W) -> Result<(), ConnectionError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let conn = Conn::Split(Box::new(reader), Box::new(writer));
        self.serve_connection(conn, None, None, None).await
    }

    /// [`Server::serve_stream`]; `spin_fd` is the socket's descriptor when the reader is a
    /// socket (see [`Spin`]); `bulk` the runtime bulk transfers run on (`None`: this one).
    async fn serve_connection(
        &self,
        conn: Conn,
        address: Option<IpAddr>,
        spin_fd: Option<RawFd>,
        bulk: Option<tokio::runtime::Handle>,
    ) -> Result<(), ConnectionError> {
        let reader = BufReader::with_capacity(NEGOTIATION_BUFFER_BYTES, conn);
        let mut shutdown_rx = self.inner.shutdown_tx.subscribe();
        let negotiation = self.negotiate(reader, address, &mut shutdown_rx);
        let Ok(negotiated) =
            tokio::time::timeout(self.inner.limits.handshake_timeout, negotiation).await
        else {
            return Err(ConnectionError::HandshakeTimeout);
        };
        let (reader, Some(negotiated)) = negotiated? else {
            return Ok(());
        };
        let (reader, writer, bare) = into_halves(reader);
        // Spinning watches the socket. Under TLS a record may already wait decrypted in
        // the TLS state, where the socket does not show it: the spin then only costs its
        // bounded moment before the read finds it. On a bare socket the spin reads what
        // arrives itself (SpunRead). Only a connection on a thread of its own (`bulk` is
        // then the accepting runtime) may yield: on a shared runtime a watch holds up the
        // tasks behind it on its worker, so there it only spins, when nothing else works.
        let own_thread = bulk.is_some();
        let spin = spin_fd.map(|fd| Spin::new(fd, Arc::clone(&self.inner.spinners), own_thread));
        let reader = BufReader::with_capacity(128 * 1024, SpunRead::new(reader, bare));
        Transmission::new(
            &self.inner,
            reader,
            writer,
            negotiated,
            shutdown_rx,
            spin,
            bulk,
        )
        .serve()
        .await
    }

    /// What the access rules let `client` do with each export.
    fn access_of(&self, client: &ClientIdentity) -> Vec<handshake::Access> {
        let rules = &self.inner.security.access;
        self.inner
            .infos
            .iter()
            .map(|info| rules.decide(&info.name, client))
            .collect()
    }

    /// Runs the handshake (with TLS when the client starts it); returns the stream (TLS
    /// or not) and what was negotiated, `None` when the client aborted or shutdown began.
    async fn negotiate(
        &self,
        mut reader: BufReader<Conn>,
        address: Option<IpAddr>,
        shutdown_rx: &mut watch::Receiver<bool>,
    ) -> Result<(BufReader<Conn>, Option<Negotiated>), ConnectionError> {
        reader.get_mut().write_all(&handshake::greeting()).await?;
        reader.get_mut().flush().await?;
        let limits = NegotiationLimits {
            max_option_bytes: self.inner.limits.max_option_bytes,
        };
        let tls_mode = self
            .inner
            .security
            .tls
            .as_ref()
            .map_or(TlsMode::Off, |t| t.mode);
        let mut client = ClientIdentity {
            address,
            ..ClientIdentity::default()
        };
        // Each connection is told the exports' sizes as they are now (a volume may have
        // been resized since the server started); it keeps the size it was told.
        let infos = self.inner.infos_now();
        let mut negotiation = Negotiation::new(&infos, limits).with_tls(tls_mode);
        negotiation.set_access(self.access_of(&client));
        let mut input: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        // Once shutdown begins, options are answered NBD_REP_ERR_SHUTDOWN (so that the
        // client can say why it cannot connect) until the client leaves or the grace
        // period ends.
        let mut grace_end: Option<Instant> = None;
        loop {
            if grace_end.is_none() && *shutdown_rx.borrow_and_update() {
                negotiation.set_shutting_down();
                grace_end = Some(later_by(self.inner.limits.shutdown_grace));
            }
            let step = negotiation.step(&input, &mut out)?;
            if !out.is_empty() {
                reader.get_mut().write_all(&out).await?;
                reader.get_mut().flush().await?;
                out.clear();
            }
            match step {
                Step::NeedMore(total) => {
                    // `read` is cancel-safe (`read_exact` is not): when shutdown wins the
                    // race, no byte has been taken from the stream, and the next step
                    // sees the whole message.
                    let mut have = input.len();
                    input.resize(total, 0);
                    while have < total {
                        tokio::select! {
                            read = reader.read(&mut input[have..]) => match read? {
                                0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
                                n => have += n,
                            },
                            changed = shutdown_rx.changed(), if grace_end.is_none() => {
                                if changed.is_err() {
                                    // The server is gone.
                                    return Ok((reader, None));
                                }
                                input.truncate(have);
                                break;
                            }
                            () = tokio::time::sleep_until(grace_end.unwrap_or_else(far_future)),
                                if grace_end.is_some() => return Ok((reader, None)),
                        }
                    }
                }
                Step::Consumed(n) => {
                    input.drain(..n);
                }
                Step::Done {
                    consumed,
                    negotiated,
                } => {
                    // Steps never consume past the current message, and the client waits
                    // for our answer before sending requests.
                    debug_assert_eq!(consumed, input.len());
                    return Ok((reader, Some(negotiated)));
                }
                Step::Abort { .. } => return Ok((reader, None)),
                Step::StartTls { consumed } => {
                    // The client waits for the ACK before its TLS hello: anything already
                    // here was sent in plaintext where only TLS may follow.
                    if consumed != input.len() || !reader.buffer().is_empty() {
                        return Err(ConnectionError::DataBeforeTls);
                    }
                    input.clear();
                    let Some(acceptor) = &self.inner.tls_acceptor else {
                        // The negotiation only accepts STARTTLS when TLS is configured.
                        return Err(ConnectionError::DataBeforeTls);
                    };
                    // Shutdown closes a connection still in its TLS handshake, as it
                    // does one still negotiating.
                    let tls = tokio::select! {
                        tls = acceptor.accept(reader.into_inner()) => {
                            tls.map_err(ConnectionError::Tls)?
                        }
                        _ = shutdown_rx.wait_for(|down| *down) => {
                            return Err(ConnectionError::Tls(io::Error::other(
                                "shutdown during the TLS handshake",
                            )));
                        }
                    };
                    client.tls = true;
                    if let Some(cert) = tls.get_ref().1.peer_certificates().and_then(|c| c.first())
                    {
                        client.names = crate::tls::certificate_names(cert);
                    }
                    negotiation.tls_started();
                    negotiation.set_access(self.access_of(&client));
                    reader = BufReader::with_capacity(
                        NEGOTIATION_BUFFER_BYTES,
                        Conn::Tls(Box::new(tls)),
                    );
                }
            }
        }
    }
}

/// Checks `limits` for [`Server::with_security`]; returns the payload budget's size in
/// its units.
fn check_limits(limits: &ServerLimits) -> Result<usize, ServerError> {
    if limits.max_request_bytes < 64 * 1024 {
        return Err(ServerError::BadLimit(
            "max_request_bytes must be at least 64 KiB",
        ));
    }
    if limits.max_connections == 0
        || limits.max_inflight_per_connection == 0
        || limits.max_connections_per_address == 0
    {
        return Err(ServerError::BadLimit(
            "connection and in-flight limits must be positive",
        ));
    }
    if limits.max_option_bytes < 1024 {
        return Err(ServerError::BadLimit(
            "max_option_bytes must be at least 1 KiB",
        ));
    }
    // wait_idle takes every connection's permit at once, counted in a u32.
    if limits.max_connections > (Semaphore::MAX_PERMITS >> 1).min(u32::MAX as usize)
        || limits.max_inflight_per_connection > Semaphore::MAX_PERMITS >> 1
    {
        return Err(ServerError::BadLimit("limit too large"));
    }
    // Compared in the budget's units, not in bytes: a request takes its length rounded
    // up to them and the budget holds its size rounded down, and tokio's semaphore
    // serves the oldest waiter first, so a request the whole budget cannot hold would
    // stop every connection's WRITEs and READs for ever.
    let budget_units = usize::try_from(limits.max_payload_bytes_in_flight / BUDGET_UNIT_BYTES)
        .unwrap_or(usize::MAX)
        .min(Semaphore::MAX_PERMITS >> 1);
    if budget_units < budget_units_of(limits.max_request_bytes) as usize {
        return Err(ServerError::BadLimit(
            "max_payload_bytes_in_flight must hold max_request_bytes rounded up to 4 KiB",
        ));
    }
    if limits.stall_timeout.is_zero() {
        return Err(ServerError::BadLimit("stall_timeout must be positive"));
    }
    if [
        limits.stall_timeout,
        limits.shutdown_grace,
        limits.handshake_timeout,
    ]
    .iter()
    .any(|t| *t > MAX_TIMEOUT)
    {
        return Err(ServerError::BadLimit(
            "stall_timeout, shutdown_grace and handshake_timeout must be at most a day",
        ));
    }
    Ok(budget_units)
}

impl<E: Export> Inner<E> {
    /// The exports' infos with their sizes as the exports give them now.
    fn infos_now(&self) -> Vec<ExportInfo> {
        let mut infos = self.infos.clone();
        for (info, e) in infos.iter_mut().zip(&self.exports) {
            info.size_bytes = e.export.size_bytes();
        }
        infos
    }
}

/// What the negotiation tells of each of `exports` (their block sizes narrowed to
/// `limits`), and their names; checks the names, descriptions and block sizes.
fn export_infos<E: Export>(
    exports: &[NamedExport<E>],
    limits: &ServerLimits,
) -> Result<(Vec<ExportInfo>, HashSet<String>), ServerError> {
    let mut names = HashSet::new();
    let mut infos = Vec::with_capacity(exports.len());
    for e in exports {
        if !names.insert(e.name.clone()) {
            return Err(ServerError::DuplicateName(e.name.clone()));
        }
        let bad = |s: &str| s.len() > crate::proto::STRING_MAX_BYTES || s.contains('\0');
        if bad(&e.name) || bad(&e.description) {
            return Err(ServerError::BadString(e.name.clone()));
        }
        let mut sizes = e.export.block_sizes();
        sizes
            .validate()
            .map_err(|reason| ServerError::BadBlockSizes {
                name: e.name.clone(),
                reason,
            })?;
        // The server's request cap narrows what the export allows; keep the result
        // a multiple of the minimum and no smaller than the preferred size.
        let capped = sizes.maximum_bytes.min(limits.max_request_bytes);
        sizes.maximum_bytes = capped - capped % sizes.minimum_bytes;
        // The spec (and qemu) want the preferred size a power of two: round it down.
        // The minimum is a power of two no larger than the maximum, so this never
        // goes below it.
        let preferred = sizes.preferred_bytes.min(sizes.maximum_bytes);
        sizes.preferred_bytes = (1u32 << preferred.ilog2()).max(sizes.minimum_bytes);
        infos.push(ExportInfo {
            name: e.name.clone(),
            description: e.description.clone(),
            size_bytes: e.export.size_bytes(),
            features: e.export.features(),
            block_sizes: sizes,
        });
    }
    Ok((infos, names))
}

/// The payload budget counts in units of this many bytes.
const BUDGET_UNIT_BYTES: u64 = 4096;

/// Budget units a payload or reply of `len` bytes takes.
fn budget_units_of(len: u32) -> u32 {
    u32::try_from(u64::from(len).div_ceil(BUDGET_UNIT_BYTES)).unwrap_or(u32::MAX)
}

fn is_hang_up(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
    )
}
