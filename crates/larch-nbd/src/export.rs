//! The trait a storage engine implements to be served over NBD, and its vocabulary.
//!
//! # Why the trait is async
//!
//! A caching engine answers most reads from DRAM: such a request should cost a memcpy (or
//! nothing, when the buffer is reference-counted) and complete without leaving the
//! connection's task. Misses, write-backs and flushes wait on devices. An `async` trait
//! serves both: a hit returns a ready future, a miss awaits whatever does the device I/O
//! (an io_uring thread, a pool of blocking threads, a shared in-flight read). Making the
//! trait blocking instead would force a thread hop on every request, hit or not, which is
//! exactly the cost the hit path cannot afford. An implementation that only has blocking
//! calls (a plain file) can still do them inline when they are known to be fast or wrap
//! them in `tokio::task::spawn_blocking` when they are not; the server does not care.
//!
//! The server validates every request (range, alignment, read-only, advertised features)
//! before calling the export, so an implementation sees only in-range, well-formed calls.

use std::future::Future;

use bytes::Bytes;

/// An error value carried in an NBD reply (`error` field). Only the values the spec
/// defines are representable; the server never passes a raw host errno through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Errno {
    /// `EPERM` (1): write to a read-only export.
    Perm,
    /// `EIO` (5): the backing store failed.
    Io,
    /// `ENOMEM` (12): out of memory.
    NoMem,
    /// `EINVAL` (22): malformed, misaligned or out-of-range request.
    Inval,
    /// `ENOSPC` (28): write beyond the end or no space in the backing store.
    NoSpc,
    /// `EOVERFLOW` (75): an unfragmented read too large to send in one chunk.
    Overflow,
    /// `ENOTSUP` (95): only for `FAST_ZERO` when zeroing would be slow.
    NotSup,
    /// `ESHUTDOWN` (108): the server is shutting down.
    Shutdown,
}

impl Errno {
    /// The value sent on the wire.
    pub fn wire_value(self) -> u32 {
        match self {
            Errno::Perm => 1,
            Errno::Io => 5,
            Errno::NoMem => 12,
            Errno::Inval => 22,
            Errno::NoSpc => 28,
            Errno::Overflow => 75,
            Errno::NotSup => 95,
            Errno::Shutdown => 108,
        }
    }

    /// Maps a host I/O error onto the NBD error set (the spec asks servers not to leak
    /// other values; clients treat unknown ones as `EINVAL`).
    pub fn from_io_error(err: &std::io::Error) -> Errno {
        match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::EROFS) => Errno::Perm,
            Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => Errno::NoSpc,
            Some(libc::ENOMEM) => Errno::NoMem,
            Some(libc::EINVAL) => Errno::Inval,
            Some(libc::EOPNOTSUPP) => Errno::NotSup,
            _ => Errno::Io,
        }
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Errno::Perm => "EPERM",
            Errno::Io => "EIO",
            Errno::NoMem => "ENOMEM",
            Errno::Inval => "EINVAL",
            Errno::NoSpc => "ENOSPC",
            Errno::Overflow => "EOVERFLOW",
            Errno::NotSup => "ENOTSUP",
            Errno::Shutdown => "ESHUTDOWN",
        };
        f.write_str(name)
    }
}

impl std::error::Error for Errno {}

/// Result type of every export operation.
pub type ExportResult<T> = Result<T, Errno>;

/// Block size constraints advertised in `NBD_INFO_BLOCK_SIZE` and enforced by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSizes {
    /// Offsets and lengths must be multiples of this (a power of two, 1..=64 KiB).
    pub minimum_bytes: u32,
    /// The size the export handles best (a power of two, at least max(minimum, 512)).
    pub preferred_bytes: u32,
    /// The largest READ/WRITE payload the export accepts.
    pub maximum_bytes: u32,
}

impl Default for BlockSizes {
    /// 1 / 4096 / 32 MiB: byte-granular, page-preferred, the spec's default maximum.
    fn default() -> Self {
        BlockSizes {
            minimum_bytes: 1,
            preferred_bytes: 4096,
            maximum_bytes: 32 << 20,
        }
    }
}

