//! The server over in-memory streams with `MemExport`: handshake, pipelined requests,
//! structured and simple replies, DISC, shutdown, construction errors, the payload
//! budget, and clients that stall.

use std::sync::Arc;
use std::time::Duration;

use larch_nbd::mem::MemExport;
use larch_nbd::proto::{IHAVEOPT, chunk, cmd, cmd_flag, opt, rep};
use larch_nbd::transmission::RequestHeader;
use larch_nbd::{NamedExport, Server, ServerError, ServerLimits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

mod common;
use common::*;

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
    let cookies = successful_cookies(&mut s, 32).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_negotiation_answers_err_shutdown_then_closes() {
    let export = Arc::new(MemExport::new(65536));
    let limits = ServerLimits {
        shutdown_grace: Duration::from_secs(1),
        ..ServerLimits::default()
    };
    let srv = server_of(limits, export);
    let mut s = connect(&srv);
    let mut silent = connect(&srv);
    for c in [&mut s, &mut silent] {
        let mut greeting = [0u8; 18];
        c.read_exact(&mut greeting).await.unwrap();
        c.write_all(&3u32.to_be_bytes()).await.unwrap();
    }
    // Half of an option has arrived when shutdown begins; the rest comes after. The
    // server must neither lose the first half nor drop the client.
    let mut go = IHAVEOPT.to_be_bytes().to_vec();
    go.extend_from_slice(&opt::GO.to_be_bytes());
    go.extend_from_slice(&6u32.to_be_bytes());
    go.extend_from_slice(&[0; 6]);
    s.write_all(&go[..11]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    srv.shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.write_all(&go[11..]).await.unwrap();
    let (ty, message) = read_option_reply(&mut s).await;
    assert_eq!(
        ty,
        rep::ERR_SHUTDOWN,
        "{}",
        String::from_utf8_lossy(&message)
    );
    send_option(&mut s, opt::LIST, &[]).await;
    assert_eq!(read_option_reply(&mut s).await.0, rep::ERR_SHUTDOWN);
    send_option(&mut s, opt::ABORT, &[]).await;
    assert_eq!(read_option_reply(&mut s).await.0, rep::ACK);
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    // The client that says nothing is closed when the grace period ends.
    let ended = tokio::time::timeout(Duration::from_secs(30), silent.read_to_end(&mut rest)).await;
    assert!(matches!(ended, Ok(Ok(0))), "{ended:?}");
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

/// The payload budget bounds what all connections make the server hold: with room for
/// one 1 MiB payload, four pipelined 1 MiB writes reach the export one at a time, and all
/// of them complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_payloads_in_flight_stay_within_the_budget() {
    use std::sync::atomic::Ordering;
    const MIB: u32 = 1 << 20;
    let export = Arc::new(Held::new(MemExport::new(8 << 20)));
    let limits = ServerLimits {
        max_request_bytes: MIB,
        max_payload_bytes_in_flight: u64::from(MIB),
        ..ServerLimits::default()
    };
    let server = server_of(limits, Arc::clone(&export));
    let (mut client, _serving) = serve_one(&server, 64 << 10);
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
    let cookies = successful_cookies(&mut rx, 4).await;
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

/// Threads of this process named `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// With connection threads, every accepted connection is served on a thread of its own
/// (they are there while the clients are connected, gone once they left), small and bulk
/// requests work on them, and shutdown still waits for every connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_threads_serve_each_connection_and_end_with_it() {
    let dir = std::env::temp_dir().join(format!("larch-nbd-conn-threads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nbd.sock");
    let export = Arc::new(MemExport::new(4 << 20));
    let srv = server(vec![("", Arc::clone(&export))]).with_connection_threads(true);
    let listener = larch_nbd::Listener::Unix(tokio::net::UnixListener::bind(&path).unwrap());
    let serving = tokio::spawn({
        let srv = srv.clone();
        async move { srv.serve(listener).await }
    });
    assert_eq!(threads_named("larch-nbd-conn"), 0);
    const CLIENTS: u64 = 6;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
        handshake(&mut s, false).await;
        clients.push(s);
    }
    assert_eq!(
        threads_named("larch-nbd-conn"),
        CLIENTS as usize,
        "a thread per connection"
    );
    for (i, s) in clients.iter_mut().enumerate() {
        let i = i as u64;
        // A small write and a bulk one (spawned on the accepting runtime), then both back.
        request(s, cmd_flag::FUA, cmd::WRITE, 1, i * 512 * 1024, 4096).await;
        s.write_all(&[i as u8 + 1; 4096]).await.unwrap();
        assert_eq!(simple(s).await, (0, 1));
        request(s, 0, cmd::WRITE, 2, i * 512 * 1024 + 65536, 256 * 1024).await;
        s.write_all(&vec![i as u8 + 101; 256 * 1024]).await.unwrap();
        assert_eq!(simple(s).await, (0, 2));
        request(s, 0, cmd::READ, 3, i * 512 * 1024, 4096).await;
        assert_eq!(simple(s).await, (0, 3));
        let mut small = vec![0u8; 4096];
        s.read_exact(&mut small).await.unwrap();
        assert!(small.iter().all(|&b| b == i as u8 + 1));
        request(s, 0, cmd::READ, 4, i * 512 * 1024 + 65536, 256 * 1024).await;
        assert_eq!(simple(s).await, (0, 4));
        let mut bulk = vec![0u8; 256 * 1024];
        s.read_exact(&mut bulk).await.unwrap();
        assert!(bulk.iter().all(|&b| b == i as u8 + 101));
    }
    // Half the clients leave; their threads end.
    for mut s in clients.drain(..CLIENTS as usize / 2) {
        request(&mut s, 0, cmd::DISC, 9, 0, 0).await;
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while threads_named("larch-nbd-conn") != clients.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "threads of closed connections ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Shutdown closes the others, and serve returns once they have.
    srv.shutdown();
    for mut s in clients {
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
    }
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("serve returned after shutdown")
        .unwrap()
        .unwrap();
    while threads_named("larch-nbd-conn") != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "every connection thread ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let snapshot = export.snapshot();
    assert_eq!(snapshot[(CLIENTS - 1) as usize * 512 * 1024], CLIENTS as u8);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An export that asks for its payloads cut every `chunk` bytes and records the cuts,
/// and which pieces came in page-aligned buffers.
struct Chunked {
    inner: MemExport,
    chunk: u32,
    cuts: std::sync::Mutex<Vec<Vec<usize>>>,
    aligned: std::sync::Mutex<Vec<Vec<bool>>>,
}

impl larch_nbd::Export for Chunked {
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
        self.cuts.lock().unwrap().push(vec![data.len()]);
        self.inner.write(offset, data, fua).await
    }
    fn write_chunk_bytes(&self) -> u32 {
        self.chunk
    }
    async fn write_chunks(
        &self,
        offset: u64,
        chunks: Vec<bytes::Bytes>,
        fua: bool,
    ) -> larch_nbd::ExportResult<()> {
        self.cuts
            .lock()
            .unwrap()
            .push(chunks.iter().map(|c| c.len()).collect());
        self.aligned.lock().unwrap().push(
            chunks
                .iter()
                .map(|c| (c.as_ptr() as usize).is_multiple_of(4096))
                .collect(),
        );
        self.inner
            .write(offset, bytes::Bytes::from(chunks.concat()), fua)
            .await
    }
}

/// An export that asks for it gets each WRITE payload cut at multiples of its chunk size
/// from the start of the export (small pieces through the connection's read buffer, large
/// ones straight from the socket), the bytes in order; one that does not gets one buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_payloads_are_cut_where_the_export_asks() {
    for (chunk, offset, length, want) in [
        // Small pieces, the first and last partial.
        (4096u32, 1000u64, 10_000u32, vec![3096usize, 4096, 2808]),
        // 16K pieces (through the read buffer, into page-aligned buffers).
        (16 << 10, 0, 64 << 10, vec![16 << 10; 4]),
        // Large pieces (read past the buffer), aligned.
        (256 << 10, 0, 1 << 20, vec![256 << 10; 4]),
        // Large pieces, the write inside one.
        (256 << 10, 5, 100, vec![100]),
        // Large pieces, unaligned at both ends.
        (
            128 << 10,
            7 << 10,
            300 << 10,
            vec![121 << 10, 128 << 10, 51 << 10],
        ),
        // No cutting.
        (0, 1000, 10_000, vec![10_000]),
    ] {
        let export = Arc::new(Chunked {
            inner: MemExport::new(4 << 20),
            chunk,
            cuts: Default::default(),
            aligned: Default::default(),
        });
        let server = server_of(ServerLimits::default(), Arc::clone(&export));
        let (mut client, _serving) = serve_one(&server, 64 << 10);
        handshake(&mut client, false).await;
        let payload: Vec<u8> = (0..length).map(|i| (i % 251) as u8).collect();
        // Two writes back to back, so that the second's header and payload can sit in the
        // connection's read buffer behind the first's.
        let (mut rx, mut tx) = tokio::io::split(client);
        let sent = payload.clone();
        let sender = tokio::spawn(async move {
            for cookie in 0..2u64 {
                let h = RequestHeader {
                    flags: 0,
                    command: cmd::WRITE,
                    cookie,
                    offset: offset + cookie * (2 << 20),
                    length,
                };
                tx.write_all(&h.encode()).await.unwrap();
                tx.write_all(&sent).await.unwrap();
            }
            tx
        });
        for _ in 0..2 {
            let mut h = [0u8; 16];
            rx.read_exact(&mut h).await.unwrap();
            assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0);
        }
        drop(sender.await.unwrap());
        let cuts = export.cuts.lock().unwrap().clone();
        assert_eq!(cuts, vec![want.clone(), want.clone()], "chunk {chunk}");
        if chunk != 0 {
            // Pieces of 16 KiB or more in whole pages come page-aligned (a store writing
            // with O_DIRECT writes them as they are); the rest may lie anywhere.
            for aligned in export.aligned.lock().unwrap().iter() {
                for (len, aligned) in want.iter().zip(aligned) {
                    if *len >= 16 << 10 && len.is_multiple_of(4096) {
                        assert!(aligned, "a {len}-byte piece is not page-aligned");
                    }
                }
            }
        }
        let data = export.inner.snapshot();
        for cookie in 0..2u64 {
            let at = (offset + cookie * (2 << 20)) as usize;
            assert!(
                data[at..at + length as usize] == payload[..],
                "chunk {chunk}: the bytes of write {cookie}"
            );
        }
        server.shutdown();
    }
}

/// A WRITE header as a client sends it.
/// A client that stops sending partway through a request is disconnected, timed out,
/// after the stall timeout: in a header, in a payload it holds budget for, or in an
/// oversize payload being discarded. The budget the stalled payload held is free again:
/// another connection's WRITE of the whole budget then completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_sending_midway_is_disconnected() {
    const MIB: u32 = 1 << 20;
    let limits = ServerLimits {
        max_request_bytes: MIB,
        max_payload_bytes_in_flight: u64::from(MIB),
        stall_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    let export = Arc::new(MemExport::new(4 << 20));
    let srv = server_of(limits, Arc::clone(&export));
    let half = |len: u32| vec![7u8; len as usize / 2];
    let cases = [
        (
            "27 of a header's 28 bytes",
            write_header(1, 0, 4096)[..27].to_vec(),
        ),
        (
            "half a payload",
            [write_header(1, 0, MIB), half(MIB)].concat(),
        ),
        (
            "half an oversize payload",
            [write_header(1, 0, 2 * MIB), half(2 * MIB)].concat(),
        ),
    ];
    for (what, sent) in cases {
        let (mut client, serving) = serve_one(&srv, 64 << 10);
        handshake(&mut client, false).await;
        // The server reads all of it (the payload parts into its buffers), then waits.
        client.write_all(&sent).await.unwrap();
        ends_timed_out(what, serving).await;
        // Held until the server gave up: a client gone would be an end of stream.
        drop(client);
    }
    let (mut client, _serving) = serve_one(&srv, 64 << 10);
    let whole_budget = async {
        handshake(&mut client, false).await;
        client
            .write_all(&write_header(2, MIB.into(), MIB))
            .await
            .unwrap();
        client.write_all(&vec![9u8; MIB as usize]).await.unwrap();
        simple(&mut client).await
    };
    let reply = tokio::time::timeout(Duration::from_secs(10), whole_budget)
        .await
        .expect("a WRITE of the whole budget waits for ever: a stalled client kept it");
    assert_eq!(reply, (0, 2));
    assert!(
        export.snapshot()[MIB as usize..2 * MIB as usize]
            .iter()
            .all(|&b| b == 9)
    );
}

/// READ replies count against the payload budget until the socket has taken them: with
/// room for one maximum-size request, four maximum-size READs pipelined by a client that
/// reads no reply reach the export one at a time, only the first before the client
/// reads (the others wait for its reply to leave, not merely to be built), and all
/// complete once it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_replies_stay_within_the_budget() {
    use std::sync::atomic::Ordering;
    const MIB: u32 = 1 << 20;
    let data: Vec<u8> = (0..4 * MIB).map(|i| (i / MIB) as u8 + 1).collect();
    let export = Arc::new(Held::new(MemExport::from_vec(data, false)));
    let limits = ServerLimits {
        max_request_bytes: MIB,
        max_payload_bytes_in_flight: u64::from(MIB),
        ..ServerLimits::default()
    };
    let srv = server_of(limits, Arc::clone(&export));
    // The stream holds a small part of one reply: replies wait in the server.
    let (mut client, _serving) = serve_one(&srv, 64 << 10);
    handshake(&mut client, false).await;
    for i in 0..4u64 {
        request(&mut client, 0, cmd::READ, i, i * u64::from(MIB), MIB).await;
    }
    // Let the server start what it can, then release the reads one by one.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        export.open.add_permits(1);
    }
    assert_eq!(
        export.given.load(Ordering::SeqCst),
        1,
        "READs ran while the first one's reply still waited for the socket"
    );
    let mut cookies = Vec::new();
    for _ in 0..4 {
        let (err, cookie) = simple(&mut client).await;
        assert_eq!(err, 0, "read {cookie} failed");
        let mut got = vec![0u8; MIB as usize];
        client.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&b| b == cookie as u8 + 1), "read {cookie}");
        cookies.push(cookie);
    }
    cookies.sort_unstable();
    assert_eq!(cookies, vec![0, 1, 2, 3]);
    assert_eq!(
        export.most.load(Ordering::SeqCst),
        1,
        "the export ran more READs at once than the budget holds replies"
    );
    srv.shutdown();
}

