//! The collection of garbage: what an open finds on the store that no root names (a
//! crashed or fenced run's uploads, what an earlier run superseded and did not get to
//! delete), judged key by key as the listing goes on, and the deletions a commit starts
//! in the background for what it superseded.

use std::sync::Arc;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::stream::{self, StreamExt};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{Map, ObjectStats, ObjectVolume, Tree};
use crate::layout;

impl ObjectVolume {
    /// Deletes `names` in the background (best effort: an object left behind is deleted
    /// by the next open's collection).
    pub(super) fn delete_later(&self, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        let store = Arc::clone(&self.store);
        let paths: Vec<ObjPath> = names.iter().map(|n| self.path(n)).collect();
        let stats = self.stats_handle();
        let task = self.handle.spawn(async move {
            for path in paths {
                count_delete(&stats, store.delete(&path).await);
            }
        });
        self.keep(task);
    }

    /// Deletes, in the background, every data object and map page of an earlier run (a
    /// smaller token) that the root at this open does not name: uploads of commits that
    /// never happened (a crash, a fenced node) and objects superseded but not yet deleted.
    ///
    /// Why that is safe even after this node loses the volume: every later owner has a
    /// larger token, and every later root names only what this root names or objects
    /// written since, by this token or a larger one. An object with a smaller token that
    /// this root does not name is therefore named by no root ever again. Objects of this
    /// run's token (uploads in flight) or larger (a later owner's) are never touched, and
    /// the collection stops when this run stops writing the volume.
    ///
    /// Each listed key is judged as it comes ([`is_garbage`]), against the map itself and
    /// the root's page refs, and the garbage is deleted `batch` keys at a time while the
    /// listing goes on. So the collection holds at most `batch` paths, whatever the number
    /// of objects the map names or the amount of garbage on the store. (It used to build a
    /// set of every named object's name first, some 80 to 140 bytes per object on top of
    /// the map's 16, and to gather all the garbage before deleting any.)
    pub(super) fn collect_garbage(&self, batch: usize) {
        let batch = batch.max(1);
        // The tree of map pages of the root at this open, copied: the map and index pages
        // are judged by it. A page this run supersedes later stays named here; the
        // commit that superseded it deletes it. 32 bytes a page.
        let (tree, logs) = {
            let state = self.state.lock().expect("state lock");
            (state.tree.clone(), state.root.logs.clone())
        };
        let map = Arc::clone(&self.map);
        let store = Arc::clone(&self.store);
        let prefix = self.prefix.clone();
        // Listed keys come back as the store holds them, with the prefix's characters that
        // object_store percent-encodes in encoded form (`vols/a~b/` is `vols/a%7Eb/`), so
        // they are matched against the prefix in that form. (`Location::parse` refuses
        // such prefixes; a caller of this crate may still give one.)
        let listed_prefix = match ObjPath::from(prefix.as_str()).as_ref() {
            "" => String::new(),
            dir => format!("{dir}/"),
        };
        let stats = self.stats_handle();
        let token = self.token;
        let stop = Arc::clone(&self.stop);
        let display = self.display.clone();
        let task = self.handle.spawn(async move {
            for dir in ["data", "map", "seg", "bmap", "bidx", "blog"] {
                let listing = ObjPath::from(format!("{prefix}{dir}"));
                let mut found = store.list(Some(&listing));
                let mut doomed: Vec<ObjPath> = Vec::new();
                let mut listed = 0u64;
                let mut garbage = 0u64;
                while let Some(next) = found.next().await {
                    // Nothing more to do once the run stopped: nothing is deleted after
                    // that, so the rest of the listing would be read for nothing.
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    // A listing that fails (after the client's retries, or at a key
                    // object_store cannot take for a path) ends this directory's share of
                    // the collection: what it found is still deleted, the rest waits for
                    // the next open. Said, since nothing else shows it.
                    let meta = match next {
                        Ok(meta) => meta,
                        Err(err) => {
                            stats.errors.fetch_add(1, Ordering::Relaxed);
                            eprintln!(
                                "larch: {display}: the collection of garbage stopped listing \
                                 {dir}/ after {listed} keys ({garbage} of them garbage, \
                                 deleted); any garbage after them stays on the store until \
                                 the volume's next open: {err}"
                            );
                            break;
                        }
                    };
                    listed += 1;
                    let full: &str = meta.location.as_ref();
                    let name = full.strip_prefix(listed_prefix.as_str()).unwrap_or(full);
                    if !is_garbage(name, token, &tree, &logs, &map) {
                        continue;
                    }
                    garbage += 1;
                    doomed.push(meta.location);
                    if doomed.len() >= batch {
                        delete_garbage(&store, std::mem::take(&mut doomed), &stop, &stats).await;
                    }
                }
                delete_garbage(&store, doomed, &stop, &stats).await;
            }
        });
        self.keep(task);
    }

