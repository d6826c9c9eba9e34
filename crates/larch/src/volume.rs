//! `larch volume add|remove`: a pool's volumes in `pool.json`, served from the next start
//! of `larch serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use larch_engine::units::parse_size;
use larch_engine::{CacheMode, LatencyModel, SyncMode, VolumeConfig, new_guid};

use crate::files::{absolute, create_file, load, save};

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

fn parse_sync(text: &str) -> Result<SyncMode, String> {
    match text {
        "standard" => Ok(SyncMode::Standard),
        "always" => Ok(SyncMode::Always),
        "disabled" => Ok(SyncMode::Disabled),
        other => Err(format!("{other:?} is not standard, always or disabled")),
    }
}

fn parse_mode(text: &str) -> Result<CacheMode, String> {
    match text {
        "all" => Ok(CacheMode::All),
        "metadata" => Ok(CacheMode::Metadata),
        "none" => Ok(CacheMode::None),
        _ => Err(format!("{text:?}: expected all, metadata or none")),
    }
}

/// `larch volume ...`.
pub fn run(cmd: VolumeCommand) -> anyhow::Result<ExitCode> {
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
