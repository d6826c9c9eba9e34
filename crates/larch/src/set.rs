//! `larch set NAME=VALUE...`: change tunables of a pool, all or nothing. A live daemon
//! checks, applies and saves the values at once and answers with its reason when it
//! refuses; with none, they are checked and saved in `tunables.json`, which the next start
//! applies. Both go through `larch_engine::manage`, so both accept the same values.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use larch_daemon::client;
use larch_engine::manage::{self, Target};

/// Arguments of `larch set`.
#[derive(clap::Args)]
pub struct SetArgs {
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// NAME=VALUE pairs, e.g. l2arc_write_max=64M (sizes take K, M, G, T suffixes, as
    /// --size does). The tunables are listed below.
    #[arg(required = true)]
    pub assignments: Vec<String>,
}

/// Every tunable with its default and meaning, from the engine's one table: the help text
/// of `larch set` and `larch get`.
pub fn tunables_help() -> String {
    let width = larch_engine::tunables::TUNABLES
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(0);
    let mut out = String::from("Tunables (OpenZFS names; default in brackets):\n");
    for def in larch_engine::tunables::TUNABLES {
        let default = larch_engine::tunables::default_text(def);
        out += &format!("  {:<width$}  {} [{default}]\n", def.name, def.help);
    }
    out
}

/// `larch set`: prints what `tunables.json` then holds.
pub fn run(args: SetArgs) -> anyhow::Result<ExitCode> {
    if !args
        .state_dir
        .join(larch_engine::pool::CONFIG_FILE)
        .exists()
    {
        bail!("{}: no pool here", args.state_dir.display());
    }
    if let Some(daemon) = client::find(&args.state_dir) {
        print!("{}", daemon.change("/admin/set", &args.assignments)?);
        return Ok(ExitCode::SUCCESS);
    }
    let saved = manage::set_tunables(Target::Files(&args.state_dir), &args.assignments)?;
    for (name, value) in &saved {
        println!("{name}={value}");
    }
    Ok(ExitCode::SUCCESS)
}
