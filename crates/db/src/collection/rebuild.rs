//! Rebuilding sealed segments: a vacuum rebuilds one without its deleted points, a merge
//! rebuilds several small ones as one. The new segment is built from the sources' live
//! points while they keep serving, then switched in with one manifest write; deletes and
//! rewrites that hit the sources meanwhile are carried over at the switch.

use std::sync::Arc;

use super::merge_policy::{self, Pick};
use super::state::{Loc, State};
use super::superseded::GivesWay;
use super::task::Lane;
use super::Inner;
use crate::segment::{Points, SealInput, Segment, SpaceRef, VectorPart};
use crate::vectors::SparseVector;
use crate::Result;

/// What the worker should rebuild next, if anything.
pub(crate) enum Maintenance {
    Vacuum(u64),
    Merge(Vec<u64>),
    /// `optimize`: every sealed segment and every frozen one, in one build (instead of
    /// sealing each frozen segment and then merging the results).
    MergeAll {
        sealed: Vec<u64>,
        frozen: Vec<u64>,
    },
}

impl Maintenance {
    /// "seal", "vacuum" or "merge": what the rebuild is, for progress, counters and failpoints.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Maintenance::Vacuum(_) => "vacuum",
            Maintenance::Merge(_) => "merge",
            Maintenance::MergeAll { sealed, frozen } => rebuild_kind(sealed, frozen),
        }
    }

    /// What `info().error` calls it when it fails.
    pub(crate) fn failure_name(&self) -> &'static str {
        match self {
            Maintenance::Vacuum(_) => "vacuum",
            Maintenance::Merge(_) | Maintenance::MergeAll { .. } => "merge",
        }
    }
}

/// A rebuild of no sealed segment is a seal (of frozen ones); of one sealed segment alone, a
/// vacuum; anything else, a merge.
fn rebuild_kind(sources: &[u64], frozen: &[u64]) -> &'static str {
    match (sources.len(), frozen.is_empty()) {
        (0, _) => "seal",
        (1, true) => "vacuum",
        _ => "merge",
    }
}

/// Each sealed segment's id, points and deleted points.
fn sealed_sizes(state: &State) -> Vec<(u64, usize, usize)> {
    state
        .segments
        .iter()
        .filter_map(|(&id, s)| match s {
            Segment::Sealed(s) => Some((id, s.len(), s.deleted_count())),
            Segment::Growing(_) => None,
        })
        .collect()
}

/// `sealed_sizes` as each sealed segment's id and live points.
fn live_sizes(sealed: Vec<(u64, usize, usize)>) -> Vec<(u64, usize)> {
    sealed
        .into_iter()
        .map(|(id, len, deleted)| (id, len - deleted))
        .collect()
}

/// The live points of each segment, sealed, frozen and growing.
fn live_points(state: &State) -> impl Iterator<Item = usize> + '_ {
    state.segments.values().map(|s| match s {
        Segment::Sealed(s) => s.len() - s.deleted_count(),
        Segment::Growing(g) => g.read().unwrap_or_else(|e| e.into_inner()).live(),
    })
}

/// Most frozen segments sealed in one build (a bigger build makes the queue behind it longer).
const SEAL_TOGETHER: usize = 8;

/// The idle merge leaves alone segments smaller than this in all (a growing segment this
/// small costs a search little).
const IDLE_MERGE_MIN_POINTS: usize = 1_000;

impl Inner {
    /// Whether the merges fell behind the seals: more than `MERGE_ABOVE` sealed segments that
    /// a merge could still take and a merge picked now (`merge_policy::overdue_merge`). Their
    /// merges are then overdue (`background::BuildPriority::OverdueMerge`): each of them costs
    /// every search a walk of its own.
    pub(crate) fn merges_behind(&self) -> bool {
        !self.overdue_merge().is_empty()
    }

    /// The sealed segments an overdue merge would take now (empty when none is due).
    fn overdue_merge(&self) -> Vec<u64> {
        let sealed = live_sizes(sealed_sizes(
            &self.state.read().unwrap_or_else(|e| e.into_inner()),
        ));
        let config = self.config();
        merge_policy::overdue_merge(
            sealed,
            config.max_segment_points,
            config.seal_threshold,
            self.merge_pick(false),
        )
    }

