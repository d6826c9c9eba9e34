//! The server over in-memory streams with `MemExport`: handshake, pipelined requests,
//! structured and simple replies, DISC, shutdown, and construction errors.

use std::sync::Arc;
use std::time::Duration;

use larch_nbd::mem::MemExport;
use larch_nbd::proto::{IHAVEOPT, chunk, cmd, cmd_flag, opt, rep};
use larch_nbd::transmission::RequestHeader;
use larch_nbd::{NamedExport, Server, ServerError, ServerLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

fn server(exports: Vec<(&str, Arc<MemExport>)>) -> Server<MemExport> {
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

/// Connects a client stream to the server; the server side runs in a task.
fn connect(server: &Server<MemExport>) -> DuplexStream {
    let (client, served) = tokio::io::duplex(1 << 20);
    let server = server.clone();
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(served);
        let _ = server.serve_stream(r, w).await;
    });
    client
}

async fn send_option(s: &mut DuplexStream, option: u32, data: &[u8]) {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    s.write_all(&v).await.unwrap();
}

async fn read_option_reply(s: &mut DuplexStream) -> (u32, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).await.unwrap();
    let mut data = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
    s.read_exact(&mut data).await.unwrap();
    (u32::from_be_bytes(h[12..16].try_into().unwrap()), data)
}

