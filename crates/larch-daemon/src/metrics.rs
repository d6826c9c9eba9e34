//! The texts of a pool's report that monitoring tools read: Prometheus's text exposition
//! format (`/metrics`) and OpenZFS's kstat layout (`/arcstats`).
//!
//! Both are built from `larch_engine::PoolReport`, the same report as `/status`, so every
//! view of the daemon shows the same counters. Metric names are an interface (dashboards
//! and alerts use them): arcstats are `larch_arcstats_NAME` for gauges and
//! `larch_arcstats_NAME_total` for counters (`is_gauge` decides), backing stores
//! `larch_backing_*{volume=...}`, cache devices `larch_cache_device_*{device=...}`, and
//! latencies histograms in seconds.

use larch_engine::PoolReport;
use larch_engine::latency::LatencySnapshot;
use larch_engine::report::{CacheDeviceReport, LatencyReport, VolumeReport};

/// Whether an arcstat is a gauge (a level that goes up and down) rather than a counter,
/// as the engine declares it.
fn is_gauge(name: &str) -> bool {
    larch_engine::stats::kind_of(name) == larch_engine::stats::StatKind::Gauge
}

/// A label value in the Prometheus text format: backslash, quote and newline escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One Prometheus histogram family in seconds, one series per (labels, snapshot).
fn histogram(out: &mut String, metric: &str, series: &[(String, LatencySnapshot)]) {
    *out += &format!("# TYPE {metric} histogram\n");
    for (labels, s) in series {
        let mut cumulative = 0;
        // Powers of two, as `zpool iostat -w` shows them (the finer buckets are the
        // Analytics page's).
        for (upper_us, n) in s.octaves() {
            cumulative += n;
            let le = upper_us.map_or("+Inf".to_string(), |us| (us as f64 / 1e6).to_string());
            *out += &format!("{metric}_bucket{{{labels},le=\"{le}\"}} {cumulative}\n");
        }
        *out += &format!("{metric}_sum{{{labels}}} {}\n", s.sum_ns as f64 / 1e9);
        *out += &format!("{metric}_count{{{labels}}} {cumulative}\n");
    }
}

/// A counter family with one series per item, labelled `key="name"`.
fn counters<T>(
    out: &mut String,
    metric: &str,
    key: &str,
    items: &[T],
    name: fn(&T) -> &str,
    value: fn(&T) -> u64,
) {
    *out += &format!("# TYPE {metric} counter\n");
    for item in items {
        *out += &format!(
            "{metric}{{{key}=\"{}\"}} {}\n",
            label(name(item)),
            value(item)
        );
    }
}

/// A histogram family with one series per item, labelled `key="name"`.
fn histograms<T>(
    out: &mut String,
    metric: &str,
    key: &str,
    items: &[T],
    name: fn(&T) -> &str,
    latency: fn(&T) -> &LatencyReport,
) {
    let series: Vec<_> = items
        .iter()
        .map(|item| {
            let labels = format!("{key}=\"{}\"", label(name(item)));
            (labels, latency(item).snapshot())
        })
        .collect();
    histogram(out, metric, &series);
}

