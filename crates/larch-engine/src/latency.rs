//! Latency histograms of device I/O: what `larch iostat -l`, `/metrics` and `/status` show
//! per cache device and per backing store.
//!
//! A [`LatencyHistogram`] has log-scale buckets (`larch_policy::buckets`, the scale the
//! simulator's histograms use too), four per power of two from 1 µs to 2^24 µs
//! (about 16.8 s): fine enough for a heat map to show a device's latency as a band and the
//! ARC's hits as a stripe of their own, and exact at every power of two so that `/metrics`
//! can print the coarser buckets of `zpool iostat -w` by adding runs of four. Bucket 0
//! counts operations of at most 1 µs; bucket `i` those over [`bucket_upper_ns`]`(i - 1)` and
//! at most `bucket_upper_ns(i)`, which is 2^(i/4) µs rounded up to a nanosecond; the last
//! bucket those over 2^24 µs. "At most the upper bound" is the meaning of a Prometheus `le`
//! bucket.
//!
//! Recording is a binary search over the bounds and two relaxed atomic additions (the
//! bucket and the sum), with no lock, so the read path and the feeders never wait for each
//! other or for a reader of the histogram. There is no separate count: a snapshot's count
//! is the total of its buckets, so it always equals the `le="+Inf"` bucket as Prometheus
//! requires (two counters read one after the other could disagree while records run). The
//! sum may differ from the buckets by the records in flight during a snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use larch_policy::buckets::{BUCKETS, PER_OCTAVE, upper_ns as bucket_upper_ns};
use larch_policy::buckets::{OCTAVES, lower_ns as bucket_lower_ns, of as bucket_of};

