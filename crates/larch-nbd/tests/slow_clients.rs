//! Clients that hold what the server shares without using it: payloads trickled in,
//! replies read a trickle at a time, requests under way when shutdown begins, requests
//! with no payload that still make the export hold buffers, and floods of small READs
//! whose replies are never read.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{
    Held, ends_timed_out, handshake, request, serve_one, server_of, simple, successful_cookies,
    write_header,
};
use larch_nbd::mem::MemExport;
use larch_nbd::proto::cmd;
use larch_nbd::{Server, ServerError, ServerLimits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: u32 = 1 << 20;

/// A client that sends a WRITE payload a byte at a time, each byte within the stall
/// timeout, is cut off once the payload has taken the stall timeout plus its length at
/// 256 KiB/s: it would otherwise hold its share of the payload budget for as long as it
/// likes (a 64 KiB payload: 0.2 s + 0.25 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_a_payload_is_cut_off() {
    let limits = ServerLimits {
        stall_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    let srv = server_of(limits, Arc::new(MemExport::new(4 << 20)));
    let (mut client, serving) = serve_one(&srv, 64 << 10);
    handshake(&mut client, false).await;
    client
        .write_all(&write_header(1, 0, 64 << 10))
        .await
        .unwrap();
    let trickle = tokio::spawn(async move {
        // 300 bytes, one per 50 ms: 15 s (past the 10 s the test waits), each byte well
        // within the stall timeout.
        for _ in 0..300 {
            if client.write_all(&[7]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client
    });
    ends_timed_out("a payload trickled in", serving).await;
    trickle.abort();
}

/// A client that reads its replies a few bytes at a time, each read within the stall
/// timeout, is cut off once the replies waiting move slower than 256 KiB/s over a stall
/// timeout: its READ replies would otherwise hold payload budget for hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reading_replies_a_trickle_at_a_time_is_cut_off() {
    let limits = ServerLimits {
        stall_timeout: Duration::from_millis(200),
        ..ServerLimits::default()
    };
    let srv = server_of(limits, Arc::new(MemExport::new(4 << 20)));
    let (mut client, serving) = serve_one(&srv, 4 << 10);
    handshake(&mut client, false).await;
    request(&mut client, 0, cmd::READ, 1, 0, MIB).await;
    let trickle = tokio::spawn(async move {
        let mut some = [0u8; 16];
        // 15 s of it, past the 10 s the test waits.
        for _ in 0..300 {
            if client.read_exact(&mut some).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client
    });
    ends_timed_out("replies read 16 bytes per 50 ms", serving).await;
    trickle.abort();
}

/// A shutdown that begins while a client is partway through sending a request still
/// ends the connection within the grace, however the client goes on trickling bytes in:
/// before, the grace was looked at only before a read began, so the daemon's stop
/// waited for the trickle to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_a_trickled_request_ends_it_within_the_grace() {
    let limits = ServerLimits {
        stall_timeout: Duration::from_secs(1),
        shutdown_grace: Duration::from_millis(100),
        ..ServerLimits::default()
    };
    for (what, start) in [
        ("a payload", write_header(1, 0, MIB)),
        ("a header", write_header(1, 0, MIB)[..20].to_vec()),
    ] {
        let srv = server_of(limits, Arc::new(MemExport::new(4 << 20)));
        let (mut client, serving) = serve_one(&srv, 64 << 10);
        handshake(&mut client, false).await;
        client.write_all(&start).await.unwrap();
        let trickle = tokio::spawn(async move {
            // One byte per 300 ms for 6 s (the header's 8 missing bytes end sooner,
            // then the payload's go on).
            for _ in 0..20 {
                if client.write_all(&[7]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            client
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        srv.shutdown();
        let ended = tokio::time::timeout(Duration::from_secs(3), serving).await;
        assert!(
            ended.is_ok(),
            "{what}: the connection outlived its grace by seconds"
        );
        let idle = tokio::time::timeout(Duration::from_secs(1), srv.wait_idle()).await;
        assert!(
            idle.is_ok(),
            "{what}: the server still counts the connection"
        );
        trickle.abort();
    }
}

/// WRITE_ZEROES carries no payload, but the export holds buffers while it zeroes (the
/// engine: 1 MiB of zeroes and the blocks made of them): it takes its share of the
/// payload budget too. With room for one 1 MiB request, four pipelined 1 MiB
/// WRITE_ZEROES reach the export one at a time, and all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_zeroes_stay_within_the_budget() {
    let export = Arc::new(Held::new(MemExport::new(8 << 20)));
    let limits = ServerLimits {
        max_request_bytes: MIB,
        max_payload_bytes_in_flight: u64::from(MIB),
        ..ServerLimits::default()
    };
    let srv = server_of(limits, Arc::clone(&export));
    let (mut client, _serving) = serve_one(&srv, 1 << 20);
    handshake(&mut client, false).await;
    for i in 0..4u64 {
        request(
            &mut client,
            0,
            cmd::WRITE_ZEROES,
            i,
            i * u64::from(MIB),
            MIB,
        )
        .await;
    }
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        export.open.add_permits(1);
    }
    let cookies = successful_cookies(&mut client, 4).await;
    assert_eq!(cookies, vec![0, 1, 2, 3]);
    assert_eq!(
        export.most.load(Ordering::SeqCst),
        1,
        "the export ran more WRITE_ZEROES at once than the budget holds"
    );
    srv.shutdown();
}

/// Small READs skip the payload budget; what bounds their replies is a per-connection
/// cap on the reply bytes waiting that hold no budget (8 MiB): a client that pipelines
/// 4,096 READs of 4 KiB (16 MiB of replies) and reads none has the server stop reading
/// its requests near 8 MiB of replies, not at the 64 MiB the queue allows in all. Once it
/// reads, every reply arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_read_replies_waiting_are_bounded_per_connection() {
    const READS: u64 = 4096;
    let export = Arc::new(Held::new(MemExport::new(16 << 20)));
    export.open.add_permits(1 << 20);
    let srv = server_of(ServerLimits::default(), Arc::clone(&export));
    let (mut client, _serving) = serve_one(&srv, 64 << 10);
    handshake(&mut client, false).await;
    let (mut rx, mut tx) = tokio::io::split(client);
    let sender = tokio::spawn(async move {
        for i in 0..READS {
            request(&mut tx, 0, cmd::READ, i, i * 4096, 4096).await;
        }
        tx
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let given = export.given.load(Ordering::SeqCst) as u64;
    // 8 MiB of replies of 4,112 bytes (+64 counted per part) and 128 in flight.
    let bound = (8 << 20) / 4096 + 128 + 64;
    assert!(
        given <= bound,
        "{given} READs ran with no reply read (at most {bound} should)"
    );
    for _ in 0..READS {
        let (err, _) = simple(&mut rx).await;
        assert_eq!(err, 0);
        let mut data = [0u8; 4096];
        rx.read_exact(&mut data).await.unwrap();
    }
    let _tx = sender.await.unwrap();
    assert_eq!(export.given.load(Ordering::SeqCst) as u64, READS);
    srv.shutdown();
}

/// Timeouts past a day are configuration mistakes, refused with a clear error (a far
/// deadline used to overflow `Instant` and panic every connection).
#[test]
fn timeouts_longer_than_a_day_are_refused() {
    let day = Duration::from_secs(86400);
    for limits in [
        ServerLimits {
            stall_timeout: day * 2,
            ..ServerLimits::default()
        },
        ServerLimits {
            shutdown_grace: Duration::MAX,
            ..ServerLimits::default()
        },
        ServerLimits {
            handshake_timeout: day + Duration::from_secs(1),
            ..ServerLimits::default()
        },
    ] {
        assert!(matches!(
            Server::<MemExport>::new(limits, vec![]),
            Err(ServerError::BadLimit(_))
        ));
    }
    let a_day = ServerLimits {
        stall_timeout: day,
        shutdown_grace: day,
        handshake_timeout: day,
        ..ServerLimits::default()
    };
    assert!(Server::<MemExport>::new(a_day, vec![]).is_ok());
}
