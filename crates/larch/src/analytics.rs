//! `larch analytics export`: a pool's history (the series of the Analytics page) as CSV or
//! JSON, the same data as `GET /api/v1/export` (docs/analytics.md).
//!
//! When a daemon of the state directory answers, it is asked: its history is in memory and
//! up to the second. Otherwise the history the daemon saved in `analytics.bin` (every
//! minute and when it stopped) is read, so a stopped pool's history can still be exported;
//! standard error says which source was used. The range and the ids are checked here first,
//! with the API's own rules (`Range::parse`), so that both sources refuse the same mistakes
//! in the same words and name the option at fault.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use larch_daemon::client::{self, Daemon};
use larch_daemon::recorder::{HISTORY_FILE, QueryError, Range, Recorder};

/// Longest export the CLI takes from a daemon. A history is bounded by `--history` (64 MiB
/// by default), and its text is a few times the size of its `f32`s; past this, a shorter
/// range or fewer ids will do.
const MAX_EXPORT_BYTES: u64 = 1 << 30;

/// `larch analytics ...`.
#[derive(clap::Subcommand)]
pub enum AnalyticsCommand {
    /// Write a pool's history as CSV or JSON: from its running daemon, or else from the
    /// history it saved (analytics.bin).
    #[command(after_help = EXPORT_HELP)]
    Export(ExportArgs),
    /// Print the address of the running daemon's Analytics page, with the token that lets
    /// the page change tunables and flip the L2ARC switch.
    #[command(after_help = URL_HELP)]
    Url(UrlArgs),
}

const URL_HELP: &str = "\
The token is in the address's fragment (after #), which a browser never sends to a server;
the page keeps it in the tab's session storage and removes it from the address bar. The
token is the one of daemon.json in the state directory, readable by its owner only: whoever
has the address can change the pool, so do not share it. Without it (--no-token) the page
shows everything and changes nothing.";

/// Arguments of `larch analytics url`.
#[derive(clap::Args)]
pub struct UrlArgs {
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// The page's address alone, without the token.
    #[arg(long)]
    pub no_token: bool,
    /// The address of the remote endpoint (`larch serve --http-remote`) for other
    /// machines, with its token (which lets one read, never change).
    #[arg(long)]
    pub remote: bool,
}

const EXPORT_HELP: &str = "\
The output is what GET /api/v1/export answers (docs/analytics.md): CSV has a `time` column
(the end of each interval, seconds since the epoch) and one column per id, empty where the
daemon was not running; JSON has `times`, `series` (one array per id, null where there is
no sample), `events` and `clipped` (why the range is shorter than asked for, if it is).
Counters are per second (a minute is the mean of its seconds), gauges the value at the end
of the interval. The last hour is kept at 1-second steps and the last day at 1-minute
steps. Standard error says where the history came from: the running daemon, or the
analytics.bin it saved (every minute and when it stopped). The default range is the last
5 minutes: for a pool stopped before that, give --from.

Examples:
  larch analytics export --ids arc/hits,arc/size --from -3600 -o hour.csv
  larch analytics export --from -86400 --step 60 --format json > day.json";

/// Arguments of `larch analytics export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Series to export, comma-separated (`arc/hits,volume/vol0/read_ops`); default: every
    /// series of the history, in the order of its catalog.
    #[arg(long, value_delimiter = ',', value_name = "ID,ID...")]
    pub ids: Vec<String>,
    /// Start of the range (exclusive): seconds since the epoch, or negative seconds before
    /// --to (-3600: the hour before it); default: 300 seconds before --to.
    #[arg(long, allow_hyphen_values = true, value_name = "T")]
    pub from: Option<String>,
    /// End of the range: seconds since the epoch, or `now` (the default).
    #[arg(long, allow_hyphen_values = true, value_name = "T")]
    pub to: Option<String>,
    /// Seconds per interval, 1 or 60; default: 1 when the range is within the last hour,
    /// else 60.
    #[arg(long, value_name = "1|60")]
    pub step: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Write to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// What `larch analytics export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A `time` column, then one column per id.
    Csv,
    /// The answer of GET /api/v1/series.
    Json,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Json => "json",
        }
    }
}

/// `larch analytics ...`.
pub fn run(command: AnalyticsCommand) -> anyhow::Result<ExitCode> {
    match command {
        AnalyticsCommand::Export(args) => export(args),
        AnalyticsCommand::Url(args) => url(args),
    }
}

/// A refused range, named by the option the user typed.
fn option_error(err: QueryError) -> anyhow::Error {
    anyhow!("--{}: {}", err.parameter, err.why)
}

/// The ids asked for, checked against those the history holds (`known`); all of them when
/// none are asked for.
fn chosen_ids(asked: &[String], known: Vec<String>) -> anyhow::Result<Vec<String>> {
    let asked: Vec<String> = asked.iter().filter(|id| !id.is_empty()).cloned().collect();
    if asked.is_empty() {
        return Ok(known);
    }
    if let Some(unknown) = asked.iter().find(|id| !known.contains(id)) {
        bail!(
            "--ids: the history has no series {unknown:?} (without --ids every series is \
             exported, and the CSV header names them)"
        );
    }
    Ok(asked)
}

