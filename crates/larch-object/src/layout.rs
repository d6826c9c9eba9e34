//! What an object-backed volume looks like on the store (see `docs/object-store.md`).
//!
//! Under the volume's prefix:
//! - `larch-volume`: the **root**, the one object that is ever overwritten. It names the
//!   volume's geometry, the last commit (its sequence number and the fencing token of the
//!   node that made it), the map pages of that commit, and the lease. Writing it is the
//!   commit point, always conditional on the version last read (`If-Match`).
//! - `map/PPPPPPPP-SSSSSSSSSSSSSSSS-TTTTTTTTTTTTTTTT`: a **map page**: for
//!   [`PAGE_OBJECTS`] consecutive data objects, the commit that wrote each (0: never
//!   written, reads as zeros). Written once, never changed.
//! - `data/OOOOOOOOOOOO-SSSSSSSSSSSSSSSS-TTTTTTTTTTTTTTTT`: a **data object**: the
//!   records of `object_blocks` consecutive blocks, each the block's bytes and a
//!   [`TRAILER_BYTES`] trailer (volume, block, commit, checksum). Written once, never
//!   changed. A block is one ranged GET, verified on its own.
//!
//! Names carry the commit and the writer's fencing token, so no two writers ever write one
//! name, and an upload that was never committed is just an object no root names.
//!
//! A volume of the **segments** format ([`Format::Segments`], the default for new volumes)
//! is copy-on-write instead, as ZFS writes a TXG: a commit packs its changed blocks, in
//! block order, into new immutable **segments** and points the map at them; nothing is
//! read back to be rewritten.
//! - `seg/SSSSSSSSSSSSSSSS-TTTTTTTTTTTTTTTT-PPPPPPPP`: part `P` of the segments commit `S`
//!   of token `T` wrote: up to `object_blocks` records, as in a data object, of any blocks.
//! - `bmap/PPPPPPPP-SSSSSSSSSSSSSSSS-TTTTTTTTTTTTTTTT`: a **block-map page**: for
//!   [`PAGE_BLOCKS`] consecutive blocks, a [`BlockPtr`] each (segment, record, checksum;
//!   none: the block is a hole and reads as zeros).
//! - `bidx/LL-PPPPPPPP-SSSSSSSSSSSSSSSS-TTTTTTTTTTTTTTTT`: an **index page** of level `L`:
//!   the refs (number, commit, checksum) of the pages of level `L - 1` (level 0: the
//!   block-map pages) numbered `P * INDEX_FANOUT ..`, those that exist. With index pages
//!   the map is a tree, as ZFS's indirect blocks make one: the root names the pages of
//!   its top level `levels` (at most [`ROOT_PAGES_MAX`] for the volume's size), so its
//!   size no longer grows with the volume's, and a checkpoint rewrites only the index
//!   pages above the block-map pages it writes. A root of `levels` 0 names the block-map
//!   pages itself (every root before index pages existed; a writer moves such a volume
//!   to the tree at its next checkpoint).
//! - `blog/SSSSSSSSSSSSSSSS-TTTTTTTTTTTTTTTT`: a **map log**: the pointers commit `S`
//!   changed, block by block. A commit writes its log instead of the pages it changes;
//!   every [`MAX_MAP_LOGS`]th or so (a checkpoint) writes the pages the logs since the
//!   last checkpoint changed instead, and the root then names no log. The map is the
//!   tree's block-map pages with the root's logs applied in order.
//!
//! The root and the map pages are **envelopes**: a 32-byte header (magic, version, kind,
//! body length, xxh3-64 of the body) and the body (JSON for the root, so a person can
//! read it; binary entries for a map page).

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// Name of the root object under the prefix.
pub const ROOT_NAME: &str = "larch-volume";

/// Data objects one map page covers.
pub const PAGE_OBJECTS: u64 = 4096;

/// Blocks one block-map page covers (a segments volume): 1,024, as one of ZFS's 128 KiB
/// indirect blocks holds 1,024 block pointers.
pub const PAGE_BLOCKS: u64 = 1024;

/// Pages of the level below one index page names at most.
pub const INDEX_FANOUT: u64 = 1024;

/// Pages a segments volume's root names at most once it is written by a writer that
/// knows index pages: its top level is the lowest with no more pages than this.
pub const ROOT_PAGES_MAX: u64 = 1024;

/// Levels of index pages a root may have (three cover the largest volume of the smallest
/// blocks: 2^41 blocks of 512 bytes are 2^31 block-map pages, 2 pages at level 3).
pub const MAX_TREE_LEVELS: u8 = 4;

/// Bytes of one page ref in an index page: number, commit, token, checksum.
pub const INDEX_REF_BYTES: usize = 32;

/// Bytes of the largest index page object.
pub const INDEX_PAGE_BYTES_MAX: u64 =
    ENVELOPE_HEADER as u64 + INDEX_FANOUT * INDEX_REF_BYTES as u64;

/// Bytes of one [`BlockPtr`] in a block-map page.
pub const BLOCK_PTR_BYTES: usize = 40;

/// Bytes of a block-map page object (header and [`PAGE_BLOCKS`] pointers).
pub const BLOCK_PAGE_BYTES: u64 = ENVELOPE_HEADER as u64 + PAGE_BLOCKS * BLOCK_PTR_BYTES as u64;

/// Bytes of one map-log entry: the block and its [`BlockPtr`].
pub const LOG_ENTRY_BYTES: usize = 8 + BLOCK_PTR_BYTES;

/// The most map logs a root may name (a reader refuses more): a writer checkpoints well
/// before ([`crate::Options::map_log_commits`]).
pub const MAX_MAP_LOGS: usize = 1024;

/// Largest map log accepted: 64 MiB of entries, a commit of 1.4 M blocks (an 11 GiB TXG
/// of 8 KiB blocks). A commit that changes more checkpoints instead.
pub const MAX_LOG_BYTES: u64 = ENVELOPE_HEADER as u64 + (64 << 20);

/// Bytes after each block in a data object.
pub const TRAILER_BYTES: usize = 40;

/// Largest volume accepted (1 PiB).
pub const MAX_VOLUME_BYTES: u64 = 1 << 50;

/// Commit sequence numbers and fencing tokens a root may carry are below this (2^62): each
/// is one more than the last, so an honest store never comes near it, and one more than
/// any number read can never wrap.
pub const COUNTER_LIMIT: u64 = 1 << 62;

/// Largest root or map page body accepted (a root names at most a few thousand pages).
const MAX_ENVELOPE_BODY: u64 = 64 << 20;

/// Largest root object accepted, header included: a reader refuses a larger one before
/// reading its body.
pub const MAX_ROOT_BYTES: u64 = ENVELOPE_HEADER as u64 + MAX_ENVELOPE_BODY;

/// Bytes of a map page object (header and [`PAGE_OBJECTS`] 16-byte entries): a reader
/// refuses an object of another size before reading its body.
pub const PAGE_BYTES: u64 = ENVELOPE_HEADER as u64 + PAGE_OBJECTS * 16;

/// Longest lease owner's name [`Root::largest_bytes`] allows for (a node's name is its
/// host name, at most 64 bytes on Linux, a `/` and 16 hex digits).
pub const OWNER_BYTES_MAX: usize = 1024;

/// Largest data object accepted, counting its blocks without their trailers (what
/// `--object-size` sets): one PUT each, and a commit holds up to 32 in memory (those in
/// flight and, for merges, their old bytes), at most twice this.
pub const MAX_OBJECT_BYTES: u64 = 64 << 20;

const ENVELOPE_MAGIC: [u8; 8] = *b"LARCHOBJ";
const ENVELOPE_VERSION: u32 = 1;
const ENVELOPE_HEADER: usize = 32;

