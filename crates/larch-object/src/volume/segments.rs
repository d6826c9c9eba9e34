//! The segments format of an object-backed volume (`layout::Format::Segments`): the map
//! of block pointers, commits that pack changed blocks into new segments, reads that
//! follow the pointers, and the repacking of segments most of whose blocks are dead.
//!
//! A commit never reads a segment back to rewrite it: its blocks (client writes, and live
//! blocks moved out of sparse segments) are written in block order into new segments of
//! at most `object_blocks` records, the block-map pages that changed are written as new
//! objects, and then the root, conditionally, as in the objects format. A block of zeros
//! is not stored: its pointer is cleared (a hole), as ZFS stores no all-zero block.
//! A segment whose last live block a commit replaced is deleted once that commit landed.
//!
//! The map itself (its pages, changed pointers and segment counts, and the lookups of
//! pointers) is `block_map`'s.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::future::{BoxFuture, FutureExt};
use object_store::ObjectStoreExt;

use super::block_map::{BlockMap, Pointers, Segment};
use super::pages::Page;
use super::{Committed, Hazard, LogEdit, ObjectVolume, TreeEdit, store_error, uploads_at_once};
use crate::layout::{self, BlockPtr, PAGE_BLOCKS, SegmentId};

/// Block-map pages a look for holes covers per hold of the map's lock (the pages it read
/// for them are held until the next).
const HOLE_PAGES: u64 = 64;

/// Whether every byte of `data` is zero (16 bytes at a time, no early exit: a block is
/// read whole either way, and the loop vectorises).
fn is_zeros(data: &[u8]) -> bool {
    let chunks = data.chunks_exact(16);
    let tail = chunks.remainder();
    let any = chunks.fold(0u128, |acc, c| {
        acc | u128::from_ne_bytes(c.try_into().expect("16 bytes"))
    });
    any == 0 && tail.iter().all(|&b| b == 0)
}

/// A block to write in a commit, from a client or moved out of a sparse segment.
#[derive(Clone)]
struct Write {
    block: u64,
    data: Bytes,
}

impl ObjectVolume {
    /// One round of the background count (`Count::Later`): the next pages read (without
    /// the map's lock) and counted (under it). Returns whether the count is done; the
    /// segments it then finds dead are deleted.
    pub(super) fn count_step(&self) -> io::Result<bool> {
        let round = self.options.count_round_pages.max(1);
        let wants = self
            .map
            .read()
            .expect("map lock")
            .blocks()
            .count_wants(round);
        let held: Vec<Page> = self
            .map_pages
            .pages(&wants)?
            .into_iter()
            .flatten()
            .collect();
        let dead = self
            .map
            .write()
            .expect("map lock")
            .blocks_mut()
            .count_some(&held, round, &self.display)?;
        let Some(dead) = dead else {
            return Ok(false);
        };
        if !dead.is_empty() {
            self.stats
                .segments_freed
                .fetch_add(dead.len() as u64, Ordering::Relaxed);
            self.delete_later(dead.into_iter().map(layout::segment_name).collect());
        }
        Ok(true)
    }

