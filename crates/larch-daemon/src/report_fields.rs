//! The report's per-item fields (each volume's, cache device's and log device's counters,
//! gauges and latency histograms) with their names in the two places that show them: the
//! Prometheus family of `/metrics` ([`crate::metrics`]) and the series or heat map of the
//! Analytics history ([`crate::recorder`]). One table per kind of item, read by both, so
//! that a new counter is one entry here; an entry that one of the two does not show has
//! `None` there.
//!
//! The tables' order is the history's: its catalog lists series and heat maps in the order
//! they were first recorded, and `larch analytics export` writes its columns in that order.
//! `/metrics` writes its families in the same order (Prometheus reads them in any).
//!
//! The arcstats are not here: both read their names, kinds and units from
//! `larch_engine::stats`, whose declarations are already the one table of them.

use larch_engine::report::{CacheDeviceReport, LatencyReport, LogDeviceReport, VolumeReport};
use larch_engine::stats::StatKind;

/// A Prometheus metric family: its name (with its unit and `_total` for a counter) and its
/// help line. Its samples are labelled with the item (`volume="NAME"`, `device="PATH"`).
pub struct Family {
    /// The family's name.
    pub name: &'static str,
    /// Its help line.
    pub help: &'static str,
}

/// A series (or heat map) of the history, per item: its id is `GROUP/ITEM/NAME` (ITEM: a
/// volume's name, a device's GUID in hex) and its label `ITEM LABEL` (ITEM: a volume's
/// name, a device's file name).
pub struct Series {
    /// The first part of the id (`volume`, `backing`, `cache`, ...).
    pub group: &'static str,
    /// The last part of the id.
    pub name: &'static str,
    /// What the page calls it, after the item's name.
    pub label: &'static str,
    /// The unit of its values (a counter's series is a rate); unused for a heat map.
    pub unit: &'static str,
}

impl Series {
    /// The id for the item whose id part is `item`.
    pub fn id(&self, item: &str) -> String {
        format!("{}/{item}/{}", self.group, self.name)
    }

    /// The label for the item shown as `shown`.
    pub fn label(&self, shown: &str) -> String {
        format!("{shown} {}", self.label)
    }
}

/// A counter or gauge of one item.
pub struct Field<T: 'static> {
    /// Its value in a report.
    pub value: fn(&T) -> u64,
    /// Counter (a `/metrics` counter, a per-second series) or gauge (a level).
    pub kind: StatKind,
    /// Its family in `/metrics`, if it has one.
    pub metric: Option<Family>,
    /// Its series in the history, if it has one.
    pub series: Option<Series>,
}

/// A latency histogram of one item.
pub struct Latency<T: 'static> {
    /// Its histogram in a report.
    pub latency: fn(&T) -> &LatencyReport,
    /// Its histogram family in `/metrics` (in seconds), if it has one.
    pub metric: Option<Family>,
    /// Its heat map in the history, if it has one (`unit` is unused).
    pub heat: Option<Series>,
}

/// A counter that the history shows and `/metrics` does not.
const fn history_counter<T>(
    value: fn(&T) -> u64,
    group: &'static str,
    name: &'static str,
    label: &'static str,
    unit: &'static str,
) -> Field<T> {
    Field {
        value,
        kind: StatKind::Counter,
        metric: None,
        series: Some(Series {
            group,
            name,
            label,
            unit,
        }),
    }
}

/// A counter that both show.
const fn counter<T>(
    value: fn(&T) -> u64,
    metric: (&'static str, &'static str),
    series: (&'static str, &'static str, &'static str, &'static str),
) -> Field<T> {
    Field {
        value,
        kind: StatKind::Counter,
        metric: Some(Family {
            name: metric.0,
            help: metric.1,
        }),
        series: Some(Series {
            group: series.0,
            name: series.1,
            label: series.2,
            unit: series.3,
        }),
    }
}

/// A counter that `/metrics` shows and the history does not.
const fn metric_counter<T>(
    value: fn(&T) -> u64,
    name: &'static str,
    help: &'static str,
) -> Field<T> {
    Field {
        value,
        kind: StatKind::Counter,
        metric: Some(Family { name, help }),
        series: None,
    }
}

/// A gauge that both show.
const fn gauge<T>(
    value: fn(&T) -> u64,
    metric: (&'static str, &'static str),
    series: (&'static str, &'static str, &'static str, &'static str),
) -> Field<T> {
    Field {
        kind: StatKind::Gauge,
        ..counter(value, metric, series)
    }
}

/// A gauge that `/metrics` shows and the history does not.
const fn metric_gauge<T>(value: fn(&T) -> u64, name: &'static str, help: &'static str) -> Field<T> {
    Field {
        value,
        kind: StatKind::Gauge,
        metric: Some(Family { name, help }),
        series: None,
    }
}

