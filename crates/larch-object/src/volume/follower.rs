//! Read-only followers: a node that serves a segments volume another node writes.
//!
//! A follower takes no lease and writes nothing to the store: it reads the root and the
//! map as an open does, serves reads from them, and polls the root every
//! `Options::poll`. When the root names a newer commit, it reads the block-map pages that
//! changed, swaps them into its map, and tells its watcher which blocks changed pointers
//! (the engine drops their cached copies, in the ARC and on the cache devices, and makes
//! the drop durable) before it records the commit as seen. So it serves a commit's bytes
//! within the poll interval of the commit landing, and never a cached copy of a block a
//! commit it has seen replaced.
//!
//! The writer deletes a segment once no pointer of its own map names it, which may be
//! before a follower followed that commit: a follower that meets a segment gone follows
//! the root at once and reads the block where the new map says (`fetch_runs_segments`).
//! The same holds for map pages: a follow that finds a page gone starts over from the root.
//! Nothing a follower caches can be newer than the store, and a restart distrusts every
//! cached copy of a block whose pointer is newer than the last commit it recorded.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use object_store::ObjectStore;

use super::block_map::Count;
use super::pages::Page;
use super::{
    CommitWatcher, LocalState, ObjectVolume, Opening, Options, ReadLog, StateSink, apply_log,
    load_map, open_pages, prepare, read_logs, read_root, refuse_root, spawn_ticker, tree,
};
use crate::layout::{self, Format, PageRef};

/// What one look at the root found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Followed {
    /// The commit the follower serves now.
    pub commit_seq: u64,
    /// Blocks whose pointers that look changed.
    pub changed_blocks: u64,
}

