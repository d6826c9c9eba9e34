//! Flash devices (one model, three presets) and RAM.

use super::spec::{check_non_negative, check_positive};
use super::{
    Device, DeviceStats, IoKind, MIN_PIECE_BYTES, NS_PER_US, Nanos, SpecError, format_capacity,
    ns_per_byte, round_ns,
};

/// Most channels a flash model may have; more is a typing error, and the model keeps one
/// queue per channel.
pub(crate) const MAX_CHANNELS: u32 = 1024;

/// The parameters of a flash device. The default is a generic SATA data-centre SSD
/// ([`SsdParams::sata`]); [`SsdParams::readzilla`] and [`SsdParams::nvme`] describe the seed
/// systems' cache devices.
///
/// Bandwidths are the whole device's; each channel gets `1 / channels` of them, so a request
/// on one channel of `len` bytes takes `read_us + len * channels / read bandwidth`.
#[derive(Clone, Debug, PartialEq)]
pub struct SsdParams {
    /// Bytes the device holds.
    pub capacity_bytes: u64,
    /// Independent channels, each a FIFO queue (1 to 1024).
    pub channels: u32,
    /// Fixed cost of a read on its channel (command, flash array read), µs.
    pub read_us: f64,
    /// Fixed cost of a write on its channel, µs.
    pub write_us: f64,
    /// Sequential read bandwidth of the whole device, 10^6 bytes per second.
    pub read_mb_s: f64,
    /// Sequential write bandwidth of the whole device, 10^6 bytes per second.
    pub write_mb_s: f64,
    /// A request longer than this is cut into pieces of this size, each on the channel that
    /// falls idle first, as a controller stripes pages across its channels; 0 never cuts,
    /// and otherwise at least 512.
    pub stripe_bytes: u64,
}

impl Default for SsdParams {
    fn default() -> SsdParams {
        SsdParams::sata()
    }
}

impl SsdParams {
    /// A typical SATA data-centre SSD of the late 2010s: 480 GB, about 500 MB/s each way (the
    /// SATA 6 Gb/s link), 8 channels, 25 µs + 4K at 65 MB/s per channel = 88 µs for a 4K read
    /// at queue depth 1 and 8 / 88 µs = 91,000 4K reads/s at depth.
    pub fn sata() -> SsdParams {
        SsdParams {
            capacity_bytes: 480_000_000_000,
            channels: 8,
            read_us: 25.0,
            write_us: 20.0,
            read_mb_s: 520.0,
            write_mb_s: 480.0,
            stripe_bytes: 16 << 10,
        }
    }

    /// Seed 000's "Readzilla", the 100 GB read-optimised SATA SSD of the Sun Storage 7410
    /// (2009). The seed gives about 3,100 8K random reads/s per device and L2ARC reads
    /// returning from about 300 µs. One channel at 280 µs + 8K at 200 MB/s makes an 8K read
    /// take 320.96 µs at any depth: 1 / 320.96 µs = 3,116 reads/s. Writes are assumed at
    /// 60 MB/s sequential after 250 µs, typical of the era's MLC read-optimised drives (their
    /// writes were several times slower than their reads), and they share the one channel
    /// with reads, as L2ARC feed writes did.
    pub fn readzilla() -> SsdParams {
        SsdParams {
            capacity_bytes: 100_000_000_000,
            channels: 1,
            read_us: 280.0,
            write_us: 250.0,
            read_mb_s: 200.0,
            write_mb_s: 60.0,
            stripe_bytes: 0,
        }
    }

    /// Seed 002's "enterprise-grade dual port PCIe Gen3" 1.6 TB NVMe drive (2019). The talk
    /// names no part; the figures are typical of that class's datasheets: about 3 GB/s
    /// sequential read, about 1.8 GB/s sequential write, several hundred thousand 4K random
    /// reads/s, a 4K read at queue depth 1 under 100 µs. 32 channels at 45 µs + 4K at
    /// 100 MB/s per channel make a 4K read 85.96 µs and 32 / 85.96 µs = 372,000 4K reads/s
    /// at depth.
    pub fn nvme() -> SsdParams {
        SsdParams {
            capacity_bytes: 1_600_000_000_000,
            channels: 32,
            read_us: 45.0,
            write_us: 20.0,
            read_mb_s: 3200.0,
            write_mb_s: 1800.0,
            stripe_bytes: 32 << 10,
        }
    }