const RECORD_MAGIC: u32 = 0x4c42_4c4b; // "LBLK"
const RECORD_VERSION: u16 = 1;

/// What an envelope holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The root.
    Root = 1,
    /// A map page.
    MapPage = 2,
    /// What a node keeps locally about a volume between its runs (a file in its pool's
    /// state directory, never on the store: `LocalState`).
    LocalState = 3,
    /// A block-map page of a segments volume.
    BlockPage = 4,
    /// A map log of a segments volume.
    BlockLog = 5,
    /// An index page of a segments volume's tree of map pages.
    IndexPage = 6,
}

/// How a volume lays its blocks out on the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Fixed data objects of `object_blocks` consecutive blocks, each rewritten whole by
    /// a commit that changes any of its blocks (read first when only some change). The
    /// format of volumes made before segments existed (a root without a format is one).
    #[default]
    Objects,
    /// Copy-on-write segments and a map of block pointers (see the module comment).
    Segments,
}

impl Format {
    /// Its name, as `--layout` takes it and `larch status` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Objects => "objects",
            Format::Segments => "segments",
        }
    }
}

/// Why bytes read from the store are not what they claim to be.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// Too short, wrong magic, version or kind.
    #[error("not a larch {0} (bad header)")]
    Header(&'static str),
    /// The body's checksum does not match.
    #[error("{0}: checksum mismatch")]
    Checksum(&'static str),
    /// The body does not parse.
    #[error("{0} does not parse: {1}")]
    Parse(&'static str, #[source] BodyError),
    /// A block record is not the one expected.
    #[error("block {block}: {why}")]
    Record {
        /// The block.
        block: u64,
        /// What is wrong.
        #[source]
        why: RecordFault,
    },
}

/// Why the body of an envelope does not parse as its kind.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// It is not the JSON of its kind.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// It is a root that [`Root::decode`] refuses.
    #[error(transparent)]
    Root(#[from] RootError),
    /// A map page's body is not [`PAGE_OBJECTS`] entries long.
    #[error("{0} bytes")]
    PageLength(usize),
    /// A block pointer names a record outside its segment, or has bits no pointer has.
    #[error("a block pointer out of range")]
    BadPointer,
    /// An index page names a page outside its span, out of order, or of no commit.
    #[error("a page ref out of range or out of order")]
    BadRef,
}

/// What is wrong with a block's record ([`verify_record`], [`build_object`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordFault {
    /// The record is not a block and its trailer long.
    #[error("record of {found} bytes, expected {expected}")]
    Length {
        /// Its length.
        found: usize,
        /// A block and a trailer.
        expected: usize,
    },
    /// The trailer's magic or version is not a record's.
    #[error("not a block record")]
    NotARecord,
    /// The record's checksum does not match its bytes.
    #[error("checksum mismatch")]
    Checksum,
    /// The record is another volume's.
    #[error("belongs to volume {0:#x}")]
    OtherVolume(u64),
    /// The record is another block's.
    #[error("is block {0}")]
    OtherBlock(u64),
    /// The record was written by another commit than the map names.
    #[error("written by commit {written}, the map says {expected}")]
    OtherCommit {
        /// The commit the record names.
        written: u64,
        /// The commit the map names.
        expected: u64,
    },
    /// A block given to [`build_object`] is neither whole nor the volume's short last one.
    #[error(
        "{given} bytes given, the volume's blocks are {block_bytes} ({inside} inside the volume)"
    )]
    BlockLength {
        /// Bytes given.
        given: usize,
        /// The volume's block size.
        block_bytes: usize,
        /// Bytes of the block inside the volume.
        inside: u64,
    },
}

/// Why a root's geometry or numbers cannot be taken ([`Root::decode`], [`Root::check_new`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RootError {
    /// The block size is not a power of two from 512 bytes to 1 MiB.
    #[error("block size {0} is not allowed")]
    BlockSize(u32),
    /// No blocks per object, or objects larger than [`MAX_OBJECT_BYTES`].
    #[error("{object_blocks} blocks per object ({object_bytes} bytes, at most {MAX_OBJECT_BYTES})")]
    ObjectSize {
        /// Blocks per object.
        object_blocks: u32,
        /// Bytes per object.
        object_bytes: u64,
    },
    /// A size of 0 or above [`MAX_VOLUME_BYTES`].
    #[error("size {0} (at most {MAX_VOLUME_BYTES})")]
    VolumeSize(u64),
    /// A counter at or above [`COUNTER_LIMIT`].
    #[error("{what} {value} (must be below 2^62)")]
    Counter {
        /// Which counter.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// A page beyond what the size needs, or one with no version.
    #[error("a map page out of range")]
    PageOutOfRange,
    /// Pages not strictly ascending.
    #[error("map pages out of order")]
    PagesOutOfOrder,
    /// Map logs where none may be, too many, out of order, or of impossible sizes.
    #[error("map logs out of order, out of range or too many")]
    BadLogs,
    /// More levels of index pages than any volume needs, or any in an objects volume.
    #[error("{0} levels of index pages (at most {MAX_TREE_LEVELS}, in a segments volume only)")]
    Levels(u8),
    /// A new volume's root could grow past [`MAX_ROOT_BYTES`] ([`Root::check_new`]).
    #[error(
        "a volume of {size_bytes} bytes in objects of {object_bytes} bytes has {pages} map \
         pages, and its root would grow to {largest} bytes once all are written, more than \
         the {MAX_ROOT_BYTES} a reader accepts: {}",
        object_size_advice(*.smallest_object_blocks, *.block_bytes)
    )]
    RootTooLarge {
        /// The volume's size.
        size_bytes: u64,
        /// Bytes per object.
        object_bytes: u64,
        /// Map pages of the volume.
        pages: u64,
        /// Bytes of its largest root.
        largest: u64,
        /// The fewest blocks per object that fit, if any do ([`Root::smallest_object_blocks`]).
        smallest_object_blocks: Option<u32>,
        /// The volume's block size.
        block_bytes: u32,
    },
}

/// What to do about a root that could grow too large: the smallest object size that fits.
fn object_size_advice(smallest_object_blocks: Option<u32>, block_bytes: u32) -> String {
    match smallest_object_blocks {
        Some(blocks) => format!(
            "use objects of at least {} bytes ({blocks} blocks of {block_bytes})",
            u64::from(blocks) * u64::from(block_bytes)
        ),
        None => "no object size works for this size".into(),
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Root => "volume root",
        Kind::MapPage => "map page",
        Kind::LocalState => "local volume state",
        Kind::BlockPage => "block-map page",
        Kind::BlockLog => "map log",
        Kind::IndexPage => "index page",
    }
}

/// Wraps `body` in an envelope of `kind`.
pub fn seal(kind: Kind, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENVELOPE_HEADER + body.len());
    out.extend_from_slice(&ENVELOPE_MAGIC);
    out.extend_from_slice(&ENVELOPE_VERSION.to_le_bytes());
    out.extend_from_slice(&(kind as u32).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&xxh3_64(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The body of an envelope of `kind`, verified.
pub fn open(kind: Kind, bytes: &[u8]) -> Result<&[u8], LayoutError> {
    let name = kind_name(kind);
    if bytes.len() < ENVELOPE_HEADER || bytes[..8] != ENVELOPE_MAGIC {
        return Err(LayoutError::Header(name));
    }
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if word(8) != ENVELOPE_VERSION || word(12) != kind as u32 {
        return Err(LayoutError::Header(name));
    }
    let len = long(16);
    if len > MAX_ENVELOPE_BODY || len != (bytes.len() - ENVELOPE_HEADER) as u64 {
        return Err(LayoutError::Header(name));
    }
    let body = &bytes[ENVELOPE_HEADER..];
    if xxh3_64(body) != long(24) {
        return Err(LayoutError::Checksum(name));
    }
    Ok(body)
}

/// Which commit wrote an object (or a map page): its sequence number and the fencing token
/// of the node that wrote it. `seq == 0`: never written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// The commit's sequence number.
    pub seq: u64,
    /// The writer's fencing token.
    pub token: u64,
}

impl Version {
    /// Whether the object exists.
    pub fn exists(&self) -> bool {
        self.seq != 0
    }
}

/// A map page of the root: which page, which commit wrote it, and its body's checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRef {
    /// Page number (data objects `page * PAGE_OBJECTS ..`).
    pub page: u64,
    /// The commit that wrote it.
    pub version: Version,
    /// xxh3-64 of its body.
    pub checksum: u64,
}

