//! `larch sim`: placeholder until trace replay exists.

use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum SimCommand {
    /// Replay a block trace.
    Replay,
}

pub fn run(_cmd: SimCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("sim: not built yet")
}
