//! The texts of a pool's report that monitoring tools read: Prometheus's text exposition
//! format (`/metrics`) and OpenZFS's kstat layout (`/arcstats`).
//!
//! Both are built from `larch_engine::PoolReport`, the same report as `/status`, so every
//! view of the daemon shows the same counters. The report is a snapshot taken per request,
//! so the Prometheus text is made from it as a list of metric families and written by the
//! `prometheus` crate's `TextEncoder` (the classic text format, version 0.0.4, served as
//! [`PROMETHEUS_CONTENT_TYPE`]); there is no registry of live metric objects to keep in
//! step with the engine's counters. That crate was chosen over `prometheus-client` because
//! `promtool check metrics` (Debian's Prometheus 2.42) reads its output with no finding,
//! while `prometheus-client` writes OpenMetrics, whose counters (`# TYPE x counter` over
//! samples named `x_total`) promtool 2.42 reads as families without help.
//!
//! Metric names are an interface (dashboards and alerts use them) and follow Prometheus's
//! naming rules: a counter ends in `_total`, a quantity of bytes in `_bytes` (before
//! `_total`), a duration is in seconds and ends in `_seconds`, and counts, flags and ratios
//! have no unit. Arcstats are `larch_arcstats_NAME` plus the unit their declaration names
//! (`larch_engine::stats::document`) and `_total` for counters
//! (`larch_engine::stats::kind_of`); stats kept in microseconds are converted to seconds.
//! For example `hits` is `larch_arcstats_hits_total`, `size` is
//! `larch_arcstats_size_bytes`, `l2_read_bytes` is `larch_arcstats_l2_read_bytes_total`,
//! `evict_l2_cached` (bytes) is `larch_arcstats_evict_l2_cached_bytes_total`,
//! `txg_last_sync_us` is `larch_arcstats_txg_last_sync_seconds`, `zil_commit_us` is
//! `larch_arcstats_zil_commit_seconds_total`, and the fixed-point fraction `pd` stays
//! `larch_arcstats_pd`. Backing stores are `larch_backing_*{volume="..."}`, cache devices
//! `larch_cache_device_*{device="PATH"}`, and their latencies histograms in seconds
//! (`larch_backing_read_latency_seconds`, ...); their names and help lines are in
//! [`crate::report_fields`], beside the history's names of the same fields. Every family
//! has a help line.

use larch_engine::PoolReport;
use larch_engine::latency::LatencySnapshot;
use larch_engine::report::VolumeReport;
use larch_engine::stats::{StatKind, StatUnit};
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};

use crate::report_fields::{
    DEVICE_FIELDS, DEVICE_LATENCIES, Field, Latency, OBJECT_FIELDS, VOLUME_FIELDS, VOLUME_LATENCIES,
};

/// The content type of the text [`prometheus()`] writes: the classic exposition format,
/// version 0.0.4.
pub const PROMETHEUS_CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// A metric family with no samples yet.
fn family(name: String, help: &str, kind: MetricType) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name);
    family.set_help(help.to_string());
    family.set_field_type(kind);
    family
}

/// A sample (of any type) labelled `key="value"`, or unlabelled when `label` is `None`.
fn labelled(label: Option<(&str, &str)>) -> Metric {
    let mut metric = Metric::default();
    if let Some((key, value)) = label {
        let mut pair = LabelPair::default();
        pair.set_name(key.to_string());
        pair.set_value(value.to_string());
        metric.set_label(vec![pair]);
    }
    metric
}

fn counter(label: Option<(&str, &str)>, value: f64) -> Metric {
    let mut metric = labelled(label);
    let mut counter = Counter::default();
    counter.set_value(value);
    metric.set_counter(counter);
    metric
}

fn gauge(label: Option<(&str, &str)>, value: f64) -> Metric {
    let mut metric = labelled(label);
    let mut gauge = Gauge::default();
    gauge.set_value(value);
    metric.set_gauge(gauge);
    metric
}

