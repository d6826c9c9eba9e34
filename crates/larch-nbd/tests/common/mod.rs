//! Helpers shared by the integration-test binaries of `larch-nbd`: servers over
//! in-memory streams, a client's side of the handshake and of requests, and an export
//! that holds requests until the test lets them through (not every binary uses each).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use larch_nbd::mem::MemExport;
use larch_nbd::proto::{IHAVEOPT, cmd, opt, rep};
use larch_nbd::transmission::RequestHeader;
use larch_nbd::{ConnectionError, Export, NamedExport, Server, ServerLimits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

#[allow(dead_code)]
pub fn server(exports: Vec<(&str, Arc<MemExport>)>) -> Server<MemExport> {
    let exports = exports
        .into_iter()
        .map(|(name, export)| NamedExport {
            name: name.into(),
            description: String::new(),
            export,
        })
        .collect();
    Server::new(ServerLimits::default(), exports).expect("valid server")
}

/// A server of one export, the default one.
#[allow(dead_code)]
pub fn server_of<E: Export>(limits: ServerLimits, export: Arc<E>) -> Server<E> {
    let export = NamedExport {
        name: String::new(),
        description: String::new(),
        export,
    };
    Server::new(limits, vec![export]).expect("valid server")
}

/// Connects a client stream of `buffer_bytes` to the server; the server side runs in a
/// task whose result tells how the connection ended.
#[allow(dead_code)]
pub fn serve_one<E: Export>(
    server: &Server<E>,
    buffer_bytes: usize,
) -> (
    DuplexStream,
    tokio::task::JoinHandle<Result<(), ConnectionError>>,
) {
    let (client, served) = tokio::io::duplex(buffer_bytes);
    let server = server.clone();
    let serving = tokio::spawn(async move {
        let (r, w) = tokio::io::split(served);
        server.serve_stream(r, w).await
    });
    (client, serving)
}

/// Waits (at most 10 s) for a connection to end, and checks that it ended timed out.
#[allow(dead_code)]
pub async fn ends_timed_out(
    what: &str,
    serving: tokio::task::JoinHandle<Result<(), ConnectionError>>,
) {
    let ended = tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .unwrap_or_else(|_| panic!("{what}: the connection is still open after 10 s"))
        .unwrap();
    match ended {
        Err(ConnectionError::Io(err)) => {
            assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{what}: {err}");
        }
        other => panic!("{what}: the connection ended with {other:?}"),
    }
}

/// Connects a client stream to the server; the server side runs in a task.
#[allow(dead_code)]
pub fn connect(server: &Server<MemExport>) -> DuplexStream {
    let (client, served) = tokio::io::duplex(1 << 20);
    let server = server.clone();
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(served);
        let _ = server.serve_stream(r, w).await;
    });
    client
}

#[allow(dead_code)]
pub async fn send_option<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, option: u32, data: &[u8]) {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    s.write_all(&v).await.unwrap();
}

#[allow(dead_code)]
pub async fn read_option_reply<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> (u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).await.unwrap();
    let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
    s.read_exact(&mut data).await.unwrap();
    (u32::from_be_bytes(h[12..16].try_into().unwrap()), data)
}

/// Greeting, flags, optionally structured replies + base:allocation, then GO "".
#[allow(dead_code)]
pub async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, structured: bool) {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    s.write_all(&3u32.to_be_bytes()).await.unwrap();
    if structured {
        send_option(s, opt::STRUCTURED_REPLY, &[]).await;
        assert_eq!(read_option_reply(s).await.0, rep::ACK);
        let q = b"base:allocation";
        let mut meta = 0u32.to_be_bytes().to_vec();
        meta.extend_from_slice(&1u32.to_be_bytes());
        meta.extend_from_slice(&(q.len() as u32).to_be_bytes());
        meta.extend_from_slice(q);
        send_option(s, opt::SET_META_CONTEXT, &meta).await;
        assert_eq!(read_option_reply(s).await.0, rep::META_CONTEXT);
        assert_eq!(read_option_reply(s).await.0, rep::ACK);
    }
    send_option(s, opt::GO, &[0, 0, 0, 0, 0, 0]).await;
    loop {
        let (ty, _) = read_option_reply(s).await;
        if ty == rep::ACK {
            break;
        }
        assert_eq!(ty, rep::INFO);
    }
}

