//! `larch log add|remove`: a pool's log device (SLOG), through a live daemon when one
//! runs, else in the files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use larch_daemon::client;
use larch_engine::manage::{self, Target};
use larch_engine::units::parse_size;

use crate::files::{add_device, load};

/// `larch log ...`
#[derive(clap::Subcommand)]
pub enum LogCommand {
    /// Add the pool's log device (SLOG) for the intent log: sync writes are then
    /// acknowledged once logged there. A running daemon formats it and uses it within a
    /// second. It must be blank (its first 8 KiB zero) unless --force, and never in use
    /// by another running pool.
    Add {
        /// The file or block device (a small fast one: a few seconds of writes).
        path: PathBuf,
        /// Create the file with this size when it does not exist (an existing one must have
        /// this size already; a file created for an add that fails is removed again).
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
        /// Remove it even though it holds acknowledged writes not yet replayed (a pool that
        /// was killed and not started since): those writes are lost. Without it, such a
        /// log device is refused.
        #[arg(long)]
        force: bool,
    },
}

/// `larch log add|remove`: through the running daemon when there is one (it applies the
/// change, then saves it), else by editing `pool.json`.
pub fn run(cmd: LogCommand) -> anyhow::Result<ExitCode> {
    let done = match cmd {
        LogCommand::Add {
            path,
            size,
            force,
            state_dir,
        } => add_device(
            &state_dir,
            &path,
            size,
            force,
            "/admin/log/add",
            manage::add_log_device,
        )?,
        LogCommand::Remove { state_dir, force } => {
            load(&state_dir)?;
            match client::find(&state_dir) {
                Some(daemon) => daemon.change("/admin/log/remove", &[])?,
                None => {
                    if let Some(pid) = client::running_pid(&state_dir) {
                        bail!(
                            "larch serve (pid {pid}) serves this pool without HTTP: removing \
                             its log device behind its back could lose sync writes; stop it \
                             first, or serve with --http"
                        );
                    }
                    if force {
                        manage::remove_log_device_discarding(Target::Files(&state_dir))?
                    } else {
                        manage::remove_log_device(Target::Files(&state_dir))?
                    }
                }
            }
        }
    };
    println!("{}", done.trim_end());
    Ok(ExitCode::SUCCESS)
}
