//! What the pool commands (`pool`, `volume`, `cache`, `log`) share: loading and saving
//! `pool.json` with messages that say what to do, and the paths they take made absolute,
//! created with a size, or written as the line of a request to the daemon.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use larch_engine::PoolConfig;

/// The pool of `state_dir`, or an error that says how to create one.
pub fn load(state_dir: &Path) -> anyhow::Result<PoolConfig> {
    PoolConfig::load(state_dir).with_context(|| no_pool(state_dir))
}

/// The pool of `state_dir` with its configuration lock held, for a change that saves it
/// again (see [`larch_engine::ConfigLock`]): hold the lock until the save.
pub fn load_locked(state_dir: &Path) -> anyhow::Result<(PoolConfig, larch_engine::ConfigLock)> {
    let lock = larch_engine::ConfigLock::acquire(state_dir).with_context(|| no_pool(state_dir))?;
    Ok((load(state_dir)?, lock))
}

fn no_pool(state_dir: &Path) -> String {
    format!(
        "no pool in {} (create one with `larch pool create NAME --state-dir {}`)",
        state_dir.display(),
        state_dir.display()
    )
}

/// Saves `config` in `state_dir` once it validates.
pub fn save(config: &PoolConfig, state_dir: &Path) -> anyhow::Result<()> {
    config.validate().map_err(anyhow::Error::msg)?;
    config.save(state_dir).with_context(|| {
        format!(
            "saving {}",
            state_dir.join(larch_engine::pool::CONFIG_FILE).display()
        )
    })
}

/// Creates `path` with `size` bytes (sparse) unless it exists.
pub fn create_file(path: &Path, size: u64) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.set_len(size)
        .with_context(|| format!("sizing {}", path.display()))?;
    Ok(())
}

/// `path`, relative to the current directory unless it is absolute.
pub fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    })
}

/// A path as the daemon needs it: absolute, UTF-8, on one line.
pub fn path_line(path: &Path) -> anyhow::Result<String> {
    match path.to_str() {
        Some(text) => Ok(format!("path={text}")),
        None => bail!(
            "{}: only UTF-8 paths can be sent to the daemon",
            path.display()
        ),
    }
}
