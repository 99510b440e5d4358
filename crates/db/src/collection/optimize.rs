//! Sealing: frozen growing segments become DiskANN segments, one at a time, oldest first,
//! each switched in with one manifest write; `optimize`, and the manifest writer. The
//! workers that run seals and merges are in worker.rs.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::task::Lane;
use super::{lock, search_load, Collection, Inner};
use crate::manifest::{Manifest, SegmentEntry};
use crate::segment::{write_deleted, Growing, Points, Sealed, Segment};
use crate::{DbError, Result};

/// What the workers are doing; guarded by `Inner::background`.
#[derive(Default)]
pub(crate) struct Background {
    pub stop: bool,
    /// The seal lane builds (a seal, or `optimize`'s merge of everything).
    pub sealing: bool,
    /// The merge lane builds (a merge or vacuum of sealed segments).
    pub merging: bool,
    /// Seals finished since open.
    pub sealed: u64,
    /// Vacuums and merges finished since open.
    pub rebuilt: u64,
    /// `optimize` asked for every sealed segment to be merged into one.
    pub merge_all: bool,
    /// The last background failure; the collection keeps serving.
    pub error: Option<String>,
    /// The last failure was a build of frozen segments: writers held back behind them are
    /// told so. A failed merge of sealed segments leaves the seals, and the writers, going.
    pub sealing_failed: bool,
    /// Writes are refused after a failure that leaves memory ahead of disk in a way
    /// retrying cannot fix (none today; kept for the manifest writer).
    pub read_only: Option<String>,
    /// When a merge of sealed segments last failed (its memory, say): merges wait a while
    /// before they are tried again; seals go on meanwhile.
    pub merge_failed_at: Option<std::time::Instant>,
    /// A merge of everything that took frozen segments along failed (its memory, most
    /// often: a frozen segment's vectors stay in DRAM until it is sealed, a sealed one's
    /// do not): the frozen ones are sealed on their own first, then the merge is tried
    /// once more over the sealed segments only.
    pub frozen_first: bool,
}

/// How long a worker sleeps when told nothing (it is woken on every freeze).
pub(crate) const IDLE: Duration = Duration::from_millis(500);

impl Inner {
    pub(crate) fn wake_background(&self) {
        self.wake.notify_all();
    }

    pub(crate) fn stop_background(&self) {
        lock(&self.background).stop = true;
        self.wake.notify_all();
        self.index_wake.notify_all();
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        let bg = lock(&self.background);
        if bg.stop {
            return Err(DbError::Unavailable(format!(
                "collection {:?} is closed",
                self.name
            )));
        }
        match &bg.read_only {
            Some(why) => Err(DbError::Unavailable(format!(
                "collection {:?} takes no writes: {why}",
                self.name
            ))),
            None => Ok(()),
        }
    }

    pub(crate) fn has_frozen(&self) -> bool {
        self.frozen_count() > 0
    }

    /// Frozen segments waiting to be sealed.
    pub(crate) fn frozen_count(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .frozen
            .len()
    }

    /// Rows not linked into a graph yet, which every search scans: the active growing
    /// segment's and the frozen ones' (which are not linked further).
    fn unlinked_rows(&self) -> (usize, usize) {
        // Lock order: the state, then each growing segment's (as writers take them).
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let unlinked = |id: u64| {
            state.growing(id).map_or(0, |g| {
                g.read().unwrap_or_else(|e| e.into_inner()).unlinked()
            })
        };
        let frozen = state.frozen.iter().map(|&id| unlinked(id)).sum();
        (unlinked(state.active), frozen)
    }

    /// Whether the searches spend enough in the active segment, which has rows not linked,
    /// that the indexer should link them beside the searches (`search_load.rs`).
    pub(crate) fn linking_is_overdue(&self) -> bool {
        self.search_load
            .worth_indexing(search_load::Growing::Active)
            && self.unlinked_rows().0 > 0
    }

    /// Whether the searches spend enough in growing segments, and the frozen ones hold more
    /// rows not linked than a graph walk costs to search, that their seal is overdue
    /// (`background::BuildPriority::OverdueSeal`): a seal is the cheaper way to index them
    /// (`search_load.rs`). The time spent in the active segment counts too: a segment just
    /// frozen was searched as the active one until then.
    pub(crate) fn frozen_rows_scanned(&self) -> bool {
        let load = &self.search_load;
        let spent =
            load.share(search_load::Growing::Active) + load.share(search_load::Growing::Frozen);
        spent >= search_load::WORTH_INDEXING && self.unlinked_rows().1 > crate::segment::SCAN_BELOW
    }

