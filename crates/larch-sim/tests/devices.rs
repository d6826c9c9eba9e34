//! The device models against closed forms. Each test drives a model with a small closed-loop
//! driver (N I/Os outstanding; each completion submits the next at its completion time) and
//! compares what it measures with a formula computed here from the parameters, with the
//! tolerance and the reason for it stated beside the check.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use larch_sim::SplitMix64;
use larch_sim::device::{
    Device, DeviceSpec, Hdd, HddParams, IoKind, Mirror, Nanos, ObjectStore, ObjectStoreParams,
    Pool, Queued, RaidZ, SpecError, Ssd, SsdParams, parse_spec,
};

/// What a closed-loop run measured.
struct Run {
    latencies_ns: Vec<Nanos>,
    elapsed_ns: Nanos,
}

impl Run {
    fn iops(&self) -> f64 {
        self.latencies_ns.len() as f64 / (self.elapsed_ns as f64 / 1e9)
    }

    fn mean_latency_ms(&self) -> f64 {
        let sum: f64 = self.latencies_ns.iter().map(|&ns| ns as f64).sum();
        sum / self.latencies_ns.len() as f64 / 1e6
    }

    /// The fraction of latencies in `[low_ms, high_ms]`.
    fn fraction_between_ms(&self, low_ms: f64, high_ms: f64) -> f64 {
        let inside = self
            .latencies_ns
            .iter()
            .filter(|&&ns| (low_ms * 1e6..=high_ms * 1e6).contains(&(ns as f64)))
            .count();
        inside as f64 / self.latencies_ns.len() as f64
    }
}

/// Keeps `depth` I/Os of `kind` and `len` outstanding until `total` have completed. Offsets
/// come from `next_offset`. Completions are taken in time order from a heap, so the device
/// sees submissions in nondecreasing time, as the trait requires.
fn closed_loop(
    device: &mut dyn Device,
    depth: usize,
    total: usize,
    kind: IoKind,
    len: u32,
    mut next_offset: impl FnMut() -> u64,
) -> Run {
    let mut outstanding = BinaryHeap::new();
    let mut issued = 0;
    while issued < depth.min(total) {
        let done = device.submit(0, kind, next_offset(), len);
        outstanding.push(Reverse((done, 0)));
        issued += 1;
    }
    let mut latencies_ns = Vec::with_capacity(total);
    let mut elapsed_ns = 0;
    while let Some(Reverse((done, submitted))) = outstanding.pop() {
        latencies_ns.push(done - submitted);
        elapsed_ns = done;
        if issued < total {
            let next = device.submit(done, kind, next_offset(), len);
            outstanding.push(Reverse((next, done)));
            issued += 1;
        }
    }
    Run {
        latencies_ns,
        elapsed_ns,
    }
}

/// [`closed_loop`] through [`Device::queue`]: a device that reorders holds the I/Os, and
/// the driver calls [`Device::decide`] at each [`Device::next_start_ns`]. A completion at
/// the same time as a start is taken first, so the I/O it submits is among the ones the
/// device chooses from.
fn closed_loop_queued(
    device: &mut dyn Device,
    depth: usize,
    total: usize,
    kind: IoKind,
    len: u32,
    mut next_offset: impl FnMut() -> u64,
) -> Run {
    let mut outstanding = BinaryHeap::new();
    let mut held = std::collections::HashMap::new();
    let mut submit = |device: &mut dyn Device,
                      now: Nanos,
                      outstanding: &mut BinaryHeap<_>,
                      held: &mut std::collections::HashMap<_, _>| {
        match device.queue(now, kind, next_offset(), len) {
            Queued::Done(done) => outstanding.push(Reverse((done, now))),
            Queued::Held(id) => {
                held.insert(id, now);
            }
        }
    };
    let mut issued = 0;
    while issued < depth.min(total) {
        submit(device, 0, &mut outstanding, &mut held);
        issued += 1;
    }
    let mut latencies_ns = Vec::with_capacity(total);
    let mut elapsed_ns = 0;
    let mut decided = Vec::new();
    loop {
        let next_done = outstanding.peek().map(|&Reverse((done, _))| done);
        let next_start = device.next_start_ns();
        match (next_done, next_start) {
            (Some(done), _) if next_start.is_none_or(|start| done <= start) => {
                let Reverse((done, submitted)) = outstanding.pop().expect("peeked");
                latencies_ns.push(done - submitted);
                elapsed_ns = done;
                if issued < total {
                    submit(device, done, &mut outstanding, &mut held);
                    issued += 1;
                }
            }
            (_, Some(start)) => {
                decided.clear();
                // An array may decide a part of an I/O and nothing whole yet.
                device.decide(start, &mut decided);
                for &(id, done) in &decided {
                    outstanding.push(Reverse((done, held.remove(&id).expect("held"))));
                }
            }
            _ => break,
        }
    }
    Run {
        latencies_ns,
        elapsed_ns,
    }
}

/// Uniform `len`-aligned offsets in `[0, band_bytes)`.
fn random_offsets(seed: u64, band_bytes: u64, len: u32) -> impl FnMut() -> u64 {
    let mut rng = SplitMix64::new(seed);
    let slots = band_bytes / u64::from(len);
    move || rng.below(slots) * u64::from(len)
}

fn assert_within(measured: f64, expected: f64, tolerance: f64, what: &str) {
    let error = (measured - expected).abs() / expected;
    assert!(
        error <= tolerance,
        "{what}: measured {measured:.4}, expected {expected:.4} (error {:.2}% > {:.2}%)",
        error * 100.0,
        tolerance * 100.0
    );
}

const K8: u32 = 8192;
const K4: u32 = 4096;

/// The mean of sqrt(|X - Y|) for X and Y uniform on [0, 1]: the distance u has density
/// 2(1 - u), and the integral of 2(1 - u) sqrt(u) over [0, 1] is 2(2/3 - 2/5) = 8/15.
const MEAN_SQRT_DISTANCE: f64 = 8.0 / 15.0;

