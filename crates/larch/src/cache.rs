//! `larch cache add|remove`: a pool's cache devices (L2ARC). Through a live daemon when
//! one runs (it checks, applies and saves at once, and answers with its reason when it
//! refuses), else in the files, which the next start (or a daemon without HTTP, within a
//! second) picks up.

use std::path::PathBuf;
use std::process::ExitCode;

use larch_daemon::client;
use larch_engine::manage::{self, Target};
use larch_engine::units::parse_size;

use crate::files::{absolute, create_file, load, path_line};

/// `larch cache ...`
#[derive(clap::Subcommand)]
pub enum CacheCommand {
    /// Add a cache device (L2ARC): a running daemon formats it and feeds it at once,
    /// otherwise the next start does. It must be blank (its first 8 KiB zero) unless
    /// --force, and never in use by another running pool.
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

/// `larch cache ...`.
pub fn run(cmd: CacheCommand) -> anyhow::Result<ExitCode> {
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
            match client::find(&state_dir) {
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
            match client::find(&state_dir) {
                Some(daemon) => daemon.change("/admin/cache/remove", &[path_line(&path)?])?,
                None => manage::remove_cache_device(Target::Files(&state_dir), &path)?,
            }
        }
    };
    println!("{}", done.trim_end());
    Ok(ExitCode::SUCCESS)
}
