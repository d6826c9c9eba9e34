//! An object-backed volume: reads, staged writes, commits and the lease (see the crate
//! comment and `docs/object-store.md`).
//!
//! The commit, the lease and the reads live here because they share one piece of state
//! (the root as last written, and the map it names) whose locking is easiest to check in
//! one place. Around them: `segments` (the segments format's map, commits, reads and
//! repacking), `tree` (the tree of map pages), `follower` (read-only followers) and `gc`
//! (the collection of garbage and the background deletions).
//!
//! The engine calls this from blocking threads (its syncer, its blocking pool); the
//! requests run on a small runtime of this volume's own, and the calling thread waits for
//! their result. The S3 client is async, the engine's backing-store interface is blocking,
//! and keeping the two apart means no caller needs to know which runtime, if any, it is on.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path as ObjPath;
use object_store::{
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult,
    UpdateVersion,
};
use serde::{Deserialize, Serialize};

use crate::layout::{self, Format, PAGE_OBJECTS, Root, Version};

mod block_map;
mod follower;
mod gc;
mod pages;
mod segments;
mod tree;

pub use follower::Followed;
pub use pages::{
    CACHED_PAGE_BYTES, LOCAL_MAP_CACHE_BYTES, LocalMapCache, MapCache, cached_page_bytes,
    cached_page_len,
};

use block_map::{BlockMap, Count};
use gc::GC_BATCH;
use pages::MapPages;
use tree::{Tree, TreeEdit};

/// How an object-backed volume behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// How long a lease lasts unless renewed (renewed every quarter of it).
    pub lease: Duration,
    /// Clock skew between nodes allowed for: a lease counts as expired to another node
    /// only this long after its end.
    pub skew: Duration,
    /// The most objects uploaded (or read for a read-modify-write) at once during a
    /// commit. Fewer are when the volume's objects are large: see [`uploads_at_once`].
    pub uploads: usize,
    /// The block size the caller reads and writes in (the engine's `volblocksize`): a
    /// volume whose root says otherwise is refused at open. `None`: the root's.
    pub block_bytes: Option<u32>,
    /// A segments volume repacks segments whose live records fall below this share (%):
    /// their live blocks are moved into the next commit's segments and they are deleted.
    /// 0: never. Objects volumes ignore it.
    pub repack_percent: u8,
    /// Commits repack (the sparsest segments first) while the bytes the segments hold are
    /// above this share (%) of their live bytes; below it only an idle volume repacks.
    pub repack_space_percent: u16,
    /// A segments volume's commits write a map log of the pointers they change instead of
    /// the block-map pages; once the root names this many logs, the next commit writes the
    /// pages they changed instead (a checkpoint) and the root names none. 0: every commit
    /// writes its pages. At most [`layout::MAX_MAP_LOGS`].
    pub map_log_commits: u32,
    /// How often a follower ([`ObjectVolume::open_follower`]) looks at the root for a
    /// newer commit.
    pub poll: Duration,
    /// An ordering rule a commit breaks on purpose (tests only: the swarm test shows that
    /// it catches each). Always [`Hazard::None`] outside them.
    #[doc(hidden)]
    pub hazard: Hazard,
    /// The volume's size as the caller knows it: a volume whose root says otherwise is
    /// refused at open, before its map is read (a root's size bounds the map pages it may
    /// name, so a damaged or hostile one could otherwise make the open read and hold far
    /// more than the volume needs). `None`: the root's (the engine keeps no size of its
    /// own: `larch volume add` adopts the store's). A follower also takes a root that is
    /// larger (its writer grew the volume).
    pub size_bytes: Option<u64>,
    /// A grow of a segments volume to this size that the caller recorded before making
    /// it ([`ObjectVolume::grow`]), which may or may not have reached the store: a root of
    /// either size is taken, and an open of one of `size_bytes` completes the grow.
    pub grow_to: Option<u64>,
    /// The most bytes of a segments volume's block-map pages kept in its own cache, until
    /// the caller attaches another ([`ObjectVolume::attach_map_cache`]; the engine attaches
    /// its ARC). At least one page is kept.
    pub map_cache_bytes: u64,
    /// A writer's open of a segments volume counts its segments' live records (reading
    /// every block-map page) before it returns when the map has at most this many pages;
    /// a larger map is counted by a thread of the volume's while it is served, and until
    /// that count is done nothing is repacked, no segment deleted, and no live share
    /// reported.
    pub count_at_open_pages: u64,
    /// Pages a background count reads and counts per round (between rounds the map's
    /// lock is free for commits and reads). Tests make it small, so that commits come
    /// between rounds.
    #[doc(hidden)]
    pub count_round_pages: usize,
}

impl Options {
    /// The longest lease or skew accepted (a day): every expiry is computed from the clock
    /// plus these, and a larger value (from a hand-edited `pool.json`) would overflow it.
    pub const MAX_DURATION: Duration = Duration::from_secs(86_400);

    /// Why these options cannot be used, if they cannot.
    pub fn check(&self) -> Result<(), OptionsError> {
        if self.lease.is_zero() || self.lease > Options::MAX_DURATION {
            return Err(OptionsError::Lease(self.lease));
        }
        if self.skew > Options::MAX_DURATION {
            return Err(OptionsError::Skew(self.skew));
        }
        if self.uploads == 0 {
            return Err(OptionsError::NoUploads);
        }
        if self.poll.is_zero() || self.poll > Options::MAX_DURATION {
            return Err(OptionsError::Poll(self.poll));
        }
        if self.map_log_commits as usize > layout::MAX_MAP_LOGS {
            return Err(OptionsError::MapLogs(self.map_log_commits));
        }
        if self.repack_percent > 100 {
            return Err(OptionsError::RepackPercent(self.repack_percent));
        }
        if self.repack_space_percent < 100 {
            return Err(OptionsError::RepackSpace(self.repack_space_percent));
        }
        Ok(())
    }
}

/// A rule of the segments format's commits that a test may have broken on purpose, to
/// show that the crash tests catch it: never set outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hazard {
    /// Every rule kept.
    #[default]
    None,
    /// The root is written before the segments and map pages it names.
    RootFirst,
    /// A segment read to be repacked is deleted at once, before the commit that moves
    /// its blocks landed.
    DeleteRepackedEarly,
}

/// Why [`Options`] cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A lease of zero or longer than [`Options::MAX_DURATION`].
    #[error("a lease of {0:?} is not above zero and at most a day")]
    Lease(Duration),
    /// A clock skew longer than [`Options::MAX_DURATION`].
    #[error("a clock skew of {0:?} is more than a day")]
    Skew(Duration),
    /// No uploads at once.
    #[error("uploads at once must be at least 1")]
    NoUploads,
    /// A follower's poll interval of zero or longer than a day.
    #[error("a poll interval of {0:?} is not above zero and at most a day")]
    Poll(Duration),
    /// More map logs between checkpoints than a root may name.
    #[error("{0} map logs between checkpoints (at most {max})", max = layout::MAX_MAP_LOGS)]
    MapLogs(u32),
    /// A space bound below 100 % (stored bytes are never fewer than live ones).
    #[error("a repack space bound of {0} % is below 100")]
    RepackSpace(u16),
    /// A repack threshold above 100 %.
    #[error("a repack threshold of {0} % is above 100")]
    RepackPercent(u8),
}

impl Default for Options {
    fn default() -> Options {
        Options {
            lease: Duration::from_secs(60),
            skew: Duration::from_secs(5),
            uploads: MAX_UPLOADS,
            repack_percent: REPACK_PERCENT,
            repack_space_percent: REPACK_SPACE_PERCENT,
            hazard: Hazard::None,
            poll: Duration::from_secs(1),
            map_log_commits: MAP_LOG_COMMITS,
            block_bytes: None,
            size_bytes: None,
            grow_to: None,
            map_cache_bytes: LOCAL_MAP_CACHE_BYTES,
            count_at_open_pages: COUNT_AT_OPEN_PAGES,
            count_round_pages: block_map::COUNT_BATCH,
        }
    }
}

/// The most block-map pages a writer's open counts before it returns (a map of 1M blocks:
/// 40 MiB of GETs); see [`Options::count_at_open_pages`].
pub const COUNT_AT_OPEN_PAGES: u64 = 1024;

/// The live share (%) under which a segment is repacked by default: ZeroFS's threshold,
/// and where moving a segment's live bytes costs at most what it frees.
pub const REPACK_PERCENT: u8 = 50;

/// Root writes a commit or renewal sends, the first included, while the root read back
/// after each shows it did not land (see `ObjectVolume::write_root`).
pub const ROOT_PUT_TRIES: u32 = 3;

/// Commits between a segments volume's checkpoints of its block-map pages: a page is
/// rewritten at most once per this many commits, and an open applies at most this many
/// map logs to the pages.
pub const MAP_LOG_COMMITS: u32 = 32;

/// Bytes of sparse segments a commit reads to repack besides twice its own: enough that
/// a volume written in small commits still reclaims its space.
pub const REPACK_BUDGET: u64 = 1 << 20;

/// Stored bytes (%) of live bytes above which commits repack: the issue's bound on the
/// space a volume's segments take (1.5x its live data).
pub const REPACK_SPACE_PERCENT: u16 = 150;

/// Bytes of sparse segments repacked at once while no commit comes (the lease's renewer
/// does it between renewals).
pub const IDLE_REPACK_BUDGET: u64 = 16 << 20;

/// The most objects a commit uploads (or reads whole, to merge) at once.
pub const MAX_UPLOADS: usize = 16;

/// The most bytes of objects a commit has in flight at once (uploads and merge reads
/// together): 64 MiB, the largest object.
pub const MAX_BYTES_IN_FLIGHT: u64 = 64 << 20;

/// How many objects of `object_bytes` (the volume's object size, `--object-size`) a commit
/// uploads or reads at once when it may do `most`: as many as keep their bytes within
/// [`MAX_BYTES_IN_FLIGHT`], at least one. Counting objects alone is not enough: 16 uploads
/// of 64 MiB share the link so thinly that each takes longer than a request may, every
/// attempt times out and starts over, and the commit never gets through. The client's
/// timeout for these transfers (`s3::transfer_timeout`) is made from the same bytes.
pub fn uploads_at_once(object_bytes: u64, most: usize) -> usize {
    let fit = MAX_BYTES_IN_FLIGHT / object_bytes.max(1);
    usize::try_from(fit).unwrap_or(usize::MAX).min(most).max(1)
}

/// What a node keeps locally about a volume between its runs: which volume of the store
/// it is, the fencing token of its last run that committed, the last commit it knows (its
/// caches hold nothing newer), and up to which TXG its intent log's records of the volume
/// are stale.
///
/// Its file ([`LocalState::encode`]) is an envelope of kind [`layout::Kind::LocalState`]
/// around a JSON body (version 1). Files written before (version 0: the bare JSON, without
/// `volume`) still load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalState {
    /// The store's id of the volume these numbers belong to (the root's `volume`; 0: a
    /// version-0 file, which did not record it). A root with another id is a volume new
    /// to this node: nothing recorded here applies to it.
    #[serde(default)]
    pub volume: u64,
    /// The token of this node's last run that committed (0: none).
    pub token: u64,
    /// The last commit this node made or saw made.
    pub seen_seq: u64,
    /// Intent-log records of the volume from TXGs up to this one are older than the
    /// store's bytes (another node committed after they were logged): never replayed, in
    /// this run or any later one, however the log keeps them.
    #[serde(default)]
    pub log_discard_through: u64,
    /// The token of the last run that was about to commit, recorded before its first root
    /// write that commits: a commit by this token is this node's own even when the run
    /// died before it could record `token` (0: none).
    #[serde(default)]
    pub pending_token: u64,
    /// The commit (its number and the token that made it) another node had made last when
    /// a run of this node opened the volume and dropped its older intent-log records
    /// ([`ObjectVolume::catch_up`]): while the root names this commit still, the log's
    /// records after `log_discard_through` were written on top of it and are replayed
    /// (0: none recorded).
    #[serde(default)]
    pub caught_up_seq: u64,
    /// The token that made `caught_up_seq`.
    #[serde(default)]
    pub caught_up_token: u64,
}

impl LocalState {
    /// The bytes of its file.
    pub fn encode(&self) -> Vec<u8> {
        let body = serde_json::to_vec(self).expect("a local state serializes");
        layout::seal(layout::Kind::LocalState, &body)
    }

    /// Parses the bytes of its file, either version: an envelope (checked) or a version-0
    /// file's bare JSON object.
    pub fn decode(bytes: &[u8]) -> Result<LocalState, layout::LayoutError> {
        let body = if bytes.first() == Some(&b'{') {
            bytes
        } else {
            layout::open(layout::Kind::LocalState, bytes)?
        };
        serde_json::from_slice(body)
            .map_err(|e| layout::LayoutError::Parse("local volume state", e.into()))
    }

    /// This state applied to the volume whose root is `root`: itself, or, when it was
    /// recorded for another volume (one deleted and created again at this address), a
    /// fresh one that keeps only the TXG bound of the log (TXG numbers stay above it).
    fn for_volume(self, root: &Root) -> LocalState {
        if self.volume == 0 || self.volume == root.volume {
            return LocalState {
                volume: root.volume,
                ..self
            };
        }
        LocalState {
            volume: root.volume,
            log_discard_through: self.log_discard_through,
            ..LocalState::default()
        }
    }
}

/// Where a volume writes its [`LocalState`] after each commit (durably: it decides what a
/// restart trusts).
pub type StateSink = Box<dyn Fn(&LocalState) -> io::Result<()> + Send + Sync>;

