//! The transmission phase without I/O: request headers, their validation, and reply
//! encoding (simple replies and structured reply chunks).

use bytes::Bytes;
use thiserror::Error;

use crate::export::{BlockSizes, Errno, Extent, Features, ReadData, ReadSegment, ZeroFlags};
use crate::proto::{
    CHUNK_HEADER_LEN_BYTES, REQUEST_HEADER_LEN_BYTES, REQUEST_MAGIC, SIMPLE_REPLY_LEN_BYTES,
    SIMPLE_REPLY_MAGIC, STATE_HOLE, STATE_ZERO, STRUCTURED_REPLY_MAGIC, chunk, cmd, cmd_flag,
};

/// A request header as it arrived, before validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`NBD_CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`NBD_CMD_*`), possibly unknown.
    pub command: u16,
    /// Opaque cookie echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Length in bytes (for WRITE also the payload length).
    pub length: u32,
}

/// A header that cannot be answered: the stream is out of sync, so the connection ends.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("bad request magic {0:#010x}")]
pub struct BadRequestMagic(pub u32);

impl RequestHeader {
    /// Parses the 28-byte header.
    pub fn parse(buf: &[u8; REQUEST_HEADER_LEN_BYTES]) -> Result<RequestHeader, BadRequestMagic> {
        let magic = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if magic != REQUEST_MAGIC {
            return Err(BadRequestMagic(magic));
        }
        let mut cookie = [0u8; 8];
        cookie.copy_from_slice(&buf[8..16]);
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&buf[16..24]);
        Ok(RequestHeader {
            flags: u16::from_be_bytes([buf[4], buf[5]]),
            command: u16::from_be_bytes([buf[6], buf[7]]),
            cookie: u64::from_be_bytes(cookie),
            offset: u64::from_be_bytes(offset),
            length: u32::from_be_bytes([buf[24], buf[25], buf[26], buf[27]]),
        })
    }

    /// Encodes the header (what a client sends; used by tests and fuzzers).
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN_BYTES] {
        let mut b = [0u8; REQUEST_HEADER_LEN_BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.command.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Bytes of payload that follow this header on the wire. Only WRITE carries one, and
    /// it must be consumed whether or not the request is valid, or the stream desyncs.
    pub fn payload_len_bytes(&self) -> u32 {
        if self.command == cmd::WRITE {
            self.length
        } else {
            0
        }
    }
}

/// What validation needs to know about the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransmissionContext {
    /// Export size in bytes.
    pub size_bytes: u64,
    /// Export capabilities.
    pub features: Features,
    /// Block size constraints (minimum alignment, maximum READ/WRITE payload).
    pub block_sizes: BlockSizes,
    /// Structured replies were negotiated.
    pub structured_replies: bool,
    /// `base:allocation` was negotiated for this export.
    pub base_allocation: bool,
}

/// A validated request; every range is inside the export and aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `NBD_CMD_READ`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        length: u32,
        /// The reply must be one chunk (`DF`).
        df: bool,
    },
    /// `NBD_CMD_WRITE` (the payload follows).
    Write {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        length: u32,
        /// Durable before the reply.
        fua: bool,
    },
    /// `NBD_CMD_DISC`.
    Disc,
    /// `NBD_CMD_FLUSH`.
    Flush,
    /// `NBD_CMD_TRIM`.
    Trim {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        length: u32,
        /// Durable before the reply.
        fua: bool,
    },
    /// `NBD_CMD_WRITE_ZEROES`.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        length: u32,
        /// Hole punching, fast-only and FUA.
        flags: ZeroFlags,
    },
    /// `NBD_CMD_CACHE`.
    Cache {
        /// Byte offset.
        offset: u64,
        /// Length in bytes.
        length: u32,
    },
    /// `NBD_CMD_BLOCK_STATUS` for `base:allocation`.
    BlockStatus {
        /// Byte offset.
        offset: u64,
        /// Length in bytes (not zero).
        length: u32,
        /// Exactly one extent (`REQ_ONE`).
        req_one: bool,
    },
}

