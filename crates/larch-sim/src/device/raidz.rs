//! RAID-Z: how ZFS lays a block out over the disks of a RAID-Z vdev, and the vdev that
//! reads and writes by that layout.
//!
//! # The layout
//!
//! A RAID-Z vdev of `width` disks with `parity` parity disks (1 to 3) stores each block
//! on its own: a block of `psize` bytes is `s = ceil(psize / sector)` data sectors, laid
//! in rows across `width - parity` data columns, each row with `parity` parity sectors.
//! This is the layout of OpenZFS's `vdev_raidz_map_alloc`, described here in our words:
//!
//! 1. With `d = width - parity`, the block fills `q = s / d` whole rows and `r = s mod d`
//!    sectors of one more. When `r > 0`, the first `r + parity` columns ("big" columns)
//!    hold `q + 1` sectors and the rest `q`; so a block smaller than a row (`q = 0`) uses
//!    only `r + parity` columns, and the other disks hold none of it.
//! 2. The first `parity` columns hold parity, the rest data.
//! 3. The block's allocation starts at sector `b` of the vdev's space; column `c` lies on
//!    disk `(b + c) mod width`, at row `b / width` of that disk, or the row after it when
//!    `b mod width + c` wrapped past the last disk.
//! 4. The allocation is the data and parity sectors, `s + parity * ceil(s / d)`, rounded
//!    up to a multiple of `parity + 1`: the rounding sectors ("skip" sectors) hold nothing
//!    and are neither read nor written here. They keep every free gap large enough for
//!    the smallest block (one data sector and its parity).
//! 5. RAID-Z1 swaps its parity column with the first data column for blocks whose offset
//!    has the 1 MiB bit set, so parity does not always start a row on the same disk.
//!
//! A healthy read reads only the data columns: a small block on a wide vdev touches few
//! disks (an 8 KiB block on a 46-wide RAID-Z2 of 512-byte sectors: 16 of them, one
//! sector each; of 4 KiB sectors: 2). A read of a block with a data column on a failed
//! disk reads every other column, parity included, to rebuild the missing one; a block
//! whose only column on the failed disk is parity reads as a healthy one. A write writes
//! every column but the failed disk's.

use super::disk::{Hdd, HddParams};
use super::{Device, DeviceStats, IoId, IoKind, Joins, Nanos, Queued, SpecError, member_seeds};

/// One column of a block on a RAID-Z vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// The disk, `0..width`.
    pub disk: u32,
    /// Where the column starts on that disk, bytes.
    pub offset_bytes: u64,
    /// The bytes it holds, whole sectors.
    pub bytes: u64,
    /// Whether it holds parity.
    pub parity: bool,
}

/// The shape of a RAID-Z vdev: what a block's layout depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaidZGeometry {
    /// Disks in the vdev.
    pub width: u32,
    /// Parity columns per row, 1 to 3.
    pub parity: u32,
    /// The disks' sector (`1 << ashift`), bytes.
    pub sector_bytes: u64,
}

impl RaidZGeometry {
    /// Data columns per row.
    fn data_columns(&self) -> u64 {
        u64::from(self.width - self.parity)
    }

    /// Data sectors a block of `psize_bytes` takes: whole sectors, at least one.
    pub fn data_sectors(&self, psize_bytes: u64) -> u64 {
        psize_bytes.div_ceil(self.sector_bytes).max(1)
    }

    /// Bytes a block of `psize_bytes` allocates: data and parity sectors, rounded up to a
    /// multiple of `parity + 1` sectors (the skip sectors).
    pub fn asize_bytes(&self, psize_bytes: u64) -> u64 {
        let data = self.data_sectors(psize_bytes);
        let parity = u64::from(self.parity);
        let sectors = data + parity * data.div_ceil(self.data_columns());
        sectors
            .next_multiple_of(parity + 1)
            .saturating_mul(self.sector_bytes)
    }

