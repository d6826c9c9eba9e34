//! Object-store volumes under the engine's intent log: what a replay keeps and drops after
//! another node took the volume over. The store is object_store's in-process one, the log
//! device a fault-injecting device whose unflushed writes a crash drops.

use std::path::Path;
use std::sync::{Arc, Mutex};

use larch_engine::{BackingStore, BlockBuf, Engine, LatencyModel, VolumeEntry, VolumeSpec};
use larch_io::{BlockDevice, CrashMode, FaultyDevice};
use larch_object::layout::Root;
use larch_object::{LocalState, ObjectVolume, Options};
use object_store::ObjectStore;
use object_store::memory::InMemory;

const BLOCK: u32 = 4096;
const BLOCKS: u64 = 16;
const POOL: u64 = 0x0b1e_0001;
const LOG: u64 = 0x0b1e_0002;
const VOLUME: u64 = 0x0b1e_0003;
const LOG_BYTES: u64 = 1 << 20;

/// One node's view of the volume: its name and its state file.
struct Node {
    name: &'static str,
    local: Arc<Mutex<LocalState>>,
}

impl Node {
    fn new(name: &'static str) -> Node {
        Node {
            name,
            local: Arc::default(),
        }
    }

    fn open(&self, store: &Arc<dyn ObjectStore>) -> Arc<ObjectVolume> {
        let local = Arc::clone(&self.local);
        let state = *self.local.lock().unwrap();
        ObjectVolume::open(
            Arc::clone(store),
            "vols/a",
            "mem://vols/a",
            self.name,
            state,
            Options::default(),
            Box::new(move |s| {
                *local.lock().unwrap() = *s;
                Ok(())
            }),
        )
        .unwrap()
    }

    /// Writes `byte` over block `block` and commits it, without an engine; then gives the
    /// lease up.
    fn commit(&self, store: &Arc<dyn ObjectStore>, block: u64, byte: u8) {
        let vol = self.open(store);
        vol.write_at(&[byte; BLOCK as usize], block * u64::from(BLOCK))
            .unwrap();
        vol.flush().unwrap();
        vol.release().unwrap();
    }
}

/// A run of a node's engine over the volume, with `log` as its log device (formatted when
/// `create`): the open replays it.
struct Run {
    engine: Arc<Engine>,
    entry: Arc<VolumeEntry>,
    object: Arc<ObjectVolume>,
    log: Arc<FaultyDevice>,
}

impl Run {
    fn start(
        node: &Node,
        store: &Arc<dyn ObjectStore>,
        log: &Arc<FaultyDevice>,
        create: bool,
    ) -> Run {
        let engine = Engine::new(1 << 20);
        // No TXG syncs on its own: sync writes are acknowledged from the log alone.
        engine.tunables.set("zfs_txg_timeout", "600").unwrap();
        let object = node.open(store);
        let backing =
            BackingStore::on_object("mem://vols/a", Arc::clone(&object), LatencyModel::default());
        let entry = engine
            .add_volume(VolumeSpec::new(VOLUME, BLOCK), Arc::new(backing))
            .unwrap();
        engine.set_committed_txg_sink(0, Box::new(|_| Ok(())));
        engine
            .attach_log_device(Arc::clone(log) as _, Path::new("log"), POOL, LOG, create)
            .unwrap();
        // The log covers the TXGs after the one open when it was attached: once that TXG
        // (or a later one) synced, sync writes are in the log alone. (Waiting for the TXG
        // open after the attach hung when the syncer had closed the attach's TXG before
        // the test looked: nothing syncs the next one.)
        engine.sync_all().unwrap();
        Run {
            engine,
            entry,
            object,
            log: Arc::clone(log),
        }
    }

    /// A FUA write of `byte` over block `block` (acknowledged once its record is durable).
    fn fua(&self, block: u64, byte: u8) {
        let data = BlockBuf::from_vec(vec![byte; BLOCK as usize]);
        self.engine
            .write_blocks(&self.entry, &[(block, data)], true)
            .unwrap();
    }

