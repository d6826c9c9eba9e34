//! `larch serve-file PATH`: serve a plain file over NBD with no cache.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `larch serve-file`.
#[derive(clap::Args)]
pub struct ServeFileArgs {
    /// The file or block device to serve.
    pub path: PathBuf,
}

pub fn run(args: ServeFileArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("serve-file {}: not built yet", args.path.display())
}