/// `larch analytics export`.
fn url(args: UrlArgs) -> anyhow::Result<ExitCode> {
    if args.remote {
        let Some(remote) = client::remote_endpoint(&args.state_dir) else {
            bail!(
                "no running `larch serve` of {} serves a remote endpoint (--http-remote)",
                args.state_dir.display()
            );
        };
        if args.no_token {
            println!("{}", remote.url);
        } else {
            println!("{}?token={}", remote.url, remote.view_token);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(daemon) = client::find(&args.state_dir) else {
        bail!(
            "no running `larch serve` with an HTTP endpoint answers for {}",
            args.state_dir.display()
        );
    };
    println!("{}", daemon.page_url(!args.no_token));
    Ok(ExitCode::SUCCESS)
}

fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let now = larch_daemon::unix_time_secs();
    let (from, to, step) = (
        args.from.as_deref(),
        args.to.as_deref(),
        args.step.as_deref(),
    );
    let range = Range::parse(from, to, step, now).map_err(option_error)?;
    let (text, source) = match client::find(&args.state_dir) {
        Some(daemon) => {
            let text = from_daemon(&daemon, &args)?;
            (text, format!("the running daemon (pid {})", daemon.pid))
        }
        None => {
            let text = from_file(&args.state_dir, &args.ids, range, args.format)?;
            let path = args.state_dir.join(HISTORY_FILE);
            let source = match client::running_pid(&args.state_dir) {
                Some(pid) => format!(
                    "{}, as last saved (the daemon, pid {pid}, does not answer over HTTP)",
                    path.display()
                ),
                None => format!("{} (no daemon of the pool is running)", path.display()),
            };
            (text, source)
        }
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .context("writing the export")?;
        }
    }
    eprintln!("larch analytics export: the history came from {source}");
    Ok(ExitCode::SUCCESS)
}

/// The ids of the series the running daemon's history holds. A daemon that has just started
/// has none until it records its first second, which is waited for.
fn daemon_series(daemon: &Daemon, state_dir: &Path) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let catalog: serde_json::Value = serde_json::from_str(&daemon.get("/api/v1/catalog")?)
            .context("the daemon's /api/v1/catalog")?;
        let known: Vec<String> = catalog["series"]
            .as_array()
            .map(|series| {
                let ids = series.iter().filter_map(|s| s["id"].as_str());
                ids.map(str::to_string).collect()
            })
            .unwrap_or_default();
        if !known.is_empty() {
            return Ok(known);
        }
        if catalog["max_bytes"] == 0 {
            bail!(
                "the daemon (pid {}) of {} keeps no history (larch serve --history off)",
                daemon.pid,
                state_dir.display()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "the daemon (pid {}) of {} has recorded nothing yet",
                daemon.pid,
                state_dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The export as the running daemon answers it.
fn from_daemon(daemon: &Daemon, args: &ExportArgs) -> anyhow::Result<String> {
    let known = daemon_series(daemon, &args.state_dir)?;
    let ids = chosen_ids(&args.ids, known)?.join(",");
    // The range goes as typed, for the daemon to resolve as the page's requests are (with
    // `clipped` in the answer when it shortens it); it was checked above.
    let mut query = vec![("ids", ids.as_str()), ("format", args.format.name())];
    for (name, value) in [("from", &args.from), ("to", &args.to), ("step", &args.step)] {
        if let Some(value) = value {
            query.push((name, value.as_str()));
        }
    }
    daemon.get_with("/api/v1/export", &query, MAX_EXPORT_BYTES)
}

/// The export from the history saved in `state_dir`.
fn from_file(
    state_dir: &Path,
    asked: &[String],
    range: Range,
    format: Format,
) -> anyhow::Result<String> {
    let path = state_dir.join(HISTORY_FILE);
    if !path.exists() {
        bail!(
            "no history of {}: no daemon of it answers and there is no {} (larch serve saves \
             it every minute and when it stops, unless --history off)",
            state_dir.display(),
            path.display()
        );
    }
    // The whole file, whatever bound the daemon had.
    let (mut recorder, warning) = Recorder::load(state_dir, u64::MAX);
    if let Some(warning) = warning {
        // The loader's words are the daemon's, which sets a bad file aside and starts anew.
        let why = warning.trim_end_matches("; starting a new history");
        bail!("the saved history cannot be read: {why}");
    }
    // The pool's events, as the daemon marks them (an event file that cannot be read
    // leaves the export without them).
    if let Ok(found) = larch_engine::events::read_file(state_dir) {
        recorder.restore_events(&found.events);
    }
    let known = recorder
        .catalog()
        .series
        .into_iter()
        .map(|s| s.id)
        .collect();
    let ids = chosen_ids(asked, known)?;
    if ids.is_empty() {
        bail!("{} holds no series", path.display());
    }
    let answer = match format {
        Format::Csv => recorder.csv(&ids, range),
        Format::Json => recorder
            .series(&ids, range)
            .map(|answer| serde_json::to_string(&answer).expect("a series answer encodes")),
    };
    answer.map_err(option_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_default_to_all_and_unknown_ones_are_refused() {
        let known = || vec!["arc/hits".to_string(), "arc/size".to_string()];
        assert_eq!(chosen_ids(&[], known()).unwrap(), known());
        assert_eq!(chosen_ids(&[String::new()], known()).unwrap(), known());
        let asked = ["arc/size".to_string()];
        assert_eq!(chosen_ids(&asked, known()).unwrap(), asked);
        let err = chosen_ids(&["arc/size".to_string(), "nope".to_string()], known())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--ids: the history has no series \"nope\""),
            "{err}"
        );
    }

    #[test]
    fn a_bad_range_names_the_option() {
        let err = Range::parse(Some("x"), None, None, 1000)
            .map_err(option_error)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--from: expected seconds"), "{err}");
        let err = Range::parse(None, None, Some("7"), 1000)
            .map_err(option_error)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "--step: expected 1 or 60");
    }
}
