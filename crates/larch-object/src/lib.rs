//! Volumes on an object store (S3 and the stores that speak its API: Ceph's RADOS
//! Gateway, MinIO, Garage, ...): larch's backing store for data that outgrows one
//! machine's disks.
//!
//! A volume is a root object, map pages and data objects under a prefix ([`layout`]).
//! Blocks are read one ranged GET at a time and verified against their trailer; writes
//! are staged and made durable by a **commit** ([`ObjectVolume::flush`]): the changed data
//! objects are uploaded whole under new names, then the changed map pages, then the root
//! is written conditionally (`If-Match`) — the one atomic step, so a crash at any point
//! leaves the previous commit or this one, never a mix. The root also holds the **lease**
//! (owner, fencing token, end): one node writes a volume at a time, and a node whose lease
//! another took finds out at its next root write (the write fails, and the root it reads
//! back carries another node's token) and stops.
//!
//! The design, its failure cases and its costs: `docs/object-store.md`.

pub mod layout;
pub mod s3;
mod volume;

pub use volume::{
    CACHED_PAGE_BYTES, COUNT_AT_OPEN_PAGES, CommitWatcher, Followed, Hazard, LOCAL_MAP_CACHE_BYTES,
    LeaseChange, LeaseWatcher, LocalMapCache, LocalState, MAX_BYTES_IN_FLIGHT, MAX_UPLOADS,
    MapCache, ObjectStats, ObjectVolume, Options, ROOT_PUT_TRIES, StateSink, cached_page_bytes,
    cached_page_len, create, now_ms, probe, uploads_at_once,
};
