//! The metadata models: a ZFS volume's indirect blocks, or a larch object volume's
//! block-map pages.
//!
//! # Theory
//!
//! A zvol's data blocks are found through a tree of block pointers (the ZFS On-Disk
//! Specification, "Indirect blocks"; OpenZFS `dnode.h`, `DN_MAX_INDBLKSHIFT`): each
//! indirect block holds 1,024 block pointers of 128 bytes (`SPA_BLKPTRSHIFT` = 7) in
//! 128 KiB (`indblkshift` 17, OpenZFS's default since 7104, 2016; 16 KiB before, and any
//! of 4 KiB to 128 KiB here with [`IndirectTree::new`]'s `indblkshift`); a level-1 block
//! points at 1,024 data blocks (128 at 16 KiB), a level-2 block at 1,024 level-1 blocks,
//! and so on up to the dnode,
//! which holds three pointers (`dn_nblkptr` of an object with no bonus buffer). The
//! daemon has none of this (a larch volume is a raw file, addressed directly); the
//! simulator models it to reproduce the seeds' ZFS pools.
//!
//! What the model does with the tree, and why:
//!
//! 1. **Reads.** A data block's address is in its level-1 block, so a read that misses
//!    the ARC first looks up its indirect blocks, from the top level down, each as an ARC
//!    access of metadata (`BufType::Metadata`, counted in `demand_metadata_*`). The ones
//!    that miss are read (from a cache device that holds a copy, else from the primary
//!    storage), and the data read is issued only once they are all there: it cannot be
//!    issued before its address is known. Several levels missed together are read at
//!    once, not one after the other: it happens only on the first reads of a cold pool
//!    (the levels above 1 of a 500 GB volume of 8 KiB blocks are 61 blocks).
//! 2. **Hits skip the tree.** A read whose data block is in the ARC does not look up its
//!    indirect blocks: OpenZFS finds it through the dbuf that points at the ARC buffer.
//! 3. **Sizes.** An indirect block is read, cached and fed at its full size. OpenZFS compresses
//!    indirect blocks on disk, but a block pointer's 256-bit checksum (a quarter of it) does
//!    not compress, so a full level-1 block stays between 32 and 128 KiB: the model's
//!    128 KiB costs at most 96 KiB more transfer (under a millisecond at a disk's media
//!    rate) beside a read's positioning time.
//! 4. **Writes.** A TXG writes each indirect block above a block it writes once, in two
//!    copies (`redundant_metadata=all`: metadata has one more copy than data, ZFS's ditto
//!    blocks). Reading an indirect block to change it (a write whose level-1 block is not
//!    in the ARC) is not modelled.
//! 5. **Where.** An indirect block lies on the primary storage at the address of the first
//!    data block it covers, as the TXG that writes a block writes its parents with it.
//!
//! # larch's object volumes: block-map pages
//!
//! A larch volume on an object store (the *segments* layout, `larch_object`) finds its
//! blocks through one level of block-map pages: page `n` holds the pointers of blocks
//! `n * 1,024` to `n * 1,024 + 1,023` ([`MAP_PAGE_BLOCKS`], `larch_object::layout::
//! PAGE_BLOCKS`). The daemon keeps the pages in its ARC as metadata, under keys of their
//! own in the volume's key space (larch-engine's `arc::map_pages`); [`MapPages`] models
//! them so that a run can size the caches in front of an object store. What the model
//! does, and why (each point is what the daemon does):
//!
//! 1. **Reads.** A block that is not in the ARC and has no copy on a cache device is read
//!    from the store, and that read needs its pointer: the page is looked up (an ARC
//!    access of metadata) before the block enters the ARC, and read from a cache device or
//!    the primary storage when it misses; the data read is issued once it is there. A
//!    block read from a cache device does not look its page up: the daemon finds the copy
//!    by the block's key. So unlike ZFS's indirect blocks, a page is needed only by reads
//!    of the store.
//! 2. **Generations.** A page that enters the ARC (read from the store or from a cache
//!    device) is a new version of itself to the policy (the daemon gives it a fresh
//!    generation, so that a page rewritten by a commit is never taken for its old copy):
//!    a page read again after the ARC evicted it is a new block, never a ghost hit, and
//!    its ghost is dropped (`stale_drops`).
//! 3. **Sizes.** Every page is dense (the model's volume has every block written): in the
//!    ARC and on cache devices it takes [`MAP_PAGE_BYTES`] (`larch_object::
//!    CACHED_PAGE_BYTES`: a head naming the page object, then 1,024 pointers of 40 bytes).
//!    The daemon keeps a page of few pointers smaller, and feeds a page only when it fills
//!    a quarter of its padded copy; a dense page always does.
//! 4. **Feeds.** Pages are fed from the ARC as data is, with `secondarycache=all` or
//!    `metadata`.
//! 5. **Writes.** A TXG writes the page above each block it writes, once (an object
//!    store keeps its own redundancy): every commit a checkpoint. Not modelled: the map
//!    logs the daemon writes between checkpoints (`map_log_commits`), which write fewer
//!    pages, and the new page a checkpoint puts in the ARC (the model keeps the page it
//!    had). A page lies on the primary storage at the first data block it covers; the
//!    primary storage's model stands for the store.