/// A client that stops reading its replies is disconnected, timed out, after the stall
/// timeout: its queued replies would otherwise hold memory (and, for READs, payload
/// budget) for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_replies_is_disconnected() {
    let limits = ServerLimits {
        stall_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    let srv = server_of(limits, Arc::new(MemExport::new(4 << 20)));
    let (mut client, serving) = serve_one(&srv, 64 << 10);
    handshake(&mut client, false).await;
    // A reply 16 times larger than the stream holds, never read.
    request(&mut client, 0, cmd::READ, 1, 0, 1 << 20).await;
    ends_timed_out("a client reading nothing", serving).await;
    drop(client);
}

/// The payload budget must hold a request of the largest size in its own 4 KiB units, not
/// only in bytes: a budget of 1,000,000 bytes is 244 units and a 1,000,000-byte request
/// needs 245, which would wait for ever (and every request queued behind it).
#[test]
fn the_budget_must_hold_the_largest_request_in_its_units() {
    let limits = |budget_bytes| ServerLimits {
        max_request_bytes: 1_000_000,
        max_payload_bytes_in_flight: budget_bytes,
        ..ServerLimits::default()
    };
    assert!(matches!(
        Server::<MemExport>::new(limits(1_000_000), vec![]),
        Err(ServerError::BadLimit(_))
    ));
    assert!(Server::<MemExport>::new(limits(245 * 4096), vec![]).is_ok());
}

