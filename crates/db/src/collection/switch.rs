//! The end of a rebuild: the new segment takes its sources' place in one step under the
//! state lock. The sealed sources leave DRAM before the new segment is opened, so a merge of
//! a large collection never holds its points' codes, ids and payloads twice (at 1M x 768
//! that was about 300 MB more than a 1 GiB cgroup had). Should the new segment not open,
//! the sources are opened again from their files, which the manifest still lists, with the
//! deleted bitmaps they had in DRAM.

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
    io: Vec<diskvec_io::PathSnapshot>,
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
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
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
        let opened = if origin.is_empty() {
            Ok(None)
        } else {
            crate::injected_failure("switch:open")
                .and_then(|()| self.open_sealed(dir, RoaringBitmap::new(), &state.fields))
                .map(Some)
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
            self.retire_stats(&u.io);
        }
        if let Some(new) = &new {
            carry_over(&mut state, new_id, new, origin);
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
        let id = new.ids[new_offset as usize];
        if state.tracker.get(&id) == Some(from) {
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