    /// The columns of a block of `psize_bytes` whose allocation starts at `alloc_bytes` of
    /// the vdev's space (rounded down to a sector), parity columns first, into `out`.
    pub fn columns(&self, alloc_bytes: u64, psize_bytes: u64, out: &mut Vec<Column>) {
        out.clear();
        let width = u64::from(self.width);
        let parity = u64::from(self.parity);
        let data = self.data_sectors(psize_bytes);
        let (rows, rest) = (data / self.data_columns(), data % self.data_columns());
        let big_columns = if rest == 0 { 0 } else { rest + parity };
        let columns = if rows == 0 { big_columns } else { width };
        let start = alloc_bytes / self.sector_bytes;
        let (first_disk, row) = (start % width, start / width);
        for c in 0..columns {
            let (disk, row) = match first_disk + c {
                wrapped if wrapped >= width => (wrapped - width, row + 1),
                disk => (disk, row),
            };
            let sectors = if c < big_columns { rows + 1 } else { rows };
            out.push(Column {
                disk: disk as u32,
                offset_bytes: row.saturating_mul(self.sector_bytes),
                bytes: sectors * self.sector_bytes,
                parity: c < parity,
            });
        }
        if parity == 1 && out.len() > 1 && alloc_bytes & (1 << 20) != 0 {
            let (parity_place, data_place) = (
                (out[0].disk, out[0].offset_bytes),
                (out[1].disk, out[1].offset_bytes),
            );
            (out[0].disk, out[0].offset_bytes) = data_place;
            (out[1].disk, out[1].offset_bytes) = parity_place;
        }
    }
}

/// Whether a read of a block with `columns` must rebuild a data column of `failed`.
fn rebuilds(columns: &[Column], failed: Option<u32>) -> bool {
    failed.is_some_and(|disk| columns.iter().any(|c| !c.parity && c.disk == disk))
}

/// A RAID-Z vdev: `width` disks, `parity` (1 to 3) parity columns per row, blocks laid out
/// as the module documentation describes.
///
/// The simulator gives the vdev one I/O per block, or per run of consecutive blocks it
/// merged (as vdev aggregation does): each I/O is laid out as one block of its length. Its
/// place in the vdev's space is its offset scaled by the block's allocation over its data
/// (`asize / psize`), so blocks of one size at multiples of it tile the space exactly, as
/// ZFS allocates them. An I/O completes when its last column does.
#[derive(Clone, Debug)]
pub struct RaidZ {
    disks: Vec<Hdd>,
    geometry: RaidZGeometry,
    failed: Option<u32>,
    columns: Vec<Column>,
    joins: Joins,
}

impl RaidZ {
    /// A healthy RAID-Z vdev of `width` disks with `params`, `parity` (1 to 3) parity
    /// columns; `width` must be at least `parity + 1`. Member seeds derive from `seed`.
    pub fn new(params: HddParams, width: u32, parity: u32, seed: u64) -> Result<RaidZ, SpecError> {
        if !(1..=3).contains(&parity) {
            return Err(SpecError::bad(
                "parity",
                "1, 2 or 3 (raidz1, raidz2, raidz3)",
                parity,
            ));
        }
        if width <= parity {
            return Err(SpecError::bad(
                "width",
                format!("more than {parity} disks for raidz{parity}"),
                width,
            ));
        }
        params.validate()?;
        let geometry = RaidZGeometry {
            width,
            parity,
            sector_bytes: params.sector_bytes,
        };
        let mut seeds = member_seeds(seed);
        let disks = (0..width)
            .map(|i| Hdd::named(format!("disk{i}"), params.clone(), seeds()))
            .collect();
        Ok(RaidZ {
            disks,
            geometry,
            failed: None,
            columns: Vec::new(),
            joins: Joins::default(),
        })
    }

    /// Marks disk `disk` (`0..width`) failed: from now on it serves no I/O and reads of
    /// blocks with a data column on it read every other column (a degraded vdev).
    pub fn fail_disk(&mut self, disk: u32) -> Result<(), SpecError> {
        if disk >= self.geometry.width {
            return Err(SpecError::bad(
                "failed",
                format!("a disk from 0 to {}", self.geometry.width - 1),
                disk,
            ));
        }
        self.failed = Some(disk);
        Ok(())
    }

