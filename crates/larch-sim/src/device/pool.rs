//! A pool of vdevs: the primary storage, striped across its vdevs as ZFS does.

use super::disk::{Hdd, HddParams, Mirror};
use super::raidz::RaidZ;
use super::{
    Device, DeviceStats, IoId, IoKind, Joins, MIN_PIECE_BYTES, Nanos, Queued, SpecError,
    member_seeds,
};

/// The chunk a pool writes to one vdev before moving to the next, in bytes. ZFS moves on
/// after `metaslab_aliquot` bytes: 512 KiB in the 2009 code of seed 000's era, 1 MiB in
/// OpenZFS today; the model takes today's figure.
pub const DEFAULT_CHUNK_BYTES: u64 = 1 << 20;

/// How a pool built by [`Pool::from_disks`] groups its disks into vdevs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Every disk is a vdev of its own (no redundancy).
    Stripe,
    /// Mirrors of `sides` disks each.
    Mirror {
        /// Disks per mirror, at least 2.
        sides: u32,
    },
    /// RAID-Z vdevs of `width` disks, `parity` of them parity (RAID-Z2 has 2).
    RaidZ {
        /// Parity disks per stripe, 1 to 3.
        parity: u32,
        /// Disks per vdev, more than `parity`.
        width: u32,
        /// The disk (`0..width`) that has failed in every vdev, or `None` for healthy
        /// vdevs: reads of blocks with data on it read every other column.
        failed: Option<u32>,
    },
}

impl Layout {
    /// Disks per vdev.
    pub fn disks_per_vdev(self) -> u32 {
        match self {
            Layout::Stripe => 1,
            Layout::Mirror { sides } => sides,
            Layout::RaidZ { width, .. } => width,
        }
    }
}

/// A pool of vdevs, striped in chunks: chunk `c` of the pool's address space lies on vdev
/// `c % n` at chunk `c / n` of that vdev. The volume's blocks therefore lie from the start
/// of every vdev, and a small working set occupies a narrow band of each disk: seed 000's
/// 500 GB over 70 mirrors is about 7 GB per disk, 0.7% of a 1 TB disk, so the disks seek
/// short distances. A request spanning chunks is split and completes when all parts do.
///
/// This is ZFS's dynamic striping in its simplest steady state: allocation rotates over the
/// vdevs, each receiving one chunk in turn, with no weighting by free space.
pub struct Pool {
    vdevs: Vec<Box<dyn Device>>,
    chunk_bytes: u64,
    vdev_capacity_bytes: u64,
    spares: u32,
    description: String,
    joins: Joins,
}

/// The primary storage of a simulated server is a [`Pool`].
pub type Primary = Pool;

impl Pool {
    /// A pool striping over `vdevs` in chunks of `chunk_bytes`. Every vdev is used up to the
    /// capacity of the smallest, as ZFS spreads allocations evenly in this model.
    pub fn new(vdevs: Vec<Box<dyn Device>>, chunk_bytes: u64) -> Result<Pool, SpecError> {
        let Some(smallest) = vdevs.iter().map(|vdev| vdev.capacity_bytes()).min() else {
            return Err(SpecError::bad("vdevs", "at least one vdev", 0));
        };
        if chunk_bytes < MIN_PIECE_BYTES || chunk_bytes > smallest {
            return Err(SpecError::bad(
                "chunk",
                format!(
                    "a size from {MIN_PIECE_BYTES} bytes to a vdev's capacity ({smallest} bytes)"
                ),
                chunk_bytes,
            ));
        }
        let description = describe_vdevs(&vdevs);
        Ok(Pool {
            vdev_capacity_bytes: smallest / chunk_bytes * chunk_bytes,
            vdevs,
            chunk_bytes,
            spares: 0,
            description,
            joins: Joins::default(),
        })
    }

    /// A pool of `disks` disks with `hdd`, grouped by `layout`; disks left over after the
    /// last whole vdev are spares, which hold no data and serve no I/O (ZFS uses a spare only
    /// when a disk fails, and the model has no failures). Member seeds derive from `seed`.
    pub fn from_disks(
        disks: u32,
        layout: Layout,
        hdd: HddParams,
        chunk_bytes: u64,
        seed: u64,
    ) -> Result<Pool, SpecError> {
        let per_vdev = layout.disks_per_vdev();
        if disks < per_vdev.max(1) {
            return Err(SpecError::bad(
                "count",
                format!("at least {per_vdev} disks for one vdev of this layout"),
                disks,
            ));
        }
        let vdev_count = disks / per_vdev;
        let mut seeds = member_seeds(seed);
        let mut vdevs: Vec<Box<dyn Device>> = Vec::with_capacity(vdev_count as usize);
        for _ in 0..vdev_count {
            vdevs.push(match layout {
                Layout::Stripe => Box::new(Hdd::new(hdd.clone(), seeds())?),
                Layout::Mirror { sides } => Box::new(Mirror::new(hdd.clone(), sides, seeds())?),
                Layout::RaidZ {
                    parity,
                    width,
                    failed,
                } => {
                    let mut raidz = RaidZ::new(hdd.clone(), width, parity, seeds())?;
                    if let Some(disk) = failed {
                        raidz.fail_disk(disk)?;
                    }
                    Box::new(raidz)
                }
            });
        }
        let mut pool = Pool::new(vdevs, chunk_bytes)?;
        pool.spares = disks % per_vdev;
        pool.description = describe_disks(disks, layout, &hdd, pool.spares);
        Ok(pool)
    }