/// The closed-form mean seek, ms, between random points of a band `fraction` of the disk.
fn mean_seek_ms(p: &HddParams, fraction: f64) -> f64 {
    p.settle_ms + (p.full_stroke_ms - p.settle_ms) * MEAN_SQRT_DISTANCE * fraction.sqrt()
}

fn revolution_ms(p: &HddParams) -> f64 {
    60_000.0 / p.rpm
}

fn transfer_ms(p: &HddParams, len: u32) -> f64 {
    f64::from(len) / (p.transfer_mb_s * 1e6) * 1e3
}

/// One disk's closed-form QD1 service time, ms, for random `len` reads over `fraction`.
fn disk_service_ms(p: &HddParams, fraction: f64, len: u32) -> f64 {
    mean_seek_ms(p, fraction) + revolution_ms(p) / 2.0 + transfer_ms(p, len)
}

/// 20,000 I/Os: the service time's standard deviation is about 4 ms (seek about 3.2, rotation
/// 8.33 / sqrt(12) = 2.4), so the mean of 20,000 has a standard error of 0.03 ms, 0.2% of the
/// 12.7 ms mean; a 2% tolerance is ten standard errors and still catches a wrong term (the
/// smallest, the 0.05 ms transfer, is below it, but the seek and rotation terms are not).
const DISK_IOS: usize = 20_000;

#[test]
fn one_disk_at_qd1_over_the_whole_disk() {
    let p = HddParams::default();
    assert_within(
        mean_seek_ms(&p, 1.0),
        8.48,
        0.001,
        "average seek over the whole disk",
    );
    for len in [K4, K8] {
        let mut disk = Hdd::new(p.clone(), 1).unwrap();
        let run = closed_loop(
            &mut disk,
            1,
            DISK_IOS,
            IoKind::Read,
            len,
            random_offsets(2, p.capacity_bytes, len),
        );
        // 8.48 ms seek + 4.17 ms rotation + 0.05 ms transfer = 12.70 ms for 8K: 78.7 IOPS.
        let service_ms = disk_service_ms(&p, 1.0, len);
        assert_within(run.iops(), 1000.0 / service_ms, 0.02, "QD1 IOPS");
        // A single disk keeps one FIFO queue, so more outstanding I/Os add waiting, not rate.
        let mut disk = Hdd::new(p.clone(), 1).unwrap();
        let deep = closed_loop(
            &mut disk,
            8,
            DISK_IOS,
            IoKind::Read,
            len,
            random_offsets(2, p.capacity_bytes, len),
        );
        assert_within(deep.iops(), 1000.0 / service_ms, 0.02, "QD8 IOPS");
        println!(
            "hdd {len} B whole disk: QD1 {:.1} IOPS, QD8 {:.1} (closed form {:.1})",
            run.iops(),
            deep.iops(),
            1000.0 / service_ms
        );
    }
}

#[test]
fn one_disk_at_qd1_over_a_one_percent_band() {
    let p = HddParams::default();
    let band = p.capacity_bytes / 100;
    let mut disk = Hdd::new(p.clone(), 3).unwrap();
    let run = closed_loop(
        &mut disk,
        1,
        DISK_IOS,
        IoKind::Read,
        K8,
        random_offsets(4, band, K8),
    );
    // The seek shrinks with the square root of the band: 0.8 + 14.4 * 8/15 * 0.1 = 1.568 ms.
    let seek_ms = mean_seek_ms(&p, 0.01);
    assert_within(seek_ms, 1.568, 0.001, "closed-form seek over 1%");
    let service_ms = disk_service_ms(&p, 0.01, K8);
    assert_within(run.iops(), 1000.0 / service_ms, 0.02, "QD1 IOPS over 1%");
    // The seek term alone, measured as the mean latency less the rotation and transfer terms.
    // Its error is the rotation mean's: 2.4 ms / sqrt(20,000) = 0.017 ms, 1.1% of 1.57 ms;
    // 5% is over four standard errors.
    let measured_seek = run.mean_latency_ms() - revolution_ms(&p) / 2.0 - transfer_ms(&p, K8);
    assert_within(measured_seek, seek_ms, 0.05, "seek term over 1%");
    println!(
        "hdd QD1 1% band: {:.1} IOPS (closed form {:.1}), seek {measured_seek:.3} ms (closed form {seek_ms:.3})",
        run.iops(),
        1000.0 / service_ms
    );
}

#[test]
fn mirror_reads_scale_and_writes_do_not() {
    let p = HddParams::default();
    let one_disk = 1000.0 / disk_service_ms(&p, 1.0, K8);
    let offsets = || random_offsets(6, p.capacity_bytes, K8);

    let mut mirror = Mirror::new(p.clone(), 2, 5).unwrap();
    let reads = closed_loop(&mut mirror, 2, DISK_IOS, IoKind::Read, K8, offsets());
    let read_ratio = reads.iops() / one_disk;
    // Two outstanding reads keep both sides busy, each serving one. The side choice can
    // also prefer a nearer head, which only helps, so the ratio is 2 or a little above.
    assert!(
        (1.9..=2.3).contains(&read_ratio),
        "2-way mirror reads at QD2: {read_ratio:.3} x one disk"
    );

    let mut mirror = Mirror::new(p.clone(), 2, 5).unwrap();
    let writes = closed_loop(&mut mirror, 2, DISK_IOS, IoKind::Write, K8, offsets());
    let write_ratio = writes.iops() / one_disk;
    // Every write occupies both sides, so each disk serves every write: one disk's rate
    // (the 2% tolerance of the single-disk test, plus a little for the two queues drifting).
    assert!(
        (0.95..=1.03).contains(&write_ratio),
        "2-way mirror writes at QD2: {write_ratio:.3} x one disk"
    );
    println!("mirror QD2: reads {read_ratio:.3} x one disk, writes {write_ratio:.3} x one disk");
}