/// A latency histogram that the history shows and `/metrics` does not.
const fn history_latency<T>(
    latency: fn(&T) -> &LatencyReport,
    group: &'static str,
    name: &'static str,
    label: &'static str,
) -> Latency<T> {
    Latency {
        latency,
        metric: None,
        heat: Some(Series {
            group,
            name,
            label,
            unit: "",
        }),
    }
}

/// A latency histogram that both show.
const fn latency<T>(
    latency: fn(&T) -> &LatencyReport,
    metric: (&'static str, &'static str),
    heat: (&'static str, &'static str, &'static str),
) -> Latency<T> {
    Latency {
        latency,
        metric: Some(Family {
            name: metric.0,
            help: metric.1,
        }),
        heat: Some(Series {
            group: heat.0,
            name: heat.1,
            label: heat.2,
            unit: "",
        }),
    }
}

/// Reads of a volume, wherever they were served from.
fn volume_reads(v: &VolumeReport) -> u64 {
    v.read_arc_latency.count + v.read_l2_latency.count + v.read_backing_latency.count
}

/// Each volume's counters: what its clients asked for, then its backing store's.
#[rustfmt::skip]
pub const VOLUME_FIELDS: &[Field<VolumeReport>] = &[
    history_counter(volume_reads, "volume", "read_ops", "reads", "ops/s"),
    history_counter(|v| v.write_latency.count, "volume", "write_ops", "writes", "ops/s"),
    history_counter(|v| v.read_bytes, "volume", "read_bytes", "bytes read", "bytes/s"),
    history_counter(|v| v.write_bytes, "volume", "write_bytes", "bytes written", "bytes/s"),
    history_counter(|v| v.read_arc_latency.count, "volume", "read_arc_ops", "reads from the ARC", "ops/s"),
    history_counter(|v| v.read_l2_latency.count, "volume", "read_l2_ops", "reads from cache devices", "ops/s"),
    history_counter(|v| v.read_backing_latency.count, "volume", "read_backing_ops", "reads from the backing store", "ops/s"),
    counter(
        |v| v.backing_reads,
        ("larch_backing_reads_total", "reads issued to the volume's backing store"),
        ("backing", "read_ops", "backing store reads", "ops/s"),
    ),
    counter(
        |v| v.backing_writes,
        ("larch_backing_writes_total", "writes issued to the volume's backing store"),
        ("backing", "write_ops", "backing store writes", "ops/s"),
    ),
    counter(
        |v| v.backing_flushes,
        ("larch_backing_flushes_total", "flushes (fdatasync) of the volume's backing store"),
        ("backing", "flush_ops", "backing store flushes", "ops/s"),
    ),
    counter(
        |v| v.backing_read_bytes,
        ("larch_backing_read_bytes_total", "bytes read from the volume's backing store"),
        ("backing", "read_bytes", "backing store bytes read", "bytes/s"),
    ),
    counter(
        |v| v.backing_write_bytes,
        ("larch_backing_write_bytes_total", "bytes written to the volume's backing store"),
        ("backing", "write_bytes", "backing store bytes written", "bytes/s"),
    ),
    metric_counter(|v| v.backing_errors, "larch_backing_errors_total", "failed operations on the volume's backing store"),
    metric_counter(|v| v.backing_zeroes, "larch_backing_zeroes_total", "ranges of the volume's backing store zeroed (TRIM, WRITE_ZEROES)"),
    metric_counter(|v| v.backing_zeroed_bytes, "larch_backing_zeroed_bytes_total", "bytes of the volume's backing store zeroed (TRIM, WRITE_ZEROES)"),
    metric_counter(|v| v.backing_zeroes_written_bytes, "larch_backing_zeroes_written_bytes_total", "bytes zeroed by writing zeros (the store could not punch or zero in place)"),
];

/// Each volume's latency histograms: its clients' requests, then its backing store's.
#[rustfmt::skip]
pub const VOLUME_LATENCIES: &[Latency<VolumeReport>] = &[
    history_latency(|v| &v.read_arc_latency, "frontend", "read_arc", "reads served from the ARC"),
    history_latency(|v| &v.read_l2_latency, "frontend", "read_l2", "reads served from cache devices"),
    history_latency(|v| &v.read_backing_latency, "frontend", "read_backing", "reads served from the backing store"),
    history_latency(|v| &v.write_latency, "frontend", "write", "writes"),
    latency(
        |v| &v.backing_read_latency,
        ("larch_backing_read_latency_seconds", "time of backing-store reads (the system call and the latency model's delay)"),
        ("backing", "read", "backing store reads"),
    ),
    latency(
        |v| &v.backing_write_latency,
        ("larch_backing_write_latency_seconds", "time of backing-store writes (the system call and the latency model's delay)"),
        ("backing", "write", "backing store writes"),
    ),
    latency(
        |v| &v.backing_flush_latency,
        ("larch_backing_flush_latency_seconds", "time of backing-store flushes (one fdatasync)"),
        // "flushs": the label is the history's as first made ("backing store {q}s"); the
        // catalog and saved histories carry it.
        ("backing", "flush", "backing store flushs"),
    ),
];

/// The counters of each object-store volume (volumes with an object report only; 0 for
/// the others in `/metrics`, and no series in the history).
#[rustfmt::skip]
pub const OBJECT_FIELDS: &[Field<VolumeReport>] = &[
    counter(
        |v| v.object.as_ref().map_or(0, |o| o.gets),
        ("larch_object_gets_total", "GET requests to the volume's object store"),
        ("object", "gets", "(store) GETs", "ops/s"),
    ),
    counter(
        |v| v.object.as_ref().map_or(0, |o| o.get_bytes),
        ("larch_object_get_bytes_total", "bytes the GET requests returned"),
        ("object", "get_bytes", "(store) bytes fetched", "bytes/s"),
    ),
    counter(
        |v| v.object.as_ref().map_or(0, |o| o.puts),
        ("larch_object_puts_total", "PUT requests to the volume's object store"),
        ("object", "puts", "(store) PUTs", "ops/s"),
    ),
    counter(
        |v| v.object.as_ref().map_or(0, |o| o.put_bytes),
        ("larch_object_put_bytes_total", "bytes the PUT requests sent (data objects, map pages, roots)"),
        ("object", "put_bytes", "(store) bytes uploaded", "bytes/s"),
    ),
    counter(
        |v| v.object.as_ref().map_or(0, |o| o.deletes),
        ("larch_object_deletes_total", "objects deleted (superseded objects and, at open, garbage of earlier runs)"),
        ("object", "deletes", "(store) DELETEs", "ops/s"),
    ),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.delete_errors), "larch_object_delete_errors_total", "deletes that failed after the client's retries (the objects stay until a later open's collection; also in larch_object_errors_total)"),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.errors), "larch_object_errors_total", "object-store requests that failed after the client's retries"),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.commits), "larch_object_commits_total", "commits (one per TXG that changed the volume)"),
    counter(
        |v| v.object.as_ref().map_or(0, |o| o.committed_bytes),
        ("larch_object_committed_bytes_total", "bytes of blocks the commits made durable (put bytes over these: write amplification)"),
        ("object", "committed_bytes", "(store) bytes committed", "bytes/s"),
    ),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.objects_merged), "larch_object_objects_merged_total", "data objects read before their upload because only some of their blocks changed"),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.objects_cleared), "larch_object_objects_cleared_total", "data objects a commit left holding only zeros: not written, their map entries cleared"),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.repacked_segments), "larch_object_repacked_segments_total", "sparse segments read to move their live blocks into new ones (segments layout)"),
    counter(
        |v| v.object.as_ref().map_or(0, |o| o.repack_bytes),
        ("larch_object_repack_bytes_total", "bytes of live blocks repacks moved into new segments (part of the put bytes)"),
        ("object", "repack_bytes", "(store) bytes repacked", "bytes/s"),
    ),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.segments_freed), "larch_object_segments_freed_total", "segments deleted once no block lived in them"),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.map_page_gets), "larch_object_map_page_gets_total", "block-map pages read from the store: at open, then when a lookup found its page evicted from the ARC (also in larch_object_gets_total)"),
    metric_counter(|v| v.object.as_ref().map_or(0, |o| o.map_page_l2_reads), "larch_object_map_page_l2_reads_total", "block-map pages a lookup read from a cache device's copy (the ARC had evicted them) instead of the store (also in larch_arcstats_l2_hits_total)"),
    gauge(
        |v| v.object.as_ref().map_or(0, |o| o.stored_bytes),
        ("larch_object_stored_bytes", "bytes of records in the segments the volume's map names (segments layout)"),
        ("object", "stored_bytes", "(store) bytes stored", "bytes"),
    ),
    gauge(
        |v| v.object.as_ref().map_or(0, |o| o.live_bytes),
        ("larch_object_live_bytes", "of the stored bytes, those of records the map points at"),
        ("object", "live_bytes", "(store) live bytes", "bytes"),
    ),
    metric_gauge(|v| v.object.as_ref().map_or(0, |o| o.segments), "larch_object_segments", "segments the volume's map names"),
    metric_gauge(|v| v.object.as_ref().map_or(0, |o| o.map_bytes), "larch_object_map_bytes", "bytes of the volume's map held outside the ARC (page refs, changed pointers, segment counts; block-map pages are ARC metadata)"),
];