/// A map log the root names: the commit that wrote it, its body's checksum and its
/// entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRef {
    /// The commit that wrote it.
    pub version: Version,
    /// xxh3-64 of its body.
    pub checksum: u64,
    /// Entries it holds.
    pub entries: u64,
}

/// Who may write the volume, until when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The holder's node name ("" when released).
    pub owner: String,
    /// The holder's fencing token: larger than every token before it.
    pub token: u64,
    /// Wall-clock time (ms since the Unix epoch) the lease ends unless renewed.
    pub expires_ms: u64,
    /// How long a renewal extends it.
    pub duration_ms: u64,
}

/// The root object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// Random identity of the volume on the store (in every block trailer).
    pub volume: u64,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Bytes per block.
    pub block_bytes: u32,
    /// Blocks per data object; in a segments volume, the most records in one segment.
    pub object_blocks: u32,
    /// How the blocks are laid out (a root written before formats existed has none: it
    /// is [`Format::Objects`]).
    #[serde(default)]
    pub format: Format,
    /// The last commit (0: none yet).
    pub commit_seq: u64,
    /// The fencing token of the node that made it.
    pub committed_by: u64,
    /// When (ms since the Unix epoch).
    pub committed_ms: u64,
    /// The map pages of the last commit at level `levels` of its tree (pages never
    /// written are absent): the map pages themselves at level 0, index pages above.
    pub pages: Vec<PageRef>,
    /// Levels of index pages above a segments volume's block-map pages (0: none, the
    /// root names the block-map pages).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub levels: u8,
    /// A segments volume's map logs since its last checkpoint, oldest first: applied to
    /// the pages in this order, they make the map.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<LogRef>,
    /// The lease.
    pub lease: Lease,
}

impl Root {
    /// A new, empty volume.
    pub fn new(volume: u64, size_bytes: u64, block_bytes: u32, object_blocks: u32) -> Root {
        Root {
            volume,
            size_bytes,
            block_bytes,
            object_blocks,
            format: Format::Objects,
            commit_seq: 0,
            committed_by: 0,
            committed_ms: 0,
            pages: Vec::new(),
            levels: 0,
            logs: Vec::new(),
            lease: Lease::default(),
        }
    }

    /// The root's bytes on the store.
    pub fn encode(&self) -> Vec<u8> {
        let body = serde_json::to_vec_pretty(self).expect("a root serializes");
        seal(Kind::Root, &body)
    }

    /// Parses and checks a root.
    pub fn decode(bytes: &[u8]) -> Result<Root, LayoutError> {
        let body = open(Kind::Root, bytes)?;
        let root: Root = serde_json::from_slice(body)
            .map_err(|e| LayoutError::Parse("volume root", e.into()))?;
        root.check()
            .map_err(|why| LayoutError::Parse("volume root", why.into()))?;
        Ok(root)
    }

    fn check(&self) -> Result<(), RootError> {
        if !(512..=(1 << 20)).contains(&self.block_bytes) || !self.block_bytes.is_power_of_two() {
            return Err(RootError::BlockSize(self.block_bytes));
        }
        let object_bytes = u64::from(self.object_blocks) * u64::from(self.block_bytes);
        if self.object_blocks == 0 || object_bytes > MAX_OBJECT_BYTES {
            return Err(RootError::ObjectSize {
                object_blocks: self.object_blocks,
                object_bytes,
            });
        }
        if self.size_bytes == 0 || self.size_bytes > MAX_VOLUME_BYTES {
            return Err(RootError::VolumeSize(self.size_bytes));
        }
        // The next commit and the next owner's token are one more than these: a store
        // that names a number near u64::MAX must not make that addition wrap.
        for (what, n) in [
            ("commit sequence number", self.commit_seq),
            ("committing token", self.committed_by),
            ("lease token", self.lease.token),
        ] {
            if n >= COUNTER_LIMIT {
                return Err(RootError::Counter { what, value: n });
            }
        }
        // Index pages only in a segments volume, and no more levels than any size needs.
        if self.levels > MAX_TREE_LEVELS || (self.levels > 0 && self.format != Format::Segments) {
            return Err(RootError::Levels(self.levels));
        }
        // Pages in range and strictly ascending: a root names at most the pages the
        // volume's size needs at its level, so the map it loads is bounded by the size too.
        let pages = self.pages_at(self.levels);
        if self
            .pages
            .iter()
            .any(|p| p.page >= pages || !p.version.exists())
        {
            return Err(RootError::PageOutOfRange);
        }
        if self.pages.windows(2).any(|w| w[0].page >= w[1].page) {
            return Err(RootError::PagesOutOfOrder);
        }
        // Logs only in a segments volume, at most MAX_MAP_LOGS, each of a commit no later
        // than the root's and after the one before, each within MAX_LOG_BYTES.
        let logs_fit = self.logs.is_empty()
            || (self.format == Format::Segments
                && self.logs.len() <= MAX_MAP_LOGS
                && self.logs.iter().all(|l| {
                    l.version.exists()
                        && l.version.seq <= self.commit_seq
                        && l.entries > 0
                        && l.entries * LOG_ENTRY_BYTES as u64 + ENVELOPE_HEADER as u64
                            <= MAX_LOG_BYTES
                })
                && self
                    .logs
                    .windows(2)
                    .all(|w| w[0].version.seq < w[1].version.seq));
        if !logs_fit {
            return Err(RootError::BadLogs);
        }
        Ok(())
    }

    /// Why a new volume of this geometry cannot be created, if it cannot: what
    /// [`Root::decode`] refuses, and a geometry whose root, once every map page is
    /// written, would be larger than a reader accepts ([`MAX_ROOT_BYTES`]). Such a volume
    /// would work until most of it was written and then never open again. Not part of
    /// `decode`'s checks: a volume created before this one existed stays readable.
    pub fn check_new(&self) -> Result<(), RootError> {
        self.check()?;
        let largest = self.largest_bytes();
        if largest <= MAX_ROOT_BYTES {
            return Ok(());
        }
        Err(RootError::RootTooLarge {
            size_bytes: self.size_bytes,
            object_bytes: u64::from(self.object_blocks) * u64::from(self.block_bytes),
            pages: self.pages_max(),
            largest,
            smallest_object_blocks: self.smallest_object_blocks(),
            block_bytes: self.block_bytes,
        })
    }

    /// Map pages of the volume (data objects' map pages, or block-map pages).
    fn pages_max(&self) -> u64 {
        match self.format {
            Format::Objects => self.objects().div_ceil(PAGE_OBJECTS),
            Format::Segments => self.blocks().div_ceil(PAGE_BLOCKS),
        }
    }

    /// Pages of the volume's tree at `level` (0: its map pages; above, index pages of
    /// [`INDEX_FANOUT`] refs each): a root of that many levels names at most this many.
    pub fn pages_at(&self, level: u8) -> u64 {
        (0..level).fold(self.pages_max(), |pages, _| pages.div_ceil(INDEX_FANOUT))
    }