    /// Whether a merge of `running` picked while writes paused (`Pick::Smallest`) should give
    /// way: writes came back and an overdue merge takes a segment it does not. Such a merge of
    /// old segments (1.76M points at 10M) held the one merge lane through a stream of 5,000
    /// points a second while 35 seals piled up behind it (docs/benchmarks.md, session 44); when
    /// the overdue merge is the running one's own segments, it goes on.
    pub(crate) fn writes_want_the_merge_lane(&self, running: &[u64]) -> bool {
        self.written_within(merge_policy::WRITES_PAUSED)
            && self.overdue_merge().iter().any(|id| !running.contains(id))
    }

    /// Whether the segments are worth merging into one once writes pause: more than one holds
    /// points, together they fit one segment, and the smaller ones hold at least a tenth of
    /// the largest (so a small tail never rebuilds a big segment). After a bulk load this
    /// turns the sealed segments and the growing tail into one DiskANN segment, one search
    /// per query instead of several.
    pub(crate) fn merge_when_idle(&self) -> bool {
        if self.config().idle_merge_ms == 0 {
            return false;
        }
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        if state.indexing_paused {
            return false;
        }
        let parts: Vec<usize> = live_points(&state).filter(|&live| live > 0).collect();
        let total: usize = parts.iter().sum();
        let largest = parts.iter().copied().max().unwrap_or(0);
        parts.len() >= 2
            && total <= self.config().max_segment_points
            && total - largest >= (largest / 10).max(IDLE_MERGE_MIN_POINTS)
    }

    /// Whether the live points of every segment (sealed, frozen and growing) fit one
    /// segment: a merge of everything would then cover them all.
    pub(crate) fn everything_fits_one_segment(&self) -> bool {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        live_points(&state).sum::<usize>() <= self.config().max_segment_points
    }

    /// `merge_when_idle`, once no write has come for `idle_merge_ms`.
    pub(crate) fn idle_merge_due(&self) -> bool {
        let quiet = std::time::Duration::from_millis(self.config().idle_merge_ms);
        !self.written_within(quiet) && self.merge_when_idle()
    }

