//! The server around the cache: its CPU cores and its memory bandwidth, as resources a
//! request queues for (issue 37; docs/simulator.md, "The server").
//!
//! Seed 002's talk saw its server become CPU-bound once four NVMe devices served the
//! reads ("CPU no longer waiting on high latency disk reads, is now copying buffers like
//! crazy"); without a model of the CPUs the simulator serves whatever the devices can.
//! Here a request's work in the server is counted in what it does — one request through
//! the network stack and the protocol, bytes through the network stack, bytes checksummed,
//! bytes copied, bytes moved by DMA — and priced with the machine's parameters
//! ([`ServerParams`]).
//!
//! # Theory
//!
//! Two queues in tandem, both first come first served, both closed forms like the flash
//! model's channels:
//!
//! 1. **Memory bandwidth**, one server: a request's memory traffic (each byte a device or
//!    the NIC moves by DMA crosses memory once, each byte checksummed is read once, each
//!    byte copied is read and written) takes `bytes / bandwidth`. One server for the whole
//!    machine: the controllers of all sockets together, as a STREAM figure is.
//! 2. **CPU**, `cores` servers: the request's CPU time goes to the core that falls idle
//!    first. With arrivals in time order that is the M/M/c (M/G/c) queue's discipline,
//!    which the tests check against Erlang C.
//!
//! Memory comes first so that the CPU queue, too, sees its arrivals in time order (a FIFO
//! single server's departures are in order; a multi-server's are not). The order within a
//! request is the model's: in a real server the copies and checksums overlap the traffic
//! they cause. Nothing here draws random numbers: the same submissions give the same times.
//!
//! [`ServerParams::off`] costs nothing and queues nothing: a spec that does not name a
//! server runs as before the model.

use std::fmt;

use super::spec::{SpecError, check_non_negative, parse_non_negative, parse_positive, parse_whole};
use super::{NS_PER_US, Nanos, ns_per_byte, round_ns};

/// Most cores a server spec may have.
pub const MAX_CORES: u32 = 4096;

/// What a request (or a feed batch) asks of the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Requests through the network stack and the protocol (0 for the feed).
    pub requests: u64,
    /// I/Os to a device: submission, interrupt, completion, the file system's I/O path.
    pub device_ios: u64,
    /// Bytes sent or received through the network stack.
    pub network_bytes: u64,
    /// Bytes checksummed (blocks read from a device, blocks written).
    pub checksum_bytes: u64,
    /// Bytes copied by a core (an ARC buffer into the protocol's, or back).
    pub copy_bytes: u64,
    /// Bytes a device moves to or from memory by DMA.
    pub dma_bytes: u64,
}

impl Work {
    /// Bytes of memory traffic: DMA and the NIC's once, checksums once, copies twice
    /// (read and write), the network stack's own copy twice.
    pub fn memory_bytes(&self) -> u64 {
        self.dma_bytes
            .saturating_add(self.checksum_bytes)
            .saturating_add(self.copy_bytes.saturating_mul(2))
            .saturating_add(self.network_bytes.saturating_mul(3))
    }
}

/// A server's parameters. Per-byte costs are rates of one core (datasheet megabytes, 10^6
/// bytes, per second); `memory_mb_s` is the whole machine's.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerParams {
    /// The preset it came from (`off`, `sun7410`, `xeon-2s`).
    pub model: &'static str,
    /// Cores serving requests (hardware threads not counted).
    pub cores: u32,
    /// CPU per request: network stack, protocol (iSCSI, NFS), the file system's path.
    pub request_us: f64,
    /// CPU per device I/O: submission, interrupt, completion, hand-offs between threads.
    pub device_io_us: f64,
    /// Network stack per byte, one core.
    pub network_mb_s: f64,
    /// Checksum (fletcher4) per byte, one core.
    pub checksum_mb_s: f64,
    /// Memory copy per byte, one core.
    pub copy_mb_s: f64,
    /// Memory bandwidth of the machine.
    pub memory_mb_s: f64,
}

