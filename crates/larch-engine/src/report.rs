//! The typed report of an open pool: what `larch status`, `arcstat`, `iostat`, `/status`
//! and `/metrics` show. The daemon writes it (inside its status file) with serde and the
//! CLI reads it back with the same types, so a renamed field is a compile error or a
//! refused file, never a silent zero.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::latency::{BUCKETS, LatencySnapshot};
use crate::{CacheMode, DeviceState, LogBias, Pool, SyncMode};

/// Everything a pool reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolReport {
    /// The pool's name.
    pub pool: String,
    /// The pool's guid.
    pub pool_guid: u64,
    /// Milliseconds since the pool was opened: the span of every counter of the report
    /// (they all start at 0 then), which `larch iostat`'s first report averages over.
    #[serde(default)]
    pub uptime_ms: u64,
    /// Its volumes, in configuration order.
    pub volumes: Vec<VolumeReport>,
    /// Its cache devices, in the order they were added.
    pub cache_devices: Vec<CacheDeviceReport>,
    /// Cache devices `pool.json` lists that the pool does not use (foreign, unreadable,
    /// too small, another pool's), each with why.
    #[serde(default)]
    pub unused_cache_devices: Vec<String>,
    /// How cache-device reads are done (`io_uring`, `threads`, ...).
    pub l2_read_path: String,
    /// The log device, if the pool has one.
    pub log_device: Option<LogDeviceReport>,
    /// Every tunable's value in force.
    pub tunables: BTreeMap<String, u64>,
    /// The arcstats (OpenZFS kstat names where the meaning matches).
    pub arcstats: Arcstats,
}

/// The arcstats by name, as OpenZFS's kstat file lists them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Arcstats(pub BTreeMap<String, u64>);

impl Arcstats {
    /// The value of `name`, or an error naming it when the report has no such stat (a
    /// report from another version of larch).
    pub fn get(&self, name: &str) -> Result<u64, MissingStat> {
        self.0
            .get(name)
            .copied()
            .ok_or_else(|| MissingStat(name.to_string()))
    }

    /// `self − earlier` for a counter (0 when it went backwards: a restart).
    pub fn delta(&self, earlier: &Arcstats, name: &str) -> Result<u64, MissingStat> {
        let now = self.get(name)?;
        Ok(now.saturating_sub(earlier.get(name).unwrap_or(0)))
    }
}

/// A stat a report does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the report has no arcstat {0:?} (written by another version of larch?)")]
pub struct MissingStat(pub String);

/// One volume and its backing store.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeReport {
    /// Name (the NBD export name).
    pub name: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Block size.
    pub volblocksize: u32,
    /// Writes are refused.
    pub readonly: bool,
    /// The `sync` property.
    pub sync: SyncMode,
    /// The `primarycache` property.
    #[serde(default)]
    pub primarycache: CacheMode,
    /// The `secondarycache` property.
    #[serde(default)]
    pub secondarycache: CacheMode,
    /// The `logbias` property.
    #[serde(default)]
    pub logbias: LogBias,
    /// Why its writes fail, if its backing store failed.
    pub write_failure: Option<String>,
    /// Blocks whose acknowledged writes a failed TXG lost: their reads fail (also after a
    /// restart, until `larch volume clear`).
    #[serde(default)]
    pub lost_blocks: u64,
    /// The backing store's path.
    pub backing: String,
    /// How the syncer writes the backing store: `O_DIRECT`, or `buffered (why)` (files
    /// and block devices that are not read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing_write_mode: Option<String>,
    /// Backing-store reads.
    pub backing_reads: u64,
    /// Bytes read from the backing store.
    pub backing_read_bytes: u64,
    /// Backing-store writes.
    pub backing_writes: u64,
    /// Bytes written to the backing store.
    pub backing_write_bytes: u64,
    /// Backing-store flushes.
    pub backing_flushes: u64,
    /// Failed backing-store operations.
    pub backing_errors: u64,
    /// Ranges of the backing store zeroed (TRIM, WRITE_ZEROES), whichever way.
    pub backing_zeroes: u64,
    /// Bytes of those ranges.
    pub backing_zeroed_bytes: u64,
    /// Bytes of them zeroed by writing zeros (the store could not punch or zero in place).
    pub backing_zeroes_written_bytes: u64,
    /// Time of backing-store reads.
    pub backing_read_latency: LatencyReport,
    /// Time of backing-store writes.
    pub backing_write_latency: LatencyReport,
    /// Time of backing-store flushes.
    pub backing_flush_latency: LatencyReport,
    /// Backing-store reads waiting for an I/O thread, and at the store.
    #[serde(default)]
    pub backing_read_queue: QueueReport,
    /// The runs of TXG writes waiting for a writer, and being written (none for a volume
    /// on an object store: its TXG is one commit).
    #[serde(default)]
    pub backing_write_queue: QueueReport,
    /// Bytes clients read.
    pub read_bytes: u64,
    /// Bytes clients wrote (write-zeroes included).
    pub write_bytes: u64,
    /// Clients' reads whose blocks were all in the ARC.
    pub read_arc_latency: LatencyReport,
    /// Clients' reads served from a cache device (and perhaps the ARC).
    pub read_l2_latency: LatencyReport,
    /// Clients' reads that needed the backing store.
    pub read_backing_latency: LatencyReport,
    /// Clients' writes.
    pub write_latency: LatencyReport,
    /// For a volume on an object store: its commits, requests and lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectReport>,
}

