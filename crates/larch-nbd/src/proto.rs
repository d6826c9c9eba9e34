//! Wire constants of the NBD protocol (`doc/proto.md` of NetworkBlockDevice/nbd).
//!
//! Every integer on the wire is big-endian. Names follow the spec without the `NBD_`
//! prefix so a reader can search the spec for them.

/// `NBDMAGIC`: first word of the server greeting.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: second word of the greeting and first word of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request (compact, 28-byte header).
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Length of the server greeting in bytes.
pub const GREETING_LEN_BYTES: usize = 18;
/// Length of an option request header in bytes (magic, option, length).
pub const OPTION_HEADER_LEN_BYTES: usize = 16;
/// Length of a transmission request header in bytes.
pub const REQUEST_HEADER_LEN_BYTES: usize = 28;
/// Length of a simple reply header in bytes.
pub const SIMPLE_REPLY_LEN_BYTES: usize = 16;
/// Length of a structured reply chunk header in bytes.
pub const CHUNK_HEADER_LEN_BYTES: usize = 20;
/// The spec's upper bound for any string (export names, queries, messages).
pub const STRING_MAX_BYTES: usize = 4096;

/// Handshake flags sent by the server in the greeting.
pub mod handshake_flag {
    /// The server speaks fixed newstyle.
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    /// The server will omit the 124 zero bytes after `EXPORT_NAME` if asked.
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags sent after the greeting.
pub mod client_flag {
    /// The client speaks fixed newstyle.
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    /// The client asks for the 124 zero bytes to be omitted.
    pub const NO_ZEROES: u32 = 1 << 1;
}

/// Option numbers (`NBD_OPT_*`).
pub mod opt {
    /// Select an export and end negotiation (old style, cannot fail gracefully).
    pub const EXPORT_NAME: u32 = 1;
    /// End negotiation without an export.
    pub const ABORT: u32 = 2;
    /// List the exports.
    pub const LIST: u32 = 3;
    /// Upgrade to TLS.
    pub const STARTTLS: u32 = 5;
    /// Describe an export without selecting it.
    pub const INFO: u32 = 6;
    /// Select an export and end negotiation.
    pub const GO: u32 = 7;
    /// Enable structured replies.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// List metadata contexts.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Select metadata contexts.
    pub const SET_META_CONTEXT: u32 = 10;
    /// Extended headers (experimental; not implemented).
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (`NBD_REP_*`).
pub mod rep {
    /// Final reply to an option that succeeded.
    pub const ACK: u32 = 1;
    /// One export in a `LIST` answer.
    pub const SERVER: u32 = 2;
    /// One information item in an `INFO`/`GO` answer.
    pub const INFO: u32 = 3;
    /// One metadata context.
    pub const META_CONTEXT: u32 = 4;
    /// Bit 31 marks an error reply.
    pub const ERR_BIT: u32 = 1 << 31;
    /// The option is not supported.
    pub const ERR_UNSUP: u32 = ERR_BIT + 1;
    /// Refused by policy.
    pub const ERR_POLICY: u32 = ERR_BIT + 2;
    /// Syntactically or semantically invalid.
    pub const ERR_INVALID: u32 = ERR_BIT + 3;
    /// Not supported on this platform.
    pub const ERR_PLATFORM: u32 = ERR_BIT + 4;
    /// TLS is required first.
    pub const ERR_TLS_REQD: u32 = ERR_BIT + 5;
    /// No such export.
    pub const ERR_UNKNOWN: u32 = ERR_BIT + 6;
    /// The server is shutting down.
    pub const ERR_SHUTDOWN: u32 = ERR_BIT + 7;
    /// Block size information is required.
    pub const ERR_BLOCK_SIZE_REQD: u32 = ERR_BIT + 8;
    /// The request or reply would be too large.
    pub const ERR_TOO_BIG: u32 = ERR_BIT + 9;
}

/// Information types inside `NBD_REP_INFO` (`NBD_INFO_*`).
pub mod info {
    /// Size and transmission flags (mandatory).
    pub const EXPORT: u16 = 0;
    /// Canonical export name.
    pub const NAME: u16 = 1;
    /// Human-readable description.
    pub const DESCRIPTION: u16 = 2;
    /// Minimum, preferred and maximum block sizes.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags (`NBD_FLAG_*`), sent once per connection after negotiation.
pub mod tx_flag {
    /// Always set.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// Writes are refused with `EPERM`.
    pub const READ_ONLY: u16 = 1 << 1;
    /// `NBD_CMD_FLUSH` is understood.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// `NBD_CMD_FLAG_FUA` is understood.
    pub const SEND_FUA: u16 = 1 << 3;
    /// Scheduling hint: the medium is rotational.
    pub const ROTATIONAL: u16 = 1 << 4;
    /// `NBD_CMD_TRIM` is understood.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// `NBD_CMD_WRITE_ZEROES` (and `NO_HOLE`) is understood.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// `NBD_CMD_FLAG_DF` is understood (only with structured replies).
    pub const SEND_DF: u16 = 1 << 7;
    /// Flush and FUA act across all connections to the export.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    /// `NBD_CMD_CACHE` is understood.
    pub const SEND_CACHE: u16 = 1 << 10;
    /// `NBD_CMD_FLAG_FAST_ZERO` is understood.
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Command types (`NBD_CMD_*`).
pub mod cmd {
    /// Read data.
    pub const READ: u16 = 0;
    /// Write data (payload follows the header).
    pub const WRITE: u16 = 1;
    /// Disconnect after outstanding requests.
    pub const DISC: u16 = 2;
    /// Make replied writes durable.
    pub const FLUSH: u16 = 3;
    /// Discard a range (advisory).
    pub const TRIM: u16 = 4;
    /// Prefetch a range (advisory).
    pub const CACHE: u16 = 5;
    /// Write zeroes to a range.
    pub const WRITE_ZEROES: u16 = 6;
    /// Report the state of a range in the negotiated metadata contexts.
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags (`NBD_CMD_FLAG_*`).
pub mod cmd_flag {
    /// Force unit access: reply only once the data is durable.
    pub const FUA: u16 = 1 << 0;
    /// `WRITE_ZEROES` must not punch a hole.
    pub const NO_HOLE: u16 = 1 << 1;
    /// Do not fragment a structured read reply.
    pub const DF: u16 = 1 << 2;
    /// `BLOCK_STATUS`: return exactly one extent.
    pub const REQ_ONE: u16 = 1 << 3;
    /// `WRITE_ZEROES`: fail with `ENOTSUP` unless zeroing is fast.
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Structured reply chunk types (`NBD_REPLY_TYPE_*`).
pub mod chunk {
    /// No payload; used to end a reply.
    pub const NONE: u16 = 0;
    /// u64 offset followed by data.
    pub const OFFSET_DATA: u16 = 1;
    /// u64 offset and u32 length of a range that reads as zeroes.
    pub const OFFSET_HOLE: u16 = 2;
    /// u32 context id followed by (u32 length, u32 flags) descriptors.
    pub const BLOCK_STATUS: u16 = 5;
    /// u32 error, u16 message length, message.
    pub const ERROR: u16 = (1 << 15) + 1;
    /// Chunk flag: the last chunk of this reply.
    pub const FLAG_DONE: u16 = 1 << 0;
}

/// The only metadata context larch implements.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// `base:allocation` flag: the range is a hole (unallocated).
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` flag: the range reads as zeroes.
pub const STATE_ZERO: u32 = 1 << 1;
/// The context id larch gives `base:allocation` on every connection.
pub const BASE_ALLOCATION_ID: u32 = 1;