/// Counters of an object-backed volume.
#[derive(Debug, Default)]
pub struct ObjectStats {
    /// GET requests (ranged or whole).
    pub gets: AtomicU64,
    /// Bytes they returned.
    pub get_bytes: AtomicU64,
    /// PUT requests.
    pub puts: AtomicU64,
    /// Bytes they sent.
    pub put_bytes: AtomicU64,
    /// Objects deleted. Each is a request of its own, except in the collection of garbage
    /// at open, which hands the store up to 1000 at once (one bulk request on S3).
    pub deletes: AtomicU64,
    /// Deletes that failed after the client's retries (also counted in `errors`): the
    /// object stays on the store until a later open's collection of garbage finds it.
    pub delete_errors: AtomicU64,
    /// Failed requests (after the client's retries).
    pub errors: AtomicU64,
    /// Commits made.
    pub commits: AtomicU64,
    /// Bytes of blocks the commits made durable (what the writers asked for).
    pub committed_bytes: AtomicU64,
    /// Data objects written.
    pub objects_written: AtomicU64,
    /// Of those, objects that had to be read first (only some of their blocks changed).
    pub objects_merged: AtomicU64,
    /// Data objects a commit left holding only zeros: not written, their map entries
    /// cleared (they read as zeros; the old objects are garbage).
    pub objects_cleared: AtomicU64,
    /// Segments read to be repacked (segments volumes).
    pub repacked_segments: AtomicU64,
    /// Bytes of live blocks moved out of sparse segments into new ones.
    pub repack_bytes: AtomicU64,
    /// Segments no block lives in any more, deleted after the commit that emptied them.
    pub segments_freed: AtomicU64,
    /// Block-map pages read from the store (at open, to count the segments' live
    /// records, and since, when a lookup found a page in no cache). Also in `gets`.
    pub map_page_gets: AtomicU64,
    /// Block-map pages a lookup read from a cache device's copy (the engine's, when the
    /// ARC had evicted them), not from the store.
    pub map_page_l2_reads: AtomicU64,
    /// Lease renewals that succeeded.
    pub renewals: AtomicU64,
    /// Objects no commit names that were deleted (left by crashed or fenced writers, or
    /// superseded).
    pub garbage_deleted: AtomicU64,
    /// Bytes staged for the next commit (a gauge).
    pub staged_bytes: AtomicU64,
    /// Time of the last commit, µs.
    pub last_commit_us: AtomicU64,
}

/// The commit state: the root as last written or read, its version on the store, and the
/// tree of map pages it names.
struct RootState {
    root: Root,
    etag: UpdateVersion,
    tree: Tree,
}

/// How a root write ended when it did not fail.
enum RootWrite {
    /// The root on the store is the one given.
    Written,
    /// The root on the store is another write of this run's whose answer was lost (a
    /// renewal or a commit that landed after all): `state` and the map now follow it, and
    /// the caller builds its write again on top of it.
    Rebase,
}

/// What a commit does to the root's map logs (segments volumes).
#[derive(Clone, Copy, Debug)]
enum LogEdit {
    /// Nothing (an objects volume's commit, or a segments commit that changed nothing).
    Keep,
    /// Names the commit's own log after the others.
    Append(layout::LogRef),
    /// Names none: the commit wrote the pages they changed (a checkpoint).
    Clear,
}

/// What a commit's root no longer names.
struct Superseded {
    /// Pages of the tree, with their levels (0: map pages; above: index pages).
    pages: Vec<(u8, layout::PageRef)>,
    logs: Vec<layout::LogRef>,
}

/// A commit that reached the store.
struct Committed {
    seq: u64,
    /// The names of what it superseded (data objects or emptied segments, map pages).
    garbage: Vec<String>,
}

/// The map of a volume: which object or segment holds each block, as the last commit left
/// it. The format is the root's, fixed for the volume's life.
enum Map {
    Objects(ObjectMap),
    Segments(BlockMap),
}

impl Map {
    /// The objects map. Only the objects format's paths call it: a volume's format is its
    /// root's, and a root of another format is refused where a root is adopted.
    fn objects(&self) -> &ObjectMap {
        match self {
            Map::Objects(map) => map,
            Map::Segments(_) => unreachable!("an objects path on a segments volume"),
        }
    }

    fn objects_mut(&mut self) -> &mut ObjectMap {
        match self {
            Map::Objects(map) => map,
            Map::Segments(_) => unreachable!("an objects path on a segments volume"),
        }
    }

    /// The block map (the segments format's paths only, as [`Map::objects`]).
    fn blocks(&self) -> &BlockMap {
        self.segments_map()
            .expect("a segments path on an objects volume")
    }

    fn blocks_mut(&mut self) -> &mut BlockMap {
        match self {
            Map::Segments(map) => map,
            Map::Objects(_) => unreachable!("a segments path on an objects volume"),
        }
    }

    /// Whether a segments volume's map names segment `id` (never, for an objects volume).
    fn blocks_names(&self, id: layout::SegmentId) -> bool {
        self.segments_map().is_some_and(|m| m.names(id))
    }

    fn segments_map(&self) -> Option<&BlockMap> {
        match self {
            Map::Segments(map) => Some(map),
            Map::Objects(_) => None,
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            Map::Objects(map) => map.bytes(),
            Map::Segments(map) => map.bytes(),
        }
    }
}

/// The map of data objects to the commits that wrote them, page by page (pages never
/// written are absent: their objects read as zeros). Memory grows with the pages written,
/// not with the volume's size.
#[derive(Default)]
struct ObjectMap {
    pages: BTreeMap<u64, Box<[Version]>>,
}

impl ObjectMap {
    fn get(&self, object: u64) -> Version {
        match self.pages.get(&(object / PAGE_OBJECTS)) {
            Some(entries) => entries[(object % PAGE_OBJECTS) as usize],
            None => Version::default(),
        }
    }

    fn bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_OBJECTS * 16
    }
}

/// Appends `run` to `runs`, joined with the last one when they touch.
fn push_run(runs: &mut Vec<std::ops::Range<u64>>, run: std::ops::Range<u64>) {
    match runs.last_mut() {
        Some(last) if last.end == run.start => last.end = run.end,
        _ => runs.push(run),
    }
}

/// Most ranged GETs one read has in flight at once (its runs of neighbouring blocks, one
/// per object it spans).
pub const READS_AT_ONCE: usize = 16;

/// A volume whose bytes live as objects on an object store.
pub struct ObjectVolume {
    store: Arc<dyn ObjectStore>,
    /// The prefix every name is under ("" or ending in '/').
    prefix: String,
    /// How messages name it (`s3://bucket/prefix`).
    display: String,
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    /// The root at open without its pages and logs: the volume's id, block size, object
    /// size and format, which never change. Its size is the size at open: a segments
    /// volume grows ([`ObjectVolume::grow`]), and `size` holds its size now.
    geometry: Root,
    /// The volume's size in bytes now.
    size: AtomicU64,
    node: String,
    token: u64,
    options: Options,
    /// The sequence number the next commit attempt takes. It only goes up, even when an
    /// attempt fails: a failed root write may have landed (or its PUTs may land late), so
    /// no name an attempt used is ever written again. Its lock makes commits one at a
    /// time, so that `state` is locked only around root writes and renewals go on while
    /// a commit uploads.
    next_seq: Mutex<u64>,
    state: Mutex<RootState>,
    /// The last commit, readable without `state` (reports read it).
    committed_seq: AtomicU64,
    /// Shared with the collection of garbage at open, which judges each listed key by it.
    map: Arc<RwLock<Map>>,
    /// Reads a segments volume's block-map pages through their cache.
    map_pages: Arc<MapPages>,
    staged: Mutex<BTreeMap<u64, Bytes>>,
    /// Until when this node may serve the volume: the start of the last successful lease
    /// write plus the lease.
    lease_until: Mutex<Instant>,
    /// Why this node may no longer serve the volume (another node wrote its root).
    lost: Mutex<Option<String>>,
    /// Cached copies of blocks in objects written by commits after this one were made by
    /// another node since this node last wrote: stale (`u64::MAX`: none are).
    stale_after: u64,
    /// Another node committed since this node's last run and this run has not recorded
    /// yet up to which TXG the intent log holds records older than that commit: every
    /// record of the volume is dropped rather than replayed ([`ObjectVolume::catch_up`]).
    discard_log: AtomicBool,
    /// The root's last commit at open: its number and the token that made it.
    opened_commit: (u64, u64),
    sink: StateSink,
    /// What this node keeps about the volume (written through `sink`).
    local: Mutex<LocalState>,
    /// Deletions running in the background (a clean stop waits for them).
    cleanups: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// This run no longer writes the volume (released, lost to another node, or dropped):
    /// the renewals and the collection of garbage stop.
    stop: Arc<AtomicBool>,
    /// The counters.
    pub stats: Arc<ObjectStats>,
    /// Told of every change of the lease after open ([`ObjectVolume::watch_lease`]).
    lease_watcher: std::sync::OnceLock<LeaseWatcher>,
    /// Whether the lease has lapsed with no renewal answered (as the renewer saw it last).
    lapsed: AtomicBool,
    /// A read-only follower of another node's commits (`open_follower`): no lease, no
    /// commits, no deletes; a poller follows the root.
    follower: bool,
    /// Told of the blocks each followed commit changed (followers only).
    commit_watcher: std::sync::OnceLock<CommitWatcher>,
    /// Run once by the next flush before it takes the commit lock: lets a test stop a flush
    /// there, where a thread can be preempted, while other threads write and commit.
    #[cfg(test)]
    before_commit_lock: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// What an open found, from which [`ObjectVolume::assemble`] builds the volume.
struct Opening<'a> {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    display: &'a str,
    runtime: tokio::runtime::Runtime,
    node: &'a str,
    options: Options,
    sink: StateSink,
    map: Map,
    tree: Tree,
    pages: Arc<MapPages>,
    stats: Arc<ObjectStats>,
    token: u64,
    lease_until: Instant,
    stale_after: u64,
    discard_log: bool,
    local: LocalState,
    root: Root,
    etag: UpdateVersion,
    follower: bool,
}

/// What [`ObjectVolume::watch_commits`] calls with the blocks a followed commit changed
/// (their cached copies are stale now). It runs on the follower's poller thread, before
/// the commit is recorded as seen: an error leaves it unrecorded, so that a restart still
/// distrusts those copies.
pub type CommitWatcher = Box<dyn Fn(&[u64]) -> io::Result<()> + Send + Sync>;

impl std::fmt::Debug for ObjectVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectVolume")
            .field("display", &self.display)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn store_error(what: &str, err: object_store::Error) -> io::Error {
    let kind = match err {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("{what}: {err}"))
}

fn new_runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("larch-object")
        .enable_all()
        .build()
}

/// What every open does first: the options checked, the volume's runtime made, and the
/// prefix as names are made under it ("" or ending in '/').
fn prepare(
    options: Options,
    prefix: &str,
    display: &str,
) -> io::Result<(tokio::runtime::Runtime, String)> {
    options
        .check()
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, format!("{display}: {why}")))?;
    let prefix = if prefix.is_empty() || prefix.ends_with('/') {
        prefix.to_string()
    } else {
        format!("{prefix}/")
    };
    Ok((new_runtime()?, prefix))
}

/// Runs `fut` on `handle` and waits for it from this (blocking) thread.
fn run_on<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("the object-store runtime runs its tasks")
}

/// Writes `bytes` to `path` only if the object there is still at `etag` (`If-Match`).
///
/// Ceph's RADOS Gateway (16.x) compares `If-Match` with the ETag without its quotes, so a
/// quoted ETag (what S3 returns and RFC 9110 wants) never matches there. A refusal of the
/// quoted form is therefore tried once more unquoted: that can succeed only if the object
/// is still at this ETag, so the condition means the same on every store.
async fn put_if_match(
    store: &Arc<dyn ObjectStore>,
    path: &ObjPath,
    bytes: Vec<u8>,
    etag: UpdateVersion,
) -> object_store::Result<PutResult> {
    let payload = PutPayload::from(bytes);
    let first = store
        .put_opts(path, payload.clone(), PutMode::Update(etag.clone()).into())
        .await;
    match (&first, &etag.e_tag) {
        (Err(object_store::Error::Precondition { .. }), Some(tag))
            if tag.len() > 2 && tag.starts_with('"') && tag.ends_with('"') =>
        {
            let bare = UpdateVersion {
                e_tag: Some(tag[1..tag.len() - 1].to_string()),
                version: etag.version.clone(),
            };
            store
                .put_opts(path, payload, PutMode::Update(bare).into())
                .await
        }
        _ => first,
    }
}

/// Why [`get_whole`] did not return an object.
enum WholeGetError {
    /// The store's error.
    Store(object_store::Error),
    /// The object's size (from the reply's headers) is not one the reader accepts.
    Size(u64),
}

impl WholeGetError {
    /// The error to report for object `what`, `expected` saying what size was accepted.
    fn into_io(self, what: &str, expected: &str) -> io::Error {
        match self {
            WholeGetError::Store(err) => store_error(what, err),
            WholeGetError::Size(size) => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: {size} bytes, expected {expected} (not read)"),
            ),
        }
    }
}

/// Reads the object at `path` whole if its size is in `sizes`. The size comes with the
/// reply's headers, so an object of another size is refused before its body is read: a
/// damaged or hostile store cannot make this node buffer more than a valid object.
async fn get_whole(
    store: &Arc<dyn ObjectStore>,
    path: &ObjPath,
    sizes: std::ops::RangeInclusive<u64>,
) -> Result<(Bytes, ObjectMeta), WholeGetError> {
    let result = store.get(path).await.map_err(WholeGetError::Store)?;
    if !sizes.contains(&result.meta.size) {
        return Err(WholeGetError::Size(result.meta.size));
    }
    let meta = result.meta.clone();
    let bytes = result.bytes().await.map_err(WholeGetError::Store)?;
    // A body longer or shorter than its headers said is refused as well.
    if bytes.len() as u64 != meta.size {
        return Err(WholeGetError::Size(bytes.len() as u64));
    }
    Ok((bytes, meta))
}

/// Reads the object at `path` whole (its size in `sizes`) and decodes it with `decode`;
/// errors name it as `label` (its display name), a failed GET with `what` it is.
async fn get_decoded<T>(
    store: Arc<dyn ObjectStore>,
    path: ObjPath,
    label: String,
    what: String,
    sizes: std::ops::RangeInclusive<u64>,
    decode: impl FnOnce(&[u8]) -> Result<T, layout::LayoutError>,
) -> io::Result<T> {
    let expected = if sizes.start() == sizes.end() {
        sizes.start().to_string()
    } else {
        format!("at most {}", sizes.end())
    };
    let (bytes, _) = get_whole(&store, &path, sizes)
        .await
        .map_err(|e| e.into_io(&format!("{label} ({what})"), &expected))?;
    decode(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{label}: {e}")))
}

/// Reads the root under `prefix`: `None` when there is none.
fn read_root(
    handle: &tokio::runtime::Handle,
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
) -> io::Result<Option<(Root, UpdateVersion)>> {
    let store = Arc::clone(store);
    let path = ObjPath::from(format!("{prefix}{}", layout::ROOT_NAME));
    let got = run_on(handle, async move {
        get_whole(&store, &path, 0..=layout::MAX_ROOT_BYTES).await
    });
    let (bytes, meta) = match got {
        Ok(found) => found,
        Err(WholeGetError::Store(object_store::Error::NotFound { .. })) => return Ok(None),
        Err(err) => {
            return Err(err.into_io(
                &format!("{display}: reading {}", layout::ROOT_NAME),
                &format!("at most {}", layout::MAX_ROOT_BYTES),
            ));
        }
    };
    let root = Root::decode(&bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{display}/{}: {e}", layout::ROOT_NAME),
        )
    })?;
    let etag = UpdateVersion {
        e_tag: meta.e_tag,
        version: meta.version,
    };
    Ok(Some((root, etag)))
}