    /// When writes outpaced the seals and several frozen segments wait, the oldest of them
    /// (as many as one segment may hold) sealed in one build: one graph instead of several
    /// to build now and merge later.
    pub(crate) fn frozen_together(&self) -> Option<Maintenance> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        if state.frozen.len() < 2 {
            return None;
        }
        let mut total = 0;
        let mut frozen = Vec::new();
        for &id in state.frozen.iter().take(SEAL_TOGETHER) {
            let live = state
                .growing(id)
                .map_or(0, |g| g.read().unwrap_or_else(|e| e.into_inner()).live());
            if total + live > self.config().max_segment_points && !frozen.is_empty() {
                break;
            }
            total += live;
            frozen.push(id);
        }
        (frozen.len() >= 2).then(|| Maintenance::MergeAll {
            sealed: Vec::new(),
            frozen,
        })
    }

    /// Picks the next rebuild: a segment past the vacuum threshold first, then a merge when
    /// there are too many segments (`merge_policy`: tiered while writes come, the smallest once
    /// they stop, all of them when `merge_all`).
    pub(crate) fn next_maintenance(&self, merge_all: bool) -> Option<Maintenance> {
        self.next_maintenance_by(self.merge_pick(merge_all))
    }

    /// How a merge picks its segments now: all of them with `merge_all`, tiered while writes
    /// come (one within `merge_policy::WRITES_PAUSED`), the smallest once they stop.
    fn merge_pick(&self, merge_all: bool) -> Pick {
        if merge_all {
            Pick::All
        } else if self.written_within(merge_policy::WRITES_PAUSED) {
            Pick::Tiered
        } else {
            Pick::Smallest
        }
    }

    /// Whether a rebuild is due now or once writes stop: a collection whose merges wait for
    /// the writes to stop is not done (its status stays yellow).
    pub(crate) fn maintenance_due(&self) -> bool {
        self.next_maintenance_by(Pick::Smallest).is_some()
    }

    fn next_maintenance_by(&self, pick: Pick) -> Option<Maintenance> {
        let merge_all = pick == Pick::All;
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        if merge_all && !state.frozen.is_empty() {
            let mut total = 0;
            let mut sealed = Vec::new();
            for (&id, s) in &state.segments {
                match s {
                    Segment::Sealed(s) => {
                        total += s.len() - s.deleted_count();
                        sealed.push(id);
                    }
                    Segment::Growing(g) if state.frozen.contains(&id) => {
                        total += g.read().unwrap_or_else(|e| e.into_inner()).live();
                    }
                    Segment::Growing(_) => {}
                }
            }
            if total <= self.config().max_segment_points {
                return Some(Maintenance::MergeAll {
                    sealed,
                    frozen: state.frozen.iter().copied().collect(),
                });
            }
            // Too big for one build: seal the frozen ones first, then merge what fits.
            return None;
        }
        let sealed = sealed_sizes(&state);
        for &(id, len, deleted) in &sealed {
            if len > 0 && deleted as f64 / len as f64 > self.config().vacuum_threshold {
                return Some(Maintenance::Vacuum(id));
            }
        }
        if sealed.len() <= 1 {
            return None;
        }
        let live = live_sizes(sealed);
        let config = self.config();
        let picked =
            merge_policy::to_merge(live, config.max_segment_points, config.seal_threshold, pick);
        (picked.len() >= 2).then_some(Maintenance::Merge(picked))
    }

    /// Rebuilds `sources` (sealed segments) and `frozen` (frozen growing segments: the
    /// oldest of the queue, in order) as one new segment holding their live points. With frozen
    /// segments the checkpoint moves to the last one's freeze point, as a seal would. `lane`:
    /// the worker that runs it (worker.rs).
    pub(crate) fn rebuild(&self, sources: &[u64], frozen: &[u64], lane: Lane) -> Result<()> {
        let started = std::time::Instant::now();
        self.check_home()?;
        let kind = rebuild_kind(sources, frozen);
        // Frozen segments sealed together, and merges in the merge lane, started before
        // anything asked for a merge of everything give way to that merge if it comes; the
        // merge itself does not. A merge picked while writes paused gives way to the merges
        // of the new seals when writes come back.
        let gives_way = GivesWay {
            to_merge_of_everything: (kind == "seal" || lane == Lane::Merge)
                && !super::lock(&self.background).merge_all,
            to_returning_writes: (lane == Lane::Merge
                && kind == "merge"
                && self.merge_pick(false) == Pick::Smallest)
                .then(|| sources.to_vec()),
        };
        let task = self.task.begin(lane, kind, 0);
        self.task.phase(lane, "reading sources", 0);
        let (new_id, segs, growing) = {
            let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
            let growing: Vec<_> = frozen
                .iter()
                .filter_map(|id| state.growing(*id).map(|g| (*id, Arc::clone(g))))
                .collect();
            let segs = sources
                .iter()
                .filter_map(|id| match state.segments.get(id) {
                    Some(Segment::Sealed(s)) => Some(Arc::clone(s)),
                    _ => None,
                })
                .collect::<Vec<_>>();
            let id = state.next_segment_id;
            state.next_segment_id += 1;
            (id, segs, growing)
        };
        // Live points as of now, with where each came from; their dense vectors stay where
        // they are until the build streams them.
        let mut points = SealInput::new(&self.config());
        let mut origin: Vec<Loc> = Vec::new();
        let mut checkpoint = None;
        // The live offsets of one source segment, taken with their ids, versions, payloads,
        // sparse vectors and multivectors; each dense space's part lists those of them with a vector in
        // it (`part(space, offsets)`).
        let mut take = |segment: u64,
                        live: &[u32],
                        source: &dyn Points,
                        versions: &[u64],
                        sparse: &dyn Fn(u32, usize) -> Option<SparseVector>,
                        multi: &dyn Fn(u32, usize) -> Option<Vec<f32>>,
                        part: &dyn Fn(usize, Vec<u32>) -> VectorPart| {
            let first = points.len() as u32;
            for &offset in live {
                let at = offset as usize;
                let (id, payload) = source.point(offset);
                points.push_point(
                    id,
                    versions[at],
                    &payload,
                    |space| sparse(offset, space),
                    |space| multi(offset, space),
                );
                origin.push(Loc {
                    segment,
                    offset,
                    version: versions[at],
                });
            }
            for (space, input) in points.dense.iter_mut().enumerate() {
                let (old, new): (Vec<u32>, Vec<u32>) = live
                    .iter()
                    .enumerate()
                    .filter(|(_, &o)| source.has_vector(o, SpaceRef::Dense(space)))
                    .map(|(row, &o)| (o, first + row as u32))
                    .unzip();
                if !old.is_empty() {
                    input.parts.push(part(space, old));
                    input.offsets.extend(new);
                }
            }
        };
        for (seg_id, g) in &growing {
            let g = g.read().unwrap_or_else(|e| e.into_inner());
            checkpoint = g.frozen_at.or(checkpoint);
            let live: Vec<u32> = (0..g.len() as u32).filter(|&o| g.is_live(o)).collect();
            take(
                *seg_id,
                &live,
                &*g,
                &g.versions,
                &|o, space| g.sparse_vector(space, o).cloned(),
                &|o, space| g.multi_vector(space, o).map(<[f32]>::to_vec),
                &|space, offsets| VectorPart::Frozen {
                    vectors: g.dense(space).shared_vectors(),
                    offsets: Some(offsets),
                },
            );
        }
        for (seg_id, s) in sources.iter().zip(&segs) {
            let deleted = s.deleted.read().unwrap_or_else(|e| e.into_inner()).clone();
            let live: Vec<u32> = (0..s.len() as u32)
                .filter(|o| !deleted.contains(*o))
                .collect();
            // A payload on SSD that could not be read was taken as empty: not into a build.
            s.checked_payloads(|| {
                take(
                    *seg_id,
                    &live,
                    s.as_ref(),
                    &s.versions,
                    &|o, space| s.sparse_vector(space, o).cloned(),
                    &|o, space| s.multi_vector(space, o).map(<[f32]>::to_vec),
                    &|space, offsets| VectorPart::Sealed {
                        segment: Arc::clone(s),
                        space,
                        offsets,
                    },
                )
            })?;
        }
        if !sources.is_empty() && !frozen.is_empty() {
            crate::injected_failure("merge:with-frozen")?;
        }
        let dir = self.segment_dir(new_id);
        let paths = self.segment_paths(new_id);
        for p in &paths {
            self.make_dir(p)?;
        }
        let count = points.len();
        self.task.set_points(lane, count);
        if count > 0 {
            self.build_segment(&points, &dir, &paths, lane, kind, gives_way)?;
        }
        drop(task);
        drop(points);
        // Frozen segments sealed together are a seal, for the crash tests too.
        let step = if kind == "seal" { "seal" } else { "rebuild" };
        crate::failpoint(&format!("{step}:built"));
        drop(segs);
        let switched = self.switch_in(new_id, &dir, sources, frozen, &origin);
        let rebuilt = match switched {
            Ok(new) => new.is_some(),
            Err(e) => {
                // Nothing lists what was built: it goes now rather than at the next open.
                self.remove_dir(&dir);
                for p in &paths {
                    self.remove_dir(p);
                }
                return Err(e);
            }
        };
        drop(origin);
        self.write_manifest(checkpoint)?;
        if let Some(c) = checkpoint {
            self.wal.truncate_below(c + 1)?;
        }
        crate::failpoint(&format!("{step}:switched"));
        // The new segment opened with the share of its nodes the last plan gave; the
        // database's search memory is shared out again over the segments there are now.
        self.search.rebalance();
        self.check_home()?;
        for &id in sources {
            self.remove_dir(&self.segment_dir(id));
            for p in self.segment_paths(id) {
                self.remove_dir(&p);
            }
        }
        if !rebuilt {
            self.remove_dir(&dir);
        }
        if kind == "seal" {
            super::lock(&self.pacer).record_seal(count, started.elapsed().as_secs_f64());
        }
        log::info!(
            "collection {:?}: rebuilt {} segment(s) as {new_id:016x} ({count} points) in {:.1} s",
            self.name,
            sources.len() + frozen.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}