    fn oldest_frozen(&self) -> Option<(u64, Arc<std::sync::RwLock<Growing>>)> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let id = *state.frozen.front()?;
        state.growing(id).map(|g| (id, g.clone()))
    }

    /// Opens a segment just built into `dir`, with the current payload index fields and no
    /// deletes yet (the switch carries them over).
    pub(crate) fn open_built(&self, dir: &std::path::Path) -> Result<Sealed> {
        self.open_sealed(dir, roaring::RoaringBitmap::new(), &self.payload_fields())
    }

    /// The payload index fields as they are now (a segment opened with them is checked
    /// against them again under the state lock where they may have changed since).
    pub(crate) fn payload_fields(&self) -> Vec<(String, crate::filter::PayloadIndexKind)> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .fields
            .clone()
    }

    /// The sealed segment in `dir` with `deleted` offsets, opened as the collection's
    /// settings say, with the payload index fields given (for a caller holding the state
    /// lock).
    pub(crate) fn open_sealed(
        &self,
        dir: &std::path::Path,
        deleted: roaring::RoaringBitmap,
        fields: &[(String, crate::filter::PayloadIndexKind)],
    ) -> Result<Sealed> {
        self.open_sealed_with(dir, deleted, fields, self.node_cache())
    }

    /// `open_sealed`, holding `cache` of its nodes.
    pub(crate) fn open_sealed_with(
        &self,
        dir: &std::path::Path,
        deleted: roaring::RoaringBitmap,
        fields: &[(String, crate::filter::PayloadIndexKind)],
        cache: crate::segment::NodeCacheSize,
    ) -> Result<Sealed> {
        Sealed::open(
            &self.storage,
            dir,
            &self.config(),
            deleted,
            fields,
            cache,
            self.search_dram(),
        )
    }

    pub(crate) fn segment_dir(&self, id: u64) -> PathBuf {
        self.dir.join("segments").join(format!("{id:016x}"))
    }

    /// Where a segment's nodes go on each storage path.
    pub(crate) fn segment_paths(&self, id: u64) -> Vec<PathBuf> {
        self.config()
            .paths
            .iter()
            .map(|p| p.join(&self.name).join(format!("{id:016x}")))
            .collect()
    }

    /// Seals the oldest frozen segment, if any. Returns whether there was one.
    pub(crate) fn seal_next(&self) -> Result<bool> {
        let Some((id, frozen)) = self.oldest_frozen() else {
            return Ok(false);
        };
        self.check_home()?;
        // Copy the points out so deletes on the frozen segment never wait for the build.
        let (copy, frozen_at) = {
            let g = frozen.read().unwrap_or_else(|e| e.into_inner());
            (g.seal_input(), g.frozen_at.unwrap_or(0))
        };
        let dir = self.segment_dir(id);
        let paths = self.segment_paths(id);
        for p in &paths {
            self.make_dir(p)?;
        }
        let started = std::time::Instant::now();
        let task = self.task.begin(Lane::Seal, "seal", copy.len());
        self.build_segment(
            &copy,
            &dir,
            &paths,
            Lane::Seal,
            "seal",
            super::superseded::GivesWay::to_merge_of_everything(),
        )?;
        drop(task);
        drop(copy);
        crate::failpoint("seal:built");
        let sealed = self.open_built(&dir)?;
        {
            // Deletes take the state lock, so none lands between copying the bitmap and
            // the switch.
            let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
            let deleted = frozen
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .deleted
                .clone();
            for offset in &deleted {
                sealed.delete(offset);
            }
            state.segments.insert(id, Segment::Sealed(Arc::new(sealed)));
            state.frozen.pop_front();
        }
        self.write_manifest(Some(frozen_at))?;
        crate::failpoint("seal:switched");
        self.search.rebalance();
        self.wal.truncate_below(frozen_at + 1)?;
        let points = frozen.read().unwrap_or_else(|e| e.into_inner()).len();
        lock(&self.pacer).record_seal(points, started.elapsed().as_secs_f64());
        log::info!(
            "collection {:?}: sealed segment {id:016x} ({} points) in {:.1} s",
            self.name,
            frozen.read().unwrap_or_else(|e| e.into_inner()).len(),
            started.elapsed().as_secs_f64()
        );
        Ok(true)
    }

    /// Writes the manifest from the current state: sealed segments with their deleted
    /// bitmaps (a new file for each that changed), payload indexes, and `checkpoint` if
    /// given (else the last one). Old bitmap files go once the new manifest is durable.
    pub(crate) fn write_manifest(&self, checkpoint: Option<u64>) -> Result<()> {
        let mut current = lock(&self.manifest);
        self.check_home()?;
        let mut next: Manifest = current.clone();
        next.generation += 1;
        if let Some(c) = checkpoint {
            next.checkpoint_op = c;
        }
        let mut bitmaps = Vec::new();
        let logged;
        {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            // Every op the state holds was appended to the log before it was applied.
            logged = self.wal.last_op();
            next.payload_indexes = state
                .fields
                .iter()
                .map(|(f, k)| (f.clone(), k.name().to_string()))
                .collect();
            next.payload_index_params
                .retain(|f, _| next.payload_indexes.iter().any(|(g, _)| g == f));
            next.next_segment_id = state.next_segment_id;
            next.segments.clear();
            for (&id, s) in &state.segments {
                let Segment::Sealed(s) = s else { continue };
                let old = current.segments.iter().find(|e| e.id == id);
                let changes = s.deleted_changes.load(Ordering::Acquire);
                let unchanged = old.is_some_and(|e| e.deleted_file.is_some() || changes == 0)
                    && self.written_changes(id) == Some(changes);
                let deleted_file = if unchanged {
                    old.and_then(|e| e.deleted_file.clone())
                } else if s.deleted_count() == 0 {
                    None
                } else {
                    let name = format!("deleted.{:016x}.dvd", next.generation);
                    let bits = s.deleted.read().unwrap_or_else(|e| e.into_inner()).clone();
                    bitmaps.push((s.dir.join(&name), bits, id, changes));
                    Some(name)
                };
                next.segments.push(SegmentEntry {
                    id,
                    points: s.len() as u32,
                    deleted_file,
                });
            }
        }
        // The manifest may hold what ops still in the log's buffer did (a deletion's bitmap,
        // a seal's points, the checkpoint past them): those ops are made durable first, or a
        // power loss would leave the segments ahead of the log (measured in the power-loss
        // lab with durability "interval": the database then refused to open, "replay from
        // op 18 asked for, but the log ends at op 0").
        self.wal.wait_durable(logged)?;
        for (path, bits, _, _) in &bitmaps {
            write_deleted(self.storage.as_ref(), path, bits)?;
        }
        if !bitmaps.is_empty() {
            crate::failpoint("manifest:bitmaps-written");
        }
        next.write(self.storage.as_ref(), &self.dir)?;
        for (_, _, id, changes) in &bitmaps {
            self.remember_written(*id, *changes);
        }
        for old in &current.segments {
            let still = next.segments.iter().find(|e| e.id == old.id);
            if let Some(file) = &old.deleted_file {
                if still.and_then(|e| e.deleted_file.as_ref()) != Some(file) {
                    // Unsynced: a crash that undoes it leaves a file no manifest names.
                    let _ = self
                        .storage
                        .remove_file(&self.segment_dir(old.id).join(file));
                }
            }
        }
        *current = next;
        Ok(())
    }

    fn written_changes(&self, id: u64) -> Option<u64> {
        lock(&self.written).get(&id).copied()
    }

    fn remember_written(&self, id: u64, changes: u64) {
        lock(&self.written).insert(id, changes);
    }

    /// Freezes the active segment if it holds anything, so the worker seals it.
    pub(crate) fn freeze_now(&self) -> bool {
        let _guard = lock(&self.writer);
        let op = self.wal.last_op();
        let froze = self
            .state
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .freeze(op);
        if froze {
            self.wake_background();
        }
        froze
    }
}

