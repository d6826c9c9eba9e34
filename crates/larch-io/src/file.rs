//! A regular file or block device, with `O_DIRECT` when the system allows it.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::aligned::{AlignedBuf, BUF_ALIGN_BYTES};
use crate::{BlockDevice, IoError, check_range};

/// How to open a [`FileDevice`].
#[derive(Clone, Debug)]
pub struct FileOptions {
    /// Try `O_DIRECT` first (the default). If the open fails (tmpfs, some overlay file
    /// systems), the device falls back to buffered I/O; [`FileDevice::is_direct`] tells
    /// which one is in use.
    pub direct: bool,
    /// Open read-only (for `larch dump`).
    pub read_only: bool,
    /// Create the file if missing and set its length to this many bytes. Ignored for
    /// block devices, whose size is fixed.
    pub create_len_bytes: Option<u64>,
}

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            direct: true,
            read_only: false,
            create_len_bytes: None,
        }
    }
}

/// A file or block device used through positional reads and writes.
///
/// With `O_DIRECT`, offsets, lengths and memory must be aligned to
/// [`FileDevice::alignment_bytes`]; requests that are not are widened to aligned ranges
/// through a bounce buffer (an unaligned write becomes read-modify-write, which is not
/// atomic with respect to another writer of the same sectors). larch's own writes are
/// aligned and use [`AlignedBuf`], so they pay for neither.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    len_bytes: u64,
    direct: bool,
    block_device: bool,
}

/// `BLKDISCARD` from `linux/fs.h`: `_IO(0x12, 119)`.
const BLKDISCARD: libc::c_ulong = 0x1277;

/// 4 KiB: the alignment `O_DIRECT` needs on every common device, so it is used whatever
/// the logical sector size is.
const DIRECT_ALIGN_BYTES: u64 = BUF_ALIGN_BYTES as u64;

impl FileDevice {
    /// Opens (and with `create_len_bytes`, creates and sizes) the file at `path`.
    pub fn open(path: impl AsRef<Path>, options: &FileOptions) -> Result<Self, IoError> {
        let path = path.as_ref().to_path_buf();
        let os_err = |op, source| IoError::Os {
            op,
            offset_bytes: 0,
            len_bytes: 0,
            source,
        };
        let mut open_options = OpenOptions::new();
        open_options.read(true).write(!options.read_only);
        if options.create_len_bytes.is_some() && !options.read_only {
            open_options.create(true);
        }
        let mut direct = false;
        let file = if options.direct {
            let mut with_direct = open_options.clone();
            with_direct.custom_flags(libc::O_DIRECT);
            match with_direct.open(&path) {
                Ok(file) => {
                    direct = true;
                    file
                }
                // EINVAL is how file systems without O_DIRECT support refuse it.
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                    open_options.open(&path).map_err(|e| os_err("open", e))?
                }
                Err(err) => return Err(os_err("open", err)),
            }
        } else {
            open_options.open(&path).map_err(|e| os_err("open", e))?
        };
        let metadata = file.metadata().map_err(|e| os_err("stat", e))?;
        if let Some(len) = options.create_len_bytes
            && metadata.is_file()
            && !options.read_only
            && metadata.len() != len
        {
            file.set_len(len).map_err(|e| os_err("set_len", e))?;
        }
        // Seeking to the end gives the size of regular files and block devices alike.
        let len_bytes = (&file)
            .seek(SeekFrom::End(0))
            .map_err(|e| os_err("seek", e))?;
        Ok(Self {
            file,
            path,
            len_bytes,
            direct,
            block_device: metadata.file_type().is_block_device(),
        })
    }

    /// Whether the device is open with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The path the device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn os(op: &'static str, offset_bytes: u64, len: usize, source: std::io::Error) -> IoError {
        IoError::Os {
            op,
            offset_bytes,
            len_bytes: len as u64,
            source,
        }
    }

    fn is_aligned(&self, ptr: *const u8, offset_bytes: u64, len: usize) -> bool {
        !self.direct
            || ((ptr as usize).is_multiple_of(BUF_ALIGN_BYTES)
                && offset_bytes.is_multiple_of(DIRECT_ALIGN_BYTES)
                && (len as u64).is_multiple_of(DIRECT_ALIGN_BYTES))
    }

    /// The aligned range covering `[offset_bytes, offset_bytes + len)`.
    fn widen(offset_bytes: u64, len: usize) -> (u64, usize) {
        let start = offset_bytes - offset_bytes % DIRECT_ALIGN_BYTES;
        let end = (offset_bytes + len as u64).div_ceil(DIRECT_ALIGN_BYTES) * DIRECT_ALIGN_BYTES;
        (start, (end - start) as usize)
    }
}

