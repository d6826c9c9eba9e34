//! `larch dump DEVICE`: the `zdb -l` of a larch cache device.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `larch dump`.
#[derive(clap::Args)]
pub struct DumpArgs {
    /// The cache device or file to read.
    pub device: PathBuf,
}

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dump {}: not built yet", args.device.display())
}
