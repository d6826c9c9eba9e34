//! Running a pool as `larch serve` does: open it (or create the demo pool) under the pool
//! lock, serve its volumes over NBD on TCP and Unix sockets through the ARC and the cache
//! devices, serve the loopback HTTP endpoint ([`crate::http`]) and record it in
//! `daemon.json` ([`crate::client`]), keep house every second, and on SIGINT or SIGTERM
//! stop accepting, let the connections finish, close the pool and write the last status.
//!
//! Everything it prints goes to standard error, prefixed `larch serve:`; the binary only
//! turns its command line into [`ServeOptions`].

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use larch_engine::units::format_size;
use larch_engine::{DemoSizes, DeviceState, Pool, PoolLock, SyncMode, Volume, create_demo};
use larch_nbd::{Listener, NamedExport, Security, Server, ServerLimits, TlsMode};
use tokio::net::TcpListener;
use tokio::sync::broadcast;

use crate::client::{self, DaemonRecord};
use crate::housekeeping::{History, Housekeeper};
use crate::recorder::Recorder;
use crate::status::StatusReport;
use crate::systemd::{self, ActivatedListener};
use crate::{history, http};

/// The NBD address served when neither a TCP address nor a socket is given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10809";

/// How to run a pool.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The pool's state directory. Without a `pool.json` there, a demo pool is created
    /// with the sizes of `demo`.
    pub state_dir: PathBuf,
    /// Serve NBD on this TCP address (on [`DEFAULT_LISTEN`] when neither this nor
    /// `socket` is given).
    pub listen: Option<String>,
    /// Serve NBD on this Unix socket.
    pub socket: Option<PathBuf>,
    /// Sizes of the demo pool, if one is created.
    pub demo: DemoSizes,
    /// Format the cache devices instead of rebuilding their index (start cold).
    pub format_cache: bool,
    /// Print a line of arcstats to standard error every this many seconds (0: never).
    pub stats_interval_secs: u64,
    /// Serve HTTP on this loopback address (port 0 picks a free one); `None`: no HTTP.
    pub http: Option<String>,
    /// Keep the history the Analytics page shows, in at most this many bytes; `None`:
    /// keep none.
    pub history_max_bytes: Option<u64>,
    /// NBD's TLS and access rules.
    pub security: Security,
    /// NBD connections served at once from one client address.
    pub max_connections_per_client: usize,
    /// Serve plaintext on non-loopback addresses (with a warning) instead of refusing.
    pub allow_remote_plaintext: bool,
    /// Serve the page and the read API to other machines on this address (HTTPS with
    /// `http_tls`, every request with the token); `None`: not served.
    pub http_remote: Option<String>,
    /// The TLS of `http_remote` (the NBD server's certificate, no client certificates).
    pub http_tls: Option<Arc<larch_nbd::tls::ServerConfig>>,
}

impl Default for ServeOptions {
    /// The demo pool in ./larch-data, NBD on [`DEFAULT_LISTEN`], HTTP on 127.0.0.1:9920.
    fn default() -> ServeOptions {
        ServeOptions {
            state_dir: PathBuf::from("larch-data"),
            listen: None,
            socket: None,
            demo: DemoSizes {
                volume_bytes: 1 << 30,
                cache_bytes: 256 << 20,
                arc_max_bytes: 64 << 20,
            },
            format_cache: false,
            stats_interval_secs: 0,
            http: Some("127.0.0.1:9920".to_string()),
            history_max_bytes: Some(64 << 20),
            security: Security::default(),
            max_connections_per_client: ServerLimits::default().max_connections_per_address,
            allow_remote_plaintext: false,
            http_remote: None,
            http_tls: None,
        }
    }
}