/// Bytes of a block pointer (`SPA_BLKPTRSHIFT` = 7).
pub const BLKPTR_BYTES: u32 = 128;
/// Bytes of an indirect block by default (`indblkshift` 17, OpenZFS's `DN_MAX_INDBLKSHIFT`
/// and its default since 7104, 2016).
pub const INDIRECT_BLOCK_BYTES: u32 = 128 << 10;
/// The `indblkshift` values OpenZFS allows (`DN_MIN_INDBLKSHIFT` 12 to `DN_MAX_INDBLKSHIFT`
/// 17): 4 KiB to 128 KiB indirect blocks. ZFS made 16 KiB (14) until 2016.
pub const INDBLKSHIFTS: std::ops::RangeInclusive<u32> = 12..=17;
/// Block pointers a dnode holds (`dn_nblkptr` of an object with no bonus buffer).
pub const DNODE_BLKPTRS: u64 = 3;
/// Copies of each indirect block a TXG writes (`redundant_metadata=all`).
pub const METADATA_COPIES: u64 = 2;

/// Blocks a block-map page of a larch object volume points at
/// (`larch_object::layout::PAGE_BLOCKS`).
pub const MAP_PAGE_BLOCKS: u64 = 1024;
/// Bytes of a dense block-map page in the daemon's ARC and on its cache devices
/// (`larch_object::CACHED_PAGE_BYTES`): a head of 28 bytes, then 1,024 pointers of 40.
pub const MAP_PAGE_BYTES: u32 = 28 + 1024 * 40;
/// The id of block-map page 0 among the simulator's block numbers: the block number of
/// its key in the daemon (larch-engine's `volumes::info::MAP_PAGE_KEYS`), above every data
/// block.
pub const MAP_PAGE_IDS: u64 = 1 << 43;

/// The bit that marks an indirect block's id among the simulator's block numbers.
const INDIRECT_BIT: u64 = 1 << 63;
/// Its level is in the bits from here up.
const LEVEL_SHIFT: u32 = 56;
/// Data blocks the model addresses at most (2^56: 32 EiB of 512-byte blocks).
const MAX_DATA_BLOCKS: u64 = 1 << LEVEL_SHIFT;

/// A volume's primarycache or secondarycache property.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Data and metadata.
    #[default]
    All,
    /// Metadata only.
    Metadata,
    /// Nothing.
    None,
}

impl CacheMode {
    /// Whether a block of this kind (`metadata` or data) is cached.
    pub fn caches(self, metadata: bool) -> bool {
        match self {
            CacheMode::All => true,
            CacheMode::Metadata => metadata,
            CacheMode::None => false,
        }
    }

    /// Parses `all`, `metadata` or `none`.
    pub fn parse(text: &str) -> Option<CacheMode> {
        match text {
            "all" => Some(CacheMode::All),
            "metadata" => Some(CacheMode::Metadata),
            "none" => Some(CacheMode::None),
            _ => None,
        }
    }
}

/// What a simulated volume's blocks are found through (`--metadata`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetadataModel {
    /// Nothing: every block is data, as in a larch volume on a file or a device.
    #[default]
    Off,
    /// A ZFS volume's indirect blocks ([`IndirectTree`]): the seeds' pools.
    IndirectBlocks,
    /// A larch object volume's block-map pages ([`MapPages`]).
    MapPages,
}

impl MetadataModel {
    /// Parses `off`, `on` (indirect blocks) or `map-pages`.
    pub fn parse(text: &str) -> Option<MetadataModel> {
        match text {
            "off" => Some(MetadataModel::Off),
            "on" => Some(MetadataModel::IndirectBlocks),
            "map-pages" => Some(MetadataModel::MapPages),
            _ => None,
        }
    }
}

/// A volume's metadata, as the cache looks it up, keeps and writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeMetadata {
    /// ZFS's indirect blocks.
    Indirect(IndirectTree),
    /// larch's block-map pages.
    MapPages(MapPages),
}

