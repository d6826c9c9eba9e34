//! Group commit, measured: N threads each commit one 4 KiB record at a time, on a memory
//! device, on a memory device whose flush takes 100 µs (a fast NVMe's cache flush), and
//! on a file (real `fdatasync`, `O_DIRECT` when the file system allows it).
//!
//! `cargo run -p larch-zil --example group_commit [-- COMMITS_PER_THREAD [DIR]]`
//! (default 2000 commits per thread, the file in the system temp directory).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use larch_io::{BlockDevice, FileDevice, FileOptions, IoError, MemDevice};
use larch_zil::{LogDevice, RecordRef};

/// A memory device whose flush sleeps.
struct SlowFlush {
    inner: MemDevice,
    flush: Duration,
}

impl BlockDevice for SlowFlush {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> Result<(), IoError> {
        std::thread::sleep(self.flush);
        Ok(())
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
}

const RECORD_BYTES: usize = 4096;
const DEVICE_BYTES: u64 = 256 << 20;

fn run<D: BlockDevice + 'static>(name: &str, dev: D, threads: u64, commits: u64) {
    let log = Arc::new(LogDevice::create(dev, 0x9001, 0xd1).expect("create"));
    let before = log.stats();
    let start = Arc::new(Barrier::new(threads as usize + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (log, start) = (log.clone(), start.clone());
            std::thread::spawn(move || {
                let data = vec![t as u8; RECORD_BYTES];
                start.wait();
                for i in 0..commits {
                    let txg = 1 + i / 500;
                    let record = RecordRef {
                        txg,
                        volume_id: t,
                        offset_bytes: i * RECORD_BYTES as u64,
                        data: &data,
                    };
                    loop {
                        match log.commit(&[record]) {
                            Ok(_) => break,
                            // The ring is full: commit the older TXGs, as the engine would.
                            Err(larch_zil::LogError::Full { .. }) => {
                                log.txg_committed(txg - 1).expect("txg_committed");
                                std::thread::yield_now();
                            }
                            Err(err) => panic!("commit: {err}"),
                        }
                    }
                }
            })
        })
        .collect();
    start.wait();
    let started = Instant::now();
    for w in workers {
        w.join().expect("worker");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let s = log.stats();
    let total = threads * commits;
    let blocks = s.zil_commit_writer_count - before.zil_commit_writer_count;
    println!(
        "{name:<22} {threads:>3} threads  {:>9.0} commits/s  {:>7.1} MB/s  {:>5.3} block flushes/commit  \
         group avg {:>5.2} max {:>3}  commit latency avg {:>7.1} us",
        total as f64 / elapsed,
        (total * RECORD_BYTES as u64) as f64 / elapsed / 1e6,
        blocks as f64 / total as f64,
        total as f64 / blocks as f64,
        s.group_commits_max,
        s.commit_latency_us_sum as f64 / total as f64,
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let commits: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    println!(
        "{commits} commits of one {RECORD_BYTES}-byte record per thread ({} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    for threads in [1, 2, 4, 8, 16] {
        run("memory", MemDevice::new(DEVICE_BYTES), threads, commits);
    }
    for threads in [1, 2, 4, 8, 16] {
        let dev = SlowFlush {
            inner: MemDevice::new(DEVICE_BYTES),
            flush: Duration::from_micros(100),
        };
        run("memory, 100us flush", dev, threads, commits / 4);
    }
    let path = dir.join(format!("larch-zil-bench-{}.img", std::process::id()));
    for threads in [1, 2, 4, 8, 16] {
        let options = FileOptions {
            create_len_bytes: Some(DEVICE_BYTES),
            ..FileOptions::default()
        };
        let dev = FileDevice::open(&path, &options).expect("open file");
        let label = if dev.is_direct() {
            "file, O_DIRECT"
        } else {
            "file, buffered"
        };
        run(label, dev, threads, commits / 4);
    }
    let _ = std::fs::remove_file(&path);
}
