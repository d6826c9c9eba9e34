//! A request's part of a connection: reading its header and its WRITE payload from the
//! socket (every read bounded by the stall timeout, a payload by a minimum rate, and each
//! raced against the shutdown grace), waiting for its share of the payload budget, and
//! running it against the export. The connection's event loop
//! ([`super::transmit::Transmission`]) decides when each runs.

use std::io;
use std::time::Duration;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use larch_io::{AlignedBuf, BUF_ALIGN_BYTES};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Instant;

use super::queues::Reply;
use super::{ConnectionError, ServerLimits};
use crate::export::{Errno, Export};
use crate::proto::{BASE_ALLOCATION_ID, REQUEST_HEADER_LEN_BYTES};
use crate::transmission::{
    self, Frame, Request, RequestHeader, TransmissionContext, block_status_frame, error_frame,
    read_frame, status_frame, wire_extents,
};

/// A request whose header was read; its WRITE payload (`len` bytes, 0 for none) is still
/// in the socket.
pub(super) struct PendingPayload {
    pub(super) hdr: RequestHeader,
    pub(super) checked: Result<Request, Errno>,
    pub(super) len: u32,
}

impl PendingPayload {
    /// Bytes of the payload budget the request needs before it runs: its WRITE payload,
    /// the data of a valid READ's reply of [`BULK_REQUEST_BYTES`] or more (an invalid
    /// one is answered with an error of a few bytes), or for WRITE_ZEROES and CACHE, which
    /// carry no payload, the most an export holds for one at a time
    /// ([`STEP_BUDGET_BYTES`], at most `max_request_bytes`, which the budget always
    /// holds). Smaller READs skip the shared budget, which would cost
    /// every cache hit two contended atomic operations; their replies are bounded per
    /// connection instead (`OUTPUT_UNBUDGETED_BYTES`).
    pub(super) fn budget_bytes(&self, max_request_bytes: u32) -> u32 {
        match self.checked {
            Ok(Request::Read { length, .. }) if length >= BULK_REQUEST_BYTES => length,
            Ok(Request::Read { .. }) => 0,
            Ok(Request::WriteZeroes { length, .. } | Request::Cache { length, .. }) => {
                length.min(STEP_BUDGET_BYTES).min(max_request_bytes)
            }
            _ => self.len,
        }
    }
}

/// What a WRITE_ZEROES or CACHE request counts in the payload budget while it runs: an
/// export works through a long range in steps of at most this many bytes (the engine:
/// 1 MiB of zeroes, 8 MiB of blocks read ahead), and holds one step's buffers at a time.
pub(super) const STEP_BUDGET_BYTES: u32 = 8 << 20;

/// READ and WRITE requests at least this large run as tasks of their own.
pub(super) const BULK_REQUEST_BYTES: u32 = 64 * 1024;

pub(super) fn is_bulk(request: &Request) -> bool {
    match *request {
        Request::Read { length, .. } | Request::Write { length, .. } => {
            length >= BULK_REQUEST_BYTES
        }
        _ => false,
    }
}

/// The error that ends a connection whose client stopped sending a request or reading
/// replies midway (see [`ServerLimits::stall_timeout`]).
pub(super) fn stalled(doing: &str, after: Duration) -> ConnectionError {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no progress {doing} for {after:?}"),
    )
    .into()
}

/// Whether a read failed because the client stopped sending midway: the connection then
/// ends at once rather than finishing what is in flight.
pub(super) fn is_stall(err: &ConnectionError) -> bool {
    matches!(err, ConnectionError::Io(err) if err.kind() == io::ErrorKind::TimedOut)
}

/// The slowest a client may send a WRITE payload or read replies while it holds payload
/// budget (after the first stall timeout): slower, and it would keep budget other
/// connections wait for by trickling a byte per stall timeout.
pub(super) const MIN_BYTES_PER_SEC: u64 = 256 * 1024;

/// How long a WRITE payload of `len` bytes may take to arrive whole: the stall timeout,
/// plus its length at [`MIN_BYTES_PER_SEC`].
pub(super) fn payload_time(len: u32, stall: Duration) -> Duration {
    stall.saturating_add(Duration::from_secs_f64(
        f64::from(len) / MIN_BYTES_PER_SEC as f64,
    ))
}

/// The error that ends a connection whose client sends or reads slower than
/// [`MIN_BYTES_PER_SEC`] (a stall, as [`is_stall`] sees it).
pub(super) fn too_slow(why: String) -> ConnectionError {
    io::Error::new(io::ErrorKind::TimedOut, why).into()
}