/// A latency histogram in seconds. The buckets are powers of two, as `zpool iostat -w`
/// shows them (the finer buckets are the Analytics page's); the encoder adds `+Inf`.
fn histogram(label: Option<(&str, &str)>, snapshot: &LatencySnapshot) -> Metric {
    let mut cumulative = 0;
    let mut buckets = Vec::new();
    for (upper_us, n) in snapshot.octaves() {
        cumulative += n;
        if let Some(us) = upper_us {
            let mut bucket = Bucket::default();
            bucket.set_upper_bound(us as f64 / 1e6);
            bucket.set_cumulative_count(cumulative);
            buckets.push(bucket);
        }
    }
    let mut histogram = Histogram::default();
    histogram.set_bucket(buckets);
    histogram.set_sample_count(cumulative);
    histogram.set_sample_sum(snapshot.sum_ns as f64 / 1e9);
    let mut metric = labelled(label);
    metric.set_histogram(histogram);
    metric
}

/// The metric name of an arcstat and the factor that turns its value into that metric's
/// unit (see the module documentation for the rule).
fn arcstat_metric(name: &str, kind: StatKind, unit: StatUnit) -> (String, f64) {
    let (base, scale) = match unit {
        StatUnit::Micros => {
            let stem = name.strip_suffix("_us").unwrap_or(name);
            (format!("{stem}_seconds"), 1e-6)
        }
        StatUnit::Bytes if name.ends_with("_bytes") => (name.to_string(), 1.0),
        StatUnit::Bytes => (format!("{name}_bytes"), 1.0),
        StatUnit::Count | StatUnit::Fraction => (name.to_string(), 1.0),
    };
    match kind {
        StatKind::Counter => (format!("larch_arcstats_{base}_total"), scale),
        StatKind::Gauge => (format!("larch_arcstats_{base}"), scale),
    }
}

/// One family per arcstat.
fn arcstat_families(report: &PoolReport, out: &mut Vec<MetricFamily>) {
    for (name, &value) in &report.arcstats.0 {
        let kind = larch_engine::stats::kind_of(name);
        // Every stat the engine reports is documented (the engine's and the policy's tests
        // check it); a name that is not still gets a help line rather than none.
        let fallback = format!("the arcstat {name}");
        let (help, unit) =
            larch_engine::stats::document(name).unwrap_or((&fallback, StatUnit::Count));
        let (metric, scale) = arcstat_metric(name, kind, unit);
        let value = value as f64 * scale;
        let (mut family, sample) = match kind {
            StatKind::Counter => (
                family(metric, help, MetricType::COUNTER),
                counter(None, value),
            ),
            StatKind::Gauge => (family(metric, help, MetricType::GAUGE), gauge(None, value)),
        };
        family.mut_metric().push(sample);
        out.push(family);
    }
}

/// The counter, gauge and histogram families of a list of items (volumes or cache
/// devices) that have one in `/metrics`, each sample labelled `key="its name"`; nothing
/// when there is no item (a family must have a sample).
fn item_families<T>(
    items: &[T],
    key: &str,
    name: fn(&T) -> &str,
    fields: &[Field<T>],
    latencies: &[Latency<T>],
    out: &mut Vec<MetricFamily>,
) {
    if items.is_empty() {
        return;
    }
    for field in fields {
        let Some(metric) = &field.metric else {
            continue;
        };
        let kind = match field.kind {
            StatKind::Counter => MetricType::COUNTER,
            StatKind::Gauge => MetricType::GAUGE,
        };
        let mut f = family(metric.name.to_string(), metric.help, kind);
        for item in items {
            let (label, value) = (Some((key, name(item))), (field.value)(item) as f64);
            f.mut_metric().push(match field.kind {
                StatKind::Counter => counter(label, value),
                StatKind::Gauge => gauge(label, value),
            });
        }
        out.push(f);
    }
    for latency in latencies {
        let Some(metric) = &latency.metric else {
            continue;
        };
        let mut f = family(metric.name.to_string(), metric.help, MetricType::HISTOGRAM);
        for item in items {
            let snapshot = (latency.latency)(item).snapshot();
            f.mut_metric()
                .push(histogram(Some((key, name(item))), &snapshot));
        }
        out.push(f);
    }
}