/// An unconditional PUT of one object (names are never reused), counted.
struct Put {
    store: Arc<dyn ObjectStore>,
    path: ObjPath,
    /// How errors name the object.
    what: String,
    stats: Arc<ObjectStats>,
}

impl Put {
    async fn send(self, bytes: Vec<u8>) -> io::Result<()> {
        let len = bytes.len() as u64;
        self.store
            .put_opts(&self.path, PutPayload::from(bytes), PutOptions::default())
            .await
            .map_err(|e| {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                store_error(&self.what, e)
            })?;
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        self.stats.put_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }
}

/// What [`probe`] finds under a prefix.
pub fn probe(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
) -> io::Result<Option<Root>> {
    let runtime = new_runtime()?;
    let found = read_root(runtime.handle(), store, prefix, display)?;
    runtime.shutdown_background();
    Ok(found.map(|(root, _)| root))
}

/// Creates a new, empty volume under `prefix` (a root with no commit, no lease). Fails
/// with `AlreadyExists` when a root is there (conditional create: two creators cannot
/// both win), and with `InvalidInput` for a geometry [`Root::check_new`] refuses (its
/// root could outgrow what a reader accepts).
pub fn create(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
    root: &Root,
) -> io::Result<()> {
    root.check_new()
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, format!("{display}: {why}")))?;
    let runtime = new_runtime()?;
    let path = ObjPath::from(format!("{prefix}{}", layout::ROOT_NAME));
    let bytes = root.encode();
    let there_already = || {
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{display}: a larch volume is there already"),
        )
    };
    let mut attempt = 1;
    let made = loop {
        let (s, p, b) = (Arc::clone(store), path.clone(), bytes.clone());
        let done = run_on(runtime.handle(), async move {
            s.put_opts(&p, PutPayload::from(b), PutMode::Create.into())
                .await
        });
        let failed = match done {
            Ok(_) => break Ok(()),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. })
                if attempt == 1 =>
            {
                break Err(there_already());
            }
            Err(err) => err,
        };
        // A conditional create is not retried by the client when its connection drops
        // (it cannot tell whether the PUT landed), and a retry of one that landed is
        // answered 412: the root is read back. These bytes: this create's. Other bytes:
        // another creator's. None: the PUT did not land, and it is tried again.
        let (s, p) = (Arc::clone(store), path.clone());
        let found = run_on(runtime.handle(), async move {
            get_whole(&s, &p, 0..=layout::MAX_ROOT_BYTES).await
        });
        match found {
            Ok((there, _)) if there == bytes => break Ok(()),
            Ok(_) => break Err(there_already()),
            Err(WholeGetError::Store(object_store::Error::NotFound { .. }))
                if attempt < CREATE_ATTEMPTS =>
            {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(_) => {
                break Err(store_error(
                    &format!("{display}: creating {}", layout::ROOT_NAME),
                    failed,
                ));
            }
        }
    };
    runtime.shutdown_background();
    made
}

/// A change of a volume's lease after it was taken, as [`ObjectVolume::watch_lease`]
/// reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseChange {
    /// Another node wrote the root: this node serves the volume no more (why says which).
    Lost(String),
    /// The lease ran out with no renewal answered: not served until one is.
    Lapsed,
    /// A renewal was answered after the lease had lapsed: served again.
    Resumed,
    /// This node gave the lease up (a clean stop).
    Released,
}

/// What [`ObjectVolume::watch_lease`] calls; it must not block (it runs on the lease's
/// renewer thread, and on whichever thread finds the volume lost).
pub type LeaseWatcher = Box<dyn Fn(LeaseChange) + Send + Sync>;

/// How many times [`create`] puts a root whose PUT failed without landing.
const CREATE_ATTEMPTS: u32 = 3;

impl ObjectVolume {
    /// Opens the volume under `prefix` for node `node`: reads its root and map, takes the
    /// lease (refused while another node holds a live one, or when the root's block size
    /// is not `options.block_bytes`), and starts renewing it. `local` is what this node
    /// recorded about the volume last time.
    pub fn open(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        display: &str,
        node: &str,
        local: LocalState,
        options: Options,
        sink: StateSink,
    ) -> io::Result<Arc<ObjectVolume>> {
        let (runtime, prefix) = prepare(options, prefix, display)?;
        let handle = runtime.handle().clone();
        let (root, etag, started) =
            acquire(&handle, &store, &prefix, display, node, &local, options)?;
        let token = root.lease.token;
        // A volume this node knew under another id was deleted and created again here: its
        // caches and its log hold the old volume's bytes, none of which may be served.
        let recreated = local.volume != 0 && local.volume != root.volume;
        let local = local.for_volume(&root);
        // Caches and log of this node are trustworthy only if no other node committed
        // since this node's last run that committed. That run is known by the token it
        // recorded after its last commit or, when it died between a commit's root write
        // and that record, by the token it recorded as pending before.
        let own = root.committed_by == local.token || root.committed_by == local.pending_token;
        let foreign = recreated || (root.commit_seq > 0 && !own);
        // The log is judged apart from the caches. A run that found another node's commit
        // recorded it, and up to which TXG the log held older records, before it served
        // (`catch_up`); its own later records sit on top of that commit, so they are
        // replayed while the root still names it. The caches stay distrusted: that run's
        // rebuild may have died before it made its tombstones durable.
        let caught_up = local.caught_up_seq > 0
            && root.commit_seq == local.caught_up_seq
            && root.committed_by == local.caught_up_token;
        let discard_log = foreign && !caught_up;
        let mut local = local;
        if root.commit_seq > 0 && own && !recreated {
            local.token = root.committed_by;
            local.seen_seq = local.seen_seq.max(root.commit_seq);
        }
        let (stats, pages) = open_pages(&handle, &store, &prefix, display, options);
        // A map that the root shows to have more pages than the bound (a root names the
        // pages themselves up to 1,024, index pages above that) is counted later.
        let count = if root.levels > 0 || root.pages.len() as u64 > options.count_at_open_pages {
            Count::Later
        } else {
            Count::Now
        };
        let (map, tree) = load_map(&handle, &store, &prefix, display, &root, &pages, count)?;
        let volume = ObjectVolume::assemble(Opening {
            store,
            prefix,
            display,
            runtime,
            node,
            options,
            sink,
            map,
            tree,
            pages,
            stats,
            token,
            lease_until: started + options.lease,
            stale_after: if foreign { local.seen_seq } else { u64::MAX },
            discard_log,
            local,
            root,
            etag,
            follower: false,
        });
        // A grow its caller recorded that had not reached the store: completed before
        // anything is served.
        if let Some(size) = options.grow_to.filter(|&s| s > volume.size_bytes()) {
            volume.grow(size)?;
            eprintln!(
                "larch: {display}: grown to {size} bytes at open (a grow that was recorded \
                 but had not reached the store)"
            );
        }
        if count == Count::Later && volume.geometry.format == Format::Segments {
            // The collection of garbage judges segments by the counts: it runs once they
            // are done.
            spawn_counter(&volume);
        } else {
            volume.collect_garbage(GC_BATCH);
        }
        spawn_renewer(&volume);
        Ok(volume)
    }

    /// The volume an open found.
    fn assemble(o: Opening<'_>) -> Arc<ObjectVolume> {
        let handle = o.runtime.handle().clone();
        let opened_commit = (o.root.commit_seq, o.root.committed_by);
        let mut geometry = o.root.clone();
        geometry.pages = Vec::new();
        geometry.logs = Vec::new();
        Arc::new(ObjectVolume {
            store: o.store,
            prefix: o.prefix,
            display: o.display.to_string(),
            handle,
            runtime: Some(o.runtime),
            size: AtomicU64::new(geometry.size_bytes),
            geometry,
            node: o.node.to_string(),
            token: o.token,
            options: o.options,
            // Cannot wrap: Root::check keeps the store's commit_seq below 2^62.
            next_seq: Mutex::new(o.root.commit_seq + 1),
            committed_seq: AtomicU64::new(o.root.commit_seq),
            state: Mutex::new(RootState {
                root: o.root,
                etag: o.etag,
                tree: o.tree,
            }),
            map: Arc::new(RwLock::new(o.map)),
            staged: Mutex::new(BTreeMap::new()),
            lease_until: Mutex::new(o.lease_until),
            lost: Mutex::new(None),
            stale_after: o.stale_after,
            discard_log: AtomicBool::new(o.discard_log),
            opened_commit,
            sink: o.sink,
            local: Mutex::new(o.local),
            cleanups: Mutex::new(Vec::new()),
            stop: Arc::new(AtomicBool::new(false)),
            stats: o.stats,
            map_pages: o.pages,
            lease_watcher: std::sync::OnceLock::new(),
            lapsed: AtomicBool::new(false),
            follower: o.follower,
            commit_watcher: std::sync::OnceLock::new(),
            #[cfg(test)]
            before_commit_lock: Mutex::new(None),
        })
    }