    /// Seed 000's primary storage: 140 1 TB 7,200 rpm disks in 70 two-way mirrors.
    pub fn seed000_mirrors(seed: u64) -> Pool {
        Pool::from_disks(
            140,
            Layout::Mirror { sides: 2 },
            HddParams::default(),
            DEFAULT_CHUNK_BYTES,
            seed,
        )
        .expect("the seed 000 mirror layout is valid")
    }

    /// Seed 000's second configuration: 2 JBODs of 24 disks (48) as one 46-wide RAID-Z2
    /// stripe and 2 spares. The seed says "48 disks configured with RAID-Z2 (double parity)
    /// and wide stripes (46 disks wide)"; 46 of 48 in one vdev leaves 2, which the 7410 kept
    /// as spares.
    pub fn seed000_raidz2(seed: u64) -> Pool {
        Pool::from_disks(
            48,
            Layout::RaidZ {
                parity: 2,
                width: 46,
                failed: None,
            },
            HddParams::default(),
            DEFAULT_CHUNK_BYTES,
            seed,
        )
        .expect("the seed 000 RAID-Z2 layout is valid")
    }

    /// Seed 002's primary storage: "142 HDDs in 71 mirror vdevs". The talk does not give the
    /// disks; the model assumes the same 7,200 rpm disks as seed 000.
    pub fn seed002_mirrors(seed: u64) -> Pool {
        Pool::from_disks(
            142,
            Layout::Mirror { sides: 2 },
            HddParams::default(),
            DEFAULT_CHUNK_BYTES,
            seed,
        )
        .expect("the seed 002 mirror layout is valid")
    }

    /// The number of vdevs data is striped over.
    pub fn vdev_count(&self) -> usize {
        self.vdevs.len()
    }

    /// Disks left over as spares.
    pub fn spares(&self) -> u32 {
        self.spares
    }

    /// Where a pool offset lies: the vdev, the offset on it, and the bytes left in its chunk.
    fn locate(&self, offset: u64) -> (usize, u64, u64) {
        let n = self.vdevs.len() as u64;
        let chunk = offset / self.chunk_bytes;
        let within = offset % self.chunk_bytes;
        let vdev_offset = (chunk / n)
            .saturating_mul(self.chunk_bytes)
            .saturating_add(within);
        ((chunk % n) as usize, vdev_offset, self.chunk_bytes - within)
    }

    /// Cuts an I/O of `len` bytes at `offset` at the chunks' edges and hands each part to
    /// `each` with its vdev: at least one part, so a zero-length request still reaches one.
    fn for_each_part(
        &mut self,
        offset: u64,
        len: u32,
        mut each: impl FnMut(&mut Box<dyn Device>, usize, u64, u32),
    ) {
        let end = offset.saturating_add(u64::from(len));
        let mut position = offset;
        loop {
            let (vdev, vdev_offset, left_in_chunk) = self.locate(position);
            let part = left_in_chunk.min(end - position);
            // A part is at most the request's length, which is a u32.
            each(&mut self.vdevs[vdev], vdev, vdev_offset, part as u32);
            position += part;
            if position >= end {
                break;
            }
        }
    }
}