impl ServerParams {
    /// No server model: nothing costs time (the simulator before issue 37).
    pub fn off() -> ServerParams {
        ServerParams {
            model: "off",
            cores: 1,
            request_us: 0.0,
            device_io_us: 0.0,
            network_mb_s: f64::INFINITY,
            checksum_mb_s: f64::INFINITY,
            copy_mb_s: f64::INFINITY,
            memory_mb_s: f64::INFINITY,
        }
    }

    /// Seed 000's Sun Storage 7410 (2009): the parameters and their sources are in
    /// docs/simulator.md, "The server".
    pub fn sun7410() -> ServerParams {
        ServerParams {
            model: "sun7410",
            cores: 8,
            request_us: 5.5,
            device_io_us: 16.0,
            network_mb_s: 1_250.0,
            checksum_mb_s: 1_290.0,
            copy_mb_s: 3_000.0,
            memory_mb_s: 21_300.0,
        }
    }

    /// Seed 002's two-socket server (2019): docs/simulator.md, "The server".
    pub fn xeon_2s() -> ServerParams {
        ServerParams {
            model: "xeon-2s",
            cores: 20,
            request_us: 5.5,
            device_io_us: 16.0,
            network_mb_s: 5_250.0,
            checksum_mb_s: 4_950.0,
            copy_mb_s: 10_000.0,
            memory_mb_s: 255_900.0,
        }
    }

    /// The preset named `model`.
    pub fn preset(model: &str) -> Option<ServerParams> {
        match model {
            "off" | "none" => Some(ServerParams::off()),
            "sun7410" => Some(ServerParams::sun7410()),
            "xeon-2s" => Some(ServerParams::xeon_2s()),
            _ => None,
        }
    }

    /// Whether this is the model switched off (no costs at all).
    pub fn is_off(&self) -> bool {
        *self == ServerParams::off()
    }

    /// `MODEL[:KEY=VALUE,...]`: a preset and its overrides (`xeon-2s:cores=16`).
    pub fn parse(text: &str) -> Result<ServerParams, SpecError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SpecError::bad("server", "off, sun7410 or xeon-2s", text));
        }
        let (model, overrides) = text.split_once(':').unwrap_or((text, ""));
        let mut params = ServerParams::preset(model.trim())
            .ok_or_else(|| SpecError::bad("server", "off, sun7410 or xeon-2s", model.trim()))?;
        for pair in overrides.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| SpecError::bad("server", "KEY=VALUE", pair))?;
            params.set(key.trim(), value.trim())?;
        }
        params.validate()?;
        Ok(params)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), SpecError> {
        match key {
            "cores" => self.cores = parse_whole("cores", value, MAX_CORES)?,
            "request_us" => self.request_us = parse_non_negative("request_us", value)?,
            "device_io_us" => self.device_io_us = parse_non_negative("device_io_us", value)?,
            "network_mb_s" => self.network_mb_s = parse_positive("network_mb_s", value)?,
            "checksum_mb_s" => self.checksum_mb_s = parse_positive("checksum_mb_s", value)?,
            "copy_mb_s" => self.copy_mb_s = parse_positive("copy_mb_s", value)?,
            "memory_mb_s" => self.memory_mb_s = parse_positive("memory_mb_s", value)?,
            other => {
                return Err(SpecError::UnknownField {
                    model: "server",
                    field: other.to_string(),
                    known: "cores, request_us, device_io_us, network_mb_s, checksum_mb_s, copy_mb_s, memory_mb_s",
                });
            }
        }
        Ok(())
    }

    /// Checks every parameter (an override may have set a bad one).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.cores == 0 || self.cores > MAX_CORES {
            return Err(SpecError::bad(
                "cores",
                format!("a whole number from 1 to {MAX_CORES}"),
                self.cores,
            ));
        }
        check_non_negative("request_us", self.request_us)?;
        check_non_negative("device_io_us", self.device_io_us)?;
        for (field, rate) in [
            ("network_mb_s", self.network_mb_s),
            ("checksum_mb_s", self.checksum_mb_s),
            ("copy_mb_s", self.copy_mb_s),
            ("memory_mb_s", self.memory_mb_s),
        ] {
            // Infinite rates are the model switched off: a byte costs nothing.
            if rate.is_nan() || rate <= 0.0 {
                return Err(SpecError::bad(field, "a positive number", rate));
            }
        }
        Ok(())
    }

    /// CPU nanoseconds of `work` on one core.
    pub fn cpu_ns(&self, work: &Work) -> f64 {
        let per_byte = |bytes: u64, mb_s: f64| {
            if bytes == 0 || mb_s.is_infinite() {
                0.0
            } else {
                bytes as f64 * ns_per_byte(mb_s)
            }
        };
        work.requests as f64 * self.request_us * NS_PER_US
            + work.device_ios as f64 * self.device_io_us * NS_PER_US
            + per_byte(work.network_bytes, self.network_mb_s)
            + per_byte(work.checksum_bytes, self.checksum_mb_s)
            + per_byte(work.copy_bytes, self.copy_mb_s)
    }

    /// Nanoseconds of `work`'s memory traffic at the machine's bandwidth.
    pub fn memory_ns(&self, work: &Work) -> f64 {
        let bytes = work.memory_bytes();
        if bytes == 0 || self.memory_mb_s.is_infinite() {
            0.0
        } else {
            bytes as f64 * ns_per_byte(self.memory_mb_s)
        }
    }
}