/// An export that prefers blocks larger than a server's request cap.
struct LargePreferred(MemExport);

impl larch_nbd::Export for LargePreferred {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn block_sizes(&self) -> larch_nbd::BlockSizes {
        larch_nbd::BlockSizes {
            minimum_bytes: 512,
            preferred_bytes: 1 << 20,
            maximum_bytes: 32 << 20,
        }
    }
    fn features(&self) -> larch_nbd::Features {
        self.0.features()
    }
    async fn read(&self, offset: u64, length: u32) -> larch_nbd::ExportResult<larch_nbd::ReadData> {
        self.0.read(offset, length).await
    }
    async fn write(
        &self,
        offset: u64,
        data: bytes::Bytes,
        fua: bool,
    ) -> larch_nbd::ExportResult<()> {
        self.0.write(offset, data, fua).await
    }
}

/// The block sizes of `NBD_INFO_BLOCK_SIZE` in the answer to GO: (minimum, preferred,
/// maximum).
async fn block_sizes_of_go<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> (u32, u32, u32) {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).await.unwrap();
    s.write_all(&3u32.to_be_bytes()).await.unwrap();
    send_option(s, opt::GO, &[0, 0, 0, 0, 0, 0]).await;
    let mut sizes = None;
    loop {
        let (ty, data) = read_option_reply(s).await;
        if ty == rep::ACK {
            break;
        }
        assert_eq!(ty, rep::INFO);
        if u16::from_be_bytes([data[0], data[1]]) == larch_nbd::proto::info::BLOCK_SIZE {
            let word = |at: usize| u32::from_be_bytes(data[at..at + 4].try_into().unwrap());
            sizes = Some((word(2), word(6), word(10)));
        }
    }
    sizes.expect("NBD_INFO_BLOCK_SIZE is always sent")
}