    /// The levels of index pages a writer gives this volume's tree: the fewest with at
    /// most [`ROOT_PAGES_MAX`] pages at the top (none for the objects format).
    pub fn tree_levels(&self) -> u8 {
        if self.format != Format::Segments {
            return 0;
        }
        (0..MAX_TREE_LEVELS)
            .find(|&level| self.pages_at(level) <= ROOT_PAGES_MAX)
            .unwrap_or(MAX_TREE_LEVELS)
    }

    /// Bytes of the largest root of this geometry as a writer writes it: every page of
    /// its top level ([`Root::tree_levels`]) named, every number at its widest, and a
    /// lease owner's name of [`OWNER_BYTES_MAX`] bytes. Every entry of the page list
    /// encodes to the same length here, so the size is that of a root with one page plus
    /// the others' share.
    pub fn largest_bytes(&self) -> u64 {
        let levels = self.tree_levels();
        let pages = self.pages_at(levels).max(1);
        let widest = |count: usize| {
            let mut root = self.clone();
            let counter = COUNTER_LIMIT - 1;
            root.levels = levels;
            root.commit_seq = counter;
            root.committed_by = counter;
            root.committed_ms = u64::MAX;
            root.lease = Lease {
                owner: "n".repeat(OWNER_BYTES_MAX),
                token: counter,
                expires_ms: u64::MAX,
                duration_ms: u64::MAX,
            };
            let page = PageRef {
                page: pages - 1,
                version: Version {
                    seq: counter,
                    token: counter,
                },
                checksum: u64::MAX,
            };
            root.pages = vec![page; count];
            if root.format == Format::Segments {
                let log = LogRef {
                    version: page.version,
                    checksum: u64::MAX,
                    entries: (MAX_LOG_BYTES - ENVELOPE_HEADER as u64) / LOG_ENTRY_BYTES as u64,
                };
                root.logs = vec![log; MAX_MAP_LOGS];
            }
            root.encode().len() as u64
        };
        let one = widest(1);
        let per_page = widest(2) - one;
        one + (pages - 1) * per_page
    }

    /// The fewest blocks per object with which a volume of this size and block size has
    /// a root a reader accepts (`None`: none up to [`MAX_OBJECT_BYTES`]).
    pub fn smallest_object_blocks(&self) -> Option<u32> {
        let most = u32::try_from(MAX_OBJECT_BYTES / u64::from(self.block_bytes)).ok()?;
        let fits = |blocks: u32| {
            let mut root = self.clone();
            root.object_blocks = blocks;
            root.largest_bytes() <= MAX_ROOT_BYTES
        };
        if !fits(most) {
            return None;
        }
        // The root shrinks as objects grow: the first size that fits, by bisection.
        let (mut low, mut high) = (1, most);
        while low < high {
            let mid = low + (high - low) / 2;
            if fits(mid) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        Some(low)
    }

    /// Bytes of one block record (block and trailer).
    pub fn record_bytes(&self) -> u64 {
        u64::from(self.block_bytes) + TRAILER_BYTES as u64
    }

    /// Blocks of the volume.
    pub fn blocks(&self) -> u64 {
        self.size_bytes.div_ceil(u64::from(self.block_bytes))
    }

    /// Data objects of the volume.
    pub fn objects(&self) -> u64 {
        self.blocks().div_ceil(u64::from(self.object_blocks))
    }

    /// Blocks of data object `object` (the last may hold fewer).
    pub fn blocks_of(&self, object: u64) -> std::ops::Range<u64> {
        let first = object * u64::from(self.object_blocks);
        first..(first + u64::from(self.object_blocks)).min(self.blocks())
    }

    /// Bytes of data object `object` on the store (its records, trailers included).
    pub fn object_bytes(&self, object: u64) -> u64 {
        let blocks = self.blocks_of(object);
        (blocks.end - blocks.start) * self.record_bytes()
    }

    /// Bytes of block `block` that lie inside the volume: the block size, less for a
    /// short last block (0 past the end).
    pub fn block_len(&self, block: u64) -> u64 {
        let bs = u64::from(self.block_bytes);
        self.size_bytes
            .saturating_sub(block.saturating_mul(bs))
            .min(bs)
    }

    /// Whether `len` bytes are what a writer may give for block `block`: a whole block, or
    /// for a short last block just its bytes inside the volume (the rest is zeros).
    pub fn block_len_fits(&self, block: u64, len: usize) -> bool {
        let inside = self.block_len(block);
        inside > 0 && (len as u64 == u64::from(self.block_bytes) || len as u64 == inside)
    }
}

/// The name of data object `object` as written by `version`.
pub fn data_name(object: u64, version: Version) -> String {
    format!(
        "data/{object:012x}-{:016x}-{:016x}",
        version.seq, version.token
    )
}

/// The name of map page `page` as written by `version`.
pub fn page_name(page: u64, version: Version) -> String {
    format!("map/{page:08x}-{:016x}-{:016x}", version.seq, version.token)
}

/// Parses a data object's or map page's name (after the prefix) into its number and
/// version.
pub fn parse_name(name: &str) -> Option<(&'static str, u64, Version)> {
    let (kind, rest) = if let Some(rest) = name.strip_prefix("data/") {
        ("data", rest)
    } else if let Some(rest) = name.strip_prefix("bmap/") {
        ("bmap", rest)
    } else {
        ("map", name.strip_prefix("map/")?)
    };
    let mut parts = rest.split('-');
    let number = u64::from_str_radix(parts.next()?, 16).ok()?;
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    let token = u64::from_str_radix(parts.next()?, 16).ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((kind, number, Version { seq, token }))
}

/// Where a block of a segments volume lives: record `slot` of segment part `part` that
/// commit `seq` of token `token` wrote (a segment of `records` records), and the checksum
/// its record's trailer carries. `seq == 0`: nowhere, the block is a hole (zeros).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockPtr {
    /// The commit that wrote the block's record (its birth).
    pub seq: u64,
    /// The token of the node that made that commit.
    pub token: u64,
    /// The record's checksum (as its trailer carries it).
    pub checksum: u64,
    /// Which segment of the commit.
    pub part: u32,
    /// Which record of the segment.
    pub slot: u32,
    /// Records in that segment.
    pub records: u32,
}

impl BlockPtr {
    /// Whether the block is stored (not a hole).
    pub fn exists(&self) -> bool {
        self.seq != 0
    }

    /// The segment it points into.
    pub fn segment(&self) -> SegmentId {
        SegmentId {
            seq: self.seq,
            token: self.token,
            part: self.part,
        }
    }
}

/// One segment: part `part` of the segments commit `seq` of token `token` wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId {
    /// The commit.
    pub seq: u64,
    /// Its node's token.
    pub token: u64,
    /// Which of the commit's segments.
    pub part: u32,
}

/// The name of segment `id`.
pub fn segment_name(id: SegmentId) -> String {
    format!("seg/{:016x}-{:016x}-{:08x}", id.seq, id.token, id.part)
}

/// The name of block-map page `page` as written by `version`.
pub fn block_page_name(page: u64, version: Version) -> String {
    format!(
        "bmap/{page:08x}-{:016x}-{:016x}",
        version.seq, version.token
    )
}

/// The name of index page `page` of level `level` as written by `version`.
pub fn index_page_name(level: u8, page: u64, version: Version) -> String {
    format!(
        "bidx/{level:02x}-{page:08x}-{:016x}-{:016x}",
        version.seq, version.token
    )
}