    /// `s3://bucket/prefix` (or what the caller named it).
    pub fn display(&self) -> &str {
        &self.display
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// The geometry with the volume's size now.
    fn sized(&self) -> Root {
        let mut root = self.geometry.clone();
        root.size_bytes = self.size_bytes();
        root
    }

    /// Grows a segments volume to `size_bytes` (the blocks added read as zeros): a root
    /// write with the new size, conditional like every other. An objects volume keeps its
    /// size (its data objects hold fixed runs of blocks, the last one's cut at the old
    /// end); a volume never shrinks here. A caller that records the size (the engine's
    /// `pool.json`) records it first: an open that finds the root smaller than the size
    /// it is given completes the grow.
    pub fn grow(&self, size_bytes: u64) -> io::Result<()> {
        self.check_grow(size_bytes)?;
        if size_bytes == self.size_bytes() {
            return Ok(());
        }
        let mut state = self.state.lock().expect("state lock");
        if let Some(why) = self.stop_reason() {
            return Err(io::Error::other(why));
        }
        self.rewrite_root(&mut state, |root| root.size_bytes = size_bytes)?;
        self.size.store(size_bytes, Ordering::Release);
        Ok(())
    }

    /// Why [`ObjectVolume::grow`] would refuse `size_bytes`, if it would (without writing
    /// anything): a follower, a lost lease, the objects layout, a smaller size, a size
    /// no root may have.
    pub fn check_grow(&self, size_bytes: u64) -> io::Result<()> {
        self.check_usable()?;
        self.check_writable()?;
        let now = self.size_bytes();
        if size_bytes == now {
            return Ok(());
        }
        if self.geometry.format != Format::Segments {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{}: a volume of the objects layout keeps its size (each data object \
                     holds a fixed run of blocks); copy it to a new volume of the segments \
                     layout to grow it (docs/object-store.md)",
                    self.display
                ),
            ));
        }
        if size_bytes < now {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{}: a volume on an object store does not shrink ({now} bytes, {size_bytes} \
                     asked for); copy the part to keep to a new, smaller volume",
                    self.display
                ),
            ));
        }
        let mut grown = self.sized();
        grown.size_bytes = size_bytes;
        grown.check_new().map_err(|why| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: {why}", self.display),
            )
        })
    }

    /// The geometry as the root gives it.
    pub fn geometry(&self) -> &Root {
        &self.geometry
    }

    /// This run's fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Whether another node committed to the volume since this node's last run that did
    /// (this open took it over: this node's cached copies of it are not trusted).
    pub fn taken_over(&self) -> bool {
        self.stale_after != u64::MAX
    }

    /// Calls `watcher` with every change of the lease from now on (the first call wins; a
    /// later one is ignored).
    pub fn watch_lease(&self, watcher: LeaseWatcher) {
        let _ = self.lease_watcher.set(watcher);
    }

    fn lease_changed(&self, change: LeaseChange) {
        if let Some(watcher) = self.lease_watcher.get() {
            watcher(change);
        }
    }

    /// The renewer's look after a renewal (`renewed`: answered): tells the watcher when
    /// the lease lapsed, and when it is renewed again after that.
    fn note_renewal(&self, renewed: bool) {
        if renewed {
            if self.lapsed.swap(false, Ordering::AcqRel) {
                self.lease_changed(LeaseChange::Resumed);
            }
            return;
        }
        let over = Instant::now() >= *self.lease_until.lock().expect("lease lock");
        if over && !self.stop.load(Ordering::Acquire) && !self.lapsed.swap(true, Ordering::AcqRel) {
            self.lease_changed(LeaseChange::Lapsed);
        }
    }

    /// The last commit.
    pub fn commit_seq(&self) -> u64 {
        self.committed_seq.load(Ordering::Acquire)
    }

    /// Keeps a segments volume's block-map pages in `cache` from now on (the engine
    /// attaches its ARC, where they are metadata) instead of the volume's own cache, whose
    /// pages move to it.
    pub fn attach_map_cache(&self, cache: Arc<dyn MapCache>) {
        self.map_pages.attach(cache);
    }

    /// Bytes the map takes in memory (its pointers, and the refs of its tree's pages).
    pub fn map_bytes(&self) -> u64 {
        let tree = self.state.lock().expect("state lock").tree.bytes();
        self.map.read().expect("map lock").bytes() + tree
    }

    /// Whether this node's intent-log record of this volume from TXG `txg` must be dropped
    /// rather than replayed: another node committed since this node's last run, or a run
    /// since found that and recorded it ([`ObjectVolume::note_log_discarded`]).
    pub fn discards_log_record(&self, txg: u64) -> bool {
        self.discard_log.load(Ordering::Acquire)
            || txg <= self.local.lock().expect("local lock").log_discard_through
    }

    /// Records durably, once this run's intent-log replay is done and before the volume is
    /// served or its first record is written, that the log of this volume holds no record
    /// of an earlier run above TXG `log_through` (this run's records are all numbered
    /// above it). When another node's commit made this open drop the log, it records that
    /// commit too: a later run that finds the root still at it replays this run's records
    /// and drops only those up to `log_through`. Without it, a crash before this run's
    /// first commit would drop the sync writes it acknowledged. Nothing to do otherwise.
    pub fn catch_up(&self, log_through: u64) -> io::Result<()> {
        if !self.discard_log.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut local = self.local.lock().expect("local lock");
        let next = LocalState {
            caught_up_seq: self.opened_commit.0,
            caught_up_token: self.opened_commit.1,
            log_discard_through: local.log_discard_through.max(log_through),
            ..*local
        };
        (self.sink)(&next)?;
        *local = next;
        self.discard_log.store(false, Ordering::Release);
        Ok(())
    }

    /// The TXG up to which this node's log records of the volume are never replayed.
    pub fn log_discard_through(&self) -> u64 {
        self.local.lock().expect("local lock").log_discard_through
    }

    /// Records, durably and before anything else can commit, that the intent log's records
    /// of this volume up to `txg` were dropped, so that no later run replays them (the log
    /// keeps them until a later TXG commits, and this node's next commit makes the volume
    /// look like its own again).
    pub fn note_log_discarded(&self, txg: u64) -> io::Result<()> {
        let mut local = self.local.lock().expect("local lock");
        if txg <= local.log_discard_through {
            return Ok(());
        }
        local.log_discard_through = txg;
        (self.sink)(&local)
    }

    /// Whether a cached copy of `block` made by this node before this run may be older
    /// than the store's (its object was written by a commit of another node since).
    pub fn cached_copy_stale(&self, block: u64) -> bool {
        if self.stale_after == u64::MAX {
            return false;
        }
        let (exists, seq) = if self.geometry.format == Format::Segments {
            // A pointer that cannot be read now: the copy is not trusted.
            match self.with_pointers(|_, lookup| lookup.want(block)) {
                Ok(Some(p)) => (p.exists(), p.seq),
                _ => return true,
            }
        } else {
            let map = self.map.read().expect("map lock");
            let v = map
                .objects()
                .get(block / u64::from(self.geometry.object_blocks));
            (v.exists(), v.seq)
        };
        !exists || seq > self.stale_after
    }

    /// Why this node may not serve the volume now, if it may not: another node took the
    /// lease, this node released it, or the lease lapsed because the store did not answer
    /// renewals.
    pub fn unusable(&self) -> Option<String> {
        if let Some(why) = self.stop_reason() {
            return Some(why);
        }
        if self.follower {
            return None;
        }
        if Instant::now() >= *self.lease_until.lock().expect("lease lock") {
            return Some(format!(
                "{}: the lease lapsed (the store did not answer its renewals); serving \
                 resumes when a renewal succeeds",
                self.display
            ));
        }
        None
    }

    /// Why this run no longer writes (or reads) the volume, once it stopped: another node
    /// took it, or this node released it.
    fn stop_reason(&self) -> Option<String> {
        if let Some(why) = self.lost.lock().expect("lost lock").clone() {
            return Some(why);
        }
        self.stop.load(Ordering::Acquire).then(|| {
            format!(
                "{}: this node released the volume's lease and serves it no more",
                self.display
            )
        })
    }

    /// Refuses writes to a follower.
    fn check_writable(&self) -> io::Result<()> {
        if !self.follower {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: this node follows the volume read-only (another node writes it)",
                self.display
            ),
        ))
    }

    fn check_usable(&self) -> io::Result<()> {
        match self.unusable() {
            None => Ok(()),
            Some(why) => Err(io::Error::other(why)),
        }
    }

    fn path(&self, name: &str) -> ObjPath {
        ObjPath::from(format!("{}{name}", self.prefix))
    }

    fn run<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> T {
        run_on(&self.handle, fut)
    }

    /// Runs `gets` (GET requests, each answering with a `T`), [`READS_AT_ONCE`] in flight,
    /// counted; their answers in the order they came.
    fn run_gets<T: Send + 'static>(
        &self,
        gets: Vec<impl Future<Output = T> + Send + 'static>,
    ) -> Vec<T> {
        self.stats
            .gets
            .fetch_add(gets.len() as u64, Ordering::Relaxed);
        self.run(async move {
            stream::iter(gets)
                .buffer_unordered(READS_AT_ONCE)
                .collect()
                .await
        })
    }

    /// The uploads of `pages` (page number, entries) as commit `version`'s map pages:
    /// each sealed by `encode` and named by `name`. Returns their refs for the root and
    /// the uploads.
    fn page_uploads<E>(
        &self,
        pages: &BTreeMap<u64, Vec<E>>,
        version: Version,
        encode: fn(&[E]) -> Vec<u8>,
        name: fn(u64, Version) -> String,
    ) -> (
        Vec<layout::PageRef>,
        Vec<impl Future<Output = io::Result<()>> + Send + 'static>,
    ) {
        pages
            .iter()
            .map(|(&page, entries)| {
                let sealed = encode(entries);
                let page_ref = layout::PageRef {
                    page,
                    version,
                    checksum: layout::page_checksum(&sealed),
                };
                (page_ref, self.put_job(name(page, version), sealed))
            })
            .unzip()
    }

    fn block_bytes(&self) -> u64 {
        u64::from(self.geometry.block_bytes)
    }

    /// The pieces of the blocks that `len` bytes at `offset` cover: (block, start and end
    /// in the block, position in the caller's buffer). A range past the volume's end is
    /// an error of `kind`.
    fn spans(
        &self,
        offset: u64,
        len: usize,
        kind: io::ErrorKind,
    ) -> io::Result<Vec<(u64, usize, usize, usize)>> {
        let end = offset
            .checked_add(len as u64)
            .filter(|&end| end <= self.size_bytes())
            .ok_or_else(|| io::Error::from(kind))?;
        let bs = self.block_bytes();
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            let block = at / bs;
            let from = (at - block * bs) as usize;
            let to = (end.min((block + 1) * bs) - block * bs) as usize;
            out.push((block, from, to, (at - offset) as usize));
            at = block * bs + to as u64;
        }
        Ok(out)
    }

    /// Reads exactly `buf.len()` bytes at `offset`: staged blocks from memory, the others
    /// one ranged GET per run of neighbouring blocks of one object (their records are
    /// contiguous), up to [`READS_AT_ONCE`] GETs in flight, every record verified; blocks
    /// of objects never written are zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_usable()?;
        let spans = self.spans(offset, buf.len(), io::ErrorKind::UnexpectedEof)?;
        let blocks = self.current_blocks(spans.iter().map(|&(block, ..)| block))?;
        for ((_, from, to, at), data) in spans.into_iter().zip(blocks) {
            buf[at..at + (to - from)].copy_from_slice(&data[from..to]);
        }
        Ok(())
    }

    /// Blocks `first..first + count`, whole (zero-padded past the volume's end), read as
    /// [`ObjectVolume::read_at`] reads them: slices of the GETs' buffers, with no copy.
    pub fn read_blocks(&self, first: u64, count: u64) -> io::Result<Vec<Bytes>> {
        self.check_usable()?;
        let end = first.saturating_add(count);
        if end > self.size_bytes().div_ceil(self.block_bytes()) {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.current_blocks(first..end)
    }

    /// The current bytes of `blocks` (ascending): staged ones from memory, taken under
    /// one hold of their lock, the others fetched in runs of neighbouring blocks of one
    /// object ([`ObjectVolume::fetch_runs`]).
    fn current_blocks(&self, blocks: impl Iterator<Item = u64>) -> io::Result<Vec<Bytes>> {
        // Runs of an objects volume end with their object; a segments volume's are split
        // where their blocks' records stop being neighbours (`fetch_runs_segments`).
        let per_object = match self.geometry.format {
            Format::Objects => u64::from(self.geometry.object_blocks),
            Format::Segments => u64::MAX,
        };
        let mut from_memory: Vec<Option<Bytes>> = Vec::new();
        let mut runs: Vec<std::ops::Range<u64>> = Vec::new();
        {
            let staged = self.staged.lock().expect("staged lock");
            for block in blocks {
                let held = staged.get(&block).cloned();
                if held.is_none() {
                    match runs.last_mut() {
                        Some(run) if run.end == block && block % per_object != 0 => run.end += 1,
                        _ => runs.push(block..block + 1),
                    }
                }
                from_memory.push(held);
            }
        }
        let mut fetched = self.fetch_runs(&runs)?.into_iter().flatten();
        Ok(from_memory
            .into_iter()
            .map(|held| {
                held.unwrap_or_else(|| {
                    fetched
                        .next()
                        .expect("a fetched block per block not staged")
                })
            })
            .collect())
    }

    /// Reads runs of blocks from the store, each run within one object: one ranged GET of
    /// its records per run (zeros for an object never written), [`READS_AT_ONCE`] at a
    /// time, every record verified. Returns each run's blocks in order. A commit may
    /// replace (and delete) an object between the map lookup and the GET: then the map
    /// names the new one, and the run is read there.
    fn fetch_runs(&self, runs: &[std::ops::Range<u64>]) -> io::Result<Vec<Vec<Bytes>>> {
        if self.geometry.format == Format::Segments {
            return self.fetch_runs_segments(runs);
        }
        let per_object = u64::from(self.geometry.object_blocks);
        let rec = self.geometry.record_bytes();
        let bs = self.block_bytes() as usize;
        let mut out: Vec<Option<Vec<Bytes>>> = vec![None; runs.len()];
        let mut tried: Vec<Version> = vec![Version::default(); runs.len()];
        for _ in 0..4 {
            let mut gets = Vec::new();
            {
                let lock = self.map.read().expect("map lock");
                let map = lock.objects();
                for (i, run) in runs.iter().enumerate() {
                    if out[i].is_some() {
                        continue;
                    }
                    let object = run.start / per_object;
                    let version = map.get(object);
                    if !version.exists() {
                        let zeros = Bytes::from(vec![0u8; bs]);
                        out[i] = Some(run.clone().map(|_| zeros.clone()).collect());
                        continue;
                    }
                    if version == tried[i] {
                        // Not found twice under the same name: it is missing.
                        return Err(self.missing(object, version));
                    }
                    tried[i] = version;
                    let store = Arc::clone(&self.store);
                    let path = self.path(&layout::data_name(object, version));
                    let first = run.start % per_object;
                    let range = first * rec..(first + run.end - run.start) * rec;
                    gets.push(async move { (i, version, store.get_range(&path, range).await) });
                }
            }
            if gets.is_empty() {
                break;
            }
            let answers = self.run_gets(gets);
            for (i, version, answer) in answers {
                match answer {
                    Ok(bytes) => {
                        self.stats
                            .get_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        out[i] = Some(self.verified_run(&bytes, runs[i].clone(), version)?);
                    }
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(err) => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        let name = layout::data_name(runs[i].start / per_object, version);
                        return Err(store_error(&format!("{}/{name}", self.display), err));
                    }
                }
            }
        }
        runs.iter()
            .zip(out)
            .zip(tried)
            .map(|((run, blocks), version)| {
                blocks.ok_or_else(|| self.missing(run.start / per_object, version))
            })
            .collect()
    }

    /// The blocks of `run` from the records `bytes` holds (a GET of them from the object
    /// `version` wrote), each verified: its checksum, and that it is that block of this
    /// volume written by that commit.
    fn verified_run(
        &self,
        bytes: &Bytes,
        run: std::ops::Range<u64>,
        version: Version,
    ) -> io::Result<Vec<Bytes>> {
        let rec = self.geometry.record_bytes() as usize;
        let bs = self.block_bytes() as usize;
        let per_object = u64::from(self.geometry.object_blocks);
        let bad = |e: layout::LayoutError| {
            let name = layout::data_name(run.start / per_object, version);
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}/{name}: {e}", self.display),
            )
        };
        let want = (run.end - run.start) as usize * rec;
        if bytes.len() != want {
            let name = layout::data_name(run.start / per_object, version);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}/{name}: {} bytes answered for a range of {want}",
                    self.display,
                    bytes.len()
                ),
            ));
        }
        run.clone()
            .zip(bytes.chunks_exact(rec))
            .map(|(block, record)| {
                let data =
                    layout::verify_record(record, bs, self.geometry.volume, block, version.seq)
                        .map_err(bad)?;
                Ok(bytes.slice_ref(data))
            })
            .collect()
    }

    /// The current bytes of `block` (a whole block, zero-padded past the volume's end).
    fn block(&self, block: u64) -> io::Result<Bytes> {
        if let Some(data) = self.staged.lock().expect("staged lock").get(&block) {
            return Ok(data.clone());
        }
        let run = block..block + 1;
        let mut runs = self.fetch_runs(std::slice::from_ref(&run))?;
        Ok(runs.remove(0).remove(0))
    }

    /// The error of a data object the map names that the store does not have.
    fn missing(&self, object: u64, version: Version) -> io::Error {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{}/{}: missing, though commit {} names it",
                self.display,
                layout::data_name(object, version),
                version.seq
            ),
        )
    }

    /// Stages whole blocks for the next commit (the last block of the volume may be
    /// short). Reads see them at once; [`ObjectVolume::flush`] makes them durable. A block
    /// of another length than the volume's blocks, or past its end, is refused (and then
    /// none of `blocks` is staged): storing it would cut or pad bytes someone wrote.
    pub fn stage_blocks(&self, blocks: impl IntoIterator<Item = (u64, Bytes)>) -> io::Result<()> {
        self.check_writable()?;
        let blocks: Vec<(u64, Bytes)> = blocks.into_iter().collect();
        let geometry = self.sized();
        if let Some((block, data)) = blocks
            .iter()
            .find(|(block, data)| !geometry.block_len_fits(*block, data.len()))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: block {block}: {} bytes given, the volume's blocks are {} ({} of it \
                     inside the volume)",
                    self.display,
                    data.len(),
                    self.block_bytes(),
                    geometry.block_len(*block)
                ),
            ));
        }
        let mut staged = self.staged.lock().expect("staged lock");
        for (block, data) in blocks {
            let bytes = data.len() as u64;
            if let Some(old) = staged.insert(block, data) {
                self.stats
                    .staged_bytes
                    .fetch_sub(old.len() as u64, Ordering::Relaxed);
            }
            self.stats.staged_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes `data` at `offset` (any alignment): partial blocks are merged with their
    /// current bytes, and everything is staged for the next commit.
    pub fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.check_usable()?;
        self.check_writable()?;
        let spans = self.spans(offset, data.len(), io::ErrorKind::InvalidInput)?;
        let bs = self.block_bytes() as usize;
        for (block, from, to, at) in spans {
            let src = &data[at..at + (to - from)];
            let merged = if from == 0 && to == bs {
                Bytes::copy_from_slice(src)
            } else {
                let mut whole = self.block(block)?.to_vec();
                whole[from..to].copy_from_slice(src);
                Bytes::from(whole)
            };
            self.stage_blocks([(block, merged)])?;
        }
        Ok(())
    }

    /// Makes every staged block durable: one commit (see the module comment). Nothing
    /// staged: nothing to do. Fails once the volume was released or lost.
    pub fn flush(&self) -> io::Result<()> {
        #[cfg(test)]
        {
            let hook = self.before_commit_lock.lock().expect("hook lock").take();
            if let Some(hook) = hook {
                hook();
            }
        }
        // The staged blocks are copied only under the commit lock. A copy taken before it
        // may be older than the copy of a flush that takes the lock first, and committed
        // after that one it would bring back bytes already overwritten and acknowledged.
        let next_seq = self.next_seq.lock().expect("next_seq lock");
        let staged: BTreeMap<u64, Bytes> = self.staged.lock().expect("staged lock").clone();
        if staged.is_empty() {
            return Ok(());
        }
        self.check_usable()?;
        let bytes: u64 = staged.values().map(|d| d.len() as u64).sum();
        let budget = self.repack_budget(bytes);
        self.commit_locked(next_seq, &staged, budget)
    }

    /// Bytes of sparse segments a commit of `staged` bytes reads to repack: none while the
    /// bytes the segments hold are within `repack_space_percent` of the live ones, else
    /// twice its own bytes and [`REPACK_BUDGET`] (which reclaims at least what the commit
    /// itself makes dead: every segment read is less than half live).
    fn repack_budget(&self, staged: u64) -> u64 {
        let map = self.map.read().expect("map lock");
        let Some(blocks) = map.segments_map() else {
            return 0;
        };
        let Some((stored, live)) = blocks.records() else {
            return 0;
        };
        if u128::from(stored) * 100
            <= u128::from(live) * u128::from(self.options.repack_space_percent)
        {
            return 0;
        }
        staged.saturating_mul(2).saturating_add(REPACK_BUDGET)
    }

    /// Repacks sparse segments of a segments volume while nothing is staged and no commit
    /// runs (the lease's renewer calls it between renewals): one commit of moved blocks,
    /// up to [`IDLE_REPACK_BUDGET`] bytes of segments read. Nothing to do: nothing done.
    fn repack_idle(&self) -> io::Result<()> {
        if self.geometry.format != Format::Segments || self.options.repack_percent == 0 {
            return Ok(());
        }
        let Ok(next_seq) = self.next_seq.try_lock() else {
            return Ok(());
        };
        if !self.staged.lock().expect("staged lock").is_empty() || self.unusable().is_some() {
            return Ok(());
        }
        let sparse = self
            .map
            .read()
            .expect("map lock")
            .blocks()
            .sparse(self.options.repack_percent);
        if sparse.is_empty() {
            return Ok(());
        }
        self.commit_locked(next_seq, &BTreeMap::new(), IDLE_REPACK_BUDGET)
    }

    /// Commits `staged` (with up to `repack_budget` bytes of sparse segments repacked, in
    /// a segments volume) under the commit lock `next_seq`, then records it: the local
    /// state, the staged blocks it made durable, the counters, and the deletion of what it
    /// superseded.
    fn commit_locked(
        &self,
        mut next_seq: std::sync::MutexGuard<'_, u64>,
        staged: &BTreeMap<u64, Bytes>,
        repack_budget: u64,
    ) -> io::Result<()> {
        let started = Instant::now();
        self.save_pending_token()?;
        // An attempt is built again when the root turns out to be a late write of this
        // run's own; a few times in a row would mean the store keeps answering falsely.
        let mut attempts = 0;
        let done = loop {
            attempts += 1;
            let attempt = match self.geometry.format {
                Format::Objects => self.commit(staged, &mut next_seq)?,
                Format::Segments => self.commit_segments(staged, &mut next_seq, repack_budget)?,
            };
            if let Some(done) = attempt {
                break done;
            }
            if attempts == 3 {
                return Err(io::Error::other(format!(
                    "{}: the root kept changing under this node's own commits",
                    self.display
                )));
            }
        };
        // Committed: the local record, the staged blocks, the counters. The first two
        // still under the commit lock, so that the next commit neither uploads these
        // blocks again nor has its record overwritten by this older one.
        {
            let mut local = self.local.lock().expect("local lock");
            local.token = self.token;
            local.seen_seq = done.seq;
            (self.sink)(&local)?;
        }
        let mut committed = 0u64;
        {
            let mut left = self.staged.lock().expect("staged lock");
            for (block, data) in staged {
                if left
                    .get(block)
                    .is_some_and(|now| now.as_ptr() == data.as_ptr())
                {
                    left.remove(block);
                    self.stats
                        .staged_bytes
                        .fetch_sub(data.len() as u64, Ordering::Relaxed);
                }
                committed += data.len() as u64;
            }
        }
        drop(next_seq);
        let s = &self.stats;
        s.commits.fetch_add(1, Ordering::Relaxed);
        s.committed_bytes.fetch_add(committed, Ordering::Relaxed);
        s.last_commit_us
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        // 4. What the commit superseded is garbage now.
        self.delete_later(done.garbage);
        Ok(())
    }

    /// Records durably, before this run's first commit, that commits by this run's token
    /// are this node's: a crash between a commit's root write and the record made after it
    /// must not make the next run take its own commit for another node's (and drop its
    /// intent log).
    fn save_pending_token(&self) -> io::Result<()> {
        let mut local = self.local.lock().expect("local lock");
        if local.pending_token == self.token {
            return Ok(());
        }
        let next = LocalState {
            pending_token: self.token,
            ..*local
        };
        (self.sink)(&next)?;
        *local = next;
        Ok(())
    }

    /// One attempt at committing `staged`, numbered from `next_seq`. `None`: the root
    /// turned out to be another write of this run's (one whose answer was lost), which
    /// `state` and the map now follow; the commit must be built again on top of it.
    fn commit(
        &self,
        staged: &BTreeMap<u64, Bytes>,
        next_seq: &mut u64,
    ) -> io::Result<Option<Committed>> {
        let per_object = u64::from(self.geometry.object_blocks);
        let mut objects: BTreeMap<u64, Vec<(u64, Bytes)>> = BTreeMap::new();
        for (block, data) in staged {
            objects
                .entry(block / per_object)
                .or_default()
                .push((*block, data.clone()));
        }
        // The base: the last commit, what the map says of the objects this commit writes,
        // and the pages it changes, read together (a renewal that finds a late commit of
        // this run's changes the root and the map under `state`).
        let (base_seq, old, mut pages) = {
            let state = self.state.lock().expect("state lock");
            let lock = self.map.read().expect("map lock");
            let map = lock.objects();
            let old: Vec<(u64, Version)> = objects.keys().map(|&o| (o, map.get(o))).collect();
            let mut pages: BTreeMap<u64, Vec<Version>> = BTreeMap::new();
            for &(object, _) in &old {
                let page = object / PAGE_OBJECTS;
                pages
                    .entry(page)
                    .or_insert_with(|| match map.pages.get(&page) {
                        Some(entries) => entries.to_vec(),
                        None => vec![Version::default(); PAGE_OBJECTS as usize],
                    });
            }
            (state.root.commit_seq, old, pages)
        };
        let version = self.next_version(base_seq, next_seq)?;
        // An object that would hold only zeros is not written: its map entry is cleared
        // (it reads as zeros, as a never-written one) and its old object is garbage.
        let zeroed: Vec<bool> = objects
            .iter()
            .zip(&old)
            .map(|((&object, blocks), (_, previous))| self.all_zeros(object, blocks, *previous))
            .collect();
        for (&(object, _), &zeroed) in old.iter().zip(&zeroed) {
            let entries = pages.get_mut(&(object / PAGE_OBJECTS)).expect("its page");
            entries[(object % PAGE_OBJECTS) as usize] =
                if zeroed { Version::default() } else { version };
        }
        self.stats.objects_cleared.fetch_add(
            zeroed.iter().filter(|&&z| z).count() as u64,
            Ordering::Relaxed,
        );
        // 1. The data objects, each whole, in parallel (bounded).
        let jobs: Vec<_> = objects
            .into_iter()
            .zip(old.iter().map(|(_, v)| *v))
            .zip(&zeroed)
            .filter(|(_, zeroed)| !**zeroed)
            .map(|(((object, blocks), previous), _)| {
                self.upload_object(object, blocks, previous, version)
            })
            .collect();
        let object_size =
            u64::from(self.geometry.object_blocks) * u64::from(self.geometry.block_bytes);
        self.upload_all(jobs, uploads_at_once(object_size, self.options.uploads))?;
        // 2. The map pages that changed, each a new object.
        let (refs, page_jobs) =
            self.page_uploads(&pages, version, layout::encode_page, layout::page_name);
        // Map pages are 64 KiB each, whatever the object size: as many at once as allowed.
        self.upload_all(page_jobs, self.options.uploads.max(1))?;
        // 3. The commit point: the root; the map follows it under the same hold of `state`.
        let edit = TreeEdit::flat(refs);
        let Some(superseded) =
            self.commit_root(base_seq, version.seq, edit, LogEdit::Keep, |map| {
                let map = map.objects_mut();
                for (page, entries) in pages {
                    map.pages.insert(page, entries.into_boxed_slice());
                }
            })?
        else {
            return Ok(None);
        };
        let mut garbage: Vec<String> = old
            .iter()
            .filter(|(_, v)| v.exists())
            .map(|&(o, v)| layout::data_name(o, v))
            .collect();
        garbage.extend(
            superseded
                .pages
                .iter()
                .map(|(_, p)| layout::page_name(p.page, p.version)),
        );
        Ok(Some(Committed {
            seq: version.seq,
            garbage,
        }))
    }

    /// The version of this run's next commit attempt after the last commit `base_seq`:
    /// never a number this run used before (an earlier attempt that failed may have
    /// landed, or its uploads may still land, under its names). No addition wraps:
    /// `base_seq` is below 2^62 (this run's numbers, or a root Root::check passed), and
    /// `next_seq` never passes the limit, checked here before it moves.
    fn next_version(&self, base_seq: u64, next_seq: &mut u64) -> io::Result<Version> {
        let seq = (*next_seq).max(base_seq + 1);
        if seq >= layout::COUNTER_LIMIT {
            return Err(io::Error::other(format!(
                "{}: the volume's commit sequence numbers are used up (the next is 2^62)",
                self.display
            )));
        }
        *next_seq = seq + 1;
        Ok(Version {
            seq,
            token: self.token,
        })
    }

    /// The commit point of commit `seq` on top of `base_seq`: the root naming the top of
    /// the tree `edit` leaves (the pages it writes in place of the ones they replace),
    /// written conditionally on the version this node last wrote. `state` is held from
    /// here on only (renewals went on during the uploads), and `apply` updates the map
    /// under it once the root landed. Returns the page refs superseded; `None` when the
    /// base moved (a late commit of this run's was found meanwhile) and the commit must be
    /// built again.
    fn commit_root(
        &self,
        base_seq: u64,
        seq: u64,
        edit: TreeEdit,
        log: LogEdit,
        apply: impl FnOnce(&mut Map),
    ) -> io::Result<Option<Superseded>> {
        let mut state = self.state.lock().expect("state lock");
        for _ in 0..3 {
            // Nothing is committed once the run stopped: after a release, another node may
            // own the volume, and this node must not extend a lease it gave up.
            if let Some(why) = self.stop_reason() {
                return Err(io::Error::other(why));
            }
            if state.root.commit_seq != base_seq {
                return Ok(None);
            }
            let mut root = state.root.clone();
            let superseded = if edit.is_empty() {
                Vec::new()
            } else {
                let (top, superseded) = state.tree.after(&edit);
                root.pages = top;
                root.levels = edit.depth;
                superseded
            };
            let logs = match log {
                LogEdit::Keep => Vec::new(),
                LogEdit::Append(next) => {
                    root.logs.push(next);
                    Vec::new()
                }
                LogEdit::Clear => std::mem::take(&mut root.logs),
            };
            root.commit_seq = seq;
            root.committed_by = self.token;
            root.committed_ms = now_ms();
            let lease_started = Instant::now();
            root.lease.expires_ms = now_ms() + self.options.lease.as_millis() as u64;
            match self.write_root(&mut state, root)? {
                // A renewal of this run's landed unanswered: the same base with a newer
                // lease, so only the root is written again.
                RootWrite::Rebase => continue,
                RootWrite::Written => {}
            }
            self.committed_seq.store(seq, Ordering::Release);
            *self.lease_until.lock().expect("lease lock") = lease_started + self.options.lease;
            if !edit.is_empty() {
                state.tree.apply(&edit);
            }
            apply(&mut self.map.write().expect("map lock"));
            return Ok(Some(Superseded {
                pages: superseded,
                logs,
            }));
        }
        Ok(None)
    }

    /// Whether object `object` would hold only zeros with `blocks` staged over what
    /// `previous` wrote: every block given is zeros, and they cover the object or it was
    /// never written (TRIM and WRITE_ZEROES make such blocks; so can a client's zeros).
    fn all_zeros(&self, object: u64, blocks: &[(u64, Bytes)], previous: Version) -> bool {
        let range = self.geometry.blocks_of(object);
        let covered = blocks.len() as u64 == range.end - range.start;
        (covered || !previous.exists())
            && blocks.iter().all(|(_, data)| data.iter().all(|&b| b == 0))
    }

    /// The blocks of `window` around `block` that one ranged GET reads with it: in the
    /// segments layout those whose records sit next to its in its segment, in the objects
    /// layout those of its object (when the object exists). Just `block` otherwise.
    pub fn record_neighbours(
        &self,
        block: u64,
        window: std::ops::Range<u64>,
    ) -> std::ops::Range<u64> {
        if !window.contains(&block) {
            return block..block + 1;
        }
        if self.geometry.format == Format::Segments {
            return self.record_neighbours_segments(block, window);
        }
        let per_object = u64::from(self.geometry.object_blocks).max(1);
        let object = block / per_object;
        let lock = self.map.read().expect("map lock");
        if !lock.objects().get(object).exists() {
            return block..block + 1;
        }
        (object * per_object).max(window.start)..((object + 1) * per_object).min(window.end)
    }

    /// The runs of `offset..end` (clipped to the volume) that no committed object holds:
    /// objects never written or cleared by a commit of zeros, less the blocks staged for
    /// the next commit. Byte ranges, in order.
    pub fn holes(&self, offset: u64, end: u64) -> Vec<std::ops::Range<u64>> {
        let end = end.min(self.size_bytes());
        if self.geometry.format == Format::Segments {
            // Pointers that cannot be read now: the range is reported as data, which it
            // may be.
            return self.holes_segments(offset, end).unwrap_or_default();
        }
        let bs = self.block_bytes();
        let per_object = u64::from(self.geometry.object_blocks) * bs;
        let lock = self.map.read().expect("map lock");
        let map = lock.objects();
        let staged = self.staged.lock().expect("staged lock");
        let mut holes: Vec<std::ops::Range<u64>> = Vec::new();
        let mut object = offset / per_object;
        while object * per_object < end {
            let from = (object * per_object).max(offset);
            let to = ((object + 1) * per_object).min(end);
            if !map.get(object).exists() {
                let blocks = from / bs..to.div_ceil(bs);
                let mut at = from;
                for block in staged.range(blocks).map(|(b, _)| *b) {
                    if block * bs > at {
                        push_run(&mut holes, at..block * bs);
                    }
                    at = ((block + 1) * bs).min(to);
                }
                if at < to {
                    push_run(&mut holes, at..to);
                }
            }
            object += 1;
        }
        holes
    }

    /// The future that writes data object `object` for commit `version`: the blocks given,
    /// and where they do not cover the object, its blocks as `previous` wrote them
    /// (read whole, every record verified) or zeros.
    /// Runs a commit's uploads, `limit` at once. An object this node's map names may be
    /// gone because another node took the volume and committed: when that is so, a failure
    /// says so rather than what failed.
    fn upload_all(
        &self,
        jobs: Vec<impl Future<Output = io::Result<()>> + Send + 'static>,
        limit: usize,
    ) -> io::Result<()> {
        let none: Vec<futures_util::future::Ready<io::Result<()>>> = Vec::new();
        self.upload_together((jobs, limit), (none, 1))
    }

    /// [`ObjectVolume::upload_all`] of two lists at the same time, each with its own
    /// bound on uploads at once.
    fn upload_together(
        &self,
        (first, first_limit): (
            Vec<impl Future<Output = io::Result<()>> + Send + 'static>,
            usize,
        ),
        (second, second_limit): (
            Vec<impl Future<Output = io::Result<()>> + Send + 'static>,
            usize,
        ),
    ) -> io::Result<()> {
        let written: io::Result<()> = self.run(async move {
            let first = stream::iter(first)
                .buffer_unordered(first_limit)
                .try_collect::<Vec<()>>();
            let second = stream::iter(second)
                .buffer_unordered(second_limit)
                .try_collect::<Vec<()>>();
            futures_util::future::try_join(first, second)
                .await
                .map(drop)
        });
        written.map_err(|err| self.lost_to_another().unwrap_or(err))
    }

    fn upload_object(
        &self,
        object: u64,
        blocks: Vec<(u64, Bytes)>,
        previous: Version,
        version: Version,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let range = self.geometry.blocks_of(object);
        let covered = blocks.len() as u64 == range.end - range.start;
        let store = Arc::clone(&self.store);
        let old_path = self.path(&layout::data_name(object, previous));
        let new_name = layout::data_name(object, version);
        let new_path = self.path(&new_name);
        let display = self.display.clone();
        let bs = self.block_bytes() as usize;
        let rec = self.geometry.record_bytes() as usize;
        let object_bytes = self.geometry.object_bytes(object);
        let geometry = self.geometry.clone();
        let volume = self.geometry.volume;
        let stats = self.stats_handle();
        async move {
            let mut base: Option<Bytes> = None;
            if !covered && previous.exists() {
                stats.gets.fetch_add(1, Ordering::Relaxed);
                let (got, _) = get_whole(&store, &old_path, object_bytes..=object_bytes)
                    .await
                    .map_err(|e| {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                        e.into_io(
                            &format!("{display}/{}", layout::data_name(object, previous)),
                            &object_bytes.to_string(),
                        )
                    })?;
                stats
                    .get_bytes
                    .fetch_add(got.len() as u64, Ordering::Relaxed);
                stats.objects_merged.fetch_add(1, Ordering::Relaxed);
                base = Some(got);
            }
            let mut given = blocks.into_iter().peekable();
            let mut parts: Vec<(u64, Bytes)> =
                Vec::with_capacity((range.end - range.start) as usize);
            for (i, block) in range.clone().enumerate() {
                if given.peek().is_some_and(|(b, _)| *b == block) {
                    let (_, data) = given.next().expect("peeked");
                    parts.push((block, data));
                    continue;
                }
                let data = match &base {
                    Some(base) => {
                        let record = &base[i * rec..(i + 1) * rec];
                        let data = layout::verify_record(record, bs, volume, block, previous.seq)
                            .map_err(|e| {
                            io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("{display}/{}: {e}", layout::data_name(object, previous)),
                            )
                        })?;
                        base.slice_ref(data)
                    }
                    None => Bytes::from(vec![0u8; bs]),
                };
                parts.push((block, data));
            }
            let body = layout::build_object(
                parts.iter().map(|(b, d)| (*b, &d[..])),
                &geometry,
                version.seq,
            )
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{display}/{new_name}: {e}"),
                )
            })?;
            let len = body.len() as u64;
            store
                .put_opts(&new_path, PutPayload::from(body), PutOptions::default())
                .await
                .map_err(|e| {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    store_error(&format!("{display}/{new_name}"), e)
                })?;
            stats.puts.fetch_add(1, Ordering::Relaxed);
            stats.put_bytes.fetch_add(len, Ordering::Relaxed);
            stats.objects_written.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// The future that writes `bytes` as `name` (unconditionally: names are never reused).
    fn put_job(
        &self,
        name: String,
        bytes: Vec<u8>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        self.put_body(name).send(bytes)
    }

    /// A PUT of object `name` whose body is given later ([`Put::send`]).
    fn put_body(&self, name: String) -> Put {
        Put {
            store: Arc::clone(&self.store),
            path: self.path(&name),
            what: format!("{}/{name}", self.display),
            stats: self.stats_handle(),
        }
    }

    /// The counters, for the runtime's tasks.
    fn stats_handle(&self) -> Arc<ObjectStats> {
        Arc::clone(&self.stats)
    }

    /// Writes `root` conditionally on the version in `state`.
    ///
    /// A failed write is not taken at its word: a conditional PUT whose answer was lost (a
    /// timeout, a dropped connection) may have landed, and a 412 may answer the retry of
    /// one that landed. So the root is read back. This write: written. Another node's
    /// (another token): this node lost the volume. Another write of this run's (a renewal
    /// or commit that landed unanswered): `state` and the map follow it, and the caller
    /// builds its write again on top of it. Unchanged after an error: the write is sent
    /// again, up to [`ROOT_PUT_TRIES`] times in all (the client does not retry a
    /// conditional PUT itself; the read back waited out an outage, so the store answers
    /// again), then the error. Sending it again is safe: the same bytes on the same
    /// condition, so if the first lands after all, one of the two fails its condition
    /// and the read back finds this write.
    fn write_root(&self, state: &mut RootState, root: Root) -> io::Result<RootWrite> {
        let what = format!("{}/{}", self.display, layout::ROOT_NAME);
        let mut tries = 0;
        loop {
            tries += 1;
            let store = Arc::clone(&self.store);
            let path = self.path(layout::ROOT_NAME);
            let bytes = root.encode();
            let len = bytes.len() as u64;
            let etag = state.etag.clone();
            let put = self.run(async move { put_if_match(&store, &path, bytes, etag).await });
            self.stats.puts.fetch_add(1, Ordering::Relaxed);
            self.stats.put_bytes.fetch_add(len, Ordering::Relaxed);
            let failed = match put {
                Ok(PutResult { e_tag, version, .. }) => {
                    state.root = root;
                    state.etag = UpdateVersion { e_tag, version };
                    return Ok(RootWrite::Written);
                }
                Err(err) => err,
            };
            let refused = matches!(failed, object_store::Error::Precondition { .. });
            if !refused {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            let (now, etag) =
                match read_root(&self.handle, &self.store, &self.prefix, &self.display) {
                    Ok(Some(found)) => found,
                    Ok(None) => {
                        return Err(self.fence(format!(
                            "{what}: the volume's root is gone: this node (token {}) stops \
                             serving it",
                            self.token
                        )));
                    }
                    Err(read) => {
                        return Err(io::Error::new(
                            read.kind(),
                            format!(
                                "{what}: {failed}; reading it back to see whether it landed: \
                                 {read}"
                            ),
                        ));
                    }
                };
            if now.lease.token != self.token {
                return Err(self.fence(format!(
                    "{}: node {} (token {}) wrote the volume's root: this node (token {}) no \
                     longer holds its lease and stops serving it",
                    self.display, now.lease.owner, now.lease.token, self.token
                )));
            }
            if now == root {
                state.root = now;
                state.etag = etag;
                return Ok(RootWrite::Written);
            }
            if !refused && now == state.root {
                // It did not land, as far as the store shows now (if it lands later, the
                // next write finds it and rebases).
                if tries < ROOT_PUT_TRIES && self.stop_reason().is_none() {
                    state.etag = etag;
                    continue;
                }
                return Err(store_error(&what, failed));
            }
            self.adopt(state, now, etag)?;
            return Ok(RootWrite::Rebase);
        }
    }

    /// Makes `state` follow `now`, a root of this run's whose write was not answered; the
    /// map too when it is another commit. That commit's pages and objects are on the store:
    /// this run never writes a name twice, and deletes its own objects only once a later
    /// commit of its own has superseded them (which it cannot have: that commit's write
    /// would have been conditional on the root `now` replaced).
    fn adopt(&self, state: &mut RootState, now: Root, etag: UpdateVersion) -> io::Result<()> {
        // This run's commits only go up, and `state` holds the last one it knows landed: a
        // root of this run's with an older commit is a stale read (a store answering from
        // a lagging replica or cache), not a write that landed since. Taken as the base, it
        // would turn the map back and serve older bytes than acknowledged ones.
        if now.commit_seq < state.root.commit_seq {
            return Err(io::Error::other(format!(
                "{}/{}: read back an older root of this node's (commit {}, token {}) than the \
                 one it knows landed (commit {}): a stale read from the store, not used",
                self.display,
                layout::ROOT_NAME,
                now.commit_seq,
                self.token,
                state.root.commit_seq
            )));
        }
        if now.format != self.geometry.format {
            return Err(io::Error::other(format!(
                "{}/{}: read back a root of the {} format, but the volume is of the {} \
                 format: not used",
                self.display,
                layout::ROOT_NAME,
                now.format.name(),
                self.geometry.format.name()
            )));
        }
        if now.commit_seq != state.root.commit_seq
            || now.pages != state.root.pages
            || now.levels != state.root.levels
            || now.logs != state.root.logs
        {
            let (map, tree) = load_map(
                &self.handle,
                &self.store,
                &self.prefix,
                &self.display,
                &now,
                &self.map_pages,
                Count::Now,
            )?;
            *self.map.write().expect("map lock") = map;
            state.tree = tree;
            self.committed_seq.store(now.commit_seq, Ordering::Release);
        }
        state.root = now;
        state.etag = etag;
        Ok(())
    }

    /// Marks the volume lost (every request gets EIO from now on, and the renewals and
    /// the collection of garbage stop); returns the error to give.
    fn fence(&self, why: String) -> io::Error {
        let first = self
            .lost
            .lock()
            .expect("lost lock")
            .replace(why.clone())
            .is_none();
        self.stop.store(true, Ordering::Release);
        if first {
            self.lease_changed(LeaseChange::Lost(why.clone()));
        }
        io::Error::other(why)
    }

    /// Whether the root on the store is no longer the one this node last wrote: another
    /// node took the volume. Marks the volume lost and returns the error to give.
    fn lost_to_another(&self) -> Option<io::Error> {
        let (now, _) = read_root(&self.handle, &self.store, &self.prefix, &self.display)
            .ok()
            .flatten()?;
        if now.lease.token == self.token {
            return None;
        }
        Some(self.fence(format!(
            "{}: node {} took the volume (token {}): this node (token {}) no longer holds its \
             lease and stops serving it",
            self.display, now.lease.owner, now.lease.token, self.token
        )))
    }

    /// Writes the root that `change` makes of the current one, again on top of a write of
    /// this run's found unanswered (a few times at most). Returns when the write started.
    fn rewrite_root(
        &self,
        state: &mut RootState,
        change: impl Fn(&mut Root),
    ) -> io::Result<Instant> {
        for _ in 0..3 {
            let mut root = state.root.clone();
            change(&mut root);
            let started = Instant::now();
            if let RootWrite::Written = self.write_root(state, root)? {
                return Ok(started);
            }
        }
        Err(io::Error::other(format!(
            "{}: the root kept changing under this node's own writes",
            self.display
        )))
    }

    /// Renews the lease (a root write that changes only its end).
    fn renew(&self) -> io::Result<()> {
        let mut state = self.state.lock().expect("state lock");
        // Looked at under `state`: a release sets `stop` before it takes `state` for its
        // own root write, so no renewal lands after that write and extends the lease again.
        if self.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let lease_ms = self.options.lease.as_millis() as u64;
        let started = self.rewrite_root(&mut state, |root| {
            root.lease.expires_ms = now_ms() + lease_ms
        })?;
        *self.lease_until.lock().expect("lease lock") = started + self.options.lease;
        self.stats.renewals.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Gives the lease up (a clean stop): another node may take the volume at once. A
    /// commit in flight ends first, and none is made after (flushes fail from then on,
    /// as reads and writes do); then it waits (up to 30 s) for the deletions of superseded
    /// objects still running.
    pub fn release(&self) -> io::Result<()> {
        // The commit lock orders this root write after every commit's: without it, a commit
        // in flight would write its root after this one and extend the lease this run just
        // gave up, and its flush would report a commit made after the release.
        let _commits = self.next_seq.lock().expect("next_seq lock");
        self.stop.store(true, Ordering::Release);
        if self.follower {
            // Nothing to give up: a follower holds no lease and writes nothing.
            self.lease_changed(LeaseChange::Released);
            return Ok(());
        }
        let running: Vec<_> = std::mem::take(&mut *self.cleanups.lock().expect("cleanups lock"));
        self.run(async move {
            let all = futures_util::future::join_all(running);
            let _ = tokio::time::timeout(Duration::from_secs(30), all).await;
        });
        let mut state = self.state.lock().expect("state lock");
        if self.lost.lock().expect("lost lock").is_some() {
            return Ok(());
        }
        self.rewrite_root(&mut state, |root| {
            root.lease.owner.clear();
            root.lease.expires_ms = 0;
        })?;
        drop(state);
        self.lease_changed(LeaseChange::Released);
        Ok(())
    }

    /// The node name this volume was opened for.
    pub fn node(&self) -> &str {
        &self.node
    }
}

impl Drop for ObjectVolume {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Refuses a root the caller cannot use (before anything is taken or written): blocks of
/// another size than `options.block_bytes`, another size than `options.size_bytes`, or a
/// commit older than the last one this node saw (the store went back in time).
/// Why a node must not use `root` (`Err`), judged by what it knows of the volume (`local`,
/// `options`) before anything of it is read past the root. `follower`: the node follows
/// the volume (a root larger than the size it knows is its writer's grow).
fn refuse_root(
    root: &Root,
    local: &LocalState,
    options: Options,
    display: &str,
    follower: bool,
) -> io::Result<()> {
    if let Some(expected) = options.block_bytes
        && root.block_bytes != expected
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{display}: the volume's blocks are {} bytes, but it is opened for \
                 {expected}-byte blocks (the pool's volblocksize): refused, since every \
                 block would be cut or padded",
                root.block_bytes
            ),
        ));
    }
    // A grow the caller recorded, made or not; or one the writer made since this
    // follower recorded the size.
    let grew = |expected: u64| {
        root.format == Format::Segments
            && (options.grow_to == Some(root.size_bytes)
                || (follower && root.size_bytes > expected))
    };
    if let Some(expected) = options.size_bytes
        && root.size_bytes != expected
        && !grew(expected)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{display}: the volume's root says {} bytes, but it is opened as a volume \
                 of {expected} bytes: refused before its map is read",
                root.size_bytes
            ),
        ));
    }
    // Commit numbers of a volume only go up, and this node records only those that
    // landed: a root behind them is the store gone back in time (a replica failover,
    // a restore from backup, an old root copied back). Serving it would mix its older
    // bytes with this node's newer cached copies, and the collection of garbage would
    // delete the newer commits' objects, the only copies left of them.
    if (local.volume == 0 || local.volume == root.volume) && root.commit_seq < local.seen_seq {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{display}: the volume's root is at commit {}, but this node has seen \
                 commit {} of it: the store went back in time (a failover to a replica \
                 behind it, a restore, an old root copied back); refused before \
                 anything is written or deleted. If the store's state is the one to keep, \
                 remove this node's local state of the volume: the volume then opens as \
                 one new to this node (its cached copies and intent-log records of it are \
                 dropped)",
                root.commit_seq, local.seen_seq
            ),
        ));
    }
    Ok(())
}

