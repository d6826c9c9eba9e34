//! The loopback HTTP endpoint of `larch serve`: `/metrics` (Prometheus text), `/arcstats`
//! (kstat style: name, type, value) and `/status` (the JSON of `larch status --json`).
//! A minimal HTTP/1.1 server: GET only, one request per connection, bounded request size.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use larch_engine::Pool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Longest request head accepted.
const MAX_REQUEST_BYTES: usize = 8192;

fn is_gauge(name: &str) -> bool {
    name.contains("size")
        || name.ends_with("_data")
        || name.ends_with("_metadata")
        || matches!(
            name,
            "c" | "c_min"
                | "c_max"
                | "p"
                | "meta"
                | "pd"
                | "pm"
                | "l2_blocks"
                | "l2_ndev"
                | "hash_elements"
                | "arc_no_grow"
                | "memory_available_bytes"
        )
}

/// Prometheus text exposition of the arcstats and the backing-store counters.
pub fn metrics(pool: &Pool) -> String {
    let mut out = String::new();
    for (name, value) in pool.engine.arcstats() {
        let (kind, metric) = if is_gauge(&name) {
            ("gauge", format!("larch_arcstats_{name}"))
        } else {
            ("counter", format!("larch_arcstats_{name}_total"))
        };
        out += &format!("# TYPE {metric} {kind}\n{metric} {value}\n");
    }
    type Counter = fn(&larch_engine::backing::BackingStats) -> u64;
    let families: [(&str, Counter); 5] = [
        ("reads", |s| s.reads.load(Ordering::Relaxed)),
        ("read_bytes", |s| s.read_bytes.load(Ordering::Relaxed)),
        ("writes", |s| s.writes.load(Ordering::Relaxed)),
        ("write_bytes", |s| s.write_bytes.load(Ordering::Relaxed)),
        ("errors", |s| s.errors.load(Ordering::Relaxed)),
    ];
    for (family, get) in families {
        let metric = format!("larch_backing_{family}_total");
        out += &format!("# TYPE {metric} counter\n");
        for v in &pool.volumes {
            out += &format!(
                "{metric}{{volume=\"{}\"}} {}\n",
                v.name,
                get(&v.backing().stats)
            );
        }
    }
    type DeviceCounter = fn(&larch_engine::DeviceIo) -> u64;
    let device_families: [(&str, DeviceCounter); 5] = [
        ("reads", |d| d.reads.load(Ordering::Relaxed)),
        ("read_bytes", |d| d.read_bytes.load(Ordering::Relaxed)),
        ("read_errors", |d| d.read_errors.load(Ordering::Relaxed)),
        ("writes", |d| d.writes.load(Ordering::Relaxed)),
        ("write_bytes", |d| d.write_bytes.load(Ordering::Relaxed)),
    ];
    let devices = pool.engine.devices();
    for (family, get) in device_families {
        let metric = format!("larch_cache_device_{family}_total");
        out += &format!("# TYPE {metric} counter\n");
        for d in &devices {
            out += &format!(
                "{metric}{{device=\"{}\"}} {}\n",
                d.path.display(),
                get(&d.io)
            );
        }
    }
    out
}

/// The arcstats as OpenZFS prints its kstat file (type 4 = uint64).
pub fn arcstats(pool: &Pool) -> String {
    let mut out = String::from("name                            type data\n");
    for (name, value) in pool.engine.arcstats() {
        out += &format!("{name:<32}4    {value}\n");
    }
    out
}

fn answer(
    pool: &Pool,
    status: fn(&Pool) -> serde_json::Value,
    head: &str,
) -> (u16, &'static str, String) {
    let mut parts = head.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return (405, "text/plain", "only GET\n".to_string());
    }
    match path.split('?').next().unwrap_or("") {
        "/metrics" => (200, "text/plain; version=0.0.4", metrics(pool)),
        "/arcstats" => (200, "text/plain", arcstats(pool)),
        "/status" => (200, "application/json", status(pool).to_string()),
        "/" => (
            200,
            "text/plain",
            "larch: /metrics /arcstats /status\n".to_string(),
        ),
        _ => (404, "text/plain", "not found\n".to_string()),
    }
}

/// Serves HTTP on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, pool: Arc<Pool>, status: fn(&Pool) -> serde_json::Value) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let pool = Arc::clone(&pool);
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST_BYTES {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf);
            let first = head.lines().next().unwrap_or("").to_string();
            let (code, kind, body) = answer(&pool, status, &first);
            let reason = match code {
                200 => "OK",
                404 => "Not Found",
                _ => "Method Not Allowed",
            };
            let response = format!(
                "HTTP/1.1 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
