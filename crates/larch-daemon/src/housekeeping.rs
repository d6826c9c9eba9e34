//! What the daemon does every second besides serving: apply edits of `tunables.json` and
//! `pool.json` (how changes made while no HTTP endpoint answered reach it), show rebuild
//! progress and announce rebuilds and faults of cache devices, write the status file,
//! record the header sequences the cache devices reached, and print the optional stats
//! line.
//!
//! A tick does file I/O (the status file is fsynced, a cache device added in `pool.json`
//! is formatted), so it runs on tokio's blocking pool, never on the workers that serve
//! NBD requests.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use larch_engine::events::EVENTS_FILE;
use larch_engine::report::{Arcstats, CacheDeviceReport, MissingStat};
use larch_engine::units::format_size;
use larch_engine::{DeviceState, Pool, PoolConfig, tunables};

use crate::history;
use crate::recorder::Recorder;
use crate::status::{STATUS_FILE, STATUS_FORMAT, StatusReport};

/// The housekeeping's state from one tick to the next.
pub(crate) struct Housekeeper {
    seen: FilesSeen,
    /// Per cache device (in report order): whether its rebuild or fault was announced.
    announced: Vec<bool>,
    progress: RebuildProgressBar,
    tick: u64,
    stats_interval_secs: u64,
    /// The HTTP address, as the status file reports it.
    http: Option<String>,
    /// Whether the last status write failed (its error is logged once per streak).
    status_failing: bool,
    /// Whether the last save of the pool's events failed (logged once per streak).
    events_failing: bool,
    /// The history the Analytics page shows, when it is kept.
    history: Option<History>,
}

/// The pool's history and where each new second of it goes.
pub(crate) struct History {
    /// The history.
    pub(crate) recorder: Arc<Mutex<Recorder>>,
    /// Listeners of `/api/v1/live`.
    pub(crate) live: tokio::sync::broadcast::Sender<Arc<str>>,
    /// Held while the history is saved: the file is written outside the recorder's lock,
    /// and the periodic save and the one at a clean stop must not write it at once, nor
    /// an older copy after a newer one.
    pub(crate) saving: Arc<Mutex<()>>,
    /// The number of the pool's last event the history was given.
    pub(crate) events_seen: u64,
}

/// Seconds between saves of the history (it is also saved at a clean stop).
const HISTORY_SAVE_SECS: u64 = 60;

/// Seconds between records of the header sequences the cache devices reached
/// (`l2-sequences.json`; also written at a clean stop): an image of a device taken before
/// the last record is formatted, not rebuilt, if it is put back.
const L2_SEQUENCES_RECORD_SECS: u64 = 60;

impl Housekeeper {
    /// Housekeeping of `pool`, which has just been opened: the files as they are now are
    /// what it was opened with.
    pub(crate) fn new(
        pool: &Pool,
        stats_interval_secs: u64,
        http: Option<String>,
        history: Option<History>,
    ) -> Housekeeper {
        Housekeeper {
            seen: FilesSeen::now(pool),
            announced: Vec::new(),
            progress: RebuildProgressBar::default(),
            tick: 0,
            stats_interval_secs,
            http,
            status_failing: false,
            events_failing: false,
            history,
        }
    }

