//! `larch serve`: opens (or creates, as a demo) a pool and serves its volumes over NBD
//! through the ARC and the cache devices. The daemon writes `status.json` every second
//! (what `larch status`, `arcstat` and `iostat` read) and records its HTTP address in
//! `daemon.json`, through which `larch set` and `larch cache` change it at once
//! (`http.rs`). It also re-reads `tunables.json` and `pool.json` when they change, which
//! is how edits made while no HTTP endpoint answered reach it.

use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use larch_engine::manage::{self, Target};
use larch_engine::{
    DemoSizes, DeviceState, LatencySnapshot, Pool, PoolConfig, PoolLock, Volume, create_demo,
    tunables,
};
use larch_nbd::{Listener, NamedExport, Server, ServerLimits};
use serde_json::json;

use crate::daemon::{self, DaemonRecord};
use larch_engine::units::{format_size, parse_size};

/// Name of the status file the daemon keeps in the state directory.
pub const STATUS_FILE: &str = "status.json";
/// Name of the pool history file (one line per event).
pub const HISTORY_FILE: &str = "history";

/// Arguments of `larch serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// The pool's state directory. Without a pool.json there, a demo pool is created: a
    /// sparse file-backed volume `vol0` and a cache device, with the sizes below.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Serve NBD on this TCP address (the default when no --socket is given).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// Serve NBD on this Unix socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Size of the demo volume (only when creating the demo pool).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub demo_volume_size: u64,
    /// Size of the demo cache device (only when creating the demo pool).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub demo_cache_size: u64,
    /// zfs_arc_max of the demo pool (only when creating the demo pool).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub demo_arc_max: u64,
    /// Format the cache devices instead of rebuilding their index (starts cold).
    #[arg(long)]
    pub format_cache: bool,
    /// Print a line of arcstats to standard error every this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub stats_interval: u64,
    /// Serve /metrics, /arcstats, /status and the management requests of `larch set` and
    /// `larch cache` over HTTP on this loopback address ("off" for none; port 0 picks a
    /// free port, recorded in status.json and daemon.json).
    #[arg(long, default_value = "127.0.0.1:9920")]
    pub http: String,
}

impl Default for ServeArgs {
    /// What `larch` with no arguments runs: the demo pool in ./larch-data on TCP.
    fn default() -> ServeArgs {
        ServeArgs {
            state_dir: PathBuf::from("larch-data"),
            listen: None,
            socket: None,
            demo_volume_size: 1 << 30,
            demo_cache_size: 256 << 20,
            demo_arc_max: 64 << 20,
            format_cache: false,
            stats_interval: 0,
            http: "127.0.0.1:9920".to_string(),
        }
    }
}

/// Arguments of `larch status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Print the status as JSON (all arcstats included).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `larch set`.
#[derive(clap::Args)]
pub struct SetArgs {
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// NAME=VALUE pairs, e.g. l2arc_write_max=64M. Names: l2arc_write_max, l2arc_headroom,
    /// l2arc_feed_secs, l2arc_feed_min_ms, l2arc_feed_again, l2arc_noprefetch,
    /// l2arc_mfuonly, l2arc_rebuild_enabled.
    #[arg(required = true)]
    pub assignments: Vec<String>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Appends a line to the pool's history.
pub(crate) fn history(state_dir: &Path, line: &str) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state_dir.join(HISTORY_FILE))
    {
        let _ = writeln!(f, "{} {line}", now_secs());
    }
}

/// The HTTP address actually bound (set once at start).
static HTTP_ADDR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn status_json(pool: &Pool) -> serde_json::Value {
    let mut value = serde_json::to_value(pool.report()).expect("the report serializes");
    value["pid"] = json!(std::process::id());
    value["time"] = json!(now_secs());
    value["running"] = json!(true);
    value["http"] = json!(HTTP_ADDR.get());
    value
}

