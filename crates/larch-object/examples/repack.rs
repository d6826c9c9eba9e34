//! What repacking costs and keeps: random block overwrites of a segments volume on the
//! in-process store, committed `--commit` bytes at a time, and after every `--report`
//! commits the write amplification (bytes PUT over bytes committed, repacks included) and
//! the space amplification (bytes stored over live bytes).
//!
//!     cargo run --release -p larch-object --example repack -- \
//!         [--volume-mib 128] [--block-kib 8] [--segment-kib 1024] [--commit-mib 8] \
//!         [--written-mib 8192] [--repack-percent 50] [--repack-space-percent 150] [--seed 1]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use larch_object::layout::{Format, Root};
use larch_object::{LocalState, ObjectVolume, Options};
use object_store::ObjectStore;
use object_store::memory::InMemory;

fn arg(args: &BTreeMap<String, u64>, name: &str, default: u64) -> u64 {
    args.get(name).copied().unwrap_or(default)
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut args = BTreeMap::new();
    for pair in raw.chunks(2) {
        let [name, value] = pair else {
            panic!("arguments come in pairs: --name value");
        };
        let value: u64 = value.parse().expect("a number");
        args.insert(name.trim_start_matches("--").to_string(), value);
    }
    let block = arg(&args, "block-kib", 8) << 10;
    let blocks = (arg(&args, "volume-mib", 128) << 20) / block;
    let per_segment = ((arg(&args, "segment-kib", 1024) << 10) / block) as u32;
    let commit_blocks = (arg(&args, "commit-mib", 8) << 20) / block;
    let total = (arg(&args, "written-mib", 8192) << 20) / block;
    let repack_percent = arg(&args, "repack-percent", 50) as u8;
    let repack_space_percent = arg(&args, "repack-space-percent", 150) as u16;
    let mut rng = arg(&args, "seed", 1);

    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut root = Root::new(1, blocks * block, block as u32, per_segment);
    root.format = Format::Segments;
    larch_object::create(&store, "v/", "mem://v", &root).unwrap();
    let vol = ObjectVolume::open(
        store,
        "v",
        "mem://v",
        "bench",
        LocalState::default(),
        Options {
            lease: Duration::from_secs(3600),
            repack_percent,
            repack_space_percent,
            ..Options::default()
        },
        Box::new(|_| Ok(())),
    )
    .unwrap();
    let data = Bytes::from(vec![0xa5u8; block as usize]);
    println!("written_mib put_over_committed stored_over_live segments repacked_mib");
    let mut written = 0;
    let mut commits = 0u64;
    while written < total {
        let batch: Vec<(u64, Bytes)> = (0..commit_blocks)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % blocks, data.clone())
            })
            .collect();
        vol.stage_blocks(batch).unwrap();
        vol.flush().unwrap();
        written += commit_blocks;
        commits += 1;
        if commits.is_multiple_of(64) || written >= total {
            let s = &vol.stats;
            let put = s.put_bytes.load(Ordering::Relaxed) as f64;
            let committed = s.committed_bytes.load(Ordering::Relaxed) as f64;
            let (stored, live, segments) = vol.segment_usage().unwrap();
            println!(
                "{} {:.3} {:.3} {} {}",
                (written * block) >> 20,
                put / committed,
                stored as f64 / live as f64,
                segments,
                s.repack_bytes.load(Ordering::Relaxed) >> 20
            );
        }
    }
}