/// The metric families of a report: the arcstats, then the backing stores' and the cache
/// devices' counters and latency histograms.
fn families(report: &PoolReport) -> Vec<MetricFamily> {
    let mut out = Vec::new();
    arcstat_families(report, &mut out);
    item_families(
        &report.volumes,
        "volume",
        |v| &v.name,
        VOLUME_FIELDS,
        VOLUME_LATENCIES,
        &mut out,
    );
    let object_volumes: Vec<VolumeReport> = report
        .volumes
        .iter()
        .filter(|v| v.object.is_some())
        .cloned()
        .collect();
    item_families(
        &object_volumes,
        "volume",
        |v| &v.name,
        OBJECT_FIELDS,
        &[],
        &mut out,
    );
    item_families(
        &report.cache_devices,
        "device",
        |d| &d.path,
        DEVICE_FIELDS,
        DEVICE_LATENCIES,
        &mut out,
    );
    out
}

/// Prometheus text exposition (format 0.0.4) of the arcstats, the backing-store and
/// cache-device counters, their latency histograms, and the memory the Analytics history
/// holds (`history_bytes`, bounded by `--history`; `None` when there is none).
pub fn prometheus(report: &PoolReport, history_bytes: Option<u64>) -> String {
    let mut families = families(report);
    if let Some(bytes) = history_bytes {
        let mut family = family(
            "larch_history_bytes".to_string(),
            "memory held by the Analytics page's history (at most --history)",
            MetricType::GAUGE,
        );
        family.mut_metric().push(gauge(None, bytes as f64));
        families.push(family);
    }
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&families, &mut out)
        .expect("the encoder refuses only families without a name or a sample, never made here");
    String::from_utf8(out).expect("the text encoder writes UTF-8")
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

    fn encode(families: &[MetricFamily]) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(families, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn histograms_are_cumulative_with_a_count_equal_to_the_last_bucket() {
        let h = larch_engine::LatencyHistogram::new();
        for us in [1, 3, 3, 100, 50_000_000] {
            h.record(Duration::from_micros(us));
        }
        let mut f = family("x_seconds".to_string(), "x", MetricType::HISTOGRAM);
        f.mut_metric()
            .push(histogram(Some(("device", "a\"b")), &h.snapshot()));
        let out = encode(&[f]);
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
    fn arcstat_names_carry_their_unit_and_kind() {
        use StatKind::{Counter, Gauge};
        use StatUnit::{Bytes, Count, Fraction, Micros};
        for (name, kind, unit, metric, scale) in [
            ("hits", Counter, Count, "larch_arcstats_hits_total", 1.0),
            ("size", Gauge, Bytes, "larch_arcstats_size_bytes", 1.0),
            (
                "dirty_bytes",
                Gauge,
                Bytes,
                "larch_arcstats_dirty_bytes",
                1.0,
            ),
            (
                "l2_read_bytes",
                Counter,
                Bytes,
                "larch_arcstats_l2_read_bytes_total",
                1.0,
            ),
            (
                "evict_l2_cached",
                Counter,
                Bytes,
                "larch_arcstats_evict_l2_cached_bytes_total",
                1.0,
            ),
            (
                "txg_last_sync_us",
                Gauge,
                Micros,
                "larch_arcstats_txg_last_sync_seconds",
                1e-6,
            ),
            (
                "zil_commit_us",
                Counter,
                Micros,
                "larch_arcstats_zil_commit_seconds_total",
                1e-6,
            ),
            ("pd", Gauge, Fraction, "larch_arcstats_pd", 1.0),
        ] {
            assert_eq!(
                arcstat_metric(name, kind, unit),
                (metric.to_string(), scale),
                "{name}"
            );
        }
    }

    #[test]
    fn a_pool_report_gives_every_metric_family_each_with_help() {
        let demo = DemoPool::new("metrics");
        let mut report = demo.pool.report();
        report
            .arcstats
            .0
            .insert("txg_sync_us".to_string(), 2_500_000);
        let out = prometheus(&report, Some(12_345));
        assert!(
            out.contains("# TYPE larch_history_bytes gauge\nlarch_history_bytes 12345\n"),
            "{out}"
        );
        let device = report.cache_devices[0].path.clone();
        for line in [
            "# TYPE larch_arcstats_size_bytes gauge\n".to_string(),
            "# TYPE larch_arcstats_hits_total counter\n".to_string(),
            "# TYPE larch_arcstats_l2_blocks gauge\n".to_string(),
            "# TYPE larch_arcstats_dirty_bytes gauge\n".to_string(),
            "# TYPE larch_arcstats_txg_syncs_total counter\n".to_string(),
            "# TYPE larch_arcstats_txg_last_sync_seconds gauge\n".to_string(),
            "# TYPE larch_arcstats_mru_evictable_data_bytes gauge\n".to_string(),
            "# TYPE larch_arcstats_l2c_only_size_bytes gauge\n".to_string(),
            "# HELP larch_arcstats_mfu_ghost_size_bytes bytes of data and metadata in the MFU ghost list".to_string(),
            "larch_arcstats_txg_sync_seconds_total 2.5\n".to_string(),
            "larch_backing_reads_total{volume=\"vol0\"} 0\n".to_string(),
            "larch_backing_flushes_total{volume=\"vol0\"} 0\n".to_string(),
            "# TYPE larch_backing_flush_latency_seconds histogram\n".to_string(),
            "larch_backing_read_latency_seconds_count{volume=\"vol0\"} 0\n".to_string(),
            format!("larch_cache_device_read_errors_total{{device=\"{device}\"}} "),
            format!("larch_cache_device_write_latency_seconds_sum{{device=\"{device}\"}} "),
        ] {
            assert!(out.contains(&line), "{line:?} not in\n{out}");
        }
        // Every family has a help line, every counter ends in `_total`, and no name keeps
        // a unit other than bytes and seconds.
        let mut families = 0;
        for line in out.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut words = line.split(' ').skip(2);
            let (name, kind) = (words.next().unwrap(), words.next().unwrap());
            let help = out
                .lines()
                .find_map(|l| l.strip_prefix(&format!("# HELP {name} ")))
                .unwrap_or_else(|| panic!("{name} has no help line"));
            assert!(
                !help.is_empty() && !help.starts_with("the arcstat "),
                "{name}: {help:?}"
            );
            assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
            assert!(!name.contains("_us_") && !name.ends_with("_us"), "{name}");
            families += 1;
        }
        let exposed = VOLUME_FIELDS.iter().filter(|f| f.metric.is_some()).count()
            + VOLUME_LATENCIES
                .iter()
                .filter(|l| l.metric.is_some())
                .count()
            + DEVICE_FIELDS.iter().filter(|f| f.metric.is_some()).count()
            + DEVICE_LATENCIES
                .iter()
                .filter(|l| l.metric.is_some())
                .count();
        assert_eq!(
            families,
            report.arcstats.0.len() + exposed + 1 // larch_history_bytes
        );
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

    #[test]
    fn a_pool_without_devices_has_no_empty_families() {
        let demo = DemoPool::new("metrics-empty");
        let mut report = demo.pool.report();
        report.cache_devices.clear();
        report.volumes.clear();
        let out = prometheus(&report, None);
        assert!(!out.contains("larch_history_bytes"), "{out}");
        assert!(out.contains("larch_arcstats_hits_total "), "{out}");
        assert!(!out.contains("larch_cache_device_"), "{out}");
        assert!(!out.contains("larch_backing_"), "{out}");
    }
}
