//! The discrete-event simulator of a pool (`larch sim run`, `larch size`): the daemon's
//! cache in virtual time, against models of the devices, driven by modelled clients or a
//! trace.
//!
//! **It runs the daemon's decisions, not a copy of them**: the ARC is `larch_policy::Arc`
//! split into the engine's shards (`larch_policy::shards`), the feed chooses with
//! `larch_policy::feed::select` and paces with `next_feed`, cache devices place records
//! and move their evict hands with `larch_policy::ring::RingSpace`, sequential reads are
//! detected by `larch_policy::prefetch::Prefetcher`, and writers wait on
//! `larch_policy::throttle`'s curve. What is the simulator's own is the model around them:
//! devices ([`crate::device`]), clients ([`clients`]), the server's CPUs and memory
//! bandwidth when a model of them is given ([`crate::device::Server`]: a request's reply
//! then waits for an event at its storage part's end, and queues there), and the glue of
//! [`cache`], which does what the engine's read path, feeder and syncer do, in virtual
//! time.
//!
//! Time is nanoseconds in a `u64` (584 years). Events (a client's next request, a feed,
//! a TXG, the end of a sample interval, a flip of the L2ARC switch) are taken from a heap
//! in time order, ties in the order they were made. Most device models answer each I/O
//! with its completion time at once; the primary storage's disks, which reorder their
//! command queues, hold their I/Os and choose among them when they fall idle, so a
//! request that reads from them is parked until a `Decide` event (at the time the disks
//! next start an I/O) tells when its reads are done. A closed-loop client's next request is
//! one event, scheduled when its request's completion is known. The same configuration
//! and seed give the same output on every machine.

mod block_map;
pub mod cache;
pub mod clients;
pub mod config;
pub mod metadata;
pub mod record;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use larch_policy::prefetch::Prefetcher;
use rustc_hash::FxHashMap as HashMap;

pub use config::{
    CacheDevice, Clients, ConfigError, Pattern, SECOND_NS, SimConfig, SimTunables, TUNABLE_NAMES,
    Workload,
};
pub use metadata::{CacheMode, MetadataModel};
pub use record::{MetadataSummary, ServerSummary, SimOutput, Summary, TraceProgress, Window};

use self::cache::{SimCache, Wait};
use self::clients::{Generator, Request};
use self::record::Recorder;
use crate::device::{self, IoId, Nanos, Server, Work};
use crate::trace::TraceError;

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A device specification does not parse.
    #[error("{field}: {source}")]
    Device {
        /// `primary` or `caches[i]`.
        field: String,
        /// Why.
        source: device::SpecError,
    },
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// What happens at a moment of virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The end of a sample interval (first among ties: it closes the interval before
    /// anything of the next one happens).
    Sample,
    /// A flip of the L2ARC switch.
    Switch(bool),
    /// A closed-loop client issues its next request.
    Client(u32),
    /// An open-loop request arrives.
    Arrival,
    /// A cache device's feed.
    Feed(usize),
    /// A feed batch is on its device.
    FeedDone(u64),
    /// The TXG timer.
    TxgTimer,
    /// A TXG is on the primary storage.
    TxgDone(u64),
    /// The primary storage starts an I/O it holds: it chooses which.
    Decide,
    /// Data reads' indirect blocks are there: the reads are issued.
    Chain(u64),
    /// A request's storage part is done: its reply's work goes to the server.
    Reply(u64),
}

/// Events by time, ties in the order they were made.
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<(Nanos, u64, Event)>>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, at: Nanos, event: Event) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, event)));
    }

    fn pop(&mut self) -> Option<(Nanos, Event)> {
        self.heap.pop().map(|Reverse((at, _, e))| (at, e))
    }
}

/// How far a run has come, for a progress line.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Virtual seconds done.
    pub virtual_s: u64,
    /// Of how many.
    pub total_s: u64,
    /// Client requests so far.
    pub requests: u64,
}

