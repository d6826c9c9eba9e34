//! The server model's queues against queueing theory's closed forms: the CPU cores as an
//! M/M/c queue (Erlang C), memory bandwidth as an M/D/1 queue (Pollaczek-Khinchine), each
//! driven by a long seeded run of Poisson arrivals. Tolerances are stated beside each check:
//! they are a few standard errors of a mean over the run's jobs, whose waits are correlated
//! (a busy period's jobs all wait), so the runs are long.

use larch_sim::SplitMix64;
use larch_sim::device::{FcfsQueue, Nanos, Server, ServerParams, Work};

/// An exponential draw of mean `mean_ns`.
fn exponential(rng: &mut SplitMix64, mean_ns: f64) -> f64 {
    let u = rng.next_f64().max(f64::MIN_POSITIVE);
    -u.ln() * mean_ns
}

/// The mean wait (before service) of `jobs` Poisson arrivals at `rate_per_ns` into `queue`,
/// each needing `service(rng)` ns.
fn mean_wait_ns(
    queue: &mut FcfsQueue,
    jobs: u32,
    rate_per_ns: f64,
    seed: u64,
    mut service: impl FnMut(&mut SplitMix64) -> Nanos,
) -> f64 {
    let mut rng = SplitMix64::new(seed);
    let mut at = 0.0;
    let mut waited = 0.0;
    for _ in 0..jobs {
        at += exponential(&mut rng, 1.0 / rate_per_ns);
        let arrival = at.round() as Nanos;
        let s = service(&mut rng);
        let done = queue.serve(arrival, s);
        waited += (done - arrival - s) as f64;
    }
    waited / f64::from(jobs)
}

/// Erlang C: the probability that an arrival waits, for `c` servers at offered load `a`
/// (arrival rate over one server's service rate), from the Erlang B recursion.
fn erlang_c(c: u32, a: f64) -> f64 {
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (f64::from(k) + a * b);
    }
    let rho = a / f64::from(c);
    b / (1.0 - rho + rho * b)
}

#[test]
fn cpu_cores_queue_as_m_m_c_erlang_c() {
    // 8 cores, 10 us mean service; rho 0.5, 0.8 and 0.9. Mean wait Wq = C(c, a) / (c mu - lambda).
    let cores = 8;
    let mean_service_ns = 10_000.0;
    for (rho, jobs, tolerance) in [
        (0.5, 2_000_000, 0.06),
        (0.8, 2_000_000, 0.05),
        (0.9, 4_000_000, 0.07),
    ] {
        let mu = 1.0 / mean_service_ns;
        let lambda = rho * f64::from(cores) * mu;
        let a = lambda / mu;
        let expected = erlang_c(cores, a) / (f64::from(cores) * mu - lambda);
        let mut queue = FcfsQueue::new(cores);
        let measured = mean_wait_ns(&mut queue, jobs, lambda, 37, |rng| {
            exponential(rng, mean_service_ns).round() as Nanos
        });
        let ratio = measured / expected;
        eprintln!("M/M/{cores} rho {rho}: Erlang C {expected:.0} ns, measured {measured:.0} ns");
        assert!(
            (1.0 - tolerance..=1.0 + tolerance).contains(&ratio),
            "rho {rho}: Erlang C mean wait {expected:.0} ns, measured {measured:.0} ns ({ratio:.3}x)"
        );
    }
}

#[test]
fn erlang_c_matches_known_values() {
    // One server: C(1, a) = a (an M/M/1 arrival waits with probability rho). Two servers
    // at a = 1: C = 1/3 (a textbook value: P0 = 1/3, C = a^2/(2!(1-rho)) P0 = 1/3).
    assert!((erlang_c(1, 0.7) - 0.7).abs() < 1e-12);
    assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
}

#[test]
fn memory_bandwidth_is_one_server_m_d_1() {
    // Every request moves the same bytes: deterministic service s at rho 0.5 and 0.85.
    // Pollaczek-Khinchine for M/D/1: Wq = rho s / (2 (1 - rho)).
    let params = ServerParams {
        cores: 1,
        request_us: 0.0,
        memory_mb_s: 10_000.0,
        ..ServerParams::off()
    };
    let work = Work {
        dma_bytes: 40_000,
        ..Work::default()
    };
    let s = params.memory_ns(&work);
    assert_eq!(s, 4_000.0, "40 KB at 10 GB/s");
    for (rho, tolerance) in [(0.5, 0.04), (0.85, 0.06)] {
        let lambda = rho / s;
        let mut server = Server::new(params.clone());
        let mut rng = SplitMix64::new(7);
        let (mut at, mut waited, jobs) = (0.0, 0.0, 1_000_000);
        for _ in 0..jobs {
            at += exponential(&mut rng, 1.0 / lambda);
            let arrival = at.round() as Nanos;
            let done = server.serve(arrival, &work);
            waited += (done - arrival) as f64 - s;
        }
        let measured = waited / f64::from(jobs);
        let expected = rho * s / (2.0 * (1.0 - rho));
        let ratio = measured / expected;
        eprintln!("M/D/1 rho {rho}: P-K {expected:.0} ns, measured {measured:.0} ns");
        assert!(
            (1.0 - tolerance..=1.0 + tolerance).contains(&ratio),
            "rho {rho}: M/D/1 mean wait {expected:.0} ns, measured {measured:.0} ns ({ratio:.3}x)"
        );
        // The bus was busy rho of the time.
        let busy = server.memory_busy_ns() as f64 / at;
        assert!(
            (busy - rho).abs() < 0.01,
            "busy {busy:.3} against rho {rho}"
        );
        assert_eq!(server.cpu_busy_ns(), 0, "no CPU work asked");
    }
}

#[test]
fn saturated_cores_serve_at_cores_over_service() {
    // A closed loop far above the cores' rate: throughput c / s, whatever the depth.
    let p = ServerParams {
        cores: 4,
        request_us: 25.0,
        ..ServerParams::off()
    };
    let mut server = Server::new(p);
    let work = Work {
        requests: 1,
        ..Work::default()
    };
    let mut last = 0;
    for _ in 0..40_000 {
        last = server.serve(0, &work);
    }
    // 40,000 requests of 25 us on 4 cores: 250 ms.
    assert_eq!(last, 250_000_000);
}