    /// Keeps a background deletion's handle (and forgets those that finished).
    fn keep(&self, task: tokio::task::JoinHandle<()>) {
        let mut cleanups = self.cleanups.lock().expect("cleanups lock");
        cleanups.retain(|t| !t.is_finished());
        cleanups.push(task);
    }
}

/// How many garbage keys the collection at open deletes with one request (S3's
/// `DeleteObjects` takes at most 1000, object_store's S3 client sends 1000 a request) and
/// so the most paths it holds at once.
pub(super) const GC_BATCH: usize = 1000;

/// Whether `name`, a key listed under the volume's prefix (the prefix taken off), is
/// garbage to a run of token `token` whose root at open named the tree of map pages `tree`
/// and whose map is `map`: a data object, map page or index page of an earlier run (a
/// smaller token) that the root at open does not name.
///
/// A data object is judged by the map as it is now, under its read lock for just this
/// look (never across an await: commits and adopted roots take the write lock only to
/// swap entries in, without I/O, so this never waits long). The map's entries of earlier tokens are still those of
/// the root at open: this run changes an entry only to a version of its own token (a
/// commit of its own, or a root of its own it adopts). So where the entry has an earlier
/// token, comparing with it is comparing with the root at open. Where it has this run's
/// token, the object was rewritten since the open and which version the open named is no
/// longer known: every version of it is kept (the commit that rewrote it deletes the one
/// it replaced; anything else waits for the next open), so that nothing the root at open
/// named is ever deleted.
///
/// A name counts as named only in the exact form the volume writes (`data_name`,
/// `page_name`, `index_page_name`), as when the names were compared as strings: a key that parses but is
/// written otherwise (upper-case hex, other widths) is never read, and is garbage as
/// before. A key that does not parse (another volume's under this prefix, anything else
/// stored there) is never garbage.
pub(super) fn is_garbage(
    name: &str,
    token: u64,
    tree: &Tree,
    logs: &[layout::LogRef],
    map: &RwLock<Map>,
) -> bool {
    if let Some((level, page, version)) = layout::parse_index_name(name) {
        return version.token < token && !tree.names(level, page, version);
    }
    if let Some(version) = layout::parse_log_name(name) {
        // A map log of an earlier run is named while the root at open names it (a later
        // checkpoint of this run deletes it itself).
        return version.token < token && !logs.iter().any(|l| l.version == version);
    }
    if let Some(id) = layout::parse_segment_name(name) {
        // A segment of an earlier run is named while the map points into it: the map's
        // segments of earlier tokens are still the root's at open, or fewer (a commit of
        // this run emptied them, and deletes them itself).
        return id.token < token && !map.read().expect("map lock").blocks_names(id);
    }
    let Some((kind, number, version)) = layout::parse_name(name) else {
        return false;
    };
    if version.token >= token {
        return false;
    }
    let named = if kind == "map" || kind == "bmap" {
        let written = if kind == "map" {
            layout::page_name(number, version)
        } else {
            layout::block_page_name(number, version)
        };
        tree.names(0, number, version) && written == name
    } else {
        let lock = map.read().expect("map lock");
        let Map::Objects(objects) = &*lock else {
            // A data object under a segments volume's prefix: nothing of this volume.
            return false;
        };
        let now = objects.get(number);
        if now.token >= token {
            return false;
        }
        now.exists() && now == version && layout::data_name(number, version) == name
    };
    !named
}

/// Deletes `paths` (garbage the collection found) with the store's bulk delete, counting
/// each object deleted and each failure. Failures are left for the next open. Once the run has
/// stopped, no path not yet handed to the store is.
async fn delete_garbage(
    store: &Arc<dyn ObjectStore>,
    paths: Vec<ObjPath>,
    stop: &Arc<AtomicBool>,
    stats: &ObjectStats,
) {
    if paths.is_empty() || stop.load(Ordering::Acquire) {
        return;
    }
    // Checked per path as the store takes them: a store that deletes one key a request
    // (object_store's in-process one, S3 with bulk deletes off) stops within the batch.
    let stopped = Arc::clone(stop);
    let feed = stream::iter(paths)
        .take_while(move |_| std::future::ready(!stopped.load(Ordering::Acquire)))
        .map(Ok)
        .boxed();
    let mut done = store.delete_stream(feed);
    while let Some(deleted) = done.next().await {
        if count_delete(stats, deleted.map(drop)) {
            stats.garbage_deleted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Counts how one delete ended; true when it deleted the object. An object already gone
/// (another node's collection took it) is neither a delete nor an error.
fn count_delete(stats: &ObjectStats, result: object_store::Result<()>) -> bool {
    match result {
        Ok(()) => {
            stats.deletes.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(object_store::Error::NotFound { .. }) => false,
        Err(_) => {
            stats.delete_errors.fetch_add(1, Ordering::Relaxed);
            stats.errors.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}