/// A request waiting for reads the primary storage holds.
#[derive(Clone, Copy, Debug)]
struct Parked {
    issued: Nanos,
    /// The latest completion known so far.
    done: Nanos,
    /// Held reads it still waits for.
    left: usize,
    write: bool,
    source: cache::Source,
    bytes: u64,
    /// The closed-loop client that issued it.
    client: Option<u32>,
    /// What its reply asks of the server model (nothing without one).
    work: Work,
}

/// One simulation in progress.
struct Run<'a> {
    cfg: &'a SimConfig,
    cache: SimCache,
    requests: Generator,
    rec: Recorder,
    queue: Queue,
    prefetchers: Vec<Prefetcher>,
    prefetch_blocks: u64,
    syncs: HashMap<u64, Vec<(u64, u64)>>,
    next_sync: u64,
    block_ios: u64,
    traced: bool,
    pending: Option<Request>,
    /// How far the trace has come, for a trace workload.
    trace: Option<TraceProgress>,
    /// Requests waiting for held reads, by their number.
    parked: HashMap<u64, Parked>,
    next_parked: u64,
    /// The parked requests waiting for each held read or chain of reads.
    waiters: HashMap<Wait, Vec<u64>>,
    /// When the next `Decide` event is, if one is due.
    decide_at: Option<Nanos>,
    /// The syncing TXG whose end is not yet known.
    txg_waiting: Option<u64>,
    decided: Vec<(IoId, Nanos)>,
    /// The server model, if one is given ([`device::Server`]).
    server: Option<Server>,
    /// Requests whose storage part is done, waiting for their `Reply` event.
    replies: HashMap<u64, Parked>,
    next_reply: u64,
    /// The time of the event being handled.
    clock: Nanos,
}

/// When a run ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ending {
    /// At its duration.
    #[default]
    AtDuration,
    /// At its duration, or earlier once it has settled: over the last quarter of the run
    /// so far, and at least the last `window_s` seconds (full-size time), the ARC's and
    /// the cache devices' bytes moved by under 1% and the read rate by under 2%
    /// ([`Recorder::settled`]). A warm-up is timed without simulating the hours after it.
    WhenSettled {
        /// The shortest window, in seconds of full-size time.
        window_s: u64,
    },
}

impl Ending {
    /// The shortest settling window in intervals of a run of `cfg` (one stands for
    /// `step_s` x `time_scale` seconds of full-size time); `None` for a run to its duration.
    fn window_intervals(self, cfg: &SimConfig) -> Option<usize> {
        let Ending::WhenSettled { window_s } = self else {
            return None;
        };
        let full_step = cfg.step_s.max(1).saturating_mul(cfg.time_scale.max(1));
        Some(window_s.div_ceil(full_step) as usize)
    }
}

/// Runs `cfg` to its end; `progress` is called once per virtual minute.
pub fn run(cfg: &SimConfig, progress: &mut dyn FnMut(Progress)) -> Result<SimOutput, SimError> {
    run_until(cfg, Ending::AtDuration, progress)
}

