//! `larch get`: the tunables of a pool with their values, defaults and sources, in the
//! columns of `zfs get`; with a volume's name first, that volume's properties (`larch get
//! VOLUME [PROPERTY...]`: NAME PROPERTY VALUE SOURCE, the sources `default`, `local` when
//! set, and `-` for volsize, volblocksize and readonly), the running daemon's when one
//! answers, else `pool.json`'s.
//!
//! The value is the running daemon's when one answers, else what `tunables.json` sets,
//! else the default. The source says where it comes from: `default`, `tunables.json`
//! (what `larch set` saved), or `daemon` when the running daemon's value is neither
//! (like zfs's `temporary`: a value in `tunables.json` that the daemon refused, or an
//! entry removed from the file by hand while the daemon kept its value).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use larch_daemon::client;
use larch_engine::manage::{self, Target, VolumeProperty};
use larch_engine::tunables;
use serde_json::json;

/// Arguments of `larch get`.
#[derive(clap::Args)]
pub struct GetArgs {
    /// Tunables to show (default: all of them); or a volume's name, then its properties
    /// to show (default: all of them).
    #[arg(value_name = "[VOLUME] NAME")]
    pub names: Vec<String>,
    /// The pool's state directory.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
    /// Print JSON: one object per tunable, with numbers for values (per volume property:
    /// its value as text, and its bytes for a size).
    #[arg(long)]
    pub json: bool,
}

/// One line of the output.
struct Row {
    property: String,
    value: u64,
    default: u64,
    source: &'static str,
}

/// The numeric values `tunables.json` sets, applied as a start of the pool (ARC size
/// `arc_max_bytes`) applies them; entries that would be refused are reported and left
/// out (the daemon refuses them too).
fn saved_values(saved: &BTreeMap<String, String>, arc_max_bytes: u64) -> BTreeMap<String, u64> {
    let scratch = tunables::starting(arc_max_bytes);
    let list: Vec<(String, String)> = saved
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let refused = tunables::apply_in_turn(&scratch, &list);
    for (_, why) in &refused {
        eprintln!("larch get: tunables.json: {why}");
    }
    let now = tunables::values(&scratch);
    saved
        .keys()
        .filter(|name| !refused.iter().any(|(r, _)| r == *name))
        .filter_map(|name| now.get(name).map(|v| (name.clone(), *v)))
        .collect()
}

/// A row of `larch get`. `pool_default` replaces the built-in default where the pool
/// has its own (`zfs_arc_max` is the pool's `arc_max_bytes`).
fn row(name: &str, file: Option<u64>, running: Option<u64>, pool_default: Option<u64>) -> Row {
    let default = pool_default
        .or_else(|| tunables::default_value(name))
        .expect("a known tunable");
    let (value, source) = match (running, file) {
        (Some(run), Some(file)) if run == file => (run, "tunables.json"),
        (Some(run), None) if run == default => (run, "default"),
        (Some(run), _) => (run, "daemon"),
        (None, Some(file)) => (file, "tunables.json"),
        (None, None) => (default, "default"),
    };
    Row {
        property: name.to_string(),
        value,
        default,
        source,
    }
}

/// `larch get [NAME...]` and `larch get VOLUME [PROPERTY...]`.
pub fn run(args: GetArgs) -> anyhow::Result<ExitCode> {
    let config = crate::files::load(&args.state_dir)?;
    let known: Vec<&str> = tunables::TUNABLES.iter().map(|t| t.name).collect();
    if let Some((first, properties)) = args.names.split_first()
        && !known.contains(&first.as_str())
        && config.volumes.iter().any(|v| &v.name == first)
    {
        return volume(&args, first, properties);
    }
    for name in &args.names {
        if !known.contains(&name.as_str()) {
            bail!(
                "unknown tunable {name:?} (known: {}); nor is it a volume of pool {} \
                 (volumes: {})",
                known.join(", "),
                config.name,
                volume_names(&config)
            );
        }
    }
    let names: Vec<&str> = if args.names.is_empty() {
        known
    } else {
        args.names.iter().map(String::as_str).collect()
    };
    let file = saved_values(&tunables::load(&args.state_dir)?, config.arc_max_bytes);
    let running = match client::find(&args.state_dir) {
        Some(daemon) => Some(daemon.tunables()?),
        None => None,
    };
    let rows: Vec<Row> = names
        .iter()
        .map(|name| {
            let run = running.as_ref().and_then(|r| r.get(*name).copied());
            let pool_default = (*name == "zfs_arc_max").then_some(config.arc_max_bytes);
            row(name, file.get(*name).copied(), run, pool_default)
        })
        .collect();
    if args.json {
        let out: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "name": config.name,
                    "property": r.property,
                    "value": r.value,
                    "default": r.default,
                    "source": r.source,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let width = rows
        .iter()
        .map(|r| r.property.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let name_width = config.name.len().max(4);
    println!(
        "{:<name_width$}  {:<width$}  {:>8}  {:>8}  SOURCE",
        "NAME", "PROPERTY", "VALUE", "DEFAULT"
    );
    for r in &rows {
        println!(
            "{:<name_width$}  {:<width$}  {:>8}  {:>8}  {}",
            config.name,
            r.property,
            tunables::format_value(&r.property, r.value),
            tunables::format_value(&r.property, r.default),
            r.source
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn volume_names(config: &larch_engine::PoolConfig) -> String {
    if config.volumes.is_empty() {
        return "none".to_string();
    }
    let names: Vec<&str> = config.volumes.iter().map(|v| v.name.as_str()).collect();
    names.join(", ")
}

/// `larch get VOLUME [PROPERTY...]`.
fn volume(args: &GetArgs, name: &str, properties: &[String]) -> anyhow::Result<ExitCode> {
    let rows = match client::find(&args.state_dir) {
        Some(daemon) => daemon.volume_properties(name, properties)?,
        None => manage::volume_properties(Target::Files(&args.state_dir), name, properties)?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    let width = |f: fn(&VolumeProperty) -> &str, title: &str| {
        rows.iter()
            .map(|r| f(r).len())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let name_width = width(|r| &r.name, "NAME");
    let property_width = width(|r| &r.property, "PROPERTY");
    let value_width = width(|r| &r.value, "VALUE");
    let default_width = width(|r| &r.default, "DEFAULT");
    println!(
        "{:<name_width$}  {:<property_width$}  {:<value_width$}  {:<default_width$}  SOURCE",
        "NAME", "PROPERTY", "VALUE", "DEFAULT"
    );
    for r in &rows {
        println!(
            "{:<name_width$}  {:<property_width$}  {:<value_width$}  {:<default_width$}  {}",
            r.name, r.property, r.value, r.default, r.source
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_follow_where_the_value_comes_from() {
        let source = |file, running| row("l2arc_mfuonly", file, running, None).source;
        assert_eq!(source(None, None), "default");
        assert_eq!(source(Some(1), None), "tunables.json");
        assert_eq!(source(Some(0), None), "tunables.json");
        assert_eq!(source(None, Some(0)), "default");
        assert_eq!(source(Some(1), Some(1)), "tunables.json");
        assert_eq!(source(Some(1), Some(2)), "daemon");
        assert_eq!(source(None, Some(2)), "daemon");
        let r = row("l2arc_write_max", Some(8 << 20), Some(16 << 20), None);
        assert_eq!((r.value, r.default), (16 << 20, 32 << 20));
    }
}
