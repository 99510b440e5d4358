//! The background builds in progress (a seal, and a vacuum or merge beside it), their phase
//! and how far they are, so `info()` can tell a user what a yellow collection is doing and
//! how long is left.

use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

/// A running background build, as `CollectionInfo::task` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct TaskInfo {
    /// "seal", "vacuum" or "merge".
    pub kind: &'static str,
    /// Points going into the new segment.
    pub points: usize,
    /// The build's current phase ("pq training", "graph", "layout", ...), empty before the
    /// first.
    pub phase: String,
    /// Steps of the phase done, and its total (0: unknown).
    pub done: u64,
    pub total: u64,
    pub seconds: f64,
    /// Memory the build was granted (0 before it is planned), what its plan expects to use
    /// at its peak, and its shards (1: the whole build in memory; once built, the shards it
    /// used, fewer than planned when its sources' graphs seeded it).
    pub memory_budget: u64,
    pub estimated_peak: u64,
    pub shards: usize,
    /// Points that kept their lists from the graph of the sealed segment they came from
    /// (a merge in shards builds only the edges between its sources); known once built.
    pub seeded: usize,
    /// Shards whose graph an interrupted build of the same points had finished (kept in
    /// the collection's `build-checkpoint` directory); known once built.
    pub resumed_shards: usize,
}

struct Running {
    kind: &'static str,
    points: usize,
    phase: String,
    done: u64,
    total: u64,
    started: Instant,
    plan: Option<diskvec_index::diskann::BuildPlan>,
    /// What the build used and took up, once built.
    built: Option<Built>,
}

/// What a finished build used and took up (its report's parts `info()` shows).
#[derive(Clone, Copy)]
struct Built {
    shards: usize,
    seeded: usize,
    resumed_shards: usize,
}

/// The two background workers: one seals frozen segments (and runs `optimize`'s merge of
/// everything), the other merges and vacuums sealed segments beside it, so a seal that
/// writers wait for never queues behind a merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    Seal = 0,
    Merge = 1,
}

/// Records the builds' progress, one per lane; a build reports through
/// `diskvec_index::Progress` (`BuildProgress`, which knows its lane).
#[derive(Default)]
pub(crate) struct TaskProgress {
    running: Mutex<[Option<Running>; 2]>,
    /// The last build that ended (finished or failed), as it stood at its end.
    last: Mutex<Option<TaskInfo>>,
}

impl TaskProgress {
    /// Marks a build as running in `lane` until the returned guard drops (on error paths
    /// too).
    pub fn begin(&self, lane: Lane, kind: &'static str, points: usize) -> TaskGuard<'_> {
        self.lock()[lane as usize] = Some(Running {
            kind,
            points,
            phase: String::new(),
            done: 0,
            total: 0,
            started: Instant::now(),
            plan: None,
            built: None,
        });
        TaskGuard(self, lane)
    }

    fn with(&self, lane: Lane, f: impl FnOnce(&mut Running)) {
        if let Some(r) = self.lock()[lane as usize].as_mut() {
            f(r)
        }
    }

    /// The number of points, once known.
    pub fn set_points(&self, lane: Lane, points: usize) {
        self.with(lane, |r| r.points = points)
    }

    /// How the build will run within the memory it was granted.
    pub fn set_plan(&self, lane: Lane, plan: &diskvec_index::diskann::BuildPlan) {
        self.with(lane, |r| r.plan = Some(plan.clone()))
    }

    /// What the finished build used: its shards, the points its sources' graphs seeded
    /// and the shards an interrupted build had finished.
    pub fn set_built(&self, lane: Lane, report: &diskvec_index::diskann::BuildReport) {
        let built = Built {
            shards: report.shards,
            seeded: report.seeded,
            resumed_shards: report.resumed_shards,
        };
        self.with(lane, |r| r.built = Some(built))
    }

    pub fn phase(&self, lane: Lane, name: &str, total: u64) {
        self.with(lane, |r| {
            r.phase = name.to_string();
            r.done = 0;
            r.total = total;
        })
    }

    pub fn advance(&self, lane: Lane, steps: u64) {
        self.with(lane, |r| r.done += steps)
    }

    /// The builds running now, the seal first.
    pub fn running(&self) -> Vec<TaskInfo> {
        self.lock().iter().flatten().map(Running::info).collect()
    }

    /// The last build that ended, as it stood at its end.
    pub fn last(&self) -> Option<TaskInfo> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, [Option<Running>; 2]> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Running {
    fn info(&self) -> TaskInfo {
        TaskInfo {
            kind: self.kind,
            points: self.points,
            phase: self.phase.clone(),
            done: self.done,
            total: self.total,
            seconds: self.started.elapsed().as_secs_f64(),
            memory_budget: self.plan.as_ref().map_or(0, |p| p.budget),
            estimated_peak: self.plan.as_ref().map_or(0, |p| p.estimated_peak),
            shards: match self.built {
                Some(b) => b.shards,
                None => self.plan.as_ref().map_or(0, |p| p.shards),
            },
            seeded: self.built.map_or(0, |b| b.seeded),
            resumed_shards: self.built.map_or(0, |b| b.resumed_shards),
        }
    }
}

pub(crate) struct TaskGuard<'a>(&'a TaskProgress, Lane);

impl Drop for TaskGuard<'_> {
    fn drop(&mut self) {
        let ended = self.0.lock()[self.1 as usize].take().map(|r| r.info());
        if ended.is_some() {
            *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = ended;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lane_reports_its_phase_and_ends_with_its_guard() {
        let p = TaskProgress::default();
        assert!(p.running().is_empty());
        {
            let _merge = p.begin(Lane::Merge, "merge", 0);
            p.phase(Lane::Merge, "graph", 10);
            p.advance(Lane::Merge, 3);
            p.advance(Lane::Merge, 4);
            p.set_points(Lane::Merge, 500);
            {
                let _seal = p.begin(Lane::Seal, "seal", 80);
                p.phase(Lane::Seal, "pq training", 1);
                let both = p.running();
                assert_eq!(both.len(), 2);
                assert_eq!((both[0].kind, both[0].points), ("seal", 80));
                assert_eq!((both[0].phase.as_str(), both[0].total), ("pq training", 1));
            }
            assert_eq!(p.last().unwrap().kind, "seal");
            let t = &p.running()[0];
            assert_eq!(
                (t.kind, t.points, t.phase.as_str()),
                ("merge", 500, "graph")
            );
            assert_eq!((t.done, t.total), (7, 10));
            p.phase(Lane::Merge, "layout write", 2);
            assert_eq!(p.running()[0].done, 0);
        }
        assert!(p.running().is_empty(), "the guards end the tasks");
        let last = p.last().unwrap();
        assert_eq!((last.kind, last.points, last.done), ("merge", 500, 0));
        // Reports outside a task are ignored.
        p.advance(Lane::Seal, 5);
        assert!(p.running().is_empty());
    }
}
