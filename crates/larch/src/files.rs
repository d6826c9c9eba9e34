//! What the pool commands (`pool`, `volume`, `cache`, `log`) share: loading and saving
//! `pool.json` with messages that say what to do, and the paths they take made absolute,
//! created with a size, or written as the line of a request to the daemon.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use larch_daemon::client;
use larch_engine::PoolConfig;
use larch_engine::manage::{ManageError, Target};

/// The pool of `state_dir`, or an error that says how to create one (none there) or that
/// its `pool.json` is damaged.
pub fn load(state_dir: &Path) -> anyhow::Result<PoolConfig> {
    PoolConfig::load(state_dir).map_err(|e| pool_error(state_dir, e))
}

/// The pool of `state_dir` with its configuration lock held, for a change that saves it
/// again (see [`larch_engine::ConfigLock`]): hold the lock until the save.
pub fn load_locked(state_dir: &Path) -> anyhow::Result<(PoolConfig, larch_engine::ConfigLock)> {
    let lock =
        larch_engine::ConfigLock::acquire(state_dir).map_err(|e| pool_error(state_dir, e))?;
    Ok((load(state_dir)?, lock))
}

/// An error about the pool of `state_dir`: "no pool" (with how to create one) when there
/// is none, else the error as it is (it names the file and what is wrong).
pub fn pool_error(state_dir: &Path, err: std::io::Error) -> anyhow::Error {
    if err.kind() == std::io::ErrorKind::NotFound {
        anyhow::Error::new(err).context(no_pool(state_dir))
    } else {
        anyhow::Error::new(err)
    }
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

/// A file this command created: removed again when dropped before [`NewFile::keep`], so
/// that a command that fails leaves no file behind.
#[must_use = "dropped, the file is removed"]
pub struct NewFile {
    path: Option<PathBuf>,
}

impl NewFile {
    /// The command succeeded: the file stays.
    pub fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What a command's `--size` asks of `path`: a missing file is created with `size` bytes
/// (sparse), and returned as a [`NewFile`] for the caller to keep once the command
/// succeeded; an existing file or block device must have that size already (`None` then:
/// nothing was created). Nothing is created without `size`. Call it once everything else
/// the command checks has been checked.
pub fn create_sized(path: &Path, size: Option<u64>) -> anyhow::Result<Option<NewFile>> {
    let Some(size) = size else {
        return Ok(None);
    };
    if size == 0 {
        bail!("--size must be above 0");
    }
    if let Some(have) = existing_size(path)? {
        if have != size {
            bail!(
                "{} exists with {have} bytes; drop --size to use it as it is, or remove it",
                path.display()
            );
        }
        return Ok(None);
    }
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let created = NewFile {
        path: Some(path.to_path_buf()),
    };
    file.set_len(size)
        .with_context(|| format!("sizing {} to {size} bytes", path.display()))?;
    Ok(Some(created))
}

/// `larch cache add` and `larch log add`: the device at `path` (a file created with
/// `size` first, when asked) joins the pool of `state_dir` through the running daemon's
/// `endpoint` when there is one, else through `in_files`, which edits the pool's files.
/// A file created here goes again when the device was not added. Returns what was done.
pub fn add_device(
    state_dir: &Path,
    path: &Path,
    size: Option<u64>,
    force: bool,
    endpoint: &str,
    in_files: fn(Target<'_>, &Path, bool) -> Result<String, ManageError>,
) -> anyhow::Result<String> {
    load(state_dir)?;
    let path = absolute(path)?;
    let created = create_sized(&path, size)?;
    let daemon = client::find(state_dir);
    let via_daemon = daemon.is_some();
    let added = match daemon {
        Some(daemon) => {
            let lines = [path_line(&path)?, format!("force={}", u8::from(force))];
            daemon.change(endpoint, &lines)
        }
        None => in_files(Target::Files(state_dir), &path, force).map_err(anyhow::Error::from),
    };
    keep_unless_not_done(created, added, via_daemon)
}

/// The outcome of a command that may have created `created` for a device: the file stays
/// when the change was made, and when it may have been (an error on the way to the
/// daemon, `via_daemon`, which may have taken the device into use before it); it goes
/// when the change was not made (refused here, or answered so by the daemon).
fn keep_unless_not_done<T>(
    created: Option<NewFile>,
    outcome: anyhow::Result<T>,
    via_daemon: bool,
) -> anyhow::Result<T> {
    let maybe_made = match &outcome {
        Ok(_) => true,
        Err(err) => {
            via_daemon
                && err
                    .downcast_ref::<larch_daemon::client::NotDone>()
                    .is_none()
        }
    };
    if maybe_made && let Some(created) = created {
        created.keep();
    }
    outcome
}

/// The size of the file or block device at `path`, `None` when nothing is there.
pub fn existing_size(path: &Path) -> anyhow::Result<Option<u64>> {
    use std::io::{Seek, SeekFrom};
    if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(None);
    }
    larch_engine::manage::check_file_or_block_device(path)?;
    // Seeking to the end gives the size of regular files and block devices alike.
    let size = std::fs::File::open(path)
        .and_then(|mut f| f.seek(SeekFrom::End(0)))
        .with_context(|| format!("reading the size of {}", path.display()))?;
    Ok(Some(size))
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
