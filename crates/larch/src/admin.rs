//! `larch pool`, `larch volume`, `larch cache`: edit a pool's `pool.json`. Cache devices
//! are added and removed through a live daemon when one runs (it checks, applies and saves
//! at once, and answers with its reason when it refuses), else in the files; volume
//! changes take effect at the next start.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use larch_engine::manage::{self, Target};
use larch_engine::{CacheMode, LatencyModel, PoolConfig, SyncMode, VolumeConfig, new_guid};

use crate::daemon;
use larch_engine::units::{format_size, parse_size};

/// `larch pool ...`
#[derive(clap::Subcommand)]
pub enum PoolCommand {
    /// Create an empty pool (no volumes, no cache devices) in a state directory.
    Create {
        /// The pool's name.
        name: String,
        /// Where its state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
        /// zfs_arc_max: bytes of data the ARC may hold.
        #[arg(long, default_value = "1G", value_parser = parse_size)]
        arc_max: u64,
    },
    /// Forget a pool: removes its pool.json and state files (never volume or device data).
    Destroy {
        /// Where its state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
        /// Required: destroying is not undoable.
        #[arg(long)]
        force: bool,
    },
}

/// `larch volume ...`
#[derive(clap::Subcommand)]
pub enum VolumeCommand {
    /// Add a volume on a backing file or block device.
    Add {
        /// The volume's name (its NBD export name).
        name: String,
        /// The backing file or block device.
        #[arg(long)]
        backing: PathBuf,
        /// Create the backing file with this size (sparse) when it does not exist.
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Block size, a power of two from 4K to 128K.
        #[arg(long, default_value = "16K", value_parser = parse_size)]
        volblocksize: u64,
        /// What the ARC caches: all, metadata or none.
        #[arg(long, default_value = "all", value_parser = parse_mode)]
        primarycache: CacheMode,
        /// What is fed to cache devices: all, metadata or none.
        #[arg(long, default_value = "all", value_parser = parse_mode)]
        secondarycache: CacheMode,
        /// Refuse writes.
        #[arg(long)]
        readonly: bool,
        /// Injected backing-store read latency in ms (a device model for tests; 0 = off).
        #[arg(long, default_value_t = 0.0)]
        read_latency_ms: f64,
        /// Injected backing-store write latency in ms (a device model for tests; 0 = off).
        #[arg(long, default_value_t = 0.0)]
        write_latency_ms: f64,
        /// When writes are durable: standard (FUA and FLUSH wait), always (every write
        /// waits) or disabled (nothing waits; a crash loses recent acknowledged writes).
        #[arg(long, default_value = "standard", value_parser = parse_sync)]
        sync: SyncMode,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
    /// Remove a volume from the pool (its backing data is left alone).
    Remove {
        /// The volume's name.
        name: String,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
}

/// `larch cache ...`
#[derive(clap::Subcommand)]
pub enum CacheCommand {
    /// Add a cache device (L2ARC): a running daemon formats it and feeds it at once,
    /// otherwise the next start does. It must be blank (its first 8 KiB zero) unless
    /// --force.
    Add {
        /// The file or block device.
        path: PathBuf,
        /// Create the file with this size when it does not exist.
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Format the device even though it holds data (another pool's cache device, a
        /// file system, anything).
        #[arg(long)]
        force: bool,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
    /// Remove a cache device; a running daemon stops using it at once.
    Remove {
        /// The file or block device, as it was added.
        path: PathBuf,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
}

fn parse_sync(text: &str) -> Result<SyncMode, String> {
    match text {
        "standard" => Ok(SyncMode::Standard),
        "always" => Ok(SyncMode::Always),
        "disabled" => Ok(SyncMode::Disabled),
        other => Err(format!("{other:?} is not standard, always or disabled")),
    }
}

/// `larch log ...`
#[derive(clap::Subcommand)]
pub enum LogCommand {
    /// Add the pool's log device (SLOG) for the intent log: sync writes are then
    /// acknowledged once logged there. A running daemon formats it and uses it within a
    /// second. It must be blank (its first 8 KiB zero) unless --force.
    Add {
        /// The file or block device (a small fast one: a few seconds of writes).
        path: PathBuf,
        /// Create the file with this size when it does not exist.
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Format the device even though it holds data.
        #[arg(long)]
        force: bool,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
    /// Remove the log device. A running daemon syncs what the log covered first; for a
    /// stopped pool, records the log still holds are NOT replayed at the next start.
    Remove {
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
}

/// `larch log add|remove`: through the running daemon when there is one (it applies the
/// change, then saves it), else by editing `pool.json`.
pub fn log(cmd: LogCommand) -> anyhow::Result<ExitCode> {
    let done = match cmd {
        LogCommand::Add {
            path,
            size,
            force,
            state_dir,
        } => {
            load(&state_dir)?;
            let path = absolute(&path)?;
            if let Some(size) = size {
                create_file(&path, size)?;
            }
            match daemon::find(&state_dir) {
                Some(daemon) => {
                    let lines = [path_line(&path)?, format!("force={}", u8::from(force))];
                    daemon.change("/admin/log/add", &lines)?
                }
                None => manage::add_log_device(Target::Files(&state_dir), &path, force)?,
            }
        }
        LogCommand::Remove { state_dir } => {
            load(&state_dir)?;
            match daemon::find(&state_dir) {
                Some(daemon) => daemon.change("/admin/log/remove", &[])?,
                None => {
                    if let Some(pid) = daemon::running_pid(&state_dir) {
                        bail!(
                            "larch serve (pid {pid}) serves this pool without HTTP: removing \
                             its log device behind its back could lose sync writes; stop it \
                             first, or serve with --http"
                        );
                    }
                    manage::remove_log_device(Target::Files(&state_dir))?
                }
            }
        }
    };
    println!("{}", done.trim_end());
    Ok(ExitCode::SUCCESS)
}

fn parse_mode(text: &str) -> Result<CacheMode, String> {
    match text {
        "all" => Ok(CacheMode::All),
        "metadata" => Ok(CacheMode::Metadata),
        "none" => Ok(CacheMode::None),
        _ => Err(format!("{text:?}: expected all, metadata or none")),
    }
}

fn load(state_dir: &Path) -> anyhow::Result<PoolConfig> {
    PoolConfig::load(state_dir).with_context(|| {
        format!(
            "no pool in {} (create one with `larch pool create NAME --state-dir {}`)",
            state_dir.display(),
            state_dir.display()
        )
    })
}

fn save(config: &PoolConfig, state_dir: &Path) -> anyhow::Result<()> {
    config.validate().map_err(anyhow::Error::msg)?;
    config.save(state_dir).with_context(|| {
        format!(
            "saving {}",
            state_dir.join(larch_engine::pool::CONFIG_FILE).display()
        )
    })
}

fn create_file(path: &Path, size: u64) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.set_len(size)
        .with_context(|| format!("sizing {}", path.display()))?;
    Ok(())
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    })
}

pub fn pool(cmd: PoolCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PoolCommand::Create {
            name,
            state_dir,
            arc_max,
        } => {
            if state_dir.join(larch_engine::pool::CONFIG_FILE).exists() {
                bail!("{} already holds a pool", state_dir.display());
            }
            std::fs::create_dir_all(&state_dir)
                .with_context(|| format!("creating {}", state_dir.display()))?;
            let config = PoolConfig {
                name: name.clone(),
                guid: new_guid(),
                arc_max_bytes: arc_max,
                volumes: Vec::new(),
                cache_devices: Vec::new(),
                log_devices: Vec::new(),
            };
            save(&config, &state_dir)?;
            println!(
                "created pool {name} in {} (zfs_arc_max {})",
                state_dir.display(),
                format_size(arc_max)
            );
        }
        PoolCommand::Destroy { state_dir, force } => {
            let config = load(&state_dir)?;
            if !force {
                bail!(
                    "destroying pool {} needs --force (volume and device data are kept)",
                    config.name
                );
            }
            // Not under a daemon that has the pool open.
            let _lock = larch_engine::PoolLock::acquire(&state_dir)?;
            for file in [
                "pool.json",
                "tunables.json",
                "status.json",
                "history",
                "committed-txg",
            ] {
                let _ = std::fs::remove_file(state_dir.join(file));
            }
            println!("destroyed pool {}", config.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn volume(cmd: VolumeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        VolumeCommand::Add {
            name,
            backing,
            size,
            volblocksize,
            primarycache,
            secondarycache,
            readonly,
            read_latency_ms,
            write_latency_ms,
            sync,
            state_dir,
        } => {
            let mut config = load(&state_dir)?;
            if config.volumes.iter().any(|v| v.name == name) {
                bail!("the pool already has a volume {name}");
            }
            if !(0.0..=10_000.0).contains(&read_latency_ms)
                || !(0.0..=10_000.0).contains(&write_latency_ms)
            {
                bail!("--read-latency-ms and --write-latency-ms must be between 0 and 10000");
            }
            let backing = absolute(&backing)?;
            if let Some(why) =
                larch_engine::manage::backing_in_use(&state_dir, &config, &backing, readonly)
            {
                bail!("{why}");
            }
            if let Some(size) = size {
                create_file(&backing, size)?;
            }
            if !backing.exists() {
                bail!(
                    "{} does not exist (give --size to create it)",
                    backing.display()
                );
            }
            let latency_us = (read_latency_ms * 1000.0) as u64;
            let write_latency_us = (write_latency_ms * 1000.0) as u64;
            config.volumes.push(VolumeConfig {
                name: name.clone(),
                guid: new_guid(),
                backing,
                volblocksize: u32::try_from(volblocksize).unwrap_or(0),
                primarycache,
                secondarycache,
                readonly,
                latency: LatencyModel {
                    read_min_us: latency_us,
                    read_max_us: latency_us,
                    write_min_us: write_latency_us,
                    write_max_us: write_latency_us,
                },
                sync,
            });
            save(&config, &state_dir)?;
            println!("added volume {name} (served from the next `larch serve` start)");
        }
        VolumeCommand::Remove { name, state_dir } => {
            let mut config = load(&state_dir)?;
            let before = config.volumes.len();
            config.volumes.retain(|v| v.name != name);
            if config.volumes.len() == before {
                bail!("the pool has no volume {name}");
            }
            save(&config, &state_dir)?;
            println!("removed volume {name} (its data is untouched)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A path as the daemon needs it: absolute, UTF-8, on one line.
fn path_line(path: &Path) -> anyhow::Result<String> {
    match path.to_str() {
        Some(text) => Ok(format!("path={text}")),
        None => bail!(
            "{}: only UTF-8 paths can be sent to the daemon",
            path.display()
        ),
    }
}

pub fn cache(cmd: CacheCommand) -> anyhow::Result<ExitCode> {
    let done = match cmd {
        CacheCommand::Add {
            path,
            size,
            force,
            state_dir,
        } => {
            load(&state_dir)?;
            let path = absolute(&path)?;
            if let Some(size) = size {
                create_file(&path, size)?;
            }
            match daemon::find(&state_dir) {
                Some(daemon) => {
                    let lines = [path_line(&path)?, format!("force={}", u8::from(force))];
                    daemon.change("/admin/cache/add", &lines)?
                }
                None => manage::add_cache_device(Target::Files(&state_dir), &path, force)?,
            }
        }
        CacheCommand::Remove { path, state_dir } => {
            load(&state_dir)?;
            let path = absolute(&path)?;
            match daemon::find(&state_dir) {
                Some(daemon) => daemon.change("/admin/cache/remove", &[path_line(&path)?])?,
                None => manage::remove_cache_device(Target::Files(&state_dir), &path)?,
            }
        }
    };
    println!("{}", done.trim_end());
    Ok(ExitCode::SUCCESS)
}