/// Parses an index page's name (after the prefix), only in the form the volume writes,
/// into its level, number and version.
pub fn parse_index_name(name: &str) -> Option<(u8, u64, Version)> {
    let mut parts = name.strip_prefix("bidx/")?.split('-');
    let level = u8::from_str_radix(parts.next()?, 16).ok()?;
    let page = u64::from_str_radix(parts.next()?, 16).ok()?;
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    let token = u64::from_str_radix(parts.next()?, 16).ok()?;
    if parts.next().is_some() {
        return None;
    }
    let version = Version { seq, token };
    (index_page_name(level, page, version) == name).then_some((level, page, version))
}

/// Encodes an index page: the refs of the pages below it that exist, ascending.
pub fn encode_index_page(entries: &[PageRef]) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * INDEX_REF_BYTES);
    for r in entries {
        body.extend_from_slice(&r.page.to_le_bytes());
        body.extend_from_slice(&r.version.seq.to_le_bytes());
        body.extend_from_slice(&r.version.token.to_le_bytes());
        body.extend_from_slice(&r.checksum.to_le_bytes());
    }
    seal(Kind::IndexPage, &body)
}

/// Decodes an index page whose body must have checksum `checksum` and whose refs must
/// name pages in `span` (the pages of the level below that it covers), strictly
/// ascending, each of a commit (a page never written is absent, not named), one at least
/// and at most [`INDEX_FANOUT`].
pub fn decode_index_page(
    bytes: &[u8],
    checksum: u64,
    span: std::ops::Range<u64>,
) -> Result<Vec<PageRef>, LayoutError> {
    let body = open(Kind::IndexPage, bytes)?;
    if xxh3_64(body) != checksum {
        return Err(LayoutError::Checksum(
            "index page (not the one its parent names)",
        ));
    }
    let count = body.len() / INDEX_REF_BYTES;
    if body.len() % INDEX_REF_BYTES != 0 || count == 0 || count as u64 > INDEX_FANOUT {
        return Err(LayoutError::Parse(
            "index page",
            BodyError::PageLength(body.len()),
        ));
    }
    let mut out: Vec<PageRef> = Vec::with_capacity(count);
    for c in body.chunks_exact(INDEX_REF_BYTES) {
        let long = |at: usize| u64::from_le_bytes(c[at..at + 8].try_into().expect("8 bytes"));
        let r = PageRef {
            page: long(0),
            version: Version {
                seq: long(8),
                token: long(16),
            },
            checksum: long(24),
        };
        let fits = span.contains(&r.page)
            && r.version.exists()
            && r.version.seq < COUNTER_LIMIT
            && r.version.token < COUNTER_LIMIT
            && out.last().is_none_or(|last| last.page < r.page);
        if !fits {
            return Err(LayoutError::Parse("index page", BodyError::BadRef));
        }
        out.push(r);
    }
    Ok(out)
}

/// For serde: a field left out when zero.
fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// The name of the map log commit `version` wrote.
pub fn block_log_name(version: Version) -> String {
    format!("blog/{:016x}-{:016x}", version.seq, version.token)
}

/// Parses a map log's name (after the prefix), only in the form the volume writes.
pub fn parse_log_name(name: &str) -> Option<Version> {
    let mut parts = name.strip_prefix("blog/")?.split('-');
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    let token = u64::from_str_radix(parts.next()?, 16).ok()?;
    if parts.next().is_some() {
        return None;
    }
    let version = Version { seq, token };
    (block_log_name(version) == name).then_some(version)
}

/// Encodes a map log: each changed block with its new pointer, in block order.
pub fn encode_block_log(entries: &[(u64, BlockPtr)]) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * LOG_ENTRY_BYTES);
    for (block, p) in entries {
        body.extend_from_slice(&block.to_le_bytes());
        put_ptr(&mut body, p);
    }
    seal(Kind::BlockLog, &body)
}

/// Decodes a map log whose body must have checksum `checksum` and `entries` entries, of
/// blocks below `blocks`, each block after the one before.
pub fn decode_block_log(
    bytes: &[u8],
    log: &LogRef,
    blocks: u64,
) -> Result<Vec<(u64, BlockPtr)>, LayoutError> {
    let body = open(Kind::BlockLog, bytes)?;
    if xxh3_64(body) != log.checksum {
        return Err(LayoutError::Checksum(
            "map log (not the one the root names)",
        ));
    }
    if body.len() as u64 != log.entries * LOG_ENTRY_BYTES as u64 {
        return Err(LayoutError::Parse(
            "map log",
            BodyError::PageLength(body.len()),
        ));
    }
    let mut out = Vec::with_capacity(log.entries as usize);
    let mut last: Option<u64> = None;
    for c in body.chunks_exact(LOG_ENTRY_BYTES) {
        let block = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
        let p = get_ptr(&c[8..]).ok_or(LayoutError::Parse("map log", BodyError::BadPointer))?;
        if block >= blocks || last.is_some_and(|l| l >= block) {
            return Err(LayoutError::Parse("map log", BodyError::BadPointer));
        }
        last = Some(block);
        out.push((block, p));
    }
    Ok(out)
}

/// Appends a pointer's 40 bytes.
fn put_ptr(body: &mut Vec<u8>, p: &BlockPtr) {
    put_ptr_into(body, p);
}

/// Appends a pointer's 40 bytes to `out` (as a block-map page holds it).
pub fn put_ptr_into(out: &mut impl bytes::BufMut, p: &BlockPtr) {
    out.put_u64_le(p.seq);
    out.put_u64_le(p.token);
    out.put_u64_le(p.checksum);
    out.put_u32_le(p.part);
    out.put_u32_le(p.slot);
    out.put_u32_le(p.records);
    out.put_u32_le(0);
}

/// The pointer in 40 bytes as [`put_ptr_into`] wrote them, unchecked: for bytes checked
/// when they were read (a page in a cache).
pub fn read_ptr(c: &[u8]) -> BlockPtr {
    let long = |at: usize| u64::from_le_bytes(c[at..at + 8].try_into().expect("8 bytes"));
    let word = |at: usize| u32::from_le_bytes(c[at..at + 4].try_into().expect("4 bytes"));
    BlockPtr {
        seq: long(0),
        token: long(8),
        checksum: long(16),
        part: word(24),
        slot: word(28),
        records: word(32),
    }
}

/// A pointer from its 40 bytes; `None` when it names a record outside its segment, is a
/// hole with bits set, or has bits no pointer has.
fn get_ptr(c: &[u8]) -> Option<BlockPtr> {
    let word = |at: usize| u32::from_le_bytes(c[at..at + 4].try_into().expect("4 bytes"));
    let p = read_ptr(c);
    let valid = if p.exists() {
        p.seq < COUNTER_LIMIT && p.token < COUNTER_LIMIT && p.slot < p.records
    } else {
        p == BlockPtr::default()
    };
    (valid && word(36) == 0).then_some(p)
}

/// Parses a segment's name (after the prefix).
pub fn parse_segment_name(name: &str) -> Option<SegmentId> {
    let mut parts = name.strip_prefix("seg/")?.split('-');
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    let token = u64::from_str_radix(parts.next()?, 16).ok()?;
    let part = u32::from_str_radix(parts.next()?, 16).ok()?;
    if parts.next().is_some() {
        return None;
    }
    let id = SegmentId { seq, token, part };
    (segment_name(id) == name).then_some(id)
}

/// Encodes a block-map page's pointers ([`PAGE_BLOCKS`] of them).
pub fn encode_block_page(entries: &[BlockPtr]) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * BLOCK_PTR_BYTES);
    for p in entries {
        put_ptr(&mut body, p);
    }
    seal(Kind::BlockPage, &body)
}