/// What an object-store volume did (see `larch_object`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectReport {
    /// This node's fencing token for the volume.
    pub token: u64,
    /// The last commit on the store.
    pub commit_seq: u64,
    /// Why the volume is not served now (the lease lost or lapsed).
    pub unusable: Option<String>,
    /// GET requests.
    pub gets: u64,
    /// Bytes they returned.
    pub get_bytes: u64,
    /// PUT requests.
    pub puts: u64,
    /// Bytes they sent.
    pub put_bytes: u64,
    /// Objects deleted (the collection of garbage at open deletes many per request).
    pub deletes: u64,
    /// Deletes that failed (the objects wait for a later open's collection of garbage).
    #[serde(default)]
    pub delete_errors: u64,
    /// Requests that failed after the client's retries.
    pub errors: u64,
    /// Commits.
    pub commits: u64,
    /// Bytes of blocks the commits made durable.
    pub committed_bytes: u64,
    /// Data objects written.
    pub objects_written: u64,
    /// Of those, objects read first because only some of their blocks changed.
    pub objects_merged: u64,
    /// Objects a commit left holding only zeros, cleared instead of written.
    pub objects_cleared: u64,
    /// Lease renewals.
    pub renewals: u64,
    /// Objects no commit names, deleted.
    pub garbage_deleted: u64,
    /// Bytes staged for the next commit.
    pub staged_bytes: u64,
    /// Bytes the object map takes in memory.
    pub map_bytes: u64,
    /// How the volume lays its blocks out (`segments` or `objects`).
    #[serde(default)]
    pub layout: String,
    /// Segments volumes: bytes of records in the segments the map names (what the store
    /// holds of the volume's data, trailers included).
    #[serde(default)]
    pub stored_bytes: u64,
    /// Of those, bytes of records the map points at (the rest waits for a repack).
    #[serde(default)]
    pub live_bytes: u64,
    /// Segments the map names.
    #[serde(default)]
    pub segments: u64,
    /// Segments read to be repacked.
    #[serde(default)]
    pub repacked_segments: u64,
    /// Bytes of live blocks the repacks moved into new segments.
    #[serde(default)]
    pub repack_bytes: u64,
    /// Segments deleted once no block lived in them.
    #[serde(default)]
    pub segments_freed: u64,
    /// Block-map pages read from the store (at open, and since by lookups that found
    /// their page in no cache: the ARC evicted it). Also in `gets`.
    #[serde(default)]
    pub map_page_gets: u64,
    /// Block-map pages read from a cache device's copy instead (the ARC evicted them).
    #[serde(default)]
    pub map_page_l2_reads: u64,
    /// Time of the last commit, µs.
    pub last_commit_us: u64,
}

