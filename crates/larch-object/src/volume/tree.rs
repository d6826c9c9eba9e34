//! The tree of a volume's map pages: the refs of the pages of each level that the last
//! commit's map consists of (level 0: the map pages themselves; above, a segments
//! volume's index pages, `layout::INDEX_FANOUT` refs each), read from the store and
//! changed by checkpoints.
//!
//! Pages are never rewritten under their names, so a ref names one page's bytes forever,
//! and an index page's ref names its whole subtree: a follower reading a newer root reads
//! only the index pages whose refs changed, and descends only into those (as a ZFS
//! snapshot diff skips every indirect block whose birth is older than the snapshot). A
//! checkpoint writes the index pages above the map pages it writes, up to the top, whose
//! refs the root names.
//!
//! Memory: one ref (32 bytes and the map's share) per page that exists, 1,024 blocks a
//! map page, so 1/1,000th of what the map's pointers take.

use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::path::Path as ObjPath;

use super::{get_decoded, run_on};
use crate::layout::{self, INDEX_FANOUT, PageRef, Root, Version};

/// The refs of the pages of each level of a map (see the module comment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Tree {
    /// Level by level from the map pages up, the pages that exist by number. Never empty
    /// once built: a tree without index pages has its map pages' level only.
    levels: Vec<BTreeMap<u64, PageRef>>,
}

/// What a commit writes into the tree: its new pages, level by level from the map pages
/// up, and the levels of index pages the tree has after it.
#[derive(Clone, Debug, Default)]
pub(super) struct TreeEdit {
    pub depth: u8,
    pub written: Vec<Vec<PageRef>>,
}

impl TreeEdit {
    /// An edit that writes the map pages `refs` and no index pages (an objects volume's
    /// commit, whose root names its map pages itself).
    pub fn flat(refs: Vec<PageRef>) -> TreeEdit {
        TreeEdit {
            depth: 0,
            written: vec![refs],
        }
    }

    /// Whether the commit writes no page.
    pub fn is_empty(&self) -> bool {
        self.written.iter().all(Vec::is_empty)
    }
}

/// An index page a commit uploads: its name and sealed bytes.
pub(super) struct IndexUpload {
    pub name: String,
    pub bytes: Vec<u8>,
}

impl Tree {
    /// A tree of the pages `levels` names, level by level from the map pages up.
    #[cfg(test)]
    pub fn of(levels: &[&[PageRef]]) -> Tree {
        Tree {
            levels: levels
                .iter()
                .map(|l| l.iter().map(|r| (r.page, *r)).collect())
                .collect(),
        }
    }

    /// Levels of index pages above the map pages.
    #[cfg(test)]
    pub fn depth(&self) -> u8 {
        self.levels.len().saturating_sub(1) as u8
    }

    /// The map pages' refs.
    pub fn leaves(&self) -> impl Iterator<Item = &PageRef> {
        self.levels.first().into_iter().flat_map(|l| l.values())
    }

    /// The ref of map page `page`, if it exists.
    pub fn leaf(&self, page: u64) -> Option<&PageRef> {
        self.levels.first().and_then(|l| l.get(&page))
    }

    /// Whether page `page` of level `level` as written by `version` is part of the tree.
    pub fn names(&self, level: u8, page: u64, version: Version) -> bool {
        self.levels
            .get(usize::from(level))
            .and_then(|l| l.get(&page))
            .is_some_and(|r| r.version == version)
    }

    /// Bytes the refs take in memory (a B-tree entry's key and value, and a share of its
    /// node).
    pub fn bytes(&self) -> u64 {
        let refs: usize = self.levels.iter().map(BTreeMap::len).sum();
        refs as u64 * (8 + std::mem::size_of::<PageRef>() as u64 + 8)
    }