/// Decodes a block-map page whose body must have checksum `checksum`. A pointer that
/// names a record outside its segment, or a segment of no records, is refused: reads
/// would otherwise ask the store for ranges no segment has.
pub fn decode_block_page(bytes: &[u8], checksum: u64) -> Result<Vec<BlockPtr>, LayoutError> {
    let body = open(Kind::BlockPage, bytes)?;
    if xxh3_64(body) != checksum {
        return Err(LayoutError::Checksum(
            "block-map page (not the one the root names)",
        ));
    }
    if body.len() as u64 != PAGE_BLOCKS * BLOCK_PTR_BYTES as u64 {
        return Err(LayoutError::Parse(
            "block-map page",
            BodyError::PageLength(body.len()),
        ));
    }
    body.chunks_exact(BLOCK_PTR_BYTES)
        .map(|c| get_ptr(c).ok_or(LayoutError::Parse("block-map page", BodyError::BadPointer)))
        .collect()
}

/// The block number a record's trailer names (unverified: [`verify_record`] checks it).
pub fn record_block(record: &[u8], block_bytes: usize) -> Option<u64> {
    let at = block_bytes + 16;
    Some(u64::from_le_bytes(record.get(at..at + 8)?.try_into().ok()?))
}

/// The checksum a record's trailer carries (its last 8 bytes).
pub fn record_checksum_of(record: &[u8]) -> u64 {
    let at = record.len() - 8;
    u64::from_le_bytes(record[at..].try_into().expect("8 bytes"))
}

/// Encodes a map page's entries.
pub fn encode_page(entries: &[Version]) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * 16);
    for v in entries {
        body.extend_from_slice(&v.seq.to_le_bytes());
        body.extend_from_slice(&v.token.to_le_bytes());
    }
    seal(Kind::MapPage, &body)
}

/// Decodes a map page whose body must have checksum `checksum`.
pub fn decode_page(bytes: &[u8], checksum: u64) -> Result<Vec<Version>, LayoutError> {
    let body = open(Kind::MapPage, bytes)?;
    if xxh3_64(body) != checksum {
        return Err(LayoutError::Checksum(
            "map page (not the one the root names)",
        ));
    }
    if body.len() as u64 != PAGE_OBJECTS * 16 {
        return Err(LayoutError::Parse(
            "map page",
            BodyError::PageLength(body.len()),
        ));
    }
    Ok(body
        .chunks_exact(16)
        .map(|c| Version {
            seq: u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
            token: u64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
        })
        .collect())
}

/// The checksum a root records for a page body (the envelope's own).
pub fn page_checksum(sealed: &[u8]) -> u64 {
    xxh3_64(&sealed[ENVELOPE_HEADER..])
}

/// Checks one record (a block's bytes and its trailer) against what the map says it is:
/// block `block` of `volume` written by commit `seq`. Returns the block's bytes.
pub fn verify_record(
    record: &[u8],
    block_bytes: usize,
    volume: u64,
    block: u64,
    seq: u64,
) -> Result<&[u8], LayoutError> {
    let bad = |why| LayoutError::Record { block, why };
    if record.len() != block_bytes + TRAILER_BYTES {
        return Err(bad(RecordFault::Length {
            found: record.len(),
            expected: block_bytes + TRAILER_BYTES,
        }));
    }
    let (data, trailer) = record.split_at(block_bytes);
    let word = u32::from_le_bytes(trailer[0..4].try_into().expect("4 bytes"));
    let version = u16::from_le_bytes(trailer[4..6].try_into().expect("2 bytes"));
    let long = |at: usize| u64::from_le_bytes(trailer[at..at + 8].try_into().expect("8 bytes"));
    if word != RECORD_MAGIC || version != RECORD_VERSION {
        return Err(bad(RecordFault::NotARecord));
    }
    if record_checksum(data, &trailer[..32]) != long(32) {
        return Err(bad(RecordFault::Checksum));
    }
    if long(8) != volume {
        return Err(bad(RecordFault::OtherVolume(long(8))));
    }
    if long(16) != block {
        return Err(bad(RecordFault::OtherBlock(long(16))));
    }
    if long(24) != seq {
        return Err(bad(RecordFault::OtherCommit {
            written: long(24),
            expected: seq,
        }));
    }
    Ok(data)
}

fn record_checksum(data: &[u8], head: &[u8]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(data);
    hasher.update(head);
    hasher.digest()
}

/// Builds the bytes of a data object of the volume `root` describes: for each block of
/// `blocks` (in order) its record, sealed for the volume and commit `seq`. Each block must
/// be whole, except that a short last block may be just its bytes inside the volume (then
/// padded with zeros); a block of any other length, or past the volume's end, is an error:
/// padding or cutting it would store bytes no one wrote.
pub fn build_object<'a>(
    blocks: impl Iterator<Item = (u64, &'a [u8])>,
    root: &Root,
    seq: u64,
) -> Result<Vec<u8>, LayoutError> {
    let block_bytes = root.block_bytes as usize;
    // Sized once: growing a body of megabytes step by step copies it over and over, and
    // each new allocation is fresh pages the kernel zeroes first (15% of a sequential
    // write's CPU, measured).
    let mut out = Vec::with_capacity(blocks.size_hint().0 * (block_bytes + TRAILER_BYTES));
    for (block, data) in blocks {
        if !root.block_len_fits(block, data.len()) {
            return Err(LayoutError::Record {
                block,
                why: RecordFault::BlockLength {
                    given: data.len(),
                    block_bytes,
                    inside: root.block_len(block),
                },
            });
        }
        let start = out.len();
        out.extend_from_slice(data);
        out.resize(start + block_bytes, 0);
        let head = record_head(root.volume, block, seq);
        let sum = record_checksum(&out[start..start + block_bytes], &head);
        out.extend_from_slice(&head);
        out.extend_from_slice(&sum.to_le_bytes());
    }
    Ok(out)
}