/// The mean, ms, of the slowest of `disks` disks that each seek from their own random place
/// in a band `fraction` of the disk to one shared random target and then wait a uniform
/// rotation: a RAID-Z read of one row. With the target at y and a head at x, both uniform
/// over the band, each disk's seek-plus-rotation has the distribution function
/// F_y(t) = E_x[clamp((t - seek(|x - y|)) / revolution, 0, 1)]; the disks are independent
/// given y, so the slowest has mean integral of (1 - F_y(t)^disks) dt, averaged over y.
/// Midpoint sums over 40 targets, 200 heads and 20 us steps of t.
fn mean_slowest_of_ms(p: &HddParams, fraction: f64, disks: i32) -> f64 {
    let (targets, heads, step_ms) = (40, 200, 0.02);
    let longest_ms = p.full_stroke_ms + revolution_ms(p);
    let mut total = 0.0;
    for yi in 0..targets {
        let y = (f64::from(yi) + 0.5) / f64::from(targets);
        let seeks: Vec<f64> = (0..heads)
            .map(|xi| {
                let x = (f64::from(xi) + 0.5) / f64::from(heads);
                p.settle_ms + (p.full_stroke_ms - p.settle_ms) * ((x - y).abs() * fraction).sqrt()
            })
            .collect();
        let mut t = step_ms / 2.0;
        while t < longest_ms {
            let below: f64 = seeks
                .iter()
                .map(|seek| ((t - seek) / revolution_ms(p)).clamp(0.0, 1.0))
                .sum::<f64>()
                / f64::from(heads);
            total += (1.0 - below.powi(disks)) * step_ms;
            t += step_ms;
        }
    }
    total / f64::from(targets)
}

#[test]
fn wide_raidz2_reads_only_the_data_columns() {
    // An 8K block of 512-byte sectors is 16 data columns of one sector on 16 disks; a read
    // waits for the slowest. With a seek of the same length whatever the distance (settle =
    // full stroke), the disks' positions do not matter and the closed form is exact: the
    // seek, plus the mean of the largest of 16 uniform rotations, 16/17 of a revolution,
    // plus one sector's transfer. 5,000 reads: the largest of 16 rotations varies by
    // 8.33 x sqrt(16 / (17^2 x 18)) = 0.46 ms, a standard error of 0.08% of the 8.6 ms
    // mean; 1% also tells 16 columns from 44 (44/45 of a revolution: 3.5% longer).
    let flat = HddParams {
        full_stroke_ms: 0.8,
        ..HddParams::default()
    };
    let band_bytes = 40_000_000_000_000u64;
    let read = |params: &HddParams| {
        let mut raidz = RaidZ::new(params.clone(), 46, 2, 7).unwrap();
        let run = closed_loop(
            &mut raidz,
            1,
            5_000,
            IoKind::Read,
            K8,
            random_offsets(8, band_bytes, K8),
        );
        let reads: u64 = raidz.stats().iter().map(|s| s.reads).sum();
        assert_eq!(reads, 5_000 * 16, "16 data columns a read");
        run
    };
    let run = read(&flat);
    let closed_ms = flat.settle_ms + revolution_ms(&flat) * 16.0 / 17.0 + transfer_ms(&flat, 512);
    assert_within(
        run.mean_latency_ms(),
        closed_ms,
        0.01,
        "RAID-Z2 QD1 read latency, flat seek",
    );

    // With the seek curve, each disk seeks from where its own last column left it. 40 TB of
    // 8K blocks allocate 18/16 of that over 46 disks: 97.8% of each disk. Had the 16 heads
    // independent places, the read would take the largest of 16 independent
    // seeks-plus-rotations; disks last moved by the same earlier block share a place, which
    // shortens the largest. So the latency lies between one seek plus the largest of 16
    // rotations (every head together) and the independent form.
    let p = HddParams::default();
    let fraction = band_bytes as f64 * 18.0 / 16.0 / 46.0 / p.capacity_bytes as f64;
    let run = read(&p);
    let together_ms =
        mean_seek_ms(&p, fraction) + revolution_ms(&p) * 16.0 / 17.0 + transfer_ms(&p, 512);
    let independent_ms = mean_slowest_of_ms(&p, fraction, 16) + transfer_ms(&p, 512);
    let mean_ms = run.mean_latency_ms();
    assert!(
        (together_ms..=independent_ms).contains(&mean_ms),
        "RAID-Z2 QD1 latency {mean_ms:.3} ms outside {together_ms:.3}..{independent_ms:.3} ms"
    );
    let one_disk = 1000.0 / disk_service_ms(&p, fraction, K8);
    println!(
        "raidz2 46-wide QD1: {:.1} IOPS = {:.3} x one disk, latency {mean_ms:.3} ms \
         (bounds {together_ms:.3}..{independent_ms:.3})",
        run.iops(),
        run.iops() / one_disk
    );
}

#[test]
fn seed000_mirrors_at_twenty_outstanding_reads() {
    let mut pool = Pool::seed000_mirrors(11);
    let working_set = 500_000_000_000;
    let run = closed_loop(
        &mut pool,
        20,
        50_000,
        IoKind::Read,
        K8,
        random_offsets(12, working_set, K8),
    );
    // Seed 000 saw about 2,700 8K reads/s with 20 client threads, some of them DRAM hits.
    let iops = run.iops();
    assert!(
        (2_000.0..=4_000.0).contains(&iops),
        "70 mirrors at QD20: {iops:.0} IOPS"
    );

    // Closed form: 500 GB over 70 vdevs is a 0.71% band of each disk, so a read costs
    // 0.8 + 14.4 * 8/15 * sqrt(0.0071) + 4.17 + 0.05 = 5.67 ms, and with 20 reads spread over
    // 140 disks almost none queue, so by Little's law IOPS = 20 / 5.67 ms = 3,527. Two
    // effects move the measured rate a few percent either way: a read queues behind another
    // when three land on one mirror (about 3% of reads), and a read arriving at a mirror
    // with both sides idle takes the nearer head, which shortens its seek. Allow 6% below
    // and 5% above.
    let p = HddParams::default();
    let fraction = working_set as f64 / 70.0 / p.capacity_bytes as f64;
    let little = 20.0 / disk_service_ms(&p, fraction, K8) * 1000.0;
    assert!(
        iops >= little * 0.94 && iops <= little * 1.05,
        "QD20 IOPS {iops:.0}, Little's law {little:.0}"
    );

    // "The latency is mostly between 0 and 10 ms", with a void until about 2 ms: here most
    // reads take 2-10 ms (the few faster ones are reads whose rotation was under a millisecond).
    let mostly = run.fraction_between_ms(2.0, 10.0);
    assert!(
        mostly >= 0.8,
        "only {:.1}% of reads took 2-10 ms",
        mostly * 100.0
    );
    println!(
        "seed 000 70 mirrors QD20: {iops:.0} IOPS (Little {little:.0}), mean {:.2} ms, {:.1}% in 2-10 ms",
        run.mean_latency_ms(),
        mostly * 100.0
    );
}