/// Greeting, flags, optionally structured replies + base:allocation, then GO "".
async fn handshake(s: &mut DuplexStream, structured: bool) {
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

async fn request(
    s: &mut DuplexStream,
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
async fn simple(s: &mut DuplexStream) -> (u32, u64) {
    let mut h = [0u8; 16];
    s.read_exact(&mut h).await.unwrap();
    assert_eq!(&h[0..4], &0x6744_6698u32.to_be_bytes());
    (
        u32::from_be_bytes(h[4..8].try_into().unwrap()),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
    )
}

/// Reads one structured chunk: (flags, type, cookie, payload).
async fn chunk(s: &mut DuplexStream) -> (u16, u16, u64, Vec<u8>) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_with_structured_replies() {
    let export = Arc::new(MemExport::new(1 << 20));
    let srv = server(vec![("", Arc::clone(&export))]);
    let mut s = connect(&srv);
    handshake(&mut s, true).await;
    // 32 writes pipelined before reading any reply.
    for i in 0..32u64 {
        request(&mut s, cmd_flag::FUA, cmd::WRITE, 100 + i, i * 4096, 4096).await;
        s.write_all(&[i as u8 + 1; 4096]).await.unwrap();
    }
    let mut cookies: Vec<u64> = Vec::new();
    for _ in 0..32 {
        let (err, cookie) = simple(&mut s).await;
        assert_eq!(err, 0);
        cookies.push(cookie);
    }
    cookies.sort_unstable();
    assert_eq!(cookies, (100..132).collect::<Vec<_>>());
    assert_eq!(export.snapshot()[5 * 4096], 6);

    request(&mut s, 0, cmd::READ, 7, 4096, 4096).await;
    let (flags, ty, cookie, payload) = chunk(&mut s).await;
    assert_eq!(
        (flags, ty, cookie),
        (chunk::FLAG_DONE, chunk::OFFSET_DATA, 7)
    );
    assert_eq!(&payload[0..8], &4096u64.to_be_bytes());
    assert!(payload[8..].iter().all(|&b| b == 2));

    request(&mut s, 0, cmd::READ, 8, 1 << 20, 1).await;
    let (_, ty, cookie, payload) = chunk(&mut s).await;
    assert_eq!((ty, cookie), (chunk::ERROR, 8));
    assert_eq!(&payload[0..4], &22u32.to_be_bytes());

    request(&mut s, cmd_flag::REQ_ONE, cmd::BLOCK_STATUS, 9, 0, 65536).await;
    let (_, ty, _, payload) = chunk(&mut s).await;
    assert_eq!(ty, chunk::BLOCK_STATUS);
    assert_eq!(payload.len(), 12, "one extent");

    request(&mut s, 0, cmd::DISC, 10, 0, 0).await;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "no reply to DISC, then EOF");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_replies_and_read_only() {
    let export = Arc::new(MemExport::from_vec(vec![9u8; 8192], true));
    let srv = server(vec![("", export)]);
    let mut s = connect(&srv);
    handshake(&mut s, false).await;
    request(&mut s, 0, cmd::WRITE, 1, 0, 100).await;
    s.write_all(&[0u8; 100]).await.unwrap();
    assert_eq!(simple(&mut s).await, (1, 1), "EPERM");
    request(&mut s, 0, cmd::READ, 2, 8000, 192).await;
    assert_eq!(simple(&mut s).await, (0, 2));
    let mut data = [0u8; 192];
    s.read_exact(&mut data).await.unwrap();
    assert!(data.iter().all(|&b| b == 9));
    request(&mut s, 0, cmd::BLOCK_STATUS, 3, 0, 512).await;
    assert_eq!(simple(&mut s).await, (22, 3), "no context negotiated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_eshutdown_then_closes() {
    let export = Arc::new(MemExport::new(65536));
    let limits = ServerLimits {
        shutdown_grace: Duration::from_secs(30),
        ..ServerLimits::default()
    };
    let srv = Server::new(
        limits,
        vec![NamedExport {
            name: String::new(),
            description: String::new(),
            export,
        }],
    )
    .unwrap();
    let mut s = connect(&srv);
    handshake(&mut s, false).await;
    request(&mut s, 0, cmd::READ, 1, 0, 16).await;
    assert_eq!(simple(&mut s).await, (0, 1));
    let mut data = [0u8; 16];
    s.read_exact(&mut data).await.unwrap();
    srv.shutdown();
    assert!(srv.is_shutting_down());
    // The connection task notices the signal before its next request arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    request(&mut s, 0, cmd::READ, 2, 0, 16).await;
    assert_eq!(simple(&mut s).await, (108, 2), "ESHUTDOWN");
    request(&mut s, 0, cmd::DISC, 3, 0, 0).await;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    srv.wait_idle().await;
}

#[test]
fn construction_errors() {
    let e = || Arc::new(MemExport::new(4096));
    let dup = Server::new(
        ServerLimits::default(),
        vec![
            NamedExport {
                name: "a".into(),
                description: String::new(),
                export: e(),
            },
            NamedExport {
                name: "a".into(),
                description: String::new(),
                export: e(),
            },
        ],
    );
    assert!(matches!(dup, Err(ServerError::DuplicateName(n)) if n == "a"));
    let tiny = ServerLimits {
        max_request_bytes: 100,
        ..ServerLimits::default()
    };
    assert!(matches!(
        Server::<MemExport>::new(tiny, vec![]),
        Err(ServerError::BadLimit(_))
    ));
    let no_room = ServerLimits {
        max_payload_bytes_in_flight: 1 << 20,
        ..ServerLimits::default()
    };
    assert!(matches!(
        Server::<MemExport>::new(no_room, vec![]),
        Err(ServerError::BadLimit(_))
    ));
    let rules = larch_nbd::AccessRules::allow_list(vec![larch_nbd::AccessRule {
        exports: vec!["a".into(), "typo".into()],
        ..larch_nbd::AccessRule::default()
    }]);
    let security = larch_nbd::Security {
        tls: None,
        access: rules,
    };
    let export = NamedExport {
        name: "a".into(),
        description: String::new(),
        export: Arc::new(MemExport::new(4096)),
    };
    let typo = Server::with_security(ServerLimits::default(), vec![export], security);
    assert!(matches!(typo, Err(ServerError::UnknownExportInRules(n)) if n == "typo"));
}

/// An export whose writes wait for the test to let them through, counting how many it
/// holds at once.
struct HeldWrites {
    inner: MemExport,
    open: tokio::sync::Semaphore,
    holding: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl larch_nbd::Export for HeldWrites {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn features(&self) -> larch_nbd::Features {
        self.inner.features()
    }
    async fn read(&self, offset: u64, length: u32) -> larch_nbd::ExportResult<larch_nbd::ReadData> {
        self.inner.read(offset, length).await
    }
    async fn write(
        &self,
        offset: u64,
        data: bytes::Bytes,
        fua: bool,
    ) -> larch_nbd::ExportResult<()> {
        use std::sync::atomic::Ordering;
        let now = self.holding.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.open.acquire().await.unwrap().forget();
        self.holding.fetch_sub(1, Ordering::SeqCst);
        self.inner.write(offset, data, fua).await
    }
}

/// The payload budget bounds what all connections make the server hold: with room for
/// one 1 MiB payload, four pipelined 1 MiB writes reach the export one at a time, and all
/// of them complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_payloads_in_flight_stay_within_the_budget() {
    use std::sync::atomic::Ordering;
    const MIB: u32 = 1 << 20;
    let export = Arc::new(HeldWrites {
        inner: MemExport::new(8 << 20),
        open: tokio::sync::Semaphore::new(0),
        holding: Default::default(),
        most: Default::default(),
    });
    let limits = ServerLimits {
        max_request_bytes: MIB,
        max_payload_bytes_in_flight: u64::from(MIB),
        ..ServerLimits::default()
    };
    let server = Server::new(
        limits,
        vec![NamedExport {
            name: String::new(),
            description: String::new(),
            export: Arc::clone(&export),
        }],
    )
    .unwrap();
    let (mut client, served) = tokio::io::duplex(64 << 10);
    let serving = server.clone();
    tokio::spawn(async move {
        let (r, w) = tokio::io::split(served);
        let _ = serving.serve_stream(r, w).await;
    });
    handshake(&mut client, false).await;
    let (mut rx, mut tx) = tokio::io::split(client);
    let sender = tokio::spawn(async move {
        for i in 0..4u64 {
            let h = RequestHeader {
                flags: 0,
                command: cmd::WRITE,
                cookie: i,
                offset: i * u64::from(MIB),
                length: MIB,
            };
            tx.write_all(&h.encode()).await.unwrap();
            tx.write_all(&vec![i as u8 + 1; MIB as usize])
                .await
                .unwrap();
        }
        tx
    });
    // Let the server take what it can, then release the writes one by one.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        export.open.add_permits(1);
    }
    let mut cookies = Vec::new();
    for _ in 0..4 {
        let mut h = [0u8; 16];
        rx.read_exact(&mut h).await.unwrap();
        assert_eq!(
            u32::from_be_bytes(h[4..8].try_into().unwrap()),
            0,
            "write failed"
        );
        cookies.push(u64::from_be_bytes(h[8..16].try_into().unwrap()));
    }
    cookies.sort_unstable();
    assert_eq!(cookies, vec![0, 1, 2, 3]);
    assert_eq!(
        export.most.load(Ordering::SeqCst),
        1,
        "the export saw more payloads at once than the budget holds"
    );
    let data = export.inner.snapshot();
    for i in 0..4usize {
        assert!(
            data[i << 20..(i + 1) << 20]
                .iter()
                .all(|&b| b == i as u8 + 1)
        );
    }
    drop(sender.await.unwrap());
    server.shutdown();
}