/// A connection's wait for its share of the payload budget.
pub(super) type BudgetWait = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>>
            + Send,
    >,
>;

/// The share `wait` waits for (`None`: the budget was closed); never resolves without a
/// wait.
pub(super) async fn wait_budget(wait: &mut Option<BudgetWait>) -> Option<OwnedSemaphorePermit> {
    match wait {
        Some(wait) => wait.await.ok(),
        None => std::future::pending().await,
    }
}

/// Resolves when a connection's time after shutdown is over: `grace` after shutdown
/// began (`deadline` when it had already), never if it does not begin. Reads of a request
/// race it, so a shutdown that begins while a client trickles a request in still ends
/// the connection within its grace.
pub(super) async fn grace_over(
    shutdown_rx: &mut watch::Receiver<bool>,
    deadline: Option<Instant>,
    grace: Duration,
) {
    let end = match deadline {
        Some(end) => end,
        None => {
            if shutdown_rx.wait_for(|down| *down).await.is_err() {
                // The server is gone, and with it any shutdown to wait for.
                std::future::pending::<()>().await;
            }
            later_by(grace)
        }
    };
    tokio::time::sleep_until(end).await;
}

/// Now plus `by`, or [`far_future`] where that does not fit in an `Instant`.
pub(super) fn later_by(by: Duration) -> Instant {
    Instant::now().checked_add(by).unwrap_or_else(far_future)
}

pub(super) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86400 * 365)
}

/// One read of part of a request, which must bring something within `stall`.
pub(super) async fn within<T>(
    stall: Duration,
    read: impl std::future::Future<Output = io::Result<T>>,
) -> Result<T, ConnectionError> {
    match tokio::time::timeout(stall, read).await {
        Ok(read) => Ok(read?),
        Err(_) => Err(stalled("reading a request", stall)),
    }
}

/// The error reply for a request, in the form its command needs.
pub(super) fn reply_error(hdr: &RequestHeader, errno: Errno, ctx: &TransmissionContext) -> Frame {
    use crate::proto::cmd;
    match hdr.command {
        cmd::READ | cmd::BLOCK_STATUS => error_frame(hdr.cookie, errno, ctx.structured_replies),
        _ => status_frame(hdr.cookie, Err(errno)),
    }
}

/// Reads one request header. A WRITE payload that will not be used (an invalid request,
/// or one over the size limit) is consumed and discarded here, without buffering; the
/// payload of a valid one is left in the socket (`len`) for [`read_payload`], once the
/// payload budget admits it. Each read must bring something within the stall timeout.
pub(super) async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    ctx: &TransmissionContext,
    limits: &ServerLimits,
) -> Result<PendingPayload, ConnectionError> {
    let stall = limits.stall_timeout;
    let mut head = [0u8; REQUEST_HEADER_LEN_BYTES];
    let mut filled = 0;
    while filled < head.len() {
        match within(stall, reader.read(&mut head[filled..])).await? {
            0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            n => filled += n,
        }
    }
    let hdr = RequestHeader::parse(&head)?;
    let checked = transmission::validate(&hdr, ctx);
    let len = hdr.payload_len_bytes();
    if len == 0 || (checked.is_ok() && len <= limits.max_request_bytes) {
        return Ok(PendingPayload { hdr, checked, len });
    }
    let mut left = u64::from(len);
    while left > 0 {
        let held = within(stall, reader.fill_buf()).await?.len() as u64;
        if held == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        let dropped = held.min(left);
        reader.consume(dropped as usize);
        left -= dropped;
    }
    Ok(PendingPayload {
        hdr,
        checked: checked.and(Err(Errno::Inval)),
        len: 0,
    })
}

/// A payload piece at least this large is read from the socket into its own buffer,
/// past the connection's read buffer (one copy, not two, for the bytes of large blocks).
pub(super) const DIRECT_READ_BYTES: usize = 64 << 10;

/// A payload piece at least this large that is whole pages is read into a page-aligned
/// buffer (see [`read_payload`]): whole blocks of 16K volumes (the default) and larger.
/// Smaller blocks keep ordinary allocations: the alignment could waste up to half of an
/// 8K block's memory.
pub(super) const ALIGNED_PIECE_BYTES: usize = 16 << 10;