/// Runs `cfg` until `ending` says; `progress` is called once per virtual minute.
pub fn run_until(
    cfg: &SimConfig,
    ending: Ending,
    progress: &mut dyn FnMut(Progress),
) -> Result<SimOutput, SimError> {
    cfg.validate()?;
    let primary =
        device::parse_spec(&cfg.primary, cfg.seed).map_err(|source| SimError::Device {
            field: "primary".to_string(),
            source,
        })?;
    // A volume beyond the primary storage's end would have its reads clamped to the
    // last sector, where seeks cost nothing.
    if cfg.volume_bytes > primary.capacity_bytes() {
        return Err(ConfigError::new(
            "volume",
            format!(
                "{} bytes, larger than the primary storage ({}, {} bytes)",
                cfg.volume_bytes,
                primary.describe(),
                primary.capacity_bytes()
            ),
        )
        .into());
    }
    let mut caches = Vec::new();
    for (i, c) in cfg.caches.iter().enumerate() {
        let model =
            device::parse_spec(&c.spec, cfg.seed.wrapping_add(1 + i as u64)).map_err(|source| {
                SimError::Device {
                    field: format!("caches[{i}]"),
                    source,
                }
            })?;
        let capacity = c.capacity_bytes.unwrap_or_else(|| model.capacity_bytes());
        caches.push((format!("cache{i}"), model, capacity));
    }
    let mut cache = SimCache::new(
        cfg.arc_max_bytes,
        cfg.block_bytes,
        primary,
        caches,
        cfg.tunables.clone(),
    );
    let ads_blocks = cfg.workload.ads_bytes / u64::from(cfg.block_bytes);
    cache.model_metadata(
        cfg.tunables.metadata,
        cfg.volume_bytes / u64::from(cfg.block_bytes),
    );
    if cfg.prewarm {
        cache.prewarm(ads_blocks, cfg.seed);
    }
    let threads = match cfg.clients {
        Clients::Closed { threads, .. } => threads,
        Clients::Open { .. } => 1,
    };
    let requests = Generator::new(
        &cfg.workload,
        cfg.volume_bytes,
        cfg.block_bytes,
        threads,
        cfg.seed,
    )?;
    let rec = Recorder::new(cfg.step_s, cfg.duration_ns, &cache);
    let prefetch_blocks = cfg
        .tunables
        .prefetch_max_distance
        .min(cfg.arc_max_bytes / 8)
        / u64::from(cfg.block_bytes);
    let mut run = Run {
        cfg,
        cache,
        requests,
        rec,
        queue: Queue::default(),
        prefetchers: (0..cfg.workload.volumes.max(1))
            .map(|_| Prefetcher::default())
            .collect(),
        prefetch_blocks,
        syncs: HashMap::default(),
        next_sync: 0,
        block_ios: 0,
        traced: false,
        pending: None,
        trace: matches!(cfg.workload.pattern, Pattern::Trace { .. }).then(TraceProgress::default),
        parked: HashMap::default(),
        next_parked: 0,
        waiters: HashMap::default(),
        decide_at: None,
        txg_waiting: None,
        decided: Vec::new(),
        server: (!cfg.tunables.server.is_off()).then(|| Server::new(cfg.tunables.server.clone())),
        replies: HashMap::default(),
        next_reply: 0,
        clock: 0,
    };
    run.start()?;
    run.events(ending, progress)?;
    let config_text = format!("{cfg:#?}");
    let Run {
        rec,
        cache,
        block_ios,
        pending,
        mut trace,
        traced,
        server,
        ..
    } = run;
    if let Some(t) = &mut trace {
        t.timed = traced;
    }
    if let (Some(t), Some(next)) = (&mut trace, pending) {
        t.next_line = Some(next.line);
        t.next_at_s = next.at_ns.map(|ns| ns as f64 / SECOND_NS as f64);
    }
    let mut out = rec.finish(cfg, config_text, &cache, block_ios);
    out.summary.trace = trace;
    out.summary.server = server.map(|s| server_summary(&s, out.summary.virtual_seconds));
    Ok(out)
}

/// The server's load over a run of `virtual_s` seconds (of the run's own clock).
fn server_summary(server: &Server, virtual_s: f64) -> ServerSummary {
    let run_ns = (virtual_s * 1e9).max(1.0);
    let cores = f64::from(server.params().cores);
    ServerSummary {
        spec: server.params().to_string(),
        cpu_busy: server.cpu_busy_ns() as f64 / (run_ns * cores),
        memory_busy: server.memory_busy_ns() as f64 / run_ns,
    }
}