    /// The index pages a commit `version` writes above the map pages `leaves` for a tree
    /// of `depth` levels of index pages, and the edit naming every page it writes. At a
    /// level this tree does not have (a volume given index pages for the first time),
    /// every index page is written; elsewhere only those above a page written below.
    pub fn edit(
        &self,
        leaves: Vec<PageRef>,
        depth: u8,
        version: Version,
    ) -> (TreeEdit, Vec<IndexUpload>) {
        let mut written = vec![leaves];
        let mut uploads = Vec::new();
        for level in 1..=usize::from(depth) {
            let below = &written[level - 1];
            let old_below = self.levels.get(level - 1);
            let mut parents: Vec<u64> = if self.levels.len() > level {
                below.iter().map(|r| r.page / INDEX_FANOUT).collect()
            } else {
                // No such level yet: every page of it, over every page below.
                let mut all: Vec<u64> = old_below
                    .into_iter()
                    .flat_map(|l| l.keys())
                    .chain(below.iter().map(|r| &r.page))
                    .map(|p| p / INDEX_FANOUT)
                    .collect();
                all.sort_unstable();
                all
            };
            parents.dedup();
            let mut refs = Vec::with_capacity(parents.len());
            for parent in parents {
                let span = parent * INDEX_FANOUT..(parent + 1) * INDEX_FANOUT;
                let children = overlay(old_below, below, span);
                let bytes = layout::encode_index_page(&children);
                refs.push(PageRef {
                    page: parent,
                    version,
                    checksum: layout::page_checksum(&bytes),
                });
                uploads.push(IndexUpload {
                    name: layout::index_page_name(level as u8, parent, version),
                    bytes,
                });
            }
            written.push(refs);
        }
        (TreeEdit { depth, written }, uploads)
    }

    /// What the tree would be after `edit`, without changing it: the top level's refs (the
    /// root's pages) and the refs the edit supersedes, with their levels.
    pub fn after(&self, edit: &TreeEdit) -> (Vec<PageRef>, Vec<(u8, PageRef)>) {
        let depth = usize::from(edit.depth);
        let top = overlay(self.levels.get(depth), &edit.written[depth], 0..u64::MAX);
        let mut superseded = Vec::new();
        for (level, refs) in edit.written.iter().enumerate() {
            let Some(old) = self.levels.get(level) else {
                continue;
            };
            superseded.extend(
                refs.iter()
                    .filter_map(|r| old.get(&r.page).filter(|o| *o != r))
                    .map(|o| (level as u8, *o)),
            );
        }
        // Levels above the new top (none while volumes only grow their trees).
        for (level, old) in self.levels.iter().enumerate().skip(depth + 1) {
            superseded.extend(old.values().map(|o| (level as u8, *o)));
        }
        (top, superseded)
    }

    /// Applies `edit` (its commit landed).
    pub fn apply(&mut self, edit: &TreeEdit) {
        let depth = usize::from(edit.depth);
        self.levels.resize_with(depth + 1, BTreeMap::new);
        for (level, refs) in edit.written.iter().enumerate() {
            self.levels[level].extend(refs.iter().map(|r| (r.page, *r)));
        }
    }
}

/// The refs of `old` in `span` with `new` (ascending) put over them.
fn overlay(
    old: Option<&BTreeMap<u64, PageRef>>,
    new: &[PageRef],
    span: Range<u64>,
) -> Vec<PageRef> {
    let mut merged: BTreeMap<u64, PageRef> = old
        .map(|l| l.range(span.clone()).map(|(k, v)| (*k, *v)).collect())
        .unwrap_or_default();
    merged.extend(
        new.iter()
            .filter(|r| span.contains(&r.page))
            .map(|r| (r.page, *r)),
    );
    merged.into_values().collect()
}