impl BlockSizes {
    /// Checks the spec's constraints; returns a description of the first violation.
    pub fn validate(&self) -> Result<(), BlockSizesError> {
        let BlockSizes {
            minimum_bytes: min,
            preferred_bytes: pref,
            maximum_bytes: max,
        } = *self;
        if !min.is_power_of_two() || min > 64 * 1024 {
            return Err(BlockSizesError::Minimum(min));
        }
        if !pref.is_power_of_two() || pref < min.max(512) {
            return Err(BlockSizesError::Preferred(pref));
        }
        if max < pref || max % min != 0 {
            return Err(BlockSizesError::Maximum(max));
        }
        Ok(())
    }
}

/// Block sizes no client could follow ([`BlockSizes::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockSizesError {
    /// The minimum is not a power of two up to 64 KiB.
    #[error("minimum block size {0} is not a power of two ≤ 64 KiB")]
    Minimum(u32),
    /// The preferred size is not a power of two of at least the minimum and 512.
    #[error("preferred block size {0} is not a power of two ≥ max(minimum, 512)")]
    Preferred(u32),
    /// The maximum payload is below the preferred size or not a multiple of the minimum.
    #[error("maximum payload {0} is below the preferred size or not a multiple of the minimum")]
    Maximum(u32),
}

/// What an export can do; the server derives the transmission flags from it per
/// connection and refuses commands the export did not advertise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Refuse WRITE, TRIM and WRITE_ZEROES with `EPERM`.
    pub read_only: bool,
    /// FLUSH and FUA are meaningful (durability is implemented).
    pub flush: bool,
    /// TRIM is implemented (it may still be a no-op).
    pub trim: bool,
    /// WRITE_ZEROES is implemented (`NO_HOLE` must then be honoured).
    pub write_zeroes: bool,
    /// `FAST_ZERO` is honoured: `write_zeroes` returns `ENOTSUP` rather than zero slowly.
    pub fast_zero: bool,
    /// CACHE is implemented (a prefetch hint).
    pub cache: bool,
    /// `base:allocation` block status is implemented.
    pub block_status: bool,
    /// The export promises that a FLUSH (or FUA write) acknowledged on one connection
    /// covers writes acknowledged on every connection to it, so clients may open several
    /// (`NBD_FLAG_CAN_MULTI_CONN`). True for a plain file and for a process-wide cache
    /// whose flush is a global barrier.
    pub multi_conn: bool,
    /// Scheduling hint for clients: the medium is rotational.
    pub rotational: bool,
}

impl Default for Features {
    /// Everything a writable, durable, multi-connection export supports.
    fn default() -> Self {
        Features {
            read_only: false,
            flush: true,
            trim: true,
            write_zeroes: true,
            fast_zero: true,
            cache: true,
            block_status: true,
            multi_conn: true,
            rotational: false,
        }
    }
}

/// How `write_zeroes` may do its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ZeroFlags {
    /// The client allows a hole to be punched (`NO_HOLE` was not set).
    pub may_trim: bool,
    /// The client wants `ENOTSUP` at once if zeroing would be no faster than writing.
    pub fast_only: bool,
    /// Durable before the reply (`FUA`).
    pub fua: bool,
}

/// One piece of a read result: bytes, or a run that reads as zeroes (sent as a hole in a
/// structured reply, saving the bandwidth).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadSegment {
    /// Bytes, possibly a zero-copy slice of a cache buffer.
    Data(Bytes),
    /// This many bytes of zeroes.
    Zeroes(u32),
}

impl ReadSegment {
    /// Length of the segment in bytes.
    pub fn len_bytes(&self) -> usize {
        match self {
            ReadSegment::Data(b) => b.len(),
            ReadSegment::Zeroes(n) => *n as usize,
        }
    }
}

/// A read result: segments in order whose lengths add up to the requested length (the
/// server checks this and answers `EIO` if they do not). A cache can hand back its
/// reference-counted block buffers without copying.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadData {
    /// The segments, in offset order.
    pub segments: Vec<ReadSegment>,
}

impl ReadData {
    /// A result made of a single data buffer.
    pub fn from_bytes(data: impl Into<Bytes>) -> ReadData {
        ReadData {
            segments: vec![ReadSegment::Data(data.into())],
        }
    }

    /// Total length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.segments.iter().map(ReadSegment::len_bytes).sum()
    }

    /// Whether the result holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len_bytes() == 0
    }
}

/// One `base:allocation` extent of a block status answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes (not zero).
    pub length_bytes: u64,
    /// `STATE_HOLE` / `STATE_ZERO` bits; 0 (allocated data) is always a safe answer.
    pub flags: u32,
}