fn write_status(state_dir: &Path, value: &serde_json::Value) {
    let tmp = state_dir.join(format!("{STATUS_FILE}.tmp"));
    if std::fs::write(&tmp, value.to_string()).is_ok() {
        let _ = std::fs::rename(tmp, state_dir.join(STATUS_FILE));
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// When the daemon last saw `tunables.json` and `pool.json` change.
struct FilesSeen {
    tunables: Option<SystemTime>,
    config: Option<SystemTime>,
}

impl FilesSeen {
    fn now(pool: &Pool) -> FilesSeen {
        FilesSeen {
            tunables: modified(&pool.state_dir.join(tunables::TUNABLES_FILE)),
            config: modified(&pool.state_dir.join(larch_engine::pool::CONFIG_FILE)),
        }
    }

    /// Applies what changed in the files since last time. A change requested over HTTP
    /// holds the pool's config lock while it applies and saves; then this looks again
    /// next second rather than wait for it.
    fn apply_changes(&mut self, pool: &Pool) {
        let _guard = match pool.config_lock.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        let now = FilesSeen::now(pool);
        if now.tunables != self.tunables {
            self.tunables = now.tunables;
            if let Ok(saved) = tunables::load(&pool.state_dir) {
                for refused in tunables::apply(&pool.engine.tunables, &saved) {
                    eprintln!("larch serve: tunables.json: {refused}");
                }
            }
        }
        if now.config != self.config {
            self.config = now.config;
            match PoolConfig::load(&pool.state_dir) {
                Ok(config) => {
                    for line in pool.apply_cache_config(&config) {
                        eprintln!("larch serve: {line}");
                        history(&pool.state_dir, &line);
                    }
                }
                Err(err) => eprintln!("larch serve: pool.json: {err}"),
            }
        }
    }
}

/// Every second: status file, tunables changes, rebuild completions, optional stats line.
async fn housekeeping(pool: Arc<Pool>, stats_interval: u64) {
    let mut seen = FilesSeen::now(&pool);
    let mut announced: Vec<bool> = Vec::new();
    let mut progress = RebuildProgressBar::default();
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick += 1;
        seen.apply_changes(&pool);
        let devices = pool.engine.devices();
        announced.resize(devices.len(), false);
        progress.show(&devices, tick);
        for (i, device) in devices.iter().enumerate() {
            if announced[i] {
                continue;
            }
            let line = match device.state() {
                DeviceState::Online => {
                    let restored = device.rebuild_stats().map(|r| r.l2_rebuild_bufs);
                    restored.map(|n| {
                        format!(
                            "L2ARC rebuild successful, restored {n} blocks ({})",
                            device.path.display()
                        )
                    })
                }
                DeviceState::Faulted => Some(format!(
                    "cache device {} faulted: {}",
                    device.path.display(),
                    device.fault().unwrap_or_default()
                )),
                _ => None,
            };
            if let Some(line) = line {
                eprintln!("larch serve: {line}");
                history(&pool.state_dir, &line);
                announced[i] = true;
            } else if device.state() == DeviceState::Online {
                announced[i] = true;
            }
        }
        write_status(&pool.state_dir, &status_json(&pool));
        if stats_interval > 0 && tick.is_multiple_of(stats_interval) {
            let stats: BTreeMap<String, u64> = pool.engine.arcstats().into_iter().collect();
            let get = |k: &str| stats.get(k).copied().unwrap_or(0);
            eprintln!(
                "arc size {} c {} hits {} misses {} | l2 size {} hits {} misses {} feeds {} | backing reads {}",
                format_size(get("size")),
                format_size(get("c")),
                get("hits"),
                get("misses"),
                format_size(get("l2_size")),
                get("l2_hits"),
                get("l2_misses"),
                get("l2_feeds"),
                get("backing_reads"),
            );
        }
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let state_dir = args.state_dir.clone();
    if state_dir.exists() && !state_dir.is_dir() {
        bail!("--state-dir {}: not a directory", state_dir.display());
    }
    // The pool's lock comes first, so that two first starts do not both create a pool.
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("creating {}", state_dir.display()))?;
    let lock = PoolLock::acquire(&state_dir)?;
    let created = !state_dir.join(larch_engine::pool::CONFIG_FILE).exists();
    if created {
        let sizes = DemoSizes {
            volume_bytes: args.demo_volume_size,
            cache_bytes: args.demo_cache_size,
            arc_max_bytes: args.demo_arc_max,
        };
        create_demo(&state_dir, sizes)
            .with_context(|| format!("creating a demo pool in {}", state_dir.display()))?;
        history(&state_dir, "pool created (demo)");
    }
    let pool = Pool::open_locked(&state_dir, created || args.format_cache, lock)
        .with_context(|| format!("opening the pool in {}", state_dir.display()))?;
    if pool.volumes.is_empty() {
        bail!(
            "pool {} has no volumes: add one with `larch volume add NAME --backing PATH --size SIZE --state-dir {}`",
            pool.config.name,
            state_dir.display()
        );
    }
    for refused in &pool.refused_devices {
        eprintln!("larch serve: cache device not used: {refused}");
    }
    for refused in &pool.refused_tunables {
        eprintln!("larch serve: tunables.json: {refused}");
    }
    print_banner(&pool, created);
    if let Some(n) = pool.log_replayed {
        history(&state_dir, &format!("intent log replayed: {n} records"));
    }
    let exports: Vec<NamedExport<Volume>> = pool
        .volumes
        .iter()
        .map(|v| NamedExport {
            name: v.name.clone(),
            description: format!("larch volume {} of pool {}", v.name, pool.config.name),
            export: Arc::clone(v),
        })
        .collect();
    let server = Server::new(ServerLimits::default(), exports)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let pool = Arc::new(pool);
    let result = runtime.block_on(serve(server, Arc::clone(&pool), &args));
    runtime.shutdown_timeout(Duration::from_secs(5));
    daemon::remove_record(&state_dir);
    pool.close().context("flushing the pool")?;
    let mut last = status_json(&pool);
    last["running"] = json!(false);
    write_status(&state_dir, &last);
    history(&state_dir, "pool closed");
    result?;
    eprintln!("larch serve: stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

fn print_banner(pool: &Pool, created: bool) {
    let c = &pool.config;
    eprintln!(
        "larch serve: pool {} ({}) in {}",
        c.name,
        if created {
            "demo, created now"
        } else {
            "opened"
        },
        pool.state_dir.display()
    );
    for v in &pool.volumes {
        eprintln!(
            "  volume {}: {} in {}K blocks on {}",
            v.name,
            format_size(v.info().size_bytes),
            v.info().block_bytes / 1024,
            v.backing().path().display()
        );
    }
    for d in pool.engine.devices() {
        let state = match d.state() {
            DeviceState::Rebuilding => "rebuilding its index in the background",
            DeviceState::Online => "online (empty)",
            _ => "not usable",
        };
        eprintln!(
            "  cache {}: {} ({state})",
            d.path.display(),
            format_size(d.size_bytes())
        );
    }
    if let Some(log) = pool.engine.log_device() {
        eprintln!("  log {}: intent log for sync writes", log.path.display());
    }
    if let Some(n) = pool.log_replayed {
        eprintln!("  intent log replayed: {n} records");
    }
    for v in &pool.volumes {
        if v.info().sync == larch_engine::SyncMode::Disabled {
            eprintln!(
                "  volume {}: sync=disabled, FUA and FLUSH do not wait for durability",
                v.name
            );
        }
    }
    eprintln!(
        "  ARC: at most {} of data (zfs_arc_max)",
        format_size(c.arc_max_bytes)
    );
}

async fn serve(server: Server<Volume>, pool: Arc<Pool>, args: &ServeArgs) -> anyhow::Result<()> {
    let mut listeners = Vec::new();
    if let Some(path) = &args.socket {
        clear_socket_path(path)?;
        let listener = tokio::net::UnixListener::bind(path)
            .with_context(|| format!("binding {}", path.display()))?;
        eprintln!("larch serve: NBD on unix:{}", path.display());
        listeners.push(Listener::Unix(listener));
    }
    if args.listen.is_some() || args.socket.is_none() {
        let addr = args
            .listen
            .clone()
            .unwrap_or_else(|| "127.0.0.1:10809".to_string());
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        eprintln!(
            "larch serve: NBD on tcp:{addr}  (try: nbdinfo nbd://{addr}/{})",
            pool.volumes.first().map(|v| v.name.as_str()).unwrap_or("")
        );
        listeners.push(Listener::Tcp(listener));
    }
    if listeners.is_empty() {
        bail!("nothing to listen on");
    }
    let token = daemon::new_token();
    let mut http_task = None;
    if let Some(listener) = bind_http(&args.http).await {
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        eprintln!("larch serve: HTTP on http://{addr}/metrics /arcstats /status /admin");
        let _ = HTTP_ADDR.set(addr);
        let ctx = crate::http::Context {
            pool: Arc::clone(&pool),
            status: status_json,
            token: token.clone(),
        };
        http_task = Some(tokio::spawn(crate::http::serve(listener, Arc::new(ctx))));
    }
    let record = DaemonRecord {
        pid: std::process::id(),
        http: HTTP_ADDR.get().cloned(),
        token,
        started: now_secs(),
    };
    if let Err(err) = daemon::write_record(&pool.state_dir, &record) {
        eprintln!(
            "larch serve: {}: {err} (larch set and larch cache will edit the files instead)",
            pool.state_dir.join(daemon::DAEMON_FILE).display()
        );
    }
    let keeper = tokio::spawn(housekeeping(Arc::clone(&pool), args.stats_interval));
    let signaller = server.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
        eprintln!("larch serve: shutting down");
        signaller.shutdown();
    });
    let mut tasks = Vec::new();
    for listener in listeners {
        let server = server.clone();
        tasks.push(tokio::spawn(async move { server.serve(listener).await }));
    }
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                eprintln!("larch serve: listener failed: {err}");
                server.shutdown();
            }
            Err(err) => eprintln!("larch serve: listener task failed: {err}"),
        }
    }
    server.wait_idle().await;
    keeper.abort();
    if let Some(task) = http_task {
        task.abort();
    }
    if let Some(path) = &args.socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Binds the HTTP endpoint: loopback addresses only, since it takes management requests.