/// A flash read of `len` bytes on one channel, µs: the fixed cost plus the length at the
/// channel's share of the device's bandwidth.
fn flash_read_us(p: &SsdParams, len: u32) -> f64 {
    p.read_us + f64::from(len) * f64::from(p.channels) / (p.read_mb_s * 1e6) * 1e6
}

#[test]
fn flash_presets_match_their_closed_forms() {
    for (name, p) in [
        ("ssd", SsdParams::sata()),
        ("readzilla", SsdParams::readzilla()),
        ("nvme", SsdParams::nvme()),
    ] {
        for len in [K4, K8] {
            // 4K and 8K are below every preset's stripe, so a read is one piece on one channel.
            let service_us = flash_read_us(&p, len);
            let mut device = Ssd::new(name, p.clone()).unwrap();
            let qd1 = closed_loop(
                &mut device,
                1,
                1_000,
                IoKind::Read,
                len,
                random_offsets(1, p.capacity_bytes, len),
            );
            // Flash service has no randomness: the only error is rounding to whole ns.
            assert_within(
                qd1.mean_latency_ms() * 1e3,
                service_us,
                1e-5,
                &format!("{name} QD1 {len} B latency, µs"),
            );

            // At a depth of 256 every channel is always busy: channels / service. The first
            // and last rounds leave channels idle for under one service time each, so
            // 100,000 reads lose at most 2 x 32 / 100,000 of the rate: 0.1% covers it.
            let mut device = Ssd::new(name, p.clone()).unwrap();
            let saturated = closed_loop(
                &mut device,
                256,
                100_000,
                IoKind::Read,
                len,
                random_offsets(1, p.capacity_bytes, len),
            );
            let closed = f64::from(p.channels) / service_us * 1e6;
            assert_within(
                saturated.iops(),
                closed,
                0.001,
                &format!("{name} saturated {len} B IOPS"),
            );
            println!(
                "{name} {len} B: QD1 {:.2} µs, saturated {:.0} IOPS (closed form {closed:.0})",
                qd1.mean_latency_ms() * 1e3,
                saturated.iops()
            );
        }
    }
}

#[test]
fn nvme_streams_near_its_rated_bandwidth() {
    let p = SsdParams::nvme();
    // 128K requests cut into four 32K pieces; at depth every channel is busy with pieces
    // of 45 µs + 32K at 100 MB/s = 372.68 µs, so the device moves 32 x 32K per 372.68 µs =
    // 2.81 GB/s of its rated 3.2 (the fixed cost per piece is the difference). Writes:
    // 20 µs + 32K at 56.25 MB/s = 602.5 µs per piece, 1.74 GB/s.
    let len = 128 << 10;
    let piece = 32_768.0;
    for (kind, fixed_us, mb_s) in [
        (IoKind::Read, p.read_us, p.read_mb_s),
        (IoKind::Write, p.write_us, p.write_mb_s),
    ] {
        let piece_us = fixed_us + piece * 32.0 / (mb_s * 1e6) * 1e6;
        let closed_gb_s = 32.0 * piece / piece_us / 1e3;
        let mut nvme = Ssd::nvme();
        let run = closed_loop(
            &mut nvme,
            64,
            20_000,
            kind,
            len,
            random_offsets(1, p.capacity_bytes, len),
        );
        let gb_s = run.iops() * f64::from(len) / 1e9;
        assert_within(
            gb_s,
            closed_gb_s,
            0.005,
            &format!("{kind:?} bandwidth, GB/s"),
        );
        // At QD1 the four pieces run in parallel: one piece time per request.
        let mut nvme = Ssd::nvme();
        let qd1 = closed_loop(&mut nvme, 1, 100, kind, len, || 0);
        assert_within(
            qd1.mean_latency_ms() * 1e3,
            piece_us,
            1e-5,
            &format!("{kind:?} QD1 128K, µs"),
        );
        println!(
            "nvme 128K {kind:?}: {gb_s:.2} GB/s at depth (closed form {closed_gb_s:.2}), QD1 {piece_us:.2} µs"
        );
    }
}

#[test]
fn readzilla_matches_seed000() {
    let p = SsdParams::readzilla();
    let mut readzilla = Ssd::readzilla();
    let qd1 = closed_loop(
        &mut readzilla,
        1,
        1_000,
        IoKind::Read,
        K8,
        random_offsets(1, p.capacity_bytes, K8),
    );
    assert_within(
        qd1.mean_latency_ms(),
        0.3,
        0.10,
        "seed 000: L2ARC reads return from about 300 µs",
    );
    let mut readzilla = Ssd::readzilla();
    let saturated = closed_loop(
        &mut readzilla,
        32,
        20_000,
        IoKind::Read,
        K8,
        random_offsets(1, p.capacity_bytes, K8),
    );
    assert_within(
        saturated.iops(),
        3_100.0,
        0.10,
        "seed 000: about 3,100 8K reads/s per Readzilla",
    );
    // Its one channel is shared with writes: a 128K L2ARC feed write holds it for
    // 250 µs + 128K at 60 MB/s = 2.43 ms, about 54 MB/s.
    let mut readzilla = Ssd::readzilla();
    let write = closed_loop(&mut readzilla, 1, 10, IoKind::Write, 128 << 10, || 0);
    assert_within(
        write.mean_latency_ms(),
        0.25 + 131_072.0 / 60e6 * 1e3,
        1e-5,
        "128K write, ms",
    );
}