/// The first 32 bytes of a record's trailer: magic, version, volume, block, commit.
fn record_head(volume: u64, block: u64, seq: u64) -> [u8; 32] {
    let mut head = [0u8; 32];
    head[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    head[4..6].copy_from_slice(&RECORD_VERSION.to_le_bytes());
    head[8..16].copy_from_slice(&volume.to_le_bytes());
    head[16..24].copy_from_slice(&block.to_le_bytes());
    head[24..32].copy_from_slice(&seq.to_le_bytes());
    head
}

/// The checksum [`build_object`] gives the record of block `block` holding `data`
/// (padded with zeros to a whole block) in commit `seq` of the volume `root` describes,
/// without building it: a commit computes its pointers before its uploads build their
/// bodies, so that only the bodies in flight are in memory.
pub fn record_sum(root: &Root, block: u64, data: &[u8], seq: u64) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(data);
    let pad = (root.block_bytes as usize).saturating_sub(data.len());
    const ZEROS: [u8; 4096] = [0; 4096];
    let mut left = pad;
    while left > 0 {
        let n = left.min(ZEROS.len());
        hasher.update(&ZEROS[..n]);
        left -= n;
    }
    hasher.update(&record_head(root.volume, block, seq));
    hasher.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_refuse_damage() {
        let root = Root::new(7, 1 << 30, 8192, 128);
        let bytes = root.encode();
        assert_eq!(Root::decode(&bytes).unwrap(), root);
        let mut bad = bytes.clone();
        let last = bad.len() - 2;
        bad[last] ^= 1;
        assert!(matches!(Root::decode(&bad), Err(LayoutError::Checksum(_))));
        assert!(matches!(
            Root::decode(&bytes[..20]),
            Err(LayoutError::Header(_))
        ));
        assert!(matches!(
            Root::decode(&encode_page(&[])),
            Err(LayoutError::Header(_))
        ));
        let mut wrong = root.clone();
        wrong.block_bytes = 3000;
        assert!(matches!(
            Root::decode(&wrong.encode()),
            Err(LayoutError::Parse(..))
        ));
        let garbage = seal(Kind::Root, b"{not json");
        assert!(matches!(
            Root::decode(&garbage),
            Err(LayoutError::Parse(..))
        ));
    }

    #[test]
    fn pages_carry_their_entries() {
        let mut entries = vec![Version::default(); PAGE_OBJECTS as usize];
        entries[3] = Version { seq: 9, token: 2 };
        let sealed = encode_page(&entries);
        let sum = page_checksum(&sealed);
        assert_eq!(decode_page(&sealed, sum).unwrap(), entries);
        assert!(decode_page(&sealed, sum ^ 1).is_err());
    }

    #[test]
    fn records_verify_only_as_what_the_map_says() {
        // Block 11 is the volume's last, 100 bytes of it inside the volume.
        let root = Root::new(5, 11 * 4096 + 100, 4096, 128);
        let a = vec![1u8; 4096];
        let short = [2u8; 100];
        let obj = build_object([(10, &a[..]), (11, &short[..])].into_iter(), &root, 3).unwrap();
        let rec = 4096 + TRAILER_BYTES;
        assert_eq!(obj.len(), 2 * rec);
        assert_eq!(verify_record(&obj[..rec], 4096, 5, 10, 3).unwrap(), &a[..]);
        let second = verify_record(&obj[rec..], 4096, 5, 11, 3).unwrap();
        assert_eq!(&second[..100], &short[..]);
        assert!(second[100..].iter().all(|&b| b == 0));
        // Another volume's, another block's, another commit's record: refused.
        assert!(verify_record(&obj[..rec], 4096, 6, 10, 3).is_err());
        assert!(verify_record(&obj[..rec], 4096, 5, 11, 3).is_err());
        assert!(verify_record(&obj[..rec], 4096, 5, 10, 4).is_err());
        let mut flipped = obj[..rec].to_vec();
        flipped[17] ^= 0x40;
        let err = verify_record(&flipped, 4096, 5, 10, 3).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        assert!(verify_record(&obj[..rec - 1], 4096, 5, 10, 3).is_err());
    }

    #[test]
    fn record_sums_are_the_built_records_checksums() {
        let root = Root::new(5, 11 * 4096 + 100, 4096, 128);
        let a = vec![3u8; 4096];
        let short = [4u8; 100];
        let obj = build_object([(10, &a[..]), (11, &short[..])].into_iter(), &root, 9).unwrap();
        let rec = 4096 + TRAILER_BYTES;
        assert_eq!(
            record_checksum_of(&obj[..rec]),
            record_sum(&root, 10, &a, 9)
        );
        assert_eq!(
            record_checksum_of(&obj[rec..]),
            record_sum(&root, 11, &short, 9)
        );
        assert_ne!(record_sum(&root, 10, &a, 9), record_sum(&root, 10, &a, 8));
    }

    #[test]
    fn blocks_of_another_size_are_refused_not_padded() {
        let root = Root::new(5, 11 * 4096 + 100, 4096, 128);
        let build = |block: u64, len: usize| {
            let data = vec![1u8; len];
            build_object([(block, &data[..])].into_iter(), &root, 3)
        };
        assert!(build(10, 4096).is_ok() && build(11, 4096).is_ok() && build(11, 100).is_ok());
        // A block of another volume's block size, cut or padded, would be stored as bytes
        // no one wrote.
        for (block, len) in [(10, 8192), (10, 2048), (10, 100), (11, 99), (11, 8192)] {
            let err = build(block, len)
                .err()
                .unwrap_or_else(|| panic!("block {block}: {len} bytes accepted"));
            assert!(
                err.to_string().contains(&format!("{len} bytes given")),
                "{block}/{len}: {err}"
            );
        }
        // Past the end.
        assert!(build(12, 4096).is_err());
    }

    #[test]
    fn objects_over_64_mib_are_refused() {
        let largest = Root::new(7, 1 << 40, 4096, (MAX_OBJECT_BYTES / 4096) as u32);
        assert_eq!(Root::decode(&largest.encode()).unwrap(), largest);
        let larger = Root::new(7, 1 << 40, 4096, (MAX_OBJECT_BYTES / 4096) as u32 + 1);
        let err = Root::decode(&larger.encode()).unwrap_err();
        assert!(err.to_string().contains("blocks per object"), "{err}");
        // A root naming more pages than its size needs (here one) is refused as well.
        let mut crowded = Root::new(7, 1 << 30, 4096, 256);
        let page = |page| PageRef {
            page,
            version: Version { seq: 1, token: 1 },
            checksum: 0,
        };
        crowded.pages = vec![page(0), page(1)];
        assert!(Root::decode(&crowded.encode()).is_err());
        crowded.pages = vec![page(0), page(0)];
        assert!(Root::decode(&crowded.encode()).is_err());
    }

    #[test]
    fn a_root_that_could_outgrow_what_readers_accept_is_refused_at_create() {
        // The bound is that of a real root: every page named, every number at its widest.
        let mut full = Root::new(7, 3 * PAGE_OBJECTS * 4096, 4096, 1);
        full.commit_seq = COUNTER_LIMIT - 1;
        full.committed_by = COUNTER_LIMIT - 1;
        full.committed_ms = u64::MAX;
        full.lease = Lease {
            owner: "n".repeat(OWNER_BYTES_MAX),
            token: COUNTER_LIMIT - 1,
            expires_ms: u64::MAX,
            duration_ms: u64::MAX,
        };
        let widest = Version {
            seq: COUNTER_LIMIT - 1,
            token: COUNTER_LIMIT - 1,
        };
        full.pages = (0..3)
            .map(|page| PageRef {
                page,
                version: widest,
                checksum: u64::MAX,
            })
            .collect();
        assert_eq!(full.encode().len() as u64, full.largest_bytes());
        assert_eq!(Root::decode(&full.encode()).unwrap(), full);
        assert_eq!(full.check_new(), Ok(()));

        // 8 TiB in 4 KiB objects: its root would pass 64 MiB. The advice is the smallest
        // object size that fits, and it does.
        let big = Root::new(7, 8 << 40, 4096, 1);
        assert!(big.largest_bytes() > MAX_ROOT_BYTES);
        let err = big.check_new().unwrap_err();
        let blocks = big.smallest_object_blocks().unwrap();
        let fitting = u64::from(blocks) * 4096;
        let err = err.to_string();
        assert!(err.contains(&format!("at least {fitting} bytes")), "{err}");
        let with = |blocks| Root::new(7, 8 << 40, 4096, blocks);
        assert_eq!(with(blocks).check_new(), Ok(()));
        assert!(with(blocks - 1).check_new().is_err());
        // What docs/object-store.md says: the largest volume fits in the default 1 MiB
        // objects, and 8 KiB objects stop fitting at about 11.7 TiB.
        assert_eq!(
            Root::new(7, MAX_VOLUME_BYTES, 4096, 256).check_new(),
            Ok(())
        );
        assert_eq!(Root::new(7, 11 << 40, 8192, 1).check_new(), Ok(()));
        assert!(Root::new(7, 12 << 40, 8192, 1).check_new().is_err());
    }

    #[test]
    fn counters_from_2_62_up_are_refused() {
        let largest = COUNTER_LIMIT - 1;
        let mut root = Root::new(7, 1 << 30, 4096, 256);
        root.commit_seq = largest;
        root.committed_by = largest;
        root.lease.token = largest;
        assert_eq!(Root::decode(&root.encode()).unwrap(), root);
        let fields: [fn(&mut Root) -> &mut u64; 3] = [
            |r| &mut r.commit_seq,
            |r| &mut r.committed_by,
            |r| &mut r.lease.token,
        ];
        for field in fields {
            for n in [COUNTER_LIMIT, u64::MAX] {
                let mut bad = root.clone();
                *field(&mut bad) = n;
                let err = Root::decode(&bad.encode()).unwrap_err();
                assert!(err.to_string().contains("below 2^62"), "{n}: {err}");
            }
        }
    }

    #[test]
    fn names_parse_back() {
        let v = Version { seq: 42, token: 7 };
        assert_eq!(parse_name(&data_name(5, v)), Some(("data", 5, v)));
        assert_eq!(parse_name(&page_name(1, v)), Some(("map", 1, v)));
        assert_eq!(parse_name("data/zz"), None);
        assert_eq!(parse_name("larch-volume"), None);
    }
}