/// Prometheus text exposition of the arcstats, the backing-store and cache-device
/// counters, and their latency histograms.
pub fn prometheus(report: &PoolReport) -> String {
    let mut out = String::new();
    for (name, value) in &report.arcstats.0 {
        let (kind, metric) = if is_gauge(name) {
            ("gauge", format!("larch_arcstats_{name}"))
        } else {
            ("counter", format!("larch_arcstats_{name}_total"))
        };
        out += &format!("# TYPE {metric} {kind}\n{metric} {value}\n");
    }
    let volumes = &report.volumes;
    fn volume(v: &VolumeReport) -> &str {
        &v.name
    }
    type BackingCounter = fn(&VolumeReport) -> u64;
    let backing: [(&str, BackingCounter); 6] = [
        ("reads", |v| v.backing_reads),
        ("read_bytes", |v| v.backing_read_bytes),
        ("writes", |v| v.backing_writes),
        ("write_bytes", |v| v.backing_write_bytes),
        ("flushes", |v| v.backing_flushes),
        ("errors", |v| v.backing_errors),
    ];
    for (family, value) in backing {
        let metric = format!("larch_backing_{family}_total");
        counters(&mut out, &metric, "volume", volumes, volume, value);
    }
    type BackingLatency = fn(&VolumeReport) -> &LatencyReport;
    let backing_latency: [(&str, BackingLatency); 3] = [
        ("read", |v| &v.backing_read_latency),
        ("write", |v| &v.backing_write_latency),
        ("flush", |v| &v.backing_flush_latency),
    ];
    for (op, latency) in backing_latency {
        let metric = format!("larch_backing_{op}_latency_seconds");
        histograms(&mut out, &metric, "volume", volumes, volume, latency);
    }
    let devices = &report.cache_devices;
    fn device(d: &CacheDeviceReport) -> &str {
        &d.path
    }
    type DeviceCounter = fn(&CacheDeviceReport) -> u64;
    let device_counters: [(&str, DeviceCounter); 5] = [
        ("reads", |d| d.reads),
        ("read_bytes", |d| d.read_bytes),
        ("read_errors", |d| d.read_errors),
        ("writes", |d| d.writes),
        ("write_bytes", |d| d.write_bytes),
    ];
    for (family, value) in device_counters {
        let metric = format!("larch_cache_device_{family}_total");
        counters(&mut out, &metric, "device", devices, device, value);
    }
    type DeviceLatency = fn(&CacheDeviceReport) -> &LatencyReport;
    let device_latency: [(&str, DeviceLatency); 2] = [
        ("read", |d| &d.read_latency),
        ("write", |d| &d.write_latency),
    ];
    for (op, latency) in device_latency {
        let metric = format!("larch_cache_device_{op}_latency_seconds");
        histograms(&mut out, &metric, "device", devices, device, latency);
    }
    out
}

/// The arcstats as OpenZFS prints its kstat file (type 4 = uint64).
pub fn kstat(report: &PoolReport) -> String {
    let mut out = String::from("name                            type data\n");
    for (name, value) in &report.arcstats.0 {
        out += &format!("{name:<32}4    {value}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::DemoPool;
    use std::time::Duration;

    #[test]
    fn histograms_are_cumulative_with_a_count_equal_to_the_last_bucket() {
        let h = larch_engine::LatencyHistogram::new();
        for us in [1, 3, 3, 100, 50_000_000] {
            h.record(Duration::from_micros(us));
        }
        let mut out = String::new();
        let series = [("device=\"a\\\"b\"".to_string(), h.snapshot())];
        histogram(&mut out, "x_seconds", &series);
        let buckets: Vec<u64> = out
            .lines()
            .filter(|l| l.starts_with("x_seconds_bucket"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(buckets.len(), 26);
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{out}");
        assert_eq!(buckets[0], 1);
        assert_eq!(buckets[2], 3);
        assert!(
            out.contains("x_seconds_bucket{device=\"a\\\"b\",le=\"0.000001\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("le=\"16.777216\"} 4\n"), "{out}");
        assert!(out.contains("le=\"+Inf\"} 5\n"), "{out}");
        assert!(
            out.contains("x_seconds_count{device=\"a\\\"b\"} 5\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_sum{device=\"a\\\"b\"} 50.000107\n"),
            "{out}"
        );
    }

    #[test]
    fn a_pool_report_gives_every_metric_family() {
        let demo = DemoPool::new("metrics");
        let report = demo.pool.report();
        let out = prometheus(&report);
        let device = label(&report.cache_devices[0].path);
        for line in [
            "# TYPE larch_arcstats_size gauge\n".to_string(),
            "# TYPE larch_arcstats_hits_total counter\n".to_string(),
            "# TYPE larch_arcstats_l2_blocks gauge\n".to_string(),
            "# TYPE larch_arcstats_dirty_bytes gauge\n".to_string(),
            "# TYPE larch_arcstats_txg_syncs_total counter\n".to_string(),
            "larch_backing_reads_total{volume=\"vol0\"} 0\n".to_string(),
            "larch_backing_flushes_total{volume=\"vol0\"} 0\n".to_string(),
            "# TYPE larch_backing_flush_latency_seconds histogram\n".to_string(),
            "larch_backing_read_latency_seconds_count{volume=\"vol0\"} 0\n".to_string(),
            format!("larch_cache_device_read_errors_total{{device=\"{device}\"}} "),
            format!("larch_cache_device_write_latency_seconds_sum{{device=\"{device}\"}} "),
        ] {
            assert!(out.contains(&line), "{line:?} not in\n{out}");
        }
        let kstats = kstat(&report);
        assert!(kstats.starts_with("name                            type data\n"));
        assert_eq!(kstats.lines().count(), report.arcstats.0.len() + 1);
        assert!(
            kstats
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["l2_hits", "4", "0"]),
            "{kstats}"
        );
    }
}
