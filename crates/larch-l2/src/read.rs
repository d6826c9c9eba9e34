//! Reading a cached record back: the one place its bytes are checked before anyone uses
//! them. Whoever does the I/O (a blocking read here, or the engine's io_uring), the bytes
//! pass through [`verify_copy`], so every path verifies and fails alike.

use larch_format::LogEntryPhys;
use larch_io::{AlignedBuf, BlockDevice, IoError};

use crate::Geometry;

/// What a reader needs to know of one cached record: where it lies, how long it is, and
/// what its bytes must hash to (xxh3-64, from its log entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyRef {
    /// Device offset of the record.
    pub daddr: u64,
    /// Bytes of the record (its physical size).
    pub size_bytes: u32,
    /// xxh3-64 of those bytes.
    pub checksum: u64,
}

impl CopyRef {
    /// The record a log entry describes.
    pub fn of(entry: &LogEntryPhys) -> CopyRef {
        CopyRef {
            daddr: entry.daddr,
            size_bytes: entry.physical_size,
            checksum: entry.data_checksum,
        }
    }

    /// Bytes to read for it: its size rounded up to the ring's sectors.
    pub fn read_len(&self, geo: &Geometry) -> usize {
        geo.asize(u64::from(self.size_bytes)) as usize
    }

    /// Checks that the record lies inside the ring of `geo`.
    pub fn check_range(&self, geo: &Geometry) -> Result<(), ReadError> {
        let end = self.daddr.checked_add(self.read_len(geo) as u64);
        if self.daddr < geo.ring_start || end.is_none_or(|end| end > geo.ring_end) {
            return Err(ReadError::OutOfRange {
                daddr: self.daddr,
                size_bytes: self.size_bytes,
            });
        }
        Ok(())
    }
}

/// Why a cached record could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The device failed (`l2_io_error`).
    #[error("{0}")]
    Io(#[from] IoError),
    /// The bytes do not match the entry's checksum (`l2_cksum_bad`).
    #[error("record at daddr {daddr} fails its checksum")]
    Checksum {
        /// Where it was read.
        daddr: u64,
    },
    /// Fewer bytes came back than the record has (`l2_io_error`).
    #[error("record at daddr {daddr}: {got} bytes read of {size_bytes}")]
    Short {
        /// Where it was read.
        daddr: u64,
        /// Bytes the record has.
        size_bytes: u32,
        /// Bytes read.
        got: usize,
    },
    /// The record does not lie inside the ring: the reference is wrong, not the device.
    #[error("record of {size_bytes} bytes at daddr {daddr} is outside the ring")]
    OutOfRange {
        /// Where it was said to be.
        daddr: u64,
        /// Its size.
        size_bytes: u32,
    },
}

impl ReadError {
    /// Whether the bytes came back and were wrong (`l2_cksum_bad`), as opposed to not
    /// coming back whole (`l2_io_error`).
    pub fn is_checksum(&self) -> bool {
        matches!(self, ReadError::Checksum { .. })
    }
}

/// Checks bytes read for `copy`: at least its size, and the first `size_bytes` of them
/// hash to its checksum. The record is `read[..copy.size_bytes]`.
pub fn verify_copy(copy: &CopyRef, read: &[u8]) -> Result<(), ReadError> {
    let size = copy.size_bytes as usize;
    let Some(bytes) = read.get(..size) else {
        return Err(ReadError::Short {
            daddr: copy.daddr,
            size_bytes: copy.size_bytes,
            got: read.len(),
        });
    };
    if larch_format::checksum(bytes) != copy.checksum {
        return Err(ReadError::Checksum { daddr: copy.daddr });
    }
    Ok(())
}

/// Reads `copy` from `dev` (blocking) and verifies it. Returns the sector-aligned buffer
/// that was read; the record is its first `copy.size_bytes` bytes.
pub fn read_copy(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    copy: &CopyRef,
) -> Result<AlignedBuf, ReadError> {
    copy.check_range(geo)?;
    let mut buf = AlignedBuf::zeroed(copy.read_len(geo));
    dev.read_at(&mut buf, copy.daddr)?;
    verify_copy(copy, &buf)?;
    Ok(buf)
}

/// Reads the record a log entry describes and verifies it (tools and tests). Returns
/// exactly `physical_size` bytes.
pub fn read_verified(
    dev: &dyn BlockDevice,
    geo: &Geometry,
    entry: &LogEntryPhys,
) -> Result<Vec<u8>, ReadError> {
    let copy = CopyRef::of(entry);
    let buf = read_copy(dev, geo, &copy)?;
    Ok(buf[..copy.size_bytes as usize].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use larch_io::MemDevice;

    fn geo() -> Geometry {
        Geometry::for_device(4 << 20, 4096).unwrap()
    }

    #[test]
    fn a_copy_is_verified_whoever_reads_it() {
        let geo = geo();
        let dev = MemDevice::new(4 << 20);
        let record = vec![0x5au8; 5000];
        let daddr = geo.ring_start + 8192;
        dev.write_at(&record, daddr).unwrap();
        let copy = CopyRef {
            daddr,
            size_bytes: 5000,
            checksum: larch_format::checksum(&record),
        };
        let buf = read_copy(&dev, &geo, &copy).unwrap();
        assert_eq!(buf.len(), 8192, "whole sectors are read");
        assert_eq!(&buf[..5000], &record[..]);
        // The same check on bytes read elsewhere (io_uring): short, then wrong.
        assert!(matches!(
            verify_copy(&copy, &buf[..4096]),
            Err(ReadError::Short { got: 4096, .. })
        ));
        let mut bad = buf.to_vec();
        bad[17] ^= 1;
        let err = verify_copy(&copy, &bad).unwrap_err();
        assert!(err.is_checksum(), "{err}");
        // A reference outside the ring is refused before any I/O.
        let outside = CopyRef {
            daddr: geo.ring_end - 4096,
            ..copy
        };
        assert!(matches!(
            read_copy(&dev, &geo, &outside),
            Err(ReadError::OutOfRange { .. })
        ));
        let header = CopyRef { daddr: 0, ..copy };
        assert!(read_copy(&dev, &geo, &header).is_err());
    }
}