/// Takes the lease of the volume under `prefix`: free (never taken, released, this node's
/// own, or expired for longer than the allowed skew), written conditionally with a token
/// larger than any before. Returns the root as written and when the write started.
fn acquire(
    handle: &tokio::runtime::Handle,
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
    node: &str,
    local: &LocalState,
    options: Options,
) -> io::Result<(Root, UpdateVersion, Instant)> {
    for _ in 0..8 {
        let Some((root, etag)) = read_root(handle, store, prefix, display)? else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{display}: no larch volume there (no {}; `larch volume add` creates one)",
                    layout::ROOT_NAME
                ),
            ));
        };
        // Before the lease is taken: a volume the caller cannot use is left as it is.
        refuse_root(&root, local, options, display, false)?;
        let now = now_ms();
        let lease = &root.lease;
        let expired = now
            > lease
                .expires_ms
                .saturating_add(options.skew.as_millis() as u64);
        if !lease.owner.is_empty() && lease.owner != node && !expired {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{display}: node {} holds the volume's lease (token {}) for {} s more; \
                     another node may take it over once it has expired (renewals stop \
                     when that node stops or loses the store)",
                    lease.owner,
                    lease.token,
                    lease
                        .expires_ms
                        .saturating_add(options.skew.as_millis() as u64)
                        .saturating_sub(now)
                        / 1000
                        + 1
                ),
            ));
        }
        // Both are below 2^62 (Root::check), so this cannot wrap; a token that reaches the
        // limit would make the root unreadable to every node, this one included.
        let token = lease.token.max(root.committed_by) + 1;
        if token >= layout::COUNTER_LIMIT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{display}: the volume's fencing tokens are used up (the next is 2^62)"),
            ));
        }
        let mut mine = root.clone();
        mine.lease = layout::Lease {
            owner: node.to_string(),
            token,
            expires_ms: now + options.lease.as_millis() as u64,
            duration_ms: options.lease.as_millis() as u64,
        };
        let started = Instant::now();
        let path = ObjPath::from(format!("{prefix}{}", layout::ROOT_NAME));
        let bytes = mine.encode();
        let store2 = Arc::clone(store);
        let put = run_on(handle, async move {
            put_if_match(&store2, &path, bytes, etag).await
        });
        match put {
            Ok(PutResult { e_tag, version, .. }) => {
                return Ok((mine, UpdateVersion { e_tag, version }, started));
            }
            // Another node wrote it in between: look again.
            Err(object_store::Error::Precondition { .. }) => continue,
            Err(err) => {
                return Err(store_error(&format!("{display}: taking the lease"), err));
            }
        }
    }
    Err(io::Error::other(format!(
        "{display}: the root kept changing while taking the lease"
    )))
}