    /// The vdev's shape.
    pub fn geometry(&self) -> RaidZGeometry {
        self.geometry
    }

    /// Where an I/O of `len` bytes at `offset` of the vdev's data starts in its allocated
    /// space: the offset scaled by `asize / psize` of that length, down to a sector.
    fn alloc_bytes(&self, offset: u64, len: u64) -> u64 {
        let g = &self.geometry;
        let psize = u128::from(g.data_sectors(len) * g.sector_bytes);
        let scaled = u128::from(offset) * u128::from(g.asize_bytes(len)) / psize;
        let scaled = u64::try_from(scaled).unwrap_or(u64::MAX);
        scaled / g.sector_bytes * g.sector_bytes
    }

    /// Lays out an I/O of `len` bytes at `offset` and hands each column it reads or writes
    /// to `each`, with its disk.
    fn for_each_column(
        &mut self,
        kind: IoKind,
        offset: u64,
        len: u32,
        mut each: impl FnMut(&mut Hdd, usize, u64, u32),
    ) {
        let alloc = self.alloc_bytes(offset, u64::from(len));
        let mut columns = std::mem::take(&mut self.columns);
        self.geometry.columns(alloc, u64::from(len), &mut columns);
        // A healthy read needs the data columns only; a write, or a read that must rebuild
        // a column of the failed disk, every column the living disks hold.
        let every_column = kind == IoKind::Write || rebuilds(&columns, self.failed);
        for column in &columns {
            if Some(column.disk) == self.failed || (column.parity && !every_column) {
                continue;
            }
            let bytes = u32::try_from(column.bytes).unwrap_or(u32::MAX);
            let disk = column.disk as usize;
            each(&mut self.disks[disk], disk, column.offset_bytes, bytes);
        }
        self.columns = columns;
    }
}