/// The descriptor, for callers that submit their own I/O (io_uring). Reads through it
/// follow the same alignment rules as [`FileDevice::is_direct`] implies.
impl AsRawFd for FileDevice {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        check_range("read", offset_bytes, buf.len(), self.len_bytes)?;
        if self.is_aligned(buf.as_ptr(), offset_bytes, buf.len()) {
            return self
                .file
                .read_exact_at(buf, offset_bytes)
                .map_err(|e| Self::os("read", offset_bytes, buf.len(), e));
        }
        let (start, len) = Self::widen(offset_bytes, buf.len());
        let mut bounce = AlignedBuf::zeroed(len);
        self.file
            .read_exact_at(&mut bounce, start)
            .map_err(|e| Self::os("read", start, len, e))?;
        let skip = (offset_bytes - start) as usize;
        buf.copy_from_slice(&bounce[skip..skip + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        check_range("write", offset_bytes, buf.len(), self.len_bytes)?;
        if self.is_aligned(buf.as_ptr(), offset_bytes, buf.len()) {
            return self
                .file
                .write_all_at(buf, offset_bytes)
                .map_err(|e| Self::os("write", offset_bytes, buf.len(), e));
        }
        let (start, len) = Self::widen(offset_bytes, buf.len());
        let mut bounce = AlignedBuf::zeroed(len);
        let skip = (offset_bytes - start) as usize;
        // Only the partly covered edge sectors need their old contents.
        if skip != 0 || len != buf.len() {
            self.file
                .read_exact_at(&mut bounce, start)
                .map_err(|e| Self::os("read", start, len, e))?;
        }
        bounce[skip..skip + buf.len()].copy_from_slice(buf);
        self.file
            .write_all_at(&bounce, start)
            .map_err(|e| Self::os("write", start, len, e))
    }

    fn flush(&self) -> Result<(), IoError> {
        self.file
            .sync_data()
            .map_err(|e| Self::os("flush", 0, 0, e))
    }

    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    /// Punches a hole in a regular file, or issues `BLKDISCARD` on a block device. A
    /// device or file system that does not support either is not an error: discard is
    /// a hint.
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), IoError> {
        let len = usize::try_from(len_bytes).unwrap_or(usize::MAX);
        check_range("discard", offset_bytes, len, self.len_bytes)?;
        if len_bytes == 0 {
            return Ok(());
        }
        let fd = self.file.as_raw_fd();
        let rc = if self.block_device {
            let range: [u64; 2] = [offset_bytes, len_bytes];
            // SAFETY: BLKDISCARD reads two u64s from the pointer, which outlives the call.
            unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) }
        } else {
            // SAFETY: plain system call on a file descriptor we own.
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset_bytes as libc::off_t,
                    len_bytes as libc::off_t,
                )
            }
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL) => Ok(()),
            _ => Err(Self::os("discard", offset_bytes, len, err)),
        }
    }

    fn alignment_bytes(&self) -> u64 {
        if self.direct {
            DIRECT_ALIGN_BYTES
        } else {
            crate::SECTOR_BYTES
        }
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.file.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("larch-io-{}-{name}", std::process::id()))
    }

    #[test]
    fn aligned_and_unaligned_round_trips() {
        for direct in [true, false] {
            let path = temp_path(&format!("rt-{direct}"));
            let options = FileOptions {
                direct,
                read_only: false,
                create_len_bytes: Some(64 * 1024),
            };
            let dev = FileDevice::open(&path, &options).unwrap();
            assert_eq!(dev.len_bytes(), 64 * 1024);
            let mut block = AlignedBuf::zeroed(8192);
            block.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
            dev.write_at(&block, 4096).unwrap();
            // An unaligned write inside the block must keep the bytes around it.
            dev.write_at(b"XYZ", 5000).unwrap();
            let mut odd = vec![0u8; 10];
            dev.read_at(&mut odd, 4998).unwrap();
            let mut expect: Vec<u8> = (4998 - 4096..5008 - 4096).map(|i| i as u8).collect();
            expect[2..5].copy_from_slice(b"XYZ");
            assert_eq!(odd, expect, "direct={direct} is_direct={}", dev.is_direct());
            dev.flush().unwrap();
            let mut tail = [0u8; 4];
            assert!(dev.read_at(&mut tail, 64 * 1024 - 2).is_err());
            drop(dev);
            let reopened = FileDevice::open(
                &path,
                &FileOptions {
                    read_only: true,
                    ..FileOptions::default()
                },
            )
            .unwrap();
            let mut back = AlignedBuf::zeroed(4096);
            reopened.read_at(&mut back, 4096).unwrap();
            assert_eq!(&back[904..907], b"XYZ");
            assert!(
                reopened.write_at(&back, 0).is_err(),
                "read-only must refuse writes"
            );
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn discard_keeps_size_and_neighbours() {
        let path = temp_path("discard");
        let options = FileOptions {
            create_len_bytes: Some(64 * 1024),
            ..FileOptions::default()
        };
        let dev = FileDevice::open(&path, &options).unwrap();
        let mut block = AlignedBuf::zeroed(3 * 4096);
        block.fill(0xab);
        dev.write_at(&block, 0).unwrap();
        dev.discard(4096, 4096).unwrap();
        assert!(dev.discard(60 * 1024, 8192).is_err(), "past the end");
        let mut back = AlignedBuf::zeroed(3 * 4096);
        dev.read_at(&mut back, 0).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 0xab));
        assert!(back[8192..].iter().all(|&b| b == 0xab));
        // The discarded range reads as zeros (hole) or as before (unsupported), never mixed.
        let hole = &back[4096..8192];
        assert!(hole.iter().all(|&b| b == 0) || hole.iter().all(|&b| b == 0xab));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * 1024);
        std::fs::remove_file(&path).unwrap();
    }
}