/// The counters of a volume being opened, and the reader of its map pages (in a cache of
/// its own until the caller attaches another).
fn open_pages(
    handle: &tokio::runtime::Handle,
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
    options: Options,
) -> (Arc<ObjectStats>, Arc<MapPages>) {
    let stats = Arc::new(ObjectStats::default());
    let pages = MapPages::new(
        handle,
        store,
        prefix,
        display,
        options.map_cache_bytes,
        &stats,
    );
    (stats, Arc::new(pages))
}

/// Reads and checks the tree of map pages the root names, then the map logs it names. An
/// objects volume's map pages are read whole; a segments volume's through `pages`, all of
/// them once to count its segments with [`Count::Now`], else none until a lookup or the
/// count needs one.
fn load_map(
    handle: &tokio::runtime::Handle,
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
    root: &Root,
    pages: &Arc<MapPages>,
    count: Count,
) -> io::Result<(Map, Tree)> {
    let (tree, _, _) = tree::read_tree(handle, store, prefix, display, root, &Tree::default())?;
    if root.format == Format::Segments {
        let mut blocks = BlockMap::new(Arc::clone(pages));
        let refs: Vec<layout::PageRef> = tree.leaves().copied().collect();
        blocks.load(&refs, display, count)?;
        // The pages as the root names them are saved; its logs change them.
        // (Applying them pins the pointers they touch: the next checkpoint's.)
        for log in read_logs(handle, store, prefix, display, root, &root.logs)? {
            apply_log(&mut blocks, &log, display)?;
        }
        return Ok((Map::Segments(blocks), tree));
    }
    let size = layout::PAGE_BYTES;
    let jobs: Vec<_> = tree
        .leaves()
        .map(|p| {
            let store = Arc::clone(store);
            let name = layout::page_name(p.page, p.version);
            let path = ObjPath::from(format!("{prefix}{name}"));
            let label = format!("{display}/{name}");
            let p = *p;
            async move {
                let what = "a map page the root names".to_string();
                let entries = get_decoded(store, path, label, what, size..=size, |bytes| {
                    layout::decode_page(bytes, p.checksum)
                })
                .await?;
                Ok::<_, io::Error>((p.page, entries))
            }
        })
        .collect();
    let read: Vec<(u64, Vec<Version>)> = run_on(handle, async move {
        stream::iter(jobs).buffer_unordered(16).try_collect().await
    })?;
    let mut map = ObjectMap::default();
    for (page, entries) in read {
        map.pages.insert(page, entries.into_boxed_slice());
    }
    Ok((Map::Objects(map), tree))
}