#[allow(dead_code)]
pub async fn request<S: AsyncWrite + Unpin>(
    s: &mut S,
    flags: u16,
    command: u16,
    cookie: u64,
    offset: u64,
    length: u32,
) {
    let h = RequestHeader {
        flags,
        command,
        cookie,
        offset,
        length,
    };
    s.write_all(&h.encode()).await.unwrap();
}

/// Reads one simple reply: (error, cookie).
#[allow(dead_code)]
pub async fn simple<S: AsyncRead + Unpin>(s: &mut S) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).await.unwrap();
    assert_eq!(&h[0..4], &0x6744_6698u32.to_be_bytes());
    (
        u32::from_be_bytes(h[4..8].try_into().unwrap()),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
    )
}

/// Reads `n` simple replies that carry no data, checks that each succeeded, and returns
/// their cookies in order.
#[allow(dead_code)]
pub async fn successful_cookies<S: AsyncRead + Unpin>(s: &mut S, n: usize) -> Vec<u64> {
    let mut cookies = Vec::with_capacity(n);
    for _ in 0..n {
        let (err, cookie) = simple(s).await;
        assert_eq!(err, 0, "request {cookie} failed");
        cookies.push(cookie);
    }
    cookies.sort_unstable();
    cookies
}

/// Reads one structured chunk: (flags, type, cookie, payload).
#[allow(dead_code)]
pub async fn chunk<S: AsyncRead + Unpin>(s: &mut S) -> (u16, u16, u64, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).await.unwrap();
    assert_eq!(&h[0..4], &0x668e_33efu32.to_be_bytes());
    let mut payload = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
    s.read_exact(&mut payload).await.unwrap();
    (
        u16::from_be_bytes([h[4], h[5]]),
        u16::from_be_bytes([h[6], h[7]]),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
        payload,
    )
}

/// An export whose reads and writes wait for the test to let them through, counting how
/// many it holds at once and how many it has been given.
#[allow(dead_code)]
pub struct Held {
    pub inner: MemExport,
    pub open: tokio::sync::Semaphore,
    pub holding: std::sync::atomic::AtomicUsize,
    pub most: std::sync::atomic::AtomicUsize,
    pub given: std::sync::atomic::AtomicUsize,
}

impl Held {
    pub fn new(inner: MemExport) -> Held {
        Held {
            inner,
            open: tokio::sync::Semaphore::new(0),
            holding: Default::default(),
            most: Default::default(),
            given: Default::default(),
        }
    }

    /// Waits for the test to let one request through.
    pub async fn gate(&self) {
        use std::sync::atomic::Ordering;
        self.given.fetch_add(1, Ordering::SeqCst);
        let now = self.holding.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.open.acquire().await.unwrap().forget();
        self.holding.fetch_sub(1, Ordering::SeqCst);
    }
}

impl larch_nbd::Export for Held {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn features(&self) -> larch_nbd::Features {
        self.inner.features()
    }
    async fn read(&self, offset: u64, length: u32) -> larch_nbd::ExportResult<larch_nbd::ReadData> {
        self.gate().await;
        self.inner.read(offset, length).await
    }
    async fn write(
        &self,
        offset: u64,
        data: bytes::Bytes,
        fua: bool,
    ) -> larch_nbd::ExportResult<()> {
        self.gate().await;
        self.inner.write(offset, data, fua).await
    }
    async fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        flags: larch_nbd::ZeroFlags,
    ) -> larch_nbd::ExportResult<()> {
        self.gate().await;
        self.inner.write_zeroes(offset, length, flags).await
    }
}

#[allow(dead_code)]
pub fn write_header(cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    let h = RequestHeader {
        flags: 0,
        command: cmd::WRITE,
        cookie,
        offset,
        length,
    };
    h.encode().to_vec()
}