/// A request cap that is not a power of two, below the export's preferred block size,
/// still leaves a preferred size that is a power of two (the spec requires one; qemu
/// refuses others), within the advertised maximum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preferred_block_size_stays_a_power_of_two() {
    let limits = ServerLimits {
        max_request_bytes: 100_000,
        ..ServerLimits::default()
    };
    let srv = server_of(limits, Arc::new(LargePreferred(MemExport::new(1 << 20))));
    let (mut client, _serving) = serve_one(&srv, 64 << 10);
    let (minimum, preferred, maximum) = block_sizes_of_go(&mut client).await;
    assert_eq!(minimum, 512);
    assert_eq!(maximum, 100_000 - 100_000 % 512);
    assert_eq!(
        preferred,
        64 << 10,
        "the largest power of two within the maximum"
    );
}

/// An export whose size changes while it is served (as a resized volume's does); requests
/// past its size now are refused by the export itself.
struct Resizable {
    inner: MemExport,
    size_bytes: std::sync::atomic::AtomicU64,
}

impl larch_nbd::Export for Resizable {
    fn size_bytes(&self) -> u64 {
        self.size_bytes.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn features(&self) -> larch_nbd::Features {
        self.inner.features()
    }
    async fn read(&self, offset: u64, length: u32) -> larch_nbd::ExportResult<larch_nbd::ReadData> {
        if offset + u64::from(length) > self.size_bytes() {
            return Err(larch_nbd::Errno::Inval);
        }
        self.inner.read(offset, length).await
    }
    async fn write(
        &self,
        offset: u64,
        data: bytes::Bytes,
        fua: bool,
    ) -> larch_nbd::ExportResult<()> {
        self.inner.write(offset, data, fua).await
    }
}

/// The export's size of `NBD_INFO_EXPORT` in the answer to GO.
async fn size_of_go<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> u64 {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).await.unwrap();
    s.write_all(&3u32.to_be_bytes()).await.unwrap();
    send_option(s, opt::GO, &[0, 0, 0, 0, 0, 0]).await;
    let mut size = None;
    loop {
        let (ty, data) = read_option_reply(s).await;
        if ty == rep::ACK {
            break;
        }
        assert_eq!(ty, rep::INFO);
        if u16::from_be_bytes([data[0], data[1]]) == larch_nbd::proto::info::EXPORT {
            size = Some(u64::from_be_bytes(data[2..10].try_into().unwrap()));
        }
    }
    size.expect("NBD_INFO_EXPORT is always sent")
}