impl VolumeMetadata {
    /// The metadata `model` gives a volume of `volume_blocks` blocks of `block_bytes`
    /// (`indblkshift` for indirect blocks); `None` when it is off.
    pub fn new(
        model: MetadataModel,
        volume_blocks: u64,
        block_bytes: u32,
        indblkshift: u32,
    ) -> Option<VolumeMetadata> {
        match model {
            MetadataModel::Off => None,
            MetadataModel::IndirectBlocks => Some(VolumeMetadata::Indirect(IndirectTree::new(
                volume_blocks,
                block_bytes,
                indblkshift,
            ))),
            MetadataModel::MapPages => Some(VolumeMetadata::MapPages(MapPages::new(
                volume_blocks,
                block_bytes,
            ))),
        }
    }

    /// Whether `block` is metadata (else data).
    pub fn is_metadata(&self, block: u64) -> bool {
        match self {
            VolumeMetadata::Indirect(_) => IndirectTree::is_indirect(block),
            VolumeMetadata::MapPages(_) => MapPages::is_page(block),
        }
    }

    /// Bytes of `block`, data or metadata.
    pub fn size_bytes(&self, block: u64) -> u32 {
        match self {
            VolumeMetadata::Indirect(tree) => tree.size_bytes(block),
            VolumeMetadata::MapPages(pages) => pages.size_bytes(block),
        }
    }

    /// Where `block` lies on the primary storage, in bytes.
    pub fn offset(&self, block: u64) -> u64 {
        match self {
            VolumeMetadata::Indirect(tree) => tree.offset(block),
            VolumeMetadata::MapPages(pages) => pages.offset(block),
        }
    }

    /// The ids of the metadata above data block `block`, top level first.
    pub fn parents(&self, block: u64) -> impl Iterator<Item = u64> + Clone + '_ {
        let levels = match self {
            VolumeMetadata::Indirect(tree) => tree.levels(),
            VolumeMetadata::MapPages(_) => 1,
        };
        (1..=levels).rev().map(move |level| match self {
            VolumeMetadata::Indirect(tree) => tree.parent(block, level),
            VolumeMetadata::MapPages(pages) => pages.page_of(block),
        })
    }

    /// Copies of each metadata block a TXG writes.
    pub fn copies(&self) -> u64 {
        match self {
            VolumeMetadata::Indirect(_) => METADATA_COPIES,
            VolumeMetadata::MapPages(_) => 1,
        }
    }

    /// Whether a metadata block entering the ARC is a new version of itself to the policy
    /// (larch's block-map pages: see the module documentation).
    pub fn renewed_on_entry(&self) -> bool {
        matches!(self, VolumeMetadata::MapPages(_))
    }
}

/// The block-map pages of one larch object volume (see the module documentation): page
/// `n`'s id is [`MAP_PAGE_IDS`]` + n`, its size [`MAP_PAGE_BYTES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapPages {
    volume_blocks: u64,
    block_bytes: u32,
}

impl MapPages {
    /// The pages of a volume of `volume_blocks` blocks of `block_bytes`.
    pub fn new(volume_blocks: u64, block_bytes: u32) -> MapPages {
        assert!(
            volume_blocks <= MAP_PAGE_IDS,
            "{volume_blocks} blocks: their ids would reach the map pages'"
        );
        MapPages {
            volume_blocks,
            block_bytes,
        }
    }

    /// Whether `block` is a page's id.
    pub fn is_page(block: u64) -> bool {
        block >= MAP_PAGE_IDS
    }

    /// The id of the page that points at data block `block`.
    pub fn page_of(&self, block: u64) -> u64 {
        debug_assert!(!Self::is_page(block));
        MAP_PAGE_IDS + block / MAP_PAGE_BLOCKS
    }

    /// Pages of the first `data_blocks` blocks.
    pub fn pages(&self, data_blocks: u64) -> u64 {
        data_blocks.div_ceil(MAP_PAGE_BLOCKS)
    }

    /// Bytes of `block`: the volume's block size for data, [`MAP_PAGE_BYTES`] for a page.
    pub fn size_bytes(&self, block: u64) -> u32 {
        if Self::is_page(block) {
            MAP_PAGE_BYTES
        } else {
            self.block_bytes
        }
    }

    /// Where `block` lies on the primary storage, in bytes: a data block at its address, a
    /// page at the first data block it points at (moved back to end within the volume).
    pub fn offset(&self, block: u64) -> u64 {
        let bs = u64::from(self.block_bytes);
        if !Self::is_page(block) {
            return block * bs;
        }
        let first = (block - MAP_PAGE_IDS) * MAP_PAGE_BLOCKS;
        let end = (self.volume_blocks * bs).saturating_sub(u64::from(MAP_PAGE_BYTES));
        (first * bs).min(end)
    }
}