impl ObjectReport {
    /// The report of an object-store volume.
    pub fn of(vol: &larch_object::ObjectVolume) -> ObjectReport {
        let s = &vol.stats;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let usage = vol.segment_usage().unwrap_or_default();
        ObjectReport {
            token: vol.token(),
            commit_seq: vol.commit_seq(),
            unusable: vol.unusable(),
            gets: load(&s.gets),
            get_bytes: load(&s.get_bytes),
            puts: load(&s.puts),
            put_bytes: load(&s.put_bytes),
            deletes: load(&s.deletes),
            delete_errors: load(&s.delete_errors),
            errors: load(&s.errors),
            commits: load(&s.commits),
            committed_bytes: load(&s.committed_bytes),
            objects_written: load(&s.objects_written),
            objects_merged: load(&s.objects_merged),
            objects_cleared: load(&s.objects_cleared),
            renewals: load(&s.renewals),
            garbage_deleted: load(&s.garbage_deleted),
            staged_bytes: load(&s.staged_bytes),
            map_bytes: vol.map_bytes(),
            layout: vol.geometry().format.name().to_string(),
            stored_bytes: usage.0,
            live_bytes: usage.1,
            segments: usage.2,
            repacked_segments: load(&s.repacked_segments),
            repack_bytes: load(&s.repack_bytes),
            segments_freed: load(&s.segments_freed),
            map_page_gets: load(&s.map_page_gets),
            map_page_l2_reads: load(&s.map_page_l2_reads),
            last_commit_us: load(&s.last_commit_us),
        }
    }
}

/// One cache device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheDeviceReport {
    /// Its path.
    pub path: String,
    /// Its guid.
    pub guid: u64,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// Blocks it holds a live copy of (its share of `l2_blocks`).
    pub blocks: u64,
    /// Its state.
    pub state: DeviceState,
    /// Why it is faulted, if it is.
    pub fault: Option<String>,
    /// How its reads and writes reach it: `O_DIRECT`, or `buffered (why)` when they go
    /// through the page cache (a file system that refused `O_DIRECT`, at open or at a
    /// read or write). Absent for devices that are not files (in-process tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_mode: Option<String>,
    /// Entries restored so far by its rebuild.
    pub rebuild_entries: u64,
    /// How far its rebuild walked the ring, in thousandths.
    pub rebuild_permille: u64,
    /// Block reads (hits and failed attempts).
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Reads that failed or did not verify (a copy the ring wrote over during its read
    /// is not counted: `l2_evicted_in_flight`).
    pub read_errors: u64,
    /// Feed batches written.
    pub writes: u64,
    /// Bytes of data written by feeds.
    pub write_bytes: u64,
    /// Time of block reads, verification included.
    pub read_latency: LatencyReport,
    /// Time of feed batches.
    pub write_latency: LatencyReport,
    /// Block reads waiting to be issued (for an I/O thread when not through io_uring),
    /// and at the device.
    #[serde(default)]
    pub read_queue: QueueReport,
    /// What its rebuild found, once it ended.
    pub rebuild: Option<RebuildReport>,
}

/// What a cache device's rebuild found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildReport {
    /// 1 when it completed.
    pub success: u64,
    /// Entries restored.
    pub bufs: u64,
    /// Log blocks read.
    pub log_blocks: u64,
    /// Reads that failed.
    pub io_errors: u64,
    /// Log blocks whose checksum did not match.
    pub cksum_lb_errors: u64,
}

/// The log device (SLOG).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogDeviceReport {
    /// Its path.
    pub path: String,
    /// Its guid.
    pub guid: u64,
    /// `online`, or `faulted` once it stopped taking records.
    pub state: String,
    /// Why it stopped taking records, if it did.
    pub fault: Option<String>,
    /// How its reads and writes reach it: `O_DIRECT`, or `buffered (why)` when they go
    /// through the page cache (commits are still flushed). Absent for devices that are
    /// not files (in-process tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_mode: Option<String>,
    /// Commits.
    pub commits: u64,
    /// Log blocks written.
    pub blocks_written: u64,
    /// Records written.
    pub records: u64,
    /// Bytes of record data written.
    pub bytes: u64,
    /// Time of each commit's write to the device.
    pub commit_latency: LatencyReport,
}

/// A latency histogram: its buckets (four per power of two, see [`crate::latency`]) and
/// figures derived from them (µs; `None` with no operations).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    /// Operations.
    pub count: u64,
    /// Total time, ns.
    pub sum_ns: u64,
    /// Mean, µs.
    pub mean_us: Option<f64>,
    /// Median (bucket upper bound), µs.
    pub p50_us: Option<f64>,
    /// 99th percentile (bucket upper bound), µs.
    pub p99_us: Option<f64>,
    /// Operations per bucket ([`BUCKETS`] of them).
    pub buckets: Vec<u64>,
}

