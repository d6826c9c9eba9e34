//! The requests a simulated workload makes: where each lands in the active data set,
//! whether it reads or writes, and (for a trace with times) when it arrives.

use std::collections::VecDeque;
use std::f64::consts::TAU;

use super::config::{Pattern, Workload};
use crate::device::Nanos;
use crate::replay::MAX_BLOCKS_PER_RECORD;
use crate::trace::{Extent, Op, Record, RecordError, TraceError, TraceReader};
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
    /// When it arrives, ns after the trace's first record, for traces with times.
    pub at_ns: Option<Nanos>,
    /// The trace record it comes from: its line (or number, in a binary trace); 0 for a
    /// synthetic workload.
    pub line: u64,
}

/// A prime that scatters Zipf ranks over the data set (rank r goes to block r × P mod n,
/// a permutation whenever n is not a multiple of P), so the hottest blocks are not
/// neighbours and do not look sequential.
const SCATTER: u64 = 2_654_435_761;

/// Where a trace record lands on the simulated volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placement {
    first_block: u64,
    blocks: u64,
    /// It covers part of a block: a write of it reads the block first.
    partial: bool,
}

/// Places one trace record on a simulated volume of `volume_blocks` blocks of
/// `block_bytes`.
///
/// A byte range, and a text trace's block number, is an address: it touches the blocks
/// `larch sim replay` splits it into ([`Record::blocks`]), so neighbours stay neighbours and
/// the prefetcher sees the trace's streams. Volume `v` of the trace starts `v` × [`SCATTER`]
/// blocks in, and addresses past the end fold back modulo the volume's size, block by block,
/// so a block lands at one place whichever request reads it; a request that would run over
/// the end is moved back to end there.
///
/// An object of its own size (oracleGeneral) is a name, not an address: traces carry ids
/// hashed over 64 bits, and an object of several blocks placed at its id would overlap the
/// objects of the next ids. It goes to one of the volume's slots of its own size, chosen by
/// a hash of its id and volume, so two objects share blocks only when their hashes meet,
/// about as often as their footprint is a share of the volume: close to a replay, where
/// each object is a block of its own.
fn place(record: &Record, block_bytes: u64, volume_blocks: u64) -> Result<Placement, RecordError> {
    let volume_blocks = volume_blocks.max(1);
    if let Extent::Object {
        id,
        size_bytes: Some(size),
    } = record.extent
    {
        let blocks = u64::from(size)
            .div_ceil(block_bytes)
            .clamp(1, volume_blocks);
        let slots = volume_blocks / blocks;
        let hash = SplitMix64::new(id ^ record.volume.rotate_left(32)).next_u64();
        let slot = ((u128::from(hash) * u128::from(slots)) >> 64) as u64;
        return Ok(Placement {
            first_block: slot * blocks,
            blocks,
            partial: false,
        });
    }
    let block_size =
        u32::try_from(block_bytes).expect("the generator's block size is given as a u32");
    let (first, count, _) = record.blocks(block_size, MAX_BLOCKS_PER_RECORD)?;
    let blocks = count.min(volume_blocks);
    let folded = (u128::from(record.volume) * u128::from(SCATTER) + u128::from(first))
        % u128::from(volume_blocks);
    let partial = match record.extent {
        // `Record::blocks` has checked that the range ends within 2^64 bytes.
        Extent::Bytes {
            offset_bytes,
            length_bytes,
        } => {
            !offset_bytes.is_multiple_of(block_bytes)
                || !(offset_bytes + length_bytes.max(1)).is_multiple_of(block_bytes)
        }
        Extent::Object { .. } => false,
    };
    Ok(Placement {
        first_block: (folded as u64).min(volume_blocks - blocks),
        blocks,
        partial,
    })
}

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
    /// Requests drawn before a client asks for them, oldest first (see
    /// [`Generator::draw_ahead`]).
    ahead: VecDeque<Request>,
    /// How many requests to keep drawn beyond the one handed out (0: none).
    lookahead: usize,
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
            ahead: VecDeque::new(),
            lookahead: 0,
        })
    }

    /// Keeps `depth` requests drawn ahead of the clients, so that the caller can see what
    /// comes next ([`Generator::upcoming`]) and start loading what serving it will read.
    /// Only where the draws do not depend on the client that asks (every pattern but the
    /// per-client sequential streams and traces) and nothing else draws from this
    /// generator between requests (closed-loop clients: open-loop arrivals draw their
    /// times from it): then the requests handed out, in order, are exactly those drawn
    /// without looking ahead. Returns whether it applies.
    pub fn draw_ahead(&mut self, depth: usize) -> bool {
        let independent = !matches!(self.source, Source::Sequential(_) | Source::Trace { .. });
        self.lookahead = if independent { depth } else { 0 };
        independent
    }

    /// The requests drawn ahead, next first (none unless [`Generator::draw_ahead`] applies).
    pub fn upcoming(&self) -> impl Iterator<Item = &Request> {
        self.ahead.iter()
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
        if self.lookahead == 0 {
            return self.draw(client);
        }
        while self.ahead.len() <= self.lookahead {
            match self.draw(client)? {
                Some(request) => self.ahead.push_back(request),
                None => break,
            }
        }
        Ok(self.ahead.pop_front())
    }

    fn draw(&mut self, client: u32) -> Result<Option<Request>, TraceError> {
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
            at_ns: None,
            line: 0,
        }))
    }

    fn next_traced(&mut self) -> Result<Option<Request>, TraceError> {
        let Source::Trace { reader, first_ms } = &mut self.source else {
            return Ok(None);
        };
        let Some(record) = reader.next().transpose()? else {
            return Ok(None);
        };
        let placed = place(&record, self.block_bytes, self.volume_blocks)
            .map_err(|source| reader.parse_error(source))?;
        let write = record.op == Op::Write;
        let at_ns = match record.time_ms {
            None => None,
            Some(t) => {
                // Times count from the first record's; one earlier than that is at 0, and
                // one earlier than the record before it is issued when its turn comes.
                let after_ms = t.saturating_sub(*first_ms.get_or_insert(t));
                let at_ns = after_ms.checked_mul(1_000_000).ok_or_else(|| {
                    reader.parse_error(RecordError::PastSimulatorClock {
                        time_ms: t,
                        after_ms,
                    })
                })?;
                Some(at_ns)
            }
        };
        Ok(Some(Request {
            first_block: placed.first_block,
            blocks: placed.blocks,
            write,
            partial: write && placed.partial,
            at_ns,
            line: TraceReader::position(reader),
        }))
    }

    /// A uniform draw in [0, 1), for arrival times.
    pub fn uniform(&mut self) -> f64 {
        debug_assert!(self.lookahead == 0, "a draw between requests drawn ahead");
        self.rng.next_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn bytes(volume: u64, offset_bytes: u64, length_bytes: u64) -> Record {
        Record {
            time_ms: None,
            volume,
            op: Op::Read,
            extent: Extent::Bytes {
                offset_bytes,
                length_bytes,
            },
        }
    }

    fn object(id: u64, size_bytes: u32) -> Record {
        Record {
            time_ms: Some(0),
            volume: 0,
            op: Op::Read,
            extent: Extent::Object {
                id,
                size_bytes: Some(size_bytes),
            },
        }
    }

    #[test]
    fn a_request_across_a_block_boundary_reads_both_blocks() {
        // 8K blocks: 6K..10K is the end of block 0 and the start of block 1.
        let p = place(&bytes(0, 6 << 10, 4 << 10), 8192, 1 << 20).unwrap();
        assert_eq!((p.first_block, p.blocks, p.partial), (0, 2, true));
        let p = place(&bytes(0, 8192, 16384), 8192, 1 << 20).unwrap();
        assert_eq!((p.first_block, p.blocks, p.partial), (1, 2, false));
    }

    #[test]
    fn a_block_lands_in_one_place_whatever_reads_it() {
        // Volume 3 starts past the end of a 1000-block volume and folds; block 10 of it is
        // the same block when read alone and as the first of three.
        let one = place(&bytes(3, 10 * 8192, 8192), 8192, 1000).unwrap();
        let three = place(&bytes(3, 10 * 8192, 3 * 8192), 8192, 1000).unwrap();
        assert_eq!(one.first_block, three.first_block);
        assert_eq!(three.blocks, 3);
        // Past the end, a request is moved back to end there.
        let last = place(&bytes(0, 999 * 8192, 2 * 8192), 8192, 1000).unwrap();
        assert_eq!((last.first_block, last.blocks), (998, 2));
    }

    #[test]
    fn hashed_object_ids_each_get_their_own_place() {
        // oracleGeneral ids are 64-bit hashes: 1000 of them, each one block, over a million
        // blocks, land in nearly 1000 places (a meeting of two hashes is allowed).
        let mut ids = SplitMix64::new(9);
        let firsts: HashSet<u64> = (0..1000)
            .map(|_| place(&object(ids.next_u64(), 8192), 8192, 1 << 20).unwrap())
            .inspect(|p| assert_eq!(p.blocks, 1))
            .map(|p| p.first_block)
            .collect();
        assert!(firsts.len() >= 995, "{} places", firsts.len());
    }

    #[test]
    fn objects_larger_than_a_block_do_not_overlap_their_neighbours() {
        // Consecutive ids of 32K objects on 8K blocks: four blocks each, none shared.
        let mut owner = std::collections::HashMap::new();
        for id in 0..200u64 {
            let p = place(&object(id, 32 << 10), 8192, 1 << 20).unwrap();
            assert_eq!(p.blocks, 4);
            assert!(p.first_block + p.blocks <= 1 << 20);
            for b in p.first_block..p.first_block + p.blocks {
                if let Some(other) = owner.insert(b, id) {
                    panic!("objects {other} and {id} share block {b}");
                }
            }
        }
    }

    /// What drawing ahead may not change: the requests handed out, in order, whichever
    /// client asks; and where the draws depend on the client, it does not apply.
    #[test]
    fn requests_drawn_ahead_are_the_requests_drawn_when_asked() {
        let patterns = [
            Pattern::Uniform,
            Pattern::Zipf { theta: 0.9 },
            Pattern::Gaussian { sigma: 0.1 },
            Pattern::Exponential { mean: 0.2 },
            Pattern::Scan {
                hot_bytes: 64 << 20,
                scan_share: 0.3,
            },
        ];
        for pattern in patterns {
            let workload = Workload {
                pattern: pattern.clone(),
                ads_bytes: 1 << 30,
                io_bytes: 24 << 10,
                read_fraction: 0.7,
                volumes: 1,
            };
            let new = || Generator::new(&workload, 2 << 30, 8192, 20, 37).unwrap();
            let (mut plain, mut ahead) = (new(), new());
            assert!(ahead.draw_ahead(2), "{pattern:?}");
            for i in 0..10_000u32 {
                let client = i.wrapping_mul(7) % 20;
                let upcoming: Vec<Request> = ahead.upcoming().copied().collect();
                let (p, a) = (plain.next(client).unwrap(), ahead.next(client).unwrap());
                assert_eq!(p, a, "{pattern:?}, request {i}");
                if i > 0 {
                    // What was shown as next is what came.
                    assert_eq!(upcoming.first().copied(), a, "{pattern:?}, request {i}");
                }
                assert_eq!(ahead.upcoming().count(), 2);
            }
        }
        let sequential = Workload {
            pattern: Pattern::Sequential,
            ads_bytes: 1 << 30,
            io_bytes: 8192,
            read_fraction: 1.0,
            volumes: 1,
        };
        let mut g = Generator::new(&sequential, 1 << 30, 8192, 4, 37).unwrap();
        assert!(!g.draw_ahead(2));
        g.next(3).unwrap();
        assert_eq!(g.upcoming().count(), 0);
    }

    #[test]
    fn absurd_records_are_errors_not_panics() {
        assert!(place(&bytes(0, u64::MAX - 10, 100), 8192, 1 << 20).is_err());
        assert!(place(&bytes(0, 0, 1 << 50), 8192, 1 << 20).is_err());
        let p = place(&bytes(u64::MAX, u64::MAX - 8192, 8192), 8192, 1 << 20).unwrap();
        assert!(p.first_block < 1 << 20);
        let p = place(&object(u64::MAX, u32::MAX), 8192, 4).unwrap();
        assert_eq!((p.first_block, p.blocks), (0, 4));
    }
}
