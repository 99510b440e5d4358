//! The end of a rebuild: the new segment takes its sources' place in one step under the
//! state lock. Where the memory available holds the new segment beside its sources (twice
//! what its files say it takes in DRAM), it is opened before that step, so searches and
//! writes wait only for the swap (a 1M x 768 segment took about a second to open, under the
//! lock). Otherwise the sealed sources leave DRAM first and the new segment opens under the
//! lock, so a merge of a large collection never holds its points' codes, ids and payloads
//! twice (at 1M x 768 that was about 300 MB more than a 1 GiB cgroup had). Should the new
//! segment not open there, the sources are opened again from their files, which the
//! manifest still lists, with the deleted bitmaps they had in DRAM.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::state::{Loc, State};
use super::Inner;
use crate::segment::{Sealed, Segment};
use crate::Result;

/// What a sealed source had in DRAM that its files do not: the deletes since the manifest
/// last recorded its bitmap.
struct Unloaded {
    id: u64,
    deleted: RoaringBitmap,
    changes: u64,
    /// Its read counters, added to the retired ones once the switch holds (a source opened
    /// again starts from zero and keeps counting its own).
    io: Vec<Vec<diskvec_io::PathSnapshot>>,
}

impl Inner {
    /// Switches the segment built in `dir` (with id `new_id`) in for `sources` (sealed) and
    /// `frozen` (growing). `origin[i]` is where the new segment's point `i` came from; a
    /// point deleted or rewritten there during the build is deleted in the new segment.
    /// Returns the new segment, `None` when it holds no point (`origin` empty, nothing built).
    pub(super) fn switch_in(
        &self,
        new_id: u64,
        dir: &Path,
        sources: &[u64],
        frozen: &[u64],
        origin: &[Loc],
    ) -> Result<Option<Arc<Sealed>>> {
        // Opened beside the sources, when there is room: with the payload fields of the
        // moment, which the switch checks again under the lock.
        let beside = match origin.is_empty() || !self.room_beside(dir, new_id) {
            true => None,
            false => {
                let fields = self.payload_fields();
                // A failure here leaves the sources as they are.
                Some((self.open_new(dir, &fields, self.node_cache())?, fields))
            }
        };
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let beside = beside.filter(|(_, fields)| *fields == state.fields);
        let mut unloaded = Vec::new();
        for &id in sources {
            let s = match state.segments.get(&id) {
                Some(Segment::Sealed(s)) => Arc::clone(s),
                _ => continue,
            };
            state.segments.remove(&id);
            unloaded.push(Unloaded {
                id,
                deleted: s.deleted.read().unwrap_or_else(|e| e.into_inner()).clone(),
                changes: s.deleted_changes.load(Ordering::Acquire),
                io: s.path_stats(),
            });
            // The last reference, unless a search still holds it: its DRAM goes now.
            drop(s);
        }
        // The sources' codes and ids were allocated when glibc's threshold for giving a
        // block its own mapping had risen (it follows the largest block freed, up to 32 MB),
        // so they went to its arenas, which keep freed pages: without this the new segment's
        // 192 MB of codes came on top of them (measured: RSS 844 to 1,030 MiB at 1M x 768,
        // OOM-killed in a 1 GiB cgroup).
        diskvec_vector::release_freed_memory();
        let opened = match beside {
            Some((new, _)) => Ok(Some(new)),
            None if origin.is_empty() => Ok(None),
            // Under the state lock no node cache is read in (searches and writes wait for
            // this open): the rebalance after the switch fills it.
            None => self
                .open_new(dir, &state.fields, self.node_cache().without_nodes())
                .map(Some),
        };
        let new = match opened {
            Ok(new) => new.map(Arc::new),
            Err(e) => {
                if let Err(again) = self.reload(&mut state, unloaded) {
                    log::error!(
                        "collection {:?}: a rebuilt segment did not open ({e}), nor did its \
                         sources again ({again}); open the database again to recover",
                        self.name
                    );
                }
                return Err(e);
            }
        };
        for u in &unloaded {
            for stats in &u.io {
                self.retire_stats(stats);
            }
        }
        if let Some(new) = &new {
            carry_over(&mut state, new_id, new, origin);
            // Opened beside the sources before the lock: the spaces may have changed since.
            new.follow_spaces(&state.config);
            state
                .segments
                .insert(new_id, Segment::Sealed(Arc::clone(new)));
        }
        for id in frozen {
            state.segments.remove(id);
        }
        state.frozen.retain(|id| !frozen.contains(id));
        Ok(new)
    }