/// Makes way for a Unix socket at `path`: removes a socket left by a server that is gone,
/// refuses one another server still listens on, and never removes anything else.
fn clear_socket_path(path: &Path) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        bail!(
            "--socket {}: the path exists and is not a socket (not removed)",
            path.display()
        );
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        bail!(
            "--socket {}: another server listens on it (stop it, or choose another path)",
            path.display()
        );
    }
    std::fs::remove_file(path)
        .with_context(|| format!("removing the old socket {}", path.display()))
}

async fn bind_http(addr: &str) -> Option<tokio::net::TcpListener> {
    if addr == "off" {
        return None;
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("larch serve: HTTP not served: binding {addr}: {err}");
            return None;
        }
    };
    match listener.local_addr() {
        Ok(local) if local.ip().is_loopback() => Some(listener),
        _ => {
            eprintln!("larch serve: HTTP not served: {addr} is not a loopback address");
            None
        }
    }
}

/// `larch status`: what the daemon last wrote to `status.json`.
pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let path = args.state_dir.join(STATUS_FILE);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: no status (has `larch serve --state-dir {}` run?)",
            path.display(),
            args.state_dir.display()
        )
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let age = now_secs().saturating_sub(v["time"].as_u64().unwrap_or(0));
    let running = v["running"].as_bool().unwrap_or(false) && age < 5;
    println!(
        "pool {}: {}",
        v["pool"].as_str().unwrap_or("?"),
        if running {
            format!("serving (pid {})", v["pid"])
        } else {
            format!("not running (status from {age} s ago)")
        }
    );
    for vol in v["volumes"].as_array().into_iter().flatten() {
        println!(
            "  volume {}: {} ({}K blocks), backing {}: {} reads, {} writes, {} errors",
            vol["name"].as_str().unwrap_or("?"),
            format_size(vol["size_bytes"].as_u64().unwrap_or(0)),
            vol["volblocksize"].as_u64().unwrap_or(0) / 1024,
            vol["backing"].as_str().unwrap_or("?"),
            vol["backing_reads"],
            vol["backing_writes"],
            vol["backing_errors"],
        );
        if vol["sync"] == "disabled" {
            println!(
                "    sync=disabled: FUA and FLUSH are acknowledged before the data is durable; \
                 a crash loses the last seconds of acknowledged writes"
            );
        }
        if let Some(why) = vol["write_failure"].as_str() {
            println!("    WRITES FAIL: {why}");
        }
    }
    if let Some(log) = v["log_device"].as_object() {
        let mut line = format!(
            "  log {}: {}, {} commits, {} records, {} logged",
            log["path"].as_str().unwrap_or("?"),
            log["state"].as_str().unwrap_or("?"),
            log["commits"],
            log["records"],
            format_size(log["bytes"].as_u64().unwrap_or(0)),
        );
        if let Some(fault) = log["fault"].as_str() {
            line += &format!(" ({fault}; sync writes go through TXG syncs)");
        }
        println!("{line}");
    }
    for d in v["cache_devices"].as_array().into_iter().flatten() {
        let mut line = format!(
            "  cache {}: {} {}",
            d["path"].as_str().unwrap_or("?"),
            format_size(d["size_bytes"].as_u64().unwrap_or(0)),
            d["state"].as_str().unwrap_or("?")
        );
        if d["state"] == "rebuilding" {
            line += &format!(
                ", {:.1}% of the log read, {} entries restored so far",
                d["rebuild_permille"].as_u64().unwrap_or(0) as f64 / 10.0,
                d["rebuild_entries"]
            );
        }
        if let Some(fault) = d["fault"].as_str() {
            line += &format!(" ({fault})");
        }
        if let Some(path) = v["l2_read_path"].as_str() {
            line += &format!(", reads through {path}");
        }
        println!("{line}");
    }
    let a = &v["arcstats"];
    let n = |k: &str| a[k].as_u64().unwrap_or(0);
    let ratio = |h: u64, m: u64| {
        if h + m == 0 {
            0.0
        } else {
            h as f64 * 100.0 / (h + m) as f64
        }
    };
    println!(
        "  ARC: size {} of c {}, hits {} misses {} ({:.1}% hit), mru {} mfu {}",
        format_size(n("size")),
        format_size(n("c")),
        n("hits"),
        n("misses"),
        ratio(n("hits"), n("misses")),
        format_size(n("mru_size")),
        format_size(n("mfu_size")),
    );
    println!(
        "  L2: size {} in {} blocks, hits {} misses {} ({:.1}% hit), feeds {}, written {}, wasted feed {}, cksum_bad {} io_error {}",
        format_size(n("l2_size")),
        n("l2_blocks"),
        n("l2_hits"),
        n("l2_misses"),
        ratio(n("l2_hits"), n("l2_misses")),
        n("l2_feeds"),
        format_size(n("l2_write_bytes")),
        format_size(n("l2_wasted_feed_bytes")),
        n("l2_cksum_bad"),
        n("l2_io_error"),
    );
    Ok(ExitCode::SUCCESS)
}