impl Device for RaidZ {
    fn submit(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Nanos {
        let mut done = now;
        self.for_each_column(kind, offset, len, |disk, _, at, bytes| {
            done = done.max(disk.submit(now, kind, at, bytes));
        });
        done
    }

    fn queue(&mut self, now: Nanos, kind: IoKind, offset: u64, len: u32) -> Queued {
        let id = self.joins.open(now);
        let mut parts = std::mem::take(&mut self.joins);
        self.for_each_column(kind, offset, len, |disk, index, at, bytes| {
            parts.part(id, index, disk.queue(now, kind, at, bytes));
        });
        self.joins = parts;
        self.joins.close(id)
    }

    fn decide(&mut self, until: Nanos, decided: &mut Vec<(IoId, Nanos)>) {
        self.joins.decide(&mut self.disks, until, decided);
    }

    fn next_start_ns(&self) -> Option<Nanos> {
        self.joins.next_start_ns(&self.disks)
    }

    fn capacity_bytes(&self) -> u64 {
        self.disks[0]
            .params()
            .capacity_bytes
            .saturating_mul(self.geometry.data_columns())
    }

    fn describe(&self) -> String {
        let failed = match self.failed {
            Some(disk) => format!(", disk{disk} failed"),
            None => String::new(),
        };
        format!(
            "{}-wide RAID-Z{} of {}{failed}",
            self.geometry.width,
            self.geometry.parity,
            self.disks[0].params().describe()
        )
    }

    fn stats(&self) -> Vec<DeviceStats> {
        self.disks.iter().map(|disk| disk.stats.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    fn geometry(width: u32, parity: u32, sector_bytes: u64) -> RaidZGeometry {
        RaidZGeometry {
            width,
            parity,
            sector_bytes,
        }
    }

    /// (parity columns, data columns, bytes of the largest column) of a block.
    fn shape(g: &RaidZGeometry, alloc_bytes: u64, psize: u64) -> (usize, usize, u64) {
        let mut columns = Vec::new();
        g.columns(alloc_bytes, psize, &mut columns);
        let parity = columns.iter().filter(|c| c.parity).count();
        let largest = columns.iter().map(|c| c.bytes).max().unwrap_or(0);
        (parity, columns.len() - parity, largest)
    }

    #[test]
    fn columns_by_block_size_and_width() {
        // 46-wide RAID-Z2, 512-byte sectors: 8K is 16 data sectors, less than a row of 44,
        // so 16 data columns of one sector and 2 parity columns; 18 sectors are already a
        // multiple of 3, no skip sector.
        let z2 = geometry(46, 2, 512);
        assert_eq!(shape(&z2, 0, 8 * K), (2, 16, 512));
        assert_eq!(z2.asize_bytes(8 * K), 18 * 512);
        // 4K sectors: 2 data sectors, 2 data columns and 2 parity, rounded to 6 sectors.
        let z2_4k = geometry(46, 2, 4096);
        assert_eq!(shape(&z2_4k, 0, 8 * K), (2, 2, 4096));
        assert_eq!(z2_4k.asize_bytes(8 * K), 6 * 4096);
        // 128K, 512-byte sectors: 256 sectors = 5 rows of 44 and 36 more, so every column
        // is used; the first 36 + 2 hold 6 sectors. 256 + 2 x 6 = 268 sectors, rounded up
        // to 270.
        assert_eq!(shape(&z2, 0, 128 * K), (2, 44, 6 * 512));
        assert_eq!(z2.asize_bytes(128 * K), 270 * 512);
        // 128K, 4K sectors: 32 data columns of one sector, 34 rounded up to 36.
        assert_eq!(shape(&z2_4k, 0, 128 * K), (2, 32, 4096));
        assert_eq!(z2_4k.asize_bytes(128 * K), 36 * 4096);
        // A narrow vdev: 6-wide RAID-Z2, 8K of 512-byte sectors: 4 rows of 4 exactly, every
        // column 4 sectors, 16 + 8 = 24 sectors.
        let narrow = geometry(6, 2, 512);
        assert_eq!(shape(&narrow, 0, 8 * K), (2, 4, 4 * 512));
        assert_eq!(narrow.asize_bytes(8 * K), 24 * 512);
        // RAID-Z1 of 5, one 512-byte sector: 1 data and 1 parity, already a multiple of 2.
        let z1 = geometry(5, 1, 512);
        assert_eq!(shape(&z1, 0, 512), (1, 1, 512));
        assert_eq!(z1.asize_bytes(512), 1024);
        // RAID-Z3 of 8, 4K sectors, 16K: 4 data + 3 parity = 7, rounded up to 8.
        assert_eq!(geometry(8, 3, 4096).asize_bytes(16 * K), 8 * 4096);
    }

    #[test]
    fn columns_start_at_the_allocation_and_wrap_to_the_next_row() {
        let g = geometry(46, 2, 512);
        let mut columns = Vec::new();
        // Sector 46 * 10 + 40: disk 40 of row 10; 18 columns run to disk 45, then wrap to
        // disks 0..11 of row 11.
        g.columns((46 * 10 + 40) * 512, 8 * K, &mut columns);
        assert_eq!(columns.len(), 18);
        assert_eq!((columns[0].disk, columns[0].offset_bytes), (40, 10 * 512));
        assert!(columns[0].parity && columns[1].parity && !columns[2].parity);
        assert_eq!((columns[5].disk, columns[5].offset_bytes), (45, 10 * 512));
        assert_eq!((columns[6].disk, columns[6].offset_bytes), (0, 11 * 512));
        assert_eq!(columns[17].disk, 11);
        let mut disks: Vec<u32> = columns.iter().map(|c| c.disk).collect();
        disks.sort_unstable();
        disks.dedup();
        assert_eq!(disks.len(), 18, "every column on its own disk");
    }

    #[test]
    fn raidz1_swaps_parity_on_odd_megabytes() {
        let g = geometry(5, 1, 512);
        let mut even = Vec::new();
        let mut odd = Vec::new();
        g.columns(0, 2 * K, &mut even);
        g.columns(1 << 20, 2 * K, &mut odd);
        // 1 MiB is sector 2048, disk 2048 mod 5 = 3 first.
        assert_eq!((even[0].disk, even[1].disk), (0, 1));
        assert_eq!((odd[0].disk, odd[1].disk), (4, 3));
        assert!(odd[0].parity);
    }

    /// Reads, writes and bytes by disk after one I/O of `len` at 0 on `raidz`.
    fn one_io(raidz: &mut RaidZ, kind: IoKind, len: u32) -> (u64, u64) {
        raidz.submit(0, kind, 0, len);
        let stats = raidz.stats();
        let ios: u64 = stats.iter().map(|s| s.reads + s.writes).sum();
        let bytes: u64 = stats.iter().map(|s| s.read_bytes + s.write_bytes).sum();
        (ios, bytes)
    }

    #[test]
    fn healthy_reads_touch_the_data_columns_and_degraded_reads_every_column() {
        let params = HddParams::default();
        let mut healthy = RaidZ::new(params.clone(), 46, 2, 1).unwrap();
        assert_eq!(one_io(&mut healthy, IoKind::Read, 8192), (16, 8192));
        let mut writes = RaidZ::new(params.clone(), 46, 2, 1).unwrap();
        assert_eq!(one_io(&mut writes, IoKind::Write, 8192), (18, 18 * 512));

        // The block at 0 lies on disks 0..18, parity on 0 and 1. Disk 5 holds data: a read
        // rebuilds it from the 17 other columns, parity included.
        let mut degraded = RaidZ::new(params.clone(), 46, 2, 1).unwrap();
        degraded.fail_disk(5).unwrap();
        assert_eq!(one_io(&mut degraded, IoKind::Read, 8192), (17, 17 * 512));
        assert_eq!(degraded.stats()[5].reads, 0);
        // Disk 1 holds only parity of this block: the read needs no rebuild.
        let mut parity_lost = RaidZ::new(params.clone(), 46, 2, 1).unwrap();
        parity_lost.fail_disk(1).unwrap();
        assert_eq!(one_io(&mut parity_lost, IoKind::Read, 8192), (16, 8192));
        // Disk 30 holds nothing of it.
        let mut elsewhere = RaidZ::new(params.clone(), 46, 2, 1).unwrap();
        elsewhere.fail_disk(30).unwrap();
        assert_eq!(one_io(&mut elsewhere, IoKind::Read, 8192), (16, 8192));
        assert!(elsewhere.fail_disk(46).is_err());

        // 4K sectors: 2 data columns; degraded, the other data column and both parity.
        let sector_4k = HddParams {
            sector_bytes: 4096,
            ..params
        };
        let mut wide_sectors = RaidZ::new(sector_4k.clone(), 46, 2, 1).unwrap();
        assert_eq!(one_io(&mut wide_sectors, IoKind::Read, 8192), (2, 8192));
        let mut wide_degraded = RaidZ::new(sector_4k, 46, 2, 1).unwrap();
        wide_degraded.fail_disk(2).unwrap();
        assert_eq!(
            one_io(&mut wide_degraded, IoKind::Read, 8192),
            (3, 3 * 4096)
        );
    }

    #[test]
    fn blocks_of_one_size_tile_the_allocated_space() {
        let raidz = RaidZ::new(HddParams::default(), 46, 2, 1).unwrap();
        // 8K blocks allocate 18 sectors each: block k starts at sector 18 k.
        assert_eq!(raidz.alloc_bytes(0, 8192), 0);
        assert_eq!(raidz.alloc_bytes(8192, 8192), 18 * 512);
        assert_eq!(raidz.alloc_bytes(1000 * 8192, 8192), 18_000 * 512);
        assert_eq!(raidz.alloc_bytes(u64::MAX, 8192), u64::MAX / 512 * 512);
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(RaidZ::new(HddParams::default(), 2, 2, 0).is_err());
        assert!(RaidZ::new(HddParams::default(), 8, 4, 0).is_err());
    }
}
