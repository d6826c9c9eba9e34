//! How many block reads per second the ARC policy alone decides, and what one wait for
//! memory costs on this machine: the floor under the simulator's speed (issue 37).
//!
//! The simulator's time at scale goes to the policy's lookups and list moves over headers
//! that no longer fit in the CPU's caches. This runs the same `larch_policy::Arc`, split
//! into the same 16 shards, on uniform random reads of 8 KiB blocks — seed 000's workload
//! without the devices, the clients or the event queue — with every block read given a
//! cache-device copy (as the simulator's feed gives it one), so that evicted ghosts stay
//! as `l2c_only` headers and the header slab grows to the whole data set, as it does in
//! the simulator. With `METADATA` 1, a read that misses looks up the three levels of
//! indirect blocks above its block (128 KiB, 1,024 pointers each), as the simulator's
//! metadata model does. Then it measures the machine's memory: a chase of dependent loads
//! over a buffer the size of the policy's structures, and eight such chases at once.
//!
//! ```sh
//! cargo run --release -p larch-sim --example policy_rate -- [DATA_BLOCKS [ARC_BLOCKS [READS [METADATA]]]]
//! ```
//! Defaults: seed 000 at 1/100 (5 GiB of 8 KiB blocks, an ARC of 1.12 GB, 15.6M reads),
//! metadata 0. Seed 000 at full size: `65536000 13671875 15600000 1` (about 6 GiB and 10
//! minutes, most of it filling).

use std::time::Instant;

use larch_policy::shards::{SHARDS, shard_config, shard_of};
use larch_policy::{Access, Arc, BlockKey, BufType, Outcome, Policy};
use larch_sim::SplitMix64;

const BLOCK_BYTES: u32 = 8 << 10;

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .map(|a| a.parse().expect("arguments are whole numbers"))
        .unwrap_or(default)
}

/// Reads `reads` random blocks of `data_blocks` through `shards` (with `metadata`, a miss
/// looks up its indirect blocks too); returns reads per second. Keys are drawn two ahead
/// and their lookups started early, as the simulator does (`Arc::prefetch`, then
/// `Arc::prefetch_header` a read later).
fn run(
    shards: &mut [Arc],
    data_blocks: u64,
    reads: u64,
    metadata: bool,
    rng: &mut SplitMix64,
) -> f64 {
    let mut actions = Vec::new();
    let mut draw = || BlockKey::new(1, rng.below(data_blocks));
    let (mut next, mut after) = (draw(), draw());
    let started = Instant::now();
    for i in 0..reads {
        let key = next;
        (next, after) = (after, draw());
        shards[shard_of(&next)].prefetch_header(&next);
        shards[shard_of(&after)].prefetch(&after);
        let now_ms = i / 1000;
        let arc = &mut shards[shard_of(&key)];
        let outcome = arc.access(&Access::data(key, BLOCK_BYTES, now_ms), &mut actions);
        if let Outcome::Miss { on_l2: false, .. } = outcome {
            arc.l2_written(&key, 0);
        }
        actions.clear();
        if metadata && !outcome.is_hit() {
            // Each level of indirect blocks in a volume of its own: level 3's one block,
            // then level 2's and level 1's above `key` (1,024 pointers per block).
            for level in (1..=3u32).rev() {
                let parent = BlockKey::new(1 + u64::from(level), key.block >> (10 * level));
                let access = Access {
                    buf_type: BufType::Metadata,
                    ..Access::data(parent, 128 << 10, now_ms)
                };
                shards[shard_of(&parent)].access(&access, &mut actions);
                actions.clear();
            }
        }
    }
    reads as f64 / started.elapsed().as_secs_f64()
}

/// Nanoseconds per load of `chains` dependent chases through a random cycle over `bytes`.
fn chase(bytes: usize, chains: usize, loads: usize) -> f64 {
    const LINE: usize = 8; // u64s per 64-byte line
    let lines = bytes / 64;
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = SplitMix64::new(7);
    for i in (1..lines).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut next = vec![0u64; lines * LINE];
    for i in 0..lines {
        next[order[i] * LINE] = (order[(i + 1) % lines] * LINE) as u64;
    }
    let mut at: Vec<u64> = (0..chains)
        .map(|c| (order[c * lines / chains] * LINE) as u64)
        .collect();
    let started = Instant::now();
    for _ in 0..loads / chains {
        for p in at.iter_mut() {
            *p = next[*p as usize];
        }
    }
    let ns = started.elapsed().as_nanos() as f64 / (loads / chains * chains) as f64;
    std::hint::black_box(&at);
    ns
}

fn main() {
    let data_blocks = arg(1, (5u64 << 30) / u64::from(BLOCK_BYTES));
    let arc_blocks = arg(2, 1_120_000_000 / u64::from(BLOCK_BYTES));
    let reads = arg(3, 15_600_000);
    let metadata = arg(4, 0) == 1;
    let arc_bytes = arc_blocks * u64::from(BLOCK_BYTES);
    let mut shards: Vec<Arc> = (0..SHARDS)
        .map(|_| Arc::new(shard_config(arc_bytes, arc_bytes)).expect("a valid configuration"))
        .collect();
    let mut rng = SplitMix64::new(37);
    println!(
        "{data_blocks} blocks of 8 KiB, an ARC of {arc_blocks} blocks in {SHARDS} shards, uniform random reads{}",
        if metadata {
            ", indirect blocks looked up"
        } else {
            ""
        }
    );
    // Fill: every block read once, so that every one has a header (resident, ghost or
    // l2c_only), as in the simulator's steady state.
    let fill = run(
        &mut shards,
        data_blocks,
        data_blocks * 3,
        metadata,
        &mut rng,
    );
    let headers: usize = shards.iter().map(|a| a.tracked_headers()).sum();
    println!("fill:   {fill:>12.0} reads/s ({headers} headers)");
    let rate = run(&mut shards, data_blocks, reads, metadata, &mut rng);
    println!(
        "steady: {rate:>12.0} reads/s, {:.0} ns per read",
        1e9 / rate
    );
    let bytes = (headers * (64 + 8)).next_power_of_two();
    // At most 8 GiB: at seed 000's full size the largest would be 128 GiB, beyond RAM.
    for size in [bytes / 16, bytes, bytes * 16]
        .into_iter()
        .filter(|&b| b <= 8 << 30)
    {
        let one = chase(size, 1, 10_000_000);
        let eight = chase(size, 8, 10_000_000);
        println!(
            "memory: {:>6} MiB: {one:>6.1} ns per dependent load, {eight:>5.1} ns per load with 8 chases at once",
            size >> 20
        );
    }
}