impl ObjectVolume {
    /// Opens the segments volume under `prefix` as a read-only follower for node `node`
    /// (see the module comment): no lease is taken, nothing is written to the store, and
    /// writes are refused (`PermissionDenied`). `local` is what this node recorded about
    /// the volume last time: cached copies of blocks whose pointers are newer than its
    /// `seen_seq` are stale ([`ObjectVolume::cached_copy_stale`]).
    pub fn open_follower(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        display: &str,
        node: &str,
        local: LocalState,
        options: Options,
        sink: StateSink,
    ) -> io::Result<Arc<ObjectVolume>> {
        let (runtime, prefix) = prepare(options, prefix, display)?;
        let handle = runtime.handle().clone();
        let Some((root, etag)) = read_root(&handle, &store, &prefix, display)? else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{display}: no larch volume there (no {}): a follower follows a volume \
                     another node writes",
                    layout::ROOT_NAME
                ),
            ));
        };
        if root.format != Format::Segments {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{display}: the volume has the {} layout; read-only followers need the \
                     segments layout (docs/object-store.md says how to move a volume to it)",
                    root.format.name()
                ),
            ));
        }
        refuse_root(&root, &local, options, display, true)?;
        let local = local.for_volume(&root);
        let (stats, pages) = open_pages(&handle, &store, &prefix, display, options);
        let (map, tree) = load_map(
            &handle,
            &store,
            &prefix,
            display,
            &root,
            &pages,
            Count::Never,
        )?;
        let seen = local.seen_seq;
        let volume = ObjectVolume::assemble(Opening {
            store,
            prefix,
            display,
            runtime,
            node,
            options,
            sink,
            map,
            tree,
            pages,
            stats,
            token: 0,
            lease_until: Instant::now(),
            // Copies made before this open are trusted only for blocks no commit after
            // the last one this node followed has changed.
            stale_after: seen,
            discard_log: false,
            local,
            root,
            etag,
            follower: true,
        });
        spawn_poller(&volume);
        Ok(volume)
    }

    /// Whether this node follows the volume read-only.
    pub fn is_follower(&self) -> bool {
        self.follower
    }

    /// Calls `watcher` with the blocks every followed commit changes from now on (the
    /// first call wins).
    pub fn watch_commits(&self, watcher: CommitWatcher) {
        let _ = self.commit_watcher.set(watcher);
    }

    /// Looks at the root once and follows it when it names a newer commit: the changed
    /// block-map pages read and swapped in, the watcher told of the changed blocks, and
    /// then the commit recorded as seen. Followers only; the poller calls it every
    /// `Options::poll`, and a read that met a segment gone calls it at once.
    pub fn follow(&self) -> io::Result<Followed> {
        if !self.follower {
            return Err(io::Error::other(format!(
                "{}: only a follower follows the root",
                self.display
            )));
        }
        // One follow at a time (the commit lock, which a follower never commits under).
        let _one = self.next_seq.lock().expect("next_seq lock");
        for _ in 0..4 {
            if let Some(done) = self.follow_once()? {
                return Ok(done);
            }
        }
        Err(io::Error::other(format!(
            "{}: the writer kept committing past this follower's reads of its map",
            self.display
        )))
    }

    /// One attempt of [`ObjectVolume::follow`]; `None`: a page the root named was gone
    /// (the writer committed again meanwhile), and the root is read again.
    fn follow_once(&self) -> io::Result<Option<Followed>> {
        let Some((root, etag)) = read_root(&self.handle, &self.store, &self.prefix, &self.display)?
        else {
            return Err(self.fence(format!(
                "{}: the volume's root is gone: this follower stops serving it",
                self.display
            )));
        };
        let known = self.state.lock().expect("state lock").root.clone();
        // A larger size is the writer's grow: followed (this node serves the size it
        // opened with until it opens the volume again).
        if root.volume != known.volume
            || root.format != known.format
            || root.block_bytes != known.block_bytes
            || root.size_bytes < known.size_bytes
        {
            return Err(self.fence(format!(
                "{}: the root now describes another volume (id {:#x}, {} bytes in {}-byte \
                 blocks, {} layout): this follower stops serving it",
                self.display,
                root.volume,
                root.size_bytes,
                root.block_bytes,
                root.format.name()
            )));
        }
        // Not newer (or an older root read from a lagging replica): nothing to follow.
        if root.commit_seq <= known.commit_seq {
            return Ok(Some(Followed {
                commit_seq: known.commit_seq,
                changed_blocks: 0,
            }));
        }
        // Only new map logs after the ones it applied (no checkpoint since): those are
        // read and applied. Otherwise the tree's pages whose refs changed are read, its
        // block-map pages swapped in (a checkpoint rewrote every page a log had changed),
        // then every log the root names applied.
        let logs_only = root.pages == known.pages
            && root.levels == known.levels
            && root.logs.starts_with(&known.logs);
        let (tree, wanted, new_logs, known_tree) = if logs_only {
            (None, Vec::new(), &root.logs[known.logs.len()..], None)
        } else {
            // Only follows change the tree, one at a time (the caller holds the commit
            // lock): the copy taken now is the tree of `known`.
            let known_tree = self.state.lock().expect("state lock").tree.clone();
            let read = tree::read_tree(
                &self.handle,
                &self.store,
                &self.prefix,
                &self.display,
                &root,
                &known_tree,
            );
            let (tree, wanted, index_reads) = match read {
                Ok(read) => read,
                // Superseded and deleted since the root was read: read the root again.
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            self.stats.gets.fetch_add(index_reads, Ordering::Relaxed);
            (Some(tree), wanted, &root.logs[..], Some(known_tree))
        };
        let Some(pages) = self.read_block_pages(&wanted, known_tree.as_ref())? else {
            return Ok(None);
        };
        let logs = match read_logs(
            &self.handle,
            &self.store,
            &self.prefix,
            &self.display,
            &root,
            new_logs,
        ) {
            Ok(logs) => logs,
            // Checkpointed and deleted since the root was read: read the root again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        self.stats
            .gets
            .fetch_add(logs.len() as u64, Ordering::Relaxed);
        let changed = self.swap_in(pages, &logs, known.commit_seq)?;
        let seq = root.commit_seq;
        {
            let mut state = self.state.lock().expect("state lock");
            state.root = root;
            state.etag = etag;
            if let Some(tree) = tree {
                state.tree = tree;
            }
        }
        self.committed_seq.store(seq, Ordering::Release);
        if let Some(watcher) = self.commit_watcher.get() {
            watcher(&changed)?;
        }
        let mut local = self.local.lock().expect("local lock");
        local.seen_seq = local.seen_seq.max(seq);
        (self.sink)(&local)?;
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Followed {
            commit_seq: seq,
            changed_blocks: changed.len() as u64,
        }))
    }

    /// Swaps the pages and applies the logs a followed commit was read with (the follower
    /// served commit `since` until now); returns the blocks whose pointers changed
    /// (ascending, each once). No page is read here: the map's lock is held, and readers
    /// wait for it.
    fn swap_in(&self, pages: Vec<Swap>, logs: &[ReadLog], since: u64) -> io::Result<Vec<u64>> {
        let mut changed: Vec<u64> = Vec::new();
        let mut map = self.map.write().expect("map lock");
        let blocks = map.blocks_mut();
        for swap in pages {
            changed.extend(blocks.replace_page(&swap.new_ref, &swap.new, swap.old.as_ref(), since));
        }
        for log in logs {
            changed.extend(apply_log(blocks, log, &self.display)?);
        }
        changed.sort_unstable();
        changed.dedup();
        Ok(changed)
    }

    /// Reads the block-map pages `refs` names, and the versions of them in `known` (the
    /// tree the follower served until now) that they replace; `None` when a new one is
    /// gone (the writer superseded and deleted it since the root was read). An old one
    /// gone is `None` in its [`Swap`]: its blocks all count as changed.
    fn read_block_pages(
        &self,
        refs: &[PageRef],
        known: Option<&tree::Tree>,
    ) -> io::Result<Option<Vec<Swap>>> {
        let news = self.map_pages.pages(refs)?;
        if news.iter().any(Option::is_none) {
            return Ok(None);
        }
        let old_refs: Vec<PageRef> = refs
            .iter()
            .filter_map(|r| known.and_then(|t| t.leaf(r.page)).copied())
            .collect();
        let mut olds = self.map_pages.pages(&old_refs)?.into_iter();
        let mut old_refs = old_refs.iter().peekable();
        Ok(Some(
            refs.iter()
                .zip(news)
                .map(|(r, new)| {
                    let old = match old_refs.peek() {
                        Some(o) if o.page == r.page => {
                            old_refs.next();
                            olds.next().flatten()
                        }
                        _ => None,
                    };
                    Swap {
                        new_ref: *r,
                        new: new.expect("checked above"),
                        old,
                    }
                })
                .collect(),
        ))
    }
}

/// A block-map page a followed commit replaced: the new page, and the old one as read
/// (`None`: gone from the store, or there was none).
struct Swap {
    new_ref: PageRef,
    new: Page,
    old: Option<Page>,
}

/// Follows the root every `Options::poll` until the volume stops or goes.
fn spawn_poller(volume: &Arc<ObjectVolume>) {
    let every = volume.options.poll.max(Duration::from_millis(10));
    spawn_ticker(volume, "larch-follow", every, move |volume| {
        // A failed look is tried again at the next tick; reads go on meanwhile with the
        // map as it is.
        if let Err(err) = volume.follow() {
            volume.stats.errors.fetch_add(1, Ordering::Relaxed);
            if volume.stop_reason().is_none() {
                eprintln!("larch: {}: following the writer: {err}", volume.display);
            }
        }
        every
    });
}
