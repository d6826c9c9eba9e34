//! `larch events`: what happened to a pool, and when, as `zpool events` lists a pool's
//! (`larch_engine::events` has the kinds). A running daemon answers from its log in memory
//! (`GET /api/v1/events`); with none, the pool's event file is read. `-f` follows: it
//! asks again every half second for the events after the last it printed, from the daemon
//! while one answers and from the file otherwise, until interrupted.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use larch_daemon::client::{self, Daemon};
use larch_engine::Event;

/// Arguments of `larch events`.
#[derive(clap::Args)]
#[command(after_help = EVENTS_HELP)]
pub struct EventsArgs {
    /// Follow: print each new event as it happens, until interrupted.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// One JSON object per event and line (its `seq`, `time_ms`, `class` and the fields
    /// of its class), instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
}

/// What `--help` adds: the classes.
const EVENTS_HELP: &str = "\
Classes (docs/engine.md, \"Events\"):
  pool.open, pool.close             the pool opened (the daemon started), closed cleanly
  cache.add, cache.remove           a cache device added or removed
  cache.fault, cache.online         a cache device taken out of use after an error; back
  l2arc.rebuild_start, _end         a cache device's index rebuilt from its log (counts)
  l2arc.switch                      the L2ARC switch flipped (l2arc_enabled)
  tunable.set                       a tunable changed (larch set, the page, tunables.json)
  volume.property, volume.fail      a volume's property changed; a volume failed
  log.add, log.remove, log.fault    the log device added, removed, faulted
  txg.stall, txg.stall_end          writes stalled: a TXG sync longer than
                                    zfs_txg_timeout, or writers blocked at the dirty limit
  lease.take, .lost, .lapse,        an object-store volume's lease: taken at open, lost
  .resume, .release                 to another node, run out, renewed again, given up
The pool keeps its last 1,000 events, across restarts, in the file `events` of its
state directory.";

/// How often `-f` asks for new events.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Where events come from: the daemon while one answers, else the event file.
struct Source {
    state_dir: PathBuf,
    daemon: Option<Daemon>,
}

impl Source {
    /// The events after `after`, from the daemon (found again if it went away) or the
    /// file.
    fn after(&mut self, after: u64) -> anyhow::Result<Vec<Event>> {
        if self.daemon.is_none() {
            self.daemon = client::find(&self.state_dir);
        }
        if let Some(daemon) = &self.daemon {
            match daemon.events(after) {
                Ok(answer) => return Ok(answer.events),
                // Stopped (or stopping) meanwhile: its last events are in the file.
                Err(_) => self.daemon = None,
            }
        }
        from_file(&self.state_dir, after)
    }
}

/// The events of the pool's event file after `after`.
fn from_file(state_dir: &Path, after: u64) -> anyhow::Result<Vec<Event>> {
    let found = larch_engine::events::read_file(state_dir).with_context(|| {
        format!(
            "reading {}",
            state_dir.join(larch_engine::events::EVENTS_FILE).display()
        )
    })?;
    Ok(found.events.into_iter().filter(|e| e.seq > after).collect())
}

/// `larch events`.
pub fn run(args: EventsArgs) -> anyhow::Result<ExitCode> {
    if !args
        .state_dir
        .join(larch_engine::pool::CONFIG_FILE)
        .exists()
    {
        bail!("{}: no pool here", args.state_dir.display());
    }
    let mut source = Source {
        state_dir: args.state_dir.clone(),
        daemon: None,
    };
    let mut out = std::io::stdout().lock();
    if !args.json {
        writeln!(out, "{}", heading())?;
    }
    let mut last = 0;
    loop {
        for event in source.after(last)? {
            last = last.max(event.seq);
            if args.json {
                writeln!(out, "{}", serde_json::to_string(&event)?)?;
            } else {
                writeln!(out, "{}", line(&event))?;
            }
        }
        out.flush()?;
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// Width of the time column (`Mar 12 2026 10:31:05.123`) and of the class column.
const TIME_WIDTH: usize = 24;
const CLASS_WIDTH: usize = 19;

fn heading() -> String {
    format!("{:<TIME_WIDTH$}  {:<CLASS_WIDTH$}  EVENT", "TIME", "CLASS")
}

/// One event as a line of the table: local time, class, the event in words.
fn line(event: &Event) -> String {
    format!(
        "{:<TIME_WIDTH$}  {:<CLASS_WIDTH$}  {}",
        format_time(&local_time(event.time_ms)),
        event.kind.class(),
        event.kind
    )
}

/// A time of day and date, broken down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Broken {
    year: i32,
    /// 0 for January.
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    millis: u32,
}

/// `time_ms` (since the epoch) in the local time zone.
fn local_time(time_ms: u64) -> Broken {
    let secs = (time_ms / 1000) as libc::time_t;
    // SAFETY: a zeroed `tm` is a valid value for localtime_r to fill; both pointers are
    // to live locals.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    Broken {
        year: tm.tm_year + 1900,
        month: tm.tm_mon.clamp(0, 11) as u32,
        day: tm.tm_mday as u32,
        hour: tm.tm_hour as u32,
        minute: tm.tm_min as u32,
        second: tm.tm_sec as u32,
        millis: (time_ms % 1000) as u32,
    }
}

/// A time as `zpool events` prints it (to the millisecond: larch records milliseconds).
fn format_time(t: &Broken) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{} {:>2} {} {:02}:{:02}:{:02}.{:03}",
        MONTHS[t.month as usize], t.day, t.year, t.hour, t.minute, t.second, t.millis
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use larch_engine::EventKind;

    #[test]
    fn times_print_as_zpool_events_prints_them() {
        let t = Broken {
            year: 2026,
            month: 2,
            day: 7,
            hour: 9,
            minute: 5,
            second: 3,
            millis: 42,
        };
        assert_eq!(format_time(&t), "Mar  7 2026 09:05:03.042");
        assert_eq!(format_time(&t).len(), TIME_WIDTH);
        // The milliseconds are the event's own, whatever the zone.
        assert_eq!(local_time(1_700_000_000_987).millis, 987);
    }

    #[test]
    fn a_line_has_the_time_the_class_and_the_event_in_words() {
        let event = Event {
            seq: 7,
            time_ms: 1_700_000_000_000,
            kind: EventKind::L2arcSwitch { enabled: false },
        };
        let text = line(&event);
        let (time, rest) = text.split_at(TIME_WIDTH);
        assert_eq!(time, format_time(&local_time(event.time_ms)));
        assert_eq!(
            rest,
            format!(
                "  {:<CLASS_WIDTH$}  L2ARC off (l2arc_enabled=0)",
                "l2arc.switch"
            )
        );
        assert!(heading().starts_with("TIME "));
        assert_eq!(heading().find("CLASS"), text.find("l2arc.switch"));
        // The longest class fits its column.
        assert!("l2arc.rebuild_start".len() <= CLASS_WIDTH);
    }
}