/// A lock-free histogram of operation times.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKETS],
    /// Total time of all recorded operations; wraps after 584 years of summed time.
    sum_ns: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        LatencyHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    /// Counts one operation that took `elapsed`.
    pub fn record(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> LatencySnapshot {
        LatencySnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// The counts of a [`LatencyHistogram`] at one moment (or between two moments, from
/// [`LatencySnapshot::since`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// Operations per bucket (see the module documentation for the bounds).
    pub buckets: [u64; BUCKETS],
    /// Total time of the operations, in nanoseconds.
    pub sum_ns: u64,
}

impl Default for LatencySnapshot {
    fn default() -> LatencySnapshot {
        LatencySnapshot {
            buckets: [0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl LatencySnapshot {
    /// Operations counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Mean time of an operation; `None` when there was none.
    pub fn mean(&self) -> Option<Duration> {
        let count = self.count();
        (count > 0).then(|| Duration::from_nanos(self.sum_ns / count))
    }

    /// Estimated `q` quantile (`q` from 0 to 1; 0.99 for p99); `None` when there was no
    /// operation. Within the bucket that holds the rank, the estimate interpolates linearly
    /// between the bucket's bounds (as Prometheus's `histogram_quantile` does), so it is
    /// within a factor of two of the true value. In the last bucket, which has no upper
    /// bound, it is the bucket's lower bound.
    pub fn percentile(&self, q: f64) -> Option<Duration> {
        assert!((0.0..=1.0).contains(&q), "quantile {q} is not within 0..=1");
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut below = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if below + n < rank {
                below += n;
                continue;
            }
            let lower_ns = u128::from(bucket_lower_ns(i));
            let Some(upper_ns) = bucket_upper_ns(i) else {
                return Some(Duration::from_nanos(lower_ns as u64));
            };
            let width_ns = u128::from(upper_ns) - lower_ns;
            let ns = lower_ns + width_ns * u128::from(rank - below) / u128::from(n);
            return Some(Duration::from_nanos(ns as u64));
        }
        unreachable!("rank {rank} is at most the count {count}")
    }

    /// The counts by power of two, as `zpool iostat -w` and `/metrics` show them: for each
    /// power of two in µs from 1 to 2^24, the operations over the one before and at most
    /// it, then `None` with the longer ones.
    pub fn octaves(&self) -> Vec<(Option<u64>, u64)> {
        let mut out = vec![(Some(1), self.buckets[0])];
        for k in 1..=OCTAVES {
            let run = &self.buckets[(k - 1) * PER_OCTAVE + 1..=k * PER_OCTAVE];
            out.push((Some(1 << k), run.iter().sum()));
        }
        out.push((None, self.buckets[BUCKETS - 1]));
        out
    }

    /// What was counted after `earlier` (a snapshot of the same histogram).
    pub fn since(&self, earlier: &LatencySnapshot) -> LatencySnapshot {
        LatencySnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].saturating_sub(earlier.buckets[i])),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }
}

/// The requests of one kind (reads or writes) of one device that wait in larch before
/// they are issued to the device, and those issued and not yet done: what `larch iostat
/// -q` shows as `pend` and `activ` (as `zpool iostat -q` shows OpenZFS's vdev queues), and
/// the times of `-l`: `wait`, from a request's queueing to its issue, and `total`, from its
/// queueing to its end. The device's own time of a request is its total less its wait, so
/// the mean of one is the mean of the other less the mean wait, exactly (every request is
/// in both). Counting is atomic additions only: no lock, on any path.
#[derive(Debug, Default)]
pub struct IoQueue {
    pending: AtomicU64,
    active: AtomicU64,
    /// Time from queueing to issue.
    pub wait: LatencyHistogram,
    /// Time from queueing to the end.
    pub total: LatencyHistogram,
}

impl IoQueue {
    /// Requests waiting now, and requests issued and not yet done.
    pub fn depth(&self) -> (u64, u64) {
        (
            self.pending.load(Ordering::Relaxed),
            self.active.load(Ordering::Relaxed),
        )
    }

    /// Queues one request: pending until [`Queued::issue`], or until it is dropped.
    pub fn enter(self: &Arc<Self>) -> Queued {
        self.pending.fetch_add(1, Ordering::Relaxed);
        Queued {
            queue: Some(Arc::clone(self)),
            since: Instant::now(),
        }
    }

    /// Queues `n` requests at once (the runs of a TXG's write): each is pending until
    /// [`QueuedBatch::issue_one`], the rest until the batch is dropped.
    pub fn enter_batch(self: &Arc<Self>, n: u64) -> QueuedBatch {
        self.pending.fetch_add(n, Ordering::Relaxed);
        QueuedBatch {
            queue: Arc::clone(self),
            since: Instant::now(),
            left: AtomicU64::new(n),
        }
    }

    fn issued(self: Arc<Self>, since: Instant) -> Active {
        self.wait.record(since.elapsed());
        self.active.fetch_add(1, Ordering::Relaxed);
        self.pending.fetch_sub(1, Ordering::Relaxed);
        Active { queue: self, since }
    }
}

/// A request waiting in an [`IoQueue`].
#[derive(Debug)]
pub struct Queued {
    /// `None` once issued.
    queue: Option<Arc<IoQueue>>,
    since: Instant,
}

impl Queued {
    /// The request goes to the device now: active until the returned guard drops.
    pub fn issue(mut self) -> Active {
        let queue = self.queue.take().expect("issued once");
        queue.issued(self.since)
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if let Some(queue) = &self.queue {
            queue.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Requests queued together in an [`IoQueue`], issued one at a time by any thread.
#[derive(Debug)]
pub struct QueuedBatch {
    queue: Arc<IoQueue>,
    since: Instant,
    left: AtomicU64,
}

impl QueuedBatch {
    /// One of the batch's requests goes to the device now (one more than the batch holds
    /// is issued uncounted as waiting).
    pub fn issue_one(&self) -> Active {
        let took = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if !took {
            self.queue.pending.fetch_add(1, Ordering::Relaxed);
        }
        Arc::clone(&self.queue).issued(self.since)
    }
}

impl Drop for QueuedBatch {
    fn drop(&mut self) {
        let left = self.left.load(Ordering::Relaxed);
        self.queue.pending.fetch_sub(left, Ordering::Relaxed);
    }
}

/// A request at its device: counted active, and timed, until dropped.
#[derive(Debug)]
pub struct Active {
    queue: Arc<IoQueue>,
    since: Instant,
}

impl Drop for Active {
    fn drop(&mut self) {
        self.queue.total.record(self.since.elapsed());
        self.queue.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_counts_what_waits_and_what_is_at_the_device() {
        let queue = Arc::new(IoQueue::default());
        let a = queue.enter();
        let b = queue.enter();
        assert_eq!(queue.depth(), (2, 0));
        std::thread::sleep(Duration::from_millis(2));
        let a = a.issue();
        assert_eq!(queue.depth(), (1, 1));
        // A request dropped before its issue (its task cancelled) leaves the queue.
        drop(b);
        assert_eq!(queue.depth(), (0, 1));
        drop(a);
        assert_eq!(queue.depth(), (0, 0));
        let (wait, total) = (queue.wait.snapshot(), queue.total.snapshot());
        assert_eq!((wait.count(), total.count()), (1, 1));
        assert!(wait.sum_ns >= 2_000_000, "{}", wait.sum_ns);
        assert!(total.sum_ns >= wait.sum_ns);

        let batch = queue.enter_batch(3);
        assert_eq!(queue.depth(), (3, 0));
        let one = batch.issue_one();
        let two = batch.issue_one();
        assert_eq!(queue.depth(), (1, 2));
        drop((one, two));
        // The batch ended early (a write failed): its last run leaves the queue.
        drop(batch);
        assert_eq!(queue.depth(), (0, 0));
        assert_eq!(queue.wait.snapshot().count(), 3);
        assert_eq!(queue.total.snapshot().count(), 3);
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn only_bucket(d: Duration) -> usize {
        let h = LatencyHistogram::new();
        h.record(d);
        let s = h.snapshot();
        assert_eq!(s.count(), 1);
        s.buckets.iter().position(|&n| n == 1).expect("one bucket")
    }

    #[test]
    fn buckets_hold_times_up_to_their_upper_bound() {
        let ns = Duration::from_nanos;
        let cases = [
            (Duration::ZERO, 0),
            (ns(999), 0),
            (us(1), 0),
            (ns(1001), 1),
            (ns(1190), 1),
            (ns(1191), 2),
            (us(2), 4),
            (ns(2001), 5),
            (us(1000), 40),
            (us(1024), 40),
            (us(1025), 41),
            (us(1 << 24), 96),
            (us(1 << 24) + ns(1), 97),
            (Duration::from_secs(3600), 97),
            (Duration::MAX, 97),
        ];
        for (d, bucket) in cases {
            assert_eq!(only_bucket(d), bucket, "{d:?}");
        }
        for i in 0..BUCKETS - 1 {
            let upper = bucket_upper_ns(i).unwrap();
            assert_eq!(only_bucket(ns(upper)), i, "upper bound of bucket {i}");
            assert_eq!(only_bucket(ns(upper + 1)), i + 1, "above bucket {i}");
            assert_eq!(bucket_lower_ns(i + 1), upper);
            if i > 0 {
                // Each bound is 2^(1/4) times the one before it.
                let ratio = upper as f64 / bucket_upper_ns(i - 1).unwrap() as f64;
                assert!(
                    (ratio - 2f64.powf(0.25)).abs() < 1e-3,
                    "bucket {i}: {ratio}"
                );
            }
        }
        // Every fourth bound is a power of two in µs, exactly.
        for k in 0..=24 {
            assert_eq!(bucket_upper_ns(k * PER_OCTAVE), Some(1000 << k));
        }
        assert_eq!(bucket_upper_ns(BUCKETS - 1), None);
        // About 1 µs to 10 s, as the surfaces promise.
        assert!(bucket_upper_ns(BUCKETS - 2).unwrap() > 10_000_000_000);
    }

    #[test]
    fn octaves_add_runs_of_four_buckets() {
        let h = LatencyHistogram::new();
        h.record(us(1));
        h.record(us(3));
        h.record(us(4));
        h.record(Duration::from_secs(60));
        let octaves = h.snapshot().octaves();
        assert_eq!(octaves.len(), 26);
        assert_eq!(octaves[0], (Some(1), 1));
        assert_eq!(octaves[1], (Some(2), 0));
        assert_eq!(octaves[2], (Some(4), 2));
        assert_eq!(octaves[25], (None, 1));
        assert_eq!(octaves.iter().map(|o| o.1).sum::<u64>(), 4);
    }

    #[test]
    fn percentiles_interpolate_within_the_bucket_of_the_rank() {
        let h = LatencyHistogram::new();
        assert_eq!(h.snapshot().percentile(0.5), None);
        assert_eq!(h.snapshot().mean(), None);
        for _ in 0..90 {
            h.record(us(10));
        }
        for _ in 0..10 {
            h.record(us(10_000));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 100);
        assert_eq!(s.sum_ns, 90 * 10_000 + 10 * 10_000_000);
        assert_eq!(s.mean(), Some(Duration::from_nanos(1_009_000)));
        // 90 operations in the bucket of 10 µs: rank 50 is 50/90 of the way through it.
        let bounds = |d: Duration| {
            let i = only_bucket(d);
            (bucket_lower_ns(i), bucket_upper_ns(i).unwrap())
        };
        let (lower, upper) = bounds(us(10));
        assert!(lower < 10_000 && 10_000 <= upper);
        let p50 = s.percentile(0.5).unwrap();
        assert_eq!(p50, Duration::from_nanos(lower + (upper - lower) * 50 / 90));
        assert_eq!(s.percentile(0.9).unwrap(), Duration::from_nanos(upper));
        // Rank 99 is the 9th of the 10 operations in the bucket of 10 ms.
        let (lower, upper) = bounds(us(10_000));
        let p99 = s.percentile(0.99).unwrap();
        assert_eq!(p99, Duration::from_nanos(lower + (upper - lower) * 9 / 10));
        assert_eq!(s.percentile(1.0).unwrap(), Duration::from_nanos(upper));
        assert_eq!(s.percentile(0.0).unwrap(), s.percentile(0.001).unwrap());
        let mut last = Duration::ZERO;
        for q in 0..=100 {
            let p = s.percentile(f64::from(q) / 100.0).unwrap();
            assert!(p >= last, "p{q} {p:?} is below {last:?}");
            last = p;
        }
    }

    #[test]
    fn the_unbounded_bucket_reports_its_lower_bound() {
        let h = LatencyHistogram::new();
        h.record(Duration::from_secs(60));
        assert_eq!(h.snapshot().percentile(0.99), Some(us(1 << 24)));
    }

    #[test]
    fn estimates_are_within_a_bucket_of_the_true_quantile() {
        let h = LatencyHistogram::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut times = Vec::new();
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Spread over 1 µs .. ~1 s, log-uniformly.
            let t = Duration::from_nanos((1000 << (x % 20)) | ((x >> 40) % 1000));
            h.record(t);
            times.push(t);
        }
        times.sort();
        let s = h.snapshot();
        for q in [0.01, 0.25, 0.5, 0.9, 0.99, 0.999] {
            let exact = times[((q * times.len() as f64).ceil() as usize).max(1) - 1];
            let estimate = s.percentile(q).unwrap();
            let (e, x) = (estimate.as_nanos() as f64, exact.as_nanos() as f64);
            assert!(
                e <= x * 1.2 && x <= e * 1.2,
                "q {q}: estimate {estimate:?}, exact {exact:?}"
            );
        }
    }

    #[test]
    fn since_subtracts_an_earlier_snapshot() {
        let h = LatencyHistogram::new();
        h.record(us(3));
        let before = h.snapshot();
        h.record(us(100));
        h.record(us(100));
        let delta = h.snapshot().since(&before);
        assert_eq!(delta.count(), 2);
        assert_eq!(delta.sum_ns, 200_000);
        assert_eq!(delta.buckets[only_bucket(us(100))], 2);
        assert_eq!(delta.mean(), Some(us(100)));
        assert_eq!(before.since(&h.snapshot()), LatencySnapshot::default());
    }

    #[test]
    fn concurrent_records_are_all_counted() {
        const THREADS: u64 = 4;
        const RECORDS: u64 = 50_000;
        let h = LatencyHistogram::new();
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let h = &h;
                scope.spawn(move || {
                    for i in 0..RECORDS {
                        h.record(Duration::from_nanos(1 + (i + t) % 5000));
                    }
                });
            }
            // A reader alongside: the count only ever grows.
            let mut last = 0;
            while last < THREADS * RECORDS {
                let count = h.snapshot().count();
                assert!(count >= last, "the count went down from {last} to {count}");
                last = count;
            }
        });
        let s = h.snapshot();
        assert_eq!(s.count(), THREADS * RECORDS);
        let expected: u64 = (0..THREADS)
            .map(|t| (0..RECORDS).map(|i| 1 + (i + t) % 5000).sum::<u64>())
            .sum();
        assert_eq!(s.sum_ns, expected);
        // 1..=5000 ns falls in the buckets up to 8 µs only.
        let up_to_8us = 3 * PER_OCTAVE + 1;
        assert_eq!(bucket_upper_ns(up_to_8us - 1), Some(8000));
        assert_eq!(
            s.buckets[..up_to_8us].iter().sum::<u64>(),
            THREADS * RECORDS
        );
    }
}