    /// Opens the segment built in `dir`, with no point deleted yet.
    fn open_new(
        &self,
        dir: &Path,
        fields: &[(String, crate::filter::PayloadIndexKind)],
        cache: crate::segment::NodeCacheSize,
    ) -> Result<Sealed> {
        crate::injected_failure("switch:open")?;
        crate::delay_point("switch:open");
        self.open_sealed_with(dir, RoaringBitmap::new(), fields, cache)
    }

    /// Whether the memory available holds the segment built in `dir` (segment `new_id`)
    /// twice over, by what its files say it takes in DRAM: meta.dvm and the points file
    /// (their payloads parsed, about twice their bytes), the navigation file when searches
    /// walk in DRAM, and the share of the nodes the search memory gives it.
    fn room_beside(&self, dir: &Path, new_id: u64) -> bool {
        if crate::injected_failure("switch:no-room").is_err() {
            return false;
        }
        let mut need = 0u64;
        let dram = self.search_dram();
        let dirs = std::iter::once(dir.to_path_buf()).chain(self.segment_paths(new_id));
        for d in dirs {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let bytes = entry.metadata().map_or(0, |m| m.len());
                let name = entry.file_name();
                let name = name.to_string_lossy();
                need += if name.ends_with(".dvn") {
                    match self.node_cache() {
                        crate::segment::NodeCacheSize::All => bytes,
                        crate::segment::NodeCacheSize::Share(s) => (bytes as f64 * s) as u64,
                    }
                } else if name.ends_with(".dvr") && !dram.navigation {
                    0
                } else if name.ends_with(".dvq") {
                    // Compact codes are counted below, as what they spare of meta.dvm.
                    0
                } else if name == crate::segment::POINTS_FILE {
                    2 * bytes
                } else {
                    bytes
                };
            }
        }
        if dram.compact_codes {
            need = need.saturating_sub(diskvec_index::diskann::compact_saving(dir));
        }
        2 * need <= diskvec_index::diskann::available_memory()
    }

    /// Opens the sealed sources again from their files after the new segment failed to open,
    /// with the deletes they had; every one it can (the first failure is returned).
    fn reload(&self, state: &mut State, unloaded: Vec<Unloaded>) -> Result<()> {
        let mut first_error = None;
        for u in unloaded {
            match self.open_sealed(&self.segment_dir(u.id), u.deleted, &state.fields) {
                Ok(sealed) => {
                    sealed.deleted_changes.store(u.changes, Ordering::Release);
                    state
                        .segments
                        .insert(u.id, Segment::Sealed(Arc::new(sealed)));
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Points the tracker at the new segment for every point whose current version is the one
/// the build took; the others were deleted or rewritten meanwhile and are deleted here.
fn carry_over(state: &mut State, new_id: u64, new: &Sealed, origin: &[Loc]) {
    for (new_offset, from) in origin.iter().enumerate() {
        let new_offset = new_offset as u32;
        let id = new.id(new_offset);
        if state.tracker.get(&id) == Some(*from) {
            state.tracker.insert(
                id,
                Loc {
                    segment: new_id,
                    offset: new_offset,
                    version: from.version,
                },
            );
        } else {
            new.delete(new_offset);
        }
    }
}