/// Each cache device's counters and gauges.
#[rustfmt::skip]
pub const DEVICE_FIELDS: &[Field<CacheDeviceReport>] = &[
    counter(
        |d| d.reads,
        ("larch_cache_device_reads_total", "block reads from the cache device (hits and failed attempts)"),
        ("cache", "read_ops", "(cache) reads", "ops/s"),
    ),
    counter(
        |d| d.writes,
        ("larch_cache_device_writes_total", "feed batches written to the cache device"),
        ("cache", "write_ops", "(cache) writes", "ops/s"),
    ),
    counter(
        |d| d.read_bytes,
        ("larch_cache_device_read_bytes_total", "bytes read from the cache device"),
        ("cache", "read_bytes", "(cache) bytes read", "bytes/s"),
    ),
    counter(
        |d| d.write_bytes,
        ("larch_cache_device_write_bytes_total", "bytes of data feeds wrote to the cache device"),
        ("cache", "write_bytes", "(cache) bytes written (feed)", "bytes/s"),
    ),
    Field {
        value: |d| d.blocks,
        kind: StatKind::Gauge,
        metric: None,
        series: Some(Series { group: "cache", name: "blocks", label: "(cache) blocks cached", unit: "blocks" }),
    },
    metric_counter(|d| d.read_errors, "larch_cache_device_read_errors_total", "cache-device reads that failed or did not verify (not those of copies the ring wrote over during the read)"),
];

