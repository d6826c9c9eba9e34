//! Arbitrary bytes as a trace file in every format: the readers must return records or
//! errors, never panic, and replay whatever they accept.
#![no_main]

use std::io::Write;

use larch_policy::Lru;
use larch_sim::{Format, ReplayConfig, Replayer, TraceReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("larch-fuzz-trace-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("input");
    let mut file = std::fs::File::create(&path).expect("temp file");
    file.write_all(data).expect("write temp file");
    drop(file);
    for (format, _) in Format::ALL {
        let Ok(reader) = TraceReader::open(&path, Some(format)) else {
            continue;
        };
        let mut lru = Lru::new(1 << 16);
        let cfg = ReplayConfig {
            max_blocks_per_record: 1024,
            ..ReplayConfig::new(4096)
        };
        let mut replayer = Replayer::new(&mut lru, cfg);
        for record in reader.take(10_000) {
            match record {
                Ok(record) => {
                    let _ = replayer.record(&record);
                }
                Err(larch_sim::TraceError::Io { .. }) => break,
                Err(_) => {}
            }
        }
    }
    let _ = TraceReader::open(&path, None);
});