/// Whether a server may listen on `addr`: loopback always; beyond it only with TLS
/// required, or plaintext on purpose (`allow_remote_plaintext`, which prints a warning).
pub fn check_bind(
    what: &str,
    addr: std::net::SocketAddr,
    tls_required: bool,
    allow_remote_plaintext: bool,
) -> anyhow::Result<()> {
    if addr.ip().is_loopback() || tls_required {
        return Ok(());
    }
    if !allow_remote_plaintext {
        bail!(
            "{what} on {addr}, which is not a loopback address: other machines could use it \
             in plaintext. Serve it with TLS (--tls require), or pass --allow-remote-plaintext \
             to serve it anyway"
        );
    }
    eprintln!(
        "larch: warning: {what} on {addr} in plaintext beyond this machine \
         (--allow-remote-plaintext): anyone who reaches it reads and writes what it serves"
    );
    Ok(())
}

/// Runs the pool of `options.state_dir` until SIGINT or SIGTERM (or a listener fails),
/// then closes it cleanly.
pub fn run(options: &ServeOptions) -> anyhow::Result<()> {
    // SAFETY: `larch serve` calls this from its main thread before any other thread
    // exists (the pool's and the runtime's start below), and the environment changes only
    // when systemd passed sockets to this very process.
    unsafe { systemd::receive_sockets() }.context("the sockets systemd passed")?;
    // Until this function returns (its last messages included), standard error stays
    // writable whatever happens to its reader (see the module).
    let _stderr = crate::stderr::StderrShield::install()
        .map_err(|err| eprintln!("larch serve: standard error not shielded: {err}"))
        .ok();
    let state_dir = &options.state_dir;
    if state_dir.exists() && !state_dir.is_dir() {
        bail!("--state-dir {}: not a directory", state_dir.display());
    }
    // The pool's lock comes first, so that two first starts do not both create a pool.
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating {}", state_dir.display()))?;
    let lock = PoolLock::acquire(state_dir)?;
    let created = !state_dir.join(larch_engine::pool::CONFIG_FILE).exists();
    if created {
        create_demo(state_dir, options.demo)
            .with_context(|| format!("creating a demo pool in {}", state_dir.display()))?;
        history::append(state_dir, "pool created (demo)");
    }
    let pool = Pool::open_locked(state_dir, created || options.format_cache, lock)
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
    for formatted in &pool.formatted_devices {
        history::append(state_dir, &format!("cache device formatted: {formatted}"));
    }
    for refused in &pool.refused_tunables {
        eprintln!("larch serve: tunables.json: {refused}");
    }
    print_banner(&pool, created);
    if let Some(n) = pool.log_replayed {
        history::append(state_dir, &format!("intent log replayed: {n} records"));
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
    let limits = ServerLimits {
        max_connections_per_address: options.max_connections_per_client,
        ..ServerLimits::default()
    };
    // Each NBD connection is served on a thread of its own (docs/nbd.md).
    let server = Server::with_security(limits, exports, options.security.clone())?
        .with_connection_threads(true);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let pool = Arc::new(pool);
    let served = runtime.block_on(serve(server, Arc::clone(&pool), options));
    runtime.shutdown_timeout(Duration::from_secs(5));
    client::remove_record(state_dir);
    pool.close().context("flushing the pool")?;
    let http_addr = served.as_ref().ok().cloned().flatten();
    if let Err(err) = StatusReport::of(&pool, false, http_addr).write(state_dir) {
        eprintln!("larch serve: the last status not written: {err}");
    }
    history::append(state_dir, "pool closed");
    served?;
    eprintln!("larch serve: stopped cleanly");
    Ok(())
}

/// What the pool is made of, on standard error at start.
fn print_banner(pool: &Pool, created: bool) {
    let c = &pool.config;
    let report = pool.report();
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
    for v in &report.volumes {
        eprintln!(
            "  volume {}: {} in {}K blocks on {}",
            v.name,
            format_size(v.size_bytes),
            v.volblocksize / 1024,
            v.backing
        );
    }
    for d in &report.cache_devices {
        let state = match d.state {
            DeviceState::Rebuilding => "rebuilding its index in the background",
            DeviceState::Online => "online (empty)",
            _ => "not usable",
        };
        eprintln!(
            "  cache {}: {} ({state})",
            d.path,
            format_size(d.size_bytes)
        );
    }
    if let Some(log) = &report.log_device {
        eprintln!("  log {}: intent log for sync writes", log.path);
    }
    if let Some(n) = pool.log_replayed {
        eprintln!("  intent log replayed: {n} records");
    }
    for v in &report.volumes {
        if v.sync == SyncMode::Disabled {
            eprintln!(
                "  volume {}: sync=disabled, FUA and FLUSH do not wait for durability",
                v.name
            );
        }
    }
    // The limit in force: tunables.json's zfs_arc_max, when it sets one, overrides
    // pool.json's (as it did at open).
    let arc_max = pool.engine.tunables.zfs_arc_max();
    let source = if arc_max == c.arc_max_bytes {
        String::new()
    } else {
        format!(
            ", from tunables.json; pool.json's arc_max_bytes is {}",
            format_size(c.arc_max_bytes)
        )
    };
    eprintln!(
        "  ARC: at most {} of data (zfs_arc_max{source})",
        format_size(arc_max)
    );
}

/// Serves until shutdown; returns the HTTP address it served, if any.
async fn serve(
    server: Server<Volume>,
    pool: Arc<Pool>,
    options: &ServeOptions,
) -> anyhow::Result<Option<String>> {
    // Connection threads end with their connections: the engine's blocking I/O and
    // prefetch run here.
    pool.engine
        .run_background_on(tokio::runtime::Handle::current());
    let listeners = bind_nbd(&pool, options).await?;
    let token = client::new_token().context("making the management token")?;
    let page_token = client::new_token().context("making the Analytics page's token")?;
    // The pool's events so far go on the charts; the housekeeper hands the history each
    // one after the last of these.
    let events_so_far = pool.engine.events.since(0);
    let events_seen = events_so_far.last().map_or(0, |e| e.seq);
    let recorder = match options.history_max_bytes {
        Some(max_bytes) => {
            let (mut recorder, warning) = Recorder::load(&pool.state_dir, max_bytes);
            if let Some(warning) = warning {
                eprintln!("larch serve: history: {warning}");
            }
            recorder.restore_events(&events_so_far);
            recorder
        }
        None => Recorder::new(0),
    };
    let recorder = Arc::new(Mutex::new(recorder));
    let (live, _) = broadcast::channel(16);
    let mut http_addr = None;
    let mut http_task = None;
    let mut remote_task = None;
    let mut remote = None;
    if let Some(listener) = bind_http(options.http.as_deref()).await {
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        eprintln!("larch serve: Analytics on http://{addr}/ (and /metrics /arcstats /status)");
        let ctx = http::Context {
            pool: Arc::clone(&pool),
            token: token.clone(),
            page_token: page_token.clone(),
            addr: addr.clone(),
            recorder: Arc::clone(&recorder),
            live: live.clone(),
            answers: http::history_answers(),
        };
        let ctx = Arc::new(ctx);
        http_task = Some(tokio::spawn(http::serve(listener, Arc::clone(&ctx))));
        http_addr = Some(addr);
        if let Some(remote_addr) = &options.http_remote {
            let listener = TcpListener::bind(remote_addr)
                .await
                .with_context(|| format!("binding --http-remote {remote_addr}"))?;
            let local = listener.local_addr()?;
            check_bind(
                "HTTP (--http-remote)",
                local,
                options.http_tls.is_some(),
                options.allow_remote_plaintext,
            )?;
            let scheme = if options.http_tls.is_some() {
                "https"
            } else {
                "http"
            };
            let url = format!("{scheme}://{local}/");
            let view_token = client::new_token().context("making the view token")?;
            remote = Some(client::RemoteEndpoint {
                url,
                view_token: view_token.clone(),
            });
            remote_task = Some(tokio::spawn(http::serve_remote(
                listener,
                ctx,
                options.http_tls.clone(),
                view_token,
            )));
        }
    } else if options.http_remote.is_some() {
        bail!("--http-remote needs the loopback endpoint too (--http is off)");
    }
    // The signal handlers are in place before daemon.json says the daemon answers, and so
    // before the first status says the pool runs: a SIGTERM before them would end the
    // process at once instead of closing the pool (seen: a test stopping a daemon as soon
    // as its `larch get` had an answer, on a loaded machine). A signal that comes before
    // the task below waits for it is kept for it.
    let signals = ShutdownSignals::install();
    let record = DaemonRecord {
        pid: std::process::id(),
        http: http_addr.clone(),
        token,
        page_token: Some(page_token),
        started: crate::unix_time_secs(),
        remote,
    };
    if let Err(err) = client::write_record(&pool.state_dir, &record) {
        eprintln!(
            "larch serve: {}: {err} (larch set and larch cache will edit the files instead)",
            pool.state_dir.join(client::DAEMON_FILE).display()
        );
    }
    // Announced once daemon.json names it, so that the command this line suggests works
    // as soon as the line is out.
    if let Some(remote) = &record.remote {
        eprintln!(
            "larch serve: Analytics for other machines on {} (with its token: larch analytics url --remote)",
            remote.url
        );
    }
    let saving = Arc::new(Mutex::new(()));
    let history = options.history_max_bytes.map(|_| History {
        recorder: Arc::clone(&recorder),
        live,
        saving: Arc::clone(&saving),
        events_seen,
    });
    let keeper = Housekeeper::new(
        &pool,
        options.stats_interval_secs,
        http_addr.clone(),
        history,
    );
    tokio::spawn(shut_down_on_signal(server.clone(), signals));
    let stop_keeper = Arc::new(tokio::sync::Notify::new());
    let keeper = tokio::spawn(keeper.run(Arc::clone(&pool), Arc::clone(&stop_keeper)));
    let mut tasks = Vec::new();
    for listener in listeners {
        let server = server.clone();
        tasks.push(tokio::spawn(async move { server.serve(listener).await }));
    }
    systemd::notify_status(&format!("serving pool {}", pool.config.name));
    systemd::notify_ready();
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
    // The keeper's tick under way (it writes status.json and saves the history) ends
    // before the last status and history are written.
    stop_keeper.notify_one();
    let _ = keeper.await;
    if options.history_max_bytes.is_some() {
        let recorder = Arc::clone(&recorder);
        let state_dir = pool.state_dir.clone();
        let saved = tokio::task::spawn_blocking(move || {
            // The keeper has stopped, its last save done; the lock keeps this one the last
            // even so.
            let _saving = saving.lock().expect("history save lock");
            let snapshot = recorder.lock().expect("recorder lock").snapshot();
            snapshot.save(&state_dir)
        })
        .await;
        if let Ok(Err(err)) = saved {
            eprintln!("larch serve: saving the history: {err}");
        }
    }
    if let Some(task) = http_task {
        task.abort();
    }
    if let Some(task) = remote_task {
        task.abort();
    }
    if let Some(path) = &options.socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(http_addr)
}

/// The handlers of SIGINT and SIGTERM, installed when made (not when first awaited).
struct ShutdownSignals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    fn install() -> ShutdownSignals {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|err| eprintln!("larch serve: {name} not handled: {err}"))
                .ok()
        };
        ShutdownSignals {
            interrupt: install(SignalKind::interrupt(), "SIGINT"),
            terminate: install(SignalKind::terminate(), "SIGTERM"),
        }
    }
}