/// Each cache device's latency histograms.
#[rustfmt::skip]
pub const DEVICE_LATENCIES: &[Latency<CacheDeviceReport>] = &[
    latency(
        |d| &d.read_latency,
        ("larch_cache_device_read_latency_seconds", "time of cache-device block reads, checksum verification included"),
        ("cache", "read", "(cache) reads"),
    ),
    latency(
        |d| &d.write_latency,
        ("larch_cache_device_write_latency_seconds", "time of cache-device feed batches, log commit included"),
        ("cache", "write", "(cache) writes"),
    ),
];

/// The log device's counters.
#[rustfmt::skip]
pub const LOG_FIELDS: &[Field<LogDeviceReport>] = &[
    history_counter(|l| l.commits, "log", "commits", "(log) commits", "per second"),
    history_counter(|l| l.records, "log", "records", "(log) records", "per second"),
    history_counter(|l| l.bytes, "log", "write_bytes", "(log) bytes logged", "bytes/s"),
];

/// The log device's latency histograms.
#[rustfmt::skip]
pub const LOG_LATENCIES: &[Latency<LogDeviceReport>] = &[
    history_latency(|l| &l.commit_latency, "log", "write", "(log) commits"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The families' names and the series' and heat maps' ids of one item's tables.
    fn names<T>(fields: &[Field<T>], latencies: &[Latency<T>]) -> (Vec<String>, Vec<String>) {
        let mut families = Vec::new();
        let mut series = Vec::new();
        for f in fields {
            if let Some(m) = &f.metric {
                let counter = f.kind == StatKind::Counter;
                assert_eq!(counter, m.name.ends_with("_total"), "{}", m.name);
                families.push(m.name.to_string());
            }
            if let Some(s) = &f.series {
                series.push(s.id("x"));
            }
            assert!(
                f.metric.is_some() || f.series.is_some(),
                "a field no one shows"
            );
        }
        for l in latencies {
            if let Some(m) = &l.metric {
                assert!(m.name.ends_with("_seconds"), "{}", m.name);
                families.push(m.name.to_string());
            }
            if let Some(h) = &l.heat {
                series.push(format!("heat {}", h.id("x")));
            }
        }
        (families, series)
    }

    /// No two entries share a family name or a series id, so that adding one cannot hide
    /// another.
    #[test]
    fn names_are_unique_and_follow_prometheus_units() {
        let tables = [
            names(VOLUME_FIELDS, VOLUME_LATENCIES),
            names(OBJECT_FIELDS, &[]),
            names(DEVICE_FIELDS, DEVICE_LATENCIES),
            names(LOG_FIELDS, LOG_LATENCIES),
        ];
        let mut families = HashSet::new();
        let mut series = HashSet::new();
        for (f, s) in tables {
            for name in f {
                assert!(families.insert(name.clone()), "{name} twice");
            }
            for id in s {
                assert!(series.insert(id.clone()), "{id} twice");
            }
        }
        assert_eq!(families.len(), 39);
    }
}