    /// Runs `f` on the map with a lookup of pointers under a shared hold of the map's
    /// lock, and returns what it returns once it ran with every page it looked for: the
    /// pages its lookup found in no cache are read from the store without the lock (all
    /// of a round's at once), held for the next round, and `f` runs again. So no request
    /// to the store waits under the map's lock, which commits and follows need.
    pub(super) fn with_pointers<T>(
        &self,
        mut f: impl FnMut(&BlockMap, &mut Pointers<'_>) -> T,
    ) -> io::Result<T> {
        let mut held: Vec<Page> = Vec::new();
        let mut fruitless = 0;
        loop {
            let missing = {
                let map = self.map.read().expect("map lock");
                let blocks = map.blocks();
                let mut lookup = blocks.pointers_with(&held);
                let out = f(blocks, &mut lookup);
                let missing = lookup.missing();
                if missing.is_empty() {
                    return Ok(out);
                }
                missing
            };
            let before = held.len();
            // A page gone from the store was superseded since: by a checkpoint of this
            // node's (the next round finds the map's new ref), or of the writer a follower
            // follows (the follower follows the root at once, as when it meets a segment
            // gone). Three rounds in a row without one page read: an error.
            held.extend(self.map_pages.pages(&missing)?.into_iter().flatten());
            if held.len() == before {
                if self.follower {
                    let _ = self.follow();
                }
                fruitless += 1;
                if fruitless == 3 {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "{}/{}: missing, though the map names it",
                            self.display,
                            layout::block_page_name(missing[0].page, missing[0].version)
                        ),
                    ));
                }
            } else {
                fruitless = 0;
            }
        }
    }

    /// One attempt at committing `staged` to a segments volume (see the module comment),
    /// moving up to `repack_budget` bytes of live blocks out of sparse segments with it.
    pub(super) fn commit_segments(
        &self,
        staged: &BTreeMap<u64, Bytes>,
        next_seq: &mut u64,
        repack_budget: u64,
    ) -> io::Result<Option<Committed>> {
        let (base_seq, base_logs) = {
            let state = self.state.lock().expect("state lock");
            (state.root.commit_seq, state.root.logs.len())
        };
        let version = self.next_version(base_seq, next_seq)?;
        let moves = self.repack_moves(staged, repack_budget)?;
        let moved_bytes: u64 = moves.iter().map(|w| w.data.len() as u64).sum();
        let (writes, holes) = self.changes(staged, moves)?;
        // 1. The segments, in block order, `object_blocks` records each.
        let (mut pointers, jobs) = self.segment_uploads(&writes, version)?;
        let parts = jobs.len() as u64;
        let segment_bytes =
            u64::from(self.geometry.object_blocks) * u64::from(self.geometry.block_bytes);
        let segments_at_once = uploads_at_once(segment_bytes, self.options.uploads);
        pointers.extend(holes.iter().map(|&b| (b, BlockPtr::default())));
        pointers.sort_unstable_by_key(|&(block, _)| block);
        // 2. The commit's map log, or at a checkpoint the block-map pages.
        let checkpoint = !pointers.is_empty()
            && (base_logs >= self.options.map_log_commits as usize
                || (pointers.len() * layout::LOG_ENTRY_BYTES) as u64 + 32 > layout::MAX_LOG_BYTES);
        // The pointers the commit replaces are pinned, so that applying it once the root
        // landed reads nothing.
        let blocks: Vec<u64> = pointers.iter().map(|&(block, _)| block).collect();
        let found = self.with_pointers(|map, lookup| map.to_pin(&blocks, lookup))?;
        self.map
            .write()
            .expect("map lock")
            .blocks_mut()
            .pin_found(found);
        let (edit, log, map_jobs, saved) = self.map_uploads(&pointers, version, checkpoint)?;
        let saved_refs = edit.written.first().cloned().unwrap_or_default();
        let root_first = self.options.hazard == Hazard::RootFirst;
        // Segments and the map's objects go up at the same time, each kind with its own
        // bound: only the root must wait for them all, and a round of map uploads after
        // the segments would add one more request time to every commit.
        let mut uploads = Some((jobs, map_jobs));
        let upload = |uploads: &mut Option<(Vec<_>, Vec<_>)>| -> io::Result<()> {
            let (jobs, map_jobs) = uploads.take().expect("uploaded once");
            self.upload_together(
                (jobs, segments_at_once),
                (map_jobs, self.options.uploads.max(1)),
            )
        };
        if !root_first {
            upload(&mut uploads)?;
        }
        // 3. The root; the map follows it under the same hold of `state`.
        let mut dead: Vec<SegmentId> = Vec::new();
        let Some(superseded) = self.commit_root(base_seq, version.seq, edit, log, |map| {
            let blocks = map.blocks_mut();
            for &(block, ptr) in &pointers {
                dead.extend(blocks.set(block, ptr));
            }
            if checkpoint {
                blocks.checkpointed(&saved_refs, &saved);
            }
        })?
        else {
            return Ok(None);
        };
        if root_first {
            upload(&mut uploads)?;
        }
        let s = &self.stats;
        s.objects_written.fetch_add(parts, Ordering::Relaxed);
        if moved_bytes > 0 {
            s.repack_bytes.fetch_add(moved_bytes, Ordering::Relaxed);
        }
        s.segments_freed
            .fetch_add(dead.len() as u64, Ordering::Relaxed);
        let mut garbage: Vec<String> = dead.into_iter().map(layout::segment_name).collect();
        garbage.extend(superseded.pages.iter().map(|&(level, p)| match level {
            0 => layout::block_page_name(p.page, p.version),
            _ => layout::index_page_name(level, p.page, p.version),
        }));
        garbage.extend(
            superseded
                .logs
                .iter()
                .map(|l| layout::block_log_name(l.version)),
        );
        Ok(Some(Committed {
            seq: version.seq,
            garbage,
        }))
    }

    /// What `staged` and the repack's `moves` change: the blocks to store, in block order,
    /// and the blocks that become holes (blocks of zeros where they are not holes already).
    fn changes(
        &self,
        staged: &BTreeMap<u64, Bytes>,
        moves: Vec<Write>,
    ) -> io::Result<(Vec<Write>, Vec<u64>)> {
        let mut writes: Vec<Write> = Vec::with_capacity(staged.len() + moves.len());
        for (&block, data) in staged {
            if !is_zeros(data) {
                writes.push(Write {
                    block,
                    data: data.clone(),
                });
            }
        }
        let holes = self.with_pointers(|_, lookup| {
            staged
                .iter()
                .filter(|(_, data)| is_zeros(data))
                .filter(|&(&block, _)| lookup.want(block).is_some_and(|p| p.exists()))
                .map(|(&block, _)| block)
                .collect::<Vec<u64>>()
        })?;
        writes.extend(moves);
        writes.sort_unstable_by_key(|w| w.block);
        Ok((writes, holes))
    }

    /// The pointers of `writes` packed into commit `version`'s segments, `object_blocks`
    /// records each, and the segments' uploads.
    #[allow(clippy::type_complexity)]
    fn segment_uploads(
        &self,
        writes: &[Write],
        version: layout::Version,
    ) -> io::Result<(
        Vec<(u64, BlockPtr)>,
        Vec<impl Future<Output = io::Result<()>> + Send + 'static>,
    )> {
        let per = self.geometry.object_blocks as usize;
        let mut pointers = Vec::with_capacity(writes.len());
        let mut jobs = Vec::new();
        for (part, chunk) in writes.chunks(per).enumerate() {
            let part = u32::try_from(part).map_err(|_| {
                io::Error::other(format!(
                    "{}: a commit of more than 2^32 segments",
                    self.display
                ))
            })?;
            for (slot, w) in chunk.iter().enumerate() {
                let checksum = layout::record_sum(&self.geometry, w.block, &w.data, version.seq);
                pointers.push((
                    w.block,
                    BlockPtr {
                        seq: version.seq,
                        token: version.token,
                        checksum,
                        part,
                        slot: slot as u32,
                        records: chunk.len() as u32,
                    },
                ));
            }
            let id = SegmentId {
                seq: version.seq,
                token: version.token,
                part,
            };
            jobs.push(self.segment_upload(id, chunk.to_vec()));
        }
        Ok((pointers, jobs))
    }

    /// The map's share of commit `version` with `pointers` (in block order): its map log;
    /// or, at a `checkpoint`, the block-map pages every log since the last checkpoint and
    /// this commit changed, each a new object, and the index pages above them
    /// (`tree::Tree::edit`). Returns what the commit writes into the tree, what the root
    /// does with its logs, the uploads, and the pointers of the pages a checkpoint writes.
    #[allow(clippy::type_complexity)]
    fn map_uploads(
        &self,
        pointers: &[(u64, BlockPtr)],
        version: layout::Version,
        checkpoint: bool,
    ) -> io::Result<(
        TreeEdit,
        LogEdit,
        Vec<BoxFuture<'static, io::Result<()>>>,
        BTreeMap<u64, Vec<BlockPtr>>,
    )> {
        if checkpoint {
            let mut pages: BTreeMap<u64, Vec<BlockPtr>> =
                self.with_pointers(|blocks, lookup| {
                    let mut wanted = blocks.unsaved();
                    wanted.extend(pointers.iter().map(|&(block, _)| block / PAGE_BLOCKS));
                    wanted
                        .into_iter()
                        .filter_map(|page| lookup.entries(page).map(|e| (page, e)))
                        .collect()
                })?;
            for &(block, ptr) in pointers {
                let entries = pages.get_mut(&(block / PAGE_BLOCKS)).expect("read above");
                entries[(block % PAGE_BLOCKS) as usize] = ptr;
            }
            let (refs, jobs) = self.page_uploads(
                &pages,
                version,
                layout::encode_block_page,
                layout::block_page_name,
            );
            let mut jobs: Vec<_> = jobs.into_iter().map(FutureExt::boxed).collect();
            // The base's tree: `commit_root` refuses the commit if the base moved since.
            let (edit, index) = self.state.lock().expect("state lock").tree.edit(
                refs,
                self.sized().tree_levels(),
                version,
            );
            jobs.extend(
                index
                    .into_iter()
                    .map(|page| self.put_job(page.name, page.bytes).boxed()),
            );
            return Ok((edit, LogEdit::Clear, jobs, pages));
        }
        if pointers.is_empty() {
            return Ok((
                TreeEdit::default(),
                LogEdit::Keep,
                Vec::new(),
                BTreeMap::new(),
            ));
        }
        let sealed = layout::encode_block_log(pointers);
        let next = layout::LogRef {
            version,
            checksum: layout::page_checksum(&sealed),
            entries: pointers.len() as u64,
        };
        let job = self
            .put_job(layout::block_log_name(version), sealed)
            .boxed();
        Ok((
            TreeEdit::default(),
            LogEdit::Append(next),
            vec![job],
            BTreeMap::new(),
        ))
    }

    /// The upload of segment `id` holding `blocks` (in order). Its body is built when the
    /// upload starts: a commit holds only the bodies of the uploads in flight, besides
    /// the staged blocks themselves.
    fn segment_upload(
        &self,
        id: SegmentId,
        blocks: Vec<Write>,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let name = layout::segment_name(id);
        let geometry = self.sized();
        let display = self.display.clone();
        let put = self.put_body(name.clone());
        async move {
            let body = layout::build_object(
                blocks.iter().map(|w| (w.block, &w.data[..])),
                &geometry,
                id.seq,
            )
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{display}/{name}: {e}"),
                )
            })?;
            put.send(body).await
        }
    }

    /// The live blocks of the sparsest segments (live share below the volume's
    /// `repack_percent`), up to `budget` bytes of segments read, that `staged` does not
    /// overwrite anyway: each segment is read whole with one GET (its records say which
    /// blocks they are), and a record is live when the map still points at it.
    fn repack_moves(&self, staged: &BTreeMap<u64, Bytes>, budget: u64) -> io::Result<Vec<Write>> {
        if budget == 0 || self.options.repack_percent == 0 {
            return Ok(Vec::new());
        }
        let rec = self.geometry.record_bytes();
        let chosen: Vec<(SegmentId, Segment)> = {
            let map = self.map.read().expect("map lock");
            let mut spent = 0u64;
            map.blocks()
                .sparse(self.options.repack_percent)
                .into_iter()
                .take_while(|(_, s)| {
                    let first = spent == 0;
                    spent += u64::from(s.records) * rec;
                    first || spent <= budget
                })
                .collect()
        };
        if chosen.is_empty() {
            return Ok(Vec::new());
        }
        let gets: Vec<_> = chosen
            .iter()
            .map(|&(id, seg)| {
                let store = Arc::clone(&self.store);
                let path = self.path(&layout::segment_name(id));
                let range = 0..u64::from(seg.records) * rec;
                async move { (id, store.get_range(&path, range).await) }
            })
            .collect();
        let answers = self.run_gets(gets);
        let bs = self.block_bytes() as usize;
        let mut read: Vec<(SegmentId, String, Bytes)> = Vec::with_capacity(answers.len());
        for (id, answer) in answers {
            let name = layout::segment_name(id);
            let bytes = answer.map_err(|e| {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                store_error(&format!("{}/{name} (repacking)", self.display), e)
            })?;
            self.stats
                .get_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            self.stats.repacked_segments.fetch_add(1, Ordering::Relaxed);
            if self.options.hazard == Hazard::DeleteRepackedEarly {
                self.delete_later(vec![name.clone()]);
            }
            read.push((id, name, bytes));
        }
        // The live records: (segment read, record, block, its pointer).
        let live = self.with_pointers(|_, lookup| {
            let mut live: Vec<(usize, usize, u64, BlockPtr)> = Vec::new();
            for (i, (id, _, bytes)) in read.iter().enumerate() {
                for (slot, record) in bytes.chunks_exact(rec as usize).enumerate() {
                    let Some(block) = layout::record_block(record, bs) else {
                        continue;
                    };
                    let Some(ptr) = lookup.want(block) else {
                        continue;
                    };
                    let is_live = ptr.exists()
                        && ptr.segment() == *id
                        && ptr.slot as usize == slot
                        && !staged.contains_key(&block);
                    if is_live {
                        live.push((i, slot, block, ptr));
                    }
                }
            }
            live
        })?;
        let mut moves = Vec::with_capacity(live.len());
        for (i, slot, block, ptr) in live {
            let (_, name, bytes) = &read[i];
            let record = &bytes[slot * rec as usize..(slot + 1) * rec as usize];
            let data = self.verified_record(bytes, record, block, ptr, name)?;
            moves.push(Write { block, data });
        }
        Ok(moves)
    }

    /// The block's bytes in `record` (a slice of `whole`), verified against its pointer.
    fn verified_record(
        &self,
        whole: &Bytes,
        record: &[u8],
        block: u64,
        ptr: BlockPtr,
        name: &str,
    ) -> io::Result<Bytes> {
        let bs = self.block_bytes() as usize;
        let bad = |why: String| {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}/{name}: {why}", self.display),
            )
        };
        let data = layout::verify_record(record, bs, self.geometry.volume, block, ptr.seq)
            .map_err(|e| bad(e.to_string()))?;
        if layout::record_checksum_of(record) != ptr.checksum {
            return Err(bad(format!(
                "block {block}: not the record the map names (checksum {:016x}, the map's \
                 {:016x})",
                layout::record_checksum_of(record),
                ptr.checksum
            )));
        }
        Ok(whole.slice_ref(data))
    }

    /// Reads runs of blocks of a segments volume: each run split where its blocks stop
    /// being neighbours in one segment, one ranged GET per piece, [`READS_AT_ONCE`] at a
    /// time, every record verified against its pointer; holes are zeros. A commit may
    /// replace a segment (and delete it) between the map lookup and the GET: then the map
    /// names the new place, and the block is read there.
    pub(super) fn fetch_runs_segments(&self, runs: &[Range<u64>]) -> io::Result<Vec<Vec<Bytes>>> {
        let bs = self.block_bytes() as usize;
        let rec = self.geometry.record_bytes();
        let zeros = Bytes::from(vec![0u8; bs]);
        let mut out: Vec<Vec<Option<Bytes>>> = runs
            .iter()
            .map(|r| vec![None; (r.end - r.start) as usize])
            .collect();
        let mut tried: Vec<Vec<BlockPtr>> = runs
            .iter()
            .map(|r| vec![BlockPtr::default(); (r.end - r.start) as usize])
            .collect();
        let mut met_gone = false;
        for _ in 0..4 {
            // A follower that met a segment gone has an older map than the writer's last
            // commit (which emptied it): it follows the root before it looks again.
            if std::mem::take(&mut met_gone) && self.follower {
                let _ = self.follow();
            }
            // The pointers of the blocks not read yet (`None`: read).
            let found: Vec<Vec<Option<BlockPtr>>> = self.with_pointers(|_, lookup| {
                runs.iter()
                    .zip(&out)
                    .map(|(run, done)| {
                        run.clone()
                            .zip(done)
                            .map(|(block, done)| match done {
                                Some(_) => None,
                                None => Some(lookup.want(block).unwrap_or_default()),
                            })
                            .collect()
                    })
                    .collect()
            })?;
            // (run, first block's index in it, pointers of the piece)
            let mut pieces: Vec<(usize, usize, Vec<BlockPtr>)> = Vec::new();
            for (i, run) in runs.iter().enumerate() {
                for (j, block) in run.clone().enumerate() {
                    let Some(ptr) = found[i][j] else {
                        continue;
                    };
                    if !ptr.exists() {
                        out[i][j] = Some(zeros.clone());
                        continue;
                    }
                    if ptr == tried[i][j] {
                        return Err(self.missing_segment(block, ptr));
                    }
                    tried[i][j] = ptr;
                    match pieces.last_mut() {
                        Some((pi, pj, ptrs))
                            if *pi == i
                                && *pj + ptrs.len() == j
                                && ptrs.last().is_some_and(|l| {
                                    l.segment() == ptr.segment() && l.slot + 1 == ptr.slot
                                }) =>
                        {
                            ptrs.push(ptr)
                        }
                        _ => pieces.push((i, j, vec![ptr])),
                    }
                }
            }
            if pieces.is_empty() {
                break;
            }
            let gets: Vec<_> = pieces
                .into_iter()
                .map(|(i, j, ptrs)| {
                    let store = Arc::clone(&self.store);
                    let path = self.path(&layout::segment_name(ptrs[0].segment()));
                    let first = u64::from(ptrs[0].slot);
                    let range = first * rec..(first + ptrs.len() as u64) * rec;
                    async move { (i, j, ptrs, store.get_range(&path, range).await) }
                })
                .collect();
            let answers = self.run_gets(gets);
            for (i, j, ptrs, answer) in answers {
                let name = layout::segment_name(ptrs[0].segment());
                match answer {
                    Ok(bytes) => {
                        self.stats
                            .get_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        if bytes.len() as u64 != ptrs.len() as u64 * rec {
                            self.stats.errors.fetch_add(1, Ordering::Relaxed);
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!(
                                    "{}/{name}: {} bytes answered for a range of {}",
                                    self.display,
                                    bytes.len(),
                                    ptrs.len() as u64 * rec
                                ),
                            ));
                        }
                        for (k, (record, ptr)) in
                            bytes.chunks_exact(rec as usize).zip(&ptrs).enumerate()
                        {
                            let block = runs[i].start + (j + k) as u64;
                            out[i][j + k] =
                                Some(self.verified_record(&bytes, record, block, *ptr, &name)?);
                        }
                    }
                    Err(object_store::Error::NotFound { .. }) => met_gone = true,
                    Err(err) => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        return Err(store_error(&format!("{}/{name}", self.display), err));
                    }
                }
            }
        }
        out.into_iter()
            .zip(runs)
            .zip(tried)
            .map(|((blocks, run), tried)| {
                blocks
                    .into_iter()
                    .zip(run.clone())
                    .zip(tried)
                    .map(|((b, block), ptr)| b.ok_or_else(|| self.missing_segment(block, ptr)))
                    .collect()
            })
            .collect()
    }

    /// The error of a segment the map names that the store does not have.
    fn missing_segment(&self, block: u64, ptr: BlockPtr) -> io::Error {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{}/{}: missing, though commit {} names it for block {block}",
                self.display,
                layout::segment_name(ptr.segment()),
                ptr.seq
            ),
        )
    }

    /// Byte ranges of `offset..end` (the caller clipped it to the volume) that are holes
    /// in a segments volume: blocks no pointer names, less those staged.
    pub(super) fn holes_segments(&self, offset: u64, end: u64) -> io::Result<Vec<Range<u64>>> {
        let bs = self.block_bytes();
        let last = end.div_ceil(bs);
        let mut holes: Vec<Range<u64>> = Vec::new();
        let mut from_block = offset / bs;
        // [`HOLE_PAGES`] block-map pages at a time: the pages read for a round are held
        // until it ends.
        while from_block < last {
            let to_block = ((from_block / PAGE_BLOCKS + HOLE_PAGES) * PAGE_BLOCKS).min(last);
            let found = self.with_pointers(|blocks, lookup| {
                let staged = self.staged.lock().expect("staged lock");
                let mut found: Vec<Range<u64>> = Vec::new();
                let mut block = from_block;
                while block < to_block {
                    let page = block / PAGE_BLOCKS;
                    let page_end = ((page + 1) * PAGE_BLOCKS).min(to_block);
                    let whole_page_hole = blocks.page_is_hole(page);
                    for b in block..page_end {
                        let hole = whole_page_hole || lookup.want(b).is_some_and(|p| !p.exists());
                        if hole && !staged.contains_key(&b) {
                            let from = (b * bs).max(offset);
                            let to = ((b + 1) * bs).min(end);
                            super::push_run(&mut found, from..to);
                        }
                    }
                    block = page_end;
                }
                found
            })?;
            for run in found {
                super::push_run(&mut holes, run);
            }
            from_block = to_block;
        }
        Ok(holes)
    }

    /// The blocks of `window` around `block` (which it holds) whose records sit next to
    /// `block`'s in its segment, in the same order: one ranged GET reads them all. Just
    /// `block` when it is a hole.
    pub(super) fn record_neighbours_segments(&self, block: u64, window: Range<u64>) -> Range<u64> {
        // A pointer that cannot be read now is no neighbour: the block is read alone.
        self.with_pointers(|_, lookup| neighbours(lookup, block, window.clone()))
            .unwrap_or(block..block + 1)
    }

    /// The live share of a segments volume: bytes of records the map's segments hold, and
    /// of those the bytes of live ones; and the segments.
    pub fn segment_usage(&self) -> Option<(u64, u64, u64)> {
        let map = self.map.read().expect("map lock");
        let blocks = map.segments_map()?;
        let rec = self.geometry.record_bytes();
        let (stored, live) = blocks.records()?;
        Some((stored * rec, live * rec, blocks.segments()))
    }
}

/// [`ObjectVolume::record_neighbours_segments`] with `lookup` (a page it lacks: the block
/// alone, and the page noted).
fn neighbours(lookup: &mut Pointers<'_>, block: u64, window: Range<u64>) -> Range<u64> {
    let Some(ptr) = lookup.want(block) else {
        return block..block + 1;
    };
    if !ptr.exists() {
        return block..block + 1;
    }
    // Whether block `b`'s record is record `slot` of `block`'s segment.
    let mut at = |b: u64, slot: u32| {
        lookup
            .want(b)
            .is_some_and(|p| p.exists() && p.segment() == ptr.segment() && p.slot == slot)
    };
    let (mut start, mut first) = (block, ptr.slot);
    while start > window.start && first > 0 && at(start - 1, first - 1) {
        start -= 1;
        first -= 1;
    }
    let (mut end, mut last) = (block + 1, ptr.slot);
    while end < window.end && last < u32::MAX && at(end, last + 1) {
        end += 1;
        last += 1;
    }
    start..end
}