/// A volume served over NBD. The server calls these only with validated arguments:
/// `offset + length ≤ size_bytes()`, aligned to `block_sizes().minimum_bytes`, lengths
/// within `maximum_bytes` for READ/WRITE, and mutating calls only when not read-only.
///
/// Futures must be `Send`: the server runs requests concurrently on a multi-threaded
/// runtime, several per connection and many connections at once. Replies may complete
/// out of order.
pub trait Export: Send + Sync + 'static {
    /// Size of the export in bytes, asked at each connection's handshake: a connection
    /// keeps the size it was told, and an export whose size changes meanwhile refuses the
    /// requests past its new end itself (the server checks ranges against the size it
    /// told).
    fn size_bytes(&self) -> u64;

    /// Block size constraints; the default is 1 / 4096 / 32 MiB.
    fn block_sizes(&self) -> BlockSizes {
        BlockSizes::default()
    }

    /// What the export supports.
    fn features(&self) -> Features;

    /// Reads `length` bytes at `offset`.
    fn read(&self, offset: u64, length: u32)
    -> impl Future<Output = ExportResult<ReadData>> + Send;

    /// Writes `data` at `offset`; with `fua`, durable before returning.
    fn write(
        &self,
        offset: u64,
        data: Bytes,
        fua: bool,
    ) -> impl Future<Output = ExportResult<()>> + Send;

    /// Whether an idle connection whose client waits for each reply may watch its socket
    /// yielding its CPU between looks, rather than spinning (or parking, while other
    /// connections have work): see the server's socket watch; true by default. Asked at
    /// each idle moment, so an export can switch it at run time.
    fn idle_yield(&self) -> bool {
        true
    }

    /// Where the export would have a WRITE's payload cut (its block size), or 0 (the
    /// default) for one buffer. When not 0, the server reads each payload into one buffer
    /// per piece between multiples of it (each buffer an allocation of its own, filled
    /// straight from the socket when the piece is large) and calls
    /// [`Export::write_chunks`] instead of [`Export::write`], so an export that keeps
    /// whole blocks can keep those buffers without copying them.
    fn write_chunk_bytes(&self) -> u32 {
        0
    }

    /// Writes `chunks`, one after the other, at `offset`: a payload cut as
    /// [`Export::write_chunk_bytes`] asks (the first chunk ends at the first multiple of
    /// it after `offset`, every other but the last is that long). With `fua`, durable
    /// before returning. The default joins them and calls [`Export::write`].
    fn write_chunks(
        &self,
        offset: u64,
        chunks: Vec<Bytes>,
        fua: bool,
    ) -> impl Future<Output = ExportResult<()>> + Send {
        async move { self.write(offset, joined(chunks), fua).await }
    }

    /// Makes every write that completed before this call durable (on every connection
    /// when `features().multi_conn`).
    fn flush(&self) -> impl Future<Output = ExportResult<()>> + Send {
        async { Ok(()) }
    }

    /// Discards a range (its contents become unspecified until rewritten).
    fn trim(
        &self,
        offset: u64,
        length: u32,
        fua: bool,
    ) -> impl Future<Output = ExportResult<()>> + Send {
        let _ = (offset, length, fua);
        async { Ok(()) }
    }

    /// Writes zeroes to a range, as `flags` allow.
    fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        flags: ZeroFlags,
    ) -> impl Future<Output = ExportResult<()>> + Send {
        let _ = (offset, length, flags);
        async { Err(Errno::Inval) }
    }

    /// Prefetch hint; may return before the data is cached.
    fn cache(&self, offset: u64, length: u32) -> impl Future<Output = ExportResult<()>> + Send {
        let _ = (offset, length);
        async { Ok(()) }
    }

    /// `base:allocation` extents starting at `offset`, covering at least one byte and at
    /// most `length` bytes (the server clips longer answers). Returning a single
    /// allocated extent is always correct.
    fn block_status(
        &self,
        offset: u64,
        length: u32,
    ) -> impl Future<Output = ExportResult<Vec<Extent>>> + Send {
        let _ = offset;
        async move {
            Ok(vec![Extent {
                length_bytes: u64::from(length),
                flags: 0,
            }])
        }
    }
}

/// `chunks` as one buffer: the only one as it is, several copied into one.
pub(crate) fn joined(chunks: Vec<Bytes>) -> Bytes {
    match <[Bytes; 1]>::try_from(chunks) {
        Ok([one]) => one,
        Err(chunks) => Bytes::from(chunks.concat()),
    }
}