/// One map log read from the store: its name and entries.
struct ReadLog {
    name: String,
    entries: Vec<(u64, layout::BlockPtr)>,
}

/// Reads the map logs `logs` (of the root `root`) under `prefix`, in their order.
fn read_logs(
    handle: &tokio::runtime::Handle,
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
    root: &Root,
    logs: &[layout::LogRef],
) -> io::Result<Vec<ReadLog>> {
    let blocks = root.blocks();
    let jobs: Vec<_> = logs
        .iter()
        .map(|log| {
            let store = Arc::clone(store);
            let name = layout::block_log_name(log.version);
            let path = ObjPath::from(format!("{prefix}{name}"));
            let display = display.to_string();
            let log = *log;
            let size = 32 + log.entries * layout::LOG_ENTRY_BYTES as u64;
            async move {
                let (bytes, _) = get_whole(&store, &path, size..=size).await.map_err(|e| {
                    e.into_io(
                        &format!("{display}/{name} (a map log the root names)"),
                        &size.to_string(),
                    )
                })?;
                let entries = layout::decode_block_log(&bytes, &log, blocks).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("{display}/{name}: {e}"))
                })?;
                Ok::<_, io::Error>(ReadLog { name, entries })
            }
        })
        .collect();
    run_on(handle, async move {
        stream::iter(jobs).buffered(16).try_collect().await
    })
}

/// Applies a map log read from the store to `blocks`; returns the blocks it changed.
fn apply_log(blocks: &mut BlockMap, log: &ReadLog, display: &str) -> io::Result<Vec<u64>> {
    blocks.apply_log(&log.entries)?.map_err(|segment| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{display}/{}: its pointers into {} disagree with the map's on the segment's \
                 size, or name more records than it holds",
                log.name,
                layout::segment_name(segment)
            ),
        )
    })
}

/// Counts a segments volume's segments in the background after its open
/// ([`Count::Later`]), then collects its garbage. A round that fails (the store does not
/// answer) is tried again a second later; the thread ends when the volume stops or goes.
fn spawn_counter(volume: &Arc<ObjectVolume>) {
    let weak: Weak<ObjectVolume> = Arc::downgrade(volume);
    let stop = Arc::clone(&volume.stop);
    std::thread::Builder::new()
        .name("larch-count".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let Some(volume) = weak.upgrade() else {
                    return;
                };
                match volume.count_step() {
                    Ok(true) => {
                        volume.collect_garbage(GC_BATCH);
                        return;
                    }
                    Ok(false) => {}
                    Err(err) => {
                        volume.stats.errors.fetch_add(1, Ordering::Relaxed);
                        eprintln!("larch: {}: counting the segments: {err}", volume.display);
                        if err.kind() == io::ErrorKind::InvalidData {
                            // Damage: the counts are given up (nothing is repacked or
                            // deleted by them); the rest of the garbage is still collected.
                            volume.collect_garbage(GC_BATCH);
                            return;
                        }
                        drop(volume);
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        })
        .expect("spawn a volume's thread");
}

/// Renews the lease every quarter of it until the volume stops or goes.
fn spawn_renewer(volume: &Arc<ObjectVolume>) {
    let every = volume.options.lease / 4;
    spawn_ticker(volume, "larch-lease", every, move |volume| {
        // A failed renewal is tried again soon; the lease lapses (and the volume stops
        // serving) only if none succeeds before it ends.
        let renewed = volume.renew().is_ok();
        volume.note_renewal(renewed);
        // Between renewals, a volume left idle reclaims its sparse segments. A failure is
        // the next commit's to report (it meets the same store).
        if renewed {
            let _ = volume.repack_idle();
        }
        if renewed { every } else { every / 4 }
    });
}

/// Runs `tick` on a thread of its own (`name`), first `every` after now and then after
/// the wait each tick returns, until the volume stops or is dropped.
fn spawn_ticker(
    volume: &Arc<ObjectVolume>,
    name: &str,
    every: Duration,
    tick: impl Fn(&ObjectVolume) -> Duration + Send + 'static,
) {
    let weak: Weak<ObjectVolume> = Arc::downgrade(volume);
    let stop = Arc::clone(&volume.stop);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut next = Instant::now() + every;
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(50).min(every));
                if Instant::now() < next {
                    continue;
                }
                let Some(volume) = weak.upgrade() else {
                    return;
                };
                if stop.load(Ordering::Acquire) {
                    return;
                }
                next = Instant::now() + tick(&volume);
            }
        })
        .expect("spawn a volume's thread");
}

#[cfg(test)]
mod tests {
    use super::gc::is_garbage;
    use super::*;
    use object_store::memory::InMemory;

    const BS: usize = 4096;

    fn open(store: &Arc<dyn ObjectStore>) -> Arc<ObjectVolume> {
        ObjectVolume::open(
            Arc::clone(store),
            "vols/a",
            "mem://vols/a",
            "node-a",
            LocalState::default(),
            Options::default(),
            Box::new(|_| Ok(())),
        )
        .unwrap()
    }

    /// The byte every byte of `block` is (`None`: they differ).
    fn block_byte(vol: &ObjectVolume, block: u64) -> Option<u8> {
        let mut buf = vec![0u8; BS];
        vol.read_at(&mut buf, block * BS as u64).unwrap();
        buf.iter().all(|&b| b == buf[0]).then_some(buf[0])
    }

