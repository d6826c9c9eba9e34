//! A remote object store (S3 and the like): a latency with a long tail per request, a
//! per-request throughput, and a limit on requests in flight.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::spec::check_positive;
use super::{
    Device, DeviceStats, IoKind, NS_PER_MS, Nanos, SpecError, format_capacity, ns_per_byte,
    round_ns,
};
use crate::workload::SplitMix64;

/// Most requests in flight an object store may allow; the model keeps one entry per slot.
pub(crate) const MAX_CONCURRENCY: u32 = 65_536;

/// The 99th percentile of the standard normal distribution: a lognormal's p99 is
/// `median * exp(sigma * Z_99)`.
const Z_99: f64 = 2.326_347_874_040_841;

/// The parameters of an object store. The defaults describe small GETs from S3 within a
/// region: AWS's performance guidance puts the median latency of small requests "in the tens
/// of milliseconds" and advises retrying the slowest 1%; 20 ms median and 120 ms p99 are
/// typical of published measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectStoreParams {
    /// Bytes the store holds for the simulation. Default 10^15 (1 PB): in effect unlimited.
    pub capacity_bytes: u64,
    /// Median time to first byte, ms. Default 20.
    pub median_ms: f64,
    /// 99th percentile time to first byte, ms; at least the median. Default 120.
    pub p99_ms: f64,
    /// Throughput of one request once data flows, 10^6 bytes per second. Default 85, a
    /// typical single-connection figure.
    pub throughput_mb_s: f64,
    /// Requests in flight at most; later ones wait for a slot (1 to 65,536). Default 256.
    pub concurrency: u32,
}

impl Default for ObjectStoreParams {
    fn default() -> ObjectStoreParams {
        ObjectStoreParams {
            capacity_bytes: 1_000_000_000_000_000,
            median_ms: 20.0,
            p99_ms: 120.0,
            throughput_mb_s: 85.0,
            concurrency: 256,
        }
    }
}

impl ObjectStoreParams {
    /// Checks every field; the error names the first bad one and its value.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.capacity_bytes == 0 {
            return Err(SpecError::bad("capacity", "a positive size", 0));
        }
        check_positive("median_ms", self.median_ms)?;
        check_positive("p99_ms", self.p99_ms)?;
        if self.p99_ms < self.median_ms {
            return Err(SpecError::bad(
                "p99_ms",
                format!("at least median_ms ({})", self.median_ms),
                self.p99_ms,
            ));
        }
        check_positive("throughput_mb_s", self.throughput_mb_s)?;
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err(SpecError::bad(
                "concurrency",
                format!("a whole number from 1 to {MAX_CONCURRENCY}"),
                self.concurrency,
            ));
        }
        Ok(())
    }
}

/// An object store. Each request waits for one of `concurrency` slots (the one free first),
/// then holds it for a latency drawn from a lognormal distribution with the given median and
/// p99, plus its length at the per-request throughput. The store has no shared bandwidth
/// limit: its many servers are not the bottleneck a client sees.
#[derive(Clone, Debug)]
pub struct ObjectStore {
    params: ObjectStoreParams,
    rng: SplitMix64,
    /// The natural log of the median latency in ns, the lognormal's mu.
    log_median_ns: f64,
    /// The lognormal's sigma.
    sigma: f64,
    slot_free_at: BinaryHeap<Reverse<Nanos>>,
    busy_ns: u64,
    stats: DeviceStats,
}

impl ObjectStore {
    /// An object store with `params`, its latencies drawn from a generator seeded with `seed`.
    pub fn new(params: ObjectStoreParams, seed: u64) -> Result<ObjectStore, SpecError> {
        params.validate()?;
        Ok(ObjectStore {
            log_median_ns: (params.median_ms * NS_PER_MS).ln(),
            sigma: (params.p99_ms / params.median_ms).ln() / Z_99,
            slot_free_at: (0..params.concurrency).map(|_| Reverse(0)).collect(),
            rng: SplitMix64::new(seed),
            params,
            busy_ns: 0,
            stats: DeviceStats::named("s3"),
        })
    }

    /// The device's parameters.
    pub fn params(&self) -> &ObjectStoreParams {
        &self.params
    }

    /// One latency, ns: `exp(mu + sigma * z)` with `z` standard normal from the Box-Muller
    /// transform. The first uniform is taken from (0, 1] so its logarithm is finite.
    fn draw_latency_ns(&mut self) -> f64 {
        let u1 = 1.0 - self.rng.next_f64();
        let u2 = self.rng.next_f64();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (self.log_median_ns + self.sigma * z).exp()
    }
}

impl Device for ObjectStore {
    fn submit(&mut self, now: Nanos, kind: IoKind, _offset: u64, len: u32) -> Nanos {
        let latency_ns = self.draw_latency_ns();
        let transfer_ns = f64::from(len) * ns_per_byte(self.params.throughput_mb_s);
        let service = round_ns(latency_ns + transfer_ns);
        let Reverse(free_at) = self
            .slot_free_at
            .pop()
            .expect("a validated store has at least one slot");
        let done = now.max(free_at).saturating_add(service);
        self.slot_free_at.push(Reverse(done));
        self.busy_ns = self.busy_ns.saturating_add(service);
        self.stats.record(kind, len, 0);
        done
    }

    fn capacity_bytes(&self) -> u64 {
        self.params.capacity_bytes
    }

    fn describe(&self) -> String {
        let p = &self.params;
        format!(
            "object store ({} held): latency median {} ms, p99 {} ms, {} MB/s per request, {} in flight",
            format_capacity(p.capacity_bytes),
            p.median_ms,
            p.p99_ms,
            p.throughput_mb_s,
            p.concurrency
        )
    }

    fn stats(&self) -> Vec<DeviceStats> {
        // Busy time is the mean over the slots, so it reads as a utilisation like a disk's.
        let mut stats = self.stats.clone();
        stats.busy_ns = self.busy_ns / u64::from(self.params.concurrency);
        vec![stats]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_beyond_the_limit_wait_for_a_slot() {
        let params = ObjectStoreParams {
            concurrency: 1,
            median_ms: 10.0,
            p99_ms: 10.0,
            ..ObjectStoreParams::default()
        };
        let mut store = ObjectStore::new(params, 1).unwrap();
        assert_eq!(store.submit(0, IoKind::Read, 0, 0), 10_000_000);
        assert_eq!(store.submit(0, IoKind::Read, 0, 0), 20_000_000);
    }

    #[test]
    fn a_p99_below_the_median_is_an_error() {
        let params = ObjectStoreParams {
            p99_ms: 5.0,
            ..ObjectStoreParams::default()
        };
        let error = ObjectStore::new(params, 0).unwrap_err();
        assert_eq!(
            error.to_string(),
            "p99_ms: expected at least median_ms (20), got \"5\""
        );
    }
}
