//! A connection as the server holds it: whole during the handshake (a [`Conn`], which
//! `STARTTLS` turns into a TLS stream in place), then split into the halves transmission
//! runs on ([`into_halves`]); and its place in the per-address count ([`AddressSlot`]).

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::{Listener, Server};
use crate::export::Export;

pub(super) type BoxedRead = Box<dyn AsyncRead + Unpin + Send>;
pub(super) type BoxedWrite = Box<dyn AsyncWrite + Unpin + Send>;

/// The read buffer of the handshake (options are small; transmission gets a larger one).
pub(super) const NEGOTIATION_BUFFER_BYTES: usize = 8 * 1024;

/// A connection during the handshake: whole, because `STARTTLS` turns it into a TLS
/// stream; split into halves for transmission ([`into_halves`]).
pub(super) enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Two halves given apart (stdin and stdout).
    Split(BoxedRead, BoxedWrite),
    Tls(Box<tokio_rustls::server::TlsStream<Conn>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Split(r, _) => Pin::new(r).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Split(_, w) => Pin::new(w).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
            Conn::Unix(s) => Pin::new(s).poll_flush(cx),
            Conn::Split(_, w) => Pin::new(w).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Split(_, w) => Pin::new(w).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The halves transmission runs on, and whether the read half reads the socket itself
/// (a plain socket and nothing left over in the handshake's buffer: then bytes read from
/// the socket's descriptor directly are the next bytes of the stream). Plain sockets
/// split without a lock between the halves; bytes the handshake's buffer already holds
/// come first.
pub(super) fn into_halves(reader: BufReader<Conn>) -> (BoxedRead, BoxedWrite, bool) {
    let early = reader.buffer().to_vec();
    let mut bare = early.is_empty();
    let (read, write): (BoxedRead, BoxedWrite) = match reader.into_inner() {
        Conn::Tcp(s) => {
            let (r, w) = s.into_split();
            (Box::new(r), Box::new(w))
        }
        Conn::Unix(s) => {
            let (r, w) = s.into_split();
            (Box::new(r), Box::new(w))
        }
        Conn::Split(r, w) => {
            bare = false;
            (r, w)
        }
        Conn::Tls(s) => {
            bare = false;
            let (r, w) = tokio::io::split(*s);
            (Box::new(r), Box::new(w))
        }
    };
    if early.is_empty() {
        (read, write, bare)
    } else {
        (Box::new(io::Cursor::new(early).chain(read)), write, false)
    }
}

/// A connection's place in the per-address count, given back when dropped.
pub(super) struct AddressSlot<E: Export> {
    server: Server<E>,
    address: Option<IpAddr>,
}

impl<E: Export> AddressSlot<E> {
    /// Counts a connection from `address`; `None` when it has too many already.
    pub(super) fn take(server: &Server<E>, address: Option<IpAddr>) -> Option<AddressSlot<E>> {
        if let Some(addr) = address {
            let mut counts = server.inner.per_address.lock().expect("per-address counts");
            let count = counts.entry(addr).or_insert(0);
            if *count >= server.inner.limits.max_connections_per_address {
                return None;
            }
            *count += 1;
        }
        Some(AddressSlot {
            server: server.clone(),
            address,
        })
    }
}

impl<E: Export> Drop for AddressSlot<E> {
    fn drop(&mut self) {
        let Some(addr) = self.address else { return };
        let mut counts = self
            .server
            .inner
            .per_address
            .lock()
            .expect("per-address counts");
        if let Some(count) = counts.get_mut(&addr) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&addr);
            }
        }
    }
}

/// An accepted connection, its source address (TCP) and its socket's descriptor (valid
/// while the connection lives).
pub(super) async fn accept(listener: &Listener) -> io::Result<(Conn, Option<IpAddr>, RawFd)> {
    match listener {
        Listener::Tcp(l) => {
            let (stream, peer) = l.accept().await?;
            // Replies are small and latency-bound; Nagle would hold them back.
            stream.set_nodelay(true)?;
            let fd = stream.as_raw_fd();
            Ok((Conn::Tcp(stream), Some(peer.ip()), fd))
        }
        Listener::Unix(l) => {
            let (stream, _) = l.accept().await?;
            let fd = stream.as_raw_fd();
            Ok((Conn::Unix(stream), None, fd))
        }
    }
}

/// Whether an accept failed for a reason that passes (out of descriptors or memory for a
/// moment, a client gone before it was accepted): the listener keeps going.
pub(super) fn is_transient_accept_error(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    ) || matches!(
        err.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Serves an accepted connection on a thread of its own running a single-threaded runtime
/// ([`Server::with_connection_threads`]): the socket leaves the current runtime's reactor
/// for the new thread's, where `serve` gets it back. `held` (what the connection holds:
/// its slot, its permit) is dropped when the thread ends. Fails when no thread can be
/// started (the connection and `held` are then dropped).
pub(super) fn serve_on_thread<S, F, H>(conn: Conn, held: H, serve: S) -> io::Result<()>
where
    S: FnOnce(Conn) -> F + Send + 'static,
    F: std::future::Future<Output = ()>,
    H: Send + 'static,
{
    let detached = Detached::of(conn)?;
    std::thread::Builder::new()
        .name("larch-nbd-conn".into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(async move {
                    match detached.attach() {
                        Ok(conn) => serve(conn).await,
                        Err(err) => eprintln!("larch-nbd: connection dropped: {err}"),
                    }
                }),
                Err(err) => eprintln!("larch-nbd: connection dropped: no runtime: {err}"),
            }
            drop(held);
        })
        .map(drop)
        .map_err(|err| io::Error::new(err.kind(), format!("no thread for it: {err}")))
}

/// An accepted socket out of its runtime's reactor, on its way to a connection thread.
enum Detached {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Detached {
    /// Takes an accepted socket out of the current runtime (it stays non-blocking).
    fn of(conn: Conn) -> io::Result<Detached> {
        match conn {
            Conn::Tcp(s) => s.into_std().map(Detached::Tcp),
            Conn::Unix(s) => s.into_std().map(Detached::Unix),
            Conn::Split(..) | Conn::Tls(_) => Err(io::Error::other(
                "only an accepted socket can move to a connection thread",
            )),
        }
    }

    /// The socket in the current runtime's reactor (call on the connection's runtime).
    fn attach(self) -> io::Result<Conn> {
        match self {
            Detached::Tcp(s) => TcpStream::from_std(s).map(Conn::Tcp),
            Detached::Unix(s) => UnixStream::from_std(s).map(Conn::Unix),
        }
    }
}
