//! A state directory's files and the locks on device files, which the pool, the parts
//! that attach devices, and the tunables all use: the pool's locks (`pool.lock`,
//! `config.lock`), the atomic and durable writer of state files, and the `flock`s that
//! keep two running pools off one backing, cache or log device file.

use std::fs;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Name of the configuration file in a state directory.
pub const CONFIG_FILE: &str = "pool.json";

/// Name of the file a process locks while it has the pool open.
pub const LOCK_FILE: &str = "pool.lock";

/// Name of the file whose lock serialises changes to a pool's configuration files
/// (`pool.json`, `tunables.json`): by the CLI on the files, and by the daemon.
pub const CONFIG_LOCK_FILE: &str = "config.lock";

/// A hold of [`CONFIG_LOCK_FILE`] (an exclusive `flock`, waited for): a change reads the
/// configuration, changes it and saves it under it, so two changes at once (two CLI
/// commands on a stopped pool, or one beside the daemon's) cannot lose one another or
/// write the same temporary file. Dropped, it is released; the kernel releases it when its
/// holder dies.
#[derive(Debug)]
pub struct ConfigLock {
    _file: fs::File,
}

impl ConfigLock {
    /// Waits for and takes the configuration lock of the pool in `state_dir` (which must
    /// hold a pool: no lock file is made elsewhere).
    pub fn acquire(state_dir: &Path) -> io::Result<ConfigLock> {
        if !state_dir.join(CONFIG_FILE).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no {CONFIG_FILE} in {}", state_dir.display()),
            ));
        }
        let path = state_dir.join(CONFIG_LOCK_FILE);
        let file = open_lock_file(&path)?;
        loop {
            // SAFETY: flock on a descriptor this function owns; it only changes lock state.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(ConfigLock { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(io::Error::new(
                    err.kind(),
                    format!("locking {}: {err}", path.display()),
                ));
            }
        }
    }
}

/// Opens (creating it if need be, never truncating it) the file a lock is taken on.
fn open_lock_file(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// One process's hold of a pool: an exclusive `flock` on [`LOCK_FILE`] in its state
/// directory, which also records the holder's pid for the message a second process gets.
/// Two processes serving one pool would write the same cache devices, log and backing
/// stores without knowing of each other. The kernel drops the lock when its holder ends,
/// however it ends (kill -9 included), so a crash never leaves the pool locked; the file
/// itself stays (removing it would let a third process lock a new file while the second
/// still holds the old one).
#[derive(Debug)]
pub struct PoolLock {
    _file: fs::File,
}

impl PoolLock {
    /// Locks the pool of `state_dir` (which must exist), without waiting: fails at once
    /// when another process has it open.
    pub fn acquire(state_dir: &Path) -> io::Result<PoolLock> {
        let path = state_dir.join(LOCK_FILE);
        let mut file = open_lock_file(&path)?;
        // SAFETY: flock on a descriptor this function owns; it only changes lock state.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io::Error::new(
                    err.kind(),
                    format!("locking {}: {err}", path.display()),
                ));
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = match text.trim().parse::<u32>() {
                Ok(pid) => format!(" (pid {pid})"),
                Err(_) => String::new(),
            };
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "the pool in {} is open in another process{holder}: one pool is served \
                     by one process at a time (stop the other `larch serve` first)",
                    state_dir.display()
                ),
            ));
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)?;
        file.write_all_at(pid.as_bytes(), 0)?;
        Ok(PoolLock { _file: file })
    }
}

/// Writes a file of a state directory atomically and durably: the bytes go to a
/// temporary file that is fsynced, then renamed over `name`, then the directory is
/// fsynced. A crash leaves the old file or the new one, never a mix, and once this
/// returns the new one survives a power loss. Every state file goes through here
/// (`pool.json`, `tunables.json`, `committed-txg`, `l2-format`, `l2-sequences.json`,
/// `failed-volumes.json`, and the daemon's files).
pub fn write_state_file(state_dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    write_state_file_mode(state_dir, name, bytes, 0o644)
}

/// [`write_state_file`] for a file only its owner may read (mode 0600), such as a
/// secret token.
pub fn write_private_state_file(state_dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    write_state_file_mode(state_dir, name, bytes, 0o600)
}

fn write_state_file_mode(state_dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join(name);
    let tmp = state_dir.join(format!("{name}.tmp"));
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    // A leftover temporary file (a crash between create and rename) may have another mode.
    let _ = fs::remove_file(&tmp);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut file| {
            io::Write::write_all(&mut file, bytes)?;
            file.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, &path));
    if let Err(err) = written {
        // A full file system: the partial temporary file goes, not left beside the file.
        let _ = fs::remove_file(&tmp);
        return Err(named(err));
    }
    fs::File::open(state_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(named)
}

/// Takes a `flock` on the regular file at `path` without waiting (shared or exclusive)
/// and returns the descriptor that holds it; `None` for a block device (udev and
/// partitioning tools take `flock` locks of their own on those, and a transient one must
/// not stop a pool). `WouldBlock` when another open file holds a lock that conflicts.
/// The pool locks every file it writes this way: volumes' backing files, cache devices
/// and log devices; `larch serve-file` locks the file it serves the same way.
pub fn lock_file(path: &Path, shared: bool) -> io::Result<Option<fs::File>> {
    let file = fs::File::open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mode = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
    // SAFETY: flock on a descriptor this function owns; it only changes lock state.
    if unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some(file))
}

/// Locks a volume's backing file for the pool that opens it: exclusively for a writable
/// volume, shared for a read-only one, so that two running pools (or two volumes of one)
/// never write one backing file without knowing of each other ([`lock_file`]).
pub(crate) fn lock_backing(path: &Path, read_only: bool) -> io::Result<Option<fs::File>> {
    lock_file(path, read_only).map_err(|err| {
        if err.kind() != io::ErrorKind::WouldBlock {
            return err;
        }
        io::Error::new(
            io::ErrorKind::WouldBlock,
            "in use by another running pool or another volume of this one (a writable \
             volume needs its backing file to itself)",
        )
    })
}

/// Locks a cache or log device file, exclusively, for as long as the pool uses it (or,
/// for `larch cache add` and `larch log add`, while they look at it and zero its
/// headers): another running pool's volume, cache device or log device is then refused,
/// where its first 8 KiB alone (zero at the start of many volumes) cannot tell. The
/// error names the file; `WouldBlock` when another process holds it.
pub(crate) fn lock_device(path: &Path) -> io::Result<Option<fs::File>> {
    lock_file(path, false).map_err(|err| {
        if err.kind() == io::ErrorKind::WouldBlock {
            io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{} is in use by another running pool (as a volume's backing file, a \
                     cache device or a log device) or another process: stop that pool or \
                     remove the file from it, or use another file",
                    path.display()
                ),
            )
        } else {
            io::Error::new(err.kind(), format!("locking {}: {err}", path.display()))
        }
    })
}
