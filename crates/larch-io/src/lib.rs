//! Block I/O for larch: a small [`BlockDevice`] trait and three implementations.
//!
//! - [`FileDevice`]: a regular file or a block device, opened with `O_DIRECT` when the
//!   kernel and file system allow it so the page cache cannot hide the device, and with
//!   buffered I/O otherwise (also from the first read or write the file system refuses
//!   with `O_DIRECT`, for good). Unaligned requests go through an aligned bounce buffer.
//! - [`MemDevice`]: a byte vector, for tests and the simulator.
//! - [`FaultyDevice`]: an in-memory device that models a volatile write cache. Writes
//!   land in a pending list that only [`BlockDevice::flush`] makes durable, and
//!   [`FaultyDevice::crash`] models a power cut: pending writes are dropped, applied in
//!   part, or torn at sector granularity. It also injects I/O errors on chosen ranges.
//!
//! Every method takes `&self` so one device can be shared by threads (the feeder writes
//! while the rebuild or readers read).

#![warn(missing_docs)]

mod aligned;
mod faulty;
mod file;
mod mem;

pub use aligned::{AlignedBuf, BUF_ALIGN_BYTES};
pub use faulty::{CrashMode, FaultyDevice, FaultyStats};
pub use file::{FileDevice, FileOptions};
pub use mem::MemDevice;

/// The smallest unit a device reads or writes atomically, as larch assumes it (bytes).
pub const SECTOR_BYTES: u64 = 512;

/// Errors of a block device. They are operating errors (the device failed or the
/// request does not fit it), never bugs of the caller's memory.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The operating system reported an error.
    #[error("{op} at offset {offset_bytes} length {len_bytes}: {source}")]
    Os {
        /// What was attempted (`read`, `write`, `flush`, `open`, ...).
        op: &'static str,
        /// Byte offset of the request.
        offset_bytes: u64,
        /// Length of the request in bytes.
        len_bytes: u64,
        /// The error from the operating system.
        #[source]
        source: std::io::Error,
    },
    /// The request reaches past the end of the device.
    #[error(
        "{op} at offset {offset_bytes} length {len_bytes} is past the device end {device_bytes}"
    )]
    OutOfRange {
        /// What was attempted.
        op: &'static str,
        /// Byte offset of the request.
        offset_bytes: u64,
        /// Length of the request in bytes.
        len_bytes: u64,
        /// Size of the device in bytes.
        device_bytes: u64,
    },
    /// A fault injected by [`FaultyDevice`].
    #[error("injected {op} error at offset {offset_bytes} length {len_bytes}")]
    Injected {
        /// What was attempted.
        op: &'static str,
        /// Byte offset of the request.
        offset_bytes: u64,
        /// Length of the request in bytes.
        len_bytes: u64,
    },
}

/// A byte-addressed device: a cache device, a log device or a backing store.
///
/// Reads and writes are positional and may be issued from several threads at once.
/// Nothing written is durable until `flush` returns `Ok`; a failed flush leaves the
/// durability of every write since the last good flush unknown, and callers must treat
/// the device as poisoned rather than retry.
pub trait BlockDevice: Send + Sync {
    /// Fills `buf` with the bytes at `offset_bytes`.
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError>;
    /// Writes `buf` at `offset_bytes`.
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError>;
    /// Makes every write that returned before this call durable.
    fn flush(&self) -> Result<(), IoError>;
    /// Size of the device in bytes.
    fn len_bytes(&self) -> u64;
    /// Tells the device that a range no longer holds useful data (TRIM). The default does
    /// nothing, which is always correct: discard is a hint.
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        let _ = (offset_bytes, len_bytes);
        Ok(())
    }
    /// The alignment (bytes) at which requests avoid extra copies or read-modify-write.
    fn alignment_bytes(&self) -> u64 {
        SECTOR_BYTES
    }
    /// The file descriptor behind the device, for callers that submit their own reads
    /// (io_uring), which must then follow [`BlockDevice::alignment_bytes`]. `None` (the
    /// default) when reads must go through [`BlockDevice::read_at`]: memory and
    /// fault-injecting devices.
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// How I/O reaches a file or block device: `O_DIRECT`, or `buffered (why)` when it
    /// goes through the page cache (a file system that refused `O_DIRECT`, at open or at
    /// a read or write). `None` (the default) for devices that are neither: memory and
    /// fault-injecting ones.
    fn io_mode(&self) -> Option<String> {
        None
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<T> {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        (**self).read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        (**self).write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        (**self).flush()
    }
    fn len_bytes(&self) -> u64 {
        (**self).len_bytes()
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        (**self).discard(offset_bytes, len_bytes)
    }
    fn alignment_bytes(&self) -> u64 {
        (**self).alignment_bytes()
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        (**self).raw_fd()
    }
    fn io_mode(&self) -> Option<String> {
        (**self).io_mode()
    }
}

/// Checks that `[offset_bytes, offset_bytes + len)` lies inside a device of
/// `device_bytes`, without overflow.
pub(crate) fn check_range(
    op: &'static str,
    offset_bytes: u64,
    len: usize,
    device_bytes: u64,
) -> Result<(), IoError> {
    let len_bytes = len as u64;
    match offset_bytes.checked_add(len_bytes) {
        Some(end) if end <= device_bytes => Ok(()),
        _ => Err(IoError::OutOfRange {
            op,
            offset_bytes,
            len_bytes,
            device_bytes,
        }),
    }
}