/// The indirect blocks of one volume: their ids among the simulator's block numbers (data
/// blocks are numbered from 0; an indirect block's id has the top bit set, its level and
/// its index at that level), their sizes and addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectTree {
    volume_blocks: u64,
    block_bytes: u32,
    /// Bytes of an indirect block (`1 << indblkshift`).
    indirect_bytes: u32,
    /// Block pointers per indirect block, as a power of two.
    per_shift: u32,
    levels: u32,
}

impl IndirectTree {
    /// The tree of a volume of `volume_blocks` blocks of `block_bytes`, with indirect
    /// blocks of `1 << indblkshift` bytes (one of [`INDBLKSHIFTS`]).
    pub fn new(volume_blocks: u64, block_bytes: u32, indblkshift: u32) -> IndirectTree {
        assert!(
            volume_blocks < MAX_DATA_BLOCKS,
            "{volume_blocks} blocks: more than the model addresses"
        );
        assert!(
            INDBLKSHIFTS.contains(&indblkshift),
            "indblkshift {indblkshift}"
        );
        let per_shift = indblkshift - BLKPTR_BYTES.trailing_zeros();
        let per = 1u64 << per_shift;
        // Levels until the dnode's three pointers cover the volume.
        let mut levels = 0;
        let mut top = volume_blocks.max(1);
        while top > DNODE_BLKPTRS {
            top = top.div_ceil(per);
            levels += 1;
        }
        IndirectTree {
            volume_blocks,
            block_bytes,
            indirect_bytes: 1 << indblkshift,
            per_shift,
            levels,
        }
    }

    /// Levels of indirect blocks (0: the dnode points at the data).
    pub fn levels(&self) -> u32 {
        self.levels
    }

    /// Whether `block` is an indirect block's id.
    pub fn is_indirect(block: u64) -> bool {
        block & INDIRECT_BIT != 0
    }

    /// The id of the indirect block of `level` (1 and up) above data block `block`.
    pub fn parent(&self, block: u64, level: u32) -> u64 {
        debug_assert!((1..=self.levels).contains(&level) && !Self::is_indirect(block));
        let index = block >> (self.per_shift * level);
        INDIRECT_BIT | (u64::from(level) << LEVEL_SHIFT) | index
    }

    /// Data blocks one indirect block of `level` covers (1,024 per level at 128 KiB).
    pub fn span(&self, level: u32) -> u64 {
        1 << (self.per_shift * level)
    }

