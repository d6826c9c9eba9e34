//! The report of a real (small, demo) pool, for the tests that check the CLI reads only
//! what a report has.

use larch_engine::{DemoSizes, Pool, PoolReport, create_demo};

/// The report of a fresh demo pool (a 4 MiB volume and cache device), opened in a
/// temporary directory for the test `name` and closed again.
pub fn demo_report(name: &str) -> PoolReport {
    let dir = std::env::temp_dir().join(format!("larch-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    create_demo(&dir, DemoSizes::TINY).expect("a demo pool");
    let pool = Pool::open(&dir, true).expect("the demo pool opens");
    let report = pool.report();
    pool.close().expect("the demo pool closes");
    drop(pool);
    std::fs::remove_dir_all(&dir).expect("the demo pool's directory is removed");
    report
}