impl Collection {
    /// Turns indexing off for a bulk load (Qdrant's `indexing_threshold: 0`) or back on.
    /// While off, writes go into one growing segment that is neither linked into a graph nor
    /// sealed (searches scan it); turning it on freezes that segment for sealing when it is
    /// past the seal threshold, and lets the indexer link the rest. `optimize` seals either
    /// way. Not kept across a restart: a reopened collection indexes.
    pub fn set_indexing(&self, enabled: bool) {
        let inner = &self.inner;
        let _guard = lock(&inner.writer);
        let mut state = inner.state.write().unwrap_or_else(|e| e.into_inner());
        if state.indexing_paused != enabled {
            return;
        }
        state.indexing_paused = !enabled;
        let full = state.growing(state.active).is_some_and(|g| {
            g.read().unwrap_or_else(|e| e.into_inner()).len() >= self.inner.config().seal_threshold
        });
        let froze = enabled && full && state.freeze(inner.wal.last_op());
        drop(state);
        if froze {
            inner.wake_background();
        }
        inner.wake_indexer();
    }

    /// Seals everything written so far into DiskANN segments and merges the sealed ones
    /// into as few as `max_segment_points` allows, without deleted points. With `wait`,
    /// returns once they serve from SSD (or with the background failure that stopped it).
    pub fn optimize(&self, wait: bool) -> Result<()> {
        let inner = &self.inner;
        // Counted before the merge is asked for, so its build already runs at full priority.
        let _waiting = wait.then(|| Waiting::new(&inner.optimize_waiters));
        {
            let mut bg = lock(&inner.background);
            bg.error = None;
            bg.sealing_failed = false;
            // Asked for now: a merge that failed before is tried again at once, not after
            // the retry pause (which would answer this call without merging).
            bg.merge_failed_at = None;
            bg.merge_all = true;
            bg.frozen_first = false;
        }
        inner.freeze_now();
        inner.wake_background();
        if !wait {
            return Ok(());
        }
        let mut bg = lock(&inner.background);
        loop {
            if let Some(e) = &bg.error {
                return Err(DbError::Unavailable(e.clone()));
            }
            if !bg.sealing && !bg.merging && !bg.merge_all && !inner.has_frozen() {
                return Ok(());
            }
            if bg.stop {
                return Err(DbError::Unavailable(format!(
                    "collection {:?} is closing",
                    inner.name
                )));
            }
            bg = inner
                .wake
                .wait_timeout(bg, IDLE)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Counts a caller waiting in `optimize` for as long as it waits (on error paths too).
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
