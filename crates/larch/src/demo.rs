//! `larch demo`: placeholder until the policy exists.

use std::process::ExitCode;

#[derive(clap::Args, Default)]
pub struct DemoArgs {}

pub fn run(_args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("demo: not built yet")
}