/// Reads a WRITE payload of `len` bytes for `offset`: one buffer, or with `chunk` not
/// 0, one buffer per piece between multiples of `chunk` (see
/// [`Export::write_chunk_bytes`]). The rest of a piece of [`DIRECT_READ_BYTES`] or more
/// is read from the socket straight into its buffer (the reader's buffer is passed by);
/// smaller ones are copied out of the reader's buffer. A piece of [`ALIGNED_PIECE_BYTES`]
/// or more that is whole pages gets a page-aligned buffer, which a store writing with
/// `O_DIRECT` can write as it is. Each read must bring something within `stall`.
pub(super) async fn read_payload<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    len: u32,
    offset: u64,
    chunk: u32,
    stall: Duration,
) -> Result<Vec<Bytes>, ConnectionError> {
    let mut chunks = Vec::with_capacity(match chunk {
        0 => 1,
        chunk => (len / chunk) as usize + 2,
    });
    let end = offset + u64::from(len);
    let mut at = offset;
    while at < end {
        let piece = match u64::from(chunk) {
            0 => end - at,
            chunk => ((at / chunk + 1) * chunk).min(end) - at,
        } as usize;
        let bytes = if piece >= ALIGNED_PIECE_BYTES && piece.is_multiple_of(BUF_ALIGN_BYTES) {
            let mut data = AlignedFill::new(piece);
            fill(reader, &mut data, piece, stall).await?;
            data.into_bytes()
        } else {
            // Read into spare capacity: no zero-fill of a buffer about to be overwritten.
            let mut data = BytesMut::with_capacity(piece);
            fill(reader, &mut data, piece, stall).await?;
            data.freeze()
        };
        chunks.push(bytes);
        at += piece as u64;
    }
    Ok(chunks)
}

/// Reads `piece` bytes into `data`: what the reader holds already (it read ahead past the
/// header), then the rest: of a piece of [`DIRECT_READ_BYTES`] or more straight from the
/// socket, of a smaller one through the reader's buffer.
async fn fill<R: AsyncRead + Unpin, B: BufMut>(
    reader: &mut BufReader<R>,
    data: &mut B,
    piece: usize,
    stall: Duration,
) -> Result<(), ConnectionError> {
    let held = reader.buffer().len().min(piece);
    data.put_slice(&reader.buffer()[..held]);
    reader.consume(held);
    let mut got = held;
    while got < piece {
        let want = piece - got;
        // The piece's size decides, not what is left of it: a rest read through the
        // reader's buffer would fill that buffer with up to 128 KiB of what follows, to
        // be copied out again for the next piece, and so on through the payload.
        let read = if piece >= DIRECT_READ_BYTES && reader.buffer().is_empty() {
            let mut direct = reader.get_mut().take(want as u64);
            within(stall, direct.read_buf(data)).await?
        } else {
            let mut buffered = (&mut *reader).take(want as u64);
            within(stall, buffered.read_buf(data)).await?
        };
        if read == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        got += read;
    }
    Ok(())
}

/// A page-aligned buffer being filled from the socket: the bytes written so far are the
/// first `filled`; the rest is uninitialised and never read.
struct AlignedFill {
    buf: AlignedBuf,
    filled: usize,
}

impl AlignedFill {
    fn new(len: usize) -> AlignedFill {
        // SAFETY: nothing reads the buffer before it is full: `BufMut` hands out only the
        // unfilled part as uninitialised memory, and `into_bytes` requires it full.
        let buf = unsafe { AlignedBuf::uninit(len) };
        AlignedFill { buf, filled: 0 }
    }

    /// The filled buffer as `Bytes`, no copy.
    fn into_bytes(self) -> Bytes {
        assert_eq!(self.filled, self.buf.len(), "payload buffer not filled");
        Bytes::from_owner(self.buf)
    }
}

// SAFETY: `chunk_mut` is the unfilled tail of the allocation, and `advance_mut` only
// counts bytes the caller has written into it (checked against the length).
unsafe impl BufMut for AlignedFill {
    fn remaining_mut(&self) -> usize {
        self.buf.len() - self.filled
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        assert!(cnt <= self.remaining_mut(), "advance past the buffer's end");
        self.filled += cnt;
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        let left = self.remaining_mut();
        // SAFETY: `filled <= len`, so the tail `[filled, len)` lies in the allocation, and
        // `&mut self` makes this the only access to it.
        unsafe { UninitSlice::from_raw_parts_mut(self.buf.as_mut_ptr().add(self.filled), left) }
    }
}