    /// Checks every field; the error names the first bad one and its value.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.capacity_bytes == 0 {
            return Err(SpecError::bad("capacity", "a positive size", 0));
        }
        if !(1..=MAX_CHANNELS).contains(&self.channels) {
            return Err(SpecError::bad(
                "channels",
                format!("a whole number from 1 to {MAX_CHANNELS}"),
                self.channels,
            ));
        }
        if self.stripe_bytes != 0 && self.stripe_bytes < MIN_PIECE_BYTES {
            return Err(SpecError::bad(
                "stripe",
                format!("0 (never cut) or at least {MIN_PIECE_BYTES} bytes"),
                self.stripe_bytes,
            ));
        }
        check_non_negative("read_us", self.read_us)?;
        check_non_negative("write_us", self.write_us)?;
        check_positive("read_mb_s", self.read_mb_s)?;
        check_positive("write_mb_s", self.write_mb_s)
    }

    /// The time one piece of `len` bytes holds its channel, ns.
    fn service_ns(&self, kind: IoKind, len: u64) -> f64 {
        let (fixed_us, mb_s) = match kind {
            IoKind::Read => (self.read_us, self.read_mb_s),
            IoKind::Write => (self.write_us, self.write_mb_s),
        };
        let channel_mb_s = mb_s / f64::from(self.channels);
        fixed_us * NS_PER_US + len as f64 * ns_per_byte(channel_mb_s)
    }
}

/// A flash device: `channels` independent FIFO queues. A request (or each stripe-sized piece
/// of a long one) takes the channel that falls idle first and holds it for the fixed cost of
/// its kind plus its length at the channel's bandwidth; it completes when its last piece
/// does. Flash service times carry no randomness in this model.
#[derive(Clone, Debug)]
pub struct Ssd {
    params: SsdParams,
    model: String,
    channel_free_at: Vec<Nanos>,
    stats: DeviceStats,
}

impl Ssd {
    /// A flash device with `params`, called `model` in reports (`ssd`, `readzilla`, `nvme`).
    pub fn new(model: &str, params: SsdParams) -> Result<Ssd, SpecError> {
        params.validate()?;
        Ok(Ssd {
            channel_free_at: vec![0; params.channels as usize],
            params,
            model: model.to_string(),
            stats: DeviceStats::named(model),
        })
    }

    /// Seed 000's Readzilla ([`SsdParams::readzilla`]).
    pub fn readzilla() -> Ssd {
        Ssd::new("readzilla", SsdParams::readzilla()).expect("the readzilla preset is valid")
    }

    /// Seed 002's 1.6 TB NVMe drive ([`SsdParams::nvme`]).
    pub fn nvme() -> Ssd {
        Ssd::new("nvme", SsdParams::nvme()).expect("the nvme preset is valid")
    }

    /// The device's parameters.
    pub fn params(&self) -> &SsdParams {
        &self.params
    }

    /// Serves one piece on the channel that falls idle first (the lowest-numbered on a tie)
    /// and returns its completion and service time.
    fn serve_piece(&mut self, now: Nanos, kind: IoKind, len: u64) -> (Nanos, Nanos) {
        let (channel, free_at) = self
            .channel_free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(i, free_at)| (free_at, i))
            .expect("a validated device has at least one channel");
        let service = round_ns(self.params.service_ns(kind, len));
        let done = now.max(free_at).saturating_add(service);
        self.channel_free_at[channel] = done;
        (done, service)
    }
}

impl Device for Ssd {
    fn submit(&mut self, now: Nanos, kind: IoKind, _offset: u64, len: u32) -> Nanos {
        let total = u64::from(len);
        let stripe = self.params.stripe_bytes;
        let piece_len = if stripe == 0 { total } else { stripe };
        let mut remaining = total;
        let mut done = now;
        let mut busy: Nanos = 0;
        // At least one piece, so a zero-length request still pays the fixed cost.
        loop {
            let piece = remaining.min(piece_len);
            let (piece_done, service) = self.serve_piece(now, kind, piece);
            done = done.max(piece_done);
            busy = busy.saturating_add(service);
            remaining -= piece;
            if remaining == 0 {
                break;
            }
        }
        // Busy time is reported per channel on average, so it divides by the channel count.
        let busy_per_channel = busy / u64::from(self.params.channels);
        self.stats.record(kind, len, busy_per_channel);
        done
    }