/// Checks a header against the connection; the error is what the reply carries. The
/// caller still consumes a WRITE payload before replying, valid or not.
pub fn validate(hdr: &RequestHeader, ctx: &TransmissionContext) -> Result<Request, Errno> {
    let f = &ctx.features;
    let allowed_flags = match hdr.command {
        cmd::READ if ctx.structured_replies => cmd_flag::FUA | cmd_flag::DF,
        cmd::WRITE_ZEROES if f.fast_zero => cmd_flag::FUA | cmd_flag::NO_HOLE | cmd_flag::FAST_ZERO,
        cmd::WRITE_ZEROES => cmd_flag::FUA | cmd_flag::NO_HOLE,
        cmd::BLOCK_STATUS => cmd_flag::FUA | cmd_flag::REQ_ONE,
        cmd::READ | cmd::WRITE | cmd::DISC | cmd::FLUSH | cmd::TRIM | cmd::CACHE => cmd_flag::FUA,
        _ => return Err(Errno::Inval),
    };
    if hdr.flags & !allowed_flags != 0 {
        return Err(Errno::Inval);
    }
    let fua = hdr.flags & cmd_flag::FUA != 0;
    let (offset, length) = (hdr.offset, hdr.length);
    let mutating = matches!(hdr.command, cmd::WRITE | cmd::TRIM | cmd::WRITE_ZEROES);
    if mutating && f.read_only {
        return Err(Errno::Perm);
    }
    let unadvertised = match hdr.command {
        cmd::FLUSH => !f.flush,
        cmd::TRIM => !f.trim,
        cmd::WRITE_ZEROES => !f.write_zeroes,
        cmd::BLOCK_STATUS => !ctx.base_allocation,
        _ => false,
    };
    if unadvertised {
        return Err(Errno::Inval);
    }
    match hdr.command {
        cmd::DISC => return Ok(Request::Disc),
        cmd::FLUSH if offset != 0 || length != 0 => return Err(Errno::Inval),
        cmd::FLUSH => return Ok(Request::Flush),
        cmd::BLOCK_STATUS if length == 0 => return Err(Errno::Inval),
        _ => {}
    }
    let in_range = offset
        .checked_add(u64::from(length))
        .is_some_and(|end| end <= ctx.size_bytes);
    if !in_range {
        // The spec's choice of error: writes past the end are out of space, every
        // other command past the end is invalid.
        return Err(if matches!(hdr.command, cmd::WRITE | cmd::WRITE_ZEROES) {
            Errno::NoSpc
        } else {
            Errno::Inval
        });
    }
    let min = u64::from(ctx.block_sizes.minimum_bytes.max(1));
    if offset % min != 0 || u64::from(length) % min != 0 {
        return Err(Errno::Inval);
    }
    let payload_command = matches!(hdr.command, cmd::READ | cmd::WRITE);
    if payload_command && length > ctx.block_sizes.maximum_bytes {
        return Err(Errno::Inval);
    }
    Ok(match hdr.command {
        cmd::READ => Request::Read {
            offset,
            length,
            df: hdr.flags & cmd_flag::DF != 0,
        },
        cmd::WRITE => Request::Write {
            offset,
            length,
            fua,
        },
        cmd::TRIM => Request::Trim {
            offset,
            length,
            fua,
        },
        cmd::WRITE_ZEROES => Request::WriteZeroes {
            offset,
            length,
            flags: ZeroFlags {
                may_trim: hdr.flags & cmd_flag::NO_HOLE == 0,
                fast_only: hdr.flags & cmd_flag::FAST_ZERO != 0,
                fua,
            },
        },
        cmd::CACHE => Request::Cache { offset, length },
        // Only BLOCK_STATUS is left: every other command returned above.
        _ => Request::BlockStatus {
            offset,
            length,
            req_one: hdr.flags & cmd_flag::REQ_ONE != 0,
        },
    })
}

/// A simple reply header (`error` 0 means success).
pub fn simple_reply(cookie: u64, error: u32) -> [u8; SIMPLE_REPLY_LEN_BYTES] {
    let mut b = [0u8; SIMPLE_REPLY_LEN_BYTES];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk header.
pub fn chunk_header(
    flags: u16,
    chunk_type: u16,
    cookie: u64,
    length_bytes: u32,
) -> [u8; CHUNK_HEADER_LEN_BYTES] {
    let mut b = [0u8; CHUNK_HEADER_LEN_BYTES];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&chunk_type.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&length_bytes.to_be_bytes());
    b
}