    /// Runs one tick every second until `stop` is notified; a tick under way when it is
    /// ends first (so nothing writes the status file after the daemon's last one).
    pub(crate) async fn run(mut self, pool: Arc<Pool>, stop: Arc<tokio::sync::Notify>) {
        // Once a second on average: a tick that runs long is not followed by a burst of
        // catch-up ticks, and the next one waits for the following whole second.
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = stop.notified() => return,
            }
            let pool = Arc::clone(&pool);
            let ticked = tokio::task::spawn_blocking(move || {
                self.tick(&pool);
                self
            })
            .await;
            match ticked {
                Ok(keeper) => self = keeper,
                Err(err) => {
                    eprintln!("larch serve: housekeeping stopped: {err}");
                    return;
                }
            }
        }
    }

    fn tick(&mut self, pool: &Pool) {
        self.tick += 1;
        self.seen.apply_changes(pool);
        let status = StatusReport::of(pool, true, self.http.clone());
        let devices = &status.pool.cache_devices;
        self.progress.show(devices, self.tick);
        self.announce(pool, devices);
        self.write_status(pool, &status);
        self.save_events(pool);
        if self.tick.is_multiple_of(L2_SEQUENCES_RECORD_SECS)
            && let Err(err) = pool.record_l2_sequences()
        {
            eprintln!("larch serve: {}: {err}", larch_engine::L2_SEQUENCES_FILE);
        }
        if let Some(history) = &mut self.history {
            let save = self.tick.is_multiple_of(HISTORY_SAVE_SECS);
            let events = pool.engine.events.since(history.events_seen);
            if let Some(last) = events.last() {
                history.events_seen = last.seq;
            }
            // Taken before the recorder, so that copies are written in the order taken.
            let saving = save.then(|| history.saving.lock().expect("history save lock"));
            let (live, snapshot) = {
                let mut recorder = history.recorder.lock().expect("recorder lock");
                recorder.add_events(&events);
                let live = recorder.record(crate::unix_time_secs(), &status.pool);
                (live, save.then(|| recorder.snapshot()))
            };
            // Encoded, compressed and written with the recorder free: API handlers and
            // the next tick do not wait for zstd or the disk.
            if let Some(snapshot) = snapshot
                && let Err(err) = snapshot.save(&pool.state_dir)
            {
                eprintln!("larch serve: saving the history: {err}");
            }
            drop(saving);
            if history.live.receiver_count() > 0
                && let Ok(json) = serde_json::to_string(&live)
            {
                let _ = history.live.send(Arc::from(json));
            }
        }
        if self.stats_interval_secs > 0 && self.tick.is_multiple_of(self.stats_interval_secs) {
            match stats_line(&status.pool.arcstats) {
                Ok(line) => eprintln!("{line}"),
                Err(err) => eprintln!("larch serve: stats line: {err}"),
            }
        }
    }

    /// Announces, once per device, the end of its rebuild or its fault.
    fn announce(&mut self, pool: &Pool, devices: &[CacheDeviceReport]) {
        self.announced.resize(devices.len(), false);
        for (device, announced) in devices.iter().zip(self.announced.iter_mut()) {
            if *announced {
                continue;
            }
            let line = match device.state {
                DeviceState::Online => device.rebuild.map(|r| {
                    format!(
                        "L2ARC rebuild successful, restored {} blocks ({})",
                        r.bufs, device.path
                    )
                }),
                DeviceState::Faulted => Some(format!(
                    "cache device {} faulted: {}",
                    device.path,
                    device.fault.clone().unwrap_or_default()
                )),
                _ => None,
            };
            if let Some(line) = line {
                eprintln!("larch serve: {line}");
                history::append(&pool.state_dir, &line);
                *announced = true;
            } else if device.state == DeviceState::Online {
                *announced = true;
            }
        }
    }

    /// Appends the pool's new events to its event file (a kill loses a second of them at
    /// most); a failure is logged once per streak.
    fn save_events(&mut self, pool: &Pool) {
        match pool.engine.events.save() {
            Ok(()) if self.events_failing => {
                eprintln!("larch serve: {} written again", EVENTS_FILE);
                self.events_failing = false;
            }
            Ok(()) => {}
            Err(err) if !self.events_failing => {
                eprintln!("larch serve: {EVENTS_FILE} not written: {err}");
                self.events_failing = true;
            }
            Err(_) => {}
        }
    }

    fn write_status(&mut self, pool: &Pool, status: &StatusReport) {
        debug_assert_eq!(status.format, STATUS_FORMAT);
        match status.write(&pool.state_dir) {
            Ok(()) if self.status_failing => {
                eprintln!("larch serve: {STATUS_FILE} written again");
                self.status_failing = false;
            }
            Ok(()) => {}
            Err(err) if !self.status_failing => {
                eprintln!("larch serve: {STATUS_FILE} not written: {err}");
                self.status_failing = true;
            }
            Err(_) => {}
        }
    }
}

/// The `--stats-interval` line.
fn stats_line(a: &Arcstats) -> Result<String, MissingStat> {
    Ok(format!(
        "arc size {} c {} hits {} misses {} | l2 size {} hits {} misses {} feeds {} | backing reads {}",
        format_size(a.get("size")?),
        format_size(a.get("c")?),
        a.get("hits")?,
        a.get("misses")?,
        format_size(a.get("l2_size")?),
        a.get("l2_hits")?,
        a.get("l2_misses")?,
        a.get("l2_feeds")?,
        a.get("backing_reads")?,
    ))
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
        let closing = match pool.config_lock.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if *closing {
            return;
        }
        let now = FilesSeen::now(pool);
        if now.tunables != self.tunables {
            self.tunables = now.tunables;
            if let Ok(saved) = tunables::load(&pool.state_dir) {
                let before = tunables::values(&pool.engine.tunables);
                for refused in tunables::apply(&pool.engine.tunables, &saved) {
                    eprintln!("larch serve: tunables.json: {refused}");
                }
                let after = tunables::values(&pool.engine.tunables);
                for event in tunables::change_events(&before, &after) {
                    pool.engine.events.record(event);
                }
            }
        }
        if now.config != self.config {
            self.config = now.config;
            match PoolConfig::load(&pool.state_dir) {
                Ok(config) => {
                    let mut done = pool.apply_cache_config(&config);
                    done.extend(pool.apply_volume_config(&config));
                    for line in done {
                        eprintln!("larch serve: {line}");
                        history::append(&pool.state_dir, &line);
                    }
                }
                Err(err) => eprintln!("larch serve: pool.json: {err}"),
            }
        }
    }
}

