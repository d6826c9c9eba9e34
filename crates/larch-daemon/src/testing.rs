//! A small demo pool in a temporary directory, for the tests of the modules that show a
//! pool's report.

use std::path::PathBuf;
use std::sync::Arc;

use larch_engine::{DemoSizes, Pool, create_demo};

/// An open demo pool; closed and removed with its directory when dropped.
pub struct DemoPool {
    pub dir: PathBuf,
    pub pool: Arc<Pool>,
}

impl DemoPool {
    /// A fresh demo pool (a 4 MiB volume, a 4 MiB cache device) for the test `name`.
    pub fn new(name: &str) -> DemoPool {
        let dir = std::env::temp_dir().join(format!("larch-daemon-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        create_demo(&dir, DemoSizes::TINY).expect("a demo pool");
        let pool = Pool::open(&dir, true).expect("the demo pool opens");
        DemoPool {
            dir,
            pool: Arc::new(pool),
        }
    }
}

impl Drop for DemoPool {
    fn drop(&mut self) {
        let _ = self.pool.close();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