/// Appends a structured `ERROR` chunk that ends the reply.
pub fn put_error_chunk(out: &mut Vec<u8>, cookie: u64, errno: Errno) {
    // u32 error + u16 message length (no message).
    out.extend_from_slice(&chunk_header(chunk::FLAG_DONE, chunk::ERROR, cookie, 6));
    out.extend_from_slice(&errno.wire_value().to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
}

/// A reply ready for the socket: pieces written back to back, never interleaved with
/// another reply's pieces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// The pieces, in order.
    pub parts: Vec<Bytes>,
}

impl Frame {
    /// A frame of one piece.
    pub fn single(bytes: impl Into<Bytes>) -> Frame {
        Frame {
            parts: vec![bytes.into()],
        }
    }

    /// Total bytes on the wire.
    pub fn len_bytes(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }
}

/// The reply to a request that has no data: a simple reply, which the spec allows for
/// every command but READ (and BLOCK_STATUS, which has its own chunk) even with structured
/// replies negotiated.
pub fn status_frame(cookie: u64, result: Result<(), Errno>) -> Frame {
    let error = result.err().map_or(0, Errno::wire_value);
    Frame::single(simple_reply(cookie, error).to_vec())
}

/// The reply to a READ or to a failed BLOCK_STATUS: with structured replies an error must
/// be a chunk, without them a simple reply.
pub fn error_frame(cookie: u64, errno: Errno, structured: bool) -> Frame {
    if structured {
        let mut out = Vec::with_capacity(CHUNK_HEADER_LEN_BYTES + 6);
        put_error_chunk(&mut out, cookie, errno);
        Frame::single(out)
    } else {
        status_frame(cookie, Err(errno))
    }
}

static ZEROES: [u8; 64 * 1024] = [0u8; 64 * 1024];

/// Bytes of zeroes without allocating for lengths up to 64 KiB.
fn zero_bytes(len: usize) -> Bytes {
    if len <= ZEROES.len() {
        Bytes::from_static(&ZEROES[..len])
    } else {
        Bytes::from(vec![0u8; len])
    }
}