#[test]
fn object_store_latency_quantiles() {
    let params = ObjectStoreParams::default();
    let mut store = ObjectStore::new(params.clone(), 21).unwrap();
    // One request at a time on an idle store with no payload: each latency is one draw.
    let mut latencies: Vec<Nanos> = Vec::with_capacity(10_000);
    let mut now = 0;
    for _ in 0..10_000 {
        let done = store.submit(now, IoKind::Read, 0, 0);
        latencies.push(done - now);
        now = done;
    }
    latencies.sort_unstable();
    let median_ms = latencies[5_000] as f64 / 1e6;
    let p99_ms = latencies[9_900] as f64 / 1e6;
    // Sampling error of a quantile q of n draws, in the normal's units, is
    // sqrt(q(1-q)/n) / density(q): 0.0125 at the median and 0.037 at p99. Times sigma
    // (ln(120/20) / 2.326 = 0.77) that is 1.0% and 2.9% of the value. The tolerances are
    // three standard errors: 3% for the median and 9% for p99.
    assert_within(median_ms, params.median_ms, 0.03, "median");
    assert_within(p99_ms, params.p99_ms, 0.09, "p99");
    println!("object store: median {median_ms:.2} ms, p99 {p99_ms:.2} ms");
}

#[test]
fn the_connection_limit_queues_requests() {
    let params = ObjectStoreParams {
        concurrency: 4,
        ..ObjectStoreParams::default()
    };
    let mut store = ObjectStore::new(params, 5).unwrap();
    let run = closed_loop(&mut store, 64, 10_000, IoKind::Read, 0, || 0);
    // 64 outstanding through 4 slots: each slot serves one request per mean latency, and a
    // lognormal's mean is median * exp(sigma^2 / 2) = 20 ms * exp(0.77^2 / 2) = 26.9 ms,
    // so the rate is 4 / 26.9 ms = 149/s; with 10,000 draws the mean's error is about 1%.
    let sigma = (120.0f64 / 20.0).ln() / 2.326_347_874;
    let mean_ms = 20.0 * (sigma * sigma / 2.0).exp();
    assert_within(
        run.iops(),
        4.0 / mean_ms * 1e3,
        0.04,
        "rate through 4 slots",
    );
    println!(
        "object store, 4 slots: {:.1} requests/s (closed form {:.1})",
        run.iops(),
        4.0 / mean_ms * 1e3
    );
}