#[cfg(test)]
mod segment_tests {
    use super::*;

    fn segments(size: u64, block_bytes: u32) -> Root {
        let mut root = Root::new(7, size, block_bytes, 128);
        root.format = Format::Segments;
        root
    }

    /// With index pages, a segments volume of any block size may be as large as any
    /// volume (1 PiB), its root stays small (the top level names at most 1,024 pages, and
    /// room for the most map logs), and the tree is as shallow as the size allows: none up
    /// to 1,024 block-map pages, one level to 2^20, two to 2^30, three beyond.
    #[test]
    fn index_pages_bound_the_root_whatever_the_size() {
        for block_bytes in [512u32, 4096, 16384, 131072] {
            let root = segments(MAX_VOLUME_BYTES, block_bytes);
            root.check_new().expect("the largest volume fits");
            assert!(root.largest_bytes() < 256 << 10, "{}", root.largest_bytes());
        }
        let levels = |size: u64, bs: u32| segments(size, bs).tree_levels();
        assert_eq!(levels(4 << 30, 4096), 0); // 1,024 pages
        assert_eq!(levels((4 << 30) + 4096, 4096), 1);
        assert_eq!(levels(4 << 40, 4096), 1); // 2^20 pages
        assert_eq!(levels(16 << 40, 4096), 2);
        assert_eq!(levels(MAX_VOLUME_BYTES, 512), 3);
        let mut flat = segments(4 << 40, 4096);
        assert_eq!(flat.pages_at(1), 1024);
        flat.levels = MAX_TREE_LEVELS + 1;
        assert!(Root::decode(&flat.encode()).is_err());
        // Index pages only in a segments volume, and a top level's pages in its range.
        let mut objects = Root::new(7, 4 << 40, 4096, 128);
        objects.levels = 1;
        assert!(Root::decode(&objects.encode()).is_err());
        let mut wide = segments(4 << 40, 4096);
        wide.levels = 1;
        wide.pages = vec![PageRef {
            page: 1024,
            version: Version { seq: 1, token: 1 },
            checksum: 0,
        }];
        assert!(Root::decode(&wide.encode()).is_err());
        wide.pages[0].page = 1023;
        let back = Root::decode(&wide.encode()).expect("in range");
        assert_eq!(back.levels, 1);
        // A root without index pages says nothing of them (as roots before them).
        let plain = String::from_utf8(segments(1 << 30, 4096).encode()[32..].to_vec()).unwrap();
        assert!(!plain.contains("levels"));
    }

    #[test]
    fn index_pages_round_trip_and_refuse_bad_refs() {
        let r = |page, seq| PageRef {
            page,
            version: Version { seq, token: 3 },
            checksum: page * 7,
        };
        let refs = vec![r(1024, 5), r(1030, 9), r(2047, 1)];
        let sealed = encode_index_page(&refs);
        let sum = page_checksum(&sealed);
        assert_eq!(decode_index_page(&sealed, sum, 1024..2048).unwrap(), refs);
        // Another checksum than its parent names, a span it does not fit, refs out of
        // order, a ref of no commit, no refs, another kind: refused.
        assert!(decode_index_page(&sealed, sum ^ 1, 1024..2048).is_err());
        assert!(decode_index_page(&sealed, sum, 1024..2047).is_err());
        assert!(decode_index_page(&sealed, sum, 0..1024).is_err());
        for bad in [
            vec![r(1030, 9), r(1024, 5)],
            vec![r(1024, 5), r(1024, 6)],
            vec![r(1024, 0)],
            vec![],
        ] {
            let sealed = encode_index_page(&bad);
            assert!(decode_index_page(&sealed, page_checksum(&sealed), 1024..2048).is_err());
        }
        let page = encode_block_page(&vec![BlockPtr::default(); PAGE_BLOCKS as usize]);
        assert!(decode_index_page(&page, page_checksum(&page), 0..2048).is_err());
        // Names parse back only in their own form.
        let v = Version {
            seq: 0x42,
            token: 7,
        };
        assert_eq!(parse_index_name(&index_page_name(2, 9, v)), Some((2, 9, v)));
        assert_eq!(
            parse_index_name("bidx/2-00000009-0000000000000042-0000000000000007"),
            None
        );
        assert_eq!(parse_index_name(&block_page_name(9, v)), None);
    }

    #[test]
    fn block_pages_round_trip_and_refuse_bad_pointers() {
        let mut entries = vec![BlockPtr::default(); PAGE_BLOCKS as usize];
        entries[5] = BlockPtr {
            seq: 9,
            token: 2,
            checksum: 0xdead,
            part: 1,
            slot: 3,
            records: 4,
        };
        let sealed = encode_block_page(&entries);
        assert_eq!(sealed.len() as u64, BLOCK_PAGE_BYTES);
        let sum = page_checksum(&sealed);
        assert_eq!(decode_block_page(&sealed, sum).unwrap(), entries);
        assert!(decode_block_page(&sealed, sum ^ 1).is_err());
        // A record outside its segment, and a hole with bits set: refused.
        for bad in [
            BlockPtr {
                slot: 4,
                ..entries[5]
            },
            BlockPtr {
                checksum: 1,
                ..BlockPtr::default()
            },
            BlockPtr {
                seq: COUNTER_LIMIT,
                ..entries[5]
            },
        ] {
            let mut page = entries.clone();
            page[7] = bad;
            let sealed = encode_block_page(&page);
            let err = decode_block_page(&sealed, page_checksum(&sealed)).unwrap_err();
            assert!(err.to_string().contains("pointer"), "{bad:?}: {err}");
        }
        // An objects map page is not a block-map page.
        let other = encode_page(&vec![Version::default(); PAGE_OBJECTS as usize]);
        assert!(decode_block_page(&other, page_checksum(&other)).is_err());
    }

    #[test]
    fn segment_names_parse_back_only_in_their_own_form() {
        let id = SegmentId {
            seq: 42,
            token: 7,
            part: 3,
        };
        assert_eq!(parse_segment_name(&segment_name(id)), Some(id));
        assert_eq!(parse_segment_name("seg/2a-7-3"), None);
        assert_eq!(
            parse_segment_name("data/000000000001-0000000000000001-0000000000000001"),
            None
        );
        let v = Version { seq: 42, token: 7 };
        assert_eq!(parse_name(&block_page_name(3, v)), Some(("bmap", 3, v)));
    }

    #[test]
    fn roots_without_a_format_are_objects_volumes() {
        let root = Root::new(7, 1 << 30, 4096, 256);
        let body = serde_json::to_value(&root).unwrap();
        let mut old = body.as_object().unwrap().clone();
        old.remove("format");
        let sealed = seal(Kind::Root, &serde_json::to_vec(&old).unwrap());
        assert_eq!(Root::decode(&sealed).unwrap().format, Format::Objects);
        let seg = segments(1 << 30, 4096);
        assert_eq!(
            Root::decode(&seg.encode()).unwrap().format,
            Format::Segments
        );
    }
}