/// The reply to a successful READ of `data` at `offset`. The caller has checked that
/// `data` holds exactly the requested length.
///
/// Simple replies carry the bytes after a 16-byte header. Structured replies send data
/// segments as `OFFSET_DATA` chunks and zero segments as `OFFSET_HOLE` chunks, or one
/// `OFFSET_DATA` chunk when the client asked not to fragment (`DF`); an empty read is a
/// lone `NONE` chunk.
pub fn read_frame(cookie: u64, offset: u64, data: ReadData, structured: bool, df: bool) -> Frame {
    let total = data.len_bytes();
    let mut parts = Vec::with_capacity(data.segments.len() * 2 + 1);
    if !structured {
        parts.push(Bytes::copy_from_slice(&simple_reply(cookie, 0)));
        for seg in data.segments {
            match seg {
                ReadSegment::Data(b) => parts.push(b),
                ReadSegment::Zeroes(n) => parts.push(zero_bytes(n as usize)),
            }
        }
        return Frame { parts };
    }
    if total == 0 {
        parts.push(Bytes::copy_from_slice(&chunk_header(
            chunk::FLAG_DONE,
            chunk::NONE,
            cookie,
            0,
        )));
        return Frame { parts };
    }
    let segments: Vec<ReadSegment> = data
        .segments
        .into_iter()
        .filter(|s| s.len_bytes() > 0)
        .collect();
    if !df && matches!(segments.as_slice(), [ReadSegment::Zeroes(_)]) {
        // One run of zeroes: a hole chunk carries it in 12 bytes.
        let mut head = Vec::with_capacity(CHUNK_HEADER_LEN_BYTES + 12);
        head.extend_from_slice(&chunk_header(
            chunk::FLAG_DONE,
            chunk::OFFSET_HOLE,
            cookie,
            12,
        ));
        head.extend_from_slice(&offset.to_be_bytes());
        head.extend_from_slice(&(total as u32).to_be_bytes());
        parts.push(Bytes::from(head));
        return Frame { parts };
    }
    if df || segments.len() == 1 {
        let mut head = Vec::with_capacity(CHUNK_HEADER_LEN_BYTES + 8);
        head.extend_from_slice(&chunk_header(
            chunk::FLAG_DONE,
            chunk::OFFSET_DATA,
            cookie,
            (8 + total) as u32,
        ));
        head.extend_from_slice(&offset.to_be_bytes());
        parts.push(Bytes::from(head));
        for seg in segments {
            match seg {
                ReadSegment::Data(b) => parts.push(b),
                ReadSegment::Zeroes(n) => parts.push(zero_bytes(n as usize)),
            }
        }
        return Frame { parts };
    }
    // Neighbouring data segments (an export's blocks) share one chunk: the spec asks for
    // as few chunks as may be, and a 32 MiB read of 4K blocks would otherwise be 8,192.
    // Runs of zeroes keep chunks of their own (holes, 12 bytes each).
    let mut runs: Vec<(Option<Vec<Bytes>>, usize)> = Vec::new();
    for seg in segments {
        let len = seg.len_bytes();
        match (seg, runs.last_mut()) {
            (ReadSegment::Data(b), Some((Some(run), run_len))) => {
                run.push(b);
                *run_len += len;
            }
            (ReadSegment::Data(b), _) => runs.push((Some(vec![b]), len)),
            (ReadSegment::Zeroes(_), _) => runs.push((None, len)),
        }
    }
    let last = runs.len() - 1;
    let mut pos = offset;
    for (i, (run, len)) in runs.into_iter().enumerate() {
        let flags = if i == last { chunk::FLAG_DONE } else { 0 };
        let mut head = Vec::with_capacity(CHUNK_HEADER_LEN_BYTES + 12);
        match run {
            Some(data) => {
                head.extend_from_slice(&chunk_header(
                    flags,
                    chunk::OFFSET_DATA,
                    cookie,
                    (8 + len) as u32,
                ));
                head.extend_from_slice(&pos.to_be_bytes());
                parts.push(Bytes::from(head));
                parts.extend(data);
            }
            None => {
                head.extend_from_slice(&chunk_header(flags, chunk::OFFSET_HOLE, cookie, 12));
                head.extend_from_slice(&pos.to_be_bytes());
                head.extend_from_slice(&(len as u32).to_be_bytes());
                parts.push(Bytes::from(head));
            }
        }
        pos += len as u64;
    }
    Frame { parts }
}

/// Most extents one BLOCK_STATUS reply carries; the client asks again for the rest.
pub const MAX_EXTENTS_PER_REPLY: usize = 2048;

/// Turns an export's extents into wire descriptors: zero-length extents dropped,
/// neighbours with equal flags merged, clipped to `length` (and to one extent with
/// `req_one`), lengths split to fit in u32, at most [`MAX_EXTENTS_PER_REPLY`]. Unknown
/// flag bits are cleared. Returns `None` if nothing is left to report.
pub fn wire_extents(extents: &[Extent], length: u32, req_one: bool) -> Option<Vec<(u32, u32)>> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut remaining = u64::from(length);
    for e in extents {
        if remaining == 0 {
            break;
        }
        let flags = e.flags & (STATE_HOLE | STATE_ZERO);
        let len = e.length_bytes.min(remaining);
        if len == 0 {
            continue;
        }
        remaining -= len;
        // `len` ≤ `length`, so it fits in u32.
        let len = len as u32;
        match out.last_mut() {
            Some(last) if last.1 == flags => last.0 += len,
            _ => out.push((len, flags)),
        }
    }
    if out.is_empty() {
        return None;
    }
    if req_one {
        out.truncate(1);
    }
    out.truncate(MAX_EXTENTS_PER_REPLY);
    Some(out)
}

/// The reply to a successful BLOCK_STATUS: one `BLOCK_STATUS` chunk that ends the reply.
pub fn block_status_frame(cookie: u64, context_id: u32, extents: &[(u32, u32)]) -> Frame {
    let length = 4 + 8 * extents.len();
    let mut out = Vec::with_capacity(CHUNK_HEADER_LEN_BYTES + length);
    out.extend_from_slice(&chunk_header(
        chunk::FLAG_DONE,
        chunk::BLOCK_STATUS,
        cookie,
        length as u32,
    ));
    out.extend_from_slice(&context_id.to_be_bytes());
    for (len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
    Frame::single(out)
}

#[cfg(test)]
mod tests;