/// Reads the tree `root` names under `prefix`, taking from `known` (the tree of an
/// earlier root of the volume, or an empty one) every subtree whose ref is unchanged.
/// Returns the tree, the map pages whose refs `known` does not have, and how many index
/// pages were read. A page gone from the store is an error of kind `NotFound` (a follower
/// reads the root again: the writer superseded and deleted it meanwhile).
pub(super) fn read_tree(
    handle: &tokio::runtime::Handle,
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    display: &str,
    root: &Root,
    known: &Tree,
) -> io::Result<(Tree, Vec<PageRef>, u64)> {
    let depth = usize::from(root.levels);
    let mut levels = vec![BTreeMap::new(); depth + 1];
    let mut here: BTreeMap<u64, PageRef> = root.pages.iter().map(|p| (p.page, *p)).collect();
    let mut read = 0u64;
    for level in (1..=depth).rev() {
        let mut below: BTreeMap<u64, PageRef> = BTreeMap::new();
        let mut wanted = Vec::new();
        for r in here.values() {
            let span = r.page * INDEX_FANOUT..(r.page + 1) * INDEX_FANOUT;
            let same = known.levels.get(level).and_then(|l| l.get(&r.page)) == Some(r);
            match known.levels.get(level - 1) {
                Some(old) if same => below.extend(old.range(span).map(|(k, v)| (*k, *v))),
                _ => wanted.push(*r),
            }
        }
        read += wanted.len() as u64;
        let pages_below = root.pages_at(level as u8 - 1);
        let jobs: Vec<_> = wanted
            .into_iter()
            .map(|r| {
                let store = Arc::clone(store);
                let name = layout::index_page_name(level as u8, r.page, r.version);
                let path = ObjPath::from(format!("{prefix}{name}"));
                let label = format!("{display}/{name}");
                let what = "an index page of the map".to_string();
                let span = r.page * INDEX_FANOUT..((r.page + 1) * INDEX_FANOUT).min(pages_below);
                let sizes = 32 + layout::INDEX_REF_BYTES as u64..=layout::INDEX_PAGE_BYTES_MAX;
                get_decoded(store, path, label, what, sizes, move |bytes| {
                    layout::decode_index_page(bytes, r.checksum, span)
                })
            })
            .collect();
        let children: Vec<Vec<PageRef>> = run_on(handle, async move {
            stream::iter(jobs).buffer_unordered(16).try_collect().await
        })?;
        below.extend(children.into_iter().flatten().map(|r| (r.page, r)));
        levels[level] = std::mem::replace(&mut here, below);
    }
    let new_leaves = here
        .values()
        .filter(|r| known.levels.first().and_then(|l| l.get(&r.page)) != Some(*r))
        .copied()
        .collect();
    levels[0] = here;
    Ok((Tree { levels }, new_leaves, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(page: u64, seq: u64) -> PageRef {
        PageRef {
            page,
            version: Version { seq, token: 1 },
            checksum: page ^ seq,
        }
    }

    #[test]
    fn a_checkpoint_writes_the_index_pages_above_what_it_writes() {
        // A flat tree of pages 0, 5 and 2,000 gets its first level of index pages: both
        // index pages are written, each naming its span's pages.
        let mut tree = Tree {
            levels: vec![[r(0, 1), r(5, 1), r(2000, 1)].map(|p| (p.page, p)).into()],
        };
        let v = Version { seq: 2, token: 1 };
        let (edit, uploads) = tree.edit(vec![r(5, 2)], 1, v);
        assert_eq!(uploads.len(), 2);
        assert_eq!(
            edit.written[1].iter().map(|p| p.page).collect::<Vec<_>>(),
            [0, 1]
        );
        let first =
            layout::decode_index_page(&uploads[0].bytes, edit.written[1][0].checksum, 0..1024)
                .expect("it decodes");
        assert_eq!(first, vec![r(0, 1), r(5, 2)]);
        let (top, superseded) = tree.after(&edit);
        assert_eq!(top, edit.written[1]);
        assert_eq!(superseded, vec![(0, r(5, 1))]);
        tree.apply(&edit);
        assert_eq!(tree.depth(), 1);
        // The next checkpoint writes only the index page above the page it writes.
        let v3 = Version { seq: 3, token: 1 };
        let (edit, uploads) = tree.edit(vec![r(2001, 3)], 1, v3);
        assert_eq!(uploads.len(), 1);
        assert_eq!(uploads[0].name, layout::index_page_name(1, 1, v3));
        let (top, superseded) = tree.after(&edit);
        assert_eq!(
            top.iter().map(|p| p.version.seq).collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(superseded.len(), 1);
        assert_eq!(superseded[0].0, 1);
        tree.apply(&edit);
        assert!(tree.names(0, 2001, v3) && tree.names(0, 2000, Version { seq: 1, token: 1 }));
        assert!(tree.names(1, 1, v3) && !tree.names(1, 1, v));
        assert_eq!(tree.leaves().count(), 4);
    }
}
