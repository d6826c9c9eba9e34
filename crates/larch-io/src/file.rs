//! A regular file or block device, with `O_DIRECT` when the system allows it.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::aligned::{AlignedBuf, BUF_ALIGN_BYTES};
use crate::{BlockDevice, IoError, check_range};

/// How to open a [`FileDevice`].
#[derive(Clone, Debug)]
pub struct FileOptions {
    /// Try `O_DIRECT` first (the default). If the open fails (tmpfs, some overlay file
    /// systems), or the file system takes it at open and refuses it at the first read or
    /// write, the device uses buffered I/O from then on; [`BlockDevice::io_mode`] says
    /// which one is in use, and why.
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
/// It holds two handles on the file: one with `O_DIRECT` (when the open took it) and one
/// without. The direct one carries every request while direct I/O works. With it,
/// offsets, lengths and memory must be aligned to [`FileDevice::alignment_bytes`];
/// requests that are not are widened to aligned ranges through a bounce buffer (an
/// unaligned write becomes read-modify-write, which is not atomic with respect to another
/// writer of the same sectors). larch's own writes are aligned and use [`AlignedBuf`], so
/// they pay for neither.
///
/// The buffered handle takes the bytes that cannot go direct:
/// - the last page of a device whose size is not a multiple of the alignment (a direct
///   access there would read past the end, or extend a regular file);
/// - the rest of a transfer after a short direct one that ended off a page boundary;
/// - everything, for good, once the file system refused an aligned direct read or write
///   with EINVAL (some take `O_DIRECT` at open and refuse it at I/O: a logical block
///   larger than 4 KiB, some FUSE and network file systems). The refused request is then
///   done again buffered.
///
/// The two never work on the same page at the same time in larch's use, and the kernel
/// keeps the page cache coherent with direct I/O to the same file.
#[derive(Debug)]
pub struct FileDevice {
    /// The handle without `O_DIRECT`, always open. Opening it with the direct one means
    /// falling back later needs no second lookup of the path (which may name another file
    /// by then) and cannot fail.
    file: File,
    /// The handle with `O_DIRECT`, when the open took it.
    direct: Option<File>,
    /// Why I/O goes through the page cache, once it does: set at open or at the first
    /// refused direct read or write, and never cleared.
    buffered_why: OnceLock<String>,
    path: PathBuf,
    len_bytes: u64,
    block_device: bool,
    /// Tests: direct reads and writes fail with EINVAL, as on a file system that takes
    /// `O_DIRECT` at open and refuses it at I/O.
    #[cfg(test)]
    refuse_direct: std::sync::atomic::AtomicBool,
    /// Tests: the next direct write moves only this many bytes (0: no cut), as a device
    /// that runs out of space part way does.
    #[cfg(test)]
    cut_next_direct_write: std::sync::atomic::AtomicUsize,
    /// Tests: system calls attempted on the direct handle.
    #[cfg(test)]
    direct_calls: std::sync::atomic::AtomicU64,
}

/// `BLKDISCARD` from `linux/fs.h`: `_IO(0x12, 119)`.
const BLKDISCARD: libc::c_ulong = 0x1277;

/// 4 KiB: the alignment `O_DIRECT` needs on every common device, so it is used whatever
/// the logical sector size is.
const DIRECT_ALIGN_BYTES: u64 = BUF_ALIGN_BYTES as u64;

/// Why a direct transfer did not complete.
enum DirectError {
    /// EINVAL from a direct read or write of whole pages at a page-aligned offset from
    /// page-aligned memory: the file system refuses `O_DIRECT` itself.
    Refused {
        op: &'static str,
        offset_bytes: u64,
        len: usize,
        source: io::Error,
    },
    /// Any other failure: the request's own error, which going buffered would not mend.
    Failed(IoError),
}

/// Which way a transfer moves bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

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
        let file = open_options.open(&path).map_err(|e| os_err("open", e))?;
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
        let buffered_why = OnceLock::new();
        let direct = if options.direct {
            // The file exists by now, so this open never creates one.
            let mut with_direct = OpenOptions::new();
            with_direct
                .read(true)
                .write(!options.read_only)
                .custom_flags(libc::O_DIRECT);
            match with_direct.open(&path) {
                Ok(direct) => {
                    // Both handles must be on the same file: a path renamed over between
                    // the two opens would otherwise split the device's bytes in two.
                    let again = direct.metadata().map_err(|e| os_err("stat", e))?;
                    if (again.dev(), again.ino()) != (metadata.dev(), metadata.ino()) {
                        return Err(os_err(
                            "open",
                            io::Error::other("the path was replaced while it was being opened"),
                        ));
                    }
                    Some(direct)
                }
                // EINVAL is how file systems without O_DIRECT support refuse it.
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
                    let _ = buffered_why
                        .set(format!("the file system refused O_DIRECT at open: {err}"));
                    None
                }
                Err(err) => return Err(os_err("open", err)),
            }
        } else {
            let _ = buffered_why.set("O_DIRECT not tried".to_string());
            None
        };
        Ok(Self {
            file,
            direct,
            buffered_why,
            path,
            len_bytes,
            block_device: metadata.file_type().is_block_device(),
            #[cfg(test)]
            refuse_direct: Default::default(),
            #[cfg(test)]
            cut_next_direct_write: Default::default(),
            #[cfg(test)]
            direct_calls: Default::default(),
        })
    }

    /// Whether I/O goes with `O_DIRECT` now. It may stop doing so at a refused read or
    /// write; [`BlockDevice::io_mode`] then says why.
    pub fn is_direct(&self) -> bool {
        self.direct_handle().is_some()
    }

    /// The path the device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `O_DIRECT` handle, unless I/O went back to the page cache.
    fn direct_handle(&self) -> Option<&File> {
        self.direct
            .as_ref()
            .filter(|_| self.buffered_why.get().is_none())
    }

    /// The handle whole requests go through now.
    fn handle(&self) -> &File {
        self.direct_handle().unwrap_or(&self.file)
    }

    fn os(op: &'static str, offset_bytes: u64, len: usize, source: io::Error) -> IoError {
        IoError::Os {
            op,
            offset_bytes,
            len_bytes: len as u64,
            source,
        }
    }

    /// Whether memory, offset and length all suit `O_DIRECT`.
    fn is_aligned(ptr: *const u8, offset_bytes: u64, len: usize) -> bool {
        (ptr as usize).is_multiple_of(BUF_ALIGN_BYTES)
            && offset_bytes.is_multiple_of(DIRECT_ALIGN_BYTES)
            && (len as u64).is_multiple_of(DIRECT_ALIGN_BYTES)
    }

    /// The aligned range covering `[offset_bytes, offset_bytes + len)`. It stays inside
    /// the device when the request lies in its whole pages, as [`FileDevice::direct_len`]
    /// makes sure every direct request does.
    fn widen(offset_bytes: u64, len: usize) -> (u64, usize) {
        let start = offset_bytes - offset_bytes % DIRECT_ALIGN_BYTES;
        let end = (offset_bytes + len as u64).div_ceil(DIRECT_ALIGN_BYTES) * DIRECT_ALIGN_BYTES;
        (start, (end - start) as usize)
    }

    /// How many of the `len` bytes at `offset_bytes` lie in the device's whole pages and
    /// may go direct. The rest, in the last page of a device whose size is not a multiple
    /// of the alignment, goes through the page cache: widening a request there would read
    /// past the end, or write past it and grow a regular file.
    fn direct_len(&self, offset_bytes: u64, len: usize) -> usize {
        let whole_pages_end = self.len_bytes - self.len_bytes % DIRECT_ALIGN_BYTES;
        // At most `len`, so the conversion back cannot truncate.
        whole_pages_end.saturating_sub(offset_bytes).min(len as u64) as usize
    }

    /// Moves `len` bytes at `offset_bytes` (page-aligned, as are `len` and the memory
    /// behind `step`), one system call at a time: `step(handle, from, n)` moves up to
    /// `n` bytes of the request from its byte `from` and returns how many it moved.
    ///
    /// The calls go through `direct` while the position is page-aligned. A short transfer
    /// can leave it off a page boundary. A direct call there fails with EINVAL whenever
    /// the offset is not a multiple of the device's logical block, which says nothing
    /// about the file system's support of `O_DIRECT`, so the page cache takes the bytes up
    /// to the next boundary, and an error there is the real one (no space left, say).
    /// That is why only an EINVAL from an aligned direct call counts as the file system
    /// refusing `O_DIRECT`.
    fn transfer(
        &self,
        direct: &File,
        op: Op,
        offset_bytes: u64,
        len: usize,
        mut step: impl FnMut(&File, usize, usize) -> io::Result<usize>,
    ) -> Result<(), DirectError> {
        let mut done = 0;
        while done < len {
            let at = offset_bytes + done as u64;
            let off_page = (at % DIRECT_ALIGN_BYTES) as usize;
            let result = if off_page == 0 {
                self.direct_call(op, direct, done, len - done, &mut step)
            } else {
                let to_boundary = BUF_ALIGN_BYTES - off_page;
                step(&self.file, done, to_boundary.min(len - done))
            };
            match result {
                Ok(0) => {
                    let why = match op {
                        Op::Read => io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the file ended before the read did",
                        ),
                        Op::Write => {
                            io::Error::new(io::ErrorKind::WriteZero, "the write made no progress")
                        }
                    };
                    return Err(DirectError::Failed(Self::os(
                        op.name(),
                        at,
                        len - done,
                        why,
                    )));
                }
                Ok(n) => done += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if off_page == 0 && err.raw_os_error() == Some(libc::EINVAL) => {
                    return Err(DirectError::Refused {
                        op: op.name(),
                        offset_bytes: at,
                        len: len - done,
                        source: err,
                    });
                }
                Err(err) => {
                    return Err(DirectError::Failed(Self::os(
                        op.name(),
                        at,
                        len - done,
                        err,
                    )));
                }
            }
        }
        Ok(())
    }

    /// One system call on the direct handle (tests can make it fail or fall short).
    #[cfg_attr(not(test), allow(unused_variables))]
    fn direct_call(
        &self,
        op: Op,
        direct: &File,
        from: usize,
        len: usize,
        step: &mut impl FnMut(&File, usize, usize) -> io::Result<usize>,
    ) -> io::Result<usize> {
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering::Relaxed;
            self.direct_calls.fetch_add(1, Relaxed);
            if self.refuse_direct.load(Relaxed) {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let cut = match op {
                Op::Write => self.cut_next_direct_write.swap(0, Relaxed),
                Op::Read => 0,
            };
            if cut > 0 {
                // The kernel may refuse a direct write of this unaligned length, so the
                // page cache takes the bytes the short write would have written.
                return step(&self.file, from, cut.min(len));
            }
        }
        step(direct, from, len)
    }

    /// What a direct request's `outcome` leaves to do: `Ok(true)` when it is done, its
    /// error when it failed, and `Ok(false)` when the file system refused an aligned direct
    /// read or write. Then every request from now on goes through the page cache,
    /// [`BlockDevice::io_mode`] says why, and the caller does the whole request again,
    /// buffered. Only the first refusal is recorded (several threads may meet one at once).
    fn direct_done(&self, outcome: Result<(), DirectError>) -> Result<bool, IoError> {
        match outcome {
            Ok(()) => Ok(true),
            Err(DirectError::Failed(err)) => Err(err),
            Err(DirectError::Refused {
                op,
                offset_bytes,
                len,
                source,
            }) => {
                let _ = self.buffered_why.set(format!(
                    "the file system refused an O_DIRECT {op} of {len} bytes at {offset_bytes}: \
                     {source}"
                ));
                Ok(false)
            }
        }
    }

    /// A read through `direct`: its whole-page part direct (through a bounce buffer if
    /// unaligned), the part in a last partial page through the page cache.
    fn read_direct(
        &self,
        direct: &File,
        buf: &mut [u8],
        offset_bytes: u64,
    ) -> Result<(), DirectError> {
        let (head, tail) = buf.split_at_mut(self.direct_len(offset_bytes, buf.len()));
        if head.is_empty() {
            // Nothing in whole pages (widening an empty range could still span a page).
        } else if Self::is_aligned(head.as_ptr(), offset_bytes, head.len()) {
            self.transfer(
                direct,
                Op::Read,
                offset_bytes,
                head.len(),
                |file, from, n| file.read_at(&mut head[from..from + n], offset_bytes + from as u64),
            )?;
        } else {
            let (start, len) = Self::widen(offset_bytes, head.len());
            let mut bounce = AlignedBuf::zeroed(len);
            self.transfer(direct, Op::Read, start, len, |file, from, n| {
                file.read_at(&mut bounce[from..from + n], start + from as u64)
            })?;
            let skip = (offset_bytes - start) as usize;
            head.copy_from_slice(&bounce[skip..skip + head.len()]);
        }
        if !tail.is_empty() {
            let at = offset_bytes + head.len() as u64;
            self.file
                .read_exact_at(tail, at)
                .map_err(|e| DirectError::Failed(Self::os("read", at, tail.len(), e)))?;
        }
        Ok(())
    }

    /// A write through `direct`: its whole-page part direct (read-modify-write through a
    /// bounce buffer if unaligned), the part in a last partial page through the page
    /// cache.
    fn write_direct(
        &self,
        direct: &File,
        buf: &[u8],
        offset_bytes: u64,
    ) -> Result<(), DirectError> {
        let (head, tail) = buf.split_at(self.direct_len(offset_bytes, buf.len()));
        if head.is_empty() {
            // Nothing in whole pages (widening an empty range could still span a page).
        } else if Self::is_aligned(head.as_ptr(), offset_bytes, head.len()) {
            self.transfer(
                direct,
                Op::Write,
                offset_bytes,
                head.len(),
                |file, from, n| file.write_at(&head[from..from + n], offset_bytes + from as u64),
            )?;
        } else {
            let (start, len) = Self::widen(offset_bytes, head.len());
            let mut bounce = AlignedBuf::zeroed(len);
            let skip = (offset_bytes - start) as usize;
            // Only the partly covered edge sectors need their old contents.
            if skip != 0 || len != head.len() {
                self.transfer(direct, Op::Read, start, len, |file, from, n| {
                    file.read_at(&mut bounce[from..from + n], start + from as u64)
                })?;
            }
            bounce[skip..skip + head.len()].copy_from_slice(head);
            self.transfer(direct, Op::Write, start, len, |file, from, n| {
                file.write_at(&bounce[from..from + n], start + from as u64)
            })?;
        }
        if !tail.is_empty() {
            let at = offset_bytes + head.len() as u64;
            self.file
                .write_all_at(tail, at)
                .map_err(|e| DirectError::Failed(Self::os("write", at, tail.len(), e)))?;
        }
        Ok(())
    }
}