impl fmt::Display for ServerParams {
    /// The canonical spec: the preset and the fields that differ from it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = ServerParams::preset(self.model).unwrap_or_else(ServerParams::off);
        let mut overrides = Vec::new();
        if self.cores != base.cores {
            overrides.push(format!("cores={}", self.cores));
        }
        for (key, value, default) in [
            ("request_us", self.request_us, base.request_us),
            ("device_io_us", self.device_io_us, base.device_io_us),
            ("network_mb_s", self.network_mb_s, base.network_mb_s),
            ("checksum_mb_s", self.checksum_mb_s, base.checksum_mb_s),
            ("copy_mb_s", self.copy_mb_s, base.copy_mb_s),
            ("memory_mb_s", self.memory_mb_s, base.memory_mb_s),
        ] {
            if value != default {
                overrides.push(format!("{key}={value}"));
            }
        }
        if overrides.is_empty() {
            write!(f, "{}", self.model)
        } else {
            write!(f, "{}:{}", self.model, overrides.join(","))
        }
    }
}

/// A first-come-first-served queue of `servers` identical servers: each job takes the one
/// that falls idle first. Jobs must arrive in nondecreasing time.
#[derive(Clone, Debug)]
pub struct FcfsQueue {
    idle_at: Vec<Nanos>,
    busy_ns: u128,
}

impl FcfsQueue {
    /// `servers` servers (at least one), idle at time 0.
    pub fn new(servers: u32) -> FcfsQueue {
        FcfsQueue {
            idle_at: vec![0; servers.max(1) as usize],
            busy_ns: 0,
        }
    }

    /// A job arriving at `at` that needs `service` ns: when it is done.
    pub fn serve(&mut self, at: Nanos, service: Nanos) -> Nanos {
        let (i, idle) = self
            .idle_at
            .iter()
            .enumerate()
            .min_by_key(|&(i, &t)| (t, i))
            .map(|(i, &t)| (i, t))
            .expect("at least one server");
        let done = at.max(idle).saturating_add(service);
        self.idle_at[i] = done;
        self.busy_ns += u128::from(service);
        done
    }

    /// Service time given so far, all servers together.
    pub fn busy_ns(&self) -> u128 {
        self.busy_ns
    }
}

/// The server: memory bandwidth then CPU cores.
#[derive(Clone, Debug)]
pub struct Server {
    params: ServerParams,
    memory: FcfsQueue,
    cpu: FcfsQueue,
}