    /// A FUA write of `byte` over block `block` that only the log holds.
    fn fua_logged(&self, block: u64, byte: u8) {
        self.fua(block, byte);
        let (dirty, _, _) = self.engine.txg_state();
        assert!(dirty > 0, "the write is on the store already");
    }

    /// Kills the run before any TXG of it commits: the log device loses what it had not
    /// flushed, and what is left of it is the next run's log (what the engine does after
    /// this moment is not a dead process's: it stops, behind the volume given up first,
    /// so nothing more reaches the store).
    fn kill(self) -> Arc<FaultyDevice> {
        self.log.crash(CrashMode::DropAll);
        let image = self.log.durable_snapshot();
        self.object.release().unwrap();
        self.engine.shutdown();
        let log = FaultyDevice::new(image.len() as u64);
        log.write_at(&image, 0).unwrap();
        log.flush().unwrap();
        Arc::new(log)
    }

    /// The bytes of block `block` as the engine reads it, if all are one byte.
    fn block_byte(&self, block: u64) -> Option<u8> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let data = runtime
            .block_on(self.engine.read_block(&self.entry, block, false))
            .expect("the block reads");
        data.iter().all(|&b| b == data[0]).then_some(data[0])
    }
}

/// A node that took a volume back from another node's commit and crashed before its own
/// first commit keeps the sync writes it acknowledged in that run. Before, the next open
/// still found the other node's commit the last one, took the whole log for older than
/// it, and dropped the run's records with the older ones (a reviewer's finding).
#[test]
fn sync_writes_of_a_run_that_took_over_survive_a_crash_before_its_first_commit() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x1234, BLOCKS * u64::from(BLOCK), BLOCK, 4);
    larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
    let (a, b) = (Node::new("node-a"), Node::new("node-b"));
    let log = Arc::new(FaultyDevice::new(LOG_BYTES));
    a.commit(&store, 2, 1);

    // Run 1 of A: a FUA write only in the log, then a crash.
    let run = Run::start(&a, &store, &log, true);
    run.fua_logged(1, 4);
    let log = run.kill();

    // B takes the volume and commits block 1 over it.
    b.commit(&store, 1, 2);

    // Run 2 of A: its replay drops run 1's record (B's commit is newer). A FUA write, and
    // a crash before any TXG of the run commits.
    let run = Run::start(&a, &store, &log, false);
    assert_eq!(
        run.block_byte(1),
        Some(2),
        "run 1's record replayed over B's commit"
    );
    run.fua_logged(0, 3);
    let log = run.kill();

    // Run 3 of A: run 2's write is there; run 1's stays dropped.
    let run = Run::start(&a, &store, &log, false);
    assert_eq!(
        run.block_byte(0),
        Some(3),
        "an acknowledged FUA write was lost"
    );
    assert_eq!(
        run.block_byte(1),
        Some(2),
        "run 1's record replayed over B's commit"
    );
    assert_eq!(run.block_byte(2), Some(1));
    run.engine.shutdown();
    run.object.release().unwrap();
}

/// Removing the log device while the syncer cannot sync the open TXG (here: stopped) is
/// refused and the log stays attached: it may hold the only copy of acknowledged sync
/// writes. Before, the removal went ahead whatever the sync's outcome (a review's
/// finding), and `larch log remove` saved the pool's configuration without the device.
#[test]
fn a_log_device_is_not_removed_while_its_txg_cannot_sync() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let root = Root::new(0x1234, BLOCKS * u64::from(BLOCK), BLOCK, 4);
    larch_object::create(&store, "vols/a/", "mem://vols/a", &root).unwrap();
    let node = Node::new("node-a");
    let log = Arc::new(FaultyDevice::new(LOG_BYTES));
    let run = Run::start(&node, &store, &log, true);
    run.fua_logged(3, 0x33);
    run.engine.shutdown();
    let refused = run.engine.detach_log();
    assert!(refused.is_err(), "{:?}", refused.map(|l| l.is_some()));
    assert!(
        run.engine.log_device().is_some(),
        "the log was taken out of use"
    );
    run.object.release().unwrap();
}