    /// The local state's file is an envelope; version-0 files (bare JSON, no volume id)
    /// still load; a damaged file is refused, not taken for a blank state.
    #[test]
    fn local_state_files_of_either_version_load_and_damage_is_refused() {
        let state = LocalState {
            volume: 0x1234,
            token: 5,
            seen_seq: 10,
            log_discard_through: 7,
            pending_token: 5,
            caught_up_seq: 3,
            caught_up_token: 2,
        };
        let bytes = state.encode();
        assert_eq!(LocalState::decode(&bytes).unwrap(), state);
        let old = br#"{"token":5,"seen_seq":10,"log_discard_through":7,"pending_token":5}"#;
        let loaded = LocalState::decode(old).unwrap();
        assert_eq!((loaded.volume, loaded.token, loaded.seen_seq), (0, 5, 10));
        let mut damaged = bytes.clone();
        *damaged.last_mut().unwrap() ^= 1;
        assert!(LocalState::decode(&damaged).is_err());
        assert!(LocalState::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(LocalState::decode(b"").is_err());
    }

    /// Uploads at once keep 64 MiB of objects in flight at most: all 16 up to 4 MiB
    /// objects, one for the largest; never none, never more than allowed.
    #[test]
    fn uploads_at_once_bound_the_bytes_in_flight() {
        const KIB: u64 = 1 << 10;
        const MIB: u64 = 1 << 20;
        for (object_bytes, uploads) in [
            (4 * KIB, 16),
            (128 * KIB, 16),
            (MIB, 16),
            (4 * MIB, 16),
            (5 * MIB, 12),
            (8 * MIB, 8),
            (16 * MIB, 4),
            (32 * MIB, 2),
            (48 * MIB, 1),
            (64 * MIB, 1),
        ] {
            assert_eq!(
                uploads_at_once(object_bytes, MAX_UPLOADS),
                uploads,
                "{object_bytes}"
            );
            assert!(uploads as u64 * object_bytes <= MAX_BYTES_IN_FLIGHT);
        }
        assert_eq!(uploads_at_once(MIB, 4), 4);
        assert_eq!(uploads_at_once(64 * MIB, 0), 1);
        assert_eq!(uploads_at_once(0, MAX_UPLOADS), MAX_UPLOADS);
        assert_eq!(uploads_at_once(u64::MAX, MAX_UPLOADS), 1);
    }

    /// A commit that leaves an object holding only zeros clears its map entry instead of
    /// writing it (TRIM, WRITE_ZEROES): it reads as zeros and is a hole, like the objects
    /// never written, across a reopen; an object zeroed only in part is written.
    #[test]
    fn an_object_left_all_zeros_is_cleared_and_reads_as_a_hole() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        // 16 blocks, 4 per object.
        let root = Root::new(0x1234, 16 * BS as u64, BS as u32, 4);
        create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
        let vol = open(&store);
        // Holes as (start, end) in blocks.
        let holes = |vol: &ObjectVolume, from: u64, to: u64| -> Vec<(u64, u64)> {
            let bs = BS as u64;
            let runs = vol.holes(from * bs, to * bs);
            runs.iter().map(|r| (r.start / bs, r.end / bs)).collect()
        };
        assert_eq!(holes(&vol, 0, 16), [(0, 16)], "a new volume");
        vol.write_at(&[7u8; 8 * BS], 0).unwrap();
        assert_eq!(holes(&vol, 0, 16), [(8, 16)], "staged blocks are data");
        vol.flush().unwrap();
        assert_eq!(holes(&vol, 0, 16), [(8, 16)]);
        // Object 0 zeroed whole, object 1 in part; the hole of a never-written object
        // given zeros stays a hole.
        let zeros = Bytes::from(vec![0u8; BS]);
        let zeroed = [0, 1, 2, 3, 4, 12].map(|b| (b, zeros.clone()));
        vol.stage_blocks(zeroed).unwrap();
        vol.flush().unwrap();
        assert_eq!(vol.stats.objects_cleared.load(Ordering::Relaxed), 2);
        assert_eq!(holes(&vol, 0, 16), [(0, 4), (8, 16)]);
        assert_eq!(holes(&vol, 1, 2), [(1, 2)]);
        for (block, byte) in [(0, 0), (3, 0), (4, 0), (5, 7), (7, 7), (12, 0)] {
            assert_eq!(block_byte(&vol, block), Some(byte), "block {block}");
        }
        vol.release().unwrap();
        drop(vol);
        let vol = open(&store);
        assert_eq!(holes(&vol, 0, 16), [(0, 4), (8, 16)], "after a reopen");
        assert_eq!(block_byte(&vol, 0), Some(0));
        assert_eq!(block_byte(&vol, 5), Some(7));
    }

    #[test]
    fn a_flush_held_up_before_the_commit_lock_never_rolls_back_a_later_one() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let root = Root::new(0x1234, 16 * BS as u64, BS as u32, 4);
        create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
        let vol = open(&store);
        // Flush A stops before the commit lock (a preempted thread) until told to go on.
        let (arrived, on_arrival) = std::sync::mpsc::channel();
        let (go, on_go) = std::sync::mpsc::channel::<()>();
        *vol.before_commit_lock.lock().unwrap() = Some(Box::new(move || {
            arrived.send(()).unwrap();
            on_go.recv().unwrap();
        }));
        vol.write_at(&[1u8; BS], 0).unwrap();
        let a = {
            let vol = Arc::clone(&vol);
            std::thread::spawn(move || vol.flush())
        };
        on_arrival.recv().unwrap();
        // Meanwhile the block is written again and flush B commits (acknowledges) it.
        vol.write_at(&[2u8; BS], 0).unwrap();
        vol.flush().unwrap();
        go.send(()).unwrap();
        a.join().unwrap().unwrap();
        assert_eq!(block_byte(&vol, 0), Some(2), "B's bytes rolled back");
        vol.release().unwrap();
        drop(vol);
        assert_eq!(block_byte(&open(&store), 0), Some(2), "on the store");
    }

    /// Each kind of key the collection meets, judged as the set of named objects judged
    /// it: only earlier tokens' data objects and pages the root at open does not name (in
    /// the exact form the volume writes) are garbage; nothing of this run's or a later
    /// owner's, nothing that is not a volume's object, and no version of an object this run
    /// rewrote since the open (the open's version of it is no longer known).
    #[test]
    fn the_collection_judges_each_key_by_the_map_and_the_roots_pages() {
        let v = |seq, token| Version { seq, token };
        let token = 5;
        let mut entries = vec![Version::default(); PAGE_OBJECTS as usize];
        entries[1] = v(3, 2);
        entries[10] = v(3, 2);
        entries[7] = v(6, 5);
        let mut map = ObjectMap::default();
        map.pages.insert(0, entries.into_boxed_slice());
        let map = RwLock::new(Map::Objects(map));
        let pages = [
            layout::PageRef {
                page: 0,
                version: v(3, 2),
                checksum: 0,
            },
            layout::PageRef {
                page: 2,
                version: v(4, 3),
                checksum: 0,
            },
        ];
        let index = layout::PageRef {
            page: 0,
            version: v(4, 3),
            checksum: 0,
        };
        let tree = Tree::of(&[&pages, &[index]]);
        let judge = |name: &str| is_garbage(name, token, &tree, &[], &map);
        let data = |object, version| layout::data_name(object, version);
        let page = |number, version| layout::page_name(number, version);
        // Named by the map or the root: kept.
        assert!(!judge(&data(1, v(3, 2))));
        assert!(!judge(&data(10, v(3, 2))));
        assert!(!judge(&page(0, v(3, 2))));
        assert!(!judge(&page(2, v(4, 3))));
        // Index pages: the tree's kept, another version or level of them garbage, a
        // later run's never.
        assert!(!judge(&layout::index_page_name(1, 0, v(4, 3))));
        assert!(judge(&layout::index_page_name(1, 0, v(3, 3))));
        assert!(judge(&layout::index_page_name(2, 0, v(4, 3))));
        assert!(!judge(&layout::index_page_name(1, 0, v(9, 6))));
        // Earlier tokens' versions no one names, of written objects, of objects never
        // written (the page is absent too), of pages: garbage.
        assert!(judge(&data(1, v(2, 2))));
        assert!(judge(&data(1, v(3, 1))));
        assert!(judge(&data(2, v(3, 2))));
        assert!(judge(&data(PAGE_OBJECTS + 1, v(1, 1))));
        assert!(judge(&data(u64::MAX, v(1, 1))));
        assert!(
            judge(&data(3, Version::default())),
            "an entry never written"
        );
        assert!(judge(&page(0, v(2, 2))));
        assert!(judge(&page(1, v(4, 3))));
        // A named version in another form than the volume writes it: never read, garbage.
        assert!(judge("data/00000000000A-0000000000000003-0000000000000002"));
        assert!(judge("data/a-3-2"));
        assert!(judge("map/0-0000000000000003-0000000000000002"));
        // This run's objects (uploads in flight) and a later owner's: never.
        assert!(!judge(&data(2, v(9, 5))));
        assert!(!judge(&data(2, v(9, 6))));
        assert!(!judge(&page(1, v(9, 5))));
        assert!(!judge(&page(0, v(9, 7))));
        // An object this run rewrote since the open: none of its earlier versions.
        assert!(!judge(&data(7, v(3, 2))));
        assert!(!judge(&data(7, v(1, 1))));
        // Not a volume's object: the root, another volume's keys, anything else.
        for name in [
            layout::ROOT_NAME,
            "data/",
            "data/junk",
            "data/000000000001-0000000000000002",
            "data/000000000001-0000000000000002-0000000000000001-0",
            "data/x/data/000000000001-0000000000000002-0000000000000001",
            "map/sub/larch-volume",
            "other/000000000001-0000000000000002-0000000000000001",
        ] {
            assert!(!judge(name), "{name}");
        }
    }

    /// A store that notes how many garbage keys (those of commit [`GARBAGE_SEQ`]) its
    /// listings handed out that have not yet been handed back for deletion: what the
    /// collection holds.
    #[derive(Debug, Default)]
    struct Held {
        listed: AtomicU64,
        deleted: AtomicU64,
        most_held: AtomicU64,
        most_per_request: AtomicU64,
    }

    const GARBAGE_SEQ: u64 = 0x7777;

    fn is_planted(location: &ObjPath) -> bool {
        let name = location.as_ref().strip_prefix("vols/a/").unwrap_or("");
        layout::parse_name(name).is_some_and(|(_, _, v)| v.seq == GARBAGE_SEQ)
    }

    #[derive(Debug)]
    struct Watched {
        inner: Arc<dyn ObjectStore>,
        held: Arc<Held>,
    }

    impl std::fmt::Display for Watched {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Watched({})", self.inner)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Watched {
        async fn put_opts(
            &self,
            location: &ObjPath,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &ObjPath,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }

        async fn get_opts(
            &self,
            location: &ObjPath,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: futures_util::stream::BoxStream<'static, object_store::Result<ObjPath>>,
        ) -> futures_util::stream::BoxStream<'static, object_store::Result<ObjPath>> {
            let held = Arc::clone(&self.held);
            let this_request = Arc::new(AtomicU64::new(0));
            let counted = locations.inspect(move |location| {
                if location.as_ref().is_ok_and(is_planted) {
                    held.deleted.fetch_add(1, Ordering::SeqCst);
                }
                let n = this_request.fetch_add(1, Ordering::SeqCst) + 1;
                held.most_per_request.fetch_max(n, Ordering::SeqCst);
            });
            self.inner.delete_stream(counted.boxed())
        }

        fn list(
            &self,
            prefix: Option<&ObjPath>,
        ) -> futures_util::stream::BoxStream<'static, object_store::Result<ObjectMeta>> {
            let held = Arc::clone(&self.held);
            self.inner
                .list(prefix)
                .inspect(move |meta| {
                    if meta.as_ref().is_ok_and(|m| is_planted(&m.location)) {
                        let listed = held.listed.fetch_add(1, Ordering::SeqCst) + 1;
                        let now = listed - held.deleted.load(Ordering::SeqCst);
                        held.most_held.fetch_max(now, Ordering::SeqCst);
                    }
                })
                .boxed()
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&ObjPath>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &ObjPath,
            to: &ObjPath,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// Waits for the volume's background deletions (the collection among them).
    fn wait_for_cleanups(vol: &ObjectVolume) {
        let running = std::mem::take(&mut *vol.cleanups.lock().unwrap());
        vol.run(async move {
            for task in running {
                task.await.unwrap();
            }
        });
    }

    /// Garbage spread among many live objects is deleted as the listing goes, a batch at
    /// a time: the collection never holds more than a batch of it, and every live object
    /// stays. (Before, every piece of garbage was gathered before the first deletion.)
    #[test]
    fn the_collection_deletes_garbage_among_live_objects_a_batch_at_a_time() {
        const OBJECTS: u64 = 600;
        const BATCH: usize = 7;
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let held = Arc::new(Held::default());
        let store: Arc<dyn ObjectStore> = Arc::new(Watched {
            inner: Arc::clone(&memory),
            held: Arc::clone(&held),
        });
        // One block per object: the first run's commit names 600 data objects.
        let root = Root::new(0x1234, OBJECTS * BS as u64, BS as u32, 1);
        create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
        let first = open(&store);
        // No object of zeros: it would be cleared, not written.
        let bytes: Vec<u8> = (0..OBJECTS as usize * BS)
            .map(|i| (i / BS % 251) as u8 + 1)
            .collect();
        first.write_at(&bytes, 0).unwrap();
        first.flush().unwrap();
        let old = first.token();
        first.release().unwrap();
        drop(first);
        let vol = open(&store);
        wait_for_cleanups(&vol);
        assert_eq!(vol.stats.garbage_deleted.load(Ordering::Relaxed), 0);
        let live = rt_names(&memory);
        assert_eq!(
            live.len() as u64,
            OBJECTS + 2,
            "the objects, a page, the root"
        );
        // Garbage of the earlier run next to every third object, and a map page.
        let body = || PutPayload::from(vec![0u8; 16]);
        let mut planted = vec![layout::page_name(
            0,
            Version {
                seq: GARBAGE_SEQ,
                token: old,
            },
        )];
        planted.extend((0..OBJECTS).step_by(3).map(|object| {
            layout::data_name(
                object,
                Version {
                    seq: GARBAGE_SEQ,
                    token: old,
                },
            )
        }));
        for name in &planted {
            let (s, path) = (Arc::clone(&memory), vol.path(name));
            let put = body();
            vol.run(async move { s.put(&path, put).await.unwrap() });
        }
        vol.collect_garbage(BATCH);
        wait_for_cleanups(&vol);
        let planted = planted.len() as u64;
        assert_eq!(held.listed.load(Ordering::SeqCst), planted);
        assert_eq!(held.deleted.load(Ordering::SeqCst), planted);
        assert_eq!(vol.stats.garbage_deleted.load(Ordering::Relaxed), planted);
        let most = held.most_held.load(Ordering::SeqCst);
        assert!(most <= BATCH as u64, "{most} garbage keys held at once");
        let per_request = held.most_per_request.load(Ordering::SeqCst);
        assert!(
            per_request <= BATCH as u64,
            "{per_request} keys in one request"
        );
        assert_eq!(
            rt_names(&memory),
            live,
            "the live objects, and only they, are left"
        );
        for object in [0, 1, 299, OBJECTS - 1] {
            assert_eq!(block_byte(&vol, object), Some((object % 251) as u8 + 1));
        }
        vol.release().unwrap();
    }

    /// Every key on `store`, in order.
    fn rt_names(store: &Arc<dyn ObjectStore>) -> Vec<String> {
        let runtime = new_runtime().unwrap();
        let store = Arc::clone(store);
        let names = run_on(runtime.handle(), async move {
            let mut names: Vec<String> = store
                .list(None)
                .map(|meta| meta.unwrap().location.to_string())
                .collect()
                .await;
            names.sort();
            names
        });
        runtime.shutdown_background();
        names
    }
}