/// Waits for SIGINT or SIGTERM, then shuts the NBD server down.
async fn shut_down_on_signal(server: Server<Volume>, signals: ShutdownSignals) {
    async fn received(signal: Option<tokio::signal::unix::Signal>) {
        match signal {
            Some(mut signal) => {
                signal.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    tokio::select! {
        () = received(signals.interrupt) => {}
        () = received(signals.terminate) => {}
    }
    eprintln!("larch serve: shutting down");
    systemd::notify_stopping();
    systemd::notify_status("shutting down: finishing connections, flushing the pool");
    server.shutdown();
}

/// Binds the NBD listeners: the Unix socket, the TCP address, or both; or serves the ones
/// systemd passed instead (socket activation).
async fn bind_nbd(pool: &Pool, options: &ServeOptions) -> anyhow::Result<Vec<Listener>> {
    let activated = systemd::take_nbd_listeners();
    if !activated.is_empty() {
        return activated_nbd(options, activated);
    }
    let mut listeners = Vec::new();
    if let Some(path) = &options.socket {
        clear_socket_path(path)?;
        let listener = tokio::net::UnixListener::bind(path)
            .with_context(|| format!("binding {}", path.display()))?;
        eprintln!("larch serve: NBD on unix:{}", path.display());
        listeners.push(Listener::Unix(listener));
    }
    if options.listen.is_some() || options.socket.is_none() {
        let addr = options.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let tls_mode = options
            .security
            .tls
            .as_ref()
            .map_or(TlsMode::Off, |t| t.mode);
        let local = listener.local_addr()?;
        check_bind(
            "NBD",
            local,
            tls_mode == TlsMode::Require,
            options.allow_remote_plaintext,
        )?;
        let scheme = if tls_mode == TlsMode::Off {
            "nbd"
        } else {
            "nbds"
        };
        eprintln!(
            "larch serve: NBD on tcp:{local}, TLS {}  (try: nbdinfo {scheme}://{local}/{})",
            match tls_mode {
                TlsMode::Off => "off",
                TlsMode::On => "on",
                TlsMode::Require => "required",
            },
            pool.volumes.first().map(|v| v.name.as_str()).unwrap_or("")
        );
        listeners.push(Listener::Tcp(listener));
    }
    if listeners.is_empty() {
        bail!("nothing to listen on");
    }
    Ok(listeners)
}

/// The NBD listeners systemd passed (socket activation), served instead of binding any.
fn activated_nbd(
    options: &ServeOptions,
    activated: Vec<ActivatedListener>,
) -> anyhow::Result<Vec<Listener>> {
    if options.listen.is_some() || options.socket.is_some() {
        bail!(
            "systemd passed NBD sockets and --listen or --socket names others: drop the option \
             to serve the .socket unit's, or start without the .socket unit"
        );
    }
    let tls_required = matches!(&options.security.tls, Some(t) if t.mode == TlsMode::Require);
    let mut listeners = Vec::new();
    for socket in activated {
        // A socket systemd bound follows the rule of one bound here: beyond loopback, only
        // with TLS required or plaintext allowed on purpose.
        if let ActivatedListener::Tcp(l) = &socket {
            check_bind(
                "NBD (passed by systemd)",
                l.local_addr()?,
                tls_required,
                options.allow_remote_plaintext,
            )?;
        }
        eprintln!("larch serve: NBD on {socket} (passed by systemd)");
        listeners.push(match socket {
            ActivatedListener::Tcp(l) => Listener::Tcp(TcpListener::from_std(l)?),
            ActivatedListener::Unix(l) => Listener::Unix(tokio::net::UnixListener::from_std(l)?),
        });
    }
    Ok(listeners)
}

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

/// Binds the HTTP endpoint: loopback addresses only, since it takes management requests.
/// A failure is reported and the pool served without HTTP.
async fn bind_http(addr: Option<&str>) -> Option<TcpListener> {
    let activated = systemd::take_http_listener();
    let Some(addr) = addr else {
        if activated.is_some() {
            eprintln!("larch serve: HTTP not served (--http off), not even on systemd's socket");
        }
        return None;
    };
    if let Some(socket) = activated {
        return activated_http(socket);
    }
    let listener = match TcpListener::bind(addr).await {
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

/// The HTTP listener systemd passed, under the same loopback rule as one bound here; in
/// its place the address of `--http` is not bound.
fn activated_http(socket: ActivatedListener) -> Option<TcpListener> {
    let ActivatedListener::Tcp(listener) = socket else {
        eprintln!("larch serve: HTTP not served: systemd's socket for it ({socket}) is not TCP");
        return None;
    };
    match listener.local_addr() {
        Ok(local) if local.ip().is_loopback() => {}
        _ => {
            let socket = ActivatedListener::Tcp(listener);
            eprintln!("larch serve: HTTP not served: systemd's socket {socket} is not loopback");
            return None;
        }
    }
    eprintln!("larch serve: HTTP on the socket systemd passed");
    match TcpListener::from_std(listener) {
        Ok(listener) => Some(listener),
        Err(err) => {
            eprintln!("larch serve: HTTP not served: systemd's socket: {err}");
            None
        }
    }
}