/// Rebuild progress on standard error while cache devices rebuild: a bar redrawn every
/// second on a terminal, a plain line every 5 seconds otherwise.
#[derive(Default)]
struct RebuildProgressBar {
    drawn: bool,
}

impl RebuildProgressBar {
    fn show(&mut self, devices: &[CacheDeviceReport], tick: u64) {
        let tty = std::io::stderr().is_terminal();
        let parts: Vec<String> = devices
            .iter()
            .filter(|d| d.state == DeviceState::Rebuilding)
            .map(progress)
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

/// One rebuilding device's part of the progress line: name, bar, percent, blocks.
fn progress(device: &CacheDeviceReport) -> String {
    let permille = device.rebuild_permille.min(1000) as usize;
    let filled = permille * 20 / 1000;
    format!(
        "{} [{}{}] {:>5.1}% {} blocks",
        Path::new(&device.path)
            .file_name()
            .unwrap_or_default()
            .to_string_lossy(),
        "#".repeat(filled),
        ".".repeat(20 - filled),
        permille as f64 / 10.0,
        device.rebuild_entries
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::DemoPool;

    #[test]
    fn the_stats_line_finds_every_stat_in_a_pool_report() {
        let demo = DemoPool::new("stats-line");
        let line = stats_line(&demo.pool.report().arcstats).unwrap();
        assert!(line.starts_with("arc size "), "{line}");
        let err = stats_line(&Arcstats::default()).unwrap_err();
        assert_eq!(err, MissingStat("size".to_string()));
    }

    #[test]
    fn progress_shows_name_bar_percent_and_blocks() {
        let demo = DemoPool::new("progress");
        let mut device = demo.pool.report().cache_devices.remove(0);
        device.rebuild_permille = 525;
        device.rebuild_entries = 42;
        assert_eq!(
            progress(&device),
            "cache0.img [##########..........]  52.5% 42 blocks"
        );
    }

    /// A tick saves the pool's new events and hands them to the history; a change of
    /// `tunables.json` made behind the daemon's back is an event too.
    #[test]
    fn a_tick_saves_the_events_and_marks_them_on_the_charts() {
        use larch_engine::EventKind;
        let demo = DemoPool::new("tick-events");
        let recorder = Arc::new(Mutex::new(Recorder::new(1 << 20)));
        let history = History {
            recorder: Arc::clone(&recorder),
            live: tokio::sync::broadcast::channel(4).0,
            saving: Arc::new(Mutex::new(())),
            events_seen: demo.pool.engine.events.newest_seq(),
        };
        let mut keeper = Housekeeper::new(&demo.pool, 0, None, Some(history));
        // Edited by hand while the pool runs (the file's time must change to be seen).
        std::thread::sleep(Duration::from_millis(20));
        let mut saved = tunables::load(&demo.dir).unwrap();
        saved.insert("l2arc_enabled".into(), "0".into());
        tunables::save(&demo.dir, &saved).unwrap();
        keeper.tick(&demo.pool);
        assert!(!demo.pool.engine.tunables.l2arc_enabled());
        let found = larch_engine::events::read_file(&demo.dir).unwrap();
        let last = found.events.last().expect("events saved").kind.clone();
        assert_eq!(last, EventKind::L2arcSwitch { enabled: false });
        let marked = recorder
            .lock()
            .unwrap()
            .series(
                &[],
                crate::recorder::Range::parse(Some("-60"), None, None, crate::unix_time_secs() + 1)
                    .unwrap(),
            )
            .unwrap()
            .events;
        assert!(
            marked
                .iter()
                .any(|e| e.kind == "switch" && e.text == "l2arc_enabled=0"),
            "{marked:?}"
        );
    }

    #[test]
    fn a_tick_writes_the_status_file() {
        let demo = DemoPool::new("tick");
        let mut keeper = Housekeeper::new(&demo.pool, 1, Some("127.0.0.1:9".to_string()), None);
        keeper.tick(&demo.pool);
        let text = std::fs::read_to_string(demo.dir.join(STATUS_FILE)).unwrap();
        let status = StatusReport::from_json(&text).unwrap();
        assert!(status.running);
        assert_eq!(status.pid, std::process::id());
        assert_eq!(status.http.as_deref(), Some("127.0.0.1:9"));
        assert_eq!(status.pool.volumes[0].name, "vol0");
    }
}
