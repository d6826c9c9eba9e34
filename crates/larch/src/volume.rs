//! `larch volume add|remove|clear|set`: a pool's volumes in `pool.json`, served from the
//! next start of `larch serve`, the failures a pool records for them, and their
//! properties (`set`, also while served: through the daemon when one answers).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use larch_engine::units::parse_size;
use larch_engine::{
    CacheMode, LatencyModel, LogBias, PoolConfig, PropertyValue, SyncMode, VolumeConfig,
    VolumeProps, new_guid,
};

use crate::files::{absolute, create_sized, existing_size, load_locked, save};

/// `larch volume ...`
#[derive(clap::Subcommand)]
pub enum VolumeCommand {
    /// Add a volume on a backing file, block device or object store.
    ///
    /// An object store is named `s3://BUCKET/PREFIX` (S3, Ceph's RADOS Gateway, MinIO, ...):
    /// a new volume is created there with --size, an existing larch volume is adopted
    /// (its size and block size are the store's). Credentials come from the environment
    /// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or the AWS profile
    /// files, as AWS's tools find them; they are not stored in the pool. See
    /// docs/object-store.md.
    Add(AddArgs),
    /// Remove a volume from the pool (its backing data is left alone).
    ///
    /// Refused while the pool is served, and while its log device holds acknowledged
    /// writes not yet replayed (after a crash): start and stop the pool once first.
    Remove {
        /// The volume's name.
        name: String,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
    /// Set properties of a volume: resize it (`volsize=SIZE`), or change how it is cached
    /// (`primarycache`, `secondarycache`, `sync`, `logbias`), also while it is served.
    ///
    /// A running daemon applies the change at once and saves it in pool.json; with none,
    /// pool.json (and, for volsize, the backing store) is changed for the next start.
    /// volsize is a multiple of volblocksize. Growing extends a backing file (a block
    /// device's volume grows up to the device's size), and the new range reads as zeros;
    /// NBD clients see the new size on their next connection. Shrinking drops the data past
    /// the new end, every cached copy of it included, and needs --force; connections made
    /// before get errors for requests past the new end. A volume on an object store
    /// (segments layout) grows through the daemon that serves it and never shrinks.
    /// Narrowing primarycache drops the volume's clean blocks from the ARC;
    /// narrowing secondarycache drops its copies on the cache devices.
    #[command(after_help = crate::set::volume_properties_help())]
    Set {
        /// The volume's name.
        name: String,
        /// PROPERTY=VALUE pairs, e.g. volsize=20G or secondarycache=none.
        #[arg(required = true, value_name = "PROPERTY=VALUE")]
        assignments: Vec<String>,
        /// Allow a volsize below the volume's size now: the data past the new end is
        /// dropped.
        #[arg(long)]
        force: bool,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
    /// Clear a volume's recorded failure, so that it takes writes again.
    ///
    /// When a volume's backing store fails a TXG, the writes of that TXG were acknowledged
    /// but never stored: the volume refuses writes from then on and reads of those blocks
    /// fail with EIO, also after a restart (the pool records it in its state directory).
    /// Clearing accepts the loss: those blocks read as whatever the backing store holds
    /// (older bytes) and the volume takes writes again. Fix the store first, and restore
    /// the listed blocks from elsewhere if they matter. Refused while the pool is served.
    Clear {
        /// The volume's name.
        name: String,
        /// Where the pool's state lives.
        #[arg(long, default_value = "larch-data")]
        state_dir: PathBuf,
    },
}

/// `larch volume add`'s arguments.
#[derive(clap::Args)]
pub struct AddArgs {
    /// The volume's name (its NBD export name).
    pub name: String,
    /// The backing file or block device (not a larch cache or log device), or
    /// s3://BUCKET/PREFIX.
    #[arg(long)]
    pub backing: PathBuf,
    /// Create the backing file with this size (sparse) when it does not exist (an
    /// existing one must have this size already; a file created for an add that fails
    /// is removed again); for an object store, the size of a new volume.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Object store: the endpoint (default: AWS_ENDPOINT_URL, the profile's
    /// endpoint_url, else AWS).
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    /// Object store: the region (default: AWS_REGION, the profile's, else us-east-1).
    #[arg(long)]
    pub s3_region: Option<String>,
    /// Object store: the profile of ~/.aws/credentials and ~/.aws/config to use
    /// (default: AWS_PROFILE, else default).
    #[arg(long)]
    pub s3_profile: Option<String>,
    /// Object store: how long a request is retried before the volume reports EIO,
    /// seconds (the longest store outage the volume rides out; keep it below the
    /// lease).
    #[arg(long, default_value_t = 30)]
    pub s3_stall_secs: u64,
    /// Object store: how long this node's lease on the volume lasts unless renewed,
    /// seconds (another node may take the volume over this long after this one stops
    /// renewing).
    #[arg(long, default_value_t = 60)]
    pub s3_lease_secs: u64,
    /// Object store: bytes of blocks per segment (--layout segments: a commit's blocks
    /// are packed into segments of at most this much) or per data object (--layout
    /// objects: a write of part of an object uploads it whole). A multiple of
    /// --volblocksize, at most 64M.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub object_size: u64,
    /// Object store: how a new volume lays its blocks out. `segments`: copy-on-write,
    /// each commit packs its blocks into new segments and a map of block pointers says
    /// where each block lives (nothing is read back to be rewritten; sparse segments
    /// are repacked). `objects`: fixed objects of consecutive blocks, rewritten whole
    /// (the layout of volumes made before segments). An existing volume keeps its own.
    #[arg(long, default_value = "segments", value_parser = parse_layout)]
    pub layout: larch_object::layout::Format,
    /// Block size, a power of two from 4K to 128K.
    #[arg(long, default_value = "16K", value_parser = parse_size)]
    pub volblocksize: u64,
    /// What the ARC caches: all, metadata or none.
    #[arg(long, default_value = "all", value_parser = CacheMode::parse)]
    pub primarycache: CacheMode,
    /// What is fed to cache devices: all, metadata or none.
    #[arg(long, default_value = "all", value_parser = CacheMode::parse)]
    pub secondarycache: CacheMode,
    /// Refuse writes. An object-store volume (segments layout) is then served as a
    /// read-only follower: this node takes no lease, another node writes the volume,
    /// and its commits are followed (every second) with the cached copies of the
    /// blocks they change dropped.
    #[arg(long, visible_alias = "read-only")]
    pub readonly: bool,
    /// Injected backing-store read latency in ms (a device model for tests; 0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub read_latency_ms: f64,
    /// Injected backing-store write latency in ms (a device model for tests; 0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub write_latency_ms: f64,
    /// When writes are durable: standard (FUA and FLUSH wait), always (every write
    /// waits) or disabled (nothing waits; a crash loses recent acknowledged writes).
    #[arg(long, default_value = "standard", value_parser = SyncMode::parse)]
    pub sync: SyncMode,
    /// Where sync writes go to be durable: latency (the log device, when the pool has
    /// one) or throughput (a TXG sync; the log device is left to other volumes).
    #[arg(long, default_value = "latency", value_parser = LogBias::parse)]
    pub logbias: LogBias,
    /// Where the pool's state lives.
    #[arg(long, default_value = "larch-data")]
    pub state_dir: PathBuf,
}

/// Sets properties of volume `name` (`larch volume set`, `larch set VOLUME`): through the
/// live daemon of `state_dir` when one answers, else on the pool's files. Prints what was
/// done.
pub fn set_properties(
    state_dir: &std::path::Path,
    name: &str,
    assignments: &[String],
    force: bool,
) -> anyhow::Result<ExitCode> {
    crate::files::load(state_dir)?;
    if let Some(daemon) = larch_daemon::client::find(state_dir) {
        let mut lines = vec![format!("volume={name}")];
        if force {
            lines.push("force=1".to_string());
        }
        lines.extend(assignments.iter().cloned());
        print!("{}", daemon.change("/admin/volume/set", &lines)?);
        return Ok(ExitCode::SUCCESS);
    }
    let target = larch_engine::manage::Target::Files(state_dir);
    let done = larch_engine::manage::set_volume_properties(target, name, assignments, force)?;
    println!("{done}");
    Ok(ExitCode::SUCCESS)
}

/// `larch volume ...`.
pub fn run(cmd: VolumeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        VolumeCommand::Set {
            name,
            assignments,
            force,
            state_dir,
        } => return set_properties(&state_dir, &name, &assignments, force),
        VolumeCommand::Add(args) => add(args)?,
        VolumeCommand::Remove { name, state_dir } => remove(&name, &state_dir)?,
        VolumeCommand::Clear { name, state_dir } => clear(&name, &state_dir)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `larch volume add`: the checks every volume needs, then the backing store's own
/// ([`add_object`], [`add_file`]).
fn add(args: AddArgs) -> anyhow::Result<()> {
    let name = args.name.clone();
    if name.is_empty() {
        bail!("the volume's name is empty: give a name (its NBD export name)");
    }
    let (config, _config_lock) = load_locked(&args.state_dir)?;
    if config.volumes.iter().any(|v| v.name == name) {
        bail!("the pool already has a volume {name}");
    }
    if !(0.0..=10_000.0).contains(&args.read_latency_ms)
        || !(0.0..=10_000.0).contains(&args.write_latency_ms)
    {
        bail!("--read-latency-ms and --write-latency-ms must be between 0 and 10000");
    }
    let latency_us = (args.read_latency_ms * 1000.0) as u64;
    let write_latency_us = (args.write_latency_ms * 1000.0) as u64;
    let mut volume = VolumeConfig {
        name,
        guid: new_guid(),
        backing: args.backing.clone(),
        volblocksize: u32::try_from(args.volblocksize).unwrap_or(0),
        primarycache: args.primarycache,
        secondarycache: args.secondarycache,
        readonly: args.readonly,
        latency: LatencyModel {
            read_min_us: latency_us,
            read_max_us: latency_us,
            write_min_us: write_latency_us,
            write_max_us: write_latency_us,
        },
        sync: args.sync,
        logbias: args.logbias,
        volsize: None,
        local: Default::default(),
        s3: None,
        object_size_bytes: None,
        object_grow_bytes: None,
    };
    // Values other than the defaults were set by the user: their source is local.
    volume.local =
        larch_engine::manage::differing_properties(volume.props(), VolumeProps::default());
    match args
        .backing
        .to_str()
        .filter(|s| larch_engine::is_object_url(s))
    {
        Some(url) => add_object(&args, url, volume, config),
        None => add_file(&args, volume, config),
    }
}

/// `larch volume add` of a volume on an object store: created there with --size, or the
/// larch volume found there adopted (its size and block size are the store's).
fn add_object(
    args: &AddArgs,
    url: &str,
    mut volume: VolumeConfig,
    mut config: PoolConfig,
) -> anyhow::Result<()> {
    let mut settings = s3_settings(
        args.s3_endpoint.clone(),
        args.s3_region.clone(),
        args.s3_profile.clone(),
        args.s3_stall_secs,
        args.s3_lease_secs,
    )?;
    if let Some(other) = config.volumes.iter().find(|v| v.object_url() == Some(url)) {
        bail!(
            "{url} is the backing store of volume {} already",
            other.name
        );
    }
    if args.readonly && args.size.is_some() {
        bail!(
            "a read-only volume on an object store follows a volume another node writes: \
             leave --size out (the volume must exist)"
        );
    }
    let (size, block_bytes, object_bytes, created) = object_volume(
        url,
        &settings,
        args.size,
        volume.volblocksize,
        args.object_size,
        args.layout,
    )?;
    if args.readonly {
        follower_check(url, &settings)?;
    }
    // The client's time limit for a data object's transfer is made from the volume's
    // object size, which only the store's root holds: recorded here so that `larch serve`
    // has it before it reads the root.
    settings.object_bytes = Some(object_bytes);
    volume.volblocksize = block_bytes;
    volume.object_size_bytes = Some(size);
    volume.s3 = Some(settings);
    let name = volume.name.clone();
    config.volumes.push(volume);
    config.validate().map_err(anyhow::Error::msg)?;
    save(&config, &args.state_dir)?;
    let what = if created { "created" } else { "adopted" };
    println!(
        "added volume {name} on {url} ({what}: {}, {} blocks; served from the next \
         `larch serve` start)",
        larch_engine::units::format_size(size),
        larch_engine::units::format_size(u64::from(block_bytes))
    );
    Ok(())
}

/// `larch volume add` of a volume on a file or block device. Everything is checked
/// before a file is created, and a file created here goes again when the add fails after
/// all.
fn add_file(
    args: &AddArgs,
    mut volume: VolumeConfig,
    mut config: PoolConfig,
) -> anyhow::Result<()> {
    let backing = absolute(&args.backing)?;
    let state_dir = &args.state_dir;
    if let Some(why) =
        larch_engine::manage::backing_in_use(state_dir, &config, &backing, args.readonly)
    {
        bail!("{why}");
    }
    let volblocksize = args.volblocksize;
    if !(4096..=128 << 10).contains(&volblocksize) || !volblocksize.is_power_of_two() {
        bail!(
            "--volblocksize {}: a power of two from 4K to 128K is needed",
            larch_engine::units::format_size_exact(volblocksize)
        );
    }
    let name = volume.name.clone();
    volume.backing = backing.clone();
    config.volumes.push(volume);
    config.validate().map_err(anyhow::Error::msg)?;
    let have = existing_size(&backing)?;
    let Some(bytes) = have.or(args.size) else {
        bail!(
            "{} does not exist (give --size to create it)",
            backing.display()
        );
    };
    // A volume of no blocks serves nothing, and its pool fails every shutdown.
    if bytes < volblocksize {
        let what = if have.is_some() {
            "has"
        } else {
            "--size gives it"
        };
        bail!(
            "{} {what} {bytes} bytes: a volume needs at least one block ({volblocksize} \
             bytes); give a larger file or --size",
            backing.display()
        );
    }
    if have.is_some() && !args.readonly {
        // Opened for writing as `larch serve` will open it (nothing is written): a file
        // on a read-only file system, or one this user may not write, is refused now,
        // not by every later start of the pool.
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&backing)
            .with_context(|| {
                format!(
                    "{} cannot be opened for writing (give --readonly for a read-only \
                     volume)",
                    backing.display()
                )
            })?;
    }
    let created = create_sized(&backing, args.size)?;
    save(&config, state_dir)?;
    if let Some(created) = created {
        created.keep();
    }
    println!("added volume {name} (served from the next `larch serve` start)");
    Ok(())
}

/// `larch volume remove`: the volume leaves `pool.json` (its data is untouched), refused
/// while the pool is served or its log holds writes a restart must replay.
fn remove(name: &str, state_dir: &Path) -> anyhow::Result<()> {
    let (mut config, _config_lock) = load_locked(state_dir)?;
    let before = config.volumes.len();
    let guid = (config.volumes.iter())
        .find(|v| v.name == name)
        .map(|v| v.guid);
    config.volumes.retain(|v| v.name != name);
    if config.volumes.len() == before {
        bail!("the pool has no volume {name}");
    }
    // Not while the pool is served (its log may take records of the volume), and
    // not while the log holds writes a restart must replay: a replay that finds
    // records of a volume the pool no longer has cannot put them anywhere.
    let _lock = larch_engine::PoolLock::acquire(state_dir)?;
    for log in &config.log_devices {
        let path = if log.path.is_absolute() {
            log.path.clone()
        } else {
            state_dir.join(&log.path)
        };
        // (0 when it cannot be read: the next `larch serve` stops on the log device
        // anyway, whatever the volumes are.)
        let pending = larch_engine::log_records_to_replay(&path).unwrap_or(0);
        if pending > 0 {
            bail!(
                "the log device {} holds {pending} acknowledged writes not yet \
                 replayed (the pool was not stopped cleanly): start the pool once \
                 (`larch serve`, then stop it) so they reach their volumes, then \
                 remove {name}",
                path.display()
            );
        }
    }
    save(&config, state_dir)?;
    // Its recorded failure goes with it (a volume added later has another guid).
    if let Some(guid) = guid {
        larch_engine::clear_failed_volume(state_dir, guid)?;
    }
    println!("removed volume {name} (its data is untouched)");
    Ok(())
}

/// `larch volume clear`: drops the record of the volume's failure (the pool stopped).
fn clear(name: &str, state_dir: &Path) -> anyhow::Result<()> {
    let (config, _config_lock) = load_locked(state_dir)?;
    let Some(volume) = config.volumes.iter().find(|v| v.name == name) else {
        bail!("the pool has no volume {name}");
    };
    // Not while the pool is served: the running daemon holds the failure in memory.
    let _lock = larch_engine::PoolLock::acquire(state_dir)?;
    match larch_engine::clear_failed_volume(state_dir, volume.guid)? {
        None => println!("volume {name} has no recorded failure: nothing to clear"),
        Some(failure) => {
            println!("cleared the failure of volume {name}: {}", failure.why);
            if !failure.lost.is_empty() {
                println!(
                    "{} blocks of {} bytes now read as the backing store's older \
                     bytes: {}",
                    failure.lost.len(),
                    volume.volblocksize,
                    block_runs(&failure.lost)
                );
            }
        }
    }
    Ok(())
}

/// Sorted block numbers as runs (`3, 7-9, 12`), at most 20 runs and a count of the rest.
fn block_runs(blocks: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &b in blocks {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(b) => *last = b,
            _ => runs.push((b, b)),
        }
    }
    let mut text: Vec<String> = (runs.iter().take(20))
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    if runs.len() > 20 {
        text.push(format!("and {} more runs", runs.len() - 20));
    }
    text.join(", ")
}

/// The object-store settings of `larch volume add`, refused (naming the flags) when the
/// pool would refuse them at its next start (`Settings::check`: a lease of 2 s to a day,
/// a stall bound from 1 s to below the lease).
fn s3_settings(
    endpoint: Option<String>,
    region: Option<String>,
    profile: Option<String>,
    stall_secs: u64,
    lease_secs: u64,
) -> anyhow::Result<larch_object::s3::Settings> {
    let settings = larch_object::s3::Settings {
        endpoint,
        region,
        profile,
        stall_secs: Some(stall_secs),
        lease_secs: Some(lease_secs),
        object_bytes: None,
    };
    if let Err(why) = settings.check() {
        bail!("--s3-lease-secs {lease_secs} with --s3-stall-secs {stall_secs}: {why}");
    }
    Ok(settings)
}

/// Refuses a read-only (follower) volume whose layout cannot be followed.
fn follower_check(url: &str, settings: &larch_object::s3::Settings) -> anyhow::Result<()> {
    let location = larch_object::s3::Location::parse(url).map_err(anyhow::Error::msg)?;
    let store = larch_object::s3::client(&location, settings)?;
    let prefix = match location.prefix.as_str() {
        "" => String::new(),
        p => format!("{p}/"),
    };
    let display = location.display();
    let root = larch_object::probe(&store, &prefix, &display)?
        .ok_or_else(|| anyhow::anyhow!("{display} holds no larch volume to follow"))?;
    if root.format != larch_object::layout::Format::Segments {
        bail!(
            "{display} has the {} layout: read-only followers need the segments layout \
             (docs/object-store.md says how to move a volume to it)",
            root.format.name()
        );
    }
    Ok(())
}

/// `--layout`'s value.
fn parse_layout(text: &str) -> Result<larch_object::layout::Format, String> {
    use larch_object::layout::Format;
    [Format::Segments, Format::Objects]
        .into_iter()
        .find(|f| f.name() == text)
        .ok_or_else(|| format!("{text:?}: the layouts are segments and objects"))
}

/// Creates the object-store volume at `url`, or adopts the one there: returns its size,
/// block size, object size (its blocks without their trailers) and whether it was created. Every way it can fail (no credentials, the
/// endpoint unreachable, access denied, no bucket, a root that does not parse, a size or
/// block size that contradicts the volume there) is an error that names the cause.
fn object_volume(
    url: &str,
    settings: &larch_object::s3::Settings,
    size: Option<u64>,
    volblocksize: u32,
    object_size: u64,
    layout: larch_object::layout::Format,
) -> anyhow::Result<(u64, u32, u64, bool)> {
    let location = larch_object::s3::Location::parse(url).map_err(anyhow::Error::msg)?;
    // A short retry bound here: a wrong endpoint is reported in seconds, not a minute.
    let mut quick = settings.clone();
    quick.stall_secs = Some(5);
    let store = larch_object::s3::client(&location, &quick)?;
    let display = location.display();
    let prefix = if location.prefix.is_empty() {
        String::new()
    } else {
        format!("{}/", location.prefix)
    };
    if let Some(root) = larch_object::probe(&store, &prefix, &display)? {
        if size.is_some_and(|s| s != root.size_bytes) {
            bail!(
                "{display} holds a larch volume of {} bytes already; leave --size out to adopt it",
                root.size_bytes
            );
        }
        let object_bytes = u64::from(root.object_blocks) * u64::from(root.block_bytes);
        return Ok((root.size_bytes, root.block_bytes, object_bytes, false));
    }
    let Some(size) = size else {
        bail!("{display} holds no larch volume: give --size to create one");
    };
    if !(4096..=128 << 10).contains(&volblocksize) || !volblocksize.is_power_of_two() {
        bail!("--volblocksize must be a power of two from 4K to 128K");
    }
    if object_size == 0
        || !object_size.is_multiple_of(u64::from(volblocksize))
        || object_size > 64 << 20
    {
        bail!("--object-size must be a multiple of --volblocksize, at most 64M");
    }
    let object_blocks = u32::try_from(object_size / u64::from(volblocksize))?;
    let mut root = larch_object::layout::Root::new(new_guid(), size, volblocksize, object_blocks);
    root.format = layout;
    larch_object::create(&store, &prefix, &display, &root)?;
    Ok((size, volblocksize, object_size, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: VolumeCommand,
    }

    /// Runs `larch volume ARGS --state-dir DIR`.
    fn volume(dir: &std::path::Path, args: &[&str]) -> anyhow::Result<ExitCode> {
        let state = dir.to_str().unwrap();
        let state = ["--state-dir", state];
        let args = ["volume"].iter().chain(args).chain(&state);
        run(Cli::try_parse_from(args)?.command)
    }

    /// A pool with no volumes in a fresh directory for the test `name`.
    fn empty_pool(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("larch-volume-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = larch_engine::create_demo(&dir, larch_engine::DemoSizes::TINY).unwrap();
        config.volumes.clear();
        config.save(&dir).unwrap();
        dir
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let config = larch_engine::PoolConfig::load(dir).unwrap();
        config.volumes.into_iter().map(|v| v.name).collect()
    }

    /// An add that is refused creates no file, and --size never resizes or silently
    /// ignores an existing file (a reviewer's finding: a refused add left a 10G file that
    /// the next add, with --size 20G, took as it was).
    #[test]
    fn a_refused_add_leaves_no_file_and_size_must_match_an_existing_file() {
        let dir = empty_pool("sizes");
        let a = dir.join("a.img");
        let a_path = a.to_str().unwrap();
        let err = volume(
            &dir,
            &[
                "add",
                "a",
                "--backing",
                a_path,
                "--size",
                "10M",
                "--volblocksize",
                "3K",
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--volblocksize 3K: a power of two"), "{err}");
        assert!(!a.exists(), "a refused add created its backing file");
        // Too small for one block: refused before anything is created.
        let err = volume(&dir, &["add", "a", "--backing", a_path, "--size", "4K"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least one block"), "{err}");
        assert!(!a.exists(), "a refused add created its backing file");
        std::fs::write(&a, vec![7u8; 1 << 20]).unwrap();
        let err = volume(&dir, &["add", "a", "--backing", a_path, "--size", "2M"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exists with 1048576 bytes; drop --size to use it as it is, or remove it"),
            "{err}"
        );
        assert_eq!(std::fs::metadata(&a).unwrap().len(), 1 << 20);
        assert!(names(&dir).is_empty());
        volume(&dir, &["add", "a", "--backing", a_path, "--size", "1M"]).unwrap();
        let b = dir.join("b.img");
        volume(
            &dir,
            &["add", "b", "--backing", b.to_str().unwrap(), "--size", "2M"],
        )
        .unwrap();
        assert_eq!(std::fs::metadata(&b).unwrap().len(), 2 << 20);
        assert_eq!(names(&dir), ["a", "b"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file created for a command that then fails goes again.
    #[test]
    fn a_file_created_for_a_failed_command_is_removed() {
        let dir = empty_pool("created");
        let path = dir.join("huge.img");
        // No file system takes a file of 2^64 - 1 bytes: created, then refused.
        let err = crate::files::create_sized(&path, Some(u64::MAX))
            .err()
            .expect("sized");
        assert!(err.to_string().contains("sizing"), "{err}");
        assert!(!path.exists(), "the file stayed");
        let created = crate::files::create_sized(&path, Some(4096)).unwrap();
        drop(created);
        assert!(!path.exists(), "a file not kept stayed");
        crate::files::create_sized(&path, Some(4096))
            .unwrap()
            .unwrap()
            .keep();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Backing stores that cannot serve are refused at add, not at the next start (a
    /// reviewer's finding: a directory, /dev/null, /dev/zero, an empty file and an empty
    /// name were all accepted).
    #[test]
    fn backings_that_cannot_serve_and_empty_names_are_refused() {
        let dir = empty_pool("unusable");
        let empty = dir.join("empty.img");
        std::fs::write(&empty, b"").unwrap();
        let sub = dir.join("sub");
        std::fs::create_dir(&sub).unwrap();
        for (backing, why) in [
            (sub.to_str().unwrap(), "neither a file nor a block device"),
            ("/dev/null", "neither a file nor a block device"),
            ("/dev/zero", "neither a file nor a block device"),
            (empty.to_str().unwrap(), "has 0 bytes"),
        ] {
            let err = volume(&dir, &["add", "v", "--backing", backing])
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{backing}: {err}");
        }
        // A file nobody may write, root included (sysfs refuses it; a tester's finding was
        // a file on a read-only file system): refused unless the volume is read-only.
        let unwritable = "/sys/devices/system/cpu/online";
        let add = |extra: &[&str]| {
            let args = ["add", "v", "--backing", unwritable, "--volblocksize", "4K"];
            volume(&dir, &[&args[..], extra].concat())
        };
        let err = format!("{:#}", add(&[]).unwrap_err());
        assert!(
            err.contains("cannot be opened for writing (give --readonly"),
            "{err}"
        );
        assert!(names(&dir).is_empty());
        add(&["--readonly"]).unwrap();
        assert_eq!(names(&dir), ["v"]);
        volume(&dir, &["remove", "v"]).unwrap();
        let good = dir.join("good.img");
        let err = volume(
            &dir,
            &[
                "add",
                "",
                "--backing",
                good.to_str().unwrap(),
                "--size",
                "1M",
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("name is empty"), "{err}");
        assert!(!good.exists());
        assert!(names(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `volume add` refuses what the pool would refuse at start (before, a lease above a
    /// day was recorded in pool.json and every `larch serve` refused the volume).
    #[test]
    fn s3_settings_the_pool_would_refuse_are_refused_at_add() {
        let with = |stall, lease| s3_settings(None, None, None, stall, lease);
        let settings = with(30, 60).unwrap();
        assert_eq!(settings.check(), Ok(()));
        assert_eq!(settings.lease_secs, Some(60));
        for (stall, lease) in [(30, u64::MAX), (30, 86_401), (1, 1), (0, 60), (60, 60)] {
            let err = with(stall, lease).expect_err("accepted").to_string();
            assert!(
                err.contains(&format!(
                    "--s3-lease-secs {lease} with --s3-stall-secs {stall}"
                )),
                "{err}"
            );
        }
        assert!(with(30, 86_400).is_ok());
    }
}
