//! NBD protocol codec (no I/O) and async server.
//!
//! - [`proto`]: the wire constants.
//! - [`handshake`]: fixed newstyle negotiation as a pure state machine
//!   ([`handshake::Negotiation`]): options `EXPORT_NAME`, `ABORT`, `LIST`, `INFO`, `GO`,
//!   `STRUCTURED_REPLY`, `LIST_META_CONTEXT`, `SET_META_CONTEXT` (`base:allocation`);
//!   `STARTTLS` (when the server has TLS; modes off, on and require as nbdkit's); every
//!   other option is answered "unsupported".
//! - [`tls`]: the server's x509 credentials (rustls) and the names of client certificates.
//! - [`access`]: allow-lists of exports per client address and certificate name.
//! - [`transmission`]: request headers, validation against the export
//!   ([`transmission::validate`]) and reply encoding (simple replies, structured chunks).
//! - [`export`]: the [`Export`] trait a storage engine implements, and its vocabulary.
//! - [`server`]: the tokio server ([`Server`]) over TCP, Unix sockets or any stream.
//! - [`mem`]: [`mem::MemExport`], a RAM-backed export for tests and benchmarks.
//!
//! Only this crate knows the NBD wire format. The codec modules do no I/O, so they are
//! fuzzed and tested byte for byte.

#![warn(missing_docs)]

pub mod access;
pub mod export;
pub mod handshake;
pub mod mem;
pub mod proto;
pub mod server;
pub mod tls;
pub mod transmission;

/// The byte buffer type of read results and write payloads (re-exported so engines and
/// tests name the same type).
pub use bytes::Bytes;

pub use access::{AccessRule, AccessRules, ClientIdentity, Network, NetworkError};
pub use export::{
    BlockSizes, BlockSizesError, Errno, Export, ExportResult, Extent, Features, ReadData,
    ReadSegment, ZeroFlags,
};
pub use handshake::{Access, TlsMode};
pub use server::{
    ConnectionError, Listener, NamedExport, Security, Server, ServerError, ServerLimits,
};
pub use tls::{TlsFiles, TlsSettings};
