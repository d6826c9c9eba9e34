//! The requests a simulated workload makes: where each lands in the active data set,
//! whether it reads or writes, and (for a trace with times) when it arrives.

use std::f64::consts::TAU;

use super::config::{Pattern, Workload};
use crate::trace::{Extent, Op, TraceError, TraceReader};
use crate::workload::{SplitMix64, Zipf};

/// One request of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its first block.
    pub first_block: u64,
    /// Blocks it touches.
    pub blocks: u64,
    /// A write (else a read).
    pub write: bool,
    /// A write that covers only part of a block (read-modify-write).
    pub partial: bool,
    /// When it arrives, ms from the start, for traces with times.
    pub at_ms: Option<u64>,
}

/// A prime that scatters Zipf ranks over the data set (rank r goes to block r × P mod n,
/// a permutation whenever n is not a multiple of P), so the hottest blocks are not
/// neighbours and do not look sequential.
const SCATTER: u64 = 2_654_435_761;

/// What produces requests.
enum Source {
    Random,
    Zipf(Zipf),
    Gaussian,
    Exponential,
    Sequential(Vec<u64>),
    Scan {
        hot_blocks: u64,
        share: f64,
        next: u64,
    },
    Trace {
        reader: TraceReader,
        first_ms: Option<u64>,
    },
}

/// The workload's request generator.
pub struct Generator {
    source: Source,
    rng: SplitMix64,
    pattern: Pattern,
    ads_blocks: u64,
    volume_blocks: u64,
    block_bytes: u64,
    io_bytes: u64,
    read_fraction: f64,
}

impl Generator {
    /// A generator for `workload` over a volume of `volume_bytes` in blocks of
    /// `block_bytes`, with `clients` closed-loop clients (sequential streams are per
    /// client), seeded with `seed`.
    pub fn new(
        workload: &Workload,
        volume_bytes: u64,
        block_bytes: u32,
        clients: u32,
        seed: u64,
    ) -> Result<Generator, TraceError> {
        let bs = u64::from(block_bytes);
        let ads_blocks = (workload.ads_bytes / bs).max(1);
        let source = match &workload.pattern {
            Pattern::Uniform => Source::Random,
            Pattern::Zipf { theta } => Source::Zipf(Zipf::new(ads_blocks, *theta)),
            Pattern::Gaussian { .. } => Source::Gaussian,
            Pattern::Exponential { .. } => Source::Exponential,
            Pattern::Sequential => {
                let clients = u64::from(clients.max(1));
                Source::Sequential((0..clients).map(|c| c * ads_blocks / clients).collect())
            }
            Pattern::Scan {
                hot_bytes,
                scan_share,
            } => Source::Scan {
                hot_blocks: (hot_bytes / bs).clamp(1, ads_blocks - 1),
                share: *scan_share,
                next: hot_bytes / bs,
            },
            Pattern::Trace { path, format } => Source::Trace {
                reader: TraceReader::open(path, *format)?,
                first_ms: None,
            },
        };
        Ok(Generator {
            source,
            rng: SplitMix64::new(seed ^ 0x776f_726b_6c6f_6164),
            pattern: workload.pattern.clone(),
            ads_blocks,
            volume_blocks: (volume_bytes / bs).max(1),
            block_bytes: bs,
            io_bytes: u64::from(workload.io_bytes),
            read_fraction: workload.read_fraction,
        })
    }

    /// Blocks one request touches (at least one).
    fn io_blocks(&self) -> u64 {
        self.io_bytes.div_ceil(self.block_bytes).max(1)
    }

    /// A block in [0, n) from the pattern's distribution.
    fn position(&mut self, n: u64) -> u64 {
        let rng = &mut self.rng;
        match (&mut self.source, &self.pattern) {
            (Source::Zipf(z), _) => {
                let rank = z.sample(rng);
                if n.is_multiple_of(SCATTER) {
                    rank % n
                } else {
                    ((u128::from(rank) * u128::from(SCATTER)) % u128::from(n)) as u64
                }
            }
            (Source::Gaussian, Pattern::Gaussian { sigma }) => loop {
                // Box-Muller; draws outside the data set are drawn again.
                let (u1, u2) = (rng.next_f64().max(f64::MIN_POSITIVE), rng.next_f64());
                let z = (-2.0 * u1.ln()).sqrt() * (TAU * u2).cos();
                let x = n as f64 / 2.0 + z * sigma * n as f64;
                if x >= 0.0 && x < n as f64 {
                    break x as u64;
                }
            },
            (Source::Exponential, Pattern::Exponential { mean }) => loop {
                let u = rng.next_f64().max(f64::MIN_POSITIVE);
                let x = -u.ln() * mean * n as f64;
                if x < n as f64 {
                    break x as u64;
                }
            },
            _ => rng.below(n),
        }
    }

    /// The next request of client `client`, or `None` when a trace has ended.
    pub fn next(&mut self, client: u32) -> Result<Option<Request>, TraceError> {
        let count = self.io_blocks().min(self.ads_blocks);
        let write = self.rng.next_f64() >= self.read_fraction;
        let partial = write && !self.io_bytes.is_multiple_of(self.block_bytes);
        let first_block = match &mut self.source {
            Source::Sequential(next) => {
                let i = client as usize % next.len();
                let at = next[i];
                next[i] = if at + 2 * count > self.ads_blocks {
                    0
                } else {
                    at + count
                };
                at
            }
            Source::Scan {
                hot_blocks,
                share,
                next,
            } => {
                let (hot, share) = (*hot_blocks, *share);
                if self.rng.next_f64() < share {
                    let at = *next;
                    *next = if at + 2 * count > self.ads_blocks {
                        hot
                    } else {
                        at + count
                    };
                    at
                } else {
                    self.rng.below(hot.saturating_sub(count).max(1))
                }
            }
            Source::Trace { .. } => return self.next_traced(),
            _ => {
                let slots = (self.ads_blocks - count + 1).max(1);
                // Requests are aligned to their size, as a database's pages are.
                let slots_aligned = (slots / count).max(1);
                self.position(slots_aligned) * count
            }
        };
        Ok(Some(Request {
            first_block,
            blocks: count,
            write,
            partial,
            at_ms: None,
        }))
    }

    fn next_traced(&mut self) -> Result<Option<Request>, TraceError> {
        let Source::Trace { reader, first_ms } = &mut self.source else {
            return Ok(None);
        };
        let Some(record) = reader.next().transpose()? else {
            return Ok(None);
        };
        let (first_byte, len) = match record.extent {
            Extent::Bytes {
                offset_bytes,
                length_bytes,
            } => (offset_bytes, length_bytes.max(1)),
            Extent::Object { id, size_bytes } => (
                id.saturating_mul(self.block_bytes),
                size_bytes.map_or(self.block_bytes, u64::from),
            ),
        };
        // A trace's volumes and addresses fold into the simulated volume.
        let blocks = len.div_ceil(self.block_bytes).clamp(1, self.volume_blocks);
        let first_block = (first_byte / self.block_bytes + record.volume.wrapping_mul(SCATTER))
            % (self.volume_blocks - blocks + 1);
        let write = record.op == Op::Write;
        let partial = write && (first_byte % self.block_bytes != 0 || len % self.block_bytes != 0);
        let at_ms = record.time_ms.map(|t| {
            let first = *first_ms.get_or_insert(t);
            t.saturating_sub(first)
        });
        Ok(Some(Request {
            first_block,
            blocks,
            write,
            partial,
            at_ms,
        }))
    }

    /// A uniform draw in [0, 1), for arrival times.
    pub fn uniform(&mut self) -> f64 {
        self.rng.next_f64()
    }
}