/// Runs one validated request and returns its reply with what it still holds of the
/// payload budget (`permit`): a WRITE's share returns once the export has handled the
/// payload, a READ's stays with its reply until the socket has taken it.
pub(super) async fn run<E: Export>(
    export: &E,
    request: Request,
    cookie: u64,
    payload: Option<Vec<Bytes>>,
    structured: bool,
    permit: Option<OwnedSemaphorePermit>,
) -> Reply {
    let frame = execute(export, request, cookie, payload, structured).await;
    let budget = match request {
        Request::Read { .. } => permit,
        _ => {
            drop(permit);
            None
        }
    };
    Reply { frame, budget }
}

/// Runs one validated request against the export and builds its reply.
pub(super) async fn execute<E: Export>(
    export: &E,
    request: Request,
    cookie: u64,
    payload: Option<Vec<Bytes>>,
    structured: bool,
) -> Frame {
    match request {
        Request::Read { offset, length, df } => {
            if length == 0 {
                return read_frame(cookie, offset, Default::default(), structured, df);
            }
            match export.read(offset, length).await {
                Ok(data) if data.len_bytes() == length as usize => {
                    read_frame(cookie, offset, data, structured, df)
                }
                // An export that returns the wrong length is buggy; the client must not
                // receive a malformed reply because of it.
                Ok(_) => error_frame(cookie, Errno::Io, structured),
                Err(errno) => error_frame(cookie, errno, structured),
            }
        }
        Request::Write {
            offset,
            length,
            fua,
        } => {
            let result = match payload {
                _ if length == 0 => Ok(()),
                Some(chunks) if export.write_chunk_bytes() != 0 => {
                    export.write_chunks(offset, chunks, fua).await
                }
                Some(chunks) => {
                    export
                        .write(offset, crate::export::joined(chunks), fua)
                        .await
                }
                None => Err(Errno::Inval),
            };
            status_frame(cookie, result)
        }
        Request::Flush => status_frame(cookie, export.flush().await),
        Request::Trim {
            offset,
            length,
            fua,
        } => {
            let result = if length == 0 {
                Ok(())
            } else {
                export.trim(offset, length, fua).await
            };
            status_frame(cookie, result)
        }
        Request::WriteZeroes {
            offset,
            length,
            flags,
        } => {
            let result = if length == 0 {
                Ok(())
            } else {
                export.write_zeroes(offset, length, flags).await
            };
            status_frame(cookie, result)
        }
        Request::Cache { offset, length } => {
            let result = if length == 0 || !export.features().cache {
                Ok(())
            } else {
                export.cache(offset, length).await
            };
            status_frame(cookie, result)
        }
        Request::BlockStatus {
            offset,
            length,
            req_one,
        } => match export.block_status(offset, length).await {
            Ok(extents) => match wire_extents(&extents, length, req_one) {
                Some(wire) => block_status_frame(cookie, BASE_ALLOCATION_ID, &wire),
                None => error_frame(cookie, Errno::Io, structured),
            },
            Err(errno) => error_frame(cookie, errno, structured),
        },
        // The connection task handles DISC itself.
        Request::Disc => status_frame(cookie, Ok(())),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::ReadBuf;

    use super::*;

    /// An in-memory stream that hands out at most `step` bytes per read, as a socket
    /// hands out what has arrived; `at` is how far it has been read.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let n = buf
                .remaining()
                .min(this.step)
                .min(this.data.len() - this.at);
            buf.put_slice(&this.data[this.at..this.at + n]);
            this.at += n;
            Poll::Ready(Ok(()))
        }
    }

    /// A payload of large pieces whose start the reader already holds (read ahead with
    /// the request's header) comes out whole, and reading it leaves what follows it in
    /// the stream: each piece's rest is read straight from the stream, so nothing past
    /// the payload lands in the reader's buffer to be copied out again.
    #[test]
    fn large_pieces_are_read_past_the_buffer_and_no_further_than_the_payload() {
        const PIECE: u32 = 128 << 10;
        let len = 2 * PIECE;
        let mut data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        data.extend_from_slice(b"the next request");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let stream = Trickle {
                data: data.clone(),
                at: 0,
                step: 100_000,
            };
            let mut reader = BufReader::with_capacity(128 << 10, stream);
            // The header's read brought the payload's first 100,000 bytes along.
            assert_eq!(reader.fill_buf().await.unwrap().len(), 100_000);
            let chunks = read_payload(&mut reader, len, 0, PIECE, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(chunks.len(), 2);
            let read: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(read, data[..len as usize]);
            assert!(reader.buffer().is_empty());
            assert_eq!(reader.get_ref().at, len as usize);
        });
    }
}
