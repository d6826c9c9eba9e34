//! Policy throughput and memory: accesses per second per core on Zipf(0.9) reads of 1M
//! blocks with a cache of 10% of them, and bytes of RAM per tracked block.
//!
//!     cargo bench -p larch-sim --bench policy_throughput [-- ACCESSES]
//!
//! The accesses are generated before the clock starts, so only the policy is timed. Memory
//! is what the policy allocated (a counting allocator) divided by the headers it tracks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use larch_policy::{Access, Arc, ArcConfig, BlockKey, Lru, Policy};
use larch_sim::{SplitMix64, Zipf};

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const BLOCKS: u64 = 1_000_000;
const BLOCK_BYTES: u32 = 4096;

fn main() {
    let accesses: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let zipf = Zipf::new(BLOCKS, 0.9);
    let mut rng = SplitMix64::new(7);
    let blocks: Vec<u64> = (0..accesses).map(|_| zipf.sample(&mut rng)).collect();
    let cache_bytes = BLOCKS / 10 * u64::from(BLOCK_BYTES);
    println!(
        "{accesses} Zipf(0.9) accesses over {BLOCKS} blocks, cache {} blocks",
        BLOCKS / 10
    );
    println!("| policy | accesses/s | hit ratio | headers | bytes/header |");
    println!("|---|---:|---:|---:|---:|");
    type Make = fn(u64) -> Box<dyn Policy>;
    let policies: [(&str, Make); 4] = [
        ("arc", |b| Box::new(Arc::new(ArcConfig::fixed(b)).unwrap())),
        ("arc-openzfs", |b| {
            Box::new(Arc::new(ArcConfig::openzfs_fixed(b)).unwrap())
        }),
        ("arc-paper", |b| {
            Box::new(Arc::new(ArcConfig::paper(b)).unwrap())
        }),
        ("lru", |b| Box::new(Lru::new(b))),
    ];
    for (name, make) in policies {
        let before = ALLOCATED.load(Ordering::Relaxed);
        let mut policy = make(cache_bytes);
        let mut actions = Vec::with_capacity(64);
        let mut hits = 0u64;
        let start = Instant::now();
        for (i, &block) in blocks.iter().enumerate() {
            // One access per millisecond of virtual time: re-reads count as frequency.
            let access = Access::data(BlockKey::new(0, block), BLOCK_BYTES, i as u64);
            if policy.access(&access, &mut actions).is_hit() {
                hits += 1;
            }
            actions.clear();
        }
        let elapsed = start.elapsed().as_secs_f64();
        policy.check_invariants();
        let allocated = ALLOCATED.load(Ordering::Relaxed) - before;
        let headers = policy.tracked_headers();
        println!(
            "| {name} | {:.2}M | {:.2}% | {headers} | {:.0} |",
            accesses as f64 / elapsed / 1e6,
            hits as f64 / accesses as f64 * 100.0,
            allocated as f64 / headers as f64,
        );
    }
    println!("header struct: {} bytes", larch_policy::HEADER_BYTES);
}
