//! The metadata model: a ZFS volume's indirect blocks.
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

    /// The ids of the indirect blocks above data block `block`, top level first.
    pub fn parents(&self, block: u64) -> impl Iterator<Item = u64> + '_ {
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
