//! `larch serve`: the command line of the daemon. Running the pool is
//! `larch_daemon::serve`; this module turns the arguments into its options.

use std::path::PathBuf;
use std::process::ExitCode;

use larch_daemon::serve::ServeOptions;
use larch_engine::DemoSizes;
use larch_engine::units::parse_size;

use crate::nbd_security::NbdSecurityArgs;

/// Arguments of `larch serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// The pool's state directory. Without a pool.json there, a demo pool is created: a
    /// sparse file-backed volume `vol0` and a cache device, with the sizes below.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Serve NBD on this TCP address (the default when no --socket is given).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_addr)]
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
    #[arg(long, default_value = "127.0.0.1:9920", value_parser = parse_http)]
    pub http: String,
    /// Memory the history of the Analytics page may hold (an hour of seconds and a day
    /// of minutes; the oldest seconds go first when it is full), or "off" to keep none.
    /// Saved in the state directory as analytics.bin every minute, from a copy taken for
    /// the save (so up to about twice this while it is written).
    #[arg(long, value_name = "SIZE|off", default_value = "64M")]
    pub history: String,
    /// Also serve the Analytics page and the read API to other machines on this address,
    /// over HTTPS with the NBD server's certificate (--tls); every request needs the token
    /// (`larch analytics url` prints it). Management stays on --http.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_addr)]
    pub http_remote: Option<String>,
    /// TLS, access rules and connection limits of the NBD server.
    #[command(flatten)]
    pub security: NbdSecurityArgs,
}

/// A TCP address of `--listen` and `--http-remote` (`HOST:PORT`: an IP address, or a name
/// that resolves), checked before anything opens: a typo is a usage error, not a pool
/// opened (its cache devices rebuilt, its intent log replayed) only to stop at the bind.
/// An address that parses but cannot be bound still fails at the bind.
fn parse_addr(text: &str) -> Result<String, String> {
    use std::net::ToSocketAddrs;
    match text.to_socket_addrs().map(|mut addrs| addrs.next()) {
        Ok(Some(_)) => Ok(text.to_string()),
        Ok(None) => Err(format!("{text:?} names no address")),
        Err(err) => Err(format!(
            "{text:?} is not a TCP address ({err}): give ADDR:PORT, such as 127.0.0.1:10809"
        )),
    }
}

/// `--http`: an address as [`parse_addr`] takes it, or "off".
fn parse_http(text: &str) -> Result<String, String> {
    if text == "off" {
        return Ok(text.to_string());
    }
    parse_addr(text).map_err(|why| format!("{why}, or \"off\""))
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
            history: "64M".to_string(),
            http_remote: None,
            security: NbdSecurityArgs::default(),
        }
    }
}

impl ServeArgs {
    /// The daemon's options for these arguments.
    fn options(self) -> anyhow::Result<ServeOptions> {
        let history_max_bytes = match self.history.as_str() {
            "off" => None,
            size => Some(
                parse_size(size)
                    .map_err(|why| anyhow::anyhow!("--history {size}: {why} (or \"off\")"))?,
            ),
        };
        let security = self.security.security()?;
        let http_tls = match (&self.http_remote, security.tls.is_some()) {
            (Some(_), true) => Some(self.security.https_config()?),
            _ => None,
        };
        Ok(ServeOptions {
            security,
            max_connections_per_client: self.security.max_connections_per_client,
            allow_remote_plaintext: self.security.allow_remote_plaintext,
            http_remote: self.http_remote,
            http_tls,
            state_dir: self.state_dir,
            listen: self.listen,
            socket: self.socket,
            demo: DemoSizes {
                volume_bytes: self.demo_volume_size,
                cache_bytes: self.demo_cache_size,
                arc_max_bytes: self.demo_arc_max,
            },
            format_cache: self.format_cache,
            stats_interval_secs: self.stats_interval,
            http: (self.http != "off").then_some(self.http),
            history_max_bytes,
        })
    }
}

/// `larch serve`: serves until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    larch_daemon::serve::run(&args.options()?)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_off_means_no_endpoint() {
        let off = ServeArgs {
            http: "off".to_string(),
            ..ServeArgs::default()
        };
        assert_eq!(off.options().unwrap().http, None);
        let options = ServeArgs::default().options().unwrap();
        assert_eq!(options.http.as_deref(), Some("127.0.0.1:9920"));
        assert_eq!(options.demo.volume_bytes, 1 << 30);
        assert_eq!(options.listen, None);
        assert_eq!(options.history_max_bytes, Some(64 << 20));
    }

    #[test]
    fn the_history_is_a_size_or_off() {
        let with = |history: &str| {
            ServeArgs {
                history: history.to_string(),
                ..ServeArgs::default()
            }
            .options()
        };
        assert_eq!(with("off").unwrap().history_max_bytes, None);
        assert_eq!(with("1M").unwrap().history_max_bytes, Some(1 << 20));
        let err = with("lots").unwrap_err().to_string();
        assert!(err.contains("--history lots"), "{err}");
    }

    /// Addresses that do not parse are usage errors before anything opens (a reviewer's
    /// finding: `--listen garbage` opened the whole pool before it failed, and `--http
    /// garbage` only logged and served without the management endpoint).
    #[test]
    fn listen_and_http_addresses_that_do_not_parse_are_usage_errors() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map(|cli| cli.serve)
        };
        for args in [
            ["--listen", "garbage"],
            ["--listen", "127.0.0.1:99999"],
            ["--http", "garbage"],
            ["--http", "127.0.0.1"],
            ["--http-remote", "0.0.0.0:x"],
        ] {
            let err = parse(&args).err().expect("parsed");
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{err}");
            let text = err.to_string();
            assert!(
                text.contains(args[0]) && text.contains("ADDR:PORT"),
                "{text}"
            );
        }
        let args = parse(&["--listen", "127.0.0.1:0", "--http", "off"]).unwrap();
        assert_eq!(args.listen.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(args.options().unwrap().http, None);
        let args = parse(&["--http", "[::1]:9920", "--http-remote", "0.0.0.0:9921"]).unwrap();
        assert_eq!(args.http, "[::1]:9920");
        assert_eq!(args.http_remote.as_deref(), Some("0.0.0.0:9921"));
    }
}