impl Run<'_> {
    /// The first events: clients (or the first arrival), feeds, the TXG timer, samples,
    /// switch flips.
    fn start(&mut self) -> Result<(), SimError> {
        let cfg = self.cfg;
        if let Pattern::Trace { .. } = cfg.workload.pattern {
            // A trace with times arrives on its own clock; one without is replayed as
            // fast as the clients go.
            if let Some(first) = self.next_request(0)? {
                if let Some(at_ns) = first.at_ns {
                    self.traced = true;
                    self.queue.push(at_ns, Event::Arrival);
                }
                self.pending = Some(first);
            }
        }
        if !self.traced {
            match cfg.clients {
                Clients::Closed { threads, .. } => {
                    // Two requests drawn ahead: the next one's header and the one after's
                    // index bucket load while this one is served (`hint_upcoming`).
                    self.requests.draw_ahead(2);
                    for c in 0..threads {
                        // Spread over the first millisecond, so clients do not move in
                        // lockstep.
                        self.queue.push(
                            u64::from(c) * 1_000_000 / u64::from(threads),
                            Event::Client(c),
                        );
                    }
                }
                Clients::Open { .. } => {
                    let first = self.interarrival();
                    self.queue.push(first, Event::Arrival);
                }
            }
        }
        let feeders = if cfg.tunables.feed_round_robin {
            self.cache.devices.len().min(1)
        } else {
            self.cache.devices.len()
        };
        for d in 0..feeders {
            self.queue.push(0, Event::Feed(d));
        }
        self.queue.push(
            cfg.tunables.txg_timeout_s.max(1) * SECOND_NS,
            Event::TxgTimer,
        );
        self.queue.push(cfg.step_s * SECOND_NS, Event::Sample);
        for &(at, on) in &cfg.switch {
            self.queue.push(at, Event::Switch(on));
        }
        Ok(())
    }

    /// Time to the next open-loop arrival (exponential).
    fn interarrival(&mut self) -> Nanos {
        let rate = match self.cfg.clients {
            Clients::Open { rate } => rate,
            Clients::Closed { .. } => 1.0,
        };
        let u = self.requests.uniform().max(f64::MIN_POSITIVE);
        (-u.ln() / rate * 1e9) as Nanos
    }

    fn events(
        &mut self,
        ending: Ending,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), SimError> {
        let end = self.cfg.duration_ns;
        let total_s = end / SECOND_NS;
        let settle_intervals = ending.window_intervals(self.cfg);
        let mut next_progress = 60 * SECOND_NS;
        while let Some((now, event)) = self.queue.pop() {
            if now > end {
                break;
            }
            self.clock = now;
            // The device I/Os of the events so far go to their intervals now, while they are
            // still in the CPU's caches: kept for a whole interval, they made a buffer of
            // up to a megabyte written and read back that pushed the ARC's lines out.
            self.rec.device_ios(&mut self.cache);
            match event {
                Event::Sample => {
                    self.rec.sample(now, &mut self.cache);
                    if self.trace.as_ref().is_some_and(|t| t.ended) {
                        // The run ends with the interval in which its trace ended: what
                        // follows would be idle, and would be taken for the steady state.
                        break;
                    }
                    if settle_intervals.is_some_and(|w| self.rec.settled(w)) {
                        break;
                    }
                    self.cache.expire_inflight(now);
                    if now >= next_progress {
                        next_progress += 60 * SECOND_NS;
                        progress(Progress {
                            virtual_s: now / SECOND_NS,
                            total_s,
                            requests: self.block_ios,
                        });
                    }
                    self.queue
                        .push(now + self.cfg.step_s * SECOND_NS, Event::Sample);
                }
                Event::Switch(on) => {
                    self.cache.l2_enabled = on;
                    let text = format!("l2arc_enabled={}", u8::from(on));
                    self.rec.event(now, text);
                }
                Event::Client(c) => {
                    let request = match self.pending.take() {
                        Some(r) => Some(r),
                        None => self.next_request(c)?,
                    };
                    self.hint_upcoming();
                    // When the trace has ended, this client stops.
                    if let Some(request) = request
                        && let Some(latency) = self.request(now, &request, Some(c))
                    {
                        self.queue
                            .push(now + latency + self.think_ns(), Event::Client(c));
                    }
                }
                Event::Arrival => {
                    let request = match self.pending.take() {
                        Some(r) => Some(r),
                        None => self.next_request(0)?,
                    };
                    let Some(request) = request else {
                        continue;
                    };
                    self.request(now, &request, None);
                    if self.traced {
                        if let Some(next) = self.next_request(0)? {
                            // Time never goes backwards: a record earlier than the one
                            // before it arrives now, as the replay's clock keeps the
                            // largest time seen. One far ahead waits for its time, and the
                            // records after it with it: the summary names it if the run
                            // ends first.
                            let at = next.at_ns.unwrap_or(0).max(now);
                            self.pending = Some(next);
                            self.queue.push(at, Event::Arrival);
                        }
                    } else {
                        let gap = self.interarrival();
                        self.queue.push(now + gap, Event::Arrival);
                    }
                }
                Event::Feed(d) => {
                    if let Some((id, done)) = self.cache.feed(now, d) {
                        self.queue.push(done, Event::FeedDone(id));
                        let bytes = self.cache.devices[d].batch_bytes();
                        self.feed_buffers(now, bytes);
                    }
                    let next = self.cache.next_feeder(d);
                    self.queue
                        .push(self.cache.devices[next].next_feed_ns, Event::Feed(next));
                }
                Event::FeedDone(id) => self.cache.feed_done(id),
                Event::TxgTimer => {
                    self.sync(now);
                    let timeout = self.cfg.tunables.txg_timeout_s.max(1) * SECOND_NS;
                    self.queue.push(now + timeout, Event::TxgTimer);
                }
                Event::TxgDone(id) => {
                    if let Some(blocks) = self.syncs.remove(&id) {
                        self.cache.sync_done(now, blocks);
                    }
                    if self.cache.sync_due() {
                        self.sync(now);
                    }
                }
                Event::Decide => {
                    if self.decide_at == Some(now) {
                        self.decide_at = None;
                    }
                    let mut decided = std::mem::take(&mut self.decided);
                    decided.clear();
                    self.cache.settle(now, &mut decided);
                    self.resolve(&decided);
                    self.decided = decided;
                }
                Event::Chain(c) => {
                    let (done, source, waits) = self.cache.run_chain(now, c);
                    self.unchain(c, done, source, &waits);
                }
                Event::Reply(n) => {
                    if let Some(p) = self.replies.remove(&n) {
                        self.reply(now, &p);
                    }
                }
            }
            self.after_event(now);
        }
        Ok(())
    }

    /// The think time of a closed-loop client.
    fn think_ns(&self) -> Nanos {
        match self.cfg.clients {
            Clients::Closed { think_ns, .. } => think_ns,
            Clients::Open { .. } => 0,
        }
    }

    /// After an event: hands I/Os decided out of turn to their waiters, and schedules a
    /// `Decide` for when the primary storage next starts an I/O it holds.
    fn after_event(&mut self, now: Nanos) {
        let drained = self.cache.take_drained();
        if !drained.is_empty() {
            self.resolve(&drained);
        }
        for (at, c) in self.cache.take_ready() {
            // Never before now: the devices take their I/O in time order.
            self.queue.push(at.max(now), Event::Chain(c));
        }
        if let Some(start) = self.cache.primary.next_start_ns()
            && self.decide_at.is_none_or(|at| start < at)
        {
            let at = start.max(now);
            self.queue.push(at, Event::Decide);
            self.decide_at = Some(at);
        }
    }

    /// Hands decided reads to the requests parked on them; a request whose last read is
    /// decided completes, and a TXG whose last write is decided gets its `TxgDone`.
    fn resolve(&mut self, decided: &[(IoId, Nanos)]) {
        for &(id, at) in decided {
            let Some(parked) = self.waiters.remove(&Wait::Io(id)) else {
                continue;
            };
            for number in parked {
                let p = self.parked.get_mut(&number).expect("a waiter is parked");
                p.done = p.done.max(at);
                p.left -= 1;
                if p.left == 0 {
                    let p = self.parked.remove(&number).expect("just found");
                    self.complete(&p);
                }
            }
        }
        if let Some(done) = self.cache.take_sync_decided()
            && let Some(id) = self.txg_waiting.take()
        {
            self.queue.push(done, Event::TxgDone(id));
        }
    }

    /// Chain `c` issued its data reads: the requests parked on it wait for them instead,
    /// until `done` and for `waits`, and were served from `source` at best.
    fn unchain(&mut self, c: u64, done: Nanos, source: cache::Source, waits: &[Wait]) {
        let Some(parked) = self.waiters.remove(&Wait::Chain(c)) else {
            return;
        };
        for number in parked {
            let p = self.parked.get_mut(&number).expect("a waiter is parked");
            p.done = p.done.max(done);
            p.source = p.source.max(source);
            p.left = p.left - 1 + waits.len();
            for &w in waits {
                self.waiters.entry(w).or_default().push(number);
            }
            if p.left == 0 {
                let p = self.parked.remove(&number).expect("just found");
                self.complete(&p);
            }
        }
    }

    /// A parked request's storage part is done: it is answered then, or with a server
    /// model once the server has done its reply's work.
    fn complete(&mut self, p: &Parked) {
        if self.server.is_some() {
            self.defer_reply(p);
        } else {
            self.finish(p, p.done);
        }
    }

    /// Request `p` is answered at `done` (before the front end's time): records it and,
    /// for a closed-loop client, schedules its next request.
    fn finish(&mut self, p: &Parked, done: Nanos) {
        let latency = done - p.issued + self.cfg.frontend_ns;
        self.rec
            .request(p.issued + latency, p.write, p.source, latency, p.bytes);
        if let Some(c) = p.client {
            self.queue
                .push(p.issued + latency + self.think_ns(), Event::Client(c));
        }
    }

    /// With a server model: the request's storage part is done at `p.done`; its reply
    /// waits for a `Reply` event then, so that the server sees its work in time order.
    fn defer_reply(&mut self, p: &Parked) {
        let n = self.next_reply;
        self.next_reply += 1;
        self.replies.insert(n, *p);
        // Never before the event being handled: the server takes its work in time order.
        self.queue.push(p.done.max(self.clock), Event::Reply(n));
    }

    /// The reply of `p` at `now`: its work queues in the server, and it completes when
    /// the server is done with it.
    fn reply(&mut self, now: Nanos, p: &Parked) {
        let server = self
            .server
            .as_mut()
            .expect("replies wait only with a server");
        let done = server.serve(now, &p.work);
        self.finish(p, done);
    }

    /// What request `r` asks of the server, given the device reads it caused (`reads`
    /// I/Os of `read_bytes`: its own, its indirect blocks', the read-ahead it started, a
    /// partial write's read): one request through the network stack and the protocol, its
    /// bytes sent or received and copied once between the ARC's buffer and the
    /// protocol's, and each device I/O with its bytes checksummed and moved by DMA. A
    /// write's blocks are checksummed and sent to the disks by its TXG: counted here, as
    /// one more I/O.
    fn work_of(&self, r: &Request, reads: u64, read_bytes: u64) -> Work {
        let bytes = r.blocks * u64::from(self.cfg.block_bytes);
        let io = match self.cfg.workload.io_bytes {
            0 => bytes,
            io => u64::from(io).min(bytes),
        };
        let (ios, device_bytes) = if r.write {
            (reads + 1, read_bytes + bytes)
        } else {
            (reads, read_bytes)
        };
        Work {
            requests: 1,
            device_ios: ios,
            network_bytes: io,
            checksum_bytes: device_bytes,
            copy_bytes: io,
            dma_bytes: device_bytes,
        }
    }

    /// With a server model, a feed batch of `bytes` was issued at `now`: one device I/O,
    /// whose bytes the cache device reads from memory by DMA, from buffers that take
    /// their room from an ARC at its maximum (OpenZFS copies a block whose data an ARC
    /// buffer shares into a buffer of its own for the write, `l2arc_write_buffers`).
    fn feed_buffers(&mut self, now: Nanos, bytes: u64) {
        let Some(server) = self.server.as_mut() else {
            return;
        };
        let work = Work {
            device_ios: 1,
            dma_bytes: bytes,
            ..Work::default()
        };
        server.serve(now, &work);
        self.cache.take_room(now, bytes);
    }

    /// The next request of client `c`; for a trace, counts what it reads and notes its end.
    fn next_request(&mut self, c: u32) -> Result<Option<Request>, SimError> {
        let next = self.requests.next(c)?;
        if let Some(t) = &mut self.trace {
            t.ended |= next.is_none();
        }
        Ok(next)
    }

    /// Starts loading what the ARC's lookups of the requests drawn ahead will read, in two
    /// steps a request apart: the next request's header (its index bucket was asked for
    /// at the request before), and the index bucket of the one after it. The waits for
    /// memory then overlap with serving this request instead of following it. Hints to
    /// the CPU only: nothing the simulation decides depends on them.
    fn hint_upcoming(&self) {
        let mut upcoming = self.requests.upcoming();
        if let Some(next) = upcoming.next() {
            self.cache.prefetch_header(next.first_block);
        }
        if let Some(after) = upcoming.next() {
            self.cache.prefetch_lookup(after.first_block);
        }
    }

    /// Starts a TXG sync if one can start.
    fn sync(&mut self, now: Nanos) {
        if let Some((done, blocks)) = self.cache.start_sync(now) {
            let id = self.next_sync;
            self.next_sync += 1;
            self.syncs.insert(id, blocks);
            match done {
                Some(done) => self.queue.push(done, Event::TxgDone(id)),
                None => self.txg_waiting = Some(id),
            }
        }
    }

    /// Serves one request at `now` for client `client` (`None`: an open-loop arrival);
    /// returns its latency (the front end's time included), or `None` when it waits for
    /// reads the primary storage holds: it is parked and completes when they are decided.
    fn request(&mut self, now: Nanos, r: &Request, client: Option<u32>) -> Option<Nanos> {
        self.block_ios += r.blocks;
        if let Some(t) = &mut self.trace {
            t.records += 1;
            t.last_line = r.line;
        }
        let bytes = r.blocks * u64::from(self.cfg.block_bytes);
        let reads_before = self.cache.device_reads();
        let mut awaited = Vec::new();
        let (done, source) = if r.write {
            let done = self.cache.write(now, r.first_block, r.blocks, r.partial);
            if self.cache.sync_due() {
                self.sync(now);
            }
            (done, cache::Source::Arc)
        } else {
            let served = self.cache.read(now, r.first_block, r.blocks, false);
            awaited = self.cache.take_awaited();
            if !self.cfg.tunables.prefetch_disable && self.prefetch_blocks > 0 {
                let last = r.first_block + r.blocks - 1;
                // The volume the request falls in: the data set is split evenly.
                let ads_blocks =
                    (self.cfg.workload.ads_bytes / u64::from(self.cfg.block_bytes)).max(1);
                let volumes = self.prefetchers.len() as u64;
                let v = (r.first_block.min(ads_blocks - 1) * volumes / ads_blocks) as usize;
                if let Some(ahead) =
                    self.prefetchers[v].observe(r.first_block, last, self.prefetch_blocks, 1)
                {
                    let volume_blocks = self.cfg.volume_bytes / u64::from(self.cfg.block_bytes);
                    let end = ahead.end.min(volume_blocks);
                    if end > ahead.start {
                        // Read ahead, waited for by nobody.
                        self.cache.read(now, ahead.start, end - ahead.start, true);
                        self.cache.take_awaited();
                    }
                }
            }
            served
        };
        let work = if self.server.is_some() {
            let (reads, read_bytes) = self.cache.device_reads();
            self.work_of(r, reads - reads_before.0, read_bytes - reads_before.1)
        } else {
            Work::default()
        };
        let parked = Parked {
            issued: now,
            done,
            left: awaited.len(),
            write: r.write,
            source,
            bytes,
            client,
            work,
        };
        if awaited.is_empty() && self.server.is_some() {
            self.defer_reply(&parked);
            return None;
        }
        if awaited.is_empty() {
            let latency = done - now + self.cfg.frontend_ns;
            self.rec
                .request(now + latency, r.write, source, latency, bytes);
            return Some(latency);
        }
        let number = self.next_parked;
        self.next_parked += 1;
        self.parked.insert(number, parked);
        for id in awaited {
            self.waiters.entry(id).or_default().push(number);
        }
        None
    }
}