    fn capacity_bytes(&self) -> u64 {
        self.params.capacity_bytes
    }

    fn describe(&self) -> String {
        let p = &self.params;
        format!(
            "{} flash ({}): {} channel{}, read {} µs + {} MB/s, write {} µs + {} MB/s",
            format_capacity(p.capacity_bytes),
            self.model,
            p.channels,
            if p.channels == 1 { "" } else { "s" },
            p.read_us,
            p.read_mb_s,
            p.write_us,
            p.write_mb_s
        )
    }

    fn stats(&self) -> Vec<DeviceStats> {
        vec![self.stats.clone()]
    }
}

/// The parameters of [`Ram`].
#[derive(Clone, Debug, PartialEq)]
pub struct RamParams {
    /// Bytes the device holds. Default 128 GiB, seed 000's DRAM.
    pub capacity_bytes: u64,
    /// The fixed latency of every request, µs. Default 1, about the time to copy 8K.
    pub latency_us: f64,
}

impl Default for RamParams {
    fn default() -> RamParams {
        RamParams {
            capacity_bytes: 128 << 30,
            latency_us: 1.0,
        }
    }
}

impl RamParams {
    /// Checks every field; the error names the first bad one and its value.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.capacity_bytes == 0 {
            return Err(SpecError::bad("capacity", "a positive size", 0));
        }
        check_non_negative("latency_us", self.latency_us)
    }
}

/// A trivial device for tests: every request completes a fixed latency after it is
/// submitted, however many are outstanding.
#[derive(Clone, Debug)]
pub struct Ram {
    params: RamParams,
    latency_ns: Nanos,
    stats: DeviceStats,
}

impl Ram {
    /// A RAM device with `params`.
    pub fn new(params: RamParams) -> Result<Ram, SpecError> {
        params.validate()?;
        Ok(Ram {
            latency_ns: round_ns(params.latency_us * NS_PER_US),
            params,
            stats: DeviceStats::named("ram"),
        })
    }
}

impl Device for Ram {
    fn submit(&mut self, now: Nanos, kind: IoKind, _offset: u64, len: u32) -> Nanos {
        self.stats.record(kind, len, 0);
        now.saturating_add(self.latency_ns)
    }

    fn capacity_bytes(&self) -> u64 {
        self.params.capacity_bytes
    }

    fn describe(&self) -> String {
        format!(
            "{} RAM, {} µs per request",
            format_capacity(self.params.capacity_bytes),
            self.params.latency_us
        )
    }

    fn stats(&self) -> Vec<DeviceStats> {
        vec![self.stats.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid() {
        for params in [SsdParams::sata(), SsdParams::readzilla(), SsdParams::nvme()] {
            params.validate().unwrap();
        }
    }

    #[test]
    fn a_long_request_is_striped_across_channels() {
        let mut nvme = Ssd::nvme();
        let one_piece = nvme.submit(0, IoKind::Read, 0, 32 << 10);
        let mut fresh = Ssd::nvme();
        // Four 32K pieces on four idle channels finish together.
        assert_eq!(fresh.submit(0, IoKind::Read, 0, 128 << 10), one_piece);
    }

    #[test]
    fn one_channel_serves_in_arrival_order() {
        let mut readzilla = Ssd::readzilla();
        let first = readzilla.submit(0, IoKind::Read, 0, 8192);
        let second = readzilla.submit(0, IoKind::Read, 0, 8192);
        assert_eq!(first, 320_960);
        assert_eq!(second, 2 * first);
        assert_eq!(readzilla.stats()[0].busy_ns, 2 * first);
    }

    #[test]
    fn ram_has_no_queue() {
        let mut ram = Ram::new(RamParams::default()).unwrap();
        assert_eq!(ram.submit(5, IoKind::Read, 0, 8192), 1005);
        assert_eq!(ram.submit(5, IoKind::Read, 0, 8192), 1005);
    }
}