/// The descriptor, for callers that submit their own I/O (io_uring). Reads through it
/// follow the same alignment rules as [`FileDevice::is_direct`] implies. After a refused
/// direct I/O it is the buffered handle's; both handles stay open as long as the device,
/// so a descriptor handed out before stays valid.
impl AsRawFd for FileDevice {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.handle().as_raw_fd()
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        check_range("read", offset_bytes, buf.len(), self.len_bytes)?;
        // A refused direct read is read again below, whole, buffered.
        if let Some(direct) = self.direct_handle()
            && self.direct_done(self.read_direct(direct, buf, offset_bytes))?
        {
            return Ok(());
        }
        self.file
            .read_exact_at(buf, offset_bytes)
            .map_err(|e| Self::os("read", offset_bytes, buf.len(), e))
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        check_range("write", offset_bytes, buf.len(), self.len_bytes)?;
        // A refused direct write is written again below, whole, buffered, which is right
        // whatever part of it reached the file.
        if let Some(direct) = self.direct_handle()
            && self.direct_done(self.write_direct(direct, buf, offset_bytes))?
        {
            return Ok(());
        }
        self.file
            .write_all_at(buf, offset_bytes)
            .map_err(|e| Self::os("write", offset_bytes, buf.len(), e))
    }

    /// fdatasync. It works on the file, not on the handle: it writes back every dirty page
    /// of the file (whichever handle dirtied it), commits the metadata direct writes need,
    /// and flushes the device's write cache. The buffered handle is the one that can have
    /// dirty pages, so a write-back error is reported through it; direct writes report
    /// theirs when they return.
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
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL) => Ok(()),
            _ => Err(Self::os("discard", offset_bytes, len, err)),
        }
    }

    fn alignment_bytes(&self) -> u64 {
        if self.is_direct() {
            DIRECT_ALIGN_BYTES
        } else {
            crate::SECTOR_BYTES
        }
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.as_raw_fd())
    }

    fn io_mode(&self) -> Option<String> {
        Some(match (self.direct_handle(), self.buffered_why.get()) {
            (Some(_), _) => "O_DIRECT".to_string(),
            (None, Some(why)) => format!("buffered ({why})"),
            (None, None) => "buffered".to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("larch-io-{}-{name}", std::process::id()))
    }

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| seed ^ (i % 251) as u8).collect()
    }

    fn aligned(data: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::zeroed(data.len());
        buf.copy_from_slice(data);
        buf
    }

    /// A new device on a file of `len` bytes, opened with `O_DIRECT`. Where the temporary
    /// directory refuses `O_DIRECT` at open (tmpfs), a second buffered handle stands in
    /// for the direct one: the device's code paths are the same, only the kernel's
    /// alignment checks are missing.
    fn direct_device(name: &str, len: u64) -> (FileDevice, PathBuf) {
        let path = temp_path(name);
        let _ = std::fs::remove_file(&path);
        let options = FileOptions {
            create_len_bytes: Some(len),
            ..FileOptions::default()
        };
        let mut dev = FileDevice::open(&path, &options).unwrap();
        if dev.direct.is_none() {
            dev.direct = Some(dev.file.try_clone().unwrap());
            dev.buffered_why = OnceLock::new();
        }
        assert!(dev.is_direct());
        (dev, path)
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
            if !direct {
                assert_eq!(
                    dev.io_mode().as_deref(),
                    Some("buffered (O_DIRECT not tried)")
                );
            }
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
    fn a_device_of_a_partial_last_page_neither_grows_nor_fails() {
        // Three whole pages and 1000 bytes: the last page is partial.
        let len = 3 * 4096 + 1000;
        for direct in [true, false] {
            let path = temp_path(&format!("odd-{direct}"));
            let _ = std::fs::remove_file(&path);
            let options = FileOptions {
                direct,
                create_len_bytes: Some(len),
                ..FileOptions::default()
            };
            let dev = FileDevice::open(&path, &options).unwrap();
            let was_direct = dev.is_direct();
            let mut model = vec![0u8; len as usize];
            let mut write = |data: &[u8], at: u64| {
                dev.write_at(data, at).unwrap();
                model[at as usize..at as usize + data.len()].copy_from_slice(data);
            };
            // Aligned, in whole pages: direct.
            write(&aligned(&pattern(1, 4096)), 0);
            // Aligned start and memory, running to the end: a whole page direct, the
            // partial one buffered.
            write(&aligned(&pattern(2, 5096)), 8192);
            // Unaligned, across the last whole page into the partial one.
            write(&pattern(3, 3000), 10_000);
            // Unaligned, inside the partial page, up to the end.
            write(b"tail", len - 4);
            // Aligned start and memory, inside the partial page only.
            write(&aligned(&pattern(4, 512)), 3 * 4096);
            dev.flush().unwrap();
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                len,
                "direct={direct}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), model, "direct={direct}");
            let mut last = [0u8; 7];
            dev.read_at(&mut last, len - 7).unwrap();
            assert_eq!(&last[..], &model[len as usize - 7..]);
            let mut across = vec![0u8; 2000];
            dev.read_at(&mut across, 11_000).unwrap();
            assert_eq!(&across[..], &model[11_000..13_000]);
            let mut all = AlignedBuf::zeroed(len as usize);
            dev.read_at(&mut all, 0).unwrap();
            assert!(all[..] == model[..], "direct={direct}");
            let mut past = [0u8; 8];
            assert!(dev.read_at(&mut past, len - 4).is_err());
            assert!(dev.write_at(&past, len - 4).is_err());
            assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
            // None of this is a reason to give up O_DIRECT.
            assert_eq!(dev.is_direct(), was_direct);
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_refused_direct_io_falls_back_once_and_says_why() {
        for first in [Op::Write, Op::Read] {
            let (dev, path) = direct_device(&format!("refused-{}", first.name()), 64 * 1024);
            let direct_fd = dev.raw_fd();
            dev.refuse_direct.store(true, Relaxed);
            let block = aligned(&pattern(5, 8192));
            if first == Op::Read {
                let mut back = AlignedBuf::zeroed(8192);
                dev.read_at(&mut back, 4096).unwrap();
                assert!(back.iter().all(|&b| b == 0));
            }
            dev.write_at(&block, 4096).unwrap();
            assert_eq!(
                dev.direct_calls.load(Relaxed),
                1,
                "one direct attempt, then buffered"
            );
            let mode = dev.io_mode().unwrap();
            let expect = format!(
                "buffered (the file system refused an O_DIRECT {} of 8192 bytes at 4096: ",
                first.name()
            );
            assert!(mode.starts_with(&expect), "{mode}");
            assert!(!dev.is_direct());
            assert_eq!(dev.alignment_bytes(), crate::SECTOR_BYTES);
            assert_ne!(dev.raw_fd(), direct_fd, "io_uring reads go buffered too");
            // Later requests, aligned or not, stay buffered.
            dev.write_at(b"XYZ", 5000).unwrap();
            let mut odd = [0u8; 5];
            dev.read_at(&mut odd, 4999).unwrap();
            assert_eq!(&odd, &[block[903], b'X', b'Y', b'Z', block[907]]);
            let mut back = AlignedBuf::zeroed(8192);
            dev.read_at(&mut back, 4096).unwrap();
            dev.flush().unwrap();
            assert_eq!(dev.direct_calls.load(Relaxed), 1);
            assert_eq!(dev.io_mode().unwrap(), mode, "the first reason stays");
            let file = std::fs::read(&path).unwrap();
            assert_eq!(&file[4096..4096 + 8192], &back[..]);
            assert_eq!(&file[5000..5003], b"XYZ");
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn a_short_direct_write_off_a_page_is_finished_without_falling_back() {
        let (dev, path) = direct_device("short", 64 * 1024);
        // The first direct write moves 512 bytes of 12 KiB, as one that ran out of space
        // part way might.
        dev.cut_next_direct_write.store(512, Relaxed);
        let block = aligned(&pattern(6, 3 * 4096));
        dev.write_at(&block, 8192).unwrap();
        // The cut call, then the page cache up to the next page, then one direct call for
        // the two pages left.
        assert_eq!(dev.direct_calls.load(Relaxed), 2);
        assert_eq!(dev.io_mode().as_deref(), Some("O_DIRECT"));
        dev.flush().unwrap();
        let file = std::fs::read(&path).unwrap();
        assert_eq!(&file[8192..8192 + 3 * 4096], &block[..]);
        std::fs::remove_file(&path).unwrap();
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