impl Device for Pool {
    fn submit(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Nanos {
        let mut done = now;
        self.for_each_part(offset, len, |vdev, _, at, part_len| {
            done = done.max(vdev.submit(now, kind, at, part_len));
        });
        done
    }

    fn queue(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Queued {
        let id = self.joins.open(now);
        let mut parts = std::mem::take(&mut self.joins);
        self.for_each_part(offset, len, |vdev, index, at, part_len| {
            parts.part(id, index, vdev.queue(now, kind, at, part_len));
        });
        self.joins = parts;
        self.joins.close(id)
    }

    fn decide(&mut self, until: Nanos, decided: &mut Vec<(IoId, Nanos)>) {
        self.joins.decide(&mut self.vdevs, until, decided);
    }

    fn next_start_ns(&self) -> Option<Nanos> {
        self.joins.next_start_ns(&self.vdevs)
    }

    fn capacity_bytes(&self) -> u64 {
        self.vdev_capacity_bytes
            .saturating_mul(self.vdevs.len() as u64)
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn stats(&self) -> Vec<DeviceStats> {
        let mut all = Vec::new();
        for (index, vdev) in self.vdevs.iter().enumerate() {
            for member in vdev.stats() {
                all.push(DeviceStats {
                    name: format!("vdev{index}/{}", member.name),
                    ..member
                });
            }
        }
        // Spares are disks of the array too; they report no I/O, which is the point.
        all.extend((0..self.spares).map(|i| DeviceStats::named(format!("spare{i}"))));
        all
    }
}

/// "140 x 7200 rpm 1 TB HDD in 70 2-way mirrors", "48 x ... in 1 46-wide RAID-Z2, 2 spares".
fn describe_disks(disks: u32, layout: Layout, hdd: &HddParams, spares: u32) -> String {
    let vdevs = disks / layout.disks_per_vdev();
    let grouping = match layout {
        Layout::Stripe => "striped".to_string(),
        Layout::Mirror { sides } => format!("in {vdevs} {sides}-way mirror{}", plural(vdevs)),
        Layout::RaidZ {
            parity,
            width,
            failed: None,
        } => format!("in {vdevs} {width}-wide RAID-Z{parity}"),
        Layout::RaidZ {
            parity,
            width,
            failed: Some(disk),
        } => format!("in {vdevs} {width}-wide RAID-Z{parity}, disk{disk} of each failed"),
    };
    let spares = match spares {
        0 => String::new(),
        n => format!(", {n} spare{} (unused)", plural(n)),
    };
    format!("{disks} x {} {grouping}{spares}", hdd.describe())
}

/// "3 x (2-way mirror of ...)" when the vdevs are alike, their descriptions joined otherwise.
fn describe_vdevs(vdevs: &[Box<dyn Device>]) -> String {
    let descriptions: Vec<String> = vdevs.iter().map(|vdev| vdev.describe()).collect();
    if descriptions.iter().all(|d| *d == descriptions[0]) {
        format!("pool of {} x ({})", descriptions.len(), descriptions[0])
    } else {
        format!("pool of {}", descriptions.join("; "))
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_rotate_over_the_vdevs() {
        let pool = Pool::from_disks(
            4,
            Layout::Stripe,
            HddParams::default(),
            DEFAULT_CHUNK_BYTES,
            1,
        )
        .unwrap();
        let mib = 1 << 20;
        assert_eq!(pool.locate(0), (0, 0, mib));
        assert_eq!(pool.locate(mib + 5), (1, 5, mib - 5));
        assert_eq!(pool.locate(4 * mib), (0, mib, mib));
    }

    #[test]
    fn a_request_spanning_chunks_is_split() {
        let mut pool = Pool::from_disks(
            4,
            Layout::Stripe,
            HddParams::default(),
            DEFAULT_CHUNK_BYTES,
            1,
        )
        .unwrap();
        pool.submit(0, IoKind::Read, (1 << 20) - 4096, 8192);
        let reads: Vec<u64> = pool.stats().iter().map(|s| s.reads).collect();
        assert_eq!(reads, [1, 1, 0, 0]);
        let bytes: Vec<u64> = pool.stats().iter().map(|s| s.read_bytes).collect();
        assert_eq!(bytes, [4096, 4096, 0, 0]);
    }

    #[test]
    fn seed_layouts_describe_themselves() {
        assert_eq!(
            Pool::seed000_mirrors(0).describe(),
            "140 x 7200 rpm 1 TB HDD in 70 2-way mirrors"
        );
        let raidz = Pool::seed000_raidz2(0);
        assert_eq!(
            raidz.describe(),
            "48 x 7200 rpm 1 TB HDD in 1 46-wide RAID-Z2, 2 spares (unused)"
        );
        assert_eq!(raidz.stats().len(), 48);
        assert_eq!(
            raidz.capacity_bytes(),
            44_000_000_000_000 / (1 << 20) * (1 << 20)
        );
        assert_eq!(Pool::seed002_mirrors(0).vdev_count(), 71);
    }

    #[test]
    fn a_chunk_larger_than_a_vdev_is_an_error() {
        let error = Pool::from_disks(
            2,
            Layout::Stripe,
            HddParams {
                capacity_bytes: 4096,
                ..HddParams::default()
            },
            DEFAULT_CHUNK_BYTES,
            0,
        )
        .err()
        .unwrap();
        assert!(error.to_string().starts_with("chunk: expected"), "{error}");
    }
}
