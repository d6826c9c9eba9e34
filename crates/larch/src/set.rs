//! `larch set [VOLUME] NAME=VALUE...`: with a volume's name first, change properties of
//! that volume (`primarycache`, `secondarycache`, `sync`, `logbias`, `volsize`; see
//! `larch volume set`, which this is); without, change tunables of the pool. Either is all
//! or nothing. A live daemon checks, applies and saves the values at once and answers with
//! its reason when it refuses; with none, they are checked and saved in `tunables.json` or
//! `pool.json`, which the next start applies. Both go through `larch_engine::manage`, so
//! both accept the same values.

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
    /// With a volume: allow a volsize below the volume's size now, dropping the data past
    /// the new end.
    #[arg(long)]
    pub force: bool,
    /// `NAME=VALUE...` sets tunables of the pool, e.g. l2arc_write_max=64M (sizes take K,
    /// M, G, T suffixes, as --size does); `VOLUME NAME=VALUE...` (a first argument with no
    /// `=`) sets properties of that volume, e.g. `vol0 secondarycache=none`. Both are
    /// listed below.
    #[arg(required = true, value_name = "[VOLUME] NAME=VALUE")]
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

/// Every volume property with what it is, from the engine's table: part of the help text
/// of `larch set`, `larch get` and `larch volume set`.
pub fn volume_properties_help() -> String {
    let width = manage::VOLUME_PROPERTIES
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(0);
    let mut out = String::from("Volume properties (OpenZFS names; read-only ones marked):\n");
    for def in manage::VOLUME_PROPERTIES {
        let fixed = if def.settable { "" } else { " (read-only)" };
        out += &format!("  {:<width$}  {}{fixed}\n", def.name, def.help);
    }
    out
}

/// The help after the options of `larch set` and `larch get`: volume properties, then
/// tunables.
pub fn properties_help() -> String {
    format!("{}\n{}", volume_properties_help(), tunables_help())
}

/// `larch set`: prints what `tunables.json` then holds, or what the volume's change did.
pub fn run(args: SetArgs) -> anyhow::Result<ExitCode> {
    if !args
        .state_dir
        .join(larch_engine::pool::CONFIG_FILE)
        .exists()
    {
        bail!("{}: no pool here", args.state_dir.display());
    }
    // A lone word is a malformed tunable assignment, as it always was.
    if let Some((volume, assignments)) = args
        .assignments
        .split_first()
        .filter(|(first, rest)| !first.contains('=') && !rest.is_empty())
    {
        return crate::volume::set_properties(&args.state_dir, volume, assignments, args.force);
    }
    if args.force {
        bail!("--force is for a volume's volsize: `larch set VOLUME volsize=SIZE --force`");
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