#[test]
fn same_seed_same_times_different_seed_differs() {
    let run = |seed: u64| {
        let mut pool = parse_spec("140xhdd:mirror", seed).unwrap();
        closed_loop(
            pool.as_mut(),
            20,
            2_000,
            IoKind::Read,
            K8,
            random_offsets(3, 500_000_000_000, K8),
        )
        .latencies_ns
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
    let store = |seed: u64| {
        let mut s3 = parse_spec("s3", seed).unwrap();
        closed_loop(s3.as_mut(), 8, 500, IoKind::Read, K8, || 0).latencies_ns
    };
    assert_eq!(store(1), store(1));
    assert_ne!(store(1), store(2));
}

#[test]
fn arrays_report_one_entry_per_disk() {
    let mut pool = parse_spec("48xhdd:raidz2:46", 0).unwrap();
    closed_loop(
        pool.as_mut(),
        4,
        100,
        IoKind::Read,
        K8,
        random_offsets(1, 1 << 40, K8),
    );
    let stats = pool.stats();
    assert_eq!(stats.len(), 48);
    // Every 8K read touches the 16 data columns of its block; the spares see nothing.
    let reads: u64 = stats.iter().map(|s| s.reads).sum();
    assert_eq!(reads, 100 * 16);
    assert!(
        stats[46..]
            .iter()
            .all(|s| s.reads == 0 && s.name.starts_with("spare"))
    );
    assert_eq!(stats[0].name, "vdev0/disk0");
    assert!(stats.iter().all(|s| s.busy_ns > 0 || s.reads == 0));
}

/// The mean, ms, of the shortest of `queued` positionings (seek + rotation) from a head at
/// a random place of the whole disk to `queued` targets at random places: what SPTF saves
/// on the first choice from a queue of fresh random requests. With the head at h, one
/// target's positioning has the distribution function F_h(t) = E_x[clamp((t - seek(|x - h|))
/// / revolution, 0, 1)]; the targets are independent, so the shortest has mean integral of
/// (1 - F_h(t))^queued dt, averaged over h. Midpoint sums over 40 heads, 400 targets and
/// 10 us steps.
fn mean_shortest_positioning_ms(p: &HddParams, queued: i32) -> f64 {
    let (heads, targets, step_ms) = (40, 400, 0.01);
    let revolution = revolution_ms(p);
    let longest_ms = p.full_stroke_ms + revolution;
    let mut total = 0.0;
    for hi in 0..heads {
        let h = (f64::from(hi) + 0.5) / f64::from(heads);
        let seeks: Vec<f64> = (0..targets)
            .map(|xi| {
                let x = (f64::from(xi) + 0.5) / f64::from(targets);
                p.settle_ms + (p.full_stroke_ms - p.settle_ms) * (x - h).abs().sqrt()
            })
            .collect();
        let mut t = step_ms / 2.0;
        while t < longest_ms {
            let below: f64 = seeks
                .iter()
                .map(|seek| ((t - seek) / revolution).clamp(0.0, 1.0))
                .sum::<f64>()
                / f64::from(targets);
            total += (1.0 - below).powi(queued) * step_ms;
            t += step_ms;
        }
    }
    total / f64::from(heads)
}

/// The mean positioning, ms, of the first I/O a disk chooses from `queued` random reads
/// queued at once, its head at a random place: 4,000 trials.
fn first_choice_positioning_ms(p: &HddParams, queued: u32) -> f64 {
    let params = HddParams {
        queue_depth: 32,
        ..p.clone()
    };
    let mut rng = SplitMix64::new(17);
    let slots = p.capacity_bytes / u64::from(K4);
    let mut total_ms = 0.0;
    let trials = 4_000;
    let mut decided = Vec::new();
    for trial in 0..trials {
        let mut disk = Hdd::new(params.clone(), trial).unwrap();
        // A read of nothing puts the head at a random place.
        let placed = disk.submit(0, IoKind::Read, rng.below(slots) * u64::from(K4), 0);
        for _ in 0..queued {
            let offset = rng.below(slots) * u64::from(K4);
            assert!(matches!(
                disk.queue(placed, IoKind::Read, offset, K4),
                Queued::Held(_)
            ));
        }
        decided.clear();
        disk.decide(placed, &mut decided);
        assert_eq!(decided.len(), 1, "one start at {placed}");
        let service_ms = (decided[0].1 - placed) as f64 / 1e6;
        total_ms += service_ms - transfer_ms(p, K4);
    }
    total_ms / trials as f64
}

#[test]
fn sptf_chooses_the_shortest_positioning_of_its_queue() {
    // The seek alone (a disk spinning so fast that rotation is 10 ns): from a random head
    // to the nearest of n random targets. n = 1 is the average random seek, 8.48 ms; the
    // nearest of 4 and of 16 are far shorter. 4,000 trials: the seek varies by at most
    // 3.5 ms, a standard error under 0.06 ms; 3% of the shortest mean (about 2 ms) is
    // that, twice.
    let seek_only = HddParams {
        rpm: 6e9,
        ..HddParams::default()
    };
    for n in [1, 4, 16] {
        let measured = first_choice_positioning_ms(&seek_only, n);
        let closed = mean_shortest_positioning_ms(&seek_only, n as i32);
        assert_within(
            measured,
            closed,
            0.03,
            &format!("seek to the nearest of {n}"),
        );
        println!("SPTF seek only, queue {n}: {measured:.3} ms (closed form {closed:.3})");
    }
    assert_within(
        mean_shortest_positioning_ms(&seek_only, 1),
        8.48,
        0.01,
        "one target: the average random seek",
    );
    // Seek and rotation together, the default disk: SPTF weighs both.
    let p = HddParams::default();
    for n in [1, 8, 32] {
        let measured = first_choice_positioning_ms(&p, n);
        let closed = mean_shortest_positioning_ms(&p, n as i32);
        assert_within(measured, closed, 0.03, &format!("positioning, queue {n}"));
        println!("SPTF queue {n}: positioning {measured:.3} ms (closed form {closed:.3})");
    }
}

#[test]
fn sptf_in_a_closed_loop_takes_the_soonest_of_its_rotations() {
    // A disk whose seeks cost nothing (settle 0, full stroke 1 ps) has only rotational
    // latency to save. With n reads outstanding, every completion submits the next before
    // the disk chooses again, so it always chooses from n, each a fresh uniform rotation:
    // the soonest takes revolution / (n + 1) on average (the least of n uniforms), the
    // result of rotational position ordering (Jacobson and Wilkes 1991). Service is that
    // plus a 512-byte transfer. 20,000 reads: at n = 32 the soonest varies by
    // 8.33 x sqrt(32 / (33^2 x 34)) = 0.25 ms, a standard error of 0.7% of the 0.26 ms
    // service; 3% is four of them.
    let p = HddParams {
        settle_ms: 0.0,
        full_stroke_ms: 1e-9,
        ..HddParams::default()
    };
    for n in [1u32, 4, 32] {
        let params = HddParams {
            queue_depth: n,
            ..p.clone()
        };
        let mut disk = Hdd::new(params, 5).unwrap();
        let run = closed_loop_queued(
            &mut disk,
            n as usize,
            DISK_IOS,
            IoKind::Read,
            512,
            random_offsets(6, p.capacity_bytes, 512),
        );
        let service_ms = revolution_ms(&p) / f64::from(n + 1) + transfer_ms(&p, 512);
        assert_within(
            run.iops(),
            1000.0 / service_ms,
            0.03,
            &format!("rotational ordering, {n} queued"),
        );
        println!(
            "SPTF rotation only, {n} queued: {:.0} IOPS (closed form {:.0})",
            run.iops(),
            1000.0 / service_ms
        );
    }
}

#[test]
fn at_queue_depth_one_or_one_outstanding_queue_is_submit() {
    // FIFO is unchanged: a disk of queue depth 1 answers `queue` as `submit`, and a deeper
    // one with a single I/O outstanding has one to choose from, so it draws the same
    // rotation at the same moment. Arrays inherit both.
    for spec in [
        "hdd:queue_depth=1",
        "hdd",
        "140xhdd:mirror",
        "48xhdd:raidz2:46",
        "6xhdd:raidz1:queue_depth=1",
    ] {
        let band = 1 << 40;
        let mut fifo = parse_spec(spec, 3).unwrap();
        let mut queued = parse_spec(spec, 3).unwrap();
        let a = closed_loop(
            fifo.as_mut(),
            1,
            2_000,
            IoKind::Read,
            K8,
            random_offsets(4, band, K8),
        );
        let b = closed_loop_queued(
            queued.as_mut(),
            1,
            2_000,
            IoKind::Read,
            K8,
            random_offsets(4, band, K8),
        );
        assert_eq!(a.latencies_ns, b.latencies_ns, "{spec}");
    }
    // At depth 1, deeper load too: the queue is the arrival order.
    let mut fifo = parse_spec("hdd:queue_depth=1", 3).unwrap();
    let mut queued = parse_spec("hdd:queue_depth=1", 3).unwrap();
    let offsets = || random_offsets(4, 1 << 40, K8);
    let a = closed_loop(fifo.as_mut(), 8, 2_000, IoKind::Read, K8, offsets());
    let b = closed_loop_queued(queued.as_mut(), 8, 2_000, IoKind::Read, K8, offsets());
    assert_eq!(a.latencies_ns, b.latencies_ns);
}

#[test]
fn raidz_and_mirrors_gain_from_a_command_queue() {
    // 20 reads outstanding, as seed 000's clients. On the RAID-Z each read puts a column
    // on 16 of 46 disks, about 7 waiting per disk, and their command queues choose the
    // nearest of several (the nearest of 8 positions in 7.0 ms against 12.8 for one, by
    // the closed form above): at least 1.2 times the reads. Over 140 mirrored disks a disk
    // rarely holds two, so the order hardly matters.
    for (spec, gains) in [
        ("48xhdd:raidz2:46", 1.2..2.0),
        ("140xhdd:mirror", 0.98..1.05),
    ] {
        let band = 500_000_000_000;
        let mut fifo = parse_spec(spec, 9).unwrap();
        let mut queued = parse_spec(spec, 9).unwrap();
        let a = closed_loop(
            fifo.as_mut(),
            20,
            20_000,
            IoKind::Read,
            K8,
            random_offsets(2, band, K8),
        );
        let b = closed_loop_queued(
            queued.as_mut(),
            20,
            20_000,
            IoKind::Read,
            K8,
            random_offsets(2, band, K8),
        );
        let gain = b.iops() / a.iops();
        assert!(
            gains.contains(&gain),
            "{spec}: queued {:.0} vs FIFO {:.0}",
            b.iops(),
            a.iops()
        );
        println!(
            "{spec}, 20 outstanding 8K reads over 500 GB: FIFO {:.0}/s ({:.1} ms), SPTF {:.0}/s ({:.1} ms): {gain:.2}x",
            a.iops(),
            a.mean_latency_ms(),
            b.iops(),
            b.mean_latency_ms()
        );
    }
}

/// Every example of the spec syntax, with what it describes.
const EXAMPLES: [(&str, &str); 13] = [
    (
        "140xhdd:mirror",
        "140 x 7200 rpm 1 TB HDD in 70 2-way mirrors",
    ),
    (
        "48xhdd:raidz2:46",
        "48 x 7200 rpm 1 TB HDD in 1 46-wide RAID-Z2, 2 spares (unused)",
    ),
    (
        "46xhdd:raidz2",
        "46 x 7200 rpm 1 TB HDD in 1 46-wide RAID-Z2",
    ),
    (
        "46xhdd:raidz2:sector=4K,failed=3",
        "46 x 7200 rpm 1 TB HDD (4096 B sectors) in 1 46-wide RAID-Z2, disk3 of each failed",
    ),
    (
        "142xhdd:mirror",
        "142 x 7200 rpm 1 TB HDD in 71 2-way mirrors",
    ),
    ("hdd", "7200 rpm 1 TB HDD"),
    ("hdd:capacity=4T,rpm=10000", "10000 rpm 4.4 TB HDD"),
    (
        "ssd",
        "480 GB flash (ssd): 8 channels, read 25 µs + 520 MB/s, write 20 µs + 480 MB/s",
    ),
    (
        "ssd:read_us=300,channels=1",
        "480 GB flash (ssd): 1 channel, read 300 µs + 520 MB/s, write 20 µs + 480 MB/s",
    ),
    (
        "readzilla",
        "100 GB flash (readzilla): 1 channel, read 280 µs + 200 MB/s, write 250 µs + 60 MB/s",
    ),
    (
        "nvme",
        "1.6 TB flash (nvme): 32 channels, read 45 µs + 3200 MB/s, write 20 µs + 1800 MB/s",
    ),
    (
        "s3:median_ms=20,p99_ms=120",
        "object store (1 PB held): latency median 20 ms, p99 120 ms, 85 MB/s per request, 256 in flight",
    ),
    (
        "objectstore",
        "object store (1 PB held): latency median 20 ms, p99 120 ms, 85 MB/s per request, 256 in flight",
    ),
];

#[test]
fn the_parser_accepts_every_example() {
    for (text, description) in EXAMPLES {
        let device = parse_spec(text, 1).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(device.describe(), description, "{text}");
        // The canonical text parses back to the same spec.
        let spec = DeviceSpec::parse(text).unwrap();
        let canonical = spec.to_string();
        assert_eq!(
            DeviceSpec::parse(&canonical).unwrap(),
            spec,
            "{text} -> {canonical}"
        );
    }
    assert_eq!(
        DeviceSpec::parse("hdd:rpm=10000,capacity=4T")
            .unwrap()
            .to_string(),
        "hdd:capacity=4T,rpm=10000"
    );
    assert_eq!(
        DeviceSpec::parse("48xhdd:raidz2:46").unwrap().to_string(),
        "48xhdd:raidz2:46"
    );
    assert_eq!(
        DeviceSpec::parse("12xHDD:Mirror:3").unwrap().to_string(),
        "12xhdd:mirror:3"
    );
    let capacity = parse_spec("hdd:capacity=1.5T", 0).unwrap().capacity_bytes();
    assert_eq!(capacity, 3 << 39);
}

#[test]
fn errors_name_the_field_and_the_value() {
    let cases = [
        (
            "hdx",
            "unknown model \"hdx\" (one of: hdd, ssd, readzilla, nvme, s3, objectstore, ram)",
        ),
        ("hdd:rpm=-5", "rpm: expected a positive number, got \"-5\""),
        (
            "",
            "empty device spec (for example hdd, 140xhdd:mirror, readzilla, nvme or s3)",
        ),
        (
            "hdd:rpm=fast",
            "rpm: expected a positive number, got \"fast\"",
        ),
        (
            "hdd:capacity=4Q",
            "capacity: expected a positive size in bytes with an optional K, M, G or T suffix, got \"4Q\"",
        ),
        (
            "ssd:channels=0",
            "channels: expected a whole number from 1 to 1024, got \"0\"",
        ),
        (
            "s3:p99_ms=10",
            "p99_ms: expected at least median_ms (20), got \"10\"",
        ),
        (
            "hdd:colour=red",
            "unknown field \"colour\" for hdd (one of: capacity, rpm, settle_ms, full_stroke_ms, transfer_mb_s, chunk, sector, queue_depth, failed)",
        ),
        (
            "0xhdd",
            "count: expected a whole number from 1 to 10000, got \"0\"",
        ),
        (
            "1xhdd:mirror",
            "count: expected at least 2 disks for a 2-way mirror, got \"1\"",
        ),
        (
            "10xhdd:raidz2:2",
            "width: expected more than 2 disks for raidz2, got \"2\"",
        ),
        (
            "10xhdd:raidz2:12",
            "count: expected at least 12 disks for a 12-wide raidz2, got \"10\"",
        ),
        (
            "48xhdd:raidz2:46:failed=46",
            "failed: expected a disk of the vdev, 0 to 45, got \"46\"",
        ),
        (
            "140xhdd:mirror:failed=1",
            "failed: expected a raidz layout (a failed disk is modelled in RAID-Z only), got \"1\"",
        ),
        (
            "hdd:sector=1000",
            "sector: expected a power of two from 512 to 65536 bytes, got \"1000\"",
        ),
        (
            "4xhdd:raid5",
            "layout: expected stripe, mirror, raidz1, raidz2 or raidz3, got \"raid5\"",
        ),
        (
            "6xssd",
            "count: expected no count: ssd is a single device (only hdd arrays are modelled), got \"6\"",
        ),
        (
            "nvme:mirror",
            "layout: expected no layout: nvme is a single device, got \"mirror\"",
        ),
        (
            "hdd:rpm=7200:mirror",
            "overrides: expected key=value pairs only in the last segment, got \"rpm=7200\"",
        ),
        (
            "hdd:rpm",
            "layout: expected stripe, mirror, raidz1, raidz2 or raidz3, got \"rpm\"",
        ),
        (
            "hdd:rpm=7200,",
            "overrides: expected key=value pairs separated by commas, got \"\"",
        ),
        (
            "hdd:chunk=2T",
            "chunk: expected a size from 512 bytes to the disk's capacity (1000000000000), got \"2199023255552\"",
        ),
    ];
    for (text, message) in cases {
        let error: SpecError = match parse_spec(text, 0) {
            Ok(device) => panic!("{text:?} parsed as {}", device.describe()),
            Err(error) => error,
        };
        assert_eq!(error.to_string(), message, "{text:?}");
    }
}

#[test]
fn odd_specs_never_panic() {
    let pieces = [
        "",
        ":",
        "::",
        "x",
        "0x",
        "140x",
        "9999999999xhdd",
        "hdd",
        "HDD",
        "ssd",
        "nvme",
        "s3",
        "ram",
        "mirror",
        "mirror:0",
        "mirror:1",
        "raidz",
        "raidz9",
        "raidz2:0",
        "raidz2:99999",
        "=",
        "a=",
        "=b",
        "rpm=0",
        "rpm=nan",
        "rpm=inf",
        "rpm=1e308",
        "rpm=1e-308",
        "capacity=0",
        "capacity=.",
        "capacity=18446744073709551615",
        "capacity=16777216T",
        "chunk=1",
        "stripe=0",
        "channels=1025",
        "concurrency=65537",
        "median_ms=1e300",
        "p99_ms=1e300",
        "latency_us=-0",
        ",",
        ",,",
        "é",
        "\u{0}",
        "1x",
        "x1",
        "3xhdd",
        "  hdd  ",
        "read_mb_s=1e-300",
        "settle_ms=0",
        "full_stroke_ms=0",
    ];
    let mut rng = SplitMix64::new(99);
    let mut built = 0;
    for _ in 0..20_000 {
        let parts = 1 + rng.below(4) as usize;
        let text: Vec<&str> = (0..parts)
            .map(|_| pieces[rng.below(pieces.len() as u64) as usize])
            .collect();
        let separator = if rng.below(2) == 0 { ":" } else { "," };
        let text = text.join(separator);
        if let Ok(spec) = DeviceSpec::parse(&text) {
            // Keep the fuzz fast: build and exercise only small devices.
            if matches!(spec, DeviceSpec::Disks { count, .. } if count > 200) {
                continue;
            }
            if let Ok(mut device) = spec.build(rng.next_u64()) {
                built += 1;
                let capacity = device.capacity_bytes();
                // Lengths up to 1 MiB: the extreme lengths have their own test, and a 4 GiB
                // request cut into 16K stripes on every built SSD would make this one slow.
                for i in 0..4u64 {
                    let kind = if i % 2 == 0 {
                        IoKind::Read
                    } else {
                        IoKind::Write
                    };
                    let offset = rng.next_u64() % capacity.saturating_add(1);
                    device.submit(i, kind, offset, rng.below(1 << 20) as u32);
                }
                assert!(!device.describe().is_empty());
                assert!(!device.stats().is_empty());
            }
        }
    }
    assert!(built > 100, "the fuzz built only {built} devices");
}

#[test]
fn extreme_requests_do_not_panic() {
    let mut devices: Vec<Box<dyn Device>> = vec![
        Box::new(Hdd::new(HddParams::default(), 0).unwrap()),
        Box::new(Pool::seed000_mirrors(0)),
        Box::new(Pool::seed000_raidz2(0)),
        Box::new(Ssd::nvme()),
        Box::new(Ssd::readzilla()),
        Box::new(ObjectStore::new(ObjectStoreParams::default(), 0).unwrap()),
    ];
    for device in &mut devices {
        for (now, offset, len) in [
            (0, u64::MAX, u32::MAX),
            (1, 0, 0),
            (u64::MAX - 1, u64::MAX - 10, 8192),
            (u64::MAX, 0, u32::MAX),
        ] {
            let done = device.submit(now, IoKind::Write, offset, len);
            assert!(done >= now, "{}: {done} < {now}", device.describe());
        }
    }
    // The same through the command queues, decided at the end of time.
    let specs = ["hdd", "140xhdd:mirror", "48xhdd:raidz2:46:failed=0", "nvme"];
    for spec in specs {
        let mut device = parse_spec(spec, 0).unwrap();
        let mut held = 0;
        for (now, offset, len) in [
            (0, u64::MAX, u32::MAX),
            (1, 0, 0),
            (u64::MAX - 1, u64::MAX - 10, 8192),
            (u64::MAX, 0, u32::MAX),
        ] {
            for kind in [IoKind::Read, IoKind::Write] {
                match device.queue(now, kind, offset, len) {
                    Queued::Done(done) => assert!(done >= now, "{spec}: {done} < {now}"),
                    Queued::Held(_) => held += 1,
                }
            }
        }
        let mut decided = Vec::new();
        device.decide(Nanos::MAX, &mut decided);
        assert_eq!(decided.len(), held, "{spec}: every held I/O decided");
        assert_eq!(device.next_start_ns(), None, "{spec}");
    }
}