/// A queue of requests in larch before their device ([`crate::latency::IoQueue`]): how
/// many wait and how many are at the device now, and the times of those that ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueReport {
    /// Requests waiting to be issued now.
    pub pending: u64,
    /// Requests issued and not yet done now.
    pub active: u64,
    /// Time from queueing to issue.
    pub wait: LatencyReport,
    /// Time from queueing to the end (the device's own time is this less `wait`).
    pub total: LatencyReport,
}

impl QueueReport {
    /// The report of `queue` now.
    pub fn of(queue: &crate::latency::IoQueue) -> QueueReport {
        let (pending, active) = queue.depth();
        QueueReport {
            pending,
            active,
            wait: LatencyReport::of(&queue.wait.snapshot()),
            total: LatencyReport::of(&queue.total.snapshot()),
        }
    }
}

impl LatencyReport {
    /// The report of a snapshot.
    pub fn of(s: &LatencySnapshot) -> LatencyReport {
        let us = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e6);
        LatencyReport {
            count: s.count(),
            sum_ns: s.sum_ns,
            mean_us: us(s.mean()),
            p50_us: us(s.percentile(0.5)),
            p99_us: us(s.percentile(0.99)),
            buckets: s.buckets.to_vec(),
        }
    }

    /// The snapshot it was made from (empty buckets for a report of another layout).
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut snapshot = LatencySnapshot {
            sum_ns: self.sum_ns,
            ..LatencySnapshot::default()
        };
        if self.buckets.len() == BUCKETS {
            snapshot.buckets.copy_from_slice(&self.buckets);
        }
        snapshot
    }
}

impl Pool {
    /// The pool's report now.
    pub fn report(&self) -> PoolReport {
        let engine = &self.engine;
        let volumes = self
            .volumes
            .iter()
            .map(|v| {
                let s = &v.backing().stats;
                let load =
                    |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
                let info = v.info();
                VolumeReport {
                    name: v.name.clone(),
                    size_bytes: info.size_bytes,
                    volblocksize: info.block_bytes,
                    readonly: v.read_only(),
                    sync: info.sync,
                    primarycache: info.primarycache,
                    secondarycache: info.secondarycache,
                    logbias: info.logbias,
                    write_failure: v.entry().failure(),
                    lost_blocks: v.entry().lost_count(),
                    backing: v.backing().path().display().to_string(),
                    backing_write_mode: v.backing().write_mode(),
                    backing_reads: load(&s.reads),
                    backing_read_bytes: load(&s.read_bytes),
                    backing_writes: load(&s.writes),
                    backing_write_bytes: load(&s.write_bytes),
                    backing_flushes: load(&s.flushes),
                    backing_errors: load(&s.errors),
                    backing_zeroes: load(&s.zeroes),
                    backing_zeroed_bytes: load(&s.zeroed_bytes),
                    backing_zeroes_written_bytes: load(&s.zeroes_written_bytes),
                    backing_read_latency: LatencyReport::of(&s.read_latency.snapshot()),
                    backing_write_latency: LatencyReport::of(&s.write_latency.snapshot()),
                    backing_flush_latency: LatencyReport::of(&s.flush_latency.snapshot()),
                    backing_read_queue: QueueReport::of(&s.read_queue),
                    backing_write_queue: QueueReport::of(&s.write_queue),
                    read_bytes: load(&v.frontend.read_bytes),
                    write_bytes: load(&v.frontend.write_bytes),
                    read_arc_latency: LatencyReport::of(&v.frontend.read_arc.snapshot()),
                    read_l2_latency: LatencyReport::of(&v.frontend.read_l2.snapshot()),
                    read_backing_latency: LatencyReport::of(&v.frontend.read_backing.snapshot()),
                    write_latency: LatencyReport::of(&v.frontend.write.snapshot()),
                    object: v.backing().object().map(|o| ObjectReport::of(o)),
                }
            })
            .collect();
        PoolReport {
            pool: self.config.name.clone(),
            pool_guid: self.config.guid,
            uptime_ms: engine.now_ms(),
            volumes,
            cache_devices: engine.device_reports(),
            unused_cache_devices: self
                .unused_devices
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .cloned()
                .collect(),
            l2_read_path: engine.l2_read_path(),
            log_device: engine.log_report(),
            tunables: engine.tunables.values(),
            arcstats: Arcstats(engine.arcstats().into_iter().collect()),
        }
    }
}