    /// The ids of the indirect blocks above data block `block`, top level first.
    pub fn parents(&self, block: u64) -> impl Iterator<Item = u64> + Clone + '_ {
        (1..=self.levels).rev().map(move |l| self.parent(block, l))
    }

    /// Bytes of an indirect block.
    pub fn indirect_block_bytes(&self) -> u32 {
        self.indirect_bytes
    }

    /// Bytes of `block`: the volume's block size for data, the tree's for an indirect
    /// block.
    pub fn size_bytes(&self, block: u64) -> u32 {
        if Self::is_indirect(block) {
            self.indirect_bytes
        } else {
            self.block_bytes
        }
    }

    /// Where `block` lies on the primary storage, in bytes: a data block at its address,
    /// an indirect block at the first data block it covers (moved back to end within the
    /// volume).
    pub fn offset(&self, block: u64) -> u64 {
        let bs = u64::from(self.block_bytes);
        if !Self::is_indirect(block) {
            return block * bs;
        }
        let level = ((block & !INDIRECT_BIT) >> LEVEL_SHIFT) as u32;
        let index = block & (MAX_DATA_BLOCKS - 1);
        let first = index << (self.per_shift * level);
        let end = (self.volume_blocks * bs).saturating_sub(u64::from(self.indirect_bytes));
        (first * bs).min(end)
    }

    /// Bytes of all the indirect blocks of the first `data_blocks` blocks.
    pub fn indirect_bytes(&self, data_blocks: u64) -> u64 {
        let mut total = 0;
        let mut n = data_blocks;
        for _ in 0..self.levels {
            n = n.div_ceil(1 << self.per_shift);
            total += n * u64::from(self.indirect_bytes);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed000s_volume_has_three_levels_and_7_6_gb_of_indirect_blocks() {
        // 500 GiB of 8 KiB blocks: 64 Mi blocks, 64 Ki level-1 blocks, 64 level-2, 1
        // level-3 (the dnode's three pointers would hold only 3 level-2 blocks).
        let ads_blocks = 500u64 << 17;
        let tree = IndirectTree::new(ads_blocks, 8 << 10, 17);
        assert_eq!(tree.levels(), 3);
        let bytes = tree.indirect_bytes(ads_blocks);
        assert_eq!(bytes, (64_000 + 63 + 1) * (128 << 10));
        // 1/64 of the data: 128 bytes of pointer per 8 KiB block.
        assert_eq!(bytes / (ads_blocks * 8192 / 64), 1);
    }

    #[test]
    fn sixteen_kib_indirect_blocks_point_at_128_blocks_each() {
        // 2009's indblkshift 14: seed 000's 500 GiB of 8 KiB blocks have 512 Ki level-1
        // blocks of 16 KiB (the same 1/64 of the data), 4 Ki level-2, 32 level-3, 1
        // level-4.
        let ads_blocks = 500u64 << 17;
        let tree = IndirectTree::new(ads_blocks, 8 << 10, 14);
        assert_eq!(tree.levels(), 4);
        assert_eq!(tree.indirect_block_bytes(), 16 << 10);
        let l1 = ads_blocks / 128;
        let bytes = tree.indirect_bytes(ads_blocks);
        assert_eq!(bytes, (l1 + l1.div_ceil(128) + 32 + 1) * (16 << 10));
        assert_eq!(tree.parent(127, 1), tree.parent(0, 1));
        assert_ne!(tree.parent(128, 1), tree.parent(127, 1));
        assert_eq!(tree.offset(tree.parent(300, 1)), 256 * 8192);
        assert_eq!(tree.size_bytes(tree.parent(300, 2)), 16 << 10);
    }

    #[test]
    fn a_volume_of_three_blocks_has_no_indirect_blocks() {
        assert_eq!(IndirectTree::new(3, 8192, 17).levels(), 0);
        assert_eq!(IndirectTree::new(4, 8192, 17).levels(), 1);
        assert_eq!(IndirectTree::new(3 * 1024, 8192, 17).levels(), 1);
        assert_eq!(IndirectTree::new(3 * 1024 + 1, 8192, 17).levels(), 2);
    }

    #[test]
    fn a_map_page_points_at_1024_blocks_and_is_keyed_above_them() {
        // Four pages, the last of three blocks.
        let pages = MapPages::new(3075, 4096);
        let meta = VolumeMetadata::MapPages(pages);
        let above: Vec<u64> = meta.parents(2048 + 7).collect();
        assert_eq!(above, [MAP_PAGE_IDS + 2]);
        assert_eq!(pages.page_of(1023), MAP_PAGE_IDS);
        assert_eq!(pages.page_of(1024), MAP_PAGE_IDS + 1);
        assert!(meta.is_metadata(MAP_PAGE_IDS + 3) && !meta.is_metadata(3074));
        assert_eq!(meta.size_bytes(MAP_PAGE_IDS), 40_988);
        assert_eq!(meta.size_bytes(5), 4096);
        assert_eq!(meta.offset(MAP_PAGE_IDS + 1), 1024 * 4096);
        // The last page would run past the volume's end: it ends there.
        assert_eq!(meta.offset(MAP_PAGE_IDS + 3), 3075 * 4096 - 40_988);
        assert_eq!(pages.pages(3075), 4);
        assert_eq!((meta.copies(), meta.renewed_on_entry()), (1, true));
        assert_eq!(
            MetadataModel::parse("map-pages"),
            Some(MetadataModel::MapPages)
        );
        assert_eq!(
            MetadataModel::parse("on"),
            Some(MetadataModel::IndirectBlocks)
        );
        assert_eq!(MetadataModel::parse("zfs"), None);
    }

    #[test]
    fn parents_are_shared_by_1024_blocks_and_lie_at_their_first_block() {
        let tree = IndirectTree::new(1 << 20, 8192, 17);
        assert_eq!(tree.levels(), 2);
        let p: Vec<u64> = tree.parents(5000).collect();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|&b| IndirectTree::is_indirect(b)));
        assert_eq!(tree.parent(5000, 1), tree.parent(4096, 1));
        assert_ne!(tree.parent(5000, 1), tree.parent(4095, 1));
        assert_eq!(tree.offset(tree.parent(5000, 1)), 4096 * 8192);
        assert_eq!(tree.offset(tree.parent(5000, 2)), 0);
        assert_eq!(tree.size_bytes(tree.parent(5000, 1)), 128 << 10);
        assert_eq!(tree.size_bytes(5000), 8192);
        assert_eq!(tree.offset(5000), 5000 * 8192);
    }
}