impl Server {
    /// An idle server.
    pub fn new(params: ServerParams) -> Server {
        Server {
            memory: FcfsQueue::new(1),
            cpu: FcfsQueue::new(params.cores),
            params,
        }
    }

    /// Its parameters.
    pub fn params(&self) -> &ServerParams {
        &self.params
    }

    /// `work` arriving at `at` (nondecreasing from call to call): when the server is done
    /// with it. With the model off, `at`.
    pub fn serve(&mut self, at: Nanos, work: &Work) -> Nanos {
        let memory_ns = round_ns(self.params.memory_ns(work));
        let cpu_ns = round_ns(self.params.cpu_ns(work));
        let after_memory = if memory_ns == 0 {
            at
        } else {
            self.memory.serve(at, memory_ns)
        };
        if cpu_ns == 0 {
            after_memory
        } else {
            self.cpu.serve(after_memory, cpu_ns)
        }
    }

    /// CPU time given so far, all cores together (ns).
    pub fn cpu_busy_ns(&self) -> u128 {
        self.cpu.busy_ns()
    }

    /// Memory-bus time given so far (ns).
    pub fn memory_busy_ns(&self) -> u128 {
        self.memory.busy_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_print_and_take_overrides() {
        for name in ["off", "sun7410", "xeon-2s"] {
            let p = ServerParams::parse(name).unwrap();
            assert_eq!(p.to_string(), name);
            assert_eq!(ServerParams::parse(&p.to_string()).unwrap(), p);
        }
        let p = ServerParams::parse("xeon-2s:cores=16,request_us=5").unwrap();
        assert_eq!((p.cores, p.request_us), (16, 5.0));
        assert_eq!(p.to_string(), "xeon-2s:cores=16,request_us=5");
        assert_eq!(ServerParams::parse(&p.to_string()).unwrap(), p);
    }

    #[test]
    fn bad_specs_name_the_field() {
        let err = |t: &str| ServerParams::parse(t).unwrap_err().to_string();
        assert!(err("xeon").contains("server"), "{}", err("xeon"));
        assert!(err("xeon-2s:cores=0").contains("cores"));
        assert!(err("xeon-2s:copy_mb_s=-1").contains("copy_mb_s"));
        assert!(err("xeon-2s:colour=red").contains("colour"));
        assert!(err("xeon-2s:cores").contains("KEY=VALUE"));
        assert!(err("").contains("server"));
    }

    #[test]
    fn off_costs_nothing() {
        let mut s = Server::new(ServerParams::off());
        let work = Work {
            requests: 1,
            device_ios: 1,
            network_bytes: 4096,
            checksum_bytes: 16384,
            copy_bytes: 4096,
            dma_bytes: 16384,
        };
        assert_eq!(s.serve(1_000, &work), 1_000);
        assert_eq!(s.cpu_busy_ns() + s.memory_busy_ns(), 0);
    }

    #[test]
    fn a_request_costs_its_cpu_and_its_memory_traffic() {
        let p = ServerParams {
            model: "off",
            cores: 2,
            request_us: 10.0,
            device_io_us: 3.0,
            network_mb_s: 1_000.0,
            checksum_mb_s: 2_000.0,
            copy_mb_s: 4_000.0,
            memory_mb_s: 10_000.0,
        };
        let work = Work {
            requests: 1,
            device_ios: 1,
            network_bytes: 1_000,
            checksum_bytes: 2_000,
            copy_bytes: 4_000,
            dma_bytes: 500,
        };
        // 10 + 3 + 1 + 1 + 1 us of CPU; 500 + 2,000 + 8,000 + 3,000 bytes of traffic.
        assert_eq!(p.cpu_ns(&work), 16_000.0);
        assert_eq!(work.memory_bytes(), 13_500);
        assert_eq!(p.memory_ns(&work), 1_350.0);
        let mut s = Server::new(p);
        assert_eq!(s.serve(0, &work), 17_350);
        // A second at once shares the bus (waits 1,350 ns for it) but takes the idle core.
        assert_eq!(s.serve(0, &work), 2_700 + 16_000);
    }
}