/// Each handshake tells the export's size as it is then: a connection made after a
/// resize sees the new size, one made before keeps the size it was told (the server
/// refuses requests past it, the export those past its new end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_is_told_the_size_of_its_handshake() {
    let export = Arc::new(Resizable {
        inner: MemExport::new(1 << 20),
        size_bytes: (64 << 10).into(),
    });
    let srv = server_of(ServerLimits::default(), Arc::clone(&export));
    let (mut before, _serving) = serve_one(&srv, 64 << 10);
    assert_eq!(size_of_go(&mut before).await, 64 << 10);
    export
        .size_bytes
        .store(128 << 10, std::sync::atomic::Ordering::SeqCst);
    let (mut after, _serving) = serve_one(&srv, 64 << 10);
    assert_eq!(size_of_go(&mut after).await, 128 << 10);
    // Past the old size: refused by the server on the old connection, served on the new.
    request(&mut before, 0, cmd::READ, 1, 64 << 10, 4096).await;
    assert_eq!(
        simple(&mut before).await,
        (22, 1),
        "EINVAL past the size it was told"
    );
    request(&mut after, 0, cmd::READ, 2, 64 << 10, 4096).await;
    assert_eq!(simple(&mut after).await, (0, 2));
    let mut data = [1u8; 4096];
    after.read_exact(&mut data).await.unwrap();
    assert!(data.iter().all(|&b| b == 0));
    // Shrunk below the old size: the old connection's request reaches the export, which
    // refuses it.
    export
        .size_bytes
        .store(16 << 10, std::sync::atomic::Ordering::SeqCst);
    request(&mut before, 0, cmd::READ, 3, 32 << 10, 4096).await;
    assert_eq!(
        simple(&mut before).await,
        (22, 3),
        "EINVAL past the new end"
    );
}