/// `larch set NAME=VALUE...`: all or nothing. A live daemon checks, applies and saves the
/// values at once and answers with its reason when it refuses; with none, they are
/// checked and saved in `tunables.json`, which the next start applies. Prints what
/// `tunables.json` then holds.
pub fn set(args: SetArgs) -> anyhow::Result<ExitCode> {
    if !args
        .state_dir
        .join(larch_engine::pool::CONFIG_FILE)
        .exists()
    {
        bail!("{}: no pool here", args.state_dir.display());
    }
    if let Some(daemon) = daemon::find(&args.state_dir) {
        print!("{}", daemon.change("/admin/set", &args.assignments)?);
        return Ok(ExitCode::SUCCESS);
    }
    let saved = manage::set_tunables(Target::Files(&args.state_dir), &args.assignments)?;
    for (name, value) in &saved {
        println!("{name}={value}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `larch arcstat`.
#[derive(clap::Args)]
pub struct ArcstatArgs {
    /// Seconds between lines.
    #[arg(default_value_t = 1)]
    pub interval: u64,
    /// Lines to print (default: until interrupted).
    pub count: Option<u64>,
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
}

fn read_arcstats(state_dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let path = state_dir.join(STATUS_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: no status (is `larch serve` running?)", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    Ok(v["arcstats"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default())
}

/// `larch arcstat`: OpenZFS arcstat-style lines from the daemon's status, per interval.
pub fn arcstat(args: ArcstatArgs) -> anyhow::Result<ExitCode> {
    if args.interval == 0 {
        bail!("the interval must be at least 1 second");
    }
    let mut previous = read_arcstats(&args.state_dir)?;
    let mut printed = 0u64;
    loop {
        if args.count.is_some_and(|c| printed >= c) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_secs(args.interval));
        let now = read_arcstats(&args.state_dir)?;
        let d = |k: &str| {
            now.get(k)
                .copied()
                .unwrap_or(0)
                .saturating_sub(previous.get(k).copied().unwrap_or(0))
        };
        let n = |k: &str| now.get(k).copied().unwrap_or(0);
        let pct = |a: u64, b: u64| (a * 100).checked_div(a + b).unwrap_or(0);
        if printed.is_multiple_of(20) {
            println!(
                "{:>8} {:>6} {:>4} {:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>4} {:>5}",
                "time",
                "read",
                "hit%",
                "miss%",
                "arcsz",
                "c",
                "l2read",
                "l2hit%",
                "l2size",
                "l2wbyt",
                "dirty",
                "txg",
                "zilc"
            );
        }
        let secs = now_secs();
        let reads = d("hits") + d("misses");
        println!(
            "{:02}:{:02}:{:02} {:>6} {:>4} {:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>4} {:>5}",
            (secs / 3600) % 24,
            (secs / 60) % 60,
            secs % 60,
            reads / args.interval,
            pct(d("hits"), d("misses")),
            if reads == 0 {
                0
            } else {
                100 - pct(d("hits"), d("misses"))
            },
            format_size(n("size")),
            format_size(n("c")),
            (d("l2_hits") + d("l2_misses")) / args.interval,
            pct(d("l2_hits"), d("l2_misses")),
            format_size(n("l2_size")),
            format_size(d("l2_write_bytes") / args.interval),
            format_size(n("dirty_bytes")),
            d("txg_syncs") / args.interval,
            d("zil_commit_count") / args.interval,
        );
        printed += 1;
        previous = now;
    }
}

/// Arguments of `larch iostat`.
#[derive(clap::Args)]
pub struct IostatArgs {
    /// Seconds between reports.
    #[arg(default_value_t = 1)]
    pub interval: u64,
    /// Reports to print (default: until interrupted).
    pub count: Option<u64>,
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Add latency columns, as `zpool iostat -l`: the mean (total_wait) and the 99th
    /// percentile (p99_wait) of read and write times in the interval.
    #[arg(short = 'l', long)]
    pub latency: bool,
}

fn read_status(state_dir: &Path) -> anyhow::Result<serde_json::Value> {
    let path = state_dir.join(STATUS_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: no status (is `larch serve` running?)", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
}

/// The I/O of one backing store or cache device, as `status.json` reports it.
struct IoRow {
    name: String,
    /// Reads, writes, read bytes, write bytes.
    counters: [u64; 4],
    read_latency: LatencySnapshot,
    write_latency: LatencySnapshot,
}

/// Every volume's backing store and every cache device, in status order.
fn io_rows(status: &serde_json::Value) -> Vec<IoRow> {
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    // A daemon older than the histograms has none: count nothing then.
    let latency = |v: &serde_json::Value, k: &str| {
        serde_json::from_value::<LatencySnapshot>(v[k].clone()).unwrap_or_default()
    };
    let mut rows = Vec::new();
    for v in status["volumes"].as_array().into_iter().flatten() {
        rows.push(IoRow {
            name: format!("  {}", v["name"].as_str().unwrap_or("?")),
            counters: [
                n(v, "backing_reads"),
                n(v, "backing_writes"),
                n(v, "backing_read_bytes"),
                n(v, "backing_write_bytes"),
            ],
            read_latency: latency(v, "backing_read_latency"),
            write_latency: latency(v, "backing_write_latency"),
        });
    }
    for d in status["cache_devices"].as_array().into_iter().flatten() {
        let path = d["path"].as_str().unwrap_or("?");
        let name = Path::new(path)
            .file_name()
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_else(|| path.to_string());
        rows.push(IoRow {
            name: format!("  {name} (cache)"),
            counters: [
                n(d, "reads"),
                n(d, "writes"),
                n(d, "read_bytes"),
                n(d, "write_bytes"),
            ],
            read_latency: latency(d, "read_latency"),
            write_latency: latency(d, "write_latency"),
        });
    }
    rows
}

/// A wait time as `zpool iostat -l` prints one: a unit suffix, "-" for no operation.
fn format_wait(wait: Option<Duration>) -> String {
    let Some(wait) = wait else {
        return "-".to_string();
    };
    let ns = wait.as_nanos() as f64;
    let (value, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if value < 10.0 && unit != "ns" {
        format!("{value:.1}{unit}")
    } else {
        format!("{value:.0}{unit}")
    }
}

/// `larch iostat`: operations and bandwidth per backing store and cache device, per
/// interval, in the layout of `zpool iostat -v`; with `-l`, wait times as well.
pub fn iostat(args: IostatArgs) -> anyhow::Result<ExitCode> {
    if args.interval == 0 {
        bail!("the interval must be at least 1 second");
    }
    let mut previous = io_rows(&read_status(&args.state_dir)?);
    let mut printed = 0u64;
    while args.count.is_none_or(|c| printed < c) {
        std::thread::sleep(Duration::from_secs(args.interval));
        let status = read_status(&args.state_dir)?;
        let rows = io_rows(&status);
        let mut groups = format!("{:<28} {:>17} {:>19}", "", "operations", "bandwidth");
        let mut header = format!(
            "{:<28} {:>8} {:>8} {:>9} {:>9}",
            format!("pool {}", status["pool"].as_str().unwrap_or("?")),
            "read",
            "write",
            "read",
            "write"
        );
        if args.latency {
            groups += &format!(" {:>15} {:>15}", "total_wait", "p99_wait");
            header += &format!(" {:>7} {:>7} {:>7} {:>7}", "read", "write", "read", "write");
        }
        println!("{groups}");
        println!("{header}");
        for row in &rows {
            let before = previous.iter().find(|p| p.name == row.name);
            let rate = |i: usize| {
                let then = before.map_or(0, |b| b.counters[i]);
                row.counters[i].saturating_sub(then) / args.interval
            };
            let mut line = format!(
                "{:<28} {:>8} {:>8} {:>9} {:>9}",
                row.name,
                rate(0),
                rate(1),
                format_size(rate(2)),
                format_size(rate(3))
            );
            if args.latency {
                let since = |now: &LatencySnapshot, then: Option<&LatencySnapshot>| {
                    then.map_or(*now, |then| now.since(then))
                };
                let read = since(&row.read_latency, before.map(|b| &b.read_latency));
                let write = since(&row.write_latency, before.map(|b| &b.write_latency));
                line += &format!(
                    " {:>7} {:>7} {:>7} {:>7}",
                    format_wait(read.mean()),
                    format_wait(write.mean()),
                    format_wait(read.percentile(0.99)),
                    format_wait(write.percentile(0.99)),
                );
            }
            println!("{line}");
        }
        println!();
        previous = rows;
        printed += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// Rebuild progress on standard error while cache devices rebuild: a bar redrawn every
/// second on a terminal, a plain line every 5 seconds otherwise.
#[derive(Default)]
struct RebuildProgressBar {
    drawn: bool,
}

impl RebuildProgressBar {
    fn show(&mut self, devices: &[Arc<larch_engine::CacheDevice>], tick: u64) {
        use std::io::IsTerminal;
        let tty = std::io::stderr().is_terminal();
        let parts: Vec<String> = devices
            .iter()
            .filter(|d| d.state() == DeviceState::Rebuilding)
            .map(|d| {
                let (entries, permille) = d.rebuild_progress();
                let permille = permille.min(1000) as usize;
                let filled = permille * 20 / 1000;
                format!(
                    "{} [{}{}] {:>5.1}% {} blocks",
                    d.path.file_name().unwrap_or_default().to_string_lossy(),
                    "#".repeat(filled),
                    ".".repeat(20 - filled),
                    permille as f64 / 10.0,
                    entries
                )
            })
            .collect();
        if parts.is_empty() {
            if self.drawn && tty {
                eprintln!();
            }
            self.drawn = false;
            return;
        }
        if tty {
            eprint!("\r\x1b[2Klarch serve: L2ARC rebuild {}", parts.join("; "));
            self.drawn = true;
        } else if tick.is_multiple_of(5) {
            eprintln!("larch serve: L2ARC rebuild {}", parts.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_print_with_a_unit_like_zpool_iostat() {
        let cases = [
            (None, "-"),
            (Some(Duration::from_nanos(450)), "450ns"),
            (Some(Duration::from_nanos(1_500)), "1.5us"),
            (Some(Duration::from_micros(345)), "345us"),
            (Some(Duration::from_micros(2_250)), "2.2ms"),
            (Some(Duration::from_millis(12)), "12ms"),
            (Some(Duration::from_secs(3)), "3.0s"),
        ];
        for (wait, text) in cases {
            assert_eq!(format_wait(wait), text, "{wait:?}");
        }
    }
}
